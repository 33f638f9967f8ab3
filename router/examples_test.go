package router

import (
	"fmt"
	"slices"
	"testing"
)

// st builds rank states from (active requests, active tokens) pairs.
func st(pairs ...[2]int64) []RankState {
	s := make([]RankState, len(pairs))
	for i, p := range pairs {
		s[i] = RankState{Rank: i, NumActiveRequests: int(p[0]), NumActiveTokens: p[1]}
	}
	return s
}

func idle(n int) []RankState { return st(make([][2]int64, n)...) }

// prompt returns the tokens 0..n-1.
func prompt(n int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32(i)
	}
	return t
}

func req(id uint64, n int) Request {
	return Request{ID: id, Tokens: prompt(n), TargetRank: NoTarget}
}

func targeted(id uint64, n, target int, strict bool) Request {
	q := req(id, n)
	q.TargetRank, q.Strict = target, strict
	return q
}

func conv(id uint64, convID string) Request {
	q := req(id, 10)
	q.ConversationID = convID
	return q
}

func mustNew(t testing.TB, cfg Config) *Router {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return r
}

func mustRoute(t testing.TB, r *Router, states []RankState, reqs []Request, maxn int, matches []int32) *Result {
	t.Helper()
	res, err := r.Route(states, reqs, maxn, matches)
	if err != nil {
		t.Fatalf("Route: %v", err)
	}
	return res
}

func assign(lists ...[]uint64) [][]uint64 {
	for i := range lists {
		if lists[i] == nil {
			lists[i] = []uint64{}
		}
	}
	return lists
}

func eqAssign(a, b [][]uint64) bool {
	return slices.EqualFunc(a, b, func(x, y []uint64) bool { return slices.Equal(x, y) })
}

// matchTable builds a row-major [request][rank] match table from per-rank
// maps of request index -> match.
func matchTable(nreq, size int, f func(req, rank int) int32) []int32 {
	m := make([]int32, nreq*size)
	for i := range nreq {
		for k := range size {
			m[i*size+k] = f(i, k)
		}
	}
	return m
}

func kvCfg(size int, beta, threshold, mult float64) Config {
	c := DefaultConfig(PolicyKVCacheAware, size)
	c.LoadBalanceWeight, c.MatchRateThreshold, c.FairShareMultiplier = beta, threshold, mult
	return c
}

