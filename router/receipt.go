package router

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Receipts: with Config.Explain set, every decision records per request why
// it went where it did. The policies call the small methods of receiptLog
// below at the point of each placement (one nil check when Explain is off, so
// decisions cost the same as without it); everything about recording lives in
// this file. Recording reads the decision's state and never changes it, so
// decisions with and without Explain are identical.

// A Reason says why a request was placed where it was (or not placed).
type Reason uint8

// The reasons. Their numbers are the ADPR_REASON_* values of
// include/adprouter.h.
const (
	// ReasonUnplaced: every rank was at its cap; the request is in
	// Result.Unassigned.
	ReasonUnplaced Reason = iota
	// ReasonExplicit: the request's target rank, which had room under the
	// hard cap.
	ReasonExplicit
	// ReasonColdStartWarmup: the KV-aware policy's cold-start warmup sent it
	// to the smallest rank not warmed yet.
	ReasonColdStartWarmup
	// ReasonDemandWarmup: demand warmup replicated its hot prompt family on
	// a rank lacking it.
	ReasonDemandWarmup
	// ReasonScored: the KV-aware policy's lowest score (see Candidates, and
	// Tied for a tie broken by the seeded shuffle); under Config.Score =
	// ScoreTTFT too, in a decision where some rank shows tokens waiting for
	// KV memory (a rank that does is then marked ExcludedNoRoom while
	// another has room, for a request with no prefix to keep; see
	// referenceRank).
	ReasonScored
	// ReasonLeastLoaded: the default policy's open rank with the fewest
	// tokens, then the fewest requests, then the lowest index.
	ReasonLeastLoaded
	// ReasonConversationBound: the rank its conversation is bound to.
	ReasonConversationBound
	// ReasonNewConversation: the conversation policy's placement of a new
	// conversation (or of a request without one, or whose home was full);
	// under Config.Score = ScoreTTFT, a request of a conversation not yet
	// bound, placed by the new-conversation rule (among the ranks where it
	// waits no longer than its whole prompt would take on an idle rank, one
	// where it ends sooner, then the fewest requests, not the lowest
	// prediction: freshOrder, docs/ROUTING.md), with Candidates as for
	// ReasonPredictedTTFT.
	ReasonNewConversation
	// ReasonPredictedTTFT: the KV-aware policy under Config.Score =
	// ScoreTTFT: the lowest predicted time to first token (see Candidates:
	// Match is the prefix the rank would reuse, LoadTerm the prefill queued
	// there, Score the predicted cost: the lock-step wait for that prefill
	// and the request's uncached tokens, plus what it would compute beyond
	// the least and half of what it would lengthen the next iteration; see
	// ttftCost).
	ReasonPredictedTTFT
	// ReasonHeld: under Config.Score = ScoreTTFT, in a decision whose
	// requests take every request slot left, every rank holding at least
	// half of the prompt was at the hard cap and the rank the prediction
	// chose would have computed most of it: the request is in
	// Result.Unassigned, to be offered again (Candidates as for
	// ReasonPredictedTTFT; docs/ROUTING.md, "Past the request slots").
	ReasonHeld
	// ReasonHeldInFlight: under Config.Score = ScoreTTFT and
	// Config.EngineReuse = ReuseAfterIteration, the rank the prediction
	// chose was computing more than half of the prompt for another
	// request, to be ready by the next iteration, and would have computed
	// it again beside it: the request is in Result.Unassigned, to be
	// offered again (Candidates as for ReasonPredictedTTFT;
	// docs/ROUTING.md, "Predicted-TTFT score": waiting for a prompt in
	// flight).
	ReasonHeldInFlight
)

var reasonNames = [...]string{
	ReasonUnplaced:          "unplaced",
	ReasonExplicit:          "explicit target",
	ReasonColdStartWarmup:   "cold-start warmup",
	ReasonDemandWarmup:      "demand warmup",
	ReasonScored:            "scored",
	ReasonLeastLoaded:       "least loaded",
	ReasonConversationBound: "conversation bound",
	ReasonNewConversation:   "new conversation placement",
	ReasonPredictedTTFT:     "lowest predicted TTFT",
	ReasonHeld:              "held for a rank holding its prompt",
	ReasonHeldInFlight:      "held for its prompt in flight",
}

