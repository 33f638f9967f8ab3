package router

import (
	"math/bits"
	"slices"

	"github.com/adprouter/adprouter/router/internal/invariants"
)

// routeDefault is TensorRT-LLM's default ADP policy: explicit targets first,
// then the largest requests to the least-loaded open rank.
func (r *Router) routeDefault(b *batch) {
	size := r.cfg.DPSize
	count := r.loadCounts(b)
	tokens := slices.Grow(r.tokens[:0], size)[:size]
	r.tokens = tokens
	for i := range b.states {
		tokens[i] = b.states[i].NumActiveTokens
	}

	rest := r.rest[:0]
	for _, i := range r.relaxSort(b, isStrictTarget) {
		q := &b.reqs[i]
		if q.hasTarget() && count[q.TargetRank] < b.maxn {
			r.place(b, i, q.TargetRank, q.Len())
			if r.rc != nil {
				r.rc.placed(i, ReasonExplicit, 0)
			}
			continue
		}
		rest = append(rest, i)
	}
	r.rest = rest

	expected := softCap(count, len(rest), 1, b.maxn)
	b.res.Expected = expected

	// Largest prompts first, arrival order kept among equals.
	r.longestFirst(b, rest)
	// The open rank with the smallest (tokens, count, rank), the top of the
	// reference's heap: kept in a heap, or, with capacity checks (each
	// request's eligible ranks differ), scanned among those with room.
	h := &r.heap
	if !r.room.on {
		h.reset(tokens, count, func(k int) bool { return count[k] < expected })
	}
	for _, i := range rest {
		var allow []bool
		best := -1
		if r.room.on {
			open := r.eligible[:0]
			for k := range size {
				if count[k] < expected {
					open = append(open, k)
				}
			}
			r.eligible = open
			allow = r.room.allow(open, &b.reqs[i], nil)
			for _, k := range open {
				if allowed(allow, k) && (best < 0 || tokens[k] < tokens[best] ||
					(tokens[k] == tokens[best] && count[k] < count[best])) {
					best = k
				}
			}
		} else {
			best = h.top()
		}
		if best < 0 {
			break // every rank is full: the rest stay unassigned
		}
		if r.rc != nil {
			r.rc.leastLoaded(r, i, expected, allow, tokens)
		}
		r.place(b, i, best, b.reqs[i].Len())
		tokens[best] += int64(b.reqs[i].Len())
		if !r.room.on {
			h.raised(count[best] < expected)
			if invariants.Enabled {
				checkRankHeap(h, count, tokens, expected)
			}
		}
	}
	r.finish(b)
}

// isStrictTarget is the relax sort key of the default and KV-aware policies:
// only a request with a target AND relax = false sorts first.
func isStrictTarget(q *Request) bool { return q.Strict && q.hasTarget() }

// isStrict is the relax sort key of the conversation policy.
func isStrict(q *Request) bool { return q.Strict }

// longestFirst sorts rest (request indices) by prompt length, longest first,
// keeping rest's order among equal lengths (a stable sort). Each index
// becomes one uint64 key, its length's distance below the longest above its
// position in rest, sorted as a plain integer (sortPositioned: a radix sort
// for large batches), several times faster than a stable sort with a
// comparison function. A key wider than 64 bits (lengths spread over 2^40
// tokens and more, which no engine sends) takes the stable sort.
func (r *Router) longestFirst(b *batch, rest []int) {
	n := len(rest)
	if n < 2 {
		return
	}
	minLen, maxLen := b.reqs[rest[0]].Len(), b.reqs[rest[0]].Len()
	for _, i := range rest[1:] {
		minLen, maxLen = min(minLen, b.reqs[i].Len()), max(maxLen, b.reqs[i].Len())
	}
	posBits, lenBits := bits.Len(uint(n-1)), bits.Len(uint(maxLen-minLen))
	if posBits+lenBits > 64 {
		slices.SortStableFunc(rest, func(x, y int) int { return b.reqs[y].Len() - b.reqs[x].Len() })
		return
	}
	keys := slices.Grow(r.keys[:0], n)[:n]
	for p, i := range rest {
		keys[p] = uint64(maxLen-b.reqs[i].Len())<<posBits | uint64(p)
	}
	r.spare = sortPositioned(keys, r.spare, posBits, posBits+lenBits)
	from := append(r.shuffled[:0], rest...)
	mask := uint64(1)<<posBits - 1
	for p, k := range keys {
		rest[p] = from[k&mask]
	}
	r.keys, r.shuffled = keys, from
}
