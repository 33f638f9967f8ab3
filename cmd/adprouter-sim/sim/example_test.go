package sim_test

import (
	"fmt"
	"os"

	"github.com/adprouter/adprouter/cmd/adprouter-sim/sim"
	"github.com/adprouter/adprouter/router"
)

// Compare two policies on a small shared-prompt workload.
func ExampleSimulate() {
	eng := sim.DefaultEngine()
	eng.DPSize = 4
	wl, _ := sim.DefaultWorkload(sim.KindShared)
	wl.DurationS = 5
	variants, _ := sim.ParseVariants("default,kv_cache_aware")
	rep, err := sim.Simulate(sim.Options{Engine: eng, Workloads: []sim.WorkloadConfig{wl}, Variants: variants})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, res := range rep.Runs[0].Results {
		fmt.Printf("%s: %d requests, every one completed: %v, cache hit %.0f%%\n",
			res.Policy, res.Requests, res.Completed == res.Requests, 100*res.CacheHit)
	}
	// Output:
	// default: 104 requests, every one completed: true, cache hit 89%
	// kv_cache_aware: 104 requests, every one completed: true, cache hit 90%
}

// A Simulator can be stepped one engine iteration at a time.
func ExampleSimulator_Step() {
	wl, _ := sim.DefaultWorkload(sim.KindNoReuse)
	wl.DurationS = 1
	w, _ := sim.Generate(wl)
	v, _ := sim.LookupVariant(sim.VariantKVCacheAware)
	s, _ := sim.NewSimulator(sim.DefaultEngine(), w, v, false)
	steps := 0
	for {
		more, err := s.Step()
		if err != nil {
			fmt.Println(err)
			return
		}
		if !more {
			break
		}
		steps++
	}
	res := s.Result()
	fmt.Println(res.Requests == w.NumRequests(), res.Iterations == int64(steps))
	// Output: true true
}

// Register a policy variant: a name, a policy and a change to its defaults.
func ExampleRegister() {
	err := sim.Register(sim.Variant{
		Name:   "kv_cache_aware+beta0.5",
		Policy: router.PolicyKVCacheAware,
		Doc:    "KV-aware with load_balance_weight 0.5",
		Apply:  func(c *router.Config) { c.LoadBalanceWeight = 0.5 },
	})
	fmt.Println(err)
	v, _ := sim.LookupVariant("kv_cache_aware+beta0.5")
	cfg := v.Config(8, 32)
	fmt.Println(cfg.LoadBalanceWeight, cfg.DPSize)
	// Output:
	// <nil>
	// 0.5 8
}

// The KV pool evicts unreferenced blocks least recently released first,
// a request's blocks tail first.
func ExampleCache() {
	c := sim.NewCache(4)
	seq := []uint64{11, 12, 13} // block hashes of one sequence
	c.Allocate(seq, 0, 3)       // a request reserves 3 blocks...
	for i, h := range seq {
		c.Commit(h, i) // ...and computes them
	}
	c.Release(seq, 0) // it finishes: its blocks stay cached, unreferenced
	fmt.Println(c.Match(seq), c.Used(), c.Evictable())
	c.Allocate(nil, 0, 2) // another request needs 2 blocks: 1 free, evict 1
	fmt.Println(c.Match(seq), c.Evictions())
	// Output:
	// 3 3 3
	// 2 1
}

// Write the comparison as a table.
func ExampleReport_WriteTable() {
	eng := sim.DefaultEngine()
	eng.DPSize = 2
	wl, _ := sim.DefaultWorkload(sim.KindSiblings)
	wl.DurationS, wl.Siblings = 2, 2
	v, _ := sim.ParseVariants("default")
	rep, _ := sim.Simulate(sim.Options{Engine: eng, Workloads: []sim.WorkloadConfig{wl}, Variants: v})
	rep.WriteTable(os.Stdout)
}
