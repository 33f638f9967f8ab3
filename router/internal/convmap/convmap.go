// Package convmap is the conversation policy's map from conversation id to
// rank: bounded to a number of bindings, least recently used evicted first,
// and deterministic (recency is the only order it keeps; it never iterates
// a Go map).
//
// It sits on the routing hot path (every request with a conversation id
// looks its id up, every new conversation binds one), so it is built for
// the garbage collector to ignore: every slice it holds is free of pointers
// (nothing for the collector to scan, however many bindings), and once it
// has grown to its bound, binding, looking up and evicting allocate nothing.
// Keys live in 64-byte chunks: each slot owns one for its key's first 64
// bytes (a UUID fits), and longer keys chain further chunks of a shared
// slab, so that an evicted key's chunks serve the next keys whatever their
// lengths, with no compaction and no fragmentation. An open-addressing hash
// table finds the slots.
package convmap

import (
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"strings"

	"github.com/adprouter/adprouter/router/internal/invariants"
	"github.com/adprouter/adprouter/router/internal/lru"
)

// chunkBytes is the size of the key chunks: a UUID fits one, the 1024-byte
// longest conversation id sixteen.
const chunkBytes = 64

// Map maps conversation ids to ranks, bounded to limit entries with least
// recently used eviction. The zero Map is not usable: call New.
//
// A binding costs its key rounded up to 64-byte chunks, plus 4 bytes per
// chunk after the first (the chain), 16 bytes of entry, 8 of recency links
// and 16 to 32 of hash table (kept at most half full): about 100 bytes for
// a 36-byte id, 1125 for a 1024-byte one, once the map holds its limit.
// Before, it holds room for more: reserve bindings, then growTo (or its
// limit), then twice as many at each growth.
type Map struct {
	limit   int
	entries []entry    // slots, one per binding (evicted slots are reused)
	links   []lru.Link // recency links, parallel to entries
	order   lru.List
	// table is an open-addressing hash table with linear probing: each
	// bucket is tag<<32 | slot+1, 0 when empty. Its size is a power of two
	// at least twice the number of bindings, a tag's home bucket is its top
	// bits (tag >> shift), and deletion shifts later buckets back, so no
	// tombstones build up under constant eviction.
	table []uint64
	shift uint
	// heads holds the first chunkBytes bytes of each slot's key, parallel
	// to entries: a lookup finds the slot in the table and then reads its
	// entry and its first chunk at once (neither address depends on the
	// other). chunks holds the rest of longer keys, chunkBytes per chunk;
	// next chains the chunks of each key in order, and the free chunks
	// from free, -1 ending either chain. used counts the chunks in use.
	heads  []byte
	chunks []byte
	next   []int32
	free   int32
	used   int
	seed   maphash.Seed
	sink   uint64 // keeps Warm's reads alive
}

// entry is one binding: the top 32 bits of its key's hash, the key's
// length, the rank (ranks are below router.MaxDPSize), and the chunk with
// the key's bytes after the first chunkBytes (-1 for none).
type entry struct {
	tag  uint32
	n    int32
	rank int32
	more int32
}

// reserve is how many bindings New makes room for up front (fewer when the
// limit is lower): a new router's first decisions then bind conversations
// without growing and copying the map, at about 100 KiB per thousand.
const reserve = 4096

// growTo is how many bindings the map makes room for when it first grows
// past reserve (fewer when the limit is lower; beyond it, each growth
// doubles), with its hash table sized for them at once. Every growth copies
// the map into memory the process touches for the first time, which a
// lock-step engine waits for: doubling from reserve to the default limit
// (65536) took four decisions of 4-20 ms, one step to growTo takes one of
// 8-13 ms (router.BenchmarkConversationGrowth). The kernel maps the new
// memory as bindings arrive, except the hash table's megabyte, which random
// inserts touch at once.
const growTo = 1 << 16

// New returns an empty Map holding at most limit (>= 1) bindings.
func New(limit int) Map {
	l := Map{limit: limit, order: lru.New(), free: -1, seed: maphash.MakeSeed()}
	if n := min(limit, reserve); n > 0 {
		l.entries = make([]entry, 0, n)
		l.links = make([]lru.Link, 0, n)
		l.heads = make([]byte, 0, n*chunkBytes)
		l.rehash(max(16, 1<<bits.Len(uint(2*n-1))))
	}
	return l
}

