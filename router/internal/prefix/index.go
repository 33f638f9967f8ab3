package prefix

import (
	"unsafe"

	"github.com/adprouter/adprouter/router/internal/lru"
)

// DefaultRankBlocks bounds a rank's share of the index when neither the rank
// (KV capacity) nor the configuration gives a bound.
const DefaultRankBlocks = 1 << 16

// EntryBytes bounds the memory one (block, rank) entry costs an Index, every
// structure included: the entry's node (28 bytes: block slot, rank, the next
// holder of the block, and links in its rank's and in the global recency
// list), its block's slot (16 bytes; a block has a slot only while some rank
// holds it, so at most one per entry) and the block's share of the hash table
// (at most 32 bytes: 8-byte buckets, a power of two of them, at least twice
// as many as slots held and at most four per entry of the bound; see grow),
// 76 bytes rounded up. Arrays grow by doubling but never past the total
// bound, so an Index bounded to n entries holds at most n*EntryBytes bytes
// plus a few words per rank.
const EntryBytes = 80

// MaxEntries is the largest total bound: entries and slots are int32.
const MaxEntries = 1<<31 - 1

// Index records, per rank, which KV blocks the rank is expected to cache,
// as chained block hashes in a least-recently-used list bounded by the rank's
// capacity in blocks, and bounds the (block, rank) entries of all ranks
// together by a total that does not grow with the number of ranks: beyond
// it the least recently used entry of any rank is evicted first.
//
// One hash table entry per distinct block hash leads to the block's slot,
// which chains the nodes of the ranks holding it. Memory is O(entries held),
// whatever the number of ranks; a query costs O(ranks + the holders of the
// matched blocks). Steady-state operation allocates nothing.
//
// An Index is not safe for concurrent use.
type Index struct {
	ranks int
	max   int // total bound in entries
	len   int // entries held

	// table is open addressing with linear probing: a bucket holds the low
	// 32 bits of a block hash (its home and a fingerprint, so that a probe
	// rarely reads a slot) over slot+1; 0 is empty.
	table []uint64
	slots []slot
	nslot int   // live slots
	fslot int32 // free slot list through slot.head, -1 = none

	nodes  []node
	rlinks []lru.Link // node -> its rank's recency links
	alinks []lru.Link // node -> global recency links
	all    lru.List   // every node, most recently used first
	fnode  int32      // free node list through node.next, -1 = none

	lists []rankList
	sink  uint64 // keeps prefetch's reads alive
}

// slot is one distinct block hash and the chain of ranks holding it.
type slot struct {
	hash uint64
	head int32 // first holder node, or the next free slot
	n    int32 // holders; 0 for a free slot
}

// node is one (block, rank) entry.
type node struct {
	slot, rank int32
	next       int32 // next holder of the same block, or the next free node
}

// rankList is one rank's blocks, most recently used first.
type rankList struct {
	order   lru.List
	n       int
	limit   int
	evicted uint64
}

// NewIndex returns an empty index over ranks ranks holding at most
// maxEntries (block, rank) entries in all (0..MaxEntries), each rank bounded
// to DefaultRankBlocks blocks until SetLimit says otherwise.
func NewIndex(ranks, maxEntries int) *Index {
	x := &Index{
		ranks: ranks,
		max:   min(max(maxEntries, 0), MaxEntries),
		fslot: -1,
		fnode: -1,
		all:   lru.New(),
		lists: make([]rankList, ranks),
	}
	for r := range x.lists {
		x.lists[r] = rankList{order: lru.New(), limit: DefaultRankBlocks}
	}
	return x
}

// Ranks returns the number of ranks the index covers.
func (x *Index) Ranks() int { return x.ranks }

// MaxEntries returns the total bound in (block, rank) entries.
func (x *Index) MaxEntries() int { return x.max }

// SetLimit bounds rank's list to limit blocks (at least 0), evicting its least
// recently used blocks beyond it.
func (x *Index) SetLimit(rank, limit int) {
	l := &x.lists[rank]
	l.limit = max(limit, 0)
	for l.n > l.limit {
		x.evict(l.order.Back())
	}
}

// Limit returns rank's bound in blocks.
func (x *Index) Limit(rank int) int { return x.lists[rank].limit }

// Blocks returns how many blocks rank holds in the index.
func (x *Index) Blocks(rank int) int { return x.lists[rank].n }

// Evicted returns how many blocks have been evicted from rank's list, by its
// own bound or by the total one.
func (x *Index) Evicted(rank int) uint64 { return x.lists[rank].evicted }

// Len returns the number of (block, rank) entries held.
func (x *Index) Len() int { return x.len }

// Bytes returns the memory the index holds, in bytes: the capacity of every
// array it owns, all of it written (extend writes a grown pool's new
// capacity at once), so that it is what the index takes from the process.
// Garbage left by growth is not counted (the C library hands it back to the
// operating system).
func (x *Index) Bytes() int {
	return int(unsafe.Sizeof(*x)) +
		cap(x.table)*int(unsafe.Sizeof(uint64(0))) +
		cap(x.slots)*int(unsafe.Sizeof(slot{})) +
		cap(x.nodes)*int(unsafe.Sizeof(node{})) +
		(cap(x.rlinks)+cap(x.alinks))*int(unsafe.Sizeof(lru.Link{})) +
		cap(x.lists)*int(unsafe.Sizeof(rankList{}))
}

