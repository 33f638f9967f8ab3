package sim

import (
	"container/heap"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/adprouter/adprouter/router"
)

// EngineConfig describes the simulated ADP engine. Start from DefaultEngine.
type EngineConfig struct {
	// DPSize is the number of attention-DP ranks.
	DPSize int `json:"dp_size"`
	// KVBlocks is each rank's KV pool in blocks, unless RankBlocks is set.
	KVBlocks int `json:"kv_blocks"`
	// RankBlocks, when not empty, gives every rank its own pool size (its
	// length must equal DPSize).
	RankBlocks []int `json:"rank_blocks,omitempty"`
	// TokensPerBlock is the KV block size in tokens.
	TokensPerBlock int `json:"tokens_per_block"`
	// MaxActive is max_num_active_requests: the router's hard per-rank limit
	// on requests routed to a rank and not finished (waiting or running).
	MaxActive int `json:"max_active"`
	// MaxNumTokens is each rank's token budget per iteration: one per
	// decoding request, the rest for prefill chunks (chunked prefill).
	MaxNumTokens int `json:"max_num_tokens"`
	// RouteLimit bounds how many waiting requests are handed to the router
	// per iteration: 0 = the free request slots of the engine,
	// DPSize*MaxActive - sum(active), as TensorRT-LLM's executor fetches;
	// > 0 = at most that many (and at most the free slots); -1 = every
	// waiting request (the router returns those it cannot place).
	RouteLimit int `json:"route_limit"`
	// The iteration time model, per rank: IterBaseMs + PrefillUsPerToken *
	// prefill tokens + DecodeUsPerSeq * decoding requests. The engine's
	// iteration takes the maximum over ranks (ADP ranks step in lockstep).
	IterBaseMs        float64 `json:"iter_base_ms"`
	PrefillUsPerToken float64 `json:"prefill_us_per_token"`
	DecodeUsPerSeq    float64 `json:"decode_us_per_seq"`
	// Reuse is the engine's prompt-block reuse semantics: when a prompt
	// block being computed becomes reusable by other requests on its rank.
	// ReuseAfterIteration (TensorRT-LLM, the default): from the end of the
	// iteration that computed it, so requests that start their prefill
	// together compute a shared prefix once each. ReuseOnSchedule (vLLM
	// v1, which caches a block as soon as it is scheduled): already for
	// requests scheduled later in the same iteration on the same rank.
	Reuse string `json:"reuse"`
	// ActiveTokens selects what a rank reports as num_active_tokens, summed
	// over the requests routed to it and not finished: TokensReference ("",
	// the default) does what TensorRT-LLM's executor does for the policy
	// under test — prompt tokens for the default and conversation policies,
	// prompt tokens not found cached for the KV-aware policy (a request not
	// started yet counts in full) —; TokensPrompt, TokensUncached or
	// TokensContext (prompt + generated) force one measure for every policy.
	ActiveTokens string `json:"active_tokens,omitempty"`
}

// Prompt-block reuse semantics (EngineConfig.Reuse).
const (
	// ReuseAfterIteration: a block is reusable once the iteration that
	// computed it has ended (TensorRT-LLM).
	ReuseAfterIteration = "after-iteration"
	// ReuseOnSchedule: a block is reusable as soon as the iteration that
	// computes it is scheduled, by requests scheduled after it in that
	// iteration (vLLM v1).
	ReuseOnSchedule = "on-schedule"
)

// ReuseModes lists the reuse semantics, the default first.
var ReuseModes = []string{ReuseAfterIteration, ReuseOnSchedule}

// DescribeReuse says in words what a reuse semantics means.
func DescribeReuse(mode string) string {
	switch mode {
	case ReuseAfterIteration:
		return "blocks reusable after the iteration that computed them (TensorRT-LLM)"
	case ReuseOnSchedule:
		return "blocks reusable as soon as scheduled (vLLM-like)"
	}
	return mode
}