// Len returns the number of bindings.
func (l *Map) Len() int { return len(l.entries) }

// Get returns the rank bound to key, without touching its recency.
func (l *Map) Get(key string) (int, bool) {
	e := l.find(l.hashKey(key), key)
	if e < 0 {
		return 0, false
	}
	return int(l.entries[e].rank), true
}

// Touch makes key the most recently used binding.
func (l *Map) Touch(key string) {
	if e := l.find(l.hashKey(key), key); e >= 0 {
		l.order.Touch(l.links, e)
	}
}

// Bind sets key -> rank as the most recent binding and evicts the least
// recently used one beyond the limit.
func (l *Map) Bind(key string, rank int) { l.BindHashed(l.hashKey(key), key, rank) }

// A Slot is where a binding lives, from Lookup: valid until the next Bind
// or BindHashed (which may evict it and reuse its slot), -1 for none.
type Slot int32

// Hash returns key's hash for Lookup and BindHashed. A caller that looks a
// key up more than once in one pass hashes it once. The hash is this Map's
// own (its seed is drawn per Map): it means nothing to another Map.
func (l *Map) Hash(key string) uint64 { return l.hashKey(key) }

// Lookup returns the slot bound to key, whose hash h is Hash(key), or -1.
func (l *Map) Lookup(h uint64, key string) Slot { return Slot(l.find(h, key)) }

// Rank returns the rank bound at slot s (>= 0, from Lookup since the last
// bind).
func (l *Map) Rank(s Slot) int { return int(l.entries[s].rank) }

// TouchSlot makes the binding at slot s (>= 0, from Lookup since the last
// bind) the most recently used.
func (l *Map) TouchSlot(s Slot) { l.order.Touch(l.links, int32(s)) }

// BindHashed is Bind for a key whose hash h is Hash(key).
func (l *Map) BindHashed(h uint64, key string, rank int) {
	if e := l.find(h, key); e >= 0 {
		l.entries[e].rank = int32(rank)
		l.order.Touch(l.links, e)
		return
	}
	l.bindNew(h, key, rank)
}

// BindNew is BindHashed for a key that is not bound: Lookup returned -1 for
// it since the last bind. It skips looking the key up again (the caller
// just did), which a decision binding each new conversation as it places
// it would otherwise do once more per conversation.
func (l *Map) BindNew(h uint64, key string, rank int) {
	if invariants.Enabled && l.find(h, key) >= 0 {
		panic(fmt.Sprintf("convmap: BindNew(%q): the key is bound already", key))
	}
	l.bindNew(h, key, rank)
}

// bindNew binds key, which is not bound, to rank as the most recent
// binding, evicting the least recent one beyond the limit.
func (l *Map) bindNew(h uint64, key string, rank int) {
	if l.limit < 1 {
		return
	}
	var e int32
	if len(l.entries) >= l.limit {
		// Evict first and reuse the slot: the new binding is never the
		// least recent, so the same bindings remain as if it came first,
		// and nothing grows past the limit.
		e = l.order.Back()
		l.order.Remove(l.links, e)
		l.tableDelete(e)
		l.freeChunks(e)
	} else {
		e = int32(len(l.entries))
		n := len(l.entries) + 1
		l.entries = resize(l.entries, n, min(max(2*cap(l.entries), growTo), l.limit))
		l.links = resize(l.links, n, cap(l.entries))
		l.heads = resize(l.heads, n*chunkBytes, cap(l.entries)*chunkBytes)
		if 2*cap(l.entries) > len(l.table) {
			l.rehash(1 << bits.Len(uint(2*cap(l.entries)-1)))
		}
	}
	// The key may alias caller memory (the C front end passes ids in
	// place); the map keeps its own copy.
	l.entries[e] = entry{tag: uint32(h >> 32), n: int32(len(key)), rank: int32(rank), more: l.store(e, key)}
	l.order.PushFront(l.links, e)
	l.tableInsert(e)
}

// Each calls f for every binding from most to least recently used. Each key
// is a copy of its own (one allocation), which f may keep.
func (l *Map) Each(f func(key string, rank int)) {
	for e := l.order.Front(); e >= 0; e = lru.Next(l.links, e) {
		f(l.key(e), int(l.entries[e].rank))
	}
}

