package router

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"unsafe"

	"github.com/adprouter/adprouter/router/internal/convmap"
)

// Limits that keep every sum exact: token loads are tracked as float64 in the
// KV-aware policy, exactly like the reference's Python floats, which is exact
// only below 2^53.
const (
	// MaxTokens bounds NumActiveTokens, a request's length and a match length.
	MaxTokens = 1 << 50
	// MaxActive bounds NumActiveRequests and maxActive.
	MaxActive = 1 << 30
)

// MaxConversationIDBytes bounds the length of Request.ConversationID, in
// bytes, so that the conversation map's memory is bounded by MaxSessions
// alone (see Config.MaxSessions). Ids in use are UUIDs (36 bytes), ULIDs (26)
// or hex digests (64); 1024 leaves room for composite ids (tenant, user,
// session) while keeping the map's worst case near 75 MiB by default.
const MaxConversationIDBytes = 1024

// Router routes batches of new requests onto attention-DP ranks with one
// policy. It is a deterministic state machine: its decisions depend only on
// its configuration, the sequence of Route calls it has seen, and their
// arguments. Two Routers built from the same Config and fed the same calls
// hold the same state and return the same results, which is what lets every
// rank of an ADP engine route locally and agree.
//
// A Router is not safe for concurrent use; the C front end serialises calls on
// one handle.
type Router struct {
	cfg Config

	// State that persists across calls.
	pending      []bool // KV-aware warmup: ranks not yet warmed
	pendingCount int
	loaded       bool         // quiet warmup: some decision saw the engine loaded (see warming)
	warmedLast   bool         // quiet warmup: the last decision warmed a rank (see warming)
	busyFor      int          // quiet warmup: decisions since one found no request active, up to lightStartRise+1
	conv         convmap.Map  // conversation -> rank
	cursor       int          // conversation round-robin cursor
	prefix       *prefixState // KV-aware prefix index and demand warmup, or nil
	ttft         ttftState    // ScoreTTFT: queued prefill per rank
	digest       uint64       // chained over every change of the above; see StateDigest
	stats        statCounters
	rc           *receiptLog // the last decision's receipts; nil unless Config.Explain

	// Scratch reused by every call; never read before being reset.
	count    []int
	tokens   []int64
	tokensF  []float64
	order    []int
	rest     []int
	held     []int    // explicitPass: requests warmShare held back
	fams     []uint64 // warmShare: the batch's prompt families
	eligible []int
	heap     rankHeap // the default policy's open ranks
	keys     []uint64 // sort keys (longestFirst)
	spare    []uint64 // longestFirst's radix sort buffer
	convHash []uint64 // each request's conversation id's hash (routeConversation)
	shuffled []int
	row      []int // one request's match length per rank
	ready    []int // ScoreTTFT: the part of row known computed
	room     kvRoom
	ids      idSet
	groups   groupSorter
	seeds    seedCache
}

// New returns a Router for cfg, or an error wrapping ErrInvalidConfig that
// names the offending option.
func New(cfg Config) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.normalized()
	r := &Router{cfg: cfg}
	if cfg.Policy == PolicyKVCacheAware && cfg.indexed() {
		r.prefix = newPrefixState(&r.cfg)
	}
	if cfg.Policy == PolicyKVCacheAware && (cfg.ColdStartWarmup || cfg.Warmup == WarmupOnce || cfg.Warmup == WarmupQuiet) {
		r.pending = make([]bool, cfg.DPSize)
		for i := range r.pending {
			r.pending[i] = true
		}
		r.pendingCount = cfg.DPSize
	}
	r.conv = convmap.New(cfg.MaxSessions)
	r.stats.init(cfg.DPSize)
	r.digest = configDigest(&r.cfg)
	if cfg.Explain {
		r.rc = new(receiptLog)
	}
	return r, nil
}

// Config returns the configuration the Router was built with.
func (r *Router) Config() Config { return r.cfg }