// The worked examples of ROUTING.md, verbatim.
func TestWorkedExamples(t *testing.T) {
	eightSame := func(first uint64) []Request {
		var q []Request
		for id := first; id < first+8; id++ {
			q = append(q, req(id, 10))
		}
		return q
	}
	eightMatched := func() ([]Request, []int32) {
		var q []Request
		for id := range uint64(8) {
			q = append(q, req(id, 100))
		}
		return q, matchTable(8, 4, func(_, k int) int32 {
			if k == 0 {
				return 80
			}
			return 0
		})
	}
	ex4reqs, ex4matches := eightMatched()
	tests := []struct {
		name     string
		cfg      Config
		states   []RankState
		reqs     []Request
		maxn     int
		matches  []int32
		want     [][]uint64
		expected int
	}{
		{
			name:   "1 default relaxed targets",
			cfg:    DefaultConfig(PolicyDefault, 4),
			states: st([2]int64{2, 10}, [2]int64{1, 5}, [2]int64{3, 15}, [2]int64{0, 8}),
			reqs:   []Request{targeted(1, 3, 0, false), targeted(2, 3, 1, false)},
			maxn:   8, want: assign([]uint64{1}, []uint64{2}, nil, nil), expected: 3,
		},
		{
			name:   "2 default balancing",
			cfg:    DefaultConfig(PolicyDefault, 4),
			states: st([2]int64{0, 10}, [2]int64{0, 15}, [2]int64{0, 20}, [2]int64{0, 25}),
			reqs:   []Request{req(0, 3), req(1, 3), req(2, 3), req(3, 3), req(4, 3), req(5, 3), req(6, 3)},
			maxn:   3, want: assign([]uint64{0, 1}, []uint64{2, 3}, []uint64{4, 5}, []uint64{6}), expected: 2,
		},
		{
			name:    "3 kv load beats cache",
			cfg:     kvCfg(2, 10, 0.1, 2),
			states:  st([2]int64{5, 5000}, [2]int64{0, 0}),
			reqs:    []Request{req(1, 100)},
			maxn:    8,
			matches: []int32{80, 0},
			want:    assign(nil, []uint64{1}), expected: 6,
		},
		{
			name: "4 kv multiplier 4", cfg: kvCfg(4, 0.1, 0, 4), states: idle(4),
			reqs: ex4reqs, maxn: 100, matches: ex4matches,
			want: assign([]uint64{0, 1, 2, 3, 4, 5, 6, 7}, nil, nil, nil), expected: 8,
		},
		{
			name: "4 kv multiplier 1", cfg: kvCfg(4, 0.1, 0, 1), states: idle(4),
			reqs: ex4reqs, maxn: 100, matches: ex4matches,
			want: assign([]uint64{0, 1}, []uint64{4, 5}, []uint64{2, 7}, []uint64{3, 6}), expected: 2,
		},
		{
			name: "7 kv tie-break ids 0..7", cfg: DefaultConfig(PolicyKVCacheAware, 4), states: idle(4),
			reqs: eightSame(0), maxn: 100,
			want: assign([]uint64{3, 5}, []uint64{2, 7}, []uint64{0, 4}, []uint64{1, 6}), expected: 4,
		},
		{
			name: "8 kv tie-break ids 100..107", cfg: DefaultConfig(PolicyKVCacheAware, 4), states: idle(4),
			reqs: eightSame(100), maxn: 100,
			want: assign([]uint64{100, 105}, []uint64{103, 104}, []uint64{102, 106}, []uint64{101, 107}), expected: 4,
		},
		{
			name: "6 conversation least_queued",
			cfg: func() Config {
				c := DefaultConfig(PolicyConversation, 4)
				c.NewConvPlacement = PlacementLeastQueued
				return c
			}(),
			states: st([2]int64{3, 30}, [2]int64{0, 0}, [2]int64{2, 20}, [2]int64{3, 30}),
			reqs:   []Request{conv(0, "a"), conv(1, "b"), conv(2, "c"), conv(3, "d")},
			maxn:   1000,
			want:   assign(nil, []uint64{0, 1, 2}, []uint64{3}, nil), expected: 6,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := mustRoute(t, mustNew(t, tc.cfg), tc.states, tc.reqs, tc.maxn, tc.matches)
			if !eqAssign(res.Assignment, tc.want) {
				t.Errorf("assignment = %v, want %v", res.Assignment, tc.want)
			}
			if res.Expected != tc.expected {
				t.Errorf("expected = %d, want %d", res.Expected, tc.expected)
			}
			if len(res.Unassigned) != 0 {
				t.Errorf("unassigned = %v, want none", res.Unassigned)
			}
		})
	}
}

func TestWorkedExample5Warmup(t *testing.T) {
	cfg := DefaultConfig(PolicyKVCacheAware, 4)
	cfg.ColdStartWarmup = true
	r := mustNew(t, cfg)
	res := mustRoute(t, r, idle(4), []Request{targeted(0, 10, 2, true), req(1, 10)}, 8, nil)
	if want := assign([]uint64{1}, nil, []uint64{0}, nil); !eqAssign(res.Assignment, want) {
		t.Errorf("assignment = %v, want %v", res.Assignment, want)
	}
	if got, want := r.PendingWarmup(), []int{1, 3}; !slices.Equal(got, want) {
		t.Errorf("pending warmup = %v, want %v", got, want)
	}
}

func ExampleRouter_Route() {
	r, err := New(DefaultConfig(PolicyKVCacheAware, 2))
	if err != nil {
		panic(err)
	}
	states := []RankState{
		{Rank: 0, NumActiveRequests: 1, NumActiveTokens: 900},
		{Rank: 1, NumActiveRequests: 1, NumActiveTokens: 100},
	}
	reqs := []Request{
		{ID: 7, NumTokens: 1000, TargetRank: NoTarget},
		{ID: 8, NumTokens: 1000, TargetRank: NoTarget},
	}
	// Rank 0 already caches 960 tokens of request 7's prompt.
	matches := []int32{
		960, 0, // request 7 on ranks 0 and 1
		0, 0, // request 8
	}
	res, err := r.Route(states, reqs, 8, matches)
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Assignment, res.Expected, res.Unassigned)
	// Output: [[7] [8]] 4 []
}