// CountRecent adds one to counts[rank] for each of the n most recently used
// bindings (fewer when the map holds fewer); every bound rank must index
// counts.
func (l *Map) CountRecent(n int, counts []int) {
	for e := l.order.Front(); e >= 0 && n > 0; e = lru.Next(l.links, e) {
		counts[l.entries[e].rank]++
		n--
	}
}

// warmMin is the size below which Warm does nothing: a map this small stays
// in the caches between decisions.
const warmMin = 4096

// Warm reads ahead what looking up keys (key(i) for i < len(hashes); ""
// for none) and binding the missing ones will read: each key's home bucket,
// then the entry, first chunk and recency links of each bound key, and,
// when the map is full, the buckets and entries of the bindings the new
// keys will evict. hashes[i] is Hash(key(i)) (anything for ""). It changes
// nothing. A large map is mostly out of cache, and its lookups are chains
// of dependent misses (bucket, then entry and key, then links); here the
// misses of all keys are independent reads the CPU overlaps, so that the
// lookups that follow find their lines in cache.
func (l *Map) Warm(hashes []uint64, key func(i int) string) {
	if len(l.entries) < warmMin || len(hashes) == 0 {
		return
	}
	var sum uint64
	m := len(l.table) - 1
	for i, h := range hashes {
		if key(i) != "" {
			sum += l.table[int(uint32(h>>32)>>l.shift)]
		}
	}
	missing := 0
	for i, h := range hashes {
		if key(i) == "" {
			continue
		}
		tag := uint32(h >> 32)
		found := false
		for j := int(tag >> l.shift); ; j = (j + 1) & m {
			b := l.table[j]
			if b == 0 {
				break
			}
			if uint32(b>>32) == tag {
				e := int32(uint32(b)) - 1
				sum += uint64(l.entries[e].n) + uint64(l.heads[int(e)*chunkBytes]) + uint64(l.links[e].Prev)
				found = true
				break
			}
		}
		if !found {
			missing++
		}
	}
	if len(l.entries) >= l.limit {
		for e := l.order.Back(); e >= 0 && missing > 0; e = l.links[e].Prev {
			sum += l.table[int(l.entries[e].tag>>l.shift)]
			missing--
		}
	}
	l.sink = sum
}

// find returns the slot bound to key, whose hash is h, or -1.
func (l *Map) find(h uint64, key string) int32 {
	if len(l.table) == 0 {
		return -1
	}
	tag := uint32(h >> 32)
	m := len(l.table) - 1
	for i := int(tag >> l.shift); ; i = (i + 1) & m {
		b := l.table[i]
		if b == 0 {
			return -1
		}
		if uint32(b>>32) == tag {
			if e := int32(uint32(b)) - 1; l.equal(e, key) {
				return e
			}
		}
	}
}

// equal reports whether slot e holds key.
func (l *Map) equal(e int32, key string) bool {
	en := &l.entries[e]
	o, w := int(e)*chunkBytes, min(len(key), chunkBytes)
	if int(en.n) != len(key) || string(l.heads[o:o+w]) != key[:w] {
		return false
	}
	key = key[w:]
	for c := en.more; len(key) > 0; {
		// Compare each run of consecutive chunks at once (a key's chunks
		// usually are: they come off the slab's end or a freed chain).
		r, w := c, chunkBytes
		for w < len(key) && l.next[r] == r+1 {
			r++
			w += chunkBytes
		}
		o, w = int(c)*chunkBytes, min(w, len(key))
		if string(l.chunks[o:o+w]) != key[:w] {
			return false
		}
		key = key[w:]
		c = l.next[r]
	}
	return true
}

// key returns a copy of slot e's key.
func (l *Map) key(e int32) string {
	en := l.entries[e]
	var sb strings.Builder
	sb.Grow(int(en.n))
	o, r := int(e)*chunkBytes, int(en.n)
	sb.Write(l.heads[o : o+min(r, chunkBytes)])
	r -= chunkBytes
	for c := en.more; r > 0; c = l.next[c] {
		o = int(c) * chunkBytes
		sb.Write(l.chunks[o : o+min(r, chunkBytes)])
		r -= chunkBytes
	}
	return sb.String()
}

