package router

// rankHeap is a binary min-heap of ranks ordered by (tokens, count, rank):
// the default policy's least-loaded open rank, the top of TensorRT-LLM's
// heap, found in O(log ranks) per request instead of a scan of every rank
// (1024 requests on 64 ranks: 65536 comparisons a decision by scanning).
// tokens and count are the policy's own slices; the heap reads them and the
// policy updates them, calling raised after it raises the top's load.
type rankHeap struct {
	ranks  []int32
	tokens []int64
	count  []int
}

// reset fills the heap with the ranks k of 0..len(count)-1 for which open(k).
func (h *rankHeap) reset(tokens []int64, count []int, open func(k int) bool) {
	h.tokens, h.count = tokens, count
	h.ranks = h.ranks[:0]
	for k := range count {
		if open(k) {
			h.ranks = append(h.ranks, int32(k))
		}
	}
	for i := len(h.ranks)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

// top returns the least-loaded rank, or -1 when the heap is empty.
func (h *rankHeap) top() int {
	if len(h.ranks) == 0 {
		return -1
	}
	return int(h.ranks[0])
}

// raised restores the order after the top's tokens or count grew, removing
// it when it is no longer open.
func (h *rankHeap) raised(open bool) {
	if !open {
		n := len(h.ranks) - 1
		h.ranks[0] = h.ranks[n]
		h.ranks = h.ranks[:n]
	}
	if len(h.ranks) > 0 {
		h.down(0)
	}
}

func (h *rankHeap) less(a, b int32) bool {
	ta, tb := h.tokens[a], h.tokens[b]
	if ta != tb {
		return ta < tb
	}
	if ca, cb := h.count[a], h.count[b]; ca != cb {
		return ca < cb
	}
	return a < b
}

func (h *rankHeap) down(i int) {
	n := len(h.ranks)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h.less(h.ranks[r], h.ranks[l]) {
			m = r
		}
		if !h.less(h.ranks[m], h.ranks[i]) {
			return
		}
		h.ranks[i], h.ranks[m] = h.ranks[m], h.ranks[i]
		i = m
	}
}
