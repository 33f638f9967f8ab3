package router

// RankState is what one rank reports about itself before a routing decision;
// the executor allgathers these so every rank routes on the same picture.
type RankState struct {
	// Rank is the rank's index; states[i].Rank must equal i.
	Rank int
	// NumActiveRequests is the number of requests the rank is serving.
	NumActiveRequests int
	// NumActiveTokens is the token load of those requests, in TensorRT-LLM's
	// units: for the KV-aware policy the sum of their uncached prompt tokens
	// (prompt length minus cached tokens, the unit the policy adds per
	// placement), for the others the sum of their prompt lengths.
	NumActiveTokens int64

	// KVCapacityTokens is the rank's admissible KV pool in tokens: the
	// engine's pool (blocks × tokens per block), shrunk when the GPU is under
	// memory pressure (see package nvml). 0 means unknown: the rank is then
	// treated as having unlimited room.
	KVCapacityTokens int64
	// FreeKVTokens is how many more tokens the rank's pool can take now
	// (0..KVCapacityTokens); read only when KVCapacityTokens > 0.
	FreeKVTokens int64
	// MemoryPressure reports that the rank's GPU has less free memory than
	// its guard band. Informational: the shrinkage is already in the two
	// fields above.
	MemoryPressure bool

	// PendingKVTokens is the KV, in tokens, the rank's active requests will
	// still take from its pool beyond what FreeKVTokens shows taken: a
	// request the engine has not admitted yet its whole sequence
	// (TensorRT-LLM's GUARANTEED_NO_EVICT scheduler reserves prompt +
	// max_tokens at admission), an admitted one what it has yet to
	// allocate. Counting a prefix the request will reuse from the cache
	// over-counts, which only makes the rank look fuller. Read only when
	// ReportsPendingKV is set and KVCapacityTokens > 0; it may exceed the
	// pool (requests queue for memory).
	PendingKVTokens int64
	// ReportsPendingKV says PendingKVTokens is filled. Without it the KV
	// room (CapacityAware, ScoreTTFT) starts from the free KV alone, less,
	// under ScoreTTFT, the prefill the router placed there and estimates
	// not yet computed.
	ReportsPendingKV bool

	// EvictableKVTokens is how many of FreeKVTokens are cached prefix
	// blocks no request holds: the engine counts them free (it evicts them
	// when it needs the room), and a request that reuses one takes it out
	// of the free pool. Read only when ReportsEvictableKV is set and
	// KVCapacityTokens > 0; 0..FreeKVTokens. Without it the ttft score
	// cannot tell whether a request's computed prefix on a rank is held by
	// other requests (its reuse then needs no room) or among the free
	// tokens, and takes the most it can be, FreeKVTokens: only the part of
	// the prefix beyond the free tokens is surely held. (A prefix still in
	// flight there, placed and not computed, is held by the request
	// computing it, whatever the report.)
	EvictableKVTokens int64
	// ReportsEvictableKV says EvictableKVTokens is filled.
	ReportsEvictableKV bool
}

// pendingKV returns the KV tokens s reports its active requests will still
// take (0 when it does not report them), and whether it reports them.
func (s *RankState) pendingKV() (int64, bool) {
	if !s.ReportsPendingKV || s.KVCapacityTokens <= 0 {
		return 0, false
	}
	return s.PendingKVTokens, true
}

// heldMatch returns how many of the match cached prompt tokens on rank
// state s are, beyond doubt, held by other requests rather than among its
// free tokens: the match beyond the evictable tokens s reports, or, where
// it reports none, beyond its free tokens (the evictable ones are among
// them); 0 when s reports no KV pool.
func (s *RankState) heldMatch(match int) int {
	if s.KVCapacityTokens <= 0 {
		return 0
	}
	evictable := s.FreeKVTokens
	if s.ReportsEvictableKV {
		evictable = s.EvictableKVTokens
	}
	return int(max(int64(match)-evictable, 0))
}

