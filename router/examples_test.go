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
