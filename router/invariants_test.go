package router

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The invariant checks catch each kind of corruption they look for (they
// run in every decision of an invariants build: go test -tags invariants).
func TestInvariantChecksCatchCorruption(t *testing.T) {
	tokens := []float64{10, 5, 5, 20}
	count := []int{1, 0, 0, 3}
	initial, eligible := []int{0, 1, 2, 3}, []int{0, 1, 2} // rank 3 reached the soft cap 3
	good := lowestLoads{load: 5, count: 2, first: 1}
	assert.NotPanics(t, func() { checkKVLoop(initial, eligible, count, 3, tokens, true, 20, &good) })
	for name, f := range map[string]func(){
		"a rank left eligible at the cap": func() { checkKVLoop(initial, []int{0, 1, 2, 3}, count, 3, tokens, true, 40, &good) },
		"a stale running sum":             func() { checkKVLoop(initial, eligible, count, 3, tokens, true, 21, &good) },
		"a stale lowest-load count": func() {
			checkKVLoop(initial, eligible, count, 3, tokens, true, 20, &lowestLoads{load: 5, count: 1, first: 1})
		},
		"a stale lowest load": func() {
			checkKVLoop(initial, eligible, count, 3, tokens, true, 20, &lowestLoads{load: 4, count: 2, first: -1})
		},
	} {
		assert.Panics(t, f, name)
	}

	h := rankHeap{}
	htokens, hcount := []int64{7, 3, 3}, []int{0, 0, 1}
	h.reset(htokens, hcount, func(k int) bool { return hcount[k] < 2 })
	assert.NotPanics(t, func() { checkRankHeap(&h, hcount, htokens, 2) })
	htokens[0] = 1 // raised without telling the heap: its top is stale
	assert.Panics(t, func() { checkRankHeap(&h, hcount, htokens, 2) })

	states := []RankState{{Rank: 0, NumActiveRequests: 1, NumActiveTokens: 100}, {Rank: 1}}
	assert.NotPanics(t, func() { checkQueued([]int64{100, 0}, states) })
	assert.Panics(t, func() { checkQueued([]int64{101, 0}, states) })
	assert.Panics(t, func() { checkQueued([]int64{0, 5}, states) })
}
