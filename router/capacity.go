package router

import "math"

// kvRoom tracks, during one decision with Config.CapacityAware set (or
// under ScoreTTFT), how many more KV tokens each rank can take: its
// reported free tokens, less the KV its active requests will still take
// where it reports that (RankState.PendingKVTokens), less what this batch
// has placed on it (uncached prompt tokens and the output each request
// reserves for). A rank that reports no capacity has unlimited room.
type kvRoom struct {
	on     bool
	room   []int64
	filter []bool
}

func (k *kvRoom) reset(on bool, states []RankState) {
	k.on = on
	if !on {
		return
	}
	k.room = k.room[:0]
	for i := range states {
		s := &states[i]
		if s.KVCapacityTokens > 0 {
			pending, _ := s.pendingKV()
			k.room = append(k.room, s.FreeKVTokens-pending)
		} else {
			k.room = append(k.room, math.MaxInt64)
		}
	}
}

// take records that rank now holds uncached more tokens.
func (k *kvRoom) take(rank, uncached int) {
	if k.on && k.room[rank] != math.MaxInt64 {
		k.room[rank] -= int64(uncached)
	}
}

// allow returns, for the candidate ranks cands, which may take request q
// of which match[rank] prompt tokens are cached on each rank (nil: none):
// those whose room holds the KV it would reserve there (its sequence,
// Request.seqLen, less the match), or, when none does, those with the most
// headroom. It returns nil (every candidate allowed) when capacity
// awareness is off.
func (k *kvRoom) allow(cands []int, q *Request, match []int) []bool {
	if !k.on {
		return nil
	}
	f := k.filter[:0]
	for range k.room {
		f = append(f, false)
	}
	k.filter = f
	need := func(r int) int { return roomNeed(q, match, r) }
	fits := false
	best := int64(math.MinInt64)
	for _, r := range cands {
		h := k.room[r] - int64(need(r))
		if k.room[r] == math.MaxInt64 {
			h = math.MaxInt64
		}
		if h >= 0 {
			f[r], fits = true, true
		}
		best = max(best, h)
	}
	if !fits {
		for _, r := range cands {
			f[r] = k.room[r]-int64(need(r)) == best
		}
	}
	return f
}

// roomNeed returns the KV tokens request q would reserve on rank r, of which
// match[r] prompt tokens are cached there (match nil: none): its sequence
// (Request.seqLen) less the match.
func roomNeed(q *Request, match []int, r int) int {
	if match == nil {
		return q.seqLen()
	}
	return max(q.seqLen()-match[r], 0)
}

// left returns rank's room: its reported free tokens less what has been
// placed on it; math.MaxInt64 when capacity awareness is off or the rank
// reports no capacity.
func (k *kvRoom) left(rank int) int64 {
	if !k.on {
		return math.MaxInt64
	}
	return k.room[rank]
}

func allowed(f []bool, rank int) bool { return f == nil || f[rank] }
