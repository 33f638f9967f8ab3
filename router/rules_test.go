package router

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/adprouter/adprouter/router/internal/prefix"
)

// The rules of docs/ROUTING.md as inputs and expected placements are shared
// fixtures (testdata/routing, run by TestRoutingFixtures and by the C++ and
// Python suites): that is where a table-like case belongs. What stays here is
// what a fixture cannot say: configuration and input errors (sentinel
// errors, unchanged state) and a multiplier the Python reference cannot take.
// ruleCase and runRuleCases serve the host-state tests (hoststate_test.go).

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

func tokensByRank(tokens ...int64) []RankState {
	s := make([]RankState, len(tokens))
	for i, tok := range tokens {
		s[i] = RankState{Rank: i, NumActiveTokens: tok}
	}
	return s
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

func u(ids ...uint64) []uint64 { return ids }

// The soft cap must reach maxn for any finite multiplier, however large:
// ceil(multiplier * fair) overflows int64 beyond 2^63. The finite products
// are fixtures (testdata/routing/expected.txt); this one stays here because
// 2 · MaxFloat64 is +Inf, which the Python reference's math.ceil rejects.
func TestHugeFairShareMultiplier(t *testing.T) {
	r := mustNew(t, convCfg(2, PlacementRoundRobin, math.MaxFloat64, 100))
	res := mustRoute(t, r, idle(2), []Request{conv(0, "a"), conv(1, "b"), conv(2, "c")}, 100, nil)
	if res.Expected != 100 {
		t.Errorf("fair_share_multiplier %g: expected = %d, want 100 (maxn)", math.MaxFloat64, res.Expected)
	}
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
	{"negative pending kv", func(c *callArgs) {
		c.states[1].KVCapacityTokens, c.states[1].ReportsPendingKV, c.states[1].PendingKVTokens = 100, true, -9
	}, "states[1].pending_kv_tokens", "-9"},
	{"pending kv without the flag", func(c *callArgs) {
		c.states[3].KVCapacityTokens, c.states[3].PendingKVTokens = 100, 40
	}, "states[3].pending_kv_tokens", "reports_pending_kv"},
	{"evictable kv above free", func(c *callArgs) {
		s := &c.states[2]
		s.KVCapacityTokens, s.FreeKVTokens, s.ReportsEvictableKV, s.EvictableKVTokens = 100, 50, true, 51
	}, "states[2].evictable_kv_tokens", "51"},
	{"evictable kv without the flag", func(c *callArgs) {
		c.states[0].KVCapacityTokens, c.states[0].FreeKVTokens, c.states[0].EvictableKVTokens = 100, 50, 20
	}, "states[0].evictable_kv_tokens", "reports_evictable_kv"},
	{"negative max_new_tokens", func(c *callArgs) { c.reqs[len(c.reqs)-1].MaxNewTokens = -11 }, "max_new_tokens", "-11"},
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
