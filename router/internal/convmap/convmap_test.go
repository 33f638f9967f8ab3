package convmap

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/adprouter/adprouter/router/internal/invariants"
)

func order(m *Map) []string {
	var keys []string
	m.Each(func(key string, rank int) { keys = append(keys, fmt.Sprint(key, "=", rank)) })
	return keys
}

// The map makes room for reserve bindings, then grows once to growTo (or its
// limit) with a hash table at most half full there, then doubles: a map
// growing to the default limit copies itself once, not four times.
func TestGrowth(t *testing.T) {
	for _, c := range []struct {
		name  string
		limit int
		caps  []int // capacity after each growth
	}{
		{"default limit", 1 << 16, []int{reserve, growTo}},
		{"small limit", 10000, []int{reserve, 10000}},
		{"large limit", 1 << 18, []int{reserve, growTo, 2 * growTo, 4 * growTo}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := New(c.limit)
			var caps []int
			for i := range c.limit {
				if len(caps) == 0 || cap(m.entries) != caps[len(caps)-1] {
					caps = append(caps, cap(m.entries))
					if len(m.table) < 2*cap(m.entries) {
						t.Errorf("after %d bindings: %d buckets for room for %d, want at least twice as many",
							i, len(m.table), cap(m.entries))
					}
				}
				m.Bind(fmt.Sprint(i), 0)
			}
			if !slices.Equal(caps, c.caps) {
				t.Errorf("capacities %v, want %v", caps, c.caps)
			}
		})
	}
}

// Bindings are kept most recent first, Touch and rebinding refresh them,
// and the least recently used go first beyond the limit.
func TestMap(t *testing.T) {
	m := New(3)
	m.Bind("a", 0)
	m.Bind("b", 1)
	m.Bind("c", 2)
	m.Touch("a")
	m.Bind("d", 3) // evicts b, the least recent
	if got, want := order(&m), []string{"d=3", "a=0", "c=2"}; !slices.Equal(got, want) {
		t.Errorf("after touch and overflow: %v, want %v", got, want)
	}
	if _, ok := m.Get("b"); ok {
		t.Error("b is still bound after eviction")
	}
	m.Bind("c", 1) // rebinding moves and refreshes
	if r, ok := m.Get("c"); !ok || r != 1 || order(&m)[0] != "c=1" {
		t.Errorf("rebinding c: rank %d ok %v order %v", r, ok, order(&m))
	}
	m.Touch("zzz") // unknown: nothing happens
	if m.Len() != 3 {
		t.Errorf("Len = %d, want 3", m.Len())
	}
	// Keys are copied: a key that aliases the caller's memory (as the C
	// front end passes them) may change afterwards.
	buf := []byte("key1")
	m.Bind(unsafe.String(&buf[0], len(buf)), 2)
	buf[0] = 'X'
	if _, ok := m.Get("key1"); !ok {
		t.Error("a bound key changed with the caller's buffer")
	}
	// Each hands out keys of their own: they outlive the binding and the
	// reuse of its memory.
	long := strings.Repeat("x", 3*chunkBytes+1)
	m.Bind(long, 1)
	var kept []string
	m.Each(func(key string, _ int) { kept = append(kept, key) })
	for i := range 10 {
		m.Bind(fmt.Sprint(i, long), 0)
	}
	if kept[0] != long || kept[1] != "key1" {
		t.Errorf("keys from Each changed after eviction: %.8q, %q", kept[0], kept[1])
	}
}

