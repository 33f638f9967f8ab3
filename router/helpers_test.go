package router

// Helpers shared by the package's tests.

import (
	"slices"
	"testing"

	"github.com/adprouter/adprouter/router/internal/invariants"
)

// countsAllocations skips a test that counts allocations in an invariants
// build, whose checks allocate.
func countsAllocations(t testing.TB) {
	t.Helper()
	if invariants.Enabled {
		t.Skip("the invariants build's checks allocate")
	}
}

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

// config is DefaultConfig(policy, size) as set changes it; the helpers
// below name the changes the tests make most.
func config(policy Policy, size int, set func(*Config)) Config {
	c := DefaultConfig(policy, size)
	set(&c)
	return c
}

// kvCfg is the KV-aware policy with TensorRT-LLM's three tuning knobs.
func kvCfg(size int, beta, threshold, mult float64) Config {
	return config(PolicyKVCacheAware, size, func(c *Config) {
		c.LoadBalanceWeight, c.MatchRateThreshold, c.FairShareMultiplier = beta, threshold, mult
	})
}

// capCfg is policy with capacity-aware routing on.
func capCfg(policy Policy, size int) Config {
	return config(policy, size, func(c *Config) { c.CapacityAware = true })
}

// sourceCfg is the KV-aware policy reading prefixes from source.
func sourceCfg(size int, source PrefixSource) Config {
	return config(PolicyKVCacheAware, size, func(c *Config) { c.PrefixSource = source })
}
