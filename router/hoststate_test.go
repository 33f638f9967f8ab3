package router

import (
	"errors"
	"slices"
	"testing"
)

// Tests of the router state a host reads and writes between decisions:
// the pending warmup ranks (TensorRT-LLM's _pending_warmup_ranks) and the
// conversation map (its _conv_to_rank).

func setPending(ranks ...int) func(t *testing.T, r *Router) {
	return func(t *testing.T, r *Router) {
		t.Helper()
		if err := r.SetPendingWarmup(ranks); err != nil {
			t.Fatalf("SetPendingWarmup(%v): %v", ranks, err)
		}
	}
}

func then(fs ...func(t *testing.T, r *Router)) func(t *testing.T, r *Router) {
	return func(t *testing.T, r *Router) {
		t.Helper()
		for _, f := range fs {
			f(t, r)
		}
	}
}

func TestSetPendingWarmup(t *testing.T) {
	runRuleCases(t, []ruleCase{
		{
			// An empty set ends the warmup: the request is scored (rank 1,
			// idle) instead of warming rank 0.
			name: "empty set turns warmup off",
			cfg:  warmCfg(2),
			calls: []ruleCall{
				{states: idle(2), maxn: 8, want: assign(nil, nil), then: then(setPending(), wantPending())},
				{states: tokensByRank(1000, 0), maxn: 8, reqs: []Request{req(1, 10)},
					want: assign(nil, u(1)), expected: 2, then: wantPending()},
			},
		},
		{
			// A set on a router without warmup turns it on: the smallest
			// pending rank first, whatever the load; the third request is
			// scored (ranks 0 and 2 tie; the shuffle of id 3 picks 0).
			name: "a set turns warmup on",
			cfg:  DefaultConfig(PolicyKVCacheAware, 4),
			calls: []ruleCall{
				{states: idle(4), maxn: 8, want: assign(nil, nil, nil, nil), then: then(setPending(3, 1, 3), wantPending(1, 3))},
				{states: tokensByRank(0, 1000, 0, 1000), maxn: 8, reqs: []Request{req(1, 10), req(2, 10), req(3, 10)},
					want: assign(u(3), u(1), nil, u(2)), expected: 2, then: wantPending()},
			},
		},
		{
			// Replacing the set mid-warmup: rank 2 is pending again although
			// it was warmed.
			name: "replaces, not merges",
			cfg:  warmCfg(3),
			calls: []ruleCall{
				{states: idle(3), maxn: 8, reqs: []Request{req(1, 10), req(2, 10), req(3, 10)},
					want: assign(u(1), u(2), u(3)), expected: 2, then: then(wantPending(), setPending(2), wantPending(2))},
				{states: idle(3), maxn: 8, reqs: []Request{req(4, 10)},
					want: assign(nil, nil, u(4)), expected: 2, then: wantPending()},
			},
		},
	})
}

func TestSetPendingWarmupErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		ranks []int
	}{
		{"rank past dp_size", warmCfg(4), []int{0, 4}},
		{"negative rank", warmCfg(4), []int{-1}},
		{"default policy", DefaultConfig(PolicyDefault, 4), []int{0}},
		{"conversation policy", DefaultConfig(PolicyConversation, 4), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustNew(t, tc.cfg)
			before, digest := r.PendingWarmup(), r.StateDigest()
			err := r.SetPendingWarmup(tc.ranks)
			if !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("SetPendingWarmup(%v) = %v, want an error wrapping ErrInvalidInput", tc.ranks, err)
			}
			if !slices.Equal(r.PendingWarmup(), before) || r.StateDigest() != digest {
				t.Errorf("a refused SetPendingWarmup changed the router: pending %v -> %v", before, r.PendingWarmup())
			}
		})
	}
}

// Ranks that make the same assignment agree; the digest sees the set, not
// the order it was given in.
func TestSetPendingWarmupDigest(t *testing.T) {
	a, b, c := mustNew(t, warmCfg(4)), mustNew(t, warmCfg(4)), mustNew(t, warmCfg(4))
	for _, x := range []struct {
		r     *Router
		ranks []int
	}{{a, []int{2, 0}}, {b, []int{0, 2, 2}}, {c, []int{0, 3}}} {
		if err := x.r.SetPendingWarmup(x.ranks); err != nil {
			t.Fatal(err)
		}
	}
	if a.StateDigest() != b.StateDigest() {
		t.Errorf("the same set in another order gave another digest")
	}
	if a.StateDigest() == c.StateDigest() {
		t.Errorf("different sets gave the same digest")
	}
	fresh := mustNew(t, warmCfg(4))
	if err := fresh.SetPendingWarmup([]int{0, 1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if fresh.StateDigest() == mustNew(t, warmCfg(4)).StateDigest() {
		t.Errorf("an assignment left no trace in the digest")
	}
}

func TestConversationsInEvictionOrder(t *testing.T) {
	r := mustNew(t, convCfg(2, PlacementRoundRobin, 2, 3))
	route := func(reqs ...Request) {
		t.Helper()
		mustRoute(t, r, idle(2), reqs, 100, nil)
	}
	if got := r.Conversations(); len(got) != 0 {
		t.Fatalf("a new router has bindings %v", got)
	}
	route(conv(1, "a"), conv(2, "b"), conv(3, "c"))
	route(conv(4, "a"))              // a returns home: most recent
	route(conv(5, "d"), conv(6, "")) // d evicts b; no id binds nothing
	want := []Binding{{"c", 0}, {"a", 0}, {"d", 1}}
	if got := r.Conversations(); !slices.Equal(got, want) {
		t.Errorf("Conversations() = %v, want %v (least recently used first)", got, want)
	}
}