// CountRecent counts the ranks of the n most recently used bindings only.
func TestCountRecent(t *testing.T) {
	m := New(8)
	for _, b := range []struct {
		key  string
		rank int
	}{{"a", 0}, {"b", 0}, {"c", 1}, {"d", 2}} {
		m.Bind(b.key, b.rank)
	}
	m.Touch("a") // recency, most recent first: a, d, c, b
	for _, tc := range []struct {
		n    int
		want []int
	}{
		{0, []int{0, 0, 0}},
		{1, []int{1, 0, 0}},
		{3, []int{1, 1, 1}},
		{4, []int{2, 1, 1}},
		{10, []int{2, 1, 1}},
	} {
		got := make([]int, 3)
		m.CountRecent(tc.n, got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("CountRecent(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
}

// model is the reference Map: a Go map and a recency slice, most recent
// first, with every operation a linear scan.
type model struct {
	limit int
	order []string
	ranks map[string]int
}

func (m *model) move(key string) {
	i := slices.Index(m.order, key)
	m.order = slices.Insert(slices.Delete(m.order, i, i+1), 0, key)
}

func (m *model) get(key string) (int, bool) { r, ok := m.ranks[key]; return r, ok }

func (m *model) touch(key string) {
	if _, ok := m.ranks[key]; ok {
		m.move(key)
	}
}

func (m *model) bind(key string, rank int) {
	if _, ok := m.ranks[key]; ok {
		m.move(key)
	} else {
		m.order = slices.Insert(m.order, 0, key)
	}
	m.ranks[key] = rank
	if len(m.order) > m.limit {
		delete(m.ranks, m.order[len(m.order)-1])
		m.order = m.order[:len(m.order)-1]
	}
}

// check verifies m's internal invariants: the table holds exactly the
// bound slots, each where a probe from its home finds it; the chunk chains
// of the keys and the free list cover the slab exactly once.
func check(m *Map) error {
	n := 0
	for i, b := range m.table {
		if b == 0 {
			continue
		}
		n++
		e := int32(uint32(b)) - 1
		if e < 0 || int(e) >= len(m.entries) || m.entries[e].tag != uint32(b>>32) {
			return fmt.Errorf("bucket %d: %x names no slot of its tag", i, b)
		}
		// Every bucket from its home to it is full (linear probing).
		mask := len(m.table) - 1
		for j := int(uint32(b>>32) >> m.shift); j != i; j = (j + 1) & mask {
			if m.table[j] == 0 {
				return fmt.Errorf("bucket %d: empty bucket %d between it and its home", i, j)
			}
		}
	}
	if n != m.Len() || 2*n > len(m.table) && n > 0 {
		return fmt.Errorf("%d buckets for %d bindings in a table of %d", n, m.Len(), len(m.table))
	}
	seen := make([]bool, len(m.next))
	walk := func(c int32, what string) (int, error) {
		k := 0
		for ; c >= 0; c = m.next[c] {
			if seen[c] {
				return 0, fmt.Errorf("chunk %d seen twice (%s)", c, what)
			}
			seen[c] = true
			k++
		}
		return k, nil
	}
	used := 0
	for e := range m.entries {
		en := m.entries[e]
		k, err := walk(en.more, fmt.Sprint("slot ", e))
		if err != nil {
			return err
		}
		if want := max(0, (int(en.n)-1)/chunkBytes); k != want {
			return fmt.Errorf("slot %d: %d-byte key in %d more chunks, want %d", e, en.n, k, want)
		}
		used += k
	}
	free, err := walk(m.free, "free list")
	if err != nil {
		return err
	}
	if used != m.used || used+free != len(m.next) || len(m.chunks) != len(m.next)*chunkBytes {
		return fmt.Errorf("%d chunks used (counted %d), %d free, slab of %d", used, m.used, free, len(m.next))
	}
	return nil
}

// testKeys returns n distinct keys of lengths 0..1024 (often on and around
// chunk boundaries), many sharing long prefixes or differing in one byte
// only.
func testKeys(rng *rand.Rand, n int) []string {
	base := make([]byte, 1100)
	for i := range base {
		base[i] = "ab"[rng.IntN(2)]
	}
	length := func() int {
		switch rng.IntN(4) {
		case 0:
			return rng.IntN(1025)
		case 1:
			return min(1024, max(0, chunkBytes*rng.IntN(17)+rng.IntN(5)-2))
		default:
			return rng.IntN(100)
		}
	}
	seen := map[string]bool{}
	var keys []string
	for len(keys) < n {
		var k []byte
		switch rng.IntN(3) {
		case 0: // a prefix of the shared base
			k = slices.Clone(base[:length()])
		case 1: // the base with one byte changed
			k = slices.Clone(base[:length()])
			if len(k) > 0 {
				k[rng.IntN(len(k))] = 'c'
			}
		default:
			k = make([]byte, length())
			for i := range k {
				k[i] = byte(rng.IntN(256))
			}
		}
		if !seen[string(k)] {
			seen[string(k)] = true
			keys = append(keys, string(k))
		}
	}
	return keys
}

// Map behaves as the reference model over long random sequences of Get,
// Touch and Bind (each through the plain or the hashed methods, binding new
// keys through BindNew too), across table growth, slab growth and chunk reuse, with
// the real hash and with hashes reduced until most or all keys collide.
func TestMapModel(t *testing.T) {
	steps := 4000
	if testing.Short() {
		steps = 500
	}
	for _, mask := range []uint64{^uint64(0), 0xe0000000_00000000, 0} {
		for _, limit := range []int{1, 2, 7, 64, 200} {
			t.Run(fmt.Sprintf("mask%x/limit%d", mask, limit), func(t *testing.T) {
				defer func(m uint64) { hashMask = m }(hashMask)
				hashMask = mask
				rng := rand.New(rand.NewPCG(uint64(limit), mask))
				keys := testKeys(rng, 3*limit+5)
				m := New(limit)
				ref := model{limit: limit, ranks: map[string]int{}}
				counts, want := make([]int, 16), make([]int, 16)
				for step := range steps {
					key := keys[rng.IntN(len(keys))]
					// Keys may alias memory the caller reuses.
					buf := []byte(key)
					alias := unsafe.String(unsafe.SliceData(buf), len(buf))
					op := rng.IntN(10)
					hashed := rng.IntN(2) == 0 // Hash, Lookup, Rank, TouchSlot, BindHashed or BindNew instead
					switch {
					case op < 4:
						rank := rng.IntN(16)
						if hashed {
							// As the router binds: BindNew right after
							// a Lookup that found nothing.
							h := m.Hash(alias)
							if rng.IntN(2) == 0 && m.Lookup(h, alias) < 0 {
								m.BindNew(h, alias, rank)
							} else {
								m.BindHashed(h, alias, rank)
							}
						} else {
							m.Bind(alias, rank)
						}
						ref.bind(key, rank)
					case op < 7:
						r, ok := m.Get(alias)
						if hashed {
							r, ok = 0, false
							if s := m.Lookup(m.Hash(alias), alias); s >= 0 {
								r, ok = m.Rank(s), true
							}
						}
						if wr, wok := ref.get(key); r != wr || ok != wok {
							t.Fatalf("step %d: Get(%.20q…) (hashed %v) = %d, %v, want %d, %v", step, key, hashed, r, ok, wr, wok)
						}
					default:
						if !hashed {
							m.Touch(alias)
						} else if s := m.Lookup(m.Hash(alias), alias); s >= 0 {
							m.TouchSlot(s)
						}
						ref.touch(key)
					}
					clear(buf)
					if m.Len() != len(ref.order) {
						t.Fatalf("step %d: Len = %d, want %d", step, m.Len(), len(ref.order))
					}
					i := 0
					m.Each(func(key string, rank int) {
						if i >= len(ref.order) {
							t.Fatalf("step %d: Each #%d = %.20q…=%d, want no more", step, i, key, rank)
						}
						if w := ref.order[i]; key != w || rank != ref.ranks[w] {
							t.Fatalf("step %d: Each #%d = %.20q…=%d, want %.20q…=%d", step, i, key, rank, w, ref.ranks[w])
						}
						i++
					})
					n := rng.IntN(limit + 2)
					clear(counts)
					clear(want)
					m.CountRecent(n, counts)
					for _, k := range ref.order[:min(n, len(ref.order))] {
						want[ref.ranks[k]]++
					}
					if !slices.Equal(counts, want) {
						t.Fatalf("step %d: CountRecent(%d) = %v, want %v", step, n, counts, want)
					}
					if err := check(&m); err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
				}
				for _, k := range keys { // every key, bound or not
					r, ok := m.Get(k)
					if wr, wok := ref.get(k); r != wr || ok != wok {
						t.Fatalf("Get(%.20q…) = %d, %v, want %d, %v", k, r, ok, wr, wok)
					}
				}
			})
		}
	}
}

// Once the map is full and its slab has held its longest keys, Bind, Get
// and Touch allocate nothing, evictions included.
func TestSteadyStateAllocs(t *testing.T) {
	const limit = 256
	keys := testKeys(rand.New(rand.NewPCG(1, 2)), 4*limit)
	m := New(limit)
	// The longest keys first: the slab reaches the most any limit keys
	// of the set can use.
	longest := slices.Clone(keys)
	slices.SortFunc(longest, func(a, b string) int { return len(b) - len(a) })
	for _, k := range longest[:limit] {
		m.Bind(k, 0)
	}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		k := keys[i%len(keys)]
		m.Bind(k, i%16) // new keys evict
		m.Get(keys[(i*7)%len(keys)])
		m.Touch(keys[(i*13)%len(keys)])
		m.Get("not a key")
		i++
	})
	if allocs != 0 {
		t.Errorf("%v allocations per Bind, Get and Touch", allocs)
	}
	if m.Len() != limit {
		t.Errorf("Len = %d, want %d", m.Len(), limit)
	}
}

// benchID writes into id (idLen bytes, '0' filled) the id of number i: the
// last six digits of i, zero-padded, as fmt.Sprintf("%0*d", len(id), i).
// The benchmarks look up ids written in place this way, as the C front end
// passes them (hot in the cache), instead of scattered Go strings.
func benchID(id []byte, i int) string {
	for k := len(id) - 1; k >= len(id)-6; k-- {
		id[k] = byte('0' + i%10)
		i /= 10
	}
	return unsafe.String(&id[0], len(id))
}

// BenchmarkMap: at the default 65536 bindings, binding new keys at the limit
// (each Bind evicts the least recently used) and getting bound ones in a
// scattered order, for ids of 36 bytes (a UUID) and of the 1024-byte limit.
func BenchmarkMap(b *testing.B) {
	const limit = 65536
	for _, idLen := range []int{36, 1024} {
		id := []byte(strings.Repeat("0", idLen))
		fill := func() Map {
			m := New(limit)
			for i := range limit {
				m.Bind(benchID(id, i), i%16)
			}
			return m
		}
		b.Run(fmt.Sprintf("Bind/%dB", idLen), func(b *testing.B) {
			m := fill()
			b.ReportAllocs()
			i := limit
			for b.Loop() {
				m.Bind(benchID(id, i), i%16) // never bound, or evicted since
				if i++; i == 4*limit {
					i = 0
				}
			}
		})
		b.Run(fmt.Sprintf("Get/%dB", idLen), func(b *testing.B) {
			m := fill()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, ok := m.Get(benchID(id, i)); !ok {
					b.Fatal("not bound")
				}
				i = (i + 40503) % limit // odd stride: every key, scattered
			}
		})
	}
}

