package router

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/adprouter/adprouter/router/internal/prefix"
)

// Table-driven tests for every rule of docs/ROUTING.md. Each expected output was
// computed by hand from the spec; the comment on each case says why.

// ruleCall is one Route call of a rule case and what it must return.
type ruleCall struct {
	states     []RankState
	reqs       []Request
	maxn       int
	matches    []int32
	want       [][]uint64
	expected   int
	unassigned []uint64 // nil: none
	// then, if set, checks router state after the call.
	then func(t *testing.T, r *Router)
}

type ruleCase struct {
	name  string
	cfg   Config
	calls []ruleCall
}

func runRuleCases(t *testing.T, cases []ruleCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := mustNew(t, tc.cfg)
			for ci, c := range tc.calls {
				res := mustRoute(t, r, c.states, c.reqs, c.maxn, c.matches)
				if !eqAssign(res.Assignment, c.want) {
					t.Errorf("call %d: assignment = %v, want %v", ci, res.Assignment, c.want)
				}
				if res.Expected != c.expected {
					t.Errorf("call %d: expected = %d, want %d", ci, res.Expected, c.expected)
				}
				if !slices.Equal(res.Unassigned, c.unassigned) {
					t.Errorf("call %d: unassigned = %v, want %v", ci, res.Unassigned, c.unassigned)
				}
				if err := checkResult(tc.cfg, c.states, c.reqs, c.maxn, res); err != nil {
					t.Errorf("call %d: %v", ci, err)
				}
				if c.then != nil {
					c.then(t, r)
				}
			}
		})
	}
}

// Request builders beyond those of examples_test.go.

func strictNoTarget(id uint64, n int) Request {
	q := req(id, n)
	q.Strict = true
	return q
}

func withTokens(id uint64, tokens []int32, numTokens int) Request {
	return Request{ID: id, Tokens: tokens, NumTokens: numTokens, TargetRank: NoTarget}
}

func convT(id uint64, convID string, target int, strict bool) Request {
	q := conv(id, convID)
	q.TargetRank, q.Strict = target, strict
	return q
}

func tokensByRank(tokens ...int64) []RankState {
	s := make([]RankState, len(tokens))
	for i, tok := range tokens {
		s[i] = RankState{Rank: i, NumActiveTokens: tok}
	}
	return s
}

func repeatTok(v int32, n int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = v
	}
	return t
}

func convCfg(size int, placement Placement, mult float64, maxSessions int) Config {
	return config(PolicyConversation, size, func(c *Config) {
		c.NewConvPlacement, c.FairShareMultiplier, c.MaxSessions = placement, mult, maxSessions
	})
}

func warmCfg(size int) Config {
	return config(PolicyKVCacheAware, size, func(c *Config) { c.ColdStartWarmup = true })
}

func wantPending(want ...int) func(t *testing.T, r *Router) {
	return func(t *testing.T, r *Router) {
		t.Helper()
		if got := r.PendingWarmup(); !slices.Equal(got, want) {
			t.Errorf("PendingWarmup() = %v, want %v", got, want)
		}
	}
}

// wantConv checks bindings: rank >= 0 means bound there, -1 means unbound.
func wantConv(n int, bindings map[string]int) func(t *testing.T, r *Router) {
	return func(t *testing.T, r *Router) {
		t.Helper()
		keys := make([]string, 0, len(bindings))
		for k := range bindings {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			want := bindings[k]
			got, ok := r.Conversation(k)
			switch {
			case want < 0 && ok:
				t.Errorf("Conversation(%q) = %d, want unbound", k, got)
			case want >= 0 && (!ok || got != want):
				t.Errorf("Conversation(%q) = %d, %v, want %d", k, got, ok, want)
			}
		}
		if n >= 0 && r.NumConversations() != n {
			t.Errorf("NumConversations() = %d, want %d", r.NumConversations(), n)
		}
	}
}

func one(c ruleCall) []ruleCall { return []ruleCall{c} }

func u(ids ...uint64) []uint64 { return ids }

func TestRelaxSorting(t *testing.T) {
	// Strict 2 and relaxed 1 both target rank 0, which can take one request
	// (maxn 1): every policy sorts the strict request first.
	strictFirst := one(ruleCall{states: idle(2), maxn: 1,
		reqs: []Request{targeted(1, 10, 0, false), targeted(2, 10, 0, true)},
		want: assign(u(2), u(1)), expected: 1})
	runRuleCases(t, []ruleCase{
		{
			// Sorted [2, 1]: strict 2 takes rank 0 (maxn 1); relaxed 1 finds
			// its target full and is balanced to rank 1. Arrival order would
			// have given [1] [2].
			name:  "default strict target before relaxed target",
			cfg:   DefaultConfig(PolicyDefault, 2),
			calls: strictFirst,
		},
		{
			// Strict without a target is not "strict": order stays [1, 2];
			// expected = ceil(2/2) = 1; 1 takes the lighter rank 0, which then
			// closes; 2 gets rank 1.
			name: "default strict without target keeps arrival order",
			cfg:  DefaultConfig(PolicyDefault, 2),
			calls: one(ruleCall{states: st([2]int64{0, 0}, [2]int64{0, 5}), maxn: 8,
				reqs: []Request{req(1, 10), strictNoTarget(2, 10)},
				want: assign(u(1), u(2)), expected: 1}),
		},
		{
			// Strict 2's target (rank 0, count 1 = maxn) is full, so it falls
			// through but stays ahead of relaxed 1 in the balancing order:
			// expected = min(max(ceil(3/2), 1), 1) = 1, only rank 1 is open,
			// 2 takes it and 1 is unassigned.
			name: "default fallen-through strict request balanced first",
			cfg:  DefaultConfig(PolicyDefault, 2),
			calls: one(ruleCall{states: st([2]int64{1, 0}, [2]int64{0, 100}), maxn: 1,
				reqs: []Request{req(1, 10), targeted(2, 10, 0, true)},
				want: assign(nil, u(2)), expected: 1, unassigned: u(1)}),
		},
		{
			// Same as the default case: strict 2 first takes rank 0; expected
			// = min(max(ceil(2*1), 1), 1) = 1 so only rank 1 is eligible for 1.
			name:  "kv strict target before relaxed target",
			cfg:   kvCfg(2, 1, 0.1, 2),
			calls: strictFirst,
		},
		{
			// With warmup each untargeted request takes the smallest pending
			// rank in sorted order; strict-without-target is not strict, so 1
			// (first in arrival order) warms rank 0.
			name: "kv strict without target keeps arrival order (warmup)",
			cfg:  warmCfg(2),
			calls: one(ruleCall{states: idle(2), maxn: 8,
				reqs: []Request{req(1, 10), strictNoTarget(2, 10)},
				want: assign(u(1), u(2)), expected: 2, then: wantPending()}),
		},
		{
			// The conversation policy keys on relax alone: 2 (relax=false, no
			// target) sorts first and the round-robin cursor gives it rank 0.
			// expected = min(max(ceil(2*1), 0), 8) = 2.
			name: "conversation relax=false without target sorts first",
			cfg:  DefaultConfig(PolicyConversation, 2),
			calls: one(ruleCall{states: idle(2), maxn: 8,
				reqs: []Request{req(1, 10), strictNoTarget(2, 10)},
				want: assign(u(2), u(1)), expected: 2}),
		},
		{
			// Strict 2 first takes rank 0 (maxn 1); 1's target is full, so the
			// cursor (rank 0: full at soft cap 1) moves on to rank 1.
			name:  "conversation strict target before relaxed target",
			cfg:   DefaultConfig(PolicyConversation, 2),
			calls: strictFirst,
		},
		{
			// A relaxed request with a target goes there although rank 1 is
			// idle and rank 0 holds 1000 tokens. expected = max(ceil(2*1), 1) = 2.
			name: "kv relaxed target still taken",
			cfg:  kvCfg(2, 1, 0.1, 2),
			calls: one(ruleCall{states: st([2]int64{0, 1000}, [2]int64{0, 0}), maxn: 8,
				reqs: []Request{targeted(1, 10, 0, false)},
				want: assign(u(1), nil), expected: 2}),
		},
		{
			// Relaxed target 1 is taken (round robin would pick rank 0) and
			// binds the conversation. fair = ceil(1/2) = 1, expected 2.
			name: "conversation relaxed target taken and bound",
			cfg:  DefaultConfig(PolicyConversation, 2),
			calls: one(ruleCall{states: idle(2), maxn: 8,
				reqs: []Request{convT(1, "a", 1, false)},
				want: assign(nil, u(1)), expected: 2, then: wantConv(1, map[string]int{"a": 1})}),
		},
	})
}

