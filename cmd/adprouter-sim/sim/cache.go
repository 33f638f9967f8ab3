package sim

import (
	"container/heap"
	"fmt"
)

// Cache is one rank's KV pool, counted in blocks. It holds two kinds of
// blocks:
//
//   - cached blocks, keyed by the chained hash of a full block of tokens (see
//     AppendBlockHashes), with a reference count: the number of running
//     requests using it. A block whose count drops to zero stays cached, and
//     reusable, until it is evicted;
//   - private blocks, held by one request and not (yet) reusable: the part of
//     a request's reservation whose tokens are not computed yet, or that never
//     fills a whole block.
//
// Cached plus private blocks never exceed the capacity. Only unreferenced
// cached blocks are evicted, least recently released first; the blocks a
// request releases together are evicted tail first (deepest block first), as
// engines do, so a cached prefix stays a prefix: a block is released no
// earlier than any block after it in the same sequence.
type Cache struct {
	capacity int
	blocks   map[uint64]*cacheBlock
	private  int
	free     evictQueue // unreferenced cached blocks
	clock    uint64

	evictions  int64
	hitBlocks  int64
	inserted   int64
	duplicates int64
}

type cacheBlock struct {
	hash  uint64
	ref   int
	depth int    // the block's index in its sequence
	stamp uint64 // when its count last dropped to zero
	index int    // position in the evict queue, -1 while referenced
}

// NewCache returns an empty pool of capacity blocks.
func NewCache(capacity int) *Cache {
	return &Cache{capacity: capacity, blocks: make(map[uint64]*cacheBlock)}
}

// Capacity returns the pool size in blocks.
func (c *Cache) Capacity() int { return c.capacity }

// Used returns the blocks in use: cached (referenced or not) plus private.
func (c *Cache) Used() int { return len(c.blocks) + c.private }

// Free returns the blocks held by nobody: Capacity - Used.
func (c *Cache) Free() int { return c.capacity - c.Used() }

// Cached returns the number of cached blocks, referenced or not.
func (c *Cache) Cached() int { return len(c.blocks) }

// Private returns the number of private blocks.
func (c *Cache) Private() int { return c.private }

// Evictable returns the number of unreferenced cached blocks.
func (c *Cache) Evictable() int { return len(c.free) }

// Evictions returns the number of blocks evicted so far.
func (c *Cache) Evictions() int64 { return c.evictions }

// HitBlocks returns the number of cached blocks Allocate has reused so far.
func (c *Cache) HitBlocks() int64 { return c.hitBlocks }

// Inserted returns the number of blocks Commit has added to the cache so far.
func (c *Cache) Inserted() int64 { return c.inserted }

// Duplicates returns the number of commits that found their block already
// cached: blocks computed twice, e.g. by two requests that prefilled the same
// prompt at the same time.
func (c *Cache) Duplicates() int64 { return c.duplicates }

// Refs returns the reference count of the cached block hash, or -1 when it
// is not cached.
func (c *Cache) Refs(hash uint64) int {
	if b, ok := c.blocks[hash]; ok {
		return b.ref
	}
	return -1
}

// Match returns how many leading blocks of hashes are cached. It changes
// nothing: it is the executor's probe of a rank's radix tree.
func (c *Cache) Match(hashes []uint64) int {
	for i, h := range hashes {
		if _, ok := c.blocks[h]; !ok {
			return i
		}
	}
	return len(hashes)
}

// Allocate references the first hit blocks of hashes, which must be cached
// (hit <= Match(hashes)), and reserves private more private blocks, evicting
// unreferenced blocks as needed. When they do not fit it returns false and
// changes nothing.
func (c *Cache) Allocate(hashes []uint64, hit, private int) bool {
	if hit < 0 || hit > len(hashes) || private < 0 {
		panic(fmt.Sprintf("sim: Allocate(hit %d of %d, private %d)", hit, len(hashes), private))
	}
	reclaimed := 0 // hit blocks that are evictable now and will not be
	for _, h := range hashes[:hit] {
		b, ok := c.blocks[h]
		if !ok {
			panic("sim: Allocate of a block that is not cached")
		}
		if b.ref == 0 {
			reclaimed++
		}
	}
	if c.Free()+c.Evictable()-reclaimed < private {
		return false
	}
	for _, h := range hashes[:hit] {
		c.ref(c.blocks[h])
	}
	c.hitBlocks += int64(hit)
	for c.Free() < private {
		c.evict()
	}
	c.private += private
	return true
}

func (c *Cache) ref(b *cacheBlock) {
	if b.ref == 0 {
		heap.Remove(&c.free, b.index)
	}
	b.ref++
}

// evict drops the unreferenced block released least recently (the deepest
// one among blocks released together).
func (c *Cache) evict() {
	b := heap.Pop(&c.free).(*cacheBlock)
	delete(c.blocks, b.hash)
	c.evictions++
}

// Commit turns one of the caller's private blocks into the cached, referenced
// block hash at index depth of its sequence: its tokens are now computed. If
// hash is cached already, the private block is freed and the cached one
// referenced instead.
func (c *Cache) Commit(hash uint64, depth int) {
	if c.private < 1 {
		panic("sim: Commit without a private block")
	}
	c.private--
	if b, ok := c.blocks[hash]; ok {
		c.ref(b)
		c.duplicates++
		return
	}
	c.blocks[hash] = &cacheBlock{hash: hash, ref: 1, depth: depth, index: -1}
	c.inserted++
}

// Release drops one reference from each block of hashes (a request's
// referenced blocks) and frees private of its private blocks. Blocks left
// unreferenced stay cached and become evictable, all with the same recency,
// so that the deepest goes first.
func (c *Cache) Release(hashes []uint64, private int) {
	if private < 0 || private > c.private {
		panic(fmt.Sprintf("sim: Release of %d private blocks, %d held", private, c.private))
	}
	c.private -= private
	c.clock++
	for _, h := range hashes {
		b, ok := c.blocks[h]
		if !ok || b.ref < 1 {
			panic("sim: Release of a block that is not referenced")
		}
		b.ref--
		if b.ref == 0 {
			b.stamp = c.clock
			heap.Push(&c.free, b)
		}
	}
}

// evictQueue orders unreferenced blocks for eviction: least recently
// released first, then deepest first, then by hash (total, deterministic).
type evictQueue []*cacheBlock

func (q evictQueue) Len() int { return len(q) }

func (q evictQueue) Less(i, j int) bool {
	a, b := q[i], q[j]
	if a.stamp != b.stamp {
		return a.stamp < b.stamp
	}
	if a.depth != b.depth {
		return a.depth > b.depth
	}
	return a.hash < b.hash
}

func (q evictQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}

func (q *evictQueue) Push(x any) {
	b := x.(*cacheBlock)
	b.index = len(*q)
	*q = append(*q, b)
}

func (q *evictQueue) Pop() any {
	old := *q
	b := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	b.index = -1
	return b
}