// NoTarget is the TargetRank of a request without a target rank.
const NoTarget = -1

// Request is one new request to place.
type Request struct {
	// ID identifies the request; unique within a batch. It also seeds the
	// KV-aware policy's Python-compatible tie-break.
	ID uint64
	// Tokens holds the prompt, or only its beginning when NumTokens gives the
	// full length. The KV-aware policy reads at most the first
	// PrefixTokens tokens; the other policies read none.
	Tokens []int32
	// NumTokens is the prompt length; 0 means len(Tokens). It must not be
	// smaller than len(Tokens).
	NumTokens int
	// TargetRank is the rank the request asks for, or NoTarget. Because 0 is
	// a valid rank, a Request literal without a target must say
	// TargetRank: NoTarget.
	TargetRank int
	// Strict is TensorRT-LLM's attention_dp_relax = false: a strict request
	// with a target sorts before relaxed ones. The zero value (relaxed) is
	// the reference default.
	Strict bool
	// ConversationID ties turns of one conversation together for the
	// conversation policy; "" means none.
	ConversationID string
	// LoRAID and CacheSalt scope the prefix index: blocks of requests with
	// different adapters or salts never match each other. (With the probe
	// source the caller's match lengths are already scoped.)
	LoRAID    uint64
	CacheSalt uint64
	// MaxNewTokens is the output, in tokens, the engine reserves KV for
	// when it admits the request (TensorRT-LLM: its max_tokens); 0 means
	// unknown. The KV room (CapacityAware, ScoreTTFT) then counts the
	// request's prompt and this output, as the engine will reserve them.
	MaxNewTokens int
}

// PrefixTokens is how many leading prompt tokens the KV-aware policy uses to
// group requests that share a prefix.
const PrefixTokens = 64

// Len returns the request's token count n.
func (q *Request) Len() int {
	if q.NumTokens > 0 {
		return q.NumTokens
	}
	return len(q.Tokens)
}

// seqLen returns the tokens of KV the engine reserves for the request: its
// prompt and the output it reserves for (MaxNewTokens, 0 when unknown).
func (q *Request) seqLen() int { return q.Len() + q.MaxNewTokens }

func (q *Request) hasTarget() bool { return q.TargetRank != NoTarget }

// Unplaced is the rank recorded in Result.Ranks for a request that could not
// be placed.
const Unplaced = -1

// Result is the outcome of one routing decision.
type Result struct {
	// Assignment[r] lists the ids placed on rank r in the order the rank
	// should queue them: placement order (explicit placements first),
	// except that under ScoreTTFT a rank whose scored requests spill past
	// one iteration gets them shortest first (docs/ROUTING.md, "Hand-over
	// order"). It has one entry per rank.
	Assignment [][]uint64
	// Ranks[i] is the rank requests[i] was placed on, or Unplaced.
	Ranks []int
	// Expected is expected_num_active_requests: the per-rank target the
	// executor pads idle ranks up to.
	Expected int
	// Unassigned lists, in input order, the ids that could not be placed
	// because every rank was full or, under Config.Score = ScoreTTFT, that
	// wait for a full rank holding their prompt (ReasonHeld) or for their
	// prompt in flight (ReasonHeldInFlight). The caller must offer them
	// again, first; the reference would have dropped them or raised.
	Unassigned []uint64
}

// reset prepares r for a decision over dpSize ranks and n requests, reusing
// its slices.
func (r *Result) reset(dpSize, n int) {
	if cap(r.Assignment) < dpSize {
		r.Assignment = make([][]uint64, dpSize)
	}
	r.Assignment = r.Assignment[:dpSize]
	for i := range r.Assignment {
		r.Assignment[i] = r.Assignment[i][:0]
	}
	if cap(r.Ranks) < n {
		r.Ranks = make([]int, n)
	}
	r.Ranks = r.Ranks[:n]
	for i := range r.Ranks {
		r.Ranks[i] = Unplaced
	}
	r.Unassigned = r.Unassigned[:0]
	r.Expected = 0
}
