package router

import (
	"slices"

	"github.com/adprouter/adprouter/router/internal/convmap"
)

// routeConversation keeps every turn of a conversation on the rank that
// served its first turn, up to the hard cap, and spreads new conversations
// round-robin, to the least queued rank or to the rank with the fewest
// tokens.
func (r *Router) routeConversation(b *batch) {
	size := r.cfg.DPSize
	count := r.loadCounts(b)
	cursor := r.cursor
	// PlacementLeastTokens tracks each rank's prompt tokens: its reported
	// load plus every request this decision places there.
	var tokens []int64
	if r.cfg.NewConvPlacement == PlacementLeastTokens {
		tokens = r.tokenLoads(b)
	}
	put := func(i, k int) {
		r.place(b, i, k, b.reqs[i].Len())
		if tokens != nil {
			tokens[k] += int64(b.reqs[i].Len())
		}
	}

	// Each id is hashed once: the passes below look it up again, and touch
	// or bind it.
	hash := slices.Grow(r.convHash[:0], len(b.reqs))[:len(b.reqs)]
	r.convHash = hash
	for i := range b.reqs {
		hash[i] = 0
		if id := b.reqs[i].ConversationID; id != "" {
			hash[i] = r.conv.Hash(id)
		}
	}
	r.conv.Warm(hash, func(i int) string { return b.reqs[i].ConversationID })
	// Explicit pass: a request whose target rank has room goes there,
	// unless its conversation is bound (a binding beats a later target
	// hint). Only those requests look their conversation up here.
	rest := r.rest[:0]
	for _, i := range r.relaxSort(b, isStrict) {
		q := &b.reqs[i]
		if !q.hasTarget() || count[q.TargetRank] >= b.maxn ||
			(q.ConversationID != "" && r.conv.Lookup(hash[i], q.ConversationID) >= 0) {
			rest = append(rest, i)
			continue
		}
		put(i, q.TargetRank)
		if q.ConversationID != "" {
			r.bindNew(q.ConversationID, hash[i], q.TargetRank)
		}
		if r.rc != nil {
			r.rc.placed(i, ReasonExplicit, 0)
		}
	}
	r.rest = rest

	expected := softCap(count, len(rest), max(1, r.cfg.FairShareMultiplier), b.maxn)
	for _, i := range rest {
		q := &b.reqs[i]
		home, slot := -1, convmap.Slot(-1)
		if q.ConversationID != "" {
			if slot = r.conv.Lookup(hash[i], q.ConversationID); slot >= 0 {
				home = r.conv.Rank(slot)
			}
		}
		bound := slot >= 0
		var allow []bool
		if r.room.on {
			open := r.eligible[:0]
			for k := range size {
				if count[k] < b.maxn {
					open = append(open, k)
				}
			}
			r.eligible = open
			allow = r.room.allow(open, &b.reqs[i], nil)
		}
		if bound && count[home] < b.maxn && allowed(allow, home) {
			put(i, home)
			r.conv.TouchSlot(slot)
			r.digest = fold(r.digest, tagTouch, hashString(q.ConversationID), 0)
			if r.rc != nil {
				r.rc.placed(i, ReasonConversationBound, 0)
			}
			continue
		}
		rank := -1
		switch r.cfg.NewConvPlacement {
		case PlacementLeastQueued:
			rank = leastQueued(count, expected, allow)
			if rank < 0 {
				rank = leastQueued(count, b.maxn, allow)
			}
		case PlacementLeastTokens:
			rank = r.leastTokens(count, tokens, expected, allow)
			if rank < 0 {
				rank = r.leastTokens(count, tokens, b.maxn, allow)
			}
			if rank >= 0 {
				r.cursor = (rank + 1) % size
			}
		default:
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
		put(i, rank)
		if r.rc != nil {
			r.rc.placed(i, ReasonNewConversation, 0)
		}
		if q.ConversationID != "" && !bound {
			r.bindNew(q.ConversationID, hash[i], rank)
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
	r.foldBind(id, rank)
}

// bindNew is bind for an id not bound yet (r.conv.Lookup returned -1 for
// it since the last bind) whose hash h is r.conv.Hash(id).
func (r *Router) bindNew(id string, h uint64, rank int) {
	r.conv.BindNew(h, id, rank)
	r.foldBind(id, rank)
}

// foldBind folds the binding of conversation id to rank into the digest.
func (r *Router) foldBind(id string, rank int) {
	r.digest = fold(r.digest, tagBind, hashString(id), uint64(rank))
}

// tokenLoads copies the states' token loads into r.tokens.
func (r *Router) tokenLoads(b *batch) []int64 {
	r.tokens = slices.Grow(r.tokens[:0], len(b.states))[:len(b.states)]
	for k := range b.states {
		r.tokens[k] = b.states[k].NumActiveTokens
	}
	return r.tokens
}

// leastTokens returns, among the allowed ranks with count < limit, the one
// with the fewest tokens, then the fewest requests, then the first at or
// after the round-robin cursor; -1 if there is none.
func (r *Router) leastTokens(count []int, tokens []int64, limit int, allow []bool) int {
	size := len(count)
	best := -1
	for step := range size {
		k := (r.cursor + step) % size
		if count[k] >= limit || !allowed(allow, k) {
			continue
		}
		if best < 0 || tokens[k] < tokens[best] || (tokens[k] == tokens[best] && count[k] < count[best]) {
			best = k
		}
	}
	return best
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
