package main

/*
#include "adprouter.h"
*/
import "C"

import (
	"math"
	"slices"
	"unsafe"

	"github.com/adprouter/adprouter/router"
)

//export adprgo_route
func adprgo_route(h C.adpr_router, batch *C.adpr_batch, out *C.adpr_route_result, ebuf *C.char, elen C.size_t) C.adpr_status {
	return guardRouter("adpr_route", h, ebuf, elen, func(e *entry) error {
		switch {
		case batch == nil:
			return argError("batch is NULL")
		case out == nil:
			return argError("result is NULL")
		}
		return e.route(batch, out)
	})
}

// maxRequests bounds adpr_batch.num_requests: far above any iteration's
// batch, low enough that a corrupt count is an error, not gigabytes.
const maxRequests = 1 << 22

// route converts one C batch, routes it and writes the outputs. Caller
// memory is viewed in place for the duration of the call only: every view is
// dropped before returning.
func (e *entry) route(b *C.adpr_batch, out *C.adpr_route_result) error {
	ns, nr := int(b.num_states), int(b.num_requests) // read once: checked, then used
	if err := e.checkBatch(b, out, ns, nr); err != nil {
		return err
	}
	tokens, text, matches := batchViews(b, ns, nr)
	if err := e.readStates(unsafe.Slice(b.states, ns)); err != nil {
		return err
	}
	e.reqs = e.reqs[:0]
	defer e.dropViews()
	if err := e.readRequests(unsafe.Slice(b.requests, nr), tokens, text); err != nil {
		return err
	}
	if err := e.r.RouteInto(&e.res, e.states, e.reqs, int(b.max_num_active_requests), matches); err != nil {
		return err
	}
	e.writeResult(out, ns, nr)
	return nil
}

// checkBatch validates the batch's counts (ns states, nr requests, as read
// by route) and buffer pointers, and the result's, before anything is read
// through them.
func (e *entry) checkBatch(b *C.adpr_batch, out *C.adpr_route_result, ns, nr int) error {
	// The structs' own pointers first, as integers (see minPointer).
	for _, f := range [...]struct {
		what string
		p    uintptr
	}{
		{"batch.states", uintptr(unsafe.Pointer(b.states))},
		{"batch.requests", uintptr(unsafe.Pointer(b.requests))},
		{"batch.tokens", uintptr(unsafe.Pointer(b.tokens))},
		{"batch.text", uintptr(unsafe.Pointer(b.text))},
		{"batch.match_lens", uintptr(unsafe.Pointer(b.match_lens))},
		{"result.request_rank", uintptr(unsafe.Pointer(out.request_rank))},
		{"result.order", uintptr(unsafe.Pointer(out.order))},
		{"result.rank_offsets", uintptr(unsafe.Pointer(out.rank_offsets))},
	} {
		if nearNull(f.p) {
			return nearNullError(f.what, f.p)
		}
	}
	switch {
	case ns < 0 || (ns > 0 && b.states == nil):
		return argError("batch.states = %p with num_states = %d, want a non-NULL array of num_states >= 0 states", b.states, ns)
	case ns != e.r.Config().DPSize:
		return argError("got %d rank states (batch.num_states), want dp_size = %d", ns, e.r.Config().DPSize)
	case nr < 0 || nr > maxRequests || (nr > 0 && b.requests == nil):
		return argError("batch.requests = %p with num_requests = %d, want a non-NULL array of 0..%d requests", b.requests, nr, maxRequests)
	case b.tokens_len < 0 || (b.tokens_len > 0 && b.tokens == nil):
		return argError("batch.tokens = %p with tokens_len = %d, want a non-NULL buffer when tokens_len > 0", b.tokens, int64(b.tokens_len))
	case b.tokens_len > math.MaxInt32*16:
		return argError("batch.tokens_len = %d is implausibly large", int64(b.tokens_len))
	case b.text_len < 0 || (b.text_len > 0 && b.text == nil):
		return argError("batch.text = %p with text_len = %d, want a non-NULL buffer when text_len > 0", b.text, int64(b.text_len))
	case out.order != nil && out.rank_offsets == nil:
		return argError("result.order is set but result.rank_offsets is NULL; both are needed to read the placement order")
	}
	return nil
}

// batchViews views the batch's flat buffers (checked by checkBatch) in
// place: the token buffer, the conversation-id bytes and the match lengths,
// each nil when absent.
func batchViews(b *C.adpr_batch, ns, nr int) (tokens []int32, text []byte, matches []int32) {
	if b.tokens_len > 0 {
		tokens = unsafe.Slice((*int32)(unsafe.Pointer(b.tokens)), int(b.tokens_len))
	}
	if b.text_len > 0 {
		text = unsafe.Slice((*byte)(unsafe.Pointer(b.text)), int(b.text_len))
	}
	if b.match_lens != nil {
		matches = unsafe.Slice((*int32)(unsafe.Pointer(b.match_lens)), ns*nr)
	}
	return tokens, text, matches
}