func (r Reason) String() string { return enumName(reasonNames[:], uint8(r), "Reason") }

// enumName is names[v], or kind(v) for a value without a name.
func enumName(names []string, v uint8, kind string) string {
	if int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", kind, v)
}

// An Exclusion says why a candidate rank could not take the request.
type Exclusion uint8

// The exclusions. Their numbers are the ADPR_EXCLUDED_* values of
// include/adprouter.h.
const (
	// Eligible: the rank competed for the request.
	Eligible Exclusion = iota
	// ExcludedAtCap: the rank held its soft cap (Receipt.Expected) of
	// requests.
	ExcludedAtCap
	// ExcludedNoRoom: capacity awareness: the rank's KV room could not hold
	// the request's uncached tokens while another rank's could (or, when
	// none could, it had less headroom than the best).
	ExcludedNoRoom
	// ExcludedStackedTails: under Config.Score = ScoreTTFT, the requests of
	// the request's prompt placed on the rank earlier in the decision
	// already computed more than a block of their last tokens there (their
	// tails) while it sets the lock step, and another rank's predicted wait
	// was no longer (see the score's doc comment, "Stacked tails").
	ExcludedStackedTails
)

var exclusionNames = [...]string{
	Eligible:             "eligible",
	ExcludedAtCap:        "at cap",
	ExcludedNoRoom:       "no KV room",
	ExcludedStackedTails: "stacked tails",
}

func (e Exclusion) String() string { return enumName(exclusionNames[:], uint8(e), "Exclusion") }

// A Candidate is one rank as a scored or least-loaded placement saw it, just
// before the placement.
type Candidate struct {
	Rank int
	// Requests and Tokens are the rank's active requests and token load at
	// that moment (this batch's earlier placements included).
	Requests int
	Tokens   float64
	// Match is how many prompt tokens the rank caches, from
	// Receipt.MatchSource; the score subtracts it only when Receipt.Gate.On.
	Match int
	// LoadTerm is β · Tokens / (eligible ranks' tokens, at least n) · n, and
	// Score is (n − Match if the gate is on) + LoadTerm: the KV-aware
	// policy's cost, evaluated exactly as the decision did. The default
	// policy ranks by Tokens: there LoadTerm is 0 and Score is Tokens.
	LoadTerm float64
	Score    float64
	// Excluded is why the rank did not compete, or Eligible.
	Excluded Exclusion
}

// Gate is the KV-aware policy's cache-affinity gate for one request: the
// match term counts only when MaxMatch / n > Threshold.
type Gate struct {
	MaxMatch  int     // the longest match among the eligible ranks
	Rate      float64 // MaxMatch / n
	Threshold float64 // Config.MatchRateThreshold
	On        bool
}

// A Receipt explains the placement of one request.
type Receipt struct {
	ID     uint64
	Rank   int // or Unplaced
	Reason Reason
	Len    int // the prompt length n
	// Step is when the decision placed the request: 0 for the first
	// placement, -1 when unplaced. Policies place explicit targets and
	// warmup first and then sort the rest (the KV-aware policy groups by
	// prompt prefix, longest first), so Candidates show the loads left by
	// the requests with smaller steps.
	Step int
	// Expected is the decision's soft cap per rank (Result.Expected), and
	// Eligible how many ranks were under it when this request was placed
	// (scored, least-loaded and demand-warmup placements; 0 otherwise).
	Expected int
	Eligible int
	// MatchSource is where the KV-aware policy's match lengths came from.
	MatchSource PrefixSource
	// Gate and Candidates (one per rank, in rank order) are set for
	// ReasonScored; Candidates also for ReasonLeastLoaded and
	// ReasonPredictedTTFT.
	Gate       Gate
	Candidates []Candidate
	// Tied is how many eligible ranks shared the lowest (score, tokens);
	// when more than one, Shuffle is random.Random(ID).shuffle(eligible
	// ranks), and Rank is the first tied rank in it.
	Tied    int
	Shuffle []int
	// CapacityFallback: capacity awareness found no rank with room for the
	// request's uncached tokens, so only the ranks with the most headroom
	// competed.
	CapacityFallback bool
	// ReplicaWanted (ReasonPredictedTTFT): the request's prompt family
	// needs another rank to hold it (needsReplica, outgrown), or its prefix
	// is still being computed (see prefixInFlight), so a rank whose queue
	// with the request ends within the busiest rank's share of the next
	// iteration (its queued prefill, at most TTFTDrainTokens) was not
	// charged for computing the prefix again (its Score is its wait
	// alone). The C receipt's replica_wanted.
	ReplicaWanted bool
}

