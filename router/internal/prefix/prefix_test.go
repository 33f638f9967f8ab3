package prefix

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func seq(from, n int) []int32 {
	t := make([]int32, n)
	for i := range t {
		t[i] = int32(from + i)
	}
	return t
}

func TestHashScopes(t *testing.T) {
	toks := seq(0, 64)
	base := AppendHashes(nil, toks, 32, 0, 0)
	for _, tc := range []struct {
		name        string
		lora, salt  uint64
		wantMatches bool
	}{
		{"same scope", 0, 0, true},
		{"other lora", 7, 0, false},
		{"other salt", 0, 7, false},
		{"lora and salt swapped", 7, 0, false},
	} {
		got := AppendHashes(nil, toks, 32, tc.lora, tc.salt)
		if eq := slices.Equal(got, base); eq != tc.wantMatches {
			t.Errorf("%s: hashes equal = %v, want %v", tc.name, eq, tc.wantMatches)
		}
	}
	if Root(1, 2) == Root(2, 1) {
		t.Error("Root(1, 2) == Root(2, 1): scopes collide")
	}
}

func TestHashBlocks(t *testing.T) {
	for _, tc := range []struct{ tokens, block, want int }{
		{0, 32, 0}, {31, 32, 0}, {32, 32, 1}, {63, 32, 1}, {64, 32, 2}, {100, 7, 14}, {5, 1, 5},
	} {
		if got := len(AppendHashes(nil, seq(0, tc.tokens), tc.block, 0, 0)); got != tc.want {
			t.Errorf("%d tokens in blocks of %d: %d hashes, want %d (partial blocks are not hashed)", tc.tokens, tc.block, got, tc.want)
		}
	}
	// Chained: the same second block after a different first block hashes
	// differently.
	a := AppendHashes(nil, append(seq(0, 32), seq(100, 32)...), 32, 0, 0)
	b := AppendHashes(nil, append(seq(1, 32), seq(100, 32)...), 32, 0, 0)
	if a[1] == b[1] {
		t.Error("second block hash ignores its parent")
	}
	// Every token matters, in every lane and in the tail.
	ref := AppendHashes(nil, seq(0, 37), 37, 0, 0)[0]
	for i := range 37 {
		toks := seq(0, 37)
		toks[i]++
		if AppendHashes(nil, toks, 37, 0, 0)[0] == ref {
			t.Errorf("changing token %d does not change the block hash", i)
		}
	}
}

// Pinned values: block hash v1 is part of the C and Python API, so a change
// to it must be deliberate.
func TestHashStable(t *testing.T) {
	got := AppendHashes(nil, seq(0, 64), 32, 0, 0)
	want := []uint64{0xdf1daabaa8d84931, 0x3f62b48348652bbe}
	if !slices.Equal(got, want) {
		t.Errorf("block hash v1 of 0..63 = %#x, want %#x", got, want)
	}
}

func TestIndexMatch(t *testing.T) {
	x := NewIndex(3, 1<<20)
	chain := AppendHashes(nil, seq(0, 128), 32, 0, 0) // 4 blocks
	x.Insert(0, chain)
	x.Insert(1, chain[:2])
	out := make([]int, 3)
	x.Match(chain, out)
	if want := []int{4, 2, 0}; !slices.Equal(out, want) {
		t.Errorf("Match = %v, want %v", out, want)
	}
	x.Match(nil, out)
	if want := []int{0, 0, 0}; !slices.Equal(out, want) {
		t.Errorf("Match(empty) = %v, want %v", out, want)
	}
}

