package sim

import (
	"cmp"
	"encoding/json"
	"io"
	"slices"
	"sync"
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
	Family       string  `json:"family"`
	Case         string  `json:"case"`
	Reuse        string  `json:"reuse"`
	Policy       string  `json:"policy"`
	ID           uint64  `json:"id"`
	Conversation string  `json:"conversation,omitempty"`
	Group        int     `json:"group"`
	Rank         int     `json:"rank"`
	ArrivalMs    float64 `json:"arrival_ms"`
	TTFTMs       float64 `json:"ttft_ms"`
	Prompt       int     `json:"prompt_tokens"`
	Cached       int     `json:"cached_tokens"`
}

// WriteEvalRequests writes r's requests to w as JSON Lines, one object per
// request: family, case, reuse, policy, id, conversation (omitted when
// none), group (the prompt family, Session.Group: -1 where the workload
// names none),
// rank, arrival_ms (from the workload's start), ttft_ms, prompt_tokens and
// cached_tokens (the prefix found cached when its prefill started).
func WriteEvalRequests(w io.Writer, r EvalRequests) error {
	enc := json.NewEncoder(w)
	for _, e := range r.Events {
		if err := enc.Encode(requestLine{Family: r.Family, Case: r.Case, Reuse: r.Reuse, Policy: r.Policy,
			ID: e.ID, Conversation: e.ConvID, Group: e.Group, Rank: e.Rank,
			ArrivalMs: float64(e.Arrival) / 1e6, TTFTMs: float64(e.FirstToken-e.Arrival) / 1e6,
			Prompt: e.Prompt, Cached: e.Cached}); err != nil {
			return err
		}
	}
	return nil
}