// Route places one batch and returns a new Result; see RouteInto.
func (r *Router) Route(states []RankState, reqs []Request, maxActive int, matches []int32) (*Result, error) {
	res := new(Result)
	if err := r.RouteInto(res, states, reqs, maxActive, matches); err != nil {
		return nil, err
	}
	return res, nil
}

// RouteInto places one batch of new requests, writing the decision into res
// and reusing its memory.
//
// states holds one RankState per rank in rank order. maxActive is the hard
// per-rank limit on active requests (max_num_active_requests). matches, used
// by the KV-aware policy only, is nil (no cached prefixes) or holds
// len(reqs)*DPSize match lengths, row-major by request:
// matches[i*DPSize+r] is how many prompt tokens of reqs[i] rank r already
// caches.
//
// Every request ends up either on a rank or in res.Unassigned. Invalid
// arguments return an error wrapping ErrInvalidInput and change neither the
// Router nor res.
func (r *Router) RouteInto(res *Result, states []RankState, reqs []Request, maxActive int, matches []int32) error {
	if err := r.validate(states, reqs, maxActive, matches); err != nil {
		return err
	}
	res.reset(r.cfg.DPSize, len(reqs))
	// The predicted-TTFT score heeds the KV room ranks report: a request a
	// rank's pool cannot hold waits for memory, not compute (past the
	// memory, only for a request with no prefix to keep: referenceRank).
	r.room.reset(r.cfg.CapacityAware || (r.cfg.Policy == PolicyKVCacheAware && r.cfg.Score == ScoreTTFT), states)
	b := batch{states: states, reqs: reqs, maxn: maxActive, matches: matches, res: res}
	if r.rc != nil {
		r.rc.begin(&b, r.cfg.PrefixSource)
	}
	switch r.cfg.Policy {
	case PolicyDefault:
		r.routeDefault(&b)
	case PolicyKVCacheAware:
		if r.cfg.Score == ScoreTTFT {
			r.routeTTFT(&b)
		} else {
			r.routeKVAware(&b)
		}
	case PolicyConversation:
		r.routeConversation(&b)
	}
	if r.rc != nil {
		r.rc.end(&b)
	}
	r.stats.record(&b)
	return nil
}

func inputError(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidInput}, args...)...)
}