// Measures of num_active_tokens (EngineConfig.ActiveTokens).
const (
	// TokensReference: what TensorRT-LLM's executor reports for the policy.
	TokensReference = ""
	// TokensPrompt: prompt tokens.
	TokensPrompt = "prompt"
	// TokensUncached: prompt tokens not found cached when the request started
	// (all of them before it starts).
	TokensUncached = "uncached"
	// TokensContext: prompt and generated tokens.
	TokensContext = "context"
)

// DefaultEngine returns the documented engine defaults: 8 ranks of 4096
// blocks of 32 tokens (131072 tokens each), 64 active requests per rank, an
// 8192-token iteration budget, and an iteration time of 4 ms + 40 µs per
// prefill token (25k tokens/s) + 60 µs per decoding request, with
// TensorRT-LLM's reuse semantics (ReuseAfterIteration).
func DefaultEngine() EngineConfig {
	return EngineConfig{
		DPSize:            8,
		KVBlocks:          4096,
		TokensPerBlock:    32,
		MaxActive:         64,
		MaxNumTokens:      8192,
		IterBaseMs:        4,
		PrefillUsPerToken: 40,
		DecodeUsPerSeq:    60,
		Reuse:             ReuseAfterIteration,
	}
}

// Capacities returns every rank's pool size in blocks.
func (e *EngineConfig) Capacities() []int {
	if len(e.RankBlocks) > 0 {
		return slices.Clone(e.RankBlocks)
	}
	c := make([]int, e.DPSize)
	for i := range c {
		c[i] = e.KVBlocks
	}
	return c
}

// Validate reports the first field that is out of range.
func (e *EngineConfig) Validate() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("engine: %s = %v, want %s", field, v, want)
	}
	if e.DPSize < 1 || e.DPSize > 4096 {
		return bad("dp_size", e.DPSize, "1..4096")
	}
	if len(e.RankBlocks) > 0 {
		if len(e.RankBlocks) != e.DPSize {
			return bad("rank_blocks", e.RankBlocks, fmt.Sprintf("%d values (dp_size)", e.DPSize))
		}
		for _, b := range e.RankBlocks {
			if b < 1 {
				return bad("rank_blocks", e.RankBlocks, "values >= 1")
			}
		}
	} else if e.KVBlocks < 1 {
		return bad("kv_blocks", e.KVBlocks, ">= 1")
	}
	if e.TokensPerBlock < 1 {
		return bad("tokens_per_block", e.TokensPerBlock, ">= 1")
	}
	if e.MaxActive < 1 || e.MaxActive > router.MaxActive {
		return bad("max_active", e.MaxActive, fmt.Sprintf("1..%d", router.MaxActive))
	}
	if e.MaxNumTokens < e.MaxActive+1 {
		return bad("max_num_tokens", e.MaxNumTokens, "> max_active (room for prefill next to a full decode batch)")
	}
	switch e.ActiveTokens {
	case TokensReference, TokensPrompt, TokensUncached, TokensContext:
	default:
		return bad("active_tokens", fmt.Sprintf("%q", e.ActiveTokens), `"" (reference), "prompt", "uncached" or "context"`)
	}
	if !slices.Contains(ReuseModes, e.Reuse) {
		return bad("reuse", fmt.Sprintf("%q", e.Reuse), fmt.Sprintf("%q or %q", ReuseAfterIteration, ReuseOnSchedule))
	}
	if e.RouteLimit < -1 {
		return bad("route_limit", e.RouteLimit, ">= -1")
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"iter_base_ms", e.IterBaseMs}, {"prefill_us_per_token", e.PrefillUsPerToken}, {"decode_us_per_seq", e.DecodeUsPerSeq}} {
		if !(f.v >= 0) || math.IsInf(f.v, 0) {
			return bad(f.name, f.v, "a finite number >= 0")
		}
	}
	if e.IterBaseMs+e.PrefillUsPerToken+e.DecodeUsPerSeq <= 0 {
		return errors.New("engine: the iteration time model is all zeros; time would not advance")
	}
	return nil
}