func TestExplicitPlacementCapacity(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{
			// Sorted [3, 1, 2]. 3's target (count 5 > maxn 3) is past
			// capacity; 1 takes rank 0 (2 -> 3); 2 finds rank 0 at capacity.
			// expected = min(max(ceil(10/2), 5), 3) = 3: no rank is open, so 2
			// and 3 are unassigned, listed in input order.
			name: "default at and past capacity",
			cfg:  DefaultConfig(PolicyDefault, 2),
			calls: one(ruleCall{states: st([2]int64{2, 0}, [2]int64{5, 0}), maxn: 3,
				reqs: []Request{targeted(1, 1, 0, false), targeted(2, 1, 0, false), targeted(3, 1, 1, true)},
				want: assign(u(1), nil), expected: 3, unassigned: u(2, 3)}),
		},
		{
			// Rank 0 is at maxn 1: the strict request falls through to
			// balancing; expected = min(2, 1) = 1 leaves rank 1 eligible.
			name: "kv at capacity falls through",
			cfg:  kvCfg(2, 1, 0.1, 2),
			calls: one(ruleCall{states: st([2]int64{1, 0}, [2]int64{0, 0}), maxn: 1,
				reqs: []Request{targeted(1, 10, 0, true)},
				want: assign(nil, u(1)), expected: 1}),
		},
		{
			// Rank 1 has 1 of maxn 2: the first targeted request fits, the
			// second falls through and balancing sends it to rank 0.
			// expected = min(max(ceil(2*ceil(3/2)), 2), 2) = 2.
			name: "conversation at capacity falls through",
			cfg:  DefaultConfig(PolicyConversation, 2),
			calls: one(ruleCall{states: st([2]int64{0, 0}, [2]int64{1, 0}), maxn: 2,
				reqs: []Request{convT(1, "a", 1, false), convT(2, "b", 1, false)},
				want: assign(u(2), u(1)), expected: 2,
				then: wantConv(2, map[string]int{"a": 1, "b": 0})}),
		},
	})
}

func TestExpectedFormula(t *testing.T) {
	ones := func(k int) []Request {
		var q []Request
		for i := range k {
			q = append(q, req(uint64(i), 1))
		}
		return q
	}
	tens := func(k int) []Request {
		var q []Request
		for i := range k {
			q = append(q, req(uint64(i), 10))
		}
		return q
	}
	defaultMult := func(m float64) Config {
		c := DefaultConfig(PolicyDefault, 2)
		c.FairShareMultiplier = m
		return c
	}
	// Distinct rank loads make the KV policy deterministic without ties:
	// each request goes to the eligible rank with the least tokens.
	staircase := tokensByRank(0, 1000, 2000, 3000)
	runRuleCases(t, []ruleCase{
		{
			// fair = ceil(7/3) = 3 but the busiest rank has 4: expected 4.
			// Rank 0 is closed (4 >= 4); 0 -> rank 1, 1 -> rank 2 (fewer
			// tokens), 2 -> rank 1 (tie on tokens and count, lower rank).
			name: "default floor at the busiest rank",
			cfg:  DefaultConfig(PolicyDefault, 3),
			calls: one(ruleCall{states: st([2]int64{4, 0}, [2]int64{0, 0}, [2]int64{0, 0}), maxn: 10,
				reqs: ones(3), want: assign(nil, u(0, 2), u(1)), expected: 4}),
		},
		{
			// fair = 3 capped by maxn 2; four requests fit, two are unassigned.
			name: "default hard cap",
			cfg:  DefaultConfig(PolicyDefault, 2),
			calls: one(ruleCall{states: idle(2), maxn: 2, reqs: ones(6),
				want: assign(u(0, 2), u(1, 3)), expected: 2, unassigned: u(4, 5)}),
		},
		{
			// The default policy ignores fair_share_multiplier: expected is
			// fair = 2, not ceil(4*2) = 8.
			name: "default multiplier is 1 (config says 4)",
			cfg:  defaultMult(4),
			calls: one(ruleCall{states: idle(2), maxn: 100, reqs: ones(4),
				want: assign(u(0, 2), u(1, 3)), expected: 2}),
		},
		{
			name: "default multiplier is 1 (config says 0.5)",
			cfg:  defaultMult(0.5),
			calls: one(ruleCall{states: idle(2), maxn: 100, reqs: ones(4),
				want: assign(u(0, 2), u(1, 3)), expected: 2}),
		},
		{
			// fair = ceil(6/4) = 2, expected = ceil(1.5*2) = 3: rank 0 (least
			// tokens) takes three, then rank 1 takes three.
			name: "kv multiplier 1.5 rounds up",
			cfg:  kvCfg(4, 1, 0.1, 1.5),
			calls: one(ruleCall{states: staircase, maxn: 100, reqs: tens(6),
				want: assign(u(0, 1, 2), u(3, 4, 5), nil, nil), expected: 3}),
		},
		{
			// fair = ceil(10/4) = 3, ceil(2.5*3) = 8, capped at maxn 5.
			name: "kv hard cap",
			cfg:  kvCfg(4, 1, 0.1, 2.5),
			calls: one(ruleCall{states: staircase, maxn: 5, reqs: tens(10),
				want: assign(u(0, 1, 2, 3, 4), u(5, 6, 7, 8, 9), nil, nil), expected: 5}),
		},
		{
			// fair = ceil(7/4) = 2, ceil(2*2) = 4 but rank 3 has 6 active:
			// expected 6. The idle ranks are eligible up to 6 each.
			name: "kv floor at the busiest rank",
			cfg:  kvCfg(4, 1, 0.1, 2),
			calls: one(ruleCall{states: st([2]int64{0, 0}, [2]int64{0, 1000}, [2]int64{0, 2000}, [2]int64{6, 3000}), maxn: 100,
				reqs: tens(1), want: assign(u(0), nil, nil, nil), expected: 6}),
		},
	})

	// Conversation: the multiplier is clamped to >= 1. States (1, 0),
	// maxn 100, three requests without conversation: fair = ceil(4/2) = 2.
	// Clamped to 1: soft cap 2; round robin gives 0 -> rank 0, 1 -> rank 1,
	// 2 -> rank 1 (rank 0 is at 2). Unclamped 0.5 would give soft cap 1 and
	// [1] [0, 2]. Multiplier 2: soft cap 4 and [0, 2] [1], expected 4.
	var cases []ruleCase
	for _, m := range []float64{1, 0.5, 0, -1, math.Copysign(0, -1)} {
		cases = append(cases, ruleCase{
			name: "conversation multiplier clamped " + ftoa(m),
			cfg:  convCfg(2, PlacementRoundRobin, m, 100),
			calls: one(ruleCall{states: st([2]int64{1, 0}, [2]int64{0, 0}), maxn: 100, reqs: tens(3),
				want: assign(u(0), u(1, 2)), expected: 2}),
		})
	}
	cases = append(cases, ruleCase{
		name: "conversation multiplier 2",
		cfg:  convCfg(2, PlacementRoundRobin, 2, 100),
		calls: one(ruleCall{states: st([2]int64{1, 0}, [2]int64{0, 0}), maxn: 100, reqs: tens(3),
			want: assign(u(0, 2), u(1)), expected: 4}),
	})
	runRuleCases(t, cases)
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// The soft cap must reach maxn for any finite multiplier, however large:
// ceil(multiplier * fair) overflows int64 beyond 2^63.
func TestHugeFairShareMultiplier(t *testing.T) {
	for _, m := range []float64{1e17, 1e19, 1e300, math.MaxFloat64} {
		t.Run("kv "+ftoa(m), func(t *testing.T) {
			// fair = ceil(2/4) = 1; ceil(m*1) is far above maxn: expected =
			// min(max(huge, 0), 100) = 100, and both requests are placed
			// (the shuffles of ids 0 and 1 pick ranks 2 then 3, as CPython
			// does).
			r := mustNew(t, kvCfg(4, 1, 0.1, m))
			res := mustRoute(t, r, idle(4), []Request{req(0, 10), req(1, 10)}, 100, nil)
			if res.Expected != 100 || len(res.Unassigned) != 0 {
				t.Errorf("fair_share_multiplier %g: expected = %d, unassigned = %v; want expected 100 (maxn), none unassigned",
					m, res.Expected, res.Unassigned)
			}
			if want := assign(nil, nil, u(0), u(1)); !eqAssign(res.Assignment, want) {
				t.Errorf("assignment = %v, want %v", res.Assignment, want)
			}
		})
		t.Run("conversation "+ftoa(m), func(t *testing.T) {
			r := mustNew(t, convCfg(2, PlacementRoundRobin, m, 100))
			res := mustRoute(t, r, idle(2), []Request{conv(0, "a"), conv(1, "b"), conv(2, "c")}, 100, nil)
			if res.Expected != 100 {
				t.Errorf("fair_share_multiplier %g: expected = %d, want 100 (maxn)", m, res.Expected)
			}
		})
	}
}

func TestDefaultHeapOrder(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{
			// Fewest tokens wins: rank 1 (10 tokens).
			name: "tokens first",
			cfg:  DefaultConfig(PolicyDefault, 3),
			calls: one(ruleCall{states: st([2]int64{0, 30}, [2]int64{0, 10}, [2]int64{0, 20}), maxn: 10,
				reqs: []Request{req(0, 5)}, want: assign(nil, u(0), nil), expected: 1}),
		},
		{
			// All ranks hold 10 tokens; fair = ceil(7/3) = 3 = expected.
			// 0: counts (2,1,1) -> rank 1 (fewer requests, lower rank than 2).
			// 1: tokens (10,15,10), counts (2,2,1) -> rank 2.
			// 2: tokens (10,15,15) -> rank 0.
			name: "then count, then rank",
			cfg:  DefaultConfig(PolicyDefault, 3),
			calls: one(ruleCall{states: st([2]int64{2, 10}, [2]int64{1, 10}, [2]int64{1, 10}), maxn: 10,
				reqs: []Request{req(0, 5), req(1, 5), req(2, 5)}, want: assign(u(2), u(0), u(1)), expected: 3}),
		},
		{
			// Sorted by size, stable: 11 (5), 13 (5), 12 (3), 10 (1).
			// 11 -> rank 0; 13 -> rank 1; 12 -> rank 0 (tie (5,1), lower
			// rank), which closes at expected 2; 10 -> rank 1.
			name: "larger prompts first, stable among equals",
			cfg:  DefaultConfig(PolicyDefault, 2),
			calls: one(ruleCall{states: idle(2), maxn: 10,
				reqs: []Request{req(10, 1), req(11, 5), req(12, 3), req(13, 5)},
				want: assign(u(11, 12), u(13, 10)), expected: 2}),
		},
		{
			// 2 is placed explicitly on rank 0 first; the explicit pass adds
			// no tokens, so rank 0 (0 tokens) still beats rank 1 (3 tokens)
			// for 1, which is listed after the explicit placement; rank 0
			// then closes at expected 2 and 3 goes to rank 1.
			name: "explicit first, explicit pass adds no tokens",
			cfg:  DefaultConfig(PolicyDefault, 2),
			calls: one(ruleCall{states: st([2]int64{0, 0}, [2]int64{0, 3}), maxn: 10,
				reqs: []Request{req(1, 1), targeted(2, 10, 0, false), req(3, 1)},
				want: assign(u(2, 1), u(3)), expected: 2}),
		},
		{
			// NumTokens, not len(Tokens), is the size: 2 (8 tokens given,
			// 100 declared) is placed first on rank 0.
			name: "size is num_tokens",
			cfg:  DefaultConfig(PolicyDefault, 2),
			calls: one(ruleCall{states: idle(2), maxn: 10,
				reqs: []Request{req(1, 50), withTokens(2, prompt(8), 100)},
				want: assign(u(2), u(1)), expected: 1}),
		},
	})
}