func (r *Router) validate(states []RankState, reqs []Request, maxActive int, matches []int32) error {
	size := r.cfg.DPSize
	if maxActive < 1 || maxActive > MaxActive {
		return inputError("max_num_active_requests = %d, want 1..%d", maxActive, MaxActive)
	}
	if len(states) != size {
		return inputError("got %d rank states, want dp_size = %d", len(states), size)
	}
	for i := range states {
		s := &states[i]
		if s.Rank != i {
			return inputError("states[%d].rank = %d, want %d (states must be in rank order)", i, s.Rank, i)
		}
		if s.NumActiveRequests < 0 || s.NumActiveRequests > MaxActive {
			return inputError("states[%d].num_active_requests = %d, want 0..%d", i, s.NumActiveRequests, MaxActive)
		}
		if s.NumActiveTokens < 0 || s.NumActiveTokens > MaxTokens {
			return inputError("states[%d].num_active_tokens = %d, want 0..%d", i, s.NumActiveTokens, int64(MaxTokens))
		}
		if s.KVCapacityTokens < 0 || s.KVCapacityTokens > MaxTokens {
			return inputError("states[%d].kv_capacity_tokens = %d, want 0 (unknown)..%d", i, s.KVCapacityTokens, int64(MaxTokens))
		}
		if s.KVCapacityTokens > 0 && (s.FreeKVTokens < 0 || s.FreeKVTokens > s.KVCapacityTokens) {
			return inputError("states[%d].free_kv_tokens = %d, want 0..kv_capacity_tokens (%d)", i, s.FreeKVTokens, s.KVCapacityTokens)
		}
		if s.PendingKVTokens < 0 || s.PendingKVTokens > MaxTokens {
			return inputError("states[%d].pending_kv_tokens = %d, want 0..%d", i, s.PendingKVTokens, int64(MaxTokens))
		}
		if s.EvictableKVTokens < 0 || s.EvictableKVTokens > MaxTokens || (s.KVCapacityTokens > 0 && s.EvictableKVTokens > s.FreeKVTokens) {
			return inputError("states[%d].evictable_kv_tokens = %d, want 0..free_kv_tokens (%d)", i, s.EvictableKVTokens, s.FreeKVTokens)
		}
		if s.EvictableKVTokens != 0 && !s.ReportsEvictableKV {
			return inputError("states[%d].evictable_kv_tokens = %d without reports_evictable_kv, want 0 or the flag set", i, s.EvictableKVTokens)
		}
		if s.PendingKVTokens != 0 && !s.ReportsPendingKV {
			return inputError("states[%d].pending_kv_tokens = %d without reports_pending_kv, want 0 or the flag set", i, s.PendingKVTokens)
		}
	}
	for i := range reqs {
		q := &reqs[i]
		if q.TargetRank != NoTarget && (q.TargetRank < 0 || q.TargetRank >= size) {
			return inputError("requests[%d] (id %d): target_rank = %d, want 0..%d or none", i, q.ID, q.TargetRank, size-1)
		}
		if q.NumTokens < 0 || q.NumTokens > MaxTokens {
			return inputError("requests[%d] (id %d): num_tokens = %d, want 0..%d", i, q.ID, q.NumTokens, int64(MaxTokens))
		}
		if q.MaxNewTokens < 0 || q.MaxNewTokens > MaxTokens {
			return inputError("requests[%d] (id %d): max_new_tokens = %d, want 0 (unknown)..%d", i, q.ID, q.MaxNewTokens, int64(MaxTokens))
		}
		if q.NumTokens > 0 && q.NumTokens < len(q.Tokens) {
			return inputError("requests[%d] (id %d): num_tokens = %d is less than the %d tokens given", i, q.ID, q.NumTokens, len(q.Tokens))
		}
		if len(q.ConversationID) > MaxConversationIDBytes {
			return inputError("requests[%d] (id %d): conversation id of %d bytes, want at most %d (router.MaxConversationIDBytes)",
				i, q.ID, len(q.ConversationID), MaxConversationIDBytes)
		}
		if len(q.Tokens) > MaxTokens {
			return inputError("requests[%d] (id %d): %d tokens, want at most %d", i, q.ID, len(q.Tokens), int64(MaxTokens))
		}
	}
	if id, dup := r.ids.duplicate(reqs); dup {
		return inputError("request id %d appears more than once in the batch", id)
	}
	if matches != nil {
		if len(matches) != len(reqs)*size {
			return inputError("got %d match lengths, want len(requests) * dp_size = %d", len(matches), len(reqs)*size)
		}
		if anyNegative(matches) {
			k := slices.IndexFunc(matches, func(m int32) bool { return m < 0 })
			return inputError("match length of request %d on rank %d = %d, want >= 0", k/size, k%size, matches[k])
		}
	}
	return nil
}

// anyNegative reports whether some value of ms is negative. It ORs the sign
// bits of two values at a time, four words per step, with no branch per
// value: the table is dp_size values per request and the check runs on
// every decision.
func anyNegative(ms []int32) bool {
	const signs = 0x8000_0000_8000_0000
	var acc uint64
	if len(ms) > 0 && uintptr(unsafe.Pointer(&ms[0]))%8 != 0 {
		acc, ms = uint64(uint32(ms[0])), ms[1:] // word-align the rest
	}
	if len(ms) == 0 {
		return acc&signs != 0
	}
	words := unsafe.Slice((*uint64)(unsafe.Pointer(&ms[0])), len(ms)/2)
	for len(words) >= 4 {
		acc |= words[0] | words[1] | words[2] | words[3]
		words = words[4:]
	}
	for _, w := range words {
		acc |= w
	}
	if len(ms)%2 == 1 {
		acc |= uint64(uint32(ms[len(ms)-1]))
	}
	return acc&signs != 0
}

