package prefix

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
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
	x := NewIndex(3)
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
	x := NewIndex(1)
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
	x.SetLimit(0, 3)
	x.Match(b, out)
	if out[0] != 2 {
		t.Errorf("b matches %d after shrinking to 3, want 2", out[0])
	}
	x.Match(a, out)
	if out[0] != 1 {
		t.Errorf("a matches %d after shrinking to 3, want 1", out[0])
	}
	x.SetLimit(0, 1)
	x.Match(b, out)
	if out[0] != 0 {
		t.Errorf("b matches %d after shrinking to 1, want 0", out[0])
	}
	x.Match(a, out)
	if out[0] != 1 {
		t.Errorf("a matches %d after shrinking to 1, want 1 (its root was touched last)", out[0])
	}
	x.SetLimit(0, 0)
	x.Insert(0, a)
	if x.Len() != 0 {
		t.Errorf("limit 0 holds %d entries", x.Len())
	}
}

// Match agrees with a brute-force model under random inserts and limits,
// over more than 64 ranks (several words per rank set), and two indexes fed
// the same operations hold the same contents in the same order.
func TestIndexModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const ranks = 70
	x, twin := NewIndex(ranks), NewIndex(ranks)
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
			twin.SetLimit(r, lim)
		default:
			c := chains[rng.IntN(len(chains))]
			x.Insert(r, c)
			twin.Insert(r, c)
		}
		c := chains[rng.IntN(len(chains))]
		x.Match(c, out)
		for k := range ranks {
			want := 0
			for want < len(c) && x.Has(k, c[want]) {
				want++
			}
			if out[k] != want {
				t.Fatalf("step %d: Match on rank %d = %d, brute force %d", step, k, out[k], want)
			}
			if x.Blocks(k) > x.Limit(k) {
				t.Fatalf("step %d: rank %d holds %d blocks over its limit %d", step, k, x.Blocks(k), x.Limit(k))
			}
		}
	}
	dump := func(ix *Index) string {
		s := ""
		ix.Each(func(r int, h uint64) { s += fmt.Sprint(r, h, ";") })
		return s
	}
	if dump(x) != dump(twin) {
		t.Error("two indexes fed the same operations differ")
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
	x := NewIndex(16)
	chain := AppendHashes(nil, seq(0, 2047), 32, 0, 0)
	for r := range 16 {
		x.Insert(r, chain[:r*4])
	}
	out := make([]int, 16)
	for b.Loop() {
		x.Match(chain, out)
	}
}