// Has reports whether rank holds the block hash.
func (x *Index) Has(rank int, hash uint64) bool {
	s := x.find(hash)
	return s >= 0 && x.holder(s, rank) >= 0
}

// Replicas returns how many ranks hold the block hash.
func (x *Index) Replicas(hash uint64) int {
	if s := x.find(hash); s >= 0 {
		return int(x.slots[s].n)
	}
	return 0
}

// Insert records that rank now caches the chain hashes (root first), making
// them its most recently used blocks. The chain is touched leaf first, so
// that the root is the most recent and eviction removes a chain tail-first,
// as engines evict.
func (x *Index) Insert(rank int, hashes []uint64) {
	l := &x.lists[rank]
	// Only the first limit blocks can be held at once.
	hashes = hashes[:min(len(hashes), l.limit, x.max)]
	x.prefetch(l, hashes)
	for i := len(hashes) - 1; i >= 0; i-- {
		h := hashes[i]
		s := x.find(h)
		if s >= 0 {
			if n := x.holder(s, rank); n >= 0 {
				l.order.Touch(x.rlinks, n)
				x.all.Touch(x.alinks, n)
				continue
			}
		}
		for l.n >= l.limit {
			x.evict(l.order.Back())
		}
		for x.len >= x.max {
			x.evict(x.all.Back())
		}
		if s >= 0 && x.slots[s].n == 0 {
			s = -1 // its last holder was just evicted
		}
		if s < 0 {
			s = x.newSlot(h)
		}
		n := x.newNode(s, int32(rank))
		l.order.PushFront(x.rlinks, n)
		x.all.PushFront(x.alinks, n)
		l.n++
		x.len++
	}
}

// Match writes into out[r], for every rank r, how many leading hashes of
// the chain rank r holds (stopping at the first missing one).
func (x *Index) Match(hashes []uint64, out []int) {
	out = out[:x.ranks]
	clear(out)
	for j, h := range hashes {
		s := x.find(h)
		if s < 0 {
			return
		}
		advanced := false
		for n := x.slots[s].head; n >= 0; n = x.nodes[n].next {
			if r := x.nodes[n].rank; out[r] == j {
				out[r] = j + 1
				advanced = true
			}
		}
		if !advanced {
			return
		}
	}
}

// Each calls f for every rank's blocks from most to least recently used; the
// order is deterministic.
func (x *Index) Each(f func(rank int, hash uint64)) {
	for r := range x.lists {
		for n := x.lists[r].order.Front(); n >= 0; n = lru.Next(x.rlinks, n) {
			f(r, x.slots[x.nodes[n].slot].hash)
		}
	}
}

// prefetch reads the home bucket of every hash, and of the blocks of the
// entries the insertion is about to evict. The reads are independent, so the
// CPU overlaps their cache misses instead of taking them one at a time
// inside the dependent work that follows (a large index is mostly out of
// cache).
func (x *Index) prefetch(l *rankList, hashes []uint64) {
	if len(x.table) == 0 {
		return
	}
	var sum uint64
	for _, h := range hashes {
		sum += x.table[x.home(h)]
	}
	// The victims: the rank's least recently used entries when its bound
	// binds, else the index's when the total bound does.
	n, links := int32(-1), x.rlinks
	switch {
	case l.n+len(hashes) > l.limit:
		n = l.order.Back()
	case x.len+len(hashes) > x.max:
		n, links = x.all.Back(), x.alinks
	}
	for k := 0; k < len(hashes) && n >= 0; k++ {
		sum += x.table[x.home(x.slots[x.nodes[n].slot].hash)]
		n = links[n].Prev
	}
	x.sink = sum
}

// holder returns rank's node in slot s's chain, or -1.
func (x *Index) holder(s int32, rank int) int32 {
	for n := x.slots[s].head; n >= 0; n = x.nodes[n].next {
		if int(x.nodes[n].rank) == rank {
			return n
		}
	}
	return -1
}

// evict removes node n from its rank, the global order and its block.
func (x *Index) evict(n int32) {
	nd := x.nodes[n]
	l := &x.lists[nd.rank]
	l.order.Remove(x.rlinks, n)
	x.all.Remove(x.alinks, n)
	l.n--
	l.evicted++
	x.len--

	sl := &x.slots[nd.slot]
	if sl.head == n {
		sl.head = nd.next
	} else {
		p := sl.head
		for x.nodes[p].next != n {
			p = x.nodes[p].next
		}
		x.nodes[p].next = nd.next
	}
	x.nodes[n] = node{slot: -1, rank: -1, next: x.fnode}
	x.fnode = n
	if sl.n--; sl.n == 0 {
		x.tableDelete(sl.hash, nd.slot)
		sl.head = x.fslot
		x.fslot = nd.slot
		x.nslot--
	}
}

