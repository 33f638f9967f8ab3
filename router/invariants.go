package router

import (
	"fmt"
	"slices"
)

// Checks of the state the decision loops keep incrementally, against a
// recount from scratch. They run only in a build with -tags invariants
// (router/internal/invariants), after every change they check; a failure
// panics with what differed, since it can only be a bug in the router.

// checkKVLoop verifies routeKVAware's scoring state after a placement: the
// eligible ranks are the ranks that were eligible when scoring began and are
// still under the soft cap, in the same order; eligSum (when the running sum
// is in use) is their loads' sum; and the lowest-load set, when known, is
// what a scan of the eligible ranks finds.
func checkKVLoop(initial, eligible, count []int, expected int, tokens []float64, running bool, eligSum float64,
	lows *lowestLoads) {
	want := slices.DeleteFunc(slices.Clone(initial), func(k int) bool { return count[k] >= expected })
	if !slices.Equal(eligible, want) {
		panic(fmt.Sprintf("router invariant: eligible ranks %v, a recount gives %v (counts %v, soft cap %d)",
			eligible, want, count, expected))
	}
	if running {
		var sum float64
		for _, k := range eligible {
			sum += tokens[k]
		}
		if sum != eligSum {
			panic(fmt.Sprintf("router invariant: running sum of eligible loads %v, a recount gives %v", eligSum, sum))
		}
	}
	if lows.count > 0 {
		first, load, n := lowestLoad(eligible, nil, tokens)
		if load != lows.load || n != lows.count || (lows.first >= 0 && lows.first != first) {
			panic(fmt.Sprintf("router invariant: lowest-load set (first %d, load %v, %d ranks), a scan gives (%d, %v, %d)",
				lows.first, lows.load, lows.count, first, load, n))
		}
	}
}

// checkRankHeap verifies the default policy's heap: it holds exactly the
// ranks under the soft cap, each once with its current key, in heap order,
// and its top is the rank a scan picks (the smallest (tokens, count, rank)).
func checkRankHeap(h *rankHeap, count []int, tokens []int64, expected int) {
	var open []int32
	for k := range count {
		if count[k] < expected {
			open = append(open, int32(k))
		}
	}
	var got []int32
	for i, e := range h.ents {
		got = append(got, int32(e.rank()))
		if e != entryOf(e.rank(), tokens, count) {
			panic(fmt.Sprintf("router invariant: heap entry %+v of rank %d is stale: %d tokens, count %d",
				e, e.rank(), tokens[e.rank()], count[e.rank()]))
		}
		if i > 0 && e.less(h.ents[(i-1)/2]) {
			panic(fmt.Sprintf("router invariant: heap order broken at %d: %v", i, h.ents))
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, open) {
		panic(fmt.Sprintf("router invariant: heap holds ranks %v, the open ranks are %v", got, open))
	}
	best := -1
	for k := range count {
		if count[k] < expected && (best < 0 || tokens[k] < tokens[best] ||
			tokens[k] == tokens[best] && count[k] < count[best]) {
			best = k
		}
	}
	if h.top() != best {
		panic(fmt.Sprintf("router invariant: heap top %d, a scan picks %d", h.top(), best))
	}
}

// checkQueued verifies the ttft score's queued prefill after a call's
// drain: never negative, nothing on a rank without active requests, never
// more than the uncached tokens the rank reports active, and never less
// than those its KV pool shows must still wait (waitingAtLeast).
func checkQueued(queued []int64, states []RankState) {
	for k, q := range queued {
		s := &states[k]
		if q < 0 || (s.NumActiveRequests == 0 && q != 0) || q > max(s.NumActiveTokens, 0) ||
			(s.NumActiveRequests > 0 && q < waitingAtLeast(s)) {
			panic(fmt.Sprintf("router invariant: rank %d queued prefill %d with %d active requests of %d tokens, KV capacity %d",
				k, q, s.NumActiveRequests, s.NumActiveTokens, s.KVCapacityTokens))
		}
	}
}