func TestIndexLRU(t *testing.T) {
	x := NewIndex(1, 1<<20)
	x.SetLimit(0, 4)
	a := AppendHashes(nil, seq(0, 96), 32, 0, 0)    // 3 blocks
	b := AppendHashes(nil, seq(1000, 64), 32, 0, 0) // 2 blocks
	x.Insert(0, a)
	x.Insert(0, b) // 5 > 4: evicts a's tail (its last block) first
	if x.Blocks(0) != 4 {
		t.Fatalf("Blocks = %d, want the limit 4", x.Blocks(0))
	}
	out := make([]int, 1)
	x.Match(a, out)
	if out[0] != 2 {
		t.Errorf("after eviction a matches %d blocks, want 2 (tail evicted first)", out[0])
	}
	if x.Has(0, a[2]) || x.Evicted(0) != 1 {
		t.Errorf("a's last block still indexed (Has=%v, evicted=%d)", x.Has(0, a[2]), x.Evicted(0))
	}
	// Recency is now (most recent first) b0 b1 a0 a1. Touching a's root
	// makes a1 the least recently used: shrinking evicts it, then b1, b0.
	x.Insert(0, a[:1])
	for _, step := range []struct {
		limit        int
		wantB, wantA int // blocks b and a still match
	}{
		{limit: 3, wantB: 2, wantA: 1},
		{limit: 1, wantB: 0, wantA: 1}, // a's root was touched last
	} {
		x.SetLimit(0, step.limit)
		for _, m := range []struct {
			name string
			seq  []uint64
			want int
		}{{"b", b, step.wantB}, {"a", a, step.wantA}} {
			x.Match(m.seq, out)
			if out[0] != m.want {
				t.Errorf("%s matches %d after shrinking to %d, want %d", m.name, out[0], step.limit, m.want)
			}
		}
	}
	x.SetLimit(0, 0)
	x.Insert(0, a)
	if x.Len() != 0 {
		t.Errorf("limit 0 holds %d entries", x.Len())
	}
}

// model is the Index's specification in plain slices: per-rank recency
// lists and one global recency list of (rank, block) entries.
type model struct {
	limit []int
	ranks [][]uint64  // per rank, most recent first
	all   [][2]uint64 // (rank, hash), most recent first
	max   int
}

func (m *model) remove(rank int, h uint64) {
	m.ranks[rank] = slices.DeleteFunc(m.ranks[rank], func(x uint64) bool { return x == h })
	m.all = slices.DeleteFunc(m.all, func(e [2]uint64) bool { return e == [2]uint64{uint64(rank), h} })
}

func (m *model) insert(rank int, chain []uint64) {
	chain = chain[:min(len(chain), m.limit[rank], m.max)]
	for i := len(chain) - 1; i >= 0; i-- {
		h := chain[i]
		if slices.Contains(m.ranks[rank], h) {
			m.remove(rank, h)
		} else {
			for len(m.ranks[rank]) >= m.limit[rank] {
				m.remove(rank, m.ranks[rank][len(m.ranks[rank])-1])
			}
			for len(m.all) >= m.max {
				e := m.all[len(m.all)-1]
				m.remove(int(e[0]), e[1])
			}
		}
		m.ranks[rank] = slices.Insert(m.ranks[rank], 0, h)
		m.all = slices.Insert(m.all, 0, [2]uint64{uint64(rank), h})
	}
}

func (m *model) setLimit(rank, limit int) {
	m.limit[rank] = limit
	for len(m.ranks[rank]) > limit {
		m.remove(rank, m.ranks[rank][len(m.ranks[rank])-1])
	}
}