// request is one turn in flight.
type request struct {
	id       uint64
	sess     *Session
	turn     int
	arrival  int64
	prompt   []int32
	hashes   []uint64 // chained hashes of the prompt's full blocks
	output   int
	inWindow bool

	cached    int // prompt tokens found cached when it started
	computed  int // prompt tokens computed or cached so far
	generated int
	chunk     int  // prompt tokens computed in the current iteration
	decoding  bool // generates a token in the current iteration
	held      []uint64
	private   int
	rank      int // the rank it was routed to

	// With Simulator.Explain: the decisions that offered it so far, and
	// the receipt of the last.
	offers   int
	decision *Decision
}

func (q *request) tokens() int64 { return int64(len(q.prompt) + q.generated) }

// rank is one simulated ADP rank.
type rank struct {
	cache   *Cache
	queue   []*request // routed here, not started (FIFO)
	running []*request // started: prefilling or decoding, in start order
	tokens  int64      // prompt + generated tokens of queue and running
	prompt  int64      // prompt tokens of queue and running
	fresh   int64      // prompt tokens of queue and running not found cached
}

// add accounts for q joining the rank (sign 1) or leaving it (-1).
func (r *rank) add(q *request, sign int64) {
	r.tokens += sign * q.tokens()
	r.prompt += sign * int64(len(q.prompt))
	r.fresh += sign * int64(len(q.prompt)-q.cached)
}

// activeTokens is the rank's num_active_tokens under mode for policy.
func (r *rank) activeTokens(mode string, policy router.Policy) int64 {
	switch mode {
	case TokensPrompt:
		return r.prompt
	case TokensUncached:
		return r.fresh
	case TokensContext:
		return r.tokens
	}
	if policy == router.PolicyKVCacheAware {
		return r.fresh
	}
	return r.prompt
}

func (r *rank) active() int { return len(r.queue) + len(r.running) }

// pendingKV returns the KV tokens the rank's requests will still reserve:
// schedule reserves a request's whole sequence (prompt and output, whole
// blocks) when it starts it, so a started request takes nothing more and a
// queued one its sequence, counted whole (an engine reporting before it
// probes its cache cannot tell the prefix a request will reuse).
func (r *rank) pendingKV(tokensPerBlock int) int64 {
	var blocks int64
	for _, q := range r.queue {
		blocks += int64(seqBlocks(q, tokensPerBlock))
	}
	return blocks * int64(tokensPerBlock)
}

// seqBlocks returns the KV blocks of q's whole sequence, prompt and output.
func seqBlocks(q *request, tokensPerBlock int) int {
	return (len(q.prompt) + q.output + tokensPerBlock - 1) / tokensPerBlock
}

// arrival is a turn that has not arrived yet.
type arrival struct {
	at     int64
	id     uint64
	sess   *Session
	turn   int
	prompt []int32 // nil: build from the session (first turns)
}

type arrivalQueue []arrival

func (q arrivalQueue) Len() int { return len(q) }
func (q arrivalQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].id < q[j].id
}
func (q arrivalQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *arrivalQueue) Push(x any)   { *q = append(*q, x.(arrival)) }
func (q *arrivalQueue) Pop() any {
	old := *q
	a := old[len(old)-1]
	*q = old[:len(old)-1]
	return a
}

// Simulator runs one workload through one engine with one router variant.
// Step advances one engine iteration; Run steps until every request has
// finished. All of it is deterministic except the optional measurement of
// routing wall time.
type Simulator struct {
	eng     EngineConfig
	wl      *Workload
	variant Variant
	cfg     router.Config
	rt      *router.Router
	probe   bool
	timing  bool

	now        int64
	ranks      []*rank
	arrivals   arrivalQueue
	waiting    []*request
	done       bool
	iterations int64
	idleSteps  int

	states  []router.RankState
	reqs    []router.Request
	matches []int32
	res     router.Result
	index   map[uint64]int
	seq     []int32

	m collector

	// Observe, if not nil, is called once per request at its first token
	// (for tracing decisions; it does not change the simulation).
	Observe func(RequestEvent)
}

