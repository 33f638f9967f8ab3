package router

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// withKV sets the capacity and free KV tokens of each state.
func withKV(s []RankState, capFree ...[2]int64) []RankState {
	for i, cf := range capFree {
		s[i].KVCapacityTokens, s[i].FreeKVTokens = cf[0], cf[1]
	}
	return s
}

// TestCapacityAware: the room checks of capacity_aware under each policy,
// and of the ttft score. The cases with without set report the engine's
// reservations or evictable KV (RankState.PendingKVTokens,
// EvictableKVTokens, Request.MaxNewTokens): routed again with those fields
// cleared, they must give without.
func TestCapacityAware(t *testing.T) {
	rr := func(p Placement) Config {
		c := capCfg(PolicyConversation, 3)
		c.NewConvPlacement = p
		return c
	}
	ttft := capCfg(PolicyKVCacheAware, 2)
	ttft.CapacityAware = false
	if err := ApplyPreset(&ttft, PresetRecommended); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name          string
		cfg           Config
		states        []RankState
		reqs          []Request
		matches       []int32
		want, without [][]uint64
	}{
		{
			// Without capacity the seeded tie-break sends id 0 to rank 2
			// (docs/ROUTING.md example 7); ranks 0, 2 and 3 cannot hold 10
			// tokens, so rank 1 takes it.
			name:   "kv avoids ranks without room",
			cfg:    capCfg(PolicyKVCacheAware, 4),
			states: withKV(idle(4), [2]int64{100, 5}, [2]int64{100, 100}, [2]int64{100, 9}, [2]int64{100, 0}),
			reqs:   []Request{req(0, 10)},
			want:   assign(nil, []uint64{0}, nil, nil),
		},
		{
			// Nobody holds 500 tokens: the most headroom wins (rank 2).
			name:   "kv none fits: most headroom",
			cfg:    capCfg(PolicyKVCacheAware, 3),
			states: withKV(idle(3), [2]int64{400, 100}, [2]int64{400, 200}, [2]int64{400, 300}),
			reqs:   []Request{req(0, 500)},
			want:   assign(nil, nil, []uint64{0}),
		},
		{
			// Room shrinks as the batch places requests: rank 0 (room 250)
			// takes the first, then only rank 1 (unknown capacity) fits.
			name:   "room is consumed within the batch",
			cfg:    capCfg(PolicyKVCacheAware, 2),
			states: withKV(st([2]int64{0, 0}, [2]int64{0, 5000}), [2]int64{1000, 250}),
			reqs:   []Request{req(0, 200), req(1, 200)},
			want:   assign([]uint64{0}, []uint64{1}),
		},
		{
			// Cached tokens need no room: 180 of 200 are cached on rank 0,
			// whose 50 free tokens hold the other 20.
			name:    "uncached tokens only",
			cfg:     capCfg(PolicyKVCacheAware, 2),
			states:  withKV(idle(2), [2]int64{1000, 50}, [2]int64{1000, 1000}),
			reqs:    []Request{req(0, 200)},
			matches: []int32{180, 0},
			want:    assign([]uint64{0}, nil),
		},
		{
			name:   "explicit targets are honoured",
			cfg:    capCfg(PolicyKVCacheAware, 2),
			states: withKV(idle(2), [2]int64{1000, 0}, [2]int64{1000, 1000}),
			reqs:   []Request{targeted(0, 100, 0, true)},
			want:   assign([]uint64{0}, nil),
		},
		{
			// The default policy would pick rank 0 (fewest tokens).
			name:   "default policy",
			cfg:    capCfg(PolicyDefault, 2),
			states: withKV(st([2]int64{0, 0}, [2]int64{0, 100}), [2]int64{1000, 10}, [2]int64{1000, 900}),
			reqs:   []Request{req(0, 50)},
			want:   assign(nil, []uint64{0}),
		},
		{
			// Round robin would start at rank 0, which has no room.
			name:   "conversation round robin",
			cfg:    rr(PlacementRoundRobin),
			states: withKV(idle(3), [2]int64{100, 0}, [2]int64{100, 100}, [2]int64{100, 100}),
			reqs:   []Request{conv(0, "a")},
			want:   assign(nil, []uint64{0}, nil),
		},
		{
			name:   "conversation least queued",
			cfg:    rr(PlacementLeastQueued),
			states: withKV(st([2]int64{0, 0}, [2]int64{1, 0}, [2]int64{2, 0}), [2]int64{100, 0}, [2]int64{100, 0}),
			reqs:   []Request{conv(0, "a")},
			want:   assign(nil, nil, []uint64{0}),
		},
		{
			// Rank 0's pool shows 500 free, rank 1's 150: neither holds
			// a 200-token prompt, and rank 0 has the most headroom until
			// it reports that its queued requests will take 450 of its
			// 500.
			name:    "kv pending taken from the room",
			cfg:     capCfg(PolicyKVCacheAware, 2),
			states:  pending(withKV(idle(2), [2]int64{1000, 500}, [2]int64{1000, 150}), 450, 0),
			reqs:    []Request{req(0, 200)},
			want:    assign(nil, []uint64{0}),
			without: assign([]uint64{0}, nil),
		},
		{
			// 200 prompt tokens fit rank 0's 250; with 100 tokens of output
			// reserved they do not, and rank 1 (room 400) takes it.
			name:    "kv output counted",
			cfg:     capCfg(PolicyKVCacheAware, 2),
			states:  withKV(idle(2), [2]int64{1000, 250}, [2]int64{1000, 400}),
			reqs:    []Request{withOutput(req(7, 200), 100)},
			want:    assign(nil, []uint64{7}),
			without: assign([]uint64{7}, nil),
		},
		{
			// The default policy sends both to rank 0, the less loaded;
			// the first takes 150 + 100 of its 300 free tokens, and the
			// second no longer fits there.
			name:    "output taken within the batch",
			cfg:     capCfg(PolicyDefault, 2),
			states:  withKV(st([2]int64{0, 0}, [2]int64{1, 1000}), [2]int64{1000, 300}, [2]int64{1000, 1000}),
			reqs:    []Request{withOutput(req(0, 150), 100), withOutput(req(1, 150), 100)},
			want:    assign([]uint64{0}, []uint64{1}),
			without: assign([]uint64{0, 1}, nil),
		},
		{
			// Under the ttft score both ranks' pools hold the prompt, but
			// rank 0's queued requests will take 2000 of its 2500 free
			// tokens.
			name:    "ttft pending taken from the room",
			cfg:     ttft,
			states:  pending(withKV(st([2]int64{1, 3000}, [2]int64{1, 3000}), [2]int64{8000, 2500}, [2]int64{8000, 2100}), 2000, 0),
			reqs:    []Request{req(0, 2000)},
			want:    assign(nil, []uint64{0}),
			without: assign([]uint64{0}, nil),
		},
		{
			// Rank 0 caches 960 tokens of a 2000-token prompt (under half:
			// the room is heeded there, see TestTTFTKeepsHolders) and has
			// 1100 free, none of them evictable: the prefix is held by
			// other requests, and the 1040 tokens it computes fit. Without
			// the report all 1100 free tokens may be prefix, the room must
			// hold 2000 tokens, and rank 1 computes it all.
			name:    "ttft prefix held by others needs no room",
			cfg:     ttft,
			states:  evictable(withKV(st([2]int64{1, 100}, [2]int64{1, 100}), [2]int64{8000, 1100}, [2]int64{8000, 8000}), 0, 0),
			reqs:    []Request{req(0, 2000)},
			matches: []int32{960, 0},
			want:    assign([]uint64{0}, nil),
			without: assign(nil, []uint64{0}),
		},
		{
			// The same with 480 of rank 0's free tokens evictable: at
			// least 480 of the prefix is held, and the 1520 tokens the
			// room must hold do not fit in 1100.
			name:    "ttft prefix perhaps free needs room",
			cfg:     ttft,
			states:  evictable(withKV(st([2]int64{1, 100}, [2]int64{1, 100}), [2]int64{8000, 1100}, [2]int64{8000, 8000}), 480, 0),
			reqs:    []Request{req(0, 2000)},
			matches: []int32{960, 0},
			want:    assign(nil, []uint64{0}),
			without: assign(nil, []uint64{0}),
		},
		{
			// Neither rank's free KV holds the 2000-token prompt, and no
			// rank reports its evictable tokens. Rank 0 caches 960 of it
			// with 500 tokens free: its evictable tokens are among those
			// 500, so at least 460 of the prefix is held by other requests
			// and rank 0 must find 1040 tokens past its free KV, where
			// rank 1 (900 free) must find 1100: the room narrows to rank
			// 0, the most headroom.
			name:    "ttft prefix beyond the free tokens is held",
			cfg:     ttft,
			states:  withKV(st([2]int64{1, 100}, [2]int64{1, 100}), [2]int64{8000, 500}, [2]int64{8000, 900}),
			reqs:    []Request{req(0, 2000)},
			matches: []int32{960, 0},
			want:    assign([]uint64{0}, nil),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := mustRoute(t, mustNew(t, tc.cfg), tc.states, tc.reqs, 8, tc.matches)
			if !eqAssign(res.Assignment, tc.want) {
				t.Errorf("assignment = %v, want %v", res.Assignment, tc.want)
			}
			if tc.without == nil {
				return
			}
			states, reqs := slices.Clone(tc.states), slices.Clone(tc.reqs)
			for k := range states {
				states[k].PendingKVTokens, states[k].ReportsPendingKV = 0, false
				states[k].EvictableKVTokens, states[k].ReportsEvictableKV = 0, false
			}
			for i := range reqs {
				reqs[i].MaxNewTokens = 0
			}
			res = mustRoute(t, mustNew(t, tc.cfg), states, reqs, 8, tc.matches)
			if !eqAssign(res.Assignment, tc.without) {
				t.Errorf("without the reported reservations and evictable KV: assignment = %v, want %v", res.Assignment, tc.without)
			}
		})
	}
}

