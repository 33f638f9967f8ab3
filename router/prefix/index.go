package prefix

import (
	"math/bits"

	"github.com/adprouter/adprouter/router/internal/lru"
)

// DefaultRankBlocks bounds a rank's share of the index when neither the rank
// (KV capacity) nor the configuration gives a bound.
const DefaultRankBlocks = 1 << 16

// Index records, per rank, which KV blocks the rank is expected to cache,
// as chained block hashes in a least-recently-used list bounded by the rank's
// capacity in blocks. Memory is O(total blocks held); a query costs
// O(blocks of the request × ceil(ranks/64) + ranks).
//
// An Index is not safe for concurrent use.
type Index struct {
	ranks int
	words int // uint64 words per rank set

	// present maps a block hash to its slot: the set of ranks holding it.
	present map[uint64]int32
	sets    []uint64 // slot*words .. : rank bit sets
	setHash []uint64 // slot -> hash
	freeSet []int32

	// nodes maps (hash, rank) to its node in the rank's LRU list.
	nodes    map[nodeKey]int32
	node     []uint64   // node -> hash
	links    []lru.Link // node -> recency links, parallel to node
	freeNode []int32
	lists    []rankList

	alive []uint64 // Match scratch
}

type nodeKey struct {
	hash uint64
	rank int32
}

// rankList is one rank's blocks, most recently used first.
type rankList struct {
	order   lru.List
	n       int
	limit   int
	evicted uint64
}

// NewIndex returns an empty index over ranks ranks, each bounded to
// DefaultRankBlocks blocks until SetLimit says otherwise.
func NewIndex(ranks int) *Index {
	x := &Index{
		ranks:   ranks,
		words:   (ranks + 63) / 64,
		present: make(map[uint64]int32),
		nodes:   make(map[nodeKey]int32),
		lists:   make([]rankList, ranks),
	}
	for r := range x.lists {
		x.lists[r] = rankList{order: lru.New(), limit: DefaultRankBlocks}
	}
	return x
}

// Ranks returns the number of ranks the index covers.
func (x *Index) Ranks() int { return x.ranks }

// SetLimit bounds rank's list to limit blocks (at least 0), evicting its least
// recently used blocks beyond it.
func (x *Index) SetLimit(rank, limit int) {
	l := &x.lists[rank]
	l.limit = max(limit, 0)
	for l.n > l.limit {
		x.evict(rank)
	}
}

// Limit returns rank's bound in blocks.
func (x *Index) Limit(rank int) int { return x.lists[rank].limit }

// Blocks returns how many blocks rank holds in the index.
func (x *Index) Blocks(rank int) int { return x.lists[rank].n }

// Evicted returns how many blocks have been evicted from rank's list.
func (x *Index) Evicted(rank int) uint64 { return x.lists[rank].evicted }

// Len returns the number of (block, rank) entries held.
func (x *Index) Len() int { return len(x.nodes) }

// Bytes estimates the memory the index holds, in bytes.
func (x *Index) Bytes() int {
	const mapEntry = 48 // key, value and amortised bucket overhead
	return len(x.node)*16 + len(x.nodes)*mapEntry + len(x.present)*mapEntry +
		len(x.sets)*8 + len(x.setHash)*8
}

// Has reports whether rank holds the block hash.
func (x *Index) Has(rank int, hash uint64) bool {
	s, ok := x.present[hash]
	if !ok {
		return false
	}
	return x.sets[int(s)*x.words+rank/64]&(1<<(rank%64)) != 0
}

// Insert records that rank now caches the chain hashes (root first), making
// them its most recently used blocks. The chain is touched leaf first, so
// that the root is the most recent and eviction removes a chain tail-first,
// as engines evict.
func (x *Index) Insert(rank int, hashes []uint64) {
	l := &x.lists[rank]
	if l.limit == 0 {
		return
	}
	// Only the first limit blocks can be held at once.
	hashes = hashes[:min(len(hashes), l.limit)]
	for i := len(hashes) - 1; i >= 0; i-- {
		h := hashes[i]
		key := nodeKey{h, int32(rank)}
		if n, ok := x.nodes[key]; ok {
			l.order.Touch(x.links, n)
			continue
		}
		for l.n >= l.limit {
			x.evict(rank)
		}
		n := x.newNode(h)
		x.nodes[key] = n
		l.order.PushFront(x.links, n)
		l.n++
		x.addRank(h, rank)
	}
}

// Match writes into out[r], for every rank r, how many leading hashes of
// the chain rank r holds (stopping at the first missing one).
func (x *Index) Match(hashes []uint64, out []int) {
	out = out[:x.ranks]
	for r := range out {
		out[r] = len(hashes)
	}
	if len(hashes) == 0 {
		return
	}
	// alive: the ranks that held every block so far.
	alive := x.alive[:0]
	for range x.words {
		alive = append(alive, ^uint64(0))
	}
	x.alive = alive
	if tail := x.ranks % 64; tail != 0 {
		alive[x.words-1] = 1<<tail - 1
	}
	live := x.ranks
	for j, h := range hashes {
		var set []uint64
		if s, ok := x.present[h]; ok {
			set = x.sets[int(s)*x.words : int(s+1)*x.words]
		}
		for w := range alive {
			var keep uint64
			if set != nil {
				keep = set[w]
			}
			for dropped := alive[w] &^ keep; dropped != 0; dropped &= dropped - 1 {
				out[w*64+bits.TrailingZeros64(dropped)] = j
				live--
			}
			alive[w] &= keep
		}
		if live == 0 {
			return
		}
	}
}

// Each calls f for every rank's blocks from most to least recently used; the
// order is deterministic (for digests).
func (x *Index) Each(f func(rank int, hash uint64)) {
	for r := range x.lists {
		for n := x.lists[r].order.Front(); n >= 0; n = lru.Next(x.links, n) {
			f(r, x.node[n])
		}
	}
}

func (x *Index) newNode(h uint64) int32 {
	if k := len(x.freeNode); k > 0 {
		n := x.freeNode[k-1]
		x.freeNode = x.freeNode[:k-1]
		x.node[n] = h
		return n
	}
	x.node = append(x.node, h)
	x.links = append(x.links, lru.Link{})
	return int32(len(x.node) - 1)
}

func (x *Index) evict(rank int) {
	l := &x.lists[rank]
	n := l.order.Back()
	h := x.node[n]
	l.order.Remove(x.links, n)
	delete(x.nodes, nodeKey{h, int32(rank)})
	x.freeNode = append(x.freeNode, n)
	l.n--
	l.evicted++
	x.removeRank(h, rank)
}

func (x *Index) addRank(h uint64, rank int) {
	s, ok := x.present[h]
	if !ok {
		if k := len(x.freeSet); k > 0 {
			s = x.freeSet[k-1]
			x.freeSet = x.freeSet[:k-1]
			x.setHash[s] = h
		} else {
			s = int32(len(x.setHash))
			x.setHash = append(x.setHash, h)
			for range x.words {
				x.sets = append(x.sets, 0)
			}
		}
		x.present[h] = s
	}
	x.sets[int(s)*x.words+rank/64] |= 1 << (rank % 64)
}

func (x *Index) removeRank(h uint64, rank int) {
	s := x.present[h]
	set := x.sets[int(s)*x.words : int(s+1)*x.words]
	set[rank/64] &^= 1 << (rank % 64)
	for _, w := range set {
		if w != 0 {
			return
		}
	}
	delete(x.present, h)
	x.freeSet = append(x.freeSet, s)
}