// Receipts returns the receipts of the last successful Route or RouteInto
// call, one per request in request order, or nil when Config.Explain is off.
// The slice and everything it points to belong to the Router and are valid
// until its next Route call; copy what must outlive that.
func (r *Router) Receipts() []Receipt {
	if r.rc == nil {
		return nil
	}
	return r.rc.out
}

// receiptLog records one decision's receipts, reusing its memory.
type receiptLog struct {
	out      []Receipt
	cands    []Candidate
	shuffles []int
	spans    []receiptSpan
	step     int // the next placement's Step
}

// receiptSpan locates a receipt's candidates and shuffle in the shared
// arrays until the decision ends (the arrays may move while they grow).
type receiptSpan struct{ cand, ncand, shuf, nshuf int }

// begin starts a decision over the n requests of b.
func (l *receiptLog) begin(b *batch, source PrefixSource) {
	n := len(b.reqs)
	l.out = slices.Grow(l.out[:0], n)[:n]
	l.spans = slices.Grow(l.spans[:0], n)[:n]
	l.cands, l.shuffles, l.step = l.cands[:0], l.shuffles[:0], 0
	for i := range l.out {
		l.out[i] = Receipt{ID: b.reqs[i].ID, Rank: Unplaced, Len: b.reqs[i].Len(), Step: -1, MatchSource: source}
		l.spans[i] = receiptSpan{}
	}
}

// end fills in what only the end of the decision knows.
func (l *receiptLog) end(b *batch) {
	for i := range l.out {
		rc, s := &l.out[i], l.spans[i]
		rc.Rank = b.res.Ranks[i]
		rc.Expected = b.res.Expected
		rc.Candidates = nil
		if s.ncand > 0 {
			rc.Candidates = l.cands[s.cand : s.cand+s.ncand : s.cand+s.ncand]
		}
		rc.Shuffle = nil
		if s.nshuf > 0 {
			rc.Shuffle = l.shuffles[s.shuf : s.shuf+s.nshuf : s.shuf+s.nshuf]
		}
	}
}

// placed records that request i was placed for why, with eligible ranks
// under the soft cap (0 where the reason does not look at it).
//
// The recording methods are kept out of line: inlined into a policy's loop
// they would cost it registers and time even when Explain is off.
//
//go:noinline
func (l *receiptLog) placed(i int, why Reason, eligible int) {
	l.out[i].Reason = why
	l.out[i].Eligible = eligible
	l.out[i].Step = l.next()
}

// held records that request i, whose prediction ttft has recorded, was
// left unplaced for why (ReasonHeld or ReasonHeldInFlight): it takes back
// the placement's Step.
func (l *receiptLog) held(i int, why Reason) {
	l.out[i].Reason = why
	l.out[i].Step = -1
	l.step--
}

// next returns the Step of the placement being recorded.
func (l *receiptLog) next() int {
	l.step++
	return l.step - 1
}

