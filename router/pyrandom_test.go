package router

import (
	"fmt"
	"math/bits"
	"slices"
	"testing"

	"github.com/adprouter/adprouter/router/internal/seedwidths"
)

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

// The vector seeders must equal mtSeed and the generator, lane by lane, for
// one- and two-word seeds and every output they produce.
func TestSeedLanesEqualsGenerator(t *testing.T) {
	if !seedSIMD {
		t.Skip("no vector seeder on this CPU or build")
	}
	for _, c := range seederCases() {
		seeds := make([]uint64, c.width)
		for l := range seeds {
			seeds[l] = uint64(l) * 0x9e3779b97f4a7c15 >> (l % 40)
		}
		seeds[0], seeds[1], seeds[2], seeds[c.width-1] = 0, 1<<32-1, 1<<32, 18446744073709551615
		add := make([]uint32, 2*c.width)
		for l, s := range seeds {
			add[l], add[c.width+l] = seedAddends(s)
		}
		st := make([]uint32, mtN*c.width)
		out := make([]uint32, mtFastOutputs*c.width)
		c.seed(&st[0], &add[0], &out[0], mtFastOutputs)
		for l, seed := range seeds {
			var one [mtN]uint32
			mtSeed(&one, seed)
			for i := range one {
				if got := st[i*c.width+l]; got != one[i] {
					t.Fatalf("width %d lane %d (seed %d) word %d = %#x, mtSeed %#x", c.width, l, seed, i, got, one[i])
				}
			}
			var r pyRandom
			r.seed(seed)
			for i := range mtFastOutputs {
				if got, want := out[i*c.width+l], r.uint32(); got != want {
					t.Fatalf("width %d lane %d (seed %d) output %d = %d, generator %d", c.width, l, seed, i, got, want)
				}
			}
		}
	}
}

// Both seeding paths of a decision's seed cache give every position the
// same stream, whatever order positions are asked in: dense ties (32, then
// 96 lanes at once with AVX2), dense ties among all ranks (96 from the
// first), sparse ones (one at a time, and the last few 16 at a time), and
// ties everywhere to the end (96, 96, then 64 for the last 60 positions).
func TestSeedCachePaths(t *testing.T) {
	reqs := make([]Request, 300)
	rest := make([]int, len(reqs))
	for i := range reqs {
		reqs[i].ID = uint64(i*i) << (i % 37)
		rest[i] = len(reqs) - 1 - i
	}
	var dense []int
	for p := 5; p <= 36; p++ {
		dense = append(dense, p) // all of the first fill used
	}
	dense = append(dense, 0, 40, 99, 150, 299, 1, 98)
	sparse := []int{0, 200, 250, 299, 1}
	var full []int
	for p := range 300 {
		if p < 192 || p >= 240 {
			full = append(full, p)
		}
	}
	saved := seedSIMD
	defer func() { seedSIMD = saved }()
	if !saved {
		t.Skip("no vector seeder on this CPU or build")
	}
	widths := map[int32]bool{}
	for run, order := range [][]int{dense, dense, sparse, full} {
		ties := 2
		if run == 1 || run == 3 {
			ties = 16 // every rank tied: the first run seeds 96
		}
		var caches [2]seedCache
		for c, simd := range []bool{false, true} {
			seedSIMD = simd
			caches[c].reset(len(rest))
			for _, pos := range order {
				caches[c].stream(pos, rest, reqs, 16, ties)
			}
		}
		if first, want := caches[1].width[order[0]], map[int]int32{0: 32, 1: 96, 3: 96}[run]; run != 2 && first != want {
			t.Errorf("run %d (%d of 16 ranks tied): first seeding run %d lanes wide, want %d", run, ties, first, want)
		}
		for _, pos := range order {
			widths[caches[1].width[pos]] = true
			var r pyRandom
			r.seed(reqs[rest[pos]].ID)
			for c := range caches {
				if n := caches[c].n[pos]; n != 2*16+16 {
					t.Fatalf("cache %d position %d: %d outputs, want %d", c, pos, n, 2*16+16)
				}
			}
			s0, s1 := caches[0].stream(pos, rest, reqs, 16, 2), caches[1].stream(pos, rest, reqs, 16, 2)
			for i := range 300 {
				want := r.uint32()
				if a, b := s0.next(), s1.next(); a != want || b != want {
					t.Fatalf("position %d output %d: portable %d, vector %d, generator %d", pos, i, a, b, want)
				}
			}
		}
	}
	if !widths[1] || !widths[16] || !widths[32] || !widths[64] || !widths[96] {
		t.Errorf("vector cache seeded with widths %v, want 1, 16, 32, 64 and 96 all exercised", widths)
	}
}

// BenchmarkSeedLanes: the vector seeders, 16 to 96 seeds and their first 48
// outputs per run; ns/seed is the cost of one seed.
func BenchmarkSeedLanes(b *testing.B) {
	if !seedSIMD {
		b.Skip("no vector seeder on this CPU or build")
	}
	for _, c := range seederCases() {
		b.Run(fmt.Sprint(c.width), func(b *testing.B) {
			st := make([]uint32, mtN*c.width)
			out := make([]uint32, 48*c.width)
			add := make([]uint32, 2*c.width)
			for i := range b.N {
				for l := range c.width {
					add[l], add[c.width+l] = seedAddends(uint64(i*c.width + l))
				}
				c.seed(&st[0], &add[0], &out[0], 48)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*c.width), "ns/seed")
		})
	}
}