// RequestEvent is one request's first token: where it ran and how long it
// waited.
type RequestEvent struct {
	// ID is the request id, ConvID its conversation ("" for none).
	ID     uint64
	ConvID string
	// Group is its session's prompt family (Session.Group).
	Group int
	// Rank is the rank it was routed to.
	Rank int
	// Arrival and FirstToken are simulated times in ns.
	Arrival, FirstToken int64
	// Prompt is its prompt length in tokens, Cached the part found cached
	// when it started.
	Prompt, Cached int
	// Decision is why the router placed it where it did, when
	// Simulator.Explain was called; nil otherwise.
	Decision *Decision
}

// A Decision is the router's receipt for one request (router.Receipt), with
// the routing call that placed it.
type Decision struct {
	// At is the simulated time of that call in ns, Batch how many requests
	// it was offered, and Offers how many calls offered this request: more
	// than one when earlier calls left it unassigned (held for a later
	// iteration, or no rank had a slot).
	At     int64
	Batch  int
	Offers int
	// Receipt is the call's receipt for the request. Its Candidates and
	// Shuffle belong to the Decision, not to the router.
	Receipt router.Receipt
}

// maxIdleSteps bounds consecutive iterations in which requests wait but
// nothing can run: a router that never places anything on an empty engine.
const maxIdleSteps = 10000

// NewSimulator prepares a run of wl on eng with variant v. With timing, the
// wall time of every routing call is measured (see Result.Timing).
func NewSimulator(eng EngineConfig, wl *Workload, v Variant, timing bool) (*Simulator, error) {
	if err := eng.Validate(); err != nil {
		return nil, err
	}
	cfg := v.EngineConfig(&eng)
	rt, err := router.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("variant %s: %w", v.Name, err)
	}
	s := &Simulator{eng: eng, wl: wl, variant: v, cfg: cfg, rt: rt, probe: v.probes(&cfg),
		timing: timing, index: make(map[uint64]int)}
	for _, c := range eng.Capacities() {
		s.ranks = append(s.ranks, &rank{cache: NewCache(c)})
	}
	for i := range wl.Sessions {
		se := &wl.Sessions[i]
		if len(se.Turns) > 0 {
			s.arrivals = append(s.arrivals, arrival{at: se.Start, id: se.Turns[0].ID, sess: se})
		}
	}
	heap.Init(&s.arrivals)
	return s, nil
}

// Now returns the simulated time in nanoseconds.
func (s *Simulator) Now() int64 { return s.now }

// Done reports whether every request has finished.
func (s *Simulator) Done() bool { return s.done }

// Explain makes the router record a receipt for each request it routes
// (router.Config.Explain) and hands each request's last one to Observe, in
// RequestEvent.Decision. Recording reads a decision's state and never
// changes it, so the simulation runs exactly as it would without. Call it
// before Run.
func (s *Simulator) Explain() error {
	if s.m.routeCalls > 0 || s.iterations > 0 {
		return errors.New("sim: Explain after the simulation started; call it before Run")
	}
	cfg := s.cfg
	cfg.Explain = true
	rt, err := router.New(cfg)
	if err != nil {
		return fmt.Errorf("variant %s: %w", s.variant.Name, err)
	}
	s.cfg, s.rt = cfg, rt
	return nil
}

// Router returns the router under test (for inspection; do not route with
// it).
func (s *Simulator) Router() *router.Router { return s.rt }

// Ranks returns each rank's KV cache (for inspection).
func (s *Simulator) Ranks() []*Cache {
	c := make([]*Cache, len(s.ranks))
	for i, r := range s.ranks {
		c[i] = r.cache
	}
	return c
}

// Run steps until every request has finished and returns the metrics.
func (s *Simulator) Run() (*Result, error) {
	for {
		more, err := s.Step()
		if err != nil {
			return nil, err
		}
		if !more {
			return s.Result(), nil
		}
	}
}

