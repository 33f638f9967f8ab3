package router

import "fmt"

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

// A host that knows its engine's KV state reports it: what the requests it
// has not admitted yet will reserve, how many of its free tokens are cached
// blocks no request holds, and each request's output. Rank 0 holds all but
// 32 tokens of the prompt and has 3000 tokens free, none of them evictable:
// the prefix is held by running requests, and the request needs room only
// for what it computes and its output. Without the evictable count the
// prefix might be among the free tokens, the whole prompt and its output
// (4608 tokens) do not fit in 3000, and rank 1 computes the prompt again.
func ExampleRankState_kvState() {
	cfg := DefaultConfig(PolicyKVCacheAware, 2)
	if err := ApplyPreset(&cfg, PresetRecommended); err != nil {
		panic(err)
	}
	states := []RankState{
		{Rank: 0, NumActiveRequests: 4, NumActiveTokens: 6000, KVCapacityTokens: 65536, FreeKVTokens: 3000,
			ReportsPendingKV: true, PendingKVTokens: 0, ReportsEvictableKV: true, EvictableKVTokens: 0},
		{Rank: 1, NumActiveRequests: 4, NumActiveTokens: 6000, KVCapacityTokens: 65536, FreeKVTokens: 40000,
			ReportsPendingKV: true, PendingKVTokens: 8000, ReportsEvictableKV: true, EvictableKVTokens: 0},
	}
	reqs := []Request{{ID: 1, NumTokens: 4096, MaxNewTokens: 512, TargetRank: NoTarget}}
	matches := []int32{4064, 0}
	for _, report := range []bool{true, false} {
		r, err := New(cfg)
		if err != nil {
			panic(err)
		}
		for k := range states {
			states[k].ReportsEvictableKV = report
		}
		res, err := r.Route(states, reqs, 8, matches)
		if err != nil {
			panic(err)
		}
		fmt.Printf("evictable KV reported %v: rank %d\n", report, res.Ranks[0])
	}
	// Output:
	// evictable KV reported true: rank 0
	// evictable KV reported false: rank 1
}
