package router

import (
	"fmt"
	"testing"
)

// Benchmarks of one routing decision on a realistic batch: prompts of
// promptLen tokens that start with one of four shared system prompts (512
// tokens) followed by a per-request user turn, ranks carrying some load, and
// for the KV-aware policy match lengths as a radix-tree probe would report
// them (the system prompt cached on some ranks, a few longer hits).

const benchSystemPrompt = 512

type benchBatch struct {
	states  []RankState
	reqs    []Request
	matches []int32
	maxn    int
}

func newBenchBatch(nreq, size, promptLen int, withMatches bool) benchBatch {
	b := benchBatch{maxn: 4 * (nreq/size + 8)}
	for k := range size {
		b.states = append(b.states, RankState{
			Rank:              k,
			NumActiveRequests: (k * 5) % 9,
			NumActiveTokens:   int64(20000 + (k*7919)%60000),
		})
	}
	for i := range nreq {
		family := int32(i*i%7) % 4 // skewed over four system prompts
		tokens := make([]int32, promptLen)
		for t := range tokens {
			if t < benchSystemPrompt {
				tokens[t] = 1000*family + int32(t)
			} else {
				tokens[t] = int32((i*131 + t*31) % 32000)
			}
		}
		b.reqs = append(b.reqs, Request{
			ID:             uint64(1_000_003 * (i + 1)),
			Tokens:         tokens,
			TargetRank:     NoTarget,
			ConversationID: fmt.Sprintf("conv-%d", i%(nreq/2+1)),
		})
	}
	if withMatches {
		b.matches = make([]int32, nreq*size)
		for i := range nreq {
			family := (i * i % 7) % 4
			for k := range size {
				var m int32
				switch {
				case k%4 == family:
					m = benchSystemPrompt // the shared system prompt is cached here
				case (i+k)%11 == 0:
					m = int32(promptLen-1) / 32 * 32 // an earlier turn, block-aligned
				}
				b.matches[i*size+k] = m
			}
		}
	}
	return b
}

func benchRoute(b *testing.B, cfg Config, batch benchBatch) {
	r, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	res := new(Result)
	// One call first so that scratch space and the Result are sized.
	if err := r.RouteInto(res, batch.states, batch.reqs, batch.maxn, batch.matches); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	cpu0 := processCPUNanos()
	ops := 0
	for b.Loop() {
		if err := r.RouteInto(res, batch.states, batch.reqs, batch.maxn, batch.matches); err != nil {
			b.Fatal(err)
		}
		ops++
	}
	if cpu0 >= 0 && ops > 0 {
		b.ReportMetric(float64(processCPUNanos()-cpu0)/float64(ops), "cpu-ns/op")
	}
}

// BenchmarkRoute: one decision, 2k-token prompts, 64 and 256 requests over 8,
// 16 and 64 ranks, for every policy (KV-aware with and without matches).
func BenchmarkRoute(b *testing.B) {
	for _, pol := range []struct {
		name    string
		policy  string
		matches bool
	}{
		{"kv_cache_aware/matches", PolicyKVCacheAware, true},
		{"kv_cache_aware/no_matches", PolicyKVCacheAware, false},
		{"default", PolicyDefault, false},
		{"conversation", PolicyConversation, false},
	} {
		for _, nreq := range []int{64, 256} {
			for _, size := range []int{8, 16, 64} {
				batch := newBenchBatch(nreq, size, 2048, pol.matches)
				b.Run(fmt.Sprintf("%s/%dreq_x_%dranks", pol.name, nreq, size), func(b *testing.B) {
					benchRoute(b, DefaultConfig(pol.policy, size), batch)
				})
			}
		}
	}
}

// BenchmarkRouteTies is the KV-aware worst case for the tie-break: idle
// ranks and identical prompts, so most requests tie and need a seeded shuffle.
func BenchmarkRouteTies(b *testing.B) {
	for _, size := range []int{16, 64} {
		batch := newBenchBatch(256, size, 2048, false)
		for k := range batch.states {
			batch.states[k] = RankState{Rank: k}
		}
		for i := range batch.reqs {
			batch.reqs[i].Tokens = batch.reqs[0].Tokens
		}
		b.Run(fmt.Sprintf("256req_x_%dranks", size), func(b *testing.B) {
			benchRoute(b, DefaultConfig(PolicyKVCacheAware, size), batch)
		})
	}
}

// BenchmarkPromptLength: the same KV-aware decision with 2k- and 32k-token
// prompts; time and allocations must not grow with the prompt (only the first
// PrefixTokens tokens are read).
func BenchmarkPromptLength(b *testing.B) {
	for _, n := range []int{2048, 32768} {
		batch := newBenchBatch(256, 16, n, true)
		b.Run(fmt.Sprintf("kv_cache_aware/256req_x_16ranks/%dtok", n), func(b *testing.B) {
			benchRoute(b, DefaultConfig(PolicyKVCacheAware, 16), batch)
		})
	}
}

// Allocations of a decision into a reused Result do not depend on prompt
// length, for any policy (the conversation map is warm: same ids each call).
func TestAllocsIndependentOfPromptLength(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counting is slow under -short")
	}
	for _, policy := range []string{PolicyKVCacheAware, PolicyDefault, PolicyConversation} {
		allocs := map[int]float64{}
		for _, n := range []int{2048, 32768} {
			batch := newBenchBatch(256, 16, n, policy == PolicyKVCacheAware)
			r := mustNew(t, DefaultConfig(policy, 16))
			res := new(Result)
			route := func() {
				if err := r.RouteInto(res, batch.states, batch.reqs, batch.maxn, batch.matches); err != nil {
					t.Fatal(err)
				}
			}
			route()
			allocs[n] = testing.AllocsPerRun(20, route)
		}
		if allocs[2048] != allocs[32768] {
			t.Errorf("%s: %v allocs per decision with 2k-token prompts, %v with 32k", policy, allocs[2048], allocs[32768])
		}
		t.Logf("%s: %v allocs per warm decision", policy, allocs[2048])
	}
}