// Step runs one engine iteration: arrivals join the waiting queue; the
// router places (some of) the waiting requests; every rank starts what fits
// and computes one iteration; time advances by the slowest rank's iteration
// time; first tokens, completions and follow-up turns are recorded. When
// nothing is running or waiting it first jumps to the next arrival. It
// returns false once every request has finished.
func (s *Simulator) Step() (bool, error) {
	if s.done {
		return false, nil
	}
	if len(s.waiting) == 0 && s.idle() {
		if len(s.arrivals) == 0 {
			s.done = true
			return false, nil
		}
		s.now = max(s.now, s.arrivals[0].at)
	}
	s.arrive()
	if err := s.route(); err != nil {
		return false, err
	}
	s.recordSpread()

	var slowest float64
	busy := false
	var prefillMax, prefillSum int
	for _, r := range s.ranks {
		prefill, decodes := s.schedule(r)
		prefillMax, prefillSum = max(prefillMax, prefill), prefillSum+prefill
		busy = busy || prefill > 0 || decodes > 0
		t := s.eng.IterBaseMs*1e6 + s.eng.PrefillUsPerToken*1e3*float64(prefill) + s.eng.DecodeUsPerSeq*1e3*float64(decodes)
		slowest = max(slowest, t)
	}
	if busy {
		s.idleSteps = 0
	} else if s.idleSteps++; s.idleSteps > maxIdleSteps {
		return false, fmt.Errorf("variant %s: %d requests waiting and nothing runs for %d iterations at t=%.3fs (the router places nothing)",
			s.variant.Name, len(s.waiting), maxIdleSteps, float64(s.now)/nsPerSecond)
	}
	s.m.prefillMax += int64(prefillMax)
	s.m.prefillSum += int64(prefillSum)
	if w := s.wl.Window; w != nil && s.now >= w.Start && (s.now < w.End || s.m.winWaiting > 0) {
		s.m.winPrefillMax += int64(prefillMax)
		s.m.winPrefillSum += int64(prefillSum)
	}
	s.now += max(int64(math.Round(slowest)), 1)
	s.iterations++
	for _, r := range s.ranks {
		s.complete(r)
	}
	return true, nil
}

func (s *Simulator) idle() bool {
	for _, r := range s.ranks {
		if r.active() > 0 {
			return false
		}
	}
	return true
}

// arrive moves every arrival due by now into the waiting queue.
func (s *Simulator) arrive() {
	for len(s.arrivals) > 0 && s.arrivals[0].at <= s.now {
		a := heap.Pop(&s.arrivals).(arrival)
		t := &a.sess.Turns[a.turn]
		p := a.prompt
		if p == nil {
			p = make([]int32, 0, len(a.sess.Prefix)+len(t.User))
			p = append(append(p, a.sess.Prefix...), t.User...)
		}
		q := &request{id: t.ID, sess: a.sess, turn: a.turn, arrival: a.at, prompt: p, output: t.Output,
			hashes: AppendBlockHashes(nil, p, s.eng.TokensPerBlock)}
		if w := s.wl.Window; w != nil && a.at >= w.Start && a.at < w.End {
			q.inWindow = true
			s.m.winWaiting++
		}
		s.m.arrived++
		s.waiting = append(s.waiting, q)
		if next := a.turn + 1; next < len(a.sess.Turns) && a.sess.Turns[next].InFlight {
			nt := &a.sess.Turns[next]
			np := make([]int32, 0, len(p)+len(nt.User))
			np = append(append(np, p...), nt.User...)
			heap.Push(&s.arrivals, arrival{at: a.at + nt.Think, id: nt.ID, sess: a.sess, turn: next, prompt: np})
		}
	}
}

