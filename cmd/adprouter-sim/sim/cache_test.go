package sim

import (
	"slices"
	"testing"
)

// chain returns n distinct block hashes of one sequence (a fake chain: the
// cache only needs distinct keys).
func chain(seq uint64, n int) []uint64 {
	h := make([]uint64, n)
	for i := range h {
		h[i] = seq<<20 | uint64(i)
	}
	return h
}

// hold allocates and commits hashes[hit:] as a request would, returning the
// blocks it now references.
func hold(t *testing.T, c *Cache, hashes []uint64) {
	t.Helper()
	hit := c.Match(hashes)
	if !c.Allocate(hashes, hit, len(hashes)-hit) {
		t.Fatalf("Allocate(%d blocks, hit %d) did not fit: used %d of %d, evictable %d",
			len(hashes), hit, c.Used(), c.Capacity(), c.Evictable())
	}
	for i := hit; i < len(hashes); i++ {
		c.Commit(hashes[i], i)
	}
}

func cached(c *Cache, hashes []uint64) []bool {
	out := make([]bool, len(hashes))
	for i, h := range hashes {
		out[i] = c.Refs(h) >= 0
	}
	return out
}

func TestCacheMatch(t *testing.T) {
	a := chain(1, 6)
	tests := []struct {
		name  string
		setup func(c *Cache)
		probe []uint64
		want  int
	}{
		{"empty cache", func(c *Cache) {}, a, 0},
		{"empty probe", func(c *Cache) {}, nil, 0},
		{"full match", func(c *Cache) { hold(t, c, a[:4]) }, a[:4], 4},
		{"prefix of longer", func(c *Cache) { hold(t, c, a[:4]) }, a, 4},
		{"longer cached than probed", func(c *Cache) { hold(t, c, a) }, a[:3], 3},
		{"other sequence", func(c *Cache) { hold(t, c, a) }, chain(2, 4), 0},
		{"released blocks still match", func(c *Cache) { hold(t, c, a[:5]); c.Release(a[:5], 0) }, a, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCache(16)
			tc.setup(c)
			if got := c.Match(tc.probe); got != tc.want {
				t.Errorf("Match = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestCacheHitAccounting(t *testing.T) {
	c := NewCache(32)
	a := chain(1, 8)
	hold(t, c, a) // computes all 8
	if c.HitBlocks() != 0 || c.Inserted() != 8 {
		t.Fatalf("first request: hits %d inserted %d, want 0 and 8", c.HitBlocks(), c.Inserted())
	}
	// A second request sharing the first 5 blocks reuses them and computes 3.
	b := append(slices.Clone(a[:5]), chain(2, 3)...)
	hold(t, c, b)
	if c.HitBlocks() != 5 || c.Inserted() != 11 || c.Duplicates() != 0 {
		t.Fatalf("second request: hits %d inserted %d dup %d, want 5, 11, 0", c.HitBlocks(), c.Inserted(), c.Duplicates())
	}
	for i, h := range a[:5] {
		if c.Refs(h) != 2 {
			t.Errorf("shared block %d: refs %d, want 2", i, c.Refs(h))
		}
	}
	// A third request that computed a cached block again (it started before
	// the block was committed) finds it cached: one duplicate, no new block.
	if !c.Allocate(a, 0, 1) {
		t.Fatal("Allocate of one private block failed")
	}
	c.Commit(a[0], 0)
	if c.Duplicates() != 1 || c.Inserted() != 11 || c.Refs(a[0]) != 3 || c.Private() != 0 {
		t.Errorf("duplicate commit: dup %d inserted %d refs %d private %d, want 1, 11, 3, 0",
			c.Duplicates(), c.Inserted(), c.Refs(a[0]), c.Private())
	}
	if c.Used() != 11 {
		t.Errorf("Used = %d, want 11", c.Used())
	}
}

func TestCacheEvictionOrder(t *testing.T) {
	a, b, d := chain(1, 4), chain(2, 4), chain(3, 4)
	tests := []struct {
		name string
		// run fills a cache of 8 blocks, then asks for need new blocks.
		run  func(t *testing.T, c *Cache)
		need int
		// want: which blocks of a and b are still cached afterwards.
		wantA, wantB []bool
	}{
		{
			name: "tail first within a request",
			run: func(t *testing.T, c *Cache) {
				hold(t, c, a)
				c.Release(a, 0)
			},
			need:  6,
			wantA: []bool{true, true, false, false},
			wantB: []bool{false, false, false, false},
		},
		{
			name: "least recently released request first",
			run: func(t *testing.T, c *Cache) {
				hold(t, c, a)
				hold(t, c, b)
				c.Release(b, 0) // b released first: older
				c.Release(a, 0)
			},
			need:  5,
			wantA: []bool{true, true, true, false},
			wantB: []bool{false, false, false, false},
		},
		{
			name: "reuse refreshes recency",
			run: func(t *testing.T, c *Cache) {
				hold(t, c, a)
				hold(t, c, b)
				c.Release(a, 0)
				c.Release(b, 0)
				hold(t, c, a[:2]) // a's prefix used again, released last
				c.Release(a[:2], 0)
			},
			need:  5,
			wantA: []bool{true, true, false, false},
			wantB: []bool{true, false, false, false},
		},
		{
			name: "referenced blocks are never evicted",
			run: func(t *testing.T, c *Cache) {
				hold(t, c, a) // still running
				hold(t, c, b)
				c.Release(b, 0)
			},
			need:  4,
			wantA: []bool{true, true, true, true},
			wantB: []bool{false, false, false, false},
		},
		{
			name: "a shared prefix outlives its branches",
			run: func(t *testing.T, c *Cache) {
				hold(t, c, a)
				x := append(slices.Clone(a[:2]), d[:2]...)
				hold(t, c, x)
				c.Release(a, 0)
				c.Release(x, 0)
			},
			need:  4,
			wantA: []bool{true, true, false, false},
			wantB: []bool{false, false, false, false},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCache(8)
			tc.run(t, c)
			if !c.Allocate(nil, 0, tc.need) {
				t.Fatalf("Allocate(%d) failed: used %d, evictable %d", tc.need, c.Used(), c.Evictable())
			}
			if got := cached(c, a); !slices.Equal(got, tc.wantA) {
				t.Errorf("a cached = %v, want %v", got, tc.wantA)
			}
			if got := cached(c, b); !slices.Equal(got, tc.wantB) {
				t.Errorf("b cached = %v, want %v", got, tc.wantB)
			}
			if c.Used() > c.Capacity() {
				t.Errorf("used %d > capacity %d", c.Used(), c.Capacity())
			}
		})
	}
}

func TestCacheAllocateDoesNotFit(t *testing.T) {
	c := NewCache(8)
	a, b := chain(1, 4), chain(2, 4)
	hold(t, c, a) // referenced
	hold(t, c, b)
	c.Release(b, 0) // 4 evictable
	// The hit blocks of the request itself cannot be evicted to make room
	// for it: b's 2 hit blocks + 3 new ones need 5 > 4 - 2 + 0.
	if c.Allocate(b, 2, 3) {
		t.Fatal("Allocate succeeded although the hit blocks leave too little room")
	}
	if c.Evictions() != 0 || c.Evictable() != 4 || c.Used() != 8 || c.Refs(b[0]) != 0 {
		t.Fatalf("a failed Allocate changed the cache: evictions %d evictable %d used %d", c.Evictions(), c.Evictable(), c.Used())
	}
	if !c.Allocate(b, 2, 2) {
		t.Fatal("Allocate(hit 2, private 2) should fit by evicting b's tail")
	}
	if got := cached(c, b); !slices.Equal(got, []bool{true, true, false, false}) {
		t.Errorf("b cached = %v, want the 2 hit blocks kept", got)
	}
	if c.Used() != 8 || c.Free() != 0 {
		t.Errorf("used %d free %d, want 8 and 0", c.Used(), c.Free())
	}
}

// TestCacheRandomOps drives a cache with random requests and checks its
// invariants after every operation.
func TestCacheRandomOps(t *testing.T) {
	r := newRNG(7, 99)
	c := NewCache(64)
	type running struct {
		held    []uint64
		private int
	}
	var live []running
	for op := range 5000 {
		if len(live) > 0 && (r.intn(2) == 0 || len(live) > 6) {
			k := r.intn(len(live))
			c.Release(live[k].held, live[k].private)
			live = slices.Delete(live, k, k+1)
		} else {
			// A request: one of 5 prefixes, then a random tail.
			hashes := append(chain(uint64(r.intn(5)), r.between(1, 12)), chain(uint64(1000+op), r.between(0, 6))...)
			hit := c.Match(hashes)
			extra := r.intn(3)
			if c.Allocate(hashes, hit, len(hashes)-hit+extra) {
				for i := hit; i < len(hashes); i++ {
					c.Commit(hashes[i], i)
				}
				live = append(live, running{hashes, extra})
			}
		}
		refs := map[uint64]int{}
		private := 0
		for _, l := range live {
			for _, h := range l.held {
				refs[h]++
			}
			private += l.private
		}
		if c.Used() > c.Capacity() || c.Private() != private {
			t.Fatalf("op %d: used %d capacity %d private %d (want %d)", op, c.Used(), c.Capacity(), c.Private(), private)
		}
		for h, n := range refs {
			if c.Refs(h) != n {
				t.Fatalf("op %d: block %x refs %d, want %d (a referenced block was evicted or miscounted)", op, h, c.Refs(h), n)
			}
		}
		if c.Evictable() != c.Cached()-len(refs) {
			t.Fatalf("op %d: evictable %d, want %d", op, c.Evictable(), c.Cached()-len(refs))
		}
	}
	if c.Evictions() == 0 {
		t.Error("the random run never evicted: the test is too weak")
	}
}

func TestAppendBlockHashes(t *testing.T) {
	x := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	y := []int32{1, 2, 3, 4, 5, 6, 0, 8, 9}
	hx := AppendBlockHashes(nil, x, 3)
	hy := AppendBlockHashes(nil, y, 3)
	if len(hx) != 3 || len(AppendBlockHashes(nil, x[:8], 3)) != 2 {
		t.Fatalf("want one hash per full block")
	}
	if hx[0] != hy[0] || hx[1] != hy[1] || hx[2] == hy[2] {
		t.Errorf("hashes of equal prefixes must be equal, of different blocks different: %x %x", hx, hy)
	}
	// Extending continues the chain.
	if got := AppendBlockHashes(slices.Clone(hx[:1]), x, 3); !slices.Equal(got, hx) {
		t.Errorf("incremental hashes %x, want %x", got, hx)
	}
	// The chain makes a block's hash depend on everything before it.
	z := []int32{0, 2, 3, 4, 5, 6}
	if AppendBlockHashes(nil, z, 3)[1] == hx[1] {
		t.Error("block 1 hashes equal although block 0 differs")
	}
}