// The Index agrees with the model under random inserts and limits, over
// more than 64 ranks, with a total bound that never binds and with one that
// binds all the time: same contents in the same per-rank order, same
// matches, same sizes.
func TestIndexModel(t *testing.T) {
	for _, total := range []int{1 << 20, 40, 1} {
		t.Run(fmt.Sprint("total=", total), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			const ranks = 70
			x := NewIndex(ranks, total)
			m := &model{limit: make([]int, ranks), ranks: make([][]uint64, ranks), max: total}
			for r := range ranks {
				m.limit[r] = DefaultRankBlocks
			}
			chains := make([][]uint64, 12)
			for i := range chains {
				// Chains share prefixes: a few roots, random extensions.
				toks := append(seq(rng.IntN(3)*1000, 32*(1+rng.IntN(2))), seq(5000+i*100, 32*rng.IntN(4))...)
				chains[i] = AppendHashes(nil, toks, 32, 0, 0)
			}
			out := make([]int, ranks)
			for step := range 3000 {
				r := rng.IntN(ranks)
				switch rng.IntN(10) {
				case 0:
					lim := rng.IntN(8)
					x.SetLimit(r, lim)
					m.setLimit(r, lim)
				default:
					c := chains[rng.IntN(len(chains))]
					x.Insert(r, c)
					m.insert(r, c)
				}
				c := chains[rng.IntN(len(chains))]
				x.Match(c, out)
				for k := range ranks {
					want := 0
					for want < len(c) && slices.Contains(m.ranks[k], c[want]) {
						want++
					}
					if out[k] != want {
						t.Fatalf("step %d: Match on rank %d = %d, model %d", step, k, out[k], want)
					}
					if x.Blocks(k) != len(m.ranks[k]) {
						t.Fatalf("step %d: rank %d holds %d blocks, model %d", step, k, x.Blocks(k), len(m.ranks[k]))
					}
				}
				if x.Len() != len(m.all) || x.Len() > total {
					t.Fatalf("step %d: %d entries, model %d, bound %d", step, x.Len(), len(m.all), total)
				}
				if h := c[0]; x.Replicas(h) != countHolders(m, h) {
					t.Fatalf("step %d: Replicas = %d, model %d", step, x.Replicas(h), countHolders(m, h))
				}
			}
			var got, want []string
			x.Each(func(r int, h uint64) { got = append(got, fmt.Sprint(r, h)) })
			for r, l := range m.ranks {
				for _, h := range l {
					want = append(want, fmt.Sprint(r, h))
				}
			}
			if !slices.Equal(got, want) {
				t.Error("index contents or recency order differ from the model")
			}
		})
	}
}

func countHolders(m *model, h uint64) int {
	n := 0
	for _, l := range m.ranks {
		if slices.Contains(l, h) {
			n++
		}
	}
	return n
}

// Under constant eviction the index never exceeds its total bound, and its
// memory stays within EntryBytes per entry of the bound however many
// distinct blocks pass through it.
func TestIndexTotalBound(t *testing.T) {
	const total = 5000
	x := NewIndex(1024, total)
	for i := range 2000 {
		x.Insert(i%1024, AppendHashes(nil, seq(i*10_000, 32*16), 32, 0, 0))
	}
	if x.Len() != total {
		t.Errorf("Len = %d after 32000 inserted entries, want the bound %d", x.Len(), total)
	}
	if b := x.Bytes(); b > total*EntryBytes+1024*64+1024 {
		t.Errorf("Bytes = %d, want at most %d entries x %d + per-rank words", b, total, EntryBytes)
	}
	// The last 312 chains (4992 entries) are held whole, the one before by
	// its first 8 blocks (tail first eviction), older ones not at all:
	// lookups survive the table's deletions.
	out := make([]int, 1024)
	for i := 1500; i < 2000; i++ {
		x.Match(AppendHashes(nil, seq(i*10_000, 32*16), 32, 0, 0), out)
		want := 0
		switch {
		case i >= 2000-312:
			want = 16
		case i == 2000-313:
			want = 8
		}
		if out[i%1024] != want {
			t.Fatalf("chain %d matches %d blocks, want %d", i, out[i%1024], want)
		}
	}
	var evicted uint64
	for r := range 1024 {
		evicted += x.Evicted(r)
	}
	if evicted != 2000*16-total {
		t.Errorf("%d evictions, want %d", evicted, 2000*16-total)
	}
}

func BenchmarkHash2k(b *testing.B) {
	toks := seq(0, 2047)
	var dst []uint64
	b.SetBytes(int64(len(toks) * 4))
	for b.Loop() {
		dst = AppendHashes(dst[:0], toks, 32, 0, 0)
	}
}