func TestKVPrefixGrouping(t *testing.T) {
	// Nine ranks with loads 0, 1000, ..., 8000 and expected 1 (multiplier 1,
	// fair = 1): each request in grouped order takes the least loaded
	// eligible rank, so rank k receives the k-th request of the grouped order.
	states := make([]RankState, 9)
	for k := range states {
		states[k] = RankState{Rank: k, NumActiveTokens: int64(1000 * k)}
	}
	nines := repeatTok(9, 64)
	reqs := []Request{
		withTokens(1, []int32{5, 6, 7}, 0),
		withTokens(2, []int32{5, 6}, 0),                                   // prefix of 1: before it
		withTokens(3, nil, 0),                                             // empty prompt: first of all
		withTokens(4, []int32{5, 6, 7}, 100),                              // same prefix as 1, longer: before 1
		withTokens(5, []int32{4, 100}, 0),                                 // 4 < 5
		withTokens(6, []int32{5, 6, 7}, 0),                                // equal to 1: after it (stable)
		withTokens(7, append(slices.Clone(nines), repeatTok(2, 6)...), 0), // 70 tokens
		withTokens(8, append(slices.Clone(nines), 1), 0),                  // 65 tokens; token 65 ignored
		withTokens(9, []int32{-1}, 0),                                     // negative token: after empty, before 4
	}
	// Grouped order: 3, 9, 5, 2, 4, 1, 6, 7, 8. Were tokens beyond 64
	// compared, 8 ([..., 1]) would precede 7 ([..., 2, ...]).
	runRuleCases(t, []ruleCase{{
		name: "first 64 tokens, prefix first, empty first, longer first",
		cfg:  kvCfg(9, 1, 0.1, 1),
		calls: one(ruleCall{states: states, maxn: 100, reqs: reqs,
			want: assign(u(3), u(9), u(5), u(2), u(4), u(1), u(6), u(7), u(8)), expected: 1}),
	}})
}

func TestKVAffinityGate(t *testing.T) {
	// Rank 0 holds 1 token, rank 1 none; request n = 10. Gate off: scores
	// 10 + 1/10*10 = 11 vs 10 -> rank 1. Gate on with match m on rank 0:
	// 10 - m + 1 vs 10 -> rank 0 when m >= 2.
	states := tokensByRank(1, 0)
	oneReq := []Request{req(1, 10)}
	runRuleCases(t, []ruleCase{
		{
			name: "match/n == threshold 0.5: gate off",
			cfg:  kvCfg(2, 1, 0.5, 2),
			calls: one(ruleCall{states: states, maxn: 8, reqs: oneReq, matches: []int32{5, 0},
				want: assign(nil, u(1)), expected: 2}),
		},
		{
			name: "match/n > threshold 0.49: gate on",
			cfg:  kvCfg(2, 1, 0.49, 2),
			calls: one(ruleCall{states: states, maxn: 8, reqs: oneReq, matches: []int32{5, 0},
				want: assign(u(1), nil), expected: 2}),
		},
		{
			// 1/10 evaluates to exactly the double 0.1: not strictly greater.
			name: "match/n == default threshold 0.1: gate off",
			cfg:  DefaultConfig(PolicyKVCacheAware, 2),
			calls: one(ruleCall{states: states, maxn: 8, reqs: oneReq, matches: []int32{1, 0},
				want: assign(nil, u(1)), expected: 2}),
		},
		{
			name: "match/n 0.2 > default threshold: gate on",
			cfg:  DefaultConfig(PolicyKVCacheAware, 2),
			calls: one(ruleCall{states: states, maxn: 8, reqs: oneReq, matches: []int32{2, 0},
				want: assign(u(1), nil), expected: 2}),
		},
		{
			// Rank 2 is full (2 = expected = maxn) and is not eligible: its
			// match of 10 does not count. Over ranks 0 and 1 the best match
			// is 2/10 = 0.2, not > 0.2: gate off, rank 1 wins (10 < 11).
			// Counting rank 2 would turn the gate on and pick rank 0 (9).
			name: "gate looks at eligible ranks only",
			cfg:  kvCfg(3, 1, 0.2, 2),
			calls: one(ruleCall{states: st([2]int64{0, 1}, [2]int64{0, 0}, [2]int64{2, 0}), maxn: 2, reqs: oneReq,
				matches: []int32{2, 0, 10}, want: assign(nil, u(1), nil), expected: 2}),
		},
	})
}

func TestKVLoadBalanceWeight(t *testing.T) {
	// n = 10; rank 0 holds 100 tokens and matches 8 (gate on), rank 1 is
	// idle. denom = 100: rank 0 scores (10 - 8) + β·10, rank 1 scores 10.
	// β = 0.75: 9.5 < 10 -> rank 0. β = 0.85: 10.5 > 10 -> rank 1.
	for _, c := range []struct {
		beta float64
		want [][]uint64
	}{{0.75, assign(u(1), nil)}, {0.85, assign(nil, u(1))}, {0, assign(u(1), nil)}, {100, assign(nil, u(1))}} {
		runRuleCases(t, []ruleCase{{
			name: "beta " + ftoa(c.beta),
			cfg:  kvCfg(2, c.beta, 0.1, 2),
			calls: one(ruleCall{states: tokensByRank(100, 0), maxn: 8, reqs: []Request{req(1, 10)},
				matches: []int32{8, 0}, want: c.want, expected: 2}),
		}})
	}
}

