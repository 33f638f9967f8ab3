package router

import (
	"bytes"
	"cmp"
	"hash/maphash"
	"math/bits"
	"slices"
	"unsafe"
)

// groupSorter orders the KV-aware policy's remaining requests by the
// reference's grouping key — the first PrefixTokens tokens compared
// lexicographically, then the longer prompt first, arrival order kept among
// equals — without comparing prefixes pairwise. Comparing two prompts of one
// family runs through all 64 tokens only to find them equal, and a stable
// merge sort does that O(n log² n) times; it took most of a decision.
//
// Instead, requests are grouped by the bytes of their prefix (a hash table
// finds the group, a byte comparison confirms it), only the distinct groups
// are sorted by prefix, and the requests are then sorted on packed integer
// keys (group rank, length, position). The order is exactly the stable
// sort's: the position makes every key distinct and breaks ties by arrival.
// The hash only places groups in the table; no result depends on it.
//
// With longestFirst the groups come in order of their longest prompt,
// longest first, and only then by prefix: the TTFT score's order (see
// routeTTFT).
type groupSorter struct {
	table   []int32  // open addressing: group index + 1, 0 = empty
	hash    []uint64 // per group: its prefix hash
	rep     []int    // per group: the request index whose prefix names it
	longest []int    // per group: its longest prompt, in tokens
	order   []int32  // groups in order: by prefix, or longest first
	rank    []uint64 // per group: its position in order
	gid     []int32  // per position in rest: its group
	keys    []uint64
	spare   []uint64
	tmp     []int
	// starts: after sort, the position in rest where each group begins,
	// in order (see groupStarts).
	starts []int
}

// prefetchAhead is how many requests ahead of the prefix hashing sort
// prefetches prefixes. A cached prefix hashes in ~10 ns; one the caches lost
// waits on the last-level cache or memory and a page walk (hashing took
// ~45 ns a prefix at 4096 requests without the prefetch, and a decision on
// caches an engine's own work has evicted took 2-3x its warm time).
const prefetchAhead = 8

// prefetchPrefixOf issues prefetchPrefix for q's grouping prefix.
func prefetchPrefixOf(q *Request) {
	if len(q.Tokens) > 0 {
		prefetchPrefix(&q.Tokens[0])
	}
}

// sort reorders rest (indices into reqs) by the grouping key, stably; with
// longestFirst, the group with the longest prompt first.
func (g *groupSorter) sort(reqs []Request, rest []int, longestFirst bool) {
	n := len(rest)
	g.starts = g.starts[:0]
	if n < 2 {
		if n == 1 {
			g.starts = append(g.starts, 0)
		}
		return
	}
	size := 1 << bits.Len(uint(2*n-1)) // a power of two >= 2n: load <= 1/2
	g.table = slices.Grow(g.table[:0], size)[:size]
	clear(g.table)
	g.hash, g.rep, g.longest = g.hash[:0], g.rep[:0], g.longest[:0]
	g.gid = slices.Grow(g.gid[:0], n)[:n]
	minLen, maxLen := reqs[rest[0]].Len(), reqs[rest[0]].Len()
	// Every prompt lies on its own pages, and between decisions an engine's
	// own work evicts them (as do the prompts of a batch too large for the
	// caches): ask for the prefixes ahead of the hashing, the first window
	// at once.
	for _, i := range rest[:min(n, prefetchAhead)] {
		prefetchPrefixOf(&reqs[i])
	}
	for p, i := range rest {
		if p+prefetchAhead < n {
			prefetchPrefixOf(&reqs[rest[p+prefetchAhead]])
		}
		q := &reqs[i]
		minLen, maxLen = min(minLen, q.Len()), max(maxLen, q.Len())
		pre := prefixBytes(prefixOf(q))
		h := maphash.Bytes(prefixSeed, pre)
		mask := uint64(size - 1)
		for s := h & mask; ; s = (s + 1) & mask {
			e := g.table[s]
			if e == 0 {
				g.hash = append(g.hash, h)
				g.rep = append(g.rep, i)
				g.longest = append(g.longest, q.Len())
				g.table[s] = int32(len(g.rep))
				g.gid[p] = int32(len(g.rep) - 1)
				break
			}
			if k := e - 1; g.hash[k] == h && bytes.Equal(prefixBytes(prefixOf(&reqs[g.rep[k]])), pre) {
				g.gid[p] = k
				g.longest[k] = max(g.longest[k], q.Len())
				break
			}
		}
	}

	// Sort the distinct prefixes; no two are equal, so stability is moot.
	groups := len(g.rep)
	g.order = slices.Grow(g.order[:0], groups)[:groups]
	for k := range g.order {
		g.order[k] = int32(k)
	}
	if groups > 1 {
		slices.SortFunc(g.order, func(a, b int32) int {
			if longestFirst {
				if c := cmp.Compare(g.longest[b], g.longest[a]); c != 0 {
					return c
				}
			}
			return slices.Compare(prefixOf(&reqs[g.rep[a]]), prefixOf(&reqs[g.rep[b]]))
		})
	}
	g.rank = slices.Grow(g.rank[:0], groups)[:groups]
	for pos, k := range g.order {
		g.rank[k] = uint64(pos)
	}

	// Pack (group rank, maxLen - length, position) into one uint64 when
	// the three fit; they do unless lengths spread over ~2^40.
	posBits := bits.Len(uint(n - 1))
	lenBits := bits.Len(uint(maxLen - minLen))
	groupBits := bits.Len(uint(groups - 1))
	if posBits+lenBits+groupBits > 64 {
		g.sortWide(reqs, rest)
		return
	}
	g.keys = slices.Grow(g.keys[:0], n)[:n]
	for p, i := range rest {
		shorter := uint64(maxLen - reqs[i].Len())
		g.keys[p] = g.rank[g.gid[p]]<<(lenBits+posBits) | shorter<<posBits | uint64(p)
	}
	g.sortKeys(posBits, posBits+lenBits+groupBits)
	g.tmp = append(g.tmp[:0], rest...)
	posMask := uint64(1)<<posBits - 1
	for p, key := range g.keys {
		rest[p] = g.tmp[key&posMask]
		if p == 0 || key>>(lenBits+posBits) != g.keys[p-1]>>(lenBits+posBits) {
			g.starts = append(g.starts, p)
		}
	}
}