// route hands the head of the waiting queue to the router, as an executor
// does: gathered rank states, and for the KV-aware policy the match lengths
// each rank probes in its own cache (the prompt minus its last token, whole
// blocks only). Placed requests join their rank's queue in the order the
// router lists them (Result.Assignment); unassigned ones stay at the front
// of the waiting queue. It routes every iteration, with no request when
// none waits or no slot is free, as TensorRT-LLM's executor routes every
// iteration under attention DP: state a router keeps per decision (the
// predicted-TTFT score drains its estimate of each rank's queued prefill by
// one iteration's budget per decision) then advances as it would in the
// engine.
func (s *Simulator) route() error {
	dp := s.eng.DPSize
	n := len(s.waiting)
	if s.eng.RouteLimit >= 0 {
		free := dp * s.eng.MaxActive
		for _, r := range s.ranks {
			free -= r.active()
		}
		n = min(n, max(free, 0))
		if s.eng.RouteLimit > 0 {
			n = min(n, s.eng.RouteLimit)
		}
	}
	batch := s.waiting[:n]

	s.states = s.states[:0]
	for k, r := range s.ranks {
		tpb := int64(s.eng.TokensPerBlock)
		st := router.RankState{Rank: k, NumActiveRequests: r.active(),
			NumActiveTokens:  r.activeTokens(s.eng.ActiveTokens, s.cfg.Policy),
			KVCapacityTokens: int64(r.cache.Capacity()) * tpb,
			FreeKVTokens:     int64(r.cache.Free()+r.cache.Evictable()) * tpb}
		if s.variant.NoKVReport {
			st.KVCapacityTokens, st.FreeKVTokens = 0, 0
		} else if s.variant.reportsPendingKV() {
			st.PendingKVTokens, st.ReportsPendingKV = r.pendingKV(s.eng.TokensPerBlock), true
			if s.variant.FullKVReport {
				st.EvictableKVTokens, st.ReportsEvictableKV = int64(r.cache.Evictable())*tpb, true
			}
		}
		if s.variant.Gather != nil {
			s.variant.Gather(RankInfo{Rank: k, TokensPerBlock: s.eng.TokensPerBlock,
				CapacityBlocks: r.cache.Capacity(), UsedBlocks: r.cache.Used(),
				EvictableBlocks: r.cache.Evictable(), Waiting: len(r.queue), Running: len(r.running)}, &st)
		}
		s.states = append(s.states, st)
	}
	s.reqs = s.reqs[:0]
	for _, q := range batch {
		s.reqs = append(s.reqs, router.Request{ID: q.id, Tokens: q.prompt, TargetRank: router.NoTarget,
			ConversationID: q.sess.ConvID})
		if s.variant.reportsPendingKV() {
			s.reqs[len(s.reqs)-1].MaxNewTokens = q.output
		}
	}
	var matches []int32
	if s.probe {
		s.matches = slices.Grow(s.matches[:0], n*dp)[:n*dp]
		for i, q := range batch {
			probe := q.hashes[:s.probeBlocks(q)]
			for k, r := range s.ranks {
				s.matches[i*dp+k] = int32(r.cache.Match(probe) * s.eng.TokensPerBlock)
			}
		}
		matches = s.matches
	}

	// Only decisions with requests are timed: an empty one costs next to
	// nothing and would flatter the figures.
	timed := s.timing && n > 0
	var start time.Time
	if timed {
		start = time.Now()
	}
	err := s.rt.RouteInto(&s.res, s.states, s.reqs, s.eng.MaxActive, matches)
	if timed {
		s.m.routeNs = append(s.m.routeNs, time.Since(start).Nanoseconds())
	}
	if err != nil {
		return fmt.Errorf("variant %s: route: %w", s.variant.Name, err)
	}
	s.m.routeCalls++
	s.m.routed += int64(n)

	// Check the router's contract: every request placed once or returned.
	clear(s.index)
	for i, q := range batch {
		s.index[q.id] = i
	}
	placed := make([]bool, n)
	np := 0
	for k, ids := range s.res.Assignment {
		for _, id := range ids {
			i, ok := s.index[id]
			if !ok || placed[i] || s.res.Ranks[i] != k {
				return fmt.Errorf("variant %s: router placed id %d on rank %d inconsistently", s.variant.Name, id, k)
			}
			placed[i] = true
			np++
			r := s.ranks[k]
			q := batch[i]
			q.rank = k
			r.queue = append(r.queue, q)
			r.add(q, 1)
		}
	}
	if np+len(s.res.Unassigned) != n {
		return fmt.Errorf("variant %s: router placed %d and returned %d of %d requests", s.variant.Name, np, len(s.res.Unassigned), n)
	}
	if s.cfg.Explain {
		if err := s.keepReceipts(batch); err != nil {
			return err
		}
	}
	for k, r := range s.ranks {
		if r.active() > s.eng.MaxActive {
			return fmt.Errorf("variant %s: rank %d holds %d requests, max_active %d", s.variant.Name, k, r.active(), s.eng.MaxActive)
		}
	}
	s.m.unplaced += int64(len(s.res.Unassigned))
	rest := s.waiting[:0]
	for i, q := range batch {
		if !placed[i] {
			rest = append(rest, q)
		}
	}
	rest = append(rest, s.waiting[n:]...)
	clear(s.waiting[len(rest):])
	s.waiting = rest
	return nil
}