func (x *Index) newNode(s, rank int32) int32 {
	n := x.fnode
	if n >= 0 {
		x.fnode = x.nodes[n].next
	} else {
		n = int32(len(x.nodes))
		x.nodes = extend(x, x.nodes)
		x.rlinks = extend(x, x.rlinks)
		x.alinks = extend(x, x.alinks)
	}
	sl := &x.slots[s]
	x.nodes[n] = node{slot: s, rank: rank, next: sl.head}
	sl.head = n
	sl.n++
	return n
}

func (x *Index) newSlot(h uint64) int32 {
	if x.grow() {
		x.rehash(max(2*len(x.table), 64))
	}
	s := x.fslot
	if s >= 0 {
		x.fslot = x.slots[s].head
	} else {
		s = int32(len(x.slots))
		x.slots = extend(x, x.slots)
	}
	x.slots[s] = slot{hash: h, head: -1}
	x.nslot++
	x.place(s)
	return s
}

// grow reports whether the table doubles before it takes one more slot:
// always past half full, and past a quarter full while the doubled table
// stays within the table's share of the total bound (four buckets per entry,
// see EntryBytes). Linear probing's runs grow quickly with the load: at half
// full a deletion's backward shift scanned 2.2 buckets on average and the
// table's cache misses were the largest part of a full index's insertions
// (BenchmarkIndexSteady/full took about a third longer than at a quarter).
func (x *Index) grow() bool {
	n := x.nslot + 1
	return n > len(x.table)/2 || (n > len(x.table)/4 && len(x.table)/2 <= x.max)
}

// grownCap doubles an array's capacity, but not past the total bound (one
// node, and at most one slot, per entry).
func (x *Index) grownCap(c int) int { return min(max(2*c, 256), max(x.max, 1)) }

// extend is s one element longer, for a pool whose free list is empty; a
// full s moves to x.grownCap of its capacity. The node pool's three
// parallel slices have equal capacities, so they grow together.
//
// The new capacity is written at once (clear writes its zeros, where Go would
// otherwise leave fresh pages untouched and reused ones zeroed): the memory
// an index takes is then its capacity whichever the allocator returned, and
// Bytes says how much that is.
func extend[T any](x *Index, s []T) []T {
	if len(s) == cap(s) {
		t := make([]T, len(s), x.grownCap(cap(s)))
		adviseHuge(unsafe.Pointer(unsafe.SliceData(t)), cap(t)*int(unsafe.Sizeof(t[0])))
		copy(t, s)
		clear(t[len(s):cap(t)])
		s = t
	}
	return s[:len(s)+1]
}

func (x *Index) mask() int { return len(x.table) - 1 }

// home is h's first bucket. Block hashes are already mixed: the low bits
// serve as they are. A table has at most 2^32 buckets (slots are int32), so
// the 32 bits a bucket keeps give its home.
func (x *Index) home(h uint64) int { return int(uint32(h)) & x.mask() }

// find returns the slot of hash h, or -1.
func (x *Index) find(h uint64) int32 {
	if len(x.table) == 0 {
		return -1
	}
	for i := x.home(h); ; i = (i + 1) & x.mask() {
		e := x.table[i]
		if e == 0 {
			return -1
		}
		if e>>32 == h&(1<<32-1) {
			if s := bucketSlot(e); x.slots[s].hash == h {
				return s
			}
		}
	}
}

// rehash rebuilds the table with size buckets (a power of two).
func (x *Index) rehash(size int) {
	x.table = make([]uint64, size)
	adviseHuge(unsafe.Pointer(unsafe.SliceData(x.table)), size*int(unsafe.Sizeof(x.table[0])))
	for s := range x.slots {
		if x.slots[s].n > 0 {
			x.place(int32(s))
		}
	}
}

// place puts slot s in the first empty bucket from its hash's home.
func (x *Index) place(s int32) {
	h := x.slots[s].hash
	i := x.home(h)
	for x.table[i] != 0 {
		i = (i + 1) & x.mask()
	}
	x.table[i] = bucket(h, s)
}

func bucket(h uint64, s int32) uint64 { return h<<32 | uint64(s+1) }

func bucketSlot(e uint64) int32 { return int32(uint32(e)) - 1 }

// tableDelete removes hash h, which must be present, by backward shift:
// every later entry of the probe run whose home does not lie in the gap's
// cyclic range (gap, entry] moves into the gap, so that no tombstones build
// up under constant eviction.
func (x *Index) tableDelete(h uint64, s int32) {
	m := x.mask()
	i := x.home(h)
	for x.table[i] != bucket(h, s) {
		i = (i + 1) & m
	}
	for j := (i + 1) & m; x.table[j] != 0; j = (j + 1) & m {
		k := int(x.table[j]>>32) & m
		// Move when k is cyclically outside (i, j].
		if (j-k)&m >= (j-i)&m {
			x.table[i] = x.table[j]
			i = j
		}
	}
	x.table[i] = 0
}