// Warm reads and changes nothing: on a full map, with bound, missing and
// empty keys (some colliding on their tags), the bindings, their order and
// every lookup are the same afterwards, and a warm Warm allocates nothing.
func TestWarmChangesNothing(t *testing.T) {
	defer func(m uint64) { hashMask = m }(hashMask)
	hashMask = 0xffff_0000_0000_00ff // few distinct tags and homes: long probe runs
	const limit = warmMin + 100
	keys := testKeys(rand.New(rand.NewPCG(3, 4)), 2*limit)
	m := New(limit)
	for i, k := range keys[:limit+50] { // full, and 50 evicted
		m.Bind(k, i%16)
	}
	batch := append([]string{"", "not a key"}, keys[:300]...) // evicted, bound and missing
	before := order(&m)
	ranks := func() []int {
		var out []int
		for _, k := range batch {
			r, ok := m.Get(k)
			out = append(out, map[bool]int{true: r, false: -1}[ok])
		}
		return out
	}
	want := ranks()
	hashes := make([]uint64, len(batch))
	for i, k := range batch {
		hashes[i] = m.Hash(k)
	}
	m.Warm(hashes, func(i int) string { return batch[i] })
	if got := order(&m); !slices.Equal(got, before) {
		t.Fatalf("Warm changed the bindings or their order")
	}
	if got := ranks(); !slices.Equal(got, want) {
		t.Fatalf("lookups after Warm: %v, want %v", got, want)
	}
	if allocs := testing.AllocsPerRun(10, func() { m.Warm(hashes, func(i int) string { return batch[i] }) }); allocs != 0 {
		t.Errorf("%v allocations per warm Warm", allocs)
	}
}

// In the invariants build, BindNew of a key that is bound panics: the
// caller broke its contract, and binding it again would put a second slot
// for one key in the table.
func TestBindNewBoundPanics(t *testing.T) {
	if !invariants.Enabled {
		t.Skip("checked only with -tags invariants")
	}
	m := New(4)
	m.Bind("a", 1)
	defer func() {
		if recover() == nil {
			t.Error("BindNew of a bound key did not panic")
		}
		if r, ok := m.Get("a"); !ok || r != 1 || m.Len() != 1 {
			t.Errorf("after the panic: Get(a) = %d, %v and Len %d, want 1, true and 1", r, ok, m.Len())
		}
	}()
	m.BindNew(m.Hash("a"), "a", 2)
}