// keepReceipts copies the last routing call's receipts, one per request of
// batch in order, into the requests (see Explain).
func (s *Simulator) keepReceipts(batch []*request) error {
	rcs := s.rt.Receipts()
	if len(rcs) != len(batch) {
		return fmt.Errorf("variant %s: %d receipts for %d requests", s.variant.Name, len(rcs), len(batch))
	}
	for i, q := range batch {
		rc := rcs[i]
		if rc.ID != q.id {
			return fmt.Errorf("variant %s: receipt %d is for id %d, request %d", s.variant.Name, i, rc.ID, q.id)
		}
		q.offers++
		rc.Candidates, rc.Shuffle = slices.Clone(rc.Candidates), slices.Clone(rc.Shuffle)
		q.decision = &Decision{At: s.now, Batch: len(batch), Offers: q.offers, Receipt: rc}
	}
	return nil
}

// probeBlocks is the number of the prompt's blocks an executor probes: the
// whole blocks of the prompt minus its last token (whose logits must be
// computed in any case).
func (s *Simulator) probeBlocks(q *request) int {
	return max(len(q.prompt)-1, 0) / s.eng.TokensPerBlock
}

// recordSpread accumulates the load spread of this iteration (after
// routing): the busiest rank's active tokens and the total.
func (s *Simulator) recordSpread() {
	var sum, hi int64
	for _, r := range s.ranks {
		sum += r.tokens
		hi = max(hi, r.tokens)
	}
	s.m.spreadMax += float64(hi)
	s.m.spreadTotal += float64(sum)
}

// schedule decides rank r's work for this iteration, in the spirit of
// TensorRT-LLM's GUARANTEED_NO_EVICT capacity scheduler with chunked
// prefill: every decoding request generates one token; the rest of the
// token budget goes to prefill chunks of started requests, in start order,
// then to queued requests, first come first served. A queued request starts
// only when the KV blocks of its whole sequence (prompt + output, minus the
// cached prefix it reuses) can be reserved, evicting unreferenced cached
// blocks if needed; otherwise it and everything behind it wait. So no
// request is ever preempted and the pool is never over-committed. A request
// larger than the whole pool is rejected (counted, never run).
func (s *Simulator) schedule(r *rank) (prefill, decodes int) {
	tpb := s.eng.TokensPerBlock
	for _, q := range r.running {
		q.chunk = 0
		q.decoding = q.computed == len(q.prompt)
		if q.decoding {
			decodes++
		}
	}
	budget := max(s.eng.MaxNumTokens-decodes, 0)
	for _, q := range r.running {
		if budget == 0 {
			break
		}
		if !q.decoding {
			q.chunk = min(len(q.prompt)-q.computed, budget)
			budget -= q.chunk
			prefill += q.chunk
			if s.eng.Reuse == ReuseOnSchedule {
				commitPrompt(r.cache, q, q.computed+q.chunk, tpb)
			}
		}
	}
	for budget > 0 && len(r.queue) > 0 {
		q := r.queue[0]
		total := seqBlocks(q, tpb)
		if total > r.cache.Capacity() {
			r.queue = r.queue[1:]
			r.add(q, -1)
			s.m.rejected++
			if q.inWindow {
				s.m.winWaiting-- // it never gets a first token
			}
			continue
		}
		hit := r.cache.Match(q.hashes[:s.probeBlocks(q)])
		if !r.cache.Allocate(q.hashes, hit, total-hit) {
			break
		}
		r.queue[0] = nil
		r.queue = r.queue[1:]
		q.cached = hit * tpb
		r.fresh -= int64(q.cached)
		q.computed = q.cached
		q.held = append(q.held[:0], q.hashes[:hit]...)
		q.private = total - hit
		s.m.started(q)
		r.running = append(r.running, q)
		q.chunk = min(len(q.prompt)-q.computed, budget)
		budget -= q.chunk
		prefill += q.chunk
		if s.eng.Reuse == ReuseOnSchedule {
			commitPrompt(r.cache, q, q.computed+q.chunk, tpb)
		}
	}
	return prefill, decodes
}

