package sim

import (
	"cmp"
	"encoding/json"
	"io"
	"slices"
	"sync"

	"github.com/adprouter/adprouter/router"
)

// requestStream passes RunEval's simulations to EvalOptions.Requests in job
// order while the jobs finish in any order: a finished job's requests wait
// in its slot until every job before it is done.
type requestStream struct {
	o        *EvalOptions
	perCase  int
	nv       int
	modes    []string
	variants []Variant
	mu       sync.Mutex
	next     int              // the first job not passed on yet
	finished []bool           // per job
	held     [][]RequestEvent // per job, until passed on
	failed   bool             // Requests returned an error
}

// newRequestStream returns the stream for jobs jobs of RunEval, or nil when
// o.Requests is nil.
func newRequestStream(o EvalOptions, jobs, perCase, nv int, modes []string, variants []Variant) *requestStream {
	if o.Requests == nil {
		return nil
	}
	return &requestStream{o: &o, perCase: perCase, nv: nv, modes: modes, variants: variants,
		finished: make([]bool, jobs), held: make([][]RequestEvent, jobs)}
}

// done records job j's requests (nil for a job that simulates nothing, not
// nil for a simulation, even one without requests) and passes on every job
// now in order. It returns the error Requests returned to the call that
// passed it on (once: the evaluation reports it once); after that nothing
// more is passed on. A simulation that fails never calls it, and the jobs
// after it are then held until the evaluation returns that failure.
func (s *requestStream) done(j int, evs []RequestEvent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed {
		return nil
	}
	s.finished[j], s.held[j] = true, evs
	for ; s.next < len(s.finished) && s.finished[s.next]; s.next++ {
		n := s.next
		c, k := n/s.perCase, n%s.perCase
		if k == s.perCase-1 {
			continue // the case's floor
		}
		evs := s.held[n]
		s.held[n] = nil
		if evs == nil {
			continue // its case failed; the evaluation reports that
		}
		slices.SortFunc(evs, func(a, b RequestEvent) int {
			return cmp.Or(cmp.Compare(a.Arrival, b.Arrival), cmp.Compare(a.ID, b.ID))
		})
		cs := s.o.Cases[c]
		if err := s.o.Requests(EvalRequests{Family: cs.Family, Case: cs.Name, Reuse: s.modes[k/s.nv],
			Policy: s.variants[k%s.nv].Name, Events: evs}); err != nil {
			s.failed = true
			return err
		}
	}
	return nil
}

// requestLine is one request of an evaluation as WriteEvalRequests writes
// it.
type requestLine struct {
	Family       string       `json:"family"`
	Case         string       `json:"case"`
	Reuse        string       `json:"reuse"`
	Policy       string       `json:"policy"`
	ID           uint64       `json:"id"`
	Conversation string       `json:"conversation,omitempty"`
	Group        int          `json:"group"`
	Rank         int          `json:"rank"`
	ArrivalMs    float64      `json:"arrival_ms"`
	TTFTMs       float64      `json:"ttft_ms"`
	Prompt       int          `json:"prompt_tokens"`
	Cached       int          `json:"cached_tokens"`
	Receipt      *receiptLine `json:"receipt,omitempty"`
}

// receiptLine is a request's Decision as WriteEvalRequests writes it.
type receiptLine struct {
	DecidedMs     float64         `json:"decided_ms"`
	Batch         int             `json:"batch"`
	Offers        int             `json:"offers"`
	Reason        string          `json:"reason"`
	Step          int             `json:"step"`
	Expected      int             `json:"expected"`
	Eligible      int             `json:"eligible"`
	ReplicaWanted bool            `json:"replica_wanted,omitempty"`
	Fallback      bool            `json:"capacity_fallback,omitempty"`
	Tied          int             `json:"tied,omitempty"`
	Gate          *gateLine       `json:"gate,omitempty"`
	Candidates    []candidateLine `json:"candidates,omitempty"`
}

// gateLine is a scored placement's cache-affinity gate (router.Gate).
type gateLine struct {
	MaxMatch  int     `json:"max_match"`
	Rate      float64 `json:"rate"`
	Threshold float64 `json:"threshold"`
	On        bool    `json:"on"`
}

// candidateLine is one rank of a receipt (router.Candidate).
type candidateLine struct {
	Rank     int     `json:"rank"`
	Requests int     `json:"requests"`
	Tokens   float64 `json:"tokens"`
	Match    int     `json:"match"`
	LoadTerm float64 `json:"load_term"`
	Score    float64 `json:"score"`
	Excluded string  `json:"excluded"`
}

// newReceiptLine returns d's line, or nil for no decision.
func newReceiptLine(d *Decision) *receiptLine {
	if d == nil {
		return nil
	}
	rc := &d.Receipt
	l := &receiptLine{DecidedMs: float64(d.At) / 1e6, Batch: d.Batch, Offers: d.Offers, Reason: rc.Reason.String(),
		Step: rc.Step, Expected: rc.Expected, Eligible: rc.Eligible, ReplicaWanted: rc.ReplicaWanted,
		Fallback: rc.CapacityFallback}
	if rc.Tied > 1 {
		l.Tied = rc.Tied
	}
	if rc.Reason == router.ReasonScored {
		g := rc.Gate
		l.Gate = &gateLine{MaxMatch: g.MaxMatch, Rate: g.Rate, Threshold: g.Threshold, On: g.On}
	}
	for _, c := range rc.Candidates {
		l.Candidates = append(l.Candidates, candidateLine{Rank: c.Rank, Requests: c.Requests, Tokens: c.Tokens,
			Match: c.Match, LoadTerm: c.LoadTerm, Score: c.Score, Excluded: c.Excluded.String()})
	}
	return l
}

// WriteEvalRequests writes r's requests to w as JSON Lines, one object per
// request: family, case, reuse, policy, id, conversation (omitted when
// none), group (the prompt family, Session.Group: -1 where the workload
// names none),
// rank, arrival_ms (from the workload's start), ttft_ms, prompt_tokens,
// cached_tokens (the prefix found cached when its prefill started) and, for
// a request with a Decision (EvalOptions.Explain), receipt: decided_ms (the
// routing call's time), batch (the requests it was offered), offers (the
// calls that offered this one), and the router's receipt for it: reason,
// step, expected, eligible, replica_wanted and capacity_fallback (omitted
// when false), tied (omitted unless more than one rank tied), gate (a
// scored placement's cache-affinity gate: max_match, rate, threshold, on)
// and candidates, one per rank in rank order where the reason has them
// (rank, requests, tokens, match, load_term, score, excluded;
// router.Candidate).
func WriteEvalRequests(w io.Writer, r EvalRequests) error {
	enc := json.NewEncoder(w)
	for _, e := range r.Events {
		if err := enc.Encode(requestLine{Family: r.Family, Case: r.Case, Reuse: r.Reuse, Policy: r.Policy,
			ID: e.ID, Conversation: e.ConvID, Group: e.Group, Rank: e.Rank,
			ArrivalMs: float64(e.Arrival) / 1e6, TTFTMs: float64(e.FirstToken-e.Arrival) / 1e6,
			Prompt: e.Prompt, Cached: e.Cached, Receipt: newReceiptLine(e.Decision)}); err != nil {
			return err
		}
	}
	return nil
}