// idSet finds duplicate request ids in linear time: an open-addressing
// table of the ids seen so far (sorting them cost more than the rest of a
// small decision).
type idSet struct {
	slots []uint64
	used  []bool
}

// duplicate returns the first id, in request order, that an earlier
// request already has.
func (s *idSet) duplicate(reqs []Request) (uint64, bool) {
	if len(reqs) < 2 {
		return 0, false
	}
	size := 1 << bits.Len(uint(2*len(reqs)-1))
	s.slots = slices.Grow(s.slots[:0], size)[:size]
	s.used = slices.Grow(s.used[:0], size)[:size]
	clear(s.used)
	shift := 64 - bits.Len(uint(size-1))
	mask := uint64(size - 1)
	for i := range reqs {
		id := reqs[i].ID
		h := (id * 0x9e3779b97f4a7c15) >> shift // Fibonacci hashing
		for ; s.used[h]; h = (h + 1) & mask {
			if s.slots[h] == id {
				return id, true
			}
		}
		s.slots[h], s.used[h] = id, true
	}
	return 0, false
}

// batch is one Route call in progress.
type batch struct {
	states  []RankState
	reqs    []Request
	maxn    int
	matches []int32
	res     *Result
}

func (b *batch) match(req, rank, size int) int {
	if b.matches == nil {
		return 0
	}
	return int(b.matches[req*size+rank])
}

// loadCounts copies the active request counts into r.count.
func (r *Router) loadCounts(b *batch) []int {
	r.count = slices.Grow(r.count[:0], len(b.states))[:len(b.states)]
	for i := range b.states {
		r.count[i] = b.states[i].NumActiveRequests
	}
	return r.count
}

// place records request i on rank, which must now hold uncached tokens of
// its prompt's KV, and the output it reserves for.
func (r *Router) place(b *batch, i, rank, uncached int) {
	b.res.Assignment[rank] = append(b.res.Assignment[rank], b.reqs[i].ID)
	b.res.Ranks[i] = rank
	r.count[rank]++
	r.room.take(rank, uncached+b.reqs[i].MaxNewTokens)
}

// coverPlaced raises the decision's Expected to the count of every rank
// that took a request in it. The ScoreTTFT policy keeps a request on its
// home rank above the soft cap; Expected must cover that rank too, or the
// executor's padding check (expected >= every rank's routable requests)
// fails. Every placement is under the hard cap, so Expected stays within
// it.
func (r *Router) coverPlaced(b *batch) {
	for k, ids := range b.res.Assignment {
		if len(ids) > 0 {
			b.res.Expected = max(b.res.Expected, r.count[k])
		}
	}
}

// finish lists, in input order, the requests no rank took, so that the
// caller can requeue them.
func (r *Router) finish(b *batch) {
	for i := range b.reqs {
		if b.res.Ranks[i] == Unplaced {
			b.res.Unassigned = append(b.res.Unassigned, b.reqs[i].ID)
		}
	}
}

// relaxSort fills r.order with request indices, stable-sorted so that those
// for which first(q) is true come first.
func (r *Router) relaxSort(b *batch, first func(q *Request) bool) []int {
	order := r.order[:0]
	for i := range b.reqs {
		if first(&b.reqs[i]) {
			order = append(order, i)
		}
	}
	for i := range b.reqs {
		if !first(&b.reqs[i]) {
			order = append(order, i)
		}
	}
	r.order = order
	return order
}

// softCap is the reference's expected_num_active_requests:
// fair = ceil((sum(count) + remaining) / size),
// min(max(ceil(multiplier * fair), max(count)), maxn).
func softCap(count []int, remaining int, multiplier float64, maxn int) int {
	busiest := 0
	for _, c := range count {
		busiest = max(busiest, c)
	}
	return min(max(fairCap(count, remaining, multiplier, maxn), busiest), maxn)
}

