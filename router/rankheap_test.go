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
// lengths (the huge ones take the fallback).
func TestLongestFirstIsStable(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	r := &Router{}
	for trial := range 300 {
		n := rng.IntN(300)
		b := &batch{reqs: make([]Request, n)}
		for i := range b.reqs {
			switch rng.IntN(10) {
			case 0:
				b.reqs[i].NumTokens = MaxTokens - rng.IntN(3)
			case 1, 2, 3:
				b.reqs[i].NumTokens = 1 << 40 * rng.IntN(2) // 0 (no tokens) or the first fallback length
			default:
				b.reqs[i].NumTokens = 1 + rng.IntN(8)
			}
		}
		if trial%2 == 0 { // the fast path only
			for i := range b.reqs {
				b.reqs[i].NumTokens %= 1 << 39
			}
		}
		rest := rng.Perm(n)
		want := slices.Clone(rest)
		slices.SortStableFunc(want, func(x, y int) int { return b.reqs[y].Len() - b.reqs[x].Len() })
		r.longestFirst(b, rest)
		if !slices.Equal(rest, want) {
			t.Fatalf("trial %d: %v, want %v", trial, rest, want)
		}
	}
}