func TestKVTieBreak(t *testing.T) {
	// Preconditions that make the first two cases meaningful: the shuffle
	// alone would pick the other rank.
	for _, c := range []struct {
		seed  uint64
		first int
	}{{0, 0}, {1, 1}} {
		x := []int{0, 1}
		PyShuffle(c.seed, x)
		if x[0] != c.first {
			t.Fatalf("precondition: Random(%d).shuffle([0, 1])[0] = %d, want %d", c.seed, x[0], c.first)
		}
	}
	runRuleCases(t, []ruleCase{
		{
			// β = 0: both scores are 10. Lower tokens (rank 1: 10 < 50) wins
			// although id 0's shuffle puts rank 0 first.
			name: "score tie, lower tokens wins (beta 0)",
			cfg:  kvCfg(2, 0, 0.1, 2),
			calls: one(ruleCall{states: tokensByRank(50, 10), maxn: 8, reqs: []Request{req(0, 10)},
				want: assign(nil, u(0)), expected: 2}),
		},
		{
			// Gate on (10/10). denom = max(20, 10) = 20. Rank 0: 10 + 0 = 10;
			// rank 1: (10 - 10) + 20/20*10 = 10. Tie on score; rank 0 has
			// fewer tokens and wins although id 1's shuffle puts rank 1 first.
			name: "score tie, lower tokens wins (beta 1)",
			cfg:  kvCfg(2, 1, 0.1, 2),
			calls: one(ruleCall{states: tokensByRank(0, 20), maxn: 8, reqs: []Request{req(1, 10)},
				matches: []int32{0, 10}, want: assign(u(1), nil), expected: 2}),
		},
		// Full ties over idle ranks: the first rank of the spec's shuffle
		// vectors (eligible = 0..n-1).
		{name: "full tie seed 42 over 5", cfg: DefaultConfig(PolicyKVCacheAware, 5),
			calls: one(ruleCall{states: idle(5), maxn: 8, reqs: []Request{req(42, 10)},
				want: assign(nil, nil, nil, u(42), nil), expected: 2})},
		{name: "full tie seed 99 over 16", cfg: DefaultConfig(PolicyKVCacheAware, 16),
			calls: one(ruleCall{states: idle(16), maxn: 8, reqs: []Request{req(99, 10)},
				want: func() [][]uint64 { a := make([][]uint64, 16); a[4] = u(99); return assign(a...) }(), expected: 2})},
		{name: "full tie seed 2^64-1 over 8", cfg: DefaultConfig(PolicyKVCacheAware, 8),
			calls: one(ruleCall{states: idle(8), maxn: 8, reqs: []Request{req(math.MaxUint64, 10)},
				want: assign(nil, nil, nil, nil, nil, u(math.MaxUint64), nil, nil), expected: 2})},
		{name: "full tie seed 2^40+5 over 8", cfg: DefaultConfig(PolicyKVCacheAware, 8),
			calls: one(ruleCall{states: idle(8), maxn: 8, reqs: []Request{req(1<<40+5, 10)},
				want: assign(nil, u(1<<40+5), nil, nil, nil, nil, nil, nil), expected: 2})},
		{name: "full tie seed 123456789 over 8", cfg: DefaultConfig(PolicyKVCacheAware, 8),
			calls: one(ruleCall{states: idle(8), maxn: 8, reqs: []Request{req(123456789, 10)},
				want: assign(u(123456789), nil, nil, nil, nil, nil, nil, nil), expected: 2})},
		{
			// Ranks 1 and 4 carry 100 tokens (score 10 + 100/200*10 = 15),
			// the six others tie at 10. Random(0) orders 4 1 5 2 0 3 7 6:
			// the first tied rank is 5.
			name: "partial tie: first tied rank in shuffled order",
			cfg:  DefaultConfig(PolicyKVCacheAware, 8),
			calls: one(ruleCall{states: tokensByRank(0, 100, 0, 0, 100, 0, 0, 0), maxn: 8, reqs: []Request{req(0, 10)},
				want: assign(nil, nil, nil, nil, nil, u(0), nil, nil), expected: 2}),
		},
		{
			// Rank 3 is at maxn 2 = expected, so eligible = [0 1 2 4 5].
			// Random(42) permutes 5 items as positions 3 1 2 4 0, giving
			// ranks 4 1 2 5 0: rank 4 wins. Shuffling all six ranks or
			// indexing the full rank list would give another rank.
			name: "shuffle of the eligible ranks only",
			cfg:  DefaultConfig(PolicyKVCacheAware, 6),
			calls: one(ruleCall{states: st([2]int64{0, 0}, [2]int64{0, 0}, [2]int64{0, 0}, [2]int64{2, 0}, [2]int64{0, 0}, [2]int64{0, 0}),
				maxn: 2, reqs: []Request{req(42, 10)},
				want: assign(nil, nil, nil, nil, u(42), nil), expected: 2}),
		},
	})
}

func TestKVTokenBookkeeping(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{
			// 1: match 5/10 = 0.5, not > 0.5: gate off. denom = 10: rank 0
			// scores 10, rank 1 scores 10 + 7 = 17 -> rank 0, whose load
			// becomes 0 + (10 - 5) = 5 (raw match). 2: denom = 12: rank 0
			// 10 + 5/12*10 ≈ 14.2 < rank 1 10 + 7/12*10 ≈ 15.8 -> rank 0.
			// Adding the full 10 tokens would send 2 to rank 1.
			name: "raw match when the gate is off",
			cfg:  kvCfg(2, 1, 0.5, 2),
			calls: one(ruleCall{states: tokensByRank(0, 7), maxn: 8,
				reqs: []Request{req(1, 10), req(2, 10)}, matches: []int32{5, 0, 0, 0},
				want: assign(u(1, 2), nil), expected: 2}),
		},
		{
			// Same loads through the explicit pass: 1 (target 0, match 5)
			// adds 5 tokens to rank 0, and 2 follows it there.
			name: "explicit pass subtracts the match at the target",
			cfg:  kvCfg(2, 1, 0.5, 2),
			calls: one(ruleCall{states: tokensByRank(0, 7), maxn: 8,
				reqs: []Request{targeted(1, 10, 0, false), req(2, 10)}, matches: []int32{5, 0, 0, 0},
				want: assign(u(1, 2), nil), expected: 2}),
		},
		{
			// Match 50 > n 10 adds max(10 - 50, 0) = 0: rank 0 stays at 40
			// tokens, so 2 prefers rank 1 (10 + 20/60*10 < 10 + 40/60*10).
			// A negative addition (-40) would make rank 0 the lightest.
			name: "tokens added are clamped at 0",
			cfg:  kvCfg(2, 1, 0.5, 2),
			calls: one(ruleCall{states: tokensByRank(40, 20), maxn: 8,
				reqs: []Request{targeted(1, 10, 0, false), req(2, 10)}, matches: []int32{50, 0, 0, 0},
				want: assign(u(1), u(2)), expected: 2}),
		},
		{
			// Two idle ranks. 1 matches 8 on rank 1 (gate on): rank 1 scores
			// 2 vs 10 and gains 10 - 8 = 2 tokens. 2 (no match): rank 0
			// (10 + 0) beats rank 1 (10 + 2/10*10).
			name: "balancing adds n - match to the chosen rank",
			cfg:  kvCfg(2, 1, 0.1, 2),
			calls: one(ruleCall{states: idle(2), maxn: 8,
				reqs: []Request{req(1, 10), req(2, 10)}, matches: []int32{0, 8, 0, 0},
				want: assign(u(2), u(1)), expected: 2}),
		},
	})
}