// fairCap is softCap without its floor at the busiest rank:
// min(ceil(multiplier * fair), maxn). Unlike softCap it does not rise as
// the busiest rank takes more requests.
func fairCap(count []int, remaining int, multiplier float64, maxn int) int {
	sum := remaining
	for _, c := range count {
		sum += c
	}
	fair := (sum + len(count) - 1) / len(count)
	f := math.Ceil(multiplier * float64(fair))
	if f >= float64(maxn) {
		// Converting a huge f to int would overflow.
		return maxn
	}
	return int(f)
}

// PendingWarmup returns, in ascending order, the ranks the KV-aware policy's
// cold-start warmup has not sent a request to yet (empty when warmup is off
// or complete).
func (r *Router) PendingWarmup() []int {
	var p []int
	for k, on := range r.pending {
		if on {
			p = append(p, k)
		}
	}
	return p
}

// SetPendingWarmup replaces the KV-aware cold-start warmup's pending ranks
// with ranks (any order; a rank given twice counts once). Later decisions
// send their untargeted requests to the smallest pending rank first, as
// the warmup does from its start, and a rank leaves the set once a request
// lands there; an empty set ends the warmup. TensorRT-LLM's
// KVCacheAwareADPRouter keeps this set in its _pending_warmup_ranks
// attribute, which its hosts and tests assign; this is that assignment.
// Like every input of a decision it must be the same on every rank.
//
// It returns an error wrapping ErrInvalidInput, and changes nothing, for a
// policy other than kv_cache_aware or a rank outside 0..dp_size-1.
func (r *Router) SetPendingWarmup(ranks []int) error {
	if r.cfg.Policy != PolicyKVCacheAware {
		return inputError("pending warmup ranks belong to the kv_cache_aware policy, not %q", r.cfg.Policy)
	}
	for i, k := range ranks {
		if k < 0 || k >= r.cfg.DPSize {
			return inputError("pending warmup ranks[%d] = %d, want 0..%d", i, k, r.cfg.DPSize-1)
		}
	}
	if r.pending == nil {
		r.pending = make([]bool, r.cfg.DPSize)
	}
	clear(r.pending)
	r.pendingCount = 0
	for _, k := range ranks {
		if !r.pending[k] {
			r.pending[k] = true
			r.pendingCount++
		}
	}
	// The new set, folded rank by rank in ascending order: the same set
	// gives the same digest whatever order it was given in.
	r.digest = fold(r.digest, tagPendingSet, uint64(r.pendingCount), 0)
	for k, on := range r.pending {
		if on {
			r.digest = fold(r.digest, tagPendingSet, uint64(k), 1)
		}
	}
	return nil
}

// Binding is one entry of the conversation map: a conversation and the
// rank its turns return to.
type Binding struct {
	ConversationID string
	Rank           int
}

// Conversations returns the conversation map's bindings from the least to
// the most recently used: the order of eviction, and the order in which
// TensorRT-LLM's ConversationAwareADPRouter iterates its _conv_to_rank.
func (r *Router) Conversations() []Binding {
	out := make([]Binding, 0, r.conv.Len())
	r.conv.Each(func(id string, rank int) { out = append(out, Binding{id, rank}) })
	slices.Reverse(out)
	return out
}

// Conversation returns the rank conversation id is bound to, if any.
func (r *Router) Conversation(id string) (rank int, ok bool) { return r.conv.Get(id) }

// NumConversations returns the number of conversation bindings held.
func (r *Router) NumConversations() int { return r.conv.Len() }

// AllTokens is TokensRead's answer for a Router that hashes whole prompts.
const AllTokens = -1

// TokensRead returns how many leading prompt tokens of each request the
// Router's decisions read: 0 for the default and conversation policies
// (Request.NumTokens is enough), PrefixTokens for the KV-aware policy with
// probed matches (its grouping key), or AllTokens when the prefix index or
// demand warmup hashes whole prompts. Front ends send only that many, so
// they need not know which options imply which.
func (r *Router) TokensRead() int {
	switch {
	case r.cfg.Policy != PolicyKVCacheAware:
		return 0
	case r.cfg.indexed():
		return AllTokens
	default:
		return PrefixTokens
	}
}