// Decisions are the same whichever seeder runs: tie-heavy batches (all ranks
// tied, and 256 ranks, whose shuffles outrun the precomputed outputs) and
// ordinary ones, with and without matches.
func TestTieBreakSeedersAgree(t *testing.T) {
	if !seedSIMD {
		t.Skip("no vector seeder on this CPU or build")
	}
	defer func() { seedSIMD = true }()
	cases := []struct {
		name  string
		batch benchBatch
	}{
		{"ties_256x16", newTiesBatch(256, 16)},
		{"ties_300x64", newTiesBatch(300, 64)},
		{"ties_600x256", newTiesBatch(600, 256)},
		{"plain_256x16", newBenchBatch(256, 16, 2048, benchOpts{})},
		{"matches_256x16", newBenchBatch(256, 16, 2048, benchOpts{matches: true})},
	}
	// Every shuffle size the accepted-draw pass handles, with ranks leaving
	// the eligible set as they fill (so prepared sizes go stale).
	for size := 2; size <= 24; size += 3 {
		cases = append(cases, struct {
			name  string
			batch benchBatch
		}{fmt.Sprintf("ties_%dx%d", 40+3*size, size), newTiesBatch(40+3*size, size)})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			size := len(c.batch.states)
			var got [2]Result
			for i, simd := range []bool{false, true} {
				seedSIMD = simd
				r, err := New(DefaultConfig(PolicyKVCacheAware, size))
				if err != nil {
					t.Fatal(err)
				}
				if err := r.RouteInto(&got[i], c.batch.states, c.batch.reqs, c.batch.maxn, c.batch.matches); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(got[0].Ranks, got[1].Ranks) {
				t.Errorf("ranks differ: portable %v, vector %v", got[0].Ranks, got[1].Ranks)
			}
		})
	}
}

// Shuffles whose rejections the vector pass resolved beside the seeding
// (mtAcceptAVX2, then mtStream.shuffleAccepted) equal CPython's, for every
// shuffle size the pass handles, in 32- and 64-lane runs; a shuffle of
// another size than the run was prepared for takes the ordinary path and
// agrees too.
func TestShuffleAcceptedMatchesPython(t *testing.T) {
	if !seedSIMD {
		t.Skip("no vector seeder on this CPU or build")
	}
	reqs := make([]Request, 64)
	rest := make([]int, len(reqs))
	for i := range reqs {
		reqs[i].ID = uint64(i+1)*0x9e3779b97f4a7c15>>(i%40) + uint64(i)
		rest[i] = i
	}
	for m := 2; 2*m+16 <= 64; m++ {
		for _, sparse := range []bool{false, true} {
			var c seedCache
			c.reset(len(rest))
			if sparse {
				c.fills, c.used, c.seeded = 1, 1, 4 // ties now and then: a 32-lane run
			}
			accepted := 0
			for pos := range rest {
				st := c.stream(pos, rest, reqs, m, 2)
				size := m
				if pos%7 == 3 {
					size = m + 1 // not what the run was prepared for
				}
				if st.acceptM == size && bits.OnesCount64(st.accepted) >= size-1 {
					accepted++
				}
				got := make([]int, size)
				want := make([]int, size)
				for k := range got {
					got[k], want[k] = k, k
				}
				st.shuffle(got)
				PyShuffle(reqs[rest[pos]].ID, want)
				if !slices.Equal(got, want) {
					t.Fatalf("m=%d sparse=%v position %d (width %d): shuffle %v, Python %v", m, sparse, pos, c.width[pos], got, want)
				}
			}
			if accepted < len(rest)/2 {
				t.Errorf("m=%d sparse=%v: %d of %d shuffles used the accepted draws, want most", m, sparse, accepted, len(rest))
			}
		}
	}
}

// seederCase is one AVX2 seeder of seederWidths, through the dispatch.
type seederCase struct {
	width int
	seed  func(st, add, out *uint32, nout int)
}

func seederCases() []seederCase {
	var cs []seederCase
	for _, w := range seederWidths {
		cs = append(cs, seederCase{w, func(st, add, out *uint32, nout int) { mtSeedAVX2(w, st, add, out, nout) }})
	}
	return cs
}

// The seeders' table and the strategy agree: mtLanes is the widest seeder,
// and every width the strategy picks is a seeder's.
func TestSeederTable(t *testing.T) {
	widths := seedwidths.Widths()
	if !slices.Equal(widths, seederWidths[:]) {
		t.Fatalf("seederWidths %v, the table says %v: run go generate ./router", seederWidths, widths)
	}
	if mtLanes != widths[len(widths)-1] {
		t.Errorf("mtLanes = %d, the widest seeder seeds %d", mtLanes, widths[len(widths)-1])
	}
	for _, w := range []int{seedNarrow, seedMiddle, seedTail, mtLanes} {
		if !slices.Contains(widths, w) {
			t.Errorf("the strategy picks width %d, which no seeder has (%v)", w, widths)
		}
	}
}