func BenchmarkMatch16(b *testing.B) {
	x := NewIndex(16, 1<<20)
	chain := AppendHashes(nil, seq(0, 2047), 32, 0, 0)
	for r := range 16 {
		x.Insert(r, chain[:r*4])
	}
	out := make([]int, 16)
	for b.Loop() {
		x.Match(chain, out)
	}
}

// BenchmarkInsertEvicting is the index in an engine's steady state: 16
// ranks whose lists are full (45,000 blocks each, about 720,000 entries in
// all), each insertion a chain of 64 blocks whose first 24 are one of four
// shared system prompts and the rest new, so that every new block evicts the
// rank's least recently used one. Reported per block inserted.
func BenchmarkInsertEvicting(b *testing.B) {
	const ranks, limit, chainLen, shared = 16, 45000, 64, 24
	x := NewIndex(ranks, ranks*limit)
	for r := range ranks {
		x.SetLimit(r, limit)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var systems [4][]uint64
	for s := range systems {
		systems[s] = make([]uint64, shared)
		for i := range systems[s] {
			systems[s][i] = rng.Uint64()
		}
	}
	chain := make([]uint64, chainLen)
	next := func() (int, []uint64) {
		copy(chain, systems[rng.IntN(len(systems))])
		for i := shared; i < chainLen; i++ {
			chain[i] = rng.Uint64()
		}
		return rng.IntN(ranks), chain
	}
	for x.Evicted(0) == 0 || x.Len() < ranks*limit*9/10 {
		x.Insert(next())
	}
	b.ResetTimer()
	for b.Loop() {
		x.Insert(next())
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*chainLen), "ns/block")
}

// BenchmarkGrowthToBound fills an index of 64 ranks with new 64-block chains
// until it holds its bound (the router's default, 320 MiB: 4,194,304
// entries) and reports, per bound, the slowest insertion: the one that
// doubles the index's arrays and its hash table into memory the process
// has never touched. The stall grows with the capacity reached (100-250 ns
// per entry of it on the project's machine, the less with huge pages); a
// lower bound (index_max_bytes) bounds it. Run it once per process: later
// runs reuse memory already faulted in.
func BenchmarkGrowthToBound(b *testing.B) {
	for _, mib := range []int{80, 320} {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			var worst time.Duration
			for b.Loop() {
				x := NewIndex(64, (mib<<20)/EntryBytes)
				for r := range 64 {
					x.SetLimit(r, 1<<20)
				}
				rng := rand.New(rand.NewPCG(1, uint64(mib)))
				chain := make([]uint64, 64)
				for c := 0; x.Len() < x.MaxEntries(); c++ {
					for i := range chain {
						chain[i] = rng.Uint64()
					}
					t0 := time.Now()
					x.Insert(c%64, chain)
					worst = max(worst, time.Since(t0))
				}
			}
			b.ReportMetric(float64(worst)/1e6, "worst-ms")
		})
	}
}

// The hash table stays within its share of the total bound (four buckets
// per entry, EntryBytes) and at most half full, and at most a quarter full
// wherever a doubled table would still be within that share.
func TestIndexTableLoad(t *testing.T) {
	for _, total := range []int{64, 1000, 4096, 4097, 5000, 1 << 14} {
		x := NewIndex(4, total)
		for i := range 3 * total / 16 {
			x.Insert(i%4, AppendHashes(nil, seq(i*10_000, 32*16), 32, 0, 0))
			size := len(x.table)
			if size > 4*total || 2*x.nslot > size {
				t.Fatalf("bound %d: %d slots in %d buckets, want at most half full and at most %d buckets",
					total, x.nslot, size, 4*total)
			}
			if 4*x.nslot > size && 2*size <= 4*total {
				t.Fatalf("bound %d: %d slots in %d buckets, more than a quarter full though %d buckets fit",
					total, x.nslot, size, 2*size)
			}
		}
	}
}