// pending sets what each state reports its active requests will still take
// from its KV pool (RankState.PendingKVTokens, ReportsPendingKV).
func pending(s []RankState, tokens ...int64) []RankState {
	for i, p := range tokens {
		s[i].PendingKVTokens, s[i].ReportsPendingKV = p, true
	}
	return s
}

// evictable sets how many of each state's free KV tokens are cached blocks
// no request holds (RankState.EvictableKVTokens, ReportsEvictableKV).
func evictable(s []RankState, tokens ...int64) []RankState {
	for i, e := range tokens {
		s[i].EvictableKVTokens, s[i].ReportsEvictableKV = e, true
	}
	return s
}

// withOutput sets the output q reserves KV for.
func withOutput(q Request, out int) Request {
	q.MaxNewTokens = out
	return q
}

// A bound conversation whose home has no room overflows to a rank that has,
// and keeps its binding for later turns.
func TestCapacityAwareConversationOverflow(t *testing.T) {
	r := mustNew(t, capCfg(PolicyConversation, 2))
	mustRoute(t, r, idle(2), []Request{conv(0, "a")}, 8, nil) // round robin: rank 0
	if home, _ := r.Conversation("a"); home != 0 {
		t.Fatalf("first turn bound to %d, want 0", home)
	}
	full := withKV(idle(2), [2]int64{100, 0}, [2]int64{100, 100})
	res := mustRoute(t, r, full, []Request{conv(1, "a")}, 8, nil)
	if res.Ranks[0] != 1 {
		t.Errorf("second turn went to %d, want 1 (home has no room)", res.Ranks[0])
	}
	if home, _ := r.Conversation("a"); home != 0 {
		t.Errorf("binding moved to %d, want it kept on 0", home)
	}
	res = mustRoute(t, r, idle(2), []Request{conv(2, "a")}, 8, nil)
	if res.Ranks[0] != 0 {
		t.Errorf("third turn went to %d, want home 0", res.Ranks[0])
	}
}