func TestKVWarmup(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{
			// Untargeted requests warm ranks 0, 1, 2 in order; rank 3 stays
			// pending. Nothing is left for balancing: expected = 2.
			name: "smallest pending rank first",
			cfg:  warmCfg(4),
			calls: one(ruleCall{states: idle(4), maxn: 8, reqs: []Request{req(0, 10), req(1, 10), req(2, 10)},
				want: assign(u(0), u(1), u(2), nil), expected: 2, then: wantPending(3)}),
		},
		{
			// Relaxed target 1 consumes rank 1's slot: the others warm 0, 2.
			name: "relaxed explicit target consumes its slot",
			cfg:  warmCfg(4),
			calls: one(ruleCall{states: idle(4), maxn: 8, reqs: []Request{targeted(0, 10, 1, false), req(1, 10), req(2, 10)},
				want: assign(u(1), u(0), u(2), nil), expected: 2, then: wantPending(3)}),
		},
		{
			// Strict 1 sorts first and warms rank 0, so 0 warms rank 1.
			name: "strict target sorts first and consumes its slot",
			cfg:  warmCfg(2),
			calls: one(ruleCall{states: idle(2), maxn: 8, reqs: []Request{req(0, 10), targeted(1, 10, 0, true)},
				want: assign(u(1), u(0)), expected: 2, then: wantPending()}),
		},
		{
			// Rank 0 (pending) is at maxn: 5 falls through to balancing, rank
			// 0 stays pending, and a balanced placement (rank 1: 10 < 20)
			// consumes nothing. Next call, rank 0 has room and is warmed.
			name: "saturated pick stays pending",
			cfg:  warmCfg(3),
			calls: []ruleCall{
				{states: st([2]int64{2, 0}, [2]int64{0, 0}, [2]int64{0, 100}), maxn: 2, reqs: []Request{req(5, 10)},
					want: assign(nil, u(5), nil), expected: 2, then: wantPending(0, 1, 2)},
				{states: idle(3), maxn: 2, reqs: []Request{req(6, 10)},
					want: assign(u(6), nil, nil), expected: 2, then: wantPending(1, 2)},
			},
		},
		{
			// A strict target on a full pending rank falls through; balancing
			// sends it to rank 0 (expected 1), and neither slot is consumed.
			name: "full explicit target consumes nothing",
			cfg:  warmCfg(2),
			calls: one(ruleCall{states: st([2]int64{0, 0}, [2]int64{1, 0}), maxn: 1, reqs: []Request{targeted(0, 10, 1, true)},
				want: assign(u(0), nil), expected: 1, then: wantPending(0, 1)}),
		},
		{
			// Warmup persists across calls (call 2 warms loaded rank 1) and
			// is dormant once empty (call 3 balances to the idle rank 1
			// instead of re-warming rank 0).
			name: "persists across calls, dormant once empty",
			cfg:  warmCfg(2),
			calls: []ruleCall{
				{states: idle(2), maxn: 8, reqs: []Request{req(0, 10)},
					want: assign(u(0), nil), expected: 2, then: wantPending(1)},
				{states: tokensByRank(0, 1000), maxn: 8, reqs: []Request{req(1, 10)},
					want: assign(nil, u(1)), expected: 2, then: wantPending()},
				{states: tokensByRank(1000, 0), maxn: 8, reqs: []Request{req(2, 10)},
					want: assign(nil, u(2)), expected: 2, then: wantPending()},
			},
		},
		{
			name: "off by default",
			cfg:  DefaultConfig(PolicyKVCacheAware, 2),
			calls: one(ruleCall{states: tokensByRank(1000, 0), maxn: 8, reqs: []Request{req(0, 10)},
				want: assign(nil, u(0)), expected: 2, then: wantPending()}),
		},
		{
			name: "ignored by the default policy",
			cfg:  func() Config { c := DefaultConfig(PolicyDefault, 2); c.ColdStartWarmup = true; return c }(),
			calls: one(ruleCall{states: tokensByRank(1000, 0), maxn: 8, reqs: []Request{req(0, 10)},
				want: assign(nil, u(0)), expected: 1, then: wantPending()}),
		},
		{
			name: "ignored by the conversation policy",
			cfg:  func() Config { c := DefaultConfig(PolicyConversation, 2); c.ColdStartWarmup = true; return c }(),
			calls: one(ruleCall{states: st([2]int64{1, 0}, [2]int64{0, 0}), maxn: 1, reqs: []Request{req(0, 10)},
				want: assign(nil, u(0)), expected: 1, then: wantPending()}),
		},
	})
}

