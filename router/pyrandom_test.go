package router

import "testing"

// The test vectors of docs/ROUTING.md (the seeded shuffle and the first
// outputs of random.Random(42)) are fixtures: testdata/routing/shuffle.txt,
// run by TestRoutingFixtures. The tests here check the fast paths against
// the plain generator.

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