// scored records a KV-aware scored placement of request i, once the policy
// has found the lowest score and before it breaks a tie or places: every
// rank's match, load and score as the decision computed them (row: match
// lengths; held: the match the KV room was judged with, nil for row;
// tokens: loads; denom: the load normaliser; ties: ranks sharing the
// lowest (score, tokens)). The soft cap is b.res.Expected.
//
//go:noinline
func (l *receiptLog) scored(r *Router, b *batch, i int, eligible []int, allow []bool,
	row, held []int, tokens []float64, denom float64, gate bool, maxMatch, ties int) {
	expected := b.res.Expected
	n := b.reqs[i].Len()
	nf, beta := float64(n), r.cfg.LoadBalanceWeight
	rc := &l.out[i]
	rc.Reason, rc.Eligible, rc.Tied, rc.Step = ReasonScored, len(eligible), ties, l.next()
	rc.Gate = Gate{
		MaxMatch:  maxMatch,
		Rate:      float64(maxMatch) / float64(max(n, 1)),
		Threshold: r.cfg.MatchRateThreshold,
		On:        gate,
	}
	if held == nil {
		held = row
	}
	rc.CapacityFallback = r.room.fallback(eligible, allow, &b.reqs[i], held)
	s := &l.spans[i]
	s.cand, s.ncand = len(l.cands), len(row)
	for k := range row {
		c := Candidate{Rank: k, Requests: r.count[k], Tokens: tokens[k], Match: row[k]}
		switch {
		case r.count[k] >= expected:
			c.Excluded = ExcludedAtCap
		case !allowed(allow, k):
			c.Excluded = ExcludedNoRoom
		}
		c.Score = score(n, row[k], gate, nf, denom, beta, tokens[k])
		c.LoadTerm = float64(beta * float64(tokens[k]/denom*nf)) // as score computes it
		l.cands = append(l.cands, c)
	}
}

// shuffle records the order random.Random(id).shuffle gave request i's
// eligible ranks to break its tie.
//
//go:noinline
func (l *receiptLog) shuffle(i int, shuffled []int) {
	s := &l.spans[i]
	s.shuf, s.nshuf = len(l.shuffles), len(shuffled)
	l.shuffles = append(l.shuffles, shuffled...)
}

// leastLoaded records a default-policy placement of request i, before it is
// made: every rank's load and why it could not compete.
//
//go:noinline
func (l *receiptLog) leastLoaded(r *Router, i, expected int, allow []bool, tokens []int64) {
	rc := &l.out[i]
	rc.Reason, rc.Step = ReasonLeastLoaded, l.next()
	s := &l.spans[i]
	s.cand, s.ncand = len(l.cands), len(tokens)
	for k, t := range tokens {
		c := Candidate{Rank: k, Requests: r.count[k], Tokens: float64(t), Score: float64(t)}
		switch {
		case r.count[k] >= expected:
			c.Excluded = ExcludedAtCap
		case !allowed(allow, k):
			c.Excluded = ExcludedNoRoom
		default:
			rc.Eligible++
		}
		l.cands = append(l.cands, c)
	}
}

// ttft records a placement of request i by the predicted-TTFT score
// (Config.Score = ScoreTTFT), before it is made: per rank, the prefix it
// would reuse (Match), the uncached prefill the router believes queued there
// (LoadTerm) and the predicted cost (Score, as ttftCost.at gives it).
// eligible includes the home ranks past the soft cap; cands is eligible less
// the ranks stackedTails took out, over which the prediction is made; held
// is the match the KV room was judged with (heldRow).
//
//go:noinline
func (l *receiptLog) ttft(r *Router, b *batch, i int, eligible, cands []int, allow []bool,
	row, ready, held []int, tokens []float64, onSchedule bool) {
	n := b.reqs[i].Len()
	rc := &l.out[i]
	rc.Reason, rc.Eligible, rc.Step = ReasonPredictedTTFT, len(cands), l.next()
	if q := &b.reqs[i]; q.ConversationID != "" && !r.bound(q) {
		rc.Reason = ReasonNewConversation // ttftRank's fresh conversation
	}
	rc.CapacityFallback = r.room.fallback(eligible, allow, &b.reqs[i], held)
	s := &l.spans[i]
	s.cand, s.ncand = len(l.cands), len(row)
	predict := r.ttftCoster(b, i, cands, allow, row, ready, onSchedule)
	rc.ReplicaWanted = predict.replicate
	for k := range row {
		cost, _, unc := predict.at(k)
		c := Candidate{Rank: k, Requests: r.count[k], Tokens: tokens[k], Match: n - int(unc),
			LoadTerm: float64(r.ttft.queued[k]), Score: float64(cost)}
		switch {
		case !slices.Contains(eligible, k):
			c.Excluded = ExcludedAtCap
		case !slices.Contains(cands, k):
			c.Excluded = ExcludedStackedTails
		case !allowed(allow, k):
			c.Excluded = ExcludedNoRoom
		}
		l.cands = append(l.cands, c)
	}
}