// complete applies the iteration's work on rank r at the new time: computed
// prompt blocks enter the cache, finished prefills emit their first token,
// decoders their next one, and finished requests release their blocks and
// schedule their conversation's next turn.
func (s *Simulator) complete(r *rank) {
	tpb := s.eng.TokensPerBlock
	keep := r.running[:0]
	for _, q := range r.running {
		switch {
		case q.chunk > 0:
			q.computed += q.chunk
			commitPrompt(r.cache, q, q.computed, tpb)
			if q.computed == len(q.prompt) {
				q.generated = 1
				r.tokens++
				s.m.firstToken(q, s.now)
				if s.Observe != nil {
					s.Observe(RequestEvent{ID: q.id, ConvID: q.sess.ConvID, Group: q.sess.Group, Rank: q.rank, Arrival: q.arrival,
						FirstToken: s.now, Prompt: len(q.prompt), Cached: q.cached, Decision: q.decision})
				}
			}
		case q.decoding:
			q.generated++
			r.tokens++
		}
		if q.generated < q.output {
			keep = append(keep, q)
			continue
		}
		s.finish(r, q)
	}
	clear(r.running[len(keep):])
	r.running = keep
}

// commitPrompt caches the full prompt blocks of q within its first upTo
// tokens that it has not cached yet.
func commitPrompt(c *Cache, q *request, upTo, tpb int) {
	for len(q.held) < upTo/tpb {
		c.Commit(q.hashes[len(q.held)], len(q.held))
		q.held = append(q.held, q.hashes[len(q.held)])
		q.private--
	}
}

func (s *Simulator) finish(r *rank, q *request) {
	tpb := s.eng.TokensPerBlock
	// The answer's full blocks are cached too (a conversation's next turn
	// starts with them).
	seq := append(s.seq[:0], q.prompt...)
	seq = s.wl.OutputTokens(seq, q.id, q.output)
	s.seq = seq
	all := AppendBlockHashes(q.hashes[:len(q.hashes):len(q.hashes)], seq, tpb)
	for len(q.held) < len(all) {
		r.cache.Commit(all[len(q.held)], len(q.held))
		q.held = append(q.held, all[len(q.held)])
		q.private--
	}
	r.cache.Release(q.held, q.private)
	r.add(q, -1)
	s.m.completed++
	if next := q.turn + 1; next < len(q.sess.Turns) && !q.sess.Turns[next].InFlight {
		t := &q.sess.Turns[next]
		p := make([]int32, 0, len(seq)+len(t.User))
		p = append(append(p, seq...), t.User...)
		heap.Push(&s.arrivals, arrival{at: s.now + t.Think, id: t.ID, sess: q.sess, turn: next, prompt: p})
	}
	q.held, q.hashes, q.prompt = nil, nil, nil
}