// store copies key into slot e's first chunk and, past chunkBytes, into
// chunks taken from the front of the free list, growing the slab when it
// has too few; it returns the first of those (-1 for none).
func (l *Map) store(e int32, key string) int32 {
	key = key[copy(l.heads[int(e)*chunkBytes:][:chunkBytes], key):]
	k := (len(key) + chunkBytes - 1) / chunkBytes
	if k == 0 {
		return -1
	}
	if need := l.used + k; need > len(l.next) {
		// Double, but not past what a full map of keys as long as the
		// present ones would use, so that a map grown to its bound
		// carries little slack (for long keys the slab is most of its
		// memory); and by at least 1/16 when past that.
		proj := math.Ceil(float64(need) * float64(l.limit) / float64(len(l.entries)))
		hint := max(int(min(proj, 1<<31)), need+need/16)
		c := growCap(cap(l.next), need, hint)
		old := len(l.next)
		l.next = resize(l.next, need, c)
		l.chunks = resize(l.chunks, need*chunkBytes, c*chunkBytes)
		// The new chunks go to the front of the free list, in order.
		for i := old; i < need-1; i++ {
			l.next[i] = int32(i + 1)
		}
		l.next[need-1] = l.free
		l.free = int32(old)
	}
	head := l.free
	c := head
	for {
		o := int(c) * chunkBytes
		key = key[copy(l.chunks[o:o+chunkBytes], key):]
		if len(key) == 0 {
			break
		}
		c = l.next[c]
	}
	l.free = l.next[c]
	l.next[c] = -1
	l.used += k
	return head
}

// freeChunks returns the chunks of slot e's key past its first to the
// front of the free list.
func (l *Map) freeChunks(e int32) {
	c := l.entries[e].more
	if c < 0 {
		return
	}
	k := 1
	for ; l.next[c] >= 0; c = l.next[c] {
		k++
	}
	l.next[c] = l.free
	l.free = l.entries[e].more
	l.used -= k
}

// tableInsert adds slot e, whose key is not in the table, to it.
func (l *Map) tableInsert(e int32) {
	tag := l.entries[e].tag
	m := len(l.table) - 1
	i := int(tag >> l.shift)
	for l.table[i] != 0 {
		i = (i + 1) & m
	}
	l.table[i] = uint64(tag)<<32 | uint64(e+1)
}

// tableDelete removes slot e, which must be in the table, by backward
// shift: every later bucket of the probe run whose home does not lie in
// the gap's cyclic range (gap, bucket] moves into the gap.
func (l *Map) tableDelete(e int32) {
	tag := l.entries[e].tag
	b := uint64(tag)<<32 | uint64(e+1)
	m := len(l.table) - 1
	i := int(tag >> l.shift)
	for l.table[i] != b {
		i = (i + 1) & m
	}
	for j := (i + 1) & m; l.table[j] != 0; j = (j + 1) & m {
		k := int(uint32(l.table[j]>>32) >> l.shift)
		// Move when k is cyclically outside (i, j].
		if (j-k)&m >= (j-i)&m {
			l.table[i] = l.table[j]
			i = j
		}
	}
	l.table[i] = 0
}

// rehash moves the table to size buckets (a power of two, at most 1<<32).
func (l *Map) rehash(size int) {
	old := l.table
	l.table = make([]uint64, size)
	l.shift = uint(32 - bits.TrailingZeros(uint(size)))
	m := size - 1
	for _, b := range old {
		if b != 0 {
			i := int(uint32(b>>32) >> l.shift)
			for l.table[i] != 0 {
				i = (i + 1) & m
			}
			l.table[i] = b
		}
	}
}

// growCap returns the capacity for a slice of capacity c that must hold n
// elements: double, but no more than hint when hint allows n.
func growCap(c, n, hint int) int {
	return max(min(max(2*c, 16), hint), n)
}

// resize returns s with length n and at least capacity c, reallocating
// (and copying) only when its capacity is short.
func resize[T any](s []T, n, c int) []T {
	if n <= cap(s) {
		return s[:n]
	}
	t := make([]T, n, max(c, n))
	copy(t, s)
	return t
}

// hashMask lets tests make keys collide.
var hashMask = ^uint64(0)

// hashKey hashes s with the map's seed, drawn at random per map (as a Go
// map's is): ids crafted to collide cannot be computed in advance, so a
// client cannot make lookups linear. The layout of the table is the only
// thing the seed changes; decisions, recency and Each's order never depend
// on it.
func (l *Map) hashKey(s string) uint64 { return maphash.String(l.seed, s) & hashMask }
