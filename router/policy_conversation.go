package router

// routeConversation keeps every turn of a conversation on the rank that
// served its first turn, up to the hard cap, and spreads new conversations
// round-robin or to the least queued rank.
func (r *Router) routeConversation(b *batch) {
	size := r.cfg.DPSize
	count := r.loadCounts(b)
	cursor := r.cursor

	// Explicit pass: only for requests whose conversation is not bound yet
	// (a binding beats a later target hint).
	rest := r.rest[:0]
	for _, i := range r.relaxSort(b, isStrict) {
		q := &b.reqs[i]
		if q.ConversationID != "" {
			if _, bound := r.conv.Get(q.ConversationID); bound {
				rest = append(rest, i)
				continue
			}
		}
		if q.hasTarget() && count[q.TargetRank] < b.maxn {
			r.place(b, i, q.TargetRank, q.Len())
			if q.ConversationID != "" {
				r.bind(q.ConversationID, q.TargetRank)
			}
			if r.rc != nil {
				r.rc.placed(i, ReasonExplicit, 0)
			}
			continue
		}
		rest = append(rest, i)
	}
	r.rest = rest

	expected := softCap(count, len(rest), max(1, r.cfg.FairShareMultiplier), b.maxn)
	for _, i := range rest {
		q := &b.reqs[i]
		home, bound := -1, false
		if q.ConversationID != "" {
			home, bound = r.conv.Get(q.ConversationID)
		}
		var allow []bool
		if r.room.on {
			open := r.eligible[:0]
			for k := range size {
				if count[k] < b.maxn {
					open = append(open, k)
				}
			}
			r.eligible = open
			allow = r.room.allow(open, b.reqs[i].Len(), nil)
		}
		if bound && count[home] < b.maxn && allowed(allow, home) {
			r.place(b, i, home, q.Len())
			r.conv.Touch(q.ConversationID)
			r.digest = fold(r.digest, tagTouch, hashString(q.ConversationID), 0)
			if r.rc != nil {
				r.rc.placed(i, ReasonConversationBound, 0)
			}
			continue
		}
		rank := -1
		if r.cfg.NewConvPlacement == PlacementLeastQueued {
			rank = leastQueued(count, expected, allow)
			if rank < 0 {
				rank = leastQueued(count, b.maxn, allow)
			}
		} else {
			for range size {
				k := r.cursor
				r.cursor = (r.cursor + 1) % size
				if count[k] < expected && allowed(allow, k) {
					rank = k
					break
				}
			}
			if rank < 0 {
				rank = leastQueued(count, b.maxn, allow)
			}
		}
		if rank < 0 {
			continue // every rank is at the hard cap: unassigned
		}
		r.place(b, i, rank, q.Len())
		if r.rc != nil {
			r.rc.placed(i, ReasonNewConversation, 0)
		}
		if q.ConversationID != "" && !bound {
			r.bind(q.ConversationID, rank)
		}
	}
	if r.cursor != cursor {
		r.digest = fold(r.digest, tagCursor, uint64(r.cursor), 0)
	}
	for _, c := range count {
		expected = max(expected, c)
	}
	b.res.Expected = expected
	r.finish(b)
}

// bind binds conversation id to rank.
func (r *Router) bind(id string, rank int) {
	r.conv.Bind(id, rank)
	r.digest = fold(r.digest, tagBind, hashString(id), uint64(rank))
}

// leastQueued returns the rank with the lowest (count, rank) among the
// allowed ones with count < limit, or -1.
func leastQueued(count []int, limit int, allow []bool) int {
	best := -1
	for k, c := range count {
		if c < limit && allowed(allow, k) && (best < 0 || c < count[best]) {
			best = k
		}
	}
	return best
}