// groupStarts returns, after sort, the position in rest where each group
// begins, in order: group k is rest[starts[k]:starts[k+1]] (the last runs to
// the end). Valid until the next sort.
func (g *groupSorter) groupStarts() []int { return g.starts }

// sortKeys sorts g.keys (see sortPositioned).
func (g *groupSorter) sortKeys(skip, bits int) {
	g.spare = sortPositioned(g.keys, g.spare, skip, bits)
}

// sortPositioned sorts keys, whose values fit in their low bits bits and
// are in increasing order of their low skip bits (a position), and returns
// spare, grown for reuse: an LSD radix sort, a byte per pass over the bits
// above skip (it is stable, so the positions stay in order without being
// sorted on, and it does not branch on the keys, which a comparison sort of
// a fresh batch mispredicts at every level), for batches large enough to
// pay for its counting passes; pdqsort on the whole key for small ones.
func sortPositioned(keys, spare []uint64, skip, bits int) []uint64 {
	passes := (bits - skip + 7) / 8
	if len(keys) < 128 || passes*256 > 2*len(keys) {
		slices.Sort(keys)
		return spare
	}
	spare = slices.Grow(spare[:0], len(keys))[:len(keys)]
	src, dst := keys, spare
	for p := range passes {
		shift := skip + 8*p
		var count [257]int
		for _, k := range src {
			count[(k>>shift)&0xff+1]++
		}
		for d := 1; d < 257; d++ {
			count[d] += count[d-1]
		}
		for _, k := range src {
			d := (k >> shift) & 0xff
			dst[count[d]] = k
			count[d]++
		}
		src, dst = dst, src
	}
	if passes%2 == 1 {
		copy(keys, src)
	}
	return spare
}

// sortWide is sort's fallback when the packed key would not fit in 64 bits:
// a stable sort on (group rank, longer first), still without comparing
// prefixes.
func (g *groupSorter) sortWide(reqs []Request, rest []int) {
	g.keys = slices.Grow(g.keys[:0], len(reqs))[:len(reqs)] // group rank by request index
	for p, i := range rest {
		g.keys[i] = g.rank[g.gid[p]]
	}
	slices.SortStableFunc(rest, func(x, y int) int {
		if c := cmp.Compare(g.keys[x], g.keys[y]); c != 0 {
			return c
		}
		return cmp.Compare(reqs[y].Len(), reqs[x].Len())
	})
	for p, i := range rest {
		if p == 0 || g.keys[i] != g.keys[rest[p-1]] {
			g.starts = append(g.starts, p)
		}
	}
}

// prefixSeed keys groupSorter's hash table. It differs between processes,
// which changes only where groups sit in the table, never an order.
var prefixSeed = maphash.MakeSeed()

// prefixBytes views a prefix's tokens as bytes: prefixes group by equal
// bytes, which is equal tokens.
func prefixBytes(pre []int32) []byte {
	if len(pre) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&pre[0])), 4*len(pre))
}