// With the option off, capacity fields change nothing; with it on and every
// rank roomy (or of unknown capacity), nothing changes either.
func TestCapacityAwareNeutral(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 300 {
		policy := []Policy{PolicyDefault, PolicyKVCacheAware, PolicyConversation}[iter%3]
		size := 1 + rng.IntN(8)
		base := DefaultConfig(policy, size)
		base.ColdStartWarmup = rng.IntN(2) == 0
		on := base
		on.CapacityAware = true
		ref, off, roomy := mustNew(t, base), mustNew(t, base), mustNew(t, on)
		for range 3 {
			states := make([]RankState, size)
			for k := range states {
				states[k] = RankState{Rank: k, NumActiveRequests: rng.IntN(4), NumActiveTokens: rng.Int64N(5000)}
			}
			var reqs []Request
			for j := range rng.IntN(20) {
				q := req(rng.Uint64(), 1+rng.IntN(300))
				if rng.IntN(4) == 0 {
					q.ConversationID = string(rune('a' + j%5))
				}
				reqs = append(reqs, q)
			}
			var matches []int32
			if rng.IntN(2) == 0 {
				matches = matchTable(len(reqs), size, func(int, int) int32 { return int32(rng.IntN(200)) })
			}
			want := mustRoute(t, ref, states, reqs, 6, matches)
			squeezed := slices.Clone(states)
			for k := range squeezed {
				squeezed[k].KVCapacityTokens, squeezed[k].FreeKVTokens = 100, rng.Int64N(101)
			}
			if got := mustRoute(t, off, squeezed, reqs, 6, matches); !eqAssign(got.Assignment, want.Assignment) {
				t.Fatalf("iter %d: capacity fields changed a decision with the option off", iter)
			}
			roomyStates := slices.Clone(states)
			for k := range roomyStates {
				if k%2 == 0 {
					roomyStates[k].KVCapacityTokens, roomyStates[k].FreeKVTokens = 1<<40, 1<<40
				}
			}
			if got := mustRoute(t, roomy, roomyStates, reqs, 6, matches); !eqAssign(got.Assignment, want.Assignment) {
				t.Fatalf("iter %d: capacity-aware routing changed a decision although every rank had room", iter)
			}
		}
	}
}

func TestCapacityValidation(t *testing.T) {
	r := mustNew(t, capCfg(PolicyKVCacheAware, 2))
	for _, s := range [][]RankState{
		withKV(idle(2), [2]int64{-1, 0}),
		withKV(idle(2), [2]int64{100, 101}),
		withKV(idle(2), [2]int64{100, -1}),
	} {
		if _, err := r.Route(s, []Request{req(1, 5)}, 4, nil); err == nil {
			t.Errorf("states %+v accepted, want an error", s)
		}
	}
}
