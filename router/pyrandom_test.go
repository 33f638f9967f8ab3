package router

import (
	"fmt"
	"slices"
	"testing"
)

// The vectors of ROUTING.md: list(range(n)) shuffled by random.Random(seed).
var pyShuffleVectors = []struct {
	seed uint64
	want []int
}{
	{0, []int{4, 1, 5, 2, 0, 3, 7, 6}},
	{1, []int{3, 6, 1, 5, 7, 0, 4, 2}},
	{42, []int{3, 1, 2, 4, 0}},
	{123456789, []int{0, 2, 1, 3, 6, 5, 4, 7}},
	{1<<40 + 5, []int{1, 2, 3, 6, 7, 0, 5, 4}},
	{18446744073709551615, []int{5, 7, 3, 6, 4, 2, 1, 0}},
	{99, []int{4, 7, 14, 0, 15, 5, 8, 1, 11, 10, 13, 2, 9, 3, 6, 12}},
}

func iota(n int) []int {
	x := make([]int, n)
	for i := range x {
		x[i] = i
	}
	return x
}

func TestPyShuffleVectors(t *testing.T) {
	for _, v := range pyShuffleVectors {
		t.Run(fmt.Sprint(v.seed), func(t *testing.T) {
			got := iota(len(v.want))
			PyShuffle(v.seed, got)
			if !slices.Equal(got, v.want) {
				t.Errorf("PyShuffle(%d, range(%d)) = %v, want %v", v.seed, len(v.want), got, v.want)
			}
		})
	}
}

func TestGetrandbits32Seed42(t *testing.T) {
	var r pyRandom
	r.seed(42)
	want := []uint32{2746317213, 478163327, 107420369}
	for i, w := range want {
		if got := r.uint32(); got != w {
			t.Errorf("Random(42) output %d = %d, want %d", i, got, w)
		}
	}
}

// The fast paths (first outputs without a twist, four interleaved seeds) must
// equal the plain generator for every output they produce.
func TestFastSeedingEqualsGenerator(t *testing.T) {
	seeds := [4]uint64{0, 1<<32 - 1, 1 << 32, 18446744073709551615}
	var four [4][mtN]uint32
	mtSeed4(&four, &seeds)
	for lane, seed := range seeds {
		var one [mtN]uint32
		mtSeed(&one, seed)
		if one != four[lane] {
			t.Fatalf("mtSeed4 lane %d (seed %d) differs from mtSeed", lane, seed)
		}
		var r pyRandom
		r.seed(seed)
		out := make([]uint32, mtFastOutputs)
		mtFirstOutputs(&one, out)
		for i, got := range out {
			if want := r.uint32(); got != want {
				t.Fatalf("seed %d output %d: fast %d, generator %d", seed, i, got, want)
			}
		}
	}
}

// A stream whose prefix runs out must continue exactly where the prefix
// stopped.
func TestStreamFallback(t *testing.T) {
	const seed = 7
	var mt [mtN]uint32
	mtSeed(&mt, seed)
	prefix := make([]uint32, 3)
	mtFirstOutputs(&mt, prefix)
	s := mtStream{seed: seed, prefix: prefix}
	var r pyRandom
	r.seed(seed)
	for i := range 2000 { // crosses the 624-word twist boundary too
		if got, want := s.next(), r.uint32(); got != want {
			t.Fatalf("output %d: stream %d, generator %d", i, got, want)
		}
	}
}

func BenchmarkSeed(b *testing.B) {
	var mt [mtN]uint32
	for i := range b.N {
		mtSeed(&mt, uint64(i))
	}
}

func BenchmarkSeed4(b *testing.B) {
	var mt [4][mtN]uint32
	var seeds [4]uint64
	for i := 0; i < b.N; i += 4 {
		seeds = [4]uint64{uint64(i), uint64(i + 1), uint64(i + 2), uint64(i + 3)}
		mtSeed4(&mt, &seeds)
	}
}