// readStates validates and converts the rank states into e.states.
func (e *entry) readStates(states []C.adpr_rank_state) error {
	e.states = e.states[:0]
	for i, s := range states {
		const known = C.ADPR_RANK_MEMORY_PRESSURE | C.ADPR_RANK_PENDING_KV | C.ADPR_RANK_EVICTABLE_KV
		if s.flags&^known != 0 || s.reserved != 0 {
			return argError("states[%d]: flags = %#x, reserved = %d, want only ADPR_RANK_* flags and reserved = 0 (zero the struct before filling it)",
				i, uint32(s.flags), uint32(s.reserved))
		}
		// The router refuses a pending or evictable count without its
		// flag, naming the field.
		e.states = append(e.states, router.RankState{
			Rank:               int(s.rank),
			NumActiveRequests:  int(s.num_active_requests),
			NumActiveTokens:    int64(s.num_active_tokens),
			KVCapacityTokens:   int64(s.kv_capacity_tokens),
			FreeKVTokens:       int64(s.free_kv_tokens),
			MemoryPressure:     s.flags&C.ADPR_RANK_MEMORY_PRESSURE != 0,
			PendingKVTokens:    int64(s.pending_kv_tokens),
			ReportsPendingKV:   s.flags&C.ADPR_RANK_PENDING_KV != 0,
			EvictableKVTokens:  int64(s.evictable_kv_tokens),
			ReportsEvictableKV: s.flags&C.ADPR_RANK_EVICTABLE_KV != 0,
		})
	}
	return nil
}

// readRequests validates and converts the requests, appending them to
// e.reqs. Their tokens and conversation ids are views into tokens and text,
// which the caller must drop (dropViews) before returning to C.
func (e *entry) readRequests(reqs []C.adpr_request, tokens []int32, text []byte) error {
	// Each request is written in place: returning and appending it (88
	// bytes) copied it twice, a few percent of a 256-request decision.
	base := len(e.reqs)
	e.reqs = slices.Grow(e.reqs, len(reqs))[:base+len(reqs)]
	for i, q := range reqs {
		if err := readRequest(&e.reqs[base+i], i, q, tokens, text); err != nil {
			e.reqs = e.reqs[:base]
			return err
		}
	}
	return nil
}

// readRequest validates and converts requests[i], q (a copy: each field is
// read from caller memory once), into *out; *out is unchanged on error.
func readRequest(out *router.Request, i int, q C.adpr_request, tokens []int32, text []byte) error {
	off, cnt := int64(q.token_offset), int64(q.token_count)
	if off < 0 || cnt < 0 || cnt > int64(len(tokens))-off {
		return argError("requests[%d] (id %d): tokens [%d, %d+%d) lie outside the token buffer of %d tokens",
			i, uint64(q.id), off, off, cnt, len(tokens))
	}
	coff, clen := int64(q.conversation_offset), int64(q.conversation_len)
	if coff < 0 || clen < 0 || clen > int64(len(text))-coff {
		return argError("requests[%d] (id %d): conversation id bytes [%d, %d+%d) lie outside the text buffer of %d bytes",
			i, uint64(q.id), coff, coff, clen, len(text))
	}
	if q.relax != 0 && q.relax != 1 {
		return argError("requests[%d] (id %d): relax = %d, want 0 (strict) or 1 (relaxed)", i, uint64(q.id), int32(q.relax))
	}
	if q.num_tokens < 0 {
		return argError("requests[%d] (id %d): num_tokens = %d, want >= 0", i, uint64(q.id), int64(q.num_tokens))
	}
	target := int(q.target_rank)
	if target < 0 {
		if target != C.ADPR_NO_TARGET {
			return argError("requests[%d] (id %d): target_rank = %d, want ADPR_NO_TARGET (-1) or 0..dp_size-1", i, uint64(q.id), target)
		}
		target = router.NoTarget
	}
	var conv string
	if clen > 0 {
		conv = unsafe.String(&text[coff], int(clen))
	}
	*out = router.Request{
		ID:             uint64(q.id),
		Tokens:         tokens[off : off+cnt : off+cnt],
		NumTokens:      int(q.num_tokens),
		TargetRank:     target,
		Strict:         q.relax == 0,
		ConversationID: conv,
		LoRAID:         uint64(q.lora_id),
		CacheSalt:      uint64(q.cache_salt),
		MaxNewTokens:   int(q.max_new_tokens), // validated by the router
	}
	return nil
}

// writeResult writes e.res into the outputs the caller asked for (each
// non-NULL pointer of out, sized by the batch's ns states and nr requests).
func (e *entry) writeResult(out *C.adpr_route_result, ns, nr int) {
	res := &e.res
	if out.request_rank != nil {
		ranks := unsafe.Slice((*int32)(unsafe.Pointer(out.request_rank)), nr)
		for i, r := range res.Ranks {
			ranks[i] = int32(r)
		}
	}
	if out.rank_offsets != nil {
		offsets := unsafe.Slice((*int32)(unsafe.Pointer(out.rank_offsets)), ns+1)
		k := 0
		for r, ids := range res.Assignment {
			offsets[r] = int32(k)
			k += len(ids)
		}
		offsets[ns] = int32(k)
	}
	if out.order != nil {
		order := unsafe.Slice((*uint64)(unsafe.Pointer(out.order)), nr)
		k := 0
		for _, ids := range res.Assignment {
			k += copy(order[k:], ids)
		}
		copy(order[k:], res.Unassigned)
	}
	out.expected = C.int32_t(res.Expected)
	out.num_unassigned = C.int32_t(len(res.Unassigned))
}

// dropViews forgets every slice and string that points into caller memory.
func (e *entry) dropViews() {
	clear(e.reqs)
	e.reqs = e.reqs[:0]
}