func TestConversationPolicy(t *testing.T) {
	rr := func(size int) Config { return convCfg(size, PlacementRoundRobin, 2, DefaultMaxSessions) }
	runRuleCases(t, []ruleCase{
		{
			// Call 2: soft cap = max(ceil(1*ceil(4/2)), 1) = 2. 2 and 3 return
			// to rank 0 up to the hard cap 3 (beyond the soft cap); 4
			// overflows to rank 1 (cursor at 1) without rebinding "a".
			// expected is re-bumped to the max count 3. Call 3: "a" is still
			// at home on rank 0.
			name: "stickiness up to the hard cap, overflow keeps the binding",
			cfg:  convCfg(2, PlacementRoundRobin, 1, 100),
			calls: []ruleCall{
				{states: idle(2), maxn: 3, reqs: []Request{conv(1, "a")},
					want: assign(u(1), nil), expected: 1, then: wantConv(1, map[string]int{"a": 0})},
				{states: st([2]int64{1, 0}, [2]int64{0, 0}), maxn: 3, reqs: []Request{conv(2, "a"), conv(3, "a"), conv(4, "a")},
					want: assign(u(2, 3), u(4)), expected: 3, then: wantConv(1, map[string]int{"a": 0})},
				{states: idle(2), maxn: 3, reqs: []Request{conv(5, "a")},
					want: assign(u(5), nil), expected: 1},
			},
		},
		{
			// max_sessions 2, maxn 1. "a" -> 0, "b" -> 1. Call 3: "a"'s home
			// is full, it overflows to rank 1 without refreshing its recency,
			// so binding "c" in call 4 evicts "a" (least recent), not "b".
			name: "overflow does not refresh recency; LRU eviction",
			cfg:  convCfg(2, PlacementRoundRobin, 2, 2),
			calls: []ruleCall{
				{states: idle(2), maxn: 1, reqs: []Request{conv(1, "a")}, want: assign(u(1), nil), expected: 1},
				{states: idle(2), maxn: 1, reqs: []Request{conv(2, "b")}, want: assign(nil, u(2)), expected: 1},
				{states: st([2]int64{1, 0}, [2]int64{0, 0}), maxn: 1, reqs: []Request{conv(3, "a")},
					want: assign(nil, u(3)), expected: 1, then: wantConv(2, map[string]int{"a": 0, "b": 1})},
				{states: idle(2), maxn: 1, reqs: []Request{conv(4, "c")}, want: assign(u(4), nil), expected: 1,
					then: wantConv(2, map[string]int{"a": -1, "b": 1, "c": 0})},
			},
		},
		{
			// "a" -> 0, "b" -> 1; "a" returns (touched); "c" evicts "b".
			name: "a touched binding survives eviction",
			cfg:  convCfg(2, PlacementRoundRobin, 2, 2),
			calls: []ruleCall{
				{states: idle(2), maxn: 8, reqs: []Request{conv(1, "a"), conv(2, "b")}, want: assign(u(1), u(2)), expected: 2},
				{states: idle(2), maxn: 8, reqs: []Request{conv(3, "a")}, want: assign(u(3), nil), expected: 2},
				{states: idle(2), maxn: 8, reqs: []Request{conv(4, "c")}, want: assign(u(4), nil), expected: 2,
					then: wantConv(2, map[string]int{"a": 0, "b": -1, "c": 0})},
			},
		},
		{
			// max_sessions 1: binding "b" evicts "a" mid-batch, so 3 ("a") is
			// a new conversation again and round robin sends it to rank 2
			// (sticky would have been rank 0).
			name: "eviction within one batch",
			cfg:  convCfg(3, PlacementRoundRobin, 2, 1),
			calls: one(ruleCall{states: idle(3), maxn: 8, reqs: []Request{conv(1, "a"), conv(2, "b"), conv(3, "a")},
				want: assign(u(1), u(2), u(3)), expected: 2, then: wantConv(1, map[string]int{"a": 2, "b": -1})}),
		},
		{
			// The cursor persists across calls: 0, 1, then 2 and 0.
			name: "round-robin cursor persists",
			cfg:  rr(3),
			calls: []ruleCall{
				{states: idle(3), maxn: 100, reqs: []Request{req(1, 10)}, want: assign(u(1), nil, nil), expected: 2},
				{states: idle(3), maxn: 100, reqs: []Request{req(2, 10)}, want: assign(nil, u(2), nil), expected: 2},
				{states: idle(3), maxn: 100, reqs: []Request{req(3, 10), req(4, 10)}, want: assign(u(4), nil, u(3)), expected: 2,
					then: wantConv(0, nil)},
			},
		},
		{
			// Soft cap = max(ceil(2*ceil(6/3)), 5) = 5: rank 1 (5 active) is
			// skipped and the cursor moves past it.
			name: "round-robin cursor moves past skipped ranks",
			cfg:  rr(3),
			calls: func() []ruleCall {
				s := st([2]int64{0, 0}, [2]int64{5, 0}, [2]int64{0, 0})
				return []ruleCall{
					{states: s, maxn: 100, reqs: []Request{req(1, 10)}, want: assign(u(1), nil, nil), expected: 5},
					{states: s, maxn: 100, reqs: []Request{req(2, 10)}, want: assign(nil, nil, u(2)), expected: 5},
					{states: s, maxn: 100, reqs: []Request{req(3, 10)}, want: assign(u(3), nil, nil), expected: 5},
					{states: s, maxn: 100, reqs: []Request{req(4, 10)}, want: assign(nil, nil, u(4)), expected: 5},
				}
			}(),
		},
		{
			// Lowest (count, rank): rank 1 (0), rank 2 (0), then rank 0
			// (all at 1). Soft cap 4; nothing exceeds it.
			name: "least_queued ties by rank",
			cfg:  convCfg(4, PlacementLeastQueued, 2, 100),
			calls: one(ruleCall{states: st([2]int64{1, 0}, [2]int64{0, 0}, [2]int64{0, 0}, [2]int64{1, 0}), maxn: 100,
				reqs: []Request{conv(0, "a"), conv(1, "b"), conv(2, "c")},
				want: assign(u(2), u(0), u(1), nil), expected: 4,
				then: wantConv(3, map[string]int{"a": 1, "b": 2, "c": 0})}),
		},
		{
			// least_tokens: tokens 300, 0, 100, 0 (st's second field). "a"
			// (10 tokens) -> rank 1 (0 tokens, first at/after the cursor 0),
			// the cursor moves to 2; "b" -> rank 3 (0 tokens); "c" -> rank 1
			// (10 < 100); "d": ranks 1 and 3 hold 10 and tie on tokens,
			// rank 1 has 2 requests to rank 3's 1: rank 3. Soft cap
			// min(max(2*ceil(4/4), 0), 100) = 2.
			name: "least_tokens: tokens, then requests",
			cfg:  convCfg(4, PlacementLeastTokens, 2, 100),
			calls: one(ruleCall{states: tokensByRank(300, 0, 100, 0), maxn: 100,
				reqs: []Request{conv(0, "a"), conv(1, "b"), conv(2, "c"), conv(3, "d")},
				want: assign(nil, u(0, 2), nil, u(1, 3)), expected: 2,
				then: wantConv(4, map[string]int{"a": 1, "b": 3, "c": 1, "d": 3})}),
		},
		{
			// least_tokens ties on tokens and requests go to the first rank at
			// or after the cursor, which moves past the chosen rank: 0, 1, 2
			// on idle ranks, leaving the cursor at 0. In call 2 the sticky
			// turn of "a" adds its tokens to rank 0; ranks 1 and 2 tie and
			// rank 1 comes first from the cursor: "d" goes there.
			name: "least_tokens: the cursor breaks ties",
			cfg:  convCfg(3, PlacementLeastTokens, 2, 100),
			calls: []ruleCall{
				{states: idle(3), maxn: 100, reqs: []Request{conv(1, "a"), conv(2, "b"), conv(3, "c")},
					want: assign(u(1), u(2), u(3)), expected: 2},
				{states: idle(3), maxn: 100, reqs: []Request{conv(4, "a"), conv(5, "d")},
					want: assign(u(4), u(5), nil), expected: 2, then: wantConv(4, map[string]int{"d": 1})},
			},
		},
		{
			// Call 1 binds "x" to its explicit target 2. Call 2: the binding
			// beats the strict target 0. Call 3: "y" is bound by the explicit
			// pass to 1 and its second turn (hint 0) follows it. Call 4: the
			// explicit and sticky placements never moved the cursor: rank 0.
			name: "explicit first-turn binding beats later hints",
			cfg:  rr(3),
			calls: []ruleCall{
				{states: idle(3), maxn: 8, reqs: []Request{convT(1, "x", 2, false)}, want: assign(nil, nil, u(1)), expected: 2,
					then: wantConv(1, map[string]int{"x": 2})},
				{states: idle(3), maxn: 8, reqs: []Request{convT(2, "x", 0, true)}, want: assign(nil, nil, u(2)), expected: 2},
				{states: idle(3), maxn: 8, reqs: []Request{convT(3, "y", 1, false), convT(4, "y", 0, false)},
					want: assign(nil, u(3, 4), nil), expected: 2, then: wantConv(2, map[string]int{"x": 2, "y": 1})},
				{states: idle(3), maxn: 8, reqs: []Request{req(5, 10)}, want: assign(u(5), nil, nil), expected: 2},
			},
		},
		{
			// The target (rank 0) is full: the new conversation is placed by
			// round robin (rank 1) and bound there.
			name: "full explicit target: bound where it lands",
			cfg:  rr(2),
			calls: one(ruleCall{states: st([2]int64{1, 0}, [2]int64{0, 0}), maxn: 1, reqs: []Request{convT(1, "z", 0, true)},
				want: assign(nil, u(1)), expected: 1, then: wantConv(1, map[string]int{"z": 1})}),
		},
		{
			// least_queued, soft cap = max(ceil(1*ceil(5/2)), 0) = 3. "a"
			// (bound to 0 by call 1) returns 4 times up to the hard cap 10,
			// and expected is re-bumped from 3 to 4. "n" goes to rank 1.
			name: "expected re-bump",
			cfg:  convCfg(2, PlacementLeastQueued, 1, 100),
			calls: []ruleCall{
				{states: idle(2), maxn: 10, reqs: []Request{conv(1, "a")}, want: assign(u(1), nil), expected: 1},
				{states: idle(2), maxn: 10, reqs: []Request{conv(2, "a"), conv(3, "a"), conv(4, "a"), conv(5, "a"), conv(6, "n")},
					want: assign(u(2, 3, 4, 5), u(6)), expected: 4},
			},
		},
		{
			// No room anywhere: the new conversation is unassigned and not
			// bound. Soft cap min(max(4, 1), 1) = 1.
			name: "unassigned new conversation is not bound",
			cfg:  rr(1),
			calls: one(ruleCall{states: st([2]int64{1, 0}), maxn: 1, reqs: []Request{conv(1, "q")},
				want: assign(nil), expected: 1, unassigned: u(1), then: wantConv(0, map[string]int{"q": -1})}),
		},
	})
}

func TestUnassignedEveryPolicy(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{
			// Balancing order 3 (10), 9 (5), 5 (1); one slot: 3 is placed,
			// 5 and 9 are listed in input order.
			name: "default",
			cfg:  DefaultConfig(PolicyDefault, 1),
			calls: one(ruleCall{states: idle(1), maxn: 1, reqs: []Request{req(5, 1), req(3, 10), req(9, 5)},
				want: assign(u(3)), expected: 1, unassigned: u(5, 9)}),
		},
		{
			// Grouped order 3 ([1]), 9 ([2]), 5 ([3]); expected min(6, 1) = 1.
			name: "kv",
			cfg:  DefaultConfig(PolicyKVCacheAware, 1),
			calls: one(ruleCall{states: idle(1), maxn: 1,
				reqs: []Request{withTokens(5, []int32{3}, 0), withTokens(3, []int32{1}, 0), withTokens(9, []int32{2}, 0)},
				want: assign(u(3)), expected: 1, unassigned: u(5, 9)}),
		},
		{
			// Sorted 8, 9, 7 (relax=false first): 8 placed, 9 and 7 unassigned,
			// reported in input order 7, 9.
			name: "conversation",
			cfg:  DefaultConfig(PolicyConversation, 1),
			calls: one(ruleCall{states: idle(1), maxn: 1, reqs: []Request{req(7, 10), strictNoTarget(8, 10), strictNoTarget(9, 10)},
				want: assign(u(8)), expected: 1, unassigned: u(7, 9)}),
		},
		{
			// Every rank at or over maxn: nothing is placed, even explicitly.
			name: "kv all ranks full",
			cfg:  warmCfg(2),
			calls: one(ruleCall{states: st([2]int64{3, 0}, [2]int64{2, 0}), maxn: 2,
				reqs: []Request{req(1, 10), targeted(2, 10, 1, true)},
				want: assign(nil, nil), expected: 2, unassigned: u(1, 2), then: wantPending(0, 1)}),
		},
	})
}

