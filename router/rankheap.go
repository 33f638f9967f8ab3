package router

// rankHeap is a binary min-heap of ranks ordered by (tokens, count, rank):
// the default policy's least-loaded open rank, the top of TensorRT-LLM's
// heap, found in O(log ranks) per request instead of a scan of every rank
// (1024 requests on 64 ranks: 65536 comparisons a decision by scanning).
// tokens and count are the policy's own slices; the policy updates them and
// calls raised after it raises the top's load.
//
// Each entry carries its rank's key, so that a comparison reads the two
// entries it orders and nothing else: with the key behind the rank index,
// every level of a sift waited on loads from the policy's slices.
type rankHeap struct {
	ents   []heapEntry
	tokens []int64
	count  []int
}

// heapEntry is one open rank and its key: its tokens, then its count above
// its index (count < 2^31 by MaxActive and maxRequests, rank < MaxDPSize),
// so that (tokens, order) compares as (tokens, count, rank).
type heapEntry struct {
	tokens int64
	order  uint64
}

func entryOf(k int, tokens []int64, count []int) heapEntry {
	return heapEntry{tokens[k], uint64(count[k])<<32 | uint64(k)}
}

func (e heapEntry) rank() int { return int(uint32(e.order)) }

func (e heapEntry) less(f heapEntry) bool {
	return e.tokens < f.tokens || (e.tokens == f.tokens && e.order < f.order)
}

// reset fills the heap with the ranks k of 0..len(count)-1 for which open(k).
func (h *rankHeap) reset(tokens []int64, count []int, open func(k int) bool) {
	h.tokens, h.count = tokens, count
	h.ents = h.ents[:0]
	for k := range count {
		if open(k) {
			h.ents = append(h.ents, entryOf(k, tokens, count))
		}
	}
	for i := len(h.ents)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

// top returns the least-loaded rank, or -1 when the heap is empty.
func (h *rankHeap) top() int {
	if len(h.ents) == 0 {
		return -1
	}
	return h.ents[0].rank()
}

// raised restores the order after the top's tokens or count grew, removing
// it when it is no longer open.
func (h *rankHeap) raised(open bool) {
	if !open {
		n := len(h.ents) - 1
		h.ents[0] = h.ents[n]
		h.ents = h.ents[:n]
	} else {
		h.ents[0] = entryOf(h.ents[0].rank(), h.tokens, h.count)
	}
	if len(h.ents) > 0 {
		h.down(0)
	}
}

func (h *rankHeap) down(i int) {
	ents := h.ents
	n := len(ents)
	e := ents[i]
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		m := l
		if r := l + 1; r < n && ents[r].less(ents[l]) {
			m = r
		}
		if !ents[m].less(e) {
			break
		}
		ents[i] = ents[m]
		i = m
	}
	ents[i] = e
}
