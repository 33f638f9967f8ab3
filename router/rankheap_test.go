package router

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// The heap's top is always the open rank a scan picks: the smallest
// (tokens, count, rank), as loads grow and ranks fill up.
func TestRankHeapMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 500 {
		size := 1 + rng.IntN(70)
		limit := 1 + rng.IntN(6)
		tokens := make([]int64, size)
		count := make([]int, size)
		for k := range size {
			tokens[k] = int64(rng.IntN(4) * 100) // many ties
			count[k] = rng.IntN(limit + 1)
		}
		var h rankHeap
		h.reset(tokens, count, func(k int) bool { return count[k] < limit })
		for step := 0; ; step++ {
			want := -1
			for k := range size {
				if count[k] < limit && (want < 0 || tokens[k] < tokens[want] ||
					tokens[k] == tokens[want] && count[k] < count[want]) {
					want = k
				}
			}
			if got := h.top(); got != want {
				t.Fatalf("trial %d step %d: top %d, the scan picks %d (tokens %v, count %v)", trial, step, got, want, tokens, count)
			}
			if want < 0 {
				break
			}
			tokens[want] += int64(rng.IntN(3) * 100)
			count[want]++
			h.raised(count[want] < limit)
		}
	}
}

// longestFirst is a stable sort by length, longest first, whatever the
// lengths: few distinct ones, a few thousand (the radix sort's two passes),
// spread up to MaxTokens (pdqsort on wide keys), and, in the last trial, a
// batch whose keys exceed 64 bits (the stable sort).
func TestLongestFirstIsStable(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	r := &Router{}
	const trials = 303 // the last one mixes every length
	for trial := range trials {
		n := rng.IntN(1500)
		if trial == trials-1 {
			n = 1<<15 + 1 // 16 position bits, 50 of length
		}
		b := &batch{reqs: make([]Request, n)}
		for i := range b.reqs {
			switch rng.IntN(10) {
			case 0:
				b.reqs[i].NumTokens = MaxTokens - rng.IntN(3)
			case 1, 2, 3:
				b.reqs[i].NumTokens = 1 << 40 * rng.IntN(2) // 0 (no tokens) or 2^40
			case 4, 5:
				b.reqs[i].NumTokens = 1 + rng.IntN(5000)
			default:
				b.reqs[i].NumTokens = 1 + rng.IntN(8)
			}
		}
		if trial%3 == 0 { // a few thousand tokens apart at most
			for i := range b.reqs {
				b.reqs[i].NumTokens %= 5001
			}
		} else if trial%3 == 1 { // eight lengths
			for i := range b.reqs {
				b.reqs[i].NumTokens %= 8
			}
		}
		rest := rng.Perm(n)
		want := slices.Clone(rest)
		slices.SortStableFunc(want, func(x, y int) int { return b.reqs[y].Len() - b.reqs[x].Len() })
		r.longestFirst(b, rest)
		if !slices.Equal(rest, want) {
			t.Fatalf("trial %d (%d requests): %v, want %v", trial, n, rest, want)
		}
	}
}
