package main

/*
#include "adprouter.h"
*/
import "C"

import "unsafe"

// The router state a host reads and writes between decisions: the pending
// warmup ranks and the conversation map (TensorRT-LLM's routers keep them in
// _pending_warmup_ranks and _conv_to_rank).

// maxPendingRanks bounds adpr_router_set_pending_warmup's num_ranks: a set
// of ranks never needs more entries than the largest dp_size, but a caller
// may repeat ranks, so allow a generous multiple.
const maxPendingRanks = 1 << 20

//export adprgo_router_pending_warmup
func adprgo_router_pending_warmup(h C.adpr_router, out *C.int32_t, capacity C.int64_t, total *C.int64_t,
	ebuf *C.char, elen C.size_t) C.adpr_status {
	return guardRouter("adpr_router_pending_warmup", h, ebuf, elen, func(e *entry) error {
		buf := outBuffer{"ranks", unsafe.Pointer(out), capacity, "total", total}
		if err := checkBuffers(buf); err != nil {
			return err
		}
		pending := e.r.PendingWarmup()
		if err := settle([]outBuffer{buf}, int64(len(pending))); err != nil {
			return err
		}
		if len(pending) > 0 {
			dst := unsafe.Slice((*int32)(unsafe.Pointer(out)), len(pending))
			for i, k := range pending {
				dst[i] = int32(k)
			}
		}
		return nil
	})
}

//export adprgo_router_set_pending_warmup
func adprgo_router_set_pending_warmup(h C.adpr_router, ranks *C.int32_t, n C.int64_t,
	ebuf *C.char, elen C.size_t) C.adpr_status {
	return guardRouter("adpr_router_set_pending_warmup", h, ebuf, elen, func(e *entry) error {
		if n < 0 || n > maxPendingRanks || (n > 0 && ranks == nil) {
			return argError("ranks = %p with num_ranks = %d, want a non-NULL array of 0..%d ranks", ranks, int64(n), maxPendingRanks)
		}
		set := make([]int, int(n))
		if n > 0 {
			for i, k := range unsafe.Slice((*int32)(unsafe.Pointer(ranks)), int(n)) {
				set[i] = int(k)
			}
		}
		return e.r.SetPendingWarmup(set)
	})
}

//export adprgo_router_conversations
func adprgo_router_conversations(h C.adpr_router, out *C.adpr_binding, capacity C.int64_t,
	ids *C.char, idsCapacity C.int64_t, total, totalBytes *C.int64_t, ebuf *C.char, elen C.size_t) C.adpr_status {
	return guardRouter("adpr_router_conversations", h, ebuf, elen, func(e *entry) error {
		bufs := []outBuffer{
			{"bindings", unsafe.Pointer(out), capacity, "total_bindings", total},
			{"ids", unsafe.Pointer(ids), idsCapacity, "total_id_bytes", totalBytes},
		}
		if err := checkBuffers(bufs...); err != nil {
			return err
		}
		bindings := e.r.Conversations()
		bytes := 0
		for _, b := range bindings {
			bytes += len(b.ConversationID)
		}
		if err := settle(bufs, int64(len(bindings)), int64(bytes)); err != nil {
			return err
		}
		if len(bindings) == 0 {
			return nil
		}
		dst := unsafe.Slice(out, len(bindings))
		var text []byte
		if bytes > 0 {
			text = unsafe.Slice((*byte)(unsafe.Pointer(ids)), bytes)
		}
		off := 0
		for i, b := range bindings {
			copy(text[off:], b.ConversationID)
			dst[i] = C.adpr_binding{id_offset: C.int64_t(off), id_length: C.int32_t(len(b.ConversationID)), rank: C.int32_t(b.Rank)}
			off += len(b.ConversationID)
		}
		return nil
	})
}
