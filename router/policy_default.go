package router

import "slices"

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
	slices.SortStableFunc(rest, func(x, y int) int {
		return b.reqs[y].Len() - b.reqs[x].Len()
	})
	for _, i := range rest {
		var allow []bool
		if r.room.on {
			open := r.eligible[:0]
			for k := range size {
				if count[k] < expected {
					open = append(open, k)
				}
			}
			r.eligible = open
			allow = r.room.allow(open, b.reqs[i].Len(), nil)
		}
		// The open rank with the smallest (tokens, count, rank): the top of
		// the reference's heap.
		best := -1
		for k := range size {
			if count[k] >= expected || !allowed(allow, k) {
				continue
			}
			if best < 0 || tokens[k] < tokens[best] || (tokens[k] == tokens[best] && count[k] < count[best]) {
				best = k
			}
		}
		if best < 0 {
			break // every rank is full: the rest stay unassigned
		}
		if r.rc != nil {
			r.rc.leastLoaded(r, i, expected, allow, tokens)
		}
		r.place(b, i, best, b.reqs[i].Len())
		tokens[best] += int64(b.reqs[i].Len())
	}
	r.finish(b)
}

// isStrictTarget is the relax sort key of the default and KV-aware policies:
// only a request with a target AND relax = false sorts first.
func isStrictTarget(q *Request) bool { return q.Strict && q.hasTarget() }

// isStrict is the relax sort key of the conversation policy.
func isStrict(q *Request) bool { return q.Strict }
