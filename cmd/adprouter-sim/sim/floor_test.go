package sim

import (
	"fmt"
	"math"
	"testing"
)

// tokens returns n distinct tokens starting at from.
func tokens(from, n int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32(from + i)
	}
	return t
}

// The floor of hand-made workloads on the default engine (32-token blocks,
// 8192 tokens an iteration of 4 ms + 40 µs per token): what is reused from
// whom, and what is left out.
func TestTTFTFloor(t *testing.T) {
	shared := tokens(1, 4096)
	for _, c := range []struct {
		name     string
		kvBlocks int
		sessions []Session
		want     []Floor // ns
	}{
		{name: "one prompt, two iterations", sessions: []Session{
			{Turns: []Turn{{ID: 1, User: tokens(1, 10000), Output: 1}}},
		}, want: []Floor{{1, 2*4e6 + 10000*40e3}}},
		{name: "a prefix two sessions share is reused by both", sessions: []Session{
			{Prefix: shared, Turns: []Turn{{ID: 1, User: tokens(100000, 1000), Output: 1}}},
			{Prefix: shared, Turns: []Turn{{ID: 2, User: tokens(200000, 1000), Output: 1}}},
		}, want: []Floor{{1, 4e6 + 1000*40e3}, {2, 4e6 + 1000*40e3}}},
		{name: "a later turn reuses the earlier prompt and answer, not the other way", sessions: []Session{
			{Turns: []Turn{{ID: 1, User: tokens(1, 2000), Output: 100}, {ID: 2, User: tokens(5000, 50), Output: 1, Think: 1e9}}},
		}, want: []Floor{{1, 4e6 + 2000*40e3}, {2, 4e6 + (2150-65*32)*40e3}}},
		{name: "an in-flight follow-up may run first", sessions: []Session{
			{Turns: []Turn{{ID: 1, User: tokens(1, 2000), Output: 100}, {ID: 2, User: tokens(5000, 50), Output: 1, Think: 1e6, InFlight: true}}},
		}, want: []Floor{{1, 4e6 + (2000-62*32)*40e3}, {2, 4e6 + (2050-62*32)*40e3}}},
		{name: "a prompt no pool holds is left out", kvBlocks: 64, sessions: []Session{
			{Turns: []Turn{{ID: 1, User: tokens(1, 64*32), Output: 1}}},
			{Turns: []Turn{{ID: 2, User: tokens(10000, 100), Output: 1}}},
		}, want: []Floor{{2, 4e6 + 100*40e3}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			eng := DefaultEngine()
			if c.kvBlocks > 0 {
				eng.KVBlocks = c.kvBlocks
			}
			wl := &Workload{Config: WorkloadConfig{Seed: 1, Vocab: 32000}, Sessions: c.sessions}
			if got := TTFTFloor(wl, eng); fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("floors %v, want %v", got, c.want)
			}
		})
	}
}

// FloorP99 counts that one request of every prompt family computes its
// whole prompt, unless an answer holds the family's first block or a
// request of the family may be rejected.
func TestFloorP99(t *testing.T) {
	shared := tokens(1, 4096)
	for _, c := range []struct {
		name       string
		rankBlocks []int
		sessions   []Session
		want       float64 // ms
	}{
		{name: "one of three samples computes the prompt", sessions: []Session{
			{Prefix: shared, Turns: []Turn{{ID: 1, Output: 1}}},
			{Prefix: shared, Turns: []Turn{{ID: 2, Output: 1}}},
			{Prefix: shared, Turns: []Turn{{ID: 3, Output: 1}}},
		}, want: 4 + 4096*0.04},
		{name: "no family where an answer holds the first block", sessions: []Session{
			{Turns: []Turn{{ID: 1, User: tokens(1, 10), Output: 30}, {ID: 2, User: tokens(100, 2000), Output: 1, Think: 1e9}}},
		}, want: 4 + (2040-32)*0.04},
		{name: "no family with a request a rank may reject", rankBlocks: []int{64, 4096}, sessions: []Session{
			{Prefix: shared[:1024], Turns: []Turn{{ID: 1, User: tokens(10000, 1024), Output: 1}}},
			{Prefix: shared[:1024], Turns: []Turn{{ID: 2, User: tokens(20000, 100), Output: 1}}},
		}, want: 4 + 1024*0.04},
	} {
		t.Run(c.name, func(t *testing.T) {
			eng := DefaultEngine()
			if c.rankBlocks != nil {
				eng.DPSize, eng.RankBlocks = len(c.rankBlocks), c.rankBlocks
			}
			wl := &Workload{Config: WorkloadConfig{Seed: 1, Vocab: 32000}, Sessions: c.sessions}
			if got := FloorP99(wl, eng); math.Abs(got-c.want) > 1e-6 {
				t.Errorf("FloorP99 %v ms, want %v", got, c.want)
			}
		})
	}
}

// No policy beats the floor: on the quick evaluation grid, under both reuse
// semantics, every reference's and the recommended preset's every request
// takes at least its floor, and their TTFT p99 is at least FloorP99 (both
// of its bounds).
func TestTTFTFloorHolds(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates the quick grid")
	}
	cases, err := EvalGrid(EvalQuick, evalTraces(t))
	if err != nil {
		t.Fatal(err)
	}
	variants := mustVariants(t, "default,kv_cache_aware,kv_cache_aware+warmup,conversation,recommended")
	tight := 0
	for _, c := range cases {
		wl, err := Generate(c.Workload)
		if err != nil {
			t.Fatal(err)
		}
		floor := map[uint64]int64{}
		for _, f := range TTFTFloor(wl, c.Engine) {
			floor[f.ID] = f.TTFT
		}
		p99 := FloorP99(wl, c.Engine)
		for _, m := range ReuseModes {
			for _, v := range variants {
				eng := c.Engine
				eng.Reuse = m
				s, err := NewSimulator(eng, wl, v, false)
				if err != nil {
					t.Fatal(err)
				}
				s.Observe = func(e RequestEvent) {
					f, ok := floor[e.ID]
					if !ok || e.FirstToken-e.Arrival < f {
						t.Errorf("%s/%s %s %s: request %d TTFT %d ns, floor %d (known: %v)",
							c.Family, c.Name, m, v.Name, e.ID, e.FirstToken-e.Arrival, f, ok)
					}
					if e.FirstToken-e.Arrival == f {
						tight++
					}
				}
				res, err := s.Run()
				if err != nil {
					t.Fatal(err)
				}
				if res.Rejected == 0 && res.TTFT.P99 < p99 {
					t.Errorf("%s/%s %s %s: TTFT p99 %.3f ms under the floor's %.3f", c.Family, c.Name, m, v.Name, res.TTFT.P99, p99)
				}
			}
		}
	}
	// The bound is reached: requests that arrive at an iteration's start
	// on an idle engine take exactly their floor.
	if tight == 0 {
		t.Error("no request took exactly its floor; the floor is not tight anywhere")
	}
}