func TestZeroTokenRequests(t *testing.T) {
	zero := func(id uint64) Request { return Request{ID: id, TargetRank: NoTarget} }
	runRuleCases(t, []ruleCase{
		{
			// denom = max(0, 0) floored at 1; all scores 0 and loads equal:
			// Random(0).shuffle([0, 1]) keeps rank 0 first.
			name:  "kv id 0",
			cfg:   DefaultConfig(PolicyKVCacheAware, 2),
			calls: one(ruleCall{states: idle(2), maxn: 8, reqs: []Request{zero(0)}, want: assign(u(0), nil), expected: 2}),
		},
		{
			// Random(1).shuffle([0, 1]) = [1, 0].
			name:  "kv id 1",
			cfg:   DefaultConfig(PolicyKVCacheAware, 2),
			calls: one(ruleCall{states: idle(2), maxn: 8, reqs: []Request{zero(1)}, want: assign(nil, u(1)), expected: 2}),
		},
		{
			// The gate divides by max(n, 1): 1/1 > 0.1, rank 1 scores -1.
			name: "kv with a match",
			cfg:  DefaultConfig(PolicyKVCacheAware, 2),
			calls: one(ruleCall{states: idle(2), maxn: 8, reqs: []Request{zero(0)}, matches: []int32{0, 1},
				want: assign(nil, u(0)), expected: 2}),
		},
		{
			// Zero-token requests add no load, so every one is a full tie:
			// Random(0) puts rank 0 first, Random(1) and Random(2) rank 1.
			// fair = ceil(3/2) = 2, expected 4.
			name: "kv several",
			cfg:  DefaultConfig(PolicyKVCacheAware, 2),
			calls: one(ruleCall{states: idle(2), maxn: 8, reqs: []Request{zero(0), zero(1), zero(2)},
				want: assign(u(0), u(1, 2)), expected: 4}),
		},
		{
			// Threshold 1: the match rate is 1/max(0, 1) = 1, not > 1, so the
			// gate is off and the full tie goes to Random(0)'s first rank, 0.
			// Dividing by n = 0 instead (+Inf > 1) would pick rank 1.
			name: "kv gate divides by max(n, 1)",
			cfg:  kvCfg(2, 1, 1, 2),
			calls: one(ruleCall{states: idle(2), maxn: 8, reqs: []Request{zero(0)}, matches: []int32{0, 1},
				want: assign(u(0), nil), expected: 2}),
		},
		{
			name:  "default",
			cfg:   DefaultConfig(PolicyDefault, 2),
			calls: one(ruleCall{states: idle(2), maxn: 8, reqs: []Request{zero(0), zero(1)}, want: assign(u(0), u(1)), expected: 1}),
		},
		{
			name:  "conversation",
			cfg:   DefaultConfig(PolicyConversation, 2),
			calls: one(ruleCall{states: idle(2), maxn: 8, reqs: []Request{zero(0)}, want: assign(u(0), nil), expected: 2}),
		},
	})
}

// ---- validation ------------------------------------------------------------

func TestConfigErrors(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	with := func(policy Policy, f func(c *Config)) Config {
		c := DefaultConfig(policy, 4)
		f(&c)
		return c
	}
	tests := []struct {
		cfg          Config
		field, value string
	}{
		{with(PolicyDefault, func(c *Config) { c.Policy = "round_robin" }), "policy", `"round_robin"`},
		{with(PolicyDefault, func(c *Config) { c.Policy = "" }), "policy", `""`},
		{with(PolicyKVCacheAware, func(c *Config) { c.DPSize = 0 }), "dp_size", "0"},
		{with(PolicyKVCacheAware, func(c *Config) { c.DPSize = -3 }), "dp_size", "-3"},
		{with(PolicyKVCacheAware, func(c *Config) { c.DPSize = MaxDPSize + 1 }), "dp_size", "4097"},
		{with(PolicyConversation, func(c *Config) { c.DPSize = math.MaxInt32 }), "dp_size", "2147483647"},
		{with(PolicyKVCacheAware, func(c *Config) { c.IndexMaxBytes = 0 }), "index_max_bytes", "0"},
		{with(PolicyKVCacheAware, func(c *Config) { c.IndexMaxBytes = MaxIndexMaxBytes + 1 }), "index_max_bytes", "137438953473"},
		{with(PolicyKVCacheAware, func(c *Config) { c.LoadBalanceWeight = nan }), "load_balance_weight", "NaN"},
		{with(PolicyKVCacheAware, func(c *Config) { c.LoadBalanceWeight = inf }), "load_balance_weight", "Inf"},
		{with(PolicyKVCacheAware, func(c *Config) { c.LoadBalanceWeight = -inf }), "load_balance_weight", "-Inf"},
		{with(PolicyKVCacheAware, func(c *Config) { c.LoadBalanceWeight = -0.25 }), "load_balance_weight", "-0.25"},
		{with(PolicyDefault, func(c *Config) { c.LoadBalanceWeight = -0.25 }), "load_balance_weight", "-0.25"},
		{with(PolicyKVCacheAware, func(c *Config) { c.MatchRateThreshold = nan }), "match_rate_threshold", "NaN"},
		{with(PolicyKVCacheAware, func(c *Config) { c.MatchRateThreshold = inf }), "match_rate_threshold", "Inf"},
		{with(PolicyKVCacheAware, func(c *Config) { c.MatchRateThreshold = -0.5 }), "match_rate_threshold", "-0.5"},
		{with(PolicyKVCacheAware, func(c *Config) { c.FairShareMultiplier = nan }), "fair_share_multiplier", "NaN"},
		{with(PolicyKVCacheAware, func(c *Config) { c.FairShareMultiplier = inf }), "fair_share_multiplier", "Inf"},
		{with(PolicyKVCacheAware, func(c *Config) { c.FairShareMultiplier = 0.75 }), "fair_share_multiplier", "0.75"},
		{with(PolicyKVCacheAware, func(c *Config) { c.FairShareMultiplier = -2 }), "fair_share_multiplier", "-2"},
		{with(PolicyConversation, func(c *Config) { c.FairShareMultiplier = nan }), "fair_share_multiplier", "NaN"},
		{with(PolicyConversation, func(c *Config) { c.FairShareMultiplier = -inf }), "fair_share_multiplier", "-Inf"},
		{with(PolicyConversation, func(c *Config) { c.MaxSessions = 0 }), "max_sessions", "0"},
		{with(PolicyConversation, func(c *Config) { c.MaxSessions = -9 }), "max_sessions", "-9"},
		{with(PolicyConversation, func(c *Config) { c.NewConvPlacement = "random" }), "new_conv_placement", `"random"`},
		{with(PolicyConversation, func(c *Config) { c.NewConvPlacement = "Round_Robin" }), "new_conv_placement", `"Round_Robin"`},
	}
	for _, tc := range tests {
		t.Run(tc.field+"="+tc.value, func(t *testing.T) {
			r, err := New(tc.cfg)
			if err == nil {
				t.Fatalf("New(%+v) succeeded, want an error about %s", tc.cfg, tc.field)
			}
			if r != nil {
				t.Errorf("New returned a router along with error %v", err)
			}
			if !errors.Is(err, ErrInvalidConfig) || errors.Is(err, ErrInvalidInput) {
				t.Errorf("error %q does not wrap ErrInvalidConfig (only)", err)
			}
			if msg := err.Error(); !strings.Contains(msg, tc.field) || !strings.Contains(msg, tc.value) {
				t.Errorf("error %q does not name field %q and value %s", msg, tc.field, tc.value)
			}
			if err2 := tc.cfg.Validate(); err2 == nil || err2.Error() != err.Error() {
				t.Errorf("Validate() = %v, want the same error as New", err2)
			}
		})
	}

	// Legal edge values.
	for _, cfg := range []Config{
		with(PolicyKVCacheAware, func(c *Config) { c.LoadBalanceWeight, c.MatchRateThreshold, c.FairShareMultiplier = 0, 0, 1 }),
		with(PolicyKVCacheAware, func(c *Config) { c.LoadBalanceWeight = math.Copysign(0, -1) }),
		with(PolicyConversation, func(c *Config) { c.FairShareMultiplier = -5 }), // clamped
		with(PolicyDefault, func(c *Config) { c.FairShareMultiplier = 0.5 }),     // unused
		with(PolicyConversation, func(c *Config) { c.MaxSessions = 1 }),
		with(PolicyDefault, func(c *Config) { c.DPSize = 1 }),
		with(PolicyKVCacheAware, func(c *Config) { c.DPSize = MaxDPSize }),
		with(PolicyKVCacheAware, func(c *Config) { c.IndexMaxBytes = prefix.EntryBytes }),
	} {
		if _, err := New(cfg); err != nil {
			t.Errorf("New(%+v) = %v, want success", cfg, err)
		}
	}
}

