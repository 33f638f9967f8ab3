package router

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// referenceGroupOrder is the grouping order as ROUTING.md states it: a
// stable sort by (first PrefixTokens tokens, lexicographically; then the
// longer prompt first).
func referenceGroupOrder(reqs []Request, rest []int) []int {
	want := slices.Clone(rest)
	slices.SortStableFunc(want, func(x, y int) int {
		if c := slices.Compare(prefixOf(&reqs[x]), prefixOf(&reqs[y])); c != 0 {
			return c
		}
		return cmp.Compare(reqs[y].Len(), reqs[x].Len())
	})
	return want
}

// longestGroupOrder is the TTFT score's order: the reference's, except that
// the groups (equal first PrefixTokens tokens) come in order of their
// longest prompt, longest first.
func longestGroupOrder(reqs []Request, rest []int) []int {
	longest := map[string]int{}
	key := func(i int) string { return fmt.Sprint(prefixOf(&reqs[i])) }
	for _, i := range rest {
		longest[key(i)] = max(longest[key(i)], reqs[i].Len())
	}
	want := referenceGroupOrder(reqs, rest)
	slices.SortStableFunc(want, func(x, y int) int {
		return cmp.Compare(longest[key(y)], longest[key(x)])
	})
	return want
}

// groupSortBatch draws requests whose prefixes collide often: a few
// families, prefixes that are prefixes of others, empty and short prompts,
// negative tokens, equal lengths, and lengths spread as widely as asked.
func groupSortBatch(rng *rand.Rand, n int, lenSpread int) []Request {
	families := make([][]int32, 1+rng.IntN(5))
	for f := range families {
		families[f] = make([]int32, PrefixTokens+8)
		for t := range families[f] {
			families[f][t] = rng.Int32N(7) - 3
		}
	}
	reqs := make([]Request, n)
	for i := range reqs {
		fam := families[rng.IntN(len(families))]
		toks := slices.Clone(fam[:rng.IntN(len(fam)+1)])
		if len(toks) > 0 && rng.IntN(4) == 0 {
			toks[rng.IntN(len(toks))] = rng.Int32() - 1<<30 // differ somewhere
		}
		q := Request{ID: uint64(i), Tokens: toks, TargetRank: NoTarget}
		if rng.IntN(2) == 0 {
			q.NumTokens = len(toks) + rng.IntN(lenSpread+1)
		}
		reqs[i] = q
	}
	return reqs
}

// The grouped sort gives exactly the stable sort's order, on both the packed
// key and the wide fallback (lengths spread over ~2^48 tokens), in the
// reference's group order and longest group first.
func TestGroupSortMatchesStableSort(t *testing.T) {
	for _, tc := range []struct {
		name   string
		spread int
	}{{"packed", 3}, {"packed_spread", 4000}, {"wide", MaxTokens - PrefixTokens - 8}} {
		for _, longest := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/longest_first=%v", tc.name, longest), func(t *testing.T) {
				var g groupSorter
				rng := rand.New(rand.NewPCG(1, uint64(tc.spread)))
				for iter := range 2000 {
					n := rng.IntN(60)
					if iter%40 == 0 {
						n = 128 + rng.IntN(1000) // large enough for the radix sort
					}
					reqs := groupSortBatch(rng, n, tc.spread)
					rest := rng.Perm(n)[:rng.IntN(n+1)] // a subset, in any order
					want := referenceGroupOrder(reqs, rest)
					if longest {
						want = longestGroupOrder(reqs, rest)
					}
					g.sort(reqs, rest, longest)
					if !slices.Equal(rest, want) {
						t.Fatalf("iteration %d: got order %v, want %v", iter, rest, want)
					}
					if got, want := g.groupStarts(), prefixRuns(reqs, rest); !slices.Equal(got, want) {
						t.Fatalf("iteration %d: group starts %v, want %v", iter, got, want)
					}
				}
			})
		}
	}
}

// prefixRuns returns where each run of equal grouping prefixes begins in
// rest: the group starts, found by comparing the prefixes themselves.
func prefixRuns(reqs []Request, rest []int) []int {
	var starts []int
	for p, i := range rest {
		if p == 0 || !slices.Equal(prefixOf(&reqs[i]), prefixOf(&reqs[rest[p-1]])) {
			starts = append(starts, p)
		}
	}
	return starts
}

// Prefixes equal in their first PrefixTokens tokens fall in one group
// whatever follows; the hash table survives many groups (growth, probing).
func TestGroupSortGroups(t *testing.T) {
	var reqs []Request
	for i := range 3000 {
		toks := make([]int32, PrefixTokens+2)
		toks[5] = int32(i % 1000)        // 1000 groups
		toks[PrefixTokens] = int32(i)    // beyond the key: ignored
		toks[PrefixTokens+1] = int32(-i) // idem
		reqs = append(reqs, Request{ID: uint64(i), Tokens: toks, TargetRank: NoTarget})
	}
	rest := make([]int, len(reqs))
	for i := range rest {
		rest[i] = len(rest) - 1 - i
	}
	want := referenceGroupOrder(reqs, rest)
	var g groupSorter
	g.sort(reqs, rest, false)
	if !slices.Equal(rest, want) {
		t.Fatal("order differs from the stable sort")
	}
	if got := len(g.rep); got != 1000 {
		t.Errorf("%d groups, want 1000", got)
	}
}

func FuzzGroupSort(f *testing.F) {
	f.Add(uint64(1), uint8(20), uint16(5))
	f.Add(uint64(7), uint8(200), uint16(0))
	f.Fuzz(func(t *testing.T, seed uint64, n uint8, spread uint16) {
		rng := rand.New(rand.NewPCG(seed, 0))
		reqs := groupSortBatch(rng, int(n), int(spread))
		for _, longest := range []bool{false, true} {
			rest := rng.Perm(int(n))
			want := referenceGroupOrder(reqs, rest)
			if longest {
				want = longestGroupOrder(reqs, rest)
			}
			var g groupSorter
			g.sort(reqs, rest, longest)
			if !slices.Equal(rest, want) {
				t.Fatalf("longest first %v: got order %v, want %v", longest, rest, want)
			}
		}
	})
}