// fallback reports whether capacity awareness found none of the candidate
// ranks with room for request q (match[rank] of its prompt cached; nil:
// none), so that only those with the most headroom were allowed; never
// where nothing was filtered (allow nil: the room unheeded).
func (k *kvRoom) fallback(cands []int, allow []bool, q *Request, match []int) bool {
	if !k.on || allow == nil {
		return false
	}
	for _, r := range cands {
		if allowed(allow, r) && (k.room[r] == math.MaxInt64 || k.room[r] >= int64(roomNeed(q, match, r))) {
			return false
		}
	}
	return len(cands) > 0
}

// String explains the receipt in a few lines: the decision, then for a
// scored or least-loaded placement one line per rank, then a tie.
func (rc *Receipt) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "request %d (%d tokens) -> ", rc.ID, rc.Len)
	switch {
	case rc.Reason == ReasonHeld:
		sb.WriteString("unplaced: every request slot taken and every rank holding its prompt at its cap")
	case rc.Reason == ReasonHeldInFlight:
		sb.WriteString("unplaced: the rank chosen is computing its prompt for another request, ready by the next iteration")
	case rc.Rank == Unplaced:
		sb.WriteString("unplaced: every rank at its cap")
	default:
		fmt.Fprintf(&sb, "rank %d: %s", rc.Rank, rc.Reason)
	}
	// The predicted-TTFT columns: a placement the ttft score recorded.
	ttft := rc.Reason == ReasonPredictedTTFT || rc.Reason == ReasonHeld || rc.Reason == ReasonHeldInFlight ||
		rc.Reason == ReasonNewConversation && len(rc.Candidates) > 0
	switch {
	case ttft, rc.Reason == ReasonScored, rc.Reason == ReasonLeastLoaded, rc.Reason == ReasonDemandWarmup,
		rc.Reason == ReasonUnplaced:
		fmt.Fprintf(&sb, "; soft cap %d, %d eligible", rc.Expected, rc.Eligible)
	}
	if rc.Reason == ReasonScored {
		onOff, rel := "off", "<="
		if rc.Gate.On {
			onOff, rel = "on", ">"
		}
		fmt.Fprintf(&sb, "; cache affinity %s (best match %d/%d = %.3g %s %g, %s)",
			onOff, rc.Gate.MaxMatch, rc.Len, rc.Gate.Rate, rel, rc.Gate.Threshold, rc.MatchSource)
	}
	if rc.CapacityFallback {
		sb.WriteString("; no rank had KV room: most headroom won")
	}
	if rc.ReplicaWanted {
		sb.WriteString("; its family wants another rank or its prefix is in flight: no recompute charge within the busiest rank's next iteration")
	}
	if len(rc.Candidates) > 0 {
		switch {
		case rc.Reason == ReasonScored:
			sb.WriteString("\n  rank  reqs      tokens   match   load term       score")
		case ttft:
			sb.WriteString("\n  rank  reqs      tokens  reused      queued   predicted")
		default:
			sb.WriteString("\n  rank  reqs      tokens")
		}
		for _, c := range rc.Candidates {
			fmt.Fprintf(&sb, "\n  %4d  %4d  %10.0f", c.Rank, c.Requests, c.Tokens)
			if (rc.Reason == ReasonScored || ttft) && c.Excluded == Eligible {
				fmt.Fprintf(&sb, "  %6d  %10.4g  %10.6g", c.Match, c.LoadTerm, c.Score)
			}
			switch {
			case c.Excluded != Eligible:
				fmt.Fprintf(&sb, "  (%s)", c.Excluded)
			case c.Rank == rc.Rank:
				sb.WriteString("  <- chosen")
			}
		}
	}
	if rc.Tied > 1 {
		fmt.Fprintf(&sb, "\n  %d ranks tied; random.Random(%d).shuffle gave %v: first tied is rank %d",
			rc.Tied, rc.ID, rc.Shuffle, rc.Rank)
	}
	return sb.String()
}

// explicitOr is ReasonExplicit, or why when the placement was not explicit.
func explicitOr(notExplicit bool, why Reason) Reason {
	if notExplicit {
		return why
	}
	return ReasonExplicit
}