// badCall is a valid base call turned invalid by mutate.
type badCall struct {
	name         string
	mutate       func(c *callArgs)
	field, value string
}

type callArgs struct {
	states  []RankState
	reqs    []Request
	maxn    int
	matches []int32
}

func (c callArgs) clone() callArgs {
	return callArgs{states: slices.Clone(c.states), reqs: slices.Clone(c.reqs), maxn: c.maxn, matches: slices.Clone(c.matches)}
}

var badCalls = []badCall{
	{"maxn 0", func(c *callArgs) { c.maxn = 0 }, "max_num_active_requests", "0"},
	{"maxn negative", func(c *callArgs) { c.maxn = -4 }, "max_num_active_requests", "-4"},
	{"maxn too large", func(c *callArgs) { c.maxn = MaxActive + 1 }, "max_num_active_requests", "1073741825"},
	{"too few states", func(c *callArgs) { c.states = c.states[:3] }, "dp_size", "3"},
	{"too many states", func(c *callArgs) {
		c.states = append(c.states, RankState{Rank: 4})
	}, "dp_size", "5"},
	{"no states", func(c *callArgs) { c.states = nil }, "dp_size", "0"},
	{"states out of order", func(c *callArgs) {
		c.states[1].Rank, c.states[2].Rank = 2, 1
	}, "states[1].rank", "2"},
	{"negative count", func(c *callArgs) { c.states[2].NumActiveRequests = -1 }, "states[2].num_active_requests", "-1"},
	{"negative tokens", func(c *callArgs) { c.states[3].NumActiveTokens = -5 }, "states[3].num_active_tokens", "-5"},
	{"negative kv capacity", func(c *callArgs) { c.states[1].KVCapacityTokens = -8 }, "states[1].kv_capacity_tokens", "-8"},
	{"free kv above capacity", func(c *callArgs) {
		c.states[2].KVCapacityTokens, c.states[2].FreeKVTokens = 100, 101
	}, "states[2].free_kv_tokens", "101"},
	{"negative free kv", func(c *callArgs) {
		c.states[0].KVCapacityTokens, c.states[0].FreeKVTokens = 100, -3
	}, "states[0].free_kv_tokens", "-3"},
	{"target too large", func(c *callArgs) { c.reqs[len(c.reqs)-1].TargetRank = 4 }, "target_rank", "4"},
	{"target negative", func(c *callArgs) { c.reqs[len(c.reqs)-1].TargetRank = -2 }, "target_rank", "-2"},
	{"duplicate id", func(c *callArgs) { c.reqs[len(c.reqs)-1].ID = c.reqs[0].ID }, "request id", "777777"},
	{"num_tokens below len(tokens)", func(c *callArgs) {
		q := &c.reqs[len(c.reqs)-1]
		q.Tokens, q.NumTokens = prompt(10), 3
	}, "num_tokens", "3"},
	{"negative num_tokens", func(c *callArgs) { c.reqs[len(c.reqs)-1].NumTokens = -6 }, "num_tokens", "-6"},
	{"conversation id too long", func(c *callArgs) {
		c.reqs[len(c.reqs)-1].ConversationID = strings.Repeat("x", MaxConversationIDBytes+1)
	}, "conversation id", "1025 bytes"},
	{"too few matches", func(c *callArgs) { c.matches = c.matches[:len(c.matches)-1] }, "match lengths", "19"},
	{"too many matches", func(c *callArgs) { c.matches = append(c.matches, 0) }, "match lengths", "21"},
	{"negative match", func(c *callArgs) { c.matches[len(c.matches)-1] = -7 }, "match length", "-7"},
}

// TestInvalidInputChangesNothing checks every input error: it wraps
// ErrInvalidInput, names the field and value, leaves the Result given to
// RouteInto untouched, and leaves the router's state exactly as it was: a
// follow-up batch routed on the router that saw the bad call and on a twin
// that did not gives the same result, warmup set and bindings.
func TestInvalidInputChangesNothing(t *testing.T) {
	const size = 4
	// The base batch would change every piece of state if it were (even
	// partly) routed: untargeted requests consume warmup slots, new
	// conversations bind and move the cursor, a returning one is touched.
	base := callArgs{
		states: st([2]int64{0, 0}, [2]int64{1, 100}, [2]int64{0, 0}, [2]int64{2, 50}),
		reqs: []Request{
			{ID: 777777, Tokens: prompt(20), TargetRank: NoTarget, ConversationID: "a"},
			{ID: 2, Tokens: prompt(30), TargetRank: NoTarget, ConversationID: "h"},
			{ID: 3, Tokens: prompt(10), TargetRank: 3, Strict: true, ConversationID: "b"},
			{ID: 4, Tokens: prompt(10), TargetRank: NoTarget, ConversationID: "c"},
			{ID: 5, Tokens: prompt(5), TargetRank: NoTarget},
		},
		maxn:    8,
		matches: make([]int32, 5*size),
	}
	for i := range base.matches {
		base.matches[i] = int32(i % 7)
	}
	history := callArgs{states: idle(size), maxn: 8, reqs: []Request{
		{ID: 100, Tokens: prompt(10), TargetRank: NoTarget, ConversationID: "h"},
		{ID: 101, Tokens: prompt(10), TargetRank: NoTarget, ConversationID: "g"},
	}}
	followUp := callArgs{states: idle(size), maxn: 8, reqs: []Request{
		{ID: 200, Tokens: prompt(10), TargetRank: NoTarget, ConversationID: "a"},
		{ID: 201, Tokens: prompt(10), TargetRank: NoTarget, ConversationID: "h"},
		{ID: 202, Tokens: prompt(10), TargetRank: NoTarget, ConversationID: "new"},
		{ID: 203, Tokens: prompt(10), TargetRank: NoTarget},
		{ID: 204, Tokens: prompt(10), TargetRank: NoTarget},
	}}
	convIDs := []string{"a", "b", "c", "g", "h", "new"}

	configs := []Config{
		DefaultConfig(PolicyDefault, size),
		warmCfg(size),
		convCfg(size, PlacementRoundRobin, 2, 3), // small LRU: recency matters
		convCfg(size, PlacementLeastQueued, 1.5, 3),
	}
	for _, cfg := range configs {
		for _, bc := range badCalls {
			t.Run(string(cfg.Policy)+"/"+string(cfg.NewConvPlacement)+"/"+bc.name, func(t *testing.T) {
				// The base call itself is valid.
				if _, err := mustNew(t, cfg).Route(base.states, base.reqs, base.maxn, base.matches); err != nil {
					t.Fatalf("base call: %v", err)
				}
				bad := base.clone()
				bc.mutate(&bad)

				r, twin := mustNew(t, cfg), mustNew(t, cfg)
				for _, x := range []*Router{r, twin} {
					mustRoute(t, x, history.states, history.reqs, history.maxn, history.matches)
				}
				res := mustRoute(t, mustNew(t, cfg), history.states, history.reqs, history.maxn, nil)
				before := cloneResult(res)
				err := r.RouteInto(res, bad.states, bad.reqs, bad.maxn, bad.matches)
				if err == nil {
					t.Fatalf("RouteInto succeeded, want an error about %s", bc.field)
				}
				if !errors.Is(err, ErrInvalidInput) || errors.Is(err, ErrInvalidConfig) {
					t.Errorf("error %q does not wrap ErrInvalidInput (only)", err)
				}
				if msg := err.Error(); !strings.Contains(msg, bc.field) || !strings.Contains(msg, bc.value) {
					t.Errorf("error %q does not name field %q and value %s", msg, bc.field, bc.value)
				}
				if !equalResults(res, before) {
					t.Errorf("RouteInto changed the result on error: %+v, was %+v", res, before)
				}
				if got, err := r.Route(bad.states, bad.reqs, bad.maxn, bad.matches); err == nil || got != nil {
					t.Errorf("Route = %v, %v; want nil and an error", got, err)
				}

				if d := diffState(r, twin, convIDs); d != "" {
					t.Fatalf("state differs after the bad call: %s", d)
				}
				got := mustRoute(t, r, followUp.states, followUp.reqs, followUp.maxn, nil)
				want := mustRoute(t, twin, followUp.states, followUp.reqs, followUp.maxn, nil)
				if !equalResults(got, want) {
					t.Errorf("follow-up after the bad call = %+v, want %+v", got, want)
				}
				if d := diffState(r, twin, convIDs); d != "" {
					t.Errorf("state differs after the follow-up: %s", d)
				}
			})
		}
	}
}
