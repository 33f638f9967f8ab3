package main

/*
#include "adprouter.h"
*/
import "C"

import (
	"unsafe"

	"github.com/adprouter/adprouter/router"
)

// reasonCodes and exclusionCodes are the one map from the router's enums to
// the ADPR_REASON_* and ADPR_EXCLUDED_* values of adprouter.h.
var reasonCodes = [...]C.int32_t{
	router.ReasonUnplaced:          C.ADPR_REASON_UNPLACED,
	router.ReasonExplicit:          C.ADPR_REASON_EXPLICIT,
	router.ReasonColdStartWarmup:   C.ADPR_REASON_COLD_START_WARMUP,
	router.ReasonDemandWarmup:      C.ADPR_REASON_DEMAND_WARMUP,
	router.ReasonScored:            C.ADPR_REASON_SCORED,
	router.ReasonLeastLoaded:       C.ADPR_REASON_LEAST_LOADED,
	router.ReasonConversationBound: C.ADPR_REASON_CONVERSATION_BOUND,
	router.ReasonNewConversation:   C.ADPR_REASON_NEW_CONVERSATION,
	router.ReasonPredictedTTFT:     C.ADPR_REASON_PREDICTED_TTFT,
	router.ReasonHeld:              C.ADPR_REASON_HELD,
	router.ReasonHeldInFlight:      C.ADPR_REASON_HELD_IN_FLIGHT,
}

var exclusionCodes = [...]C.int32_t{
	router.Eligible:             C.ADPR_EXCLUDED_NONE,
	router.ExcludedAtCap:        C.ADPR_EXCLUDED_AT_CAP,
	router.ExcludedNoRoom:       C.ADPR_EXCLUDED_NO_ROOM,
	router.ExcludedStackedTails: C.ADPR_EXCLUDED_STACKED_TAILS,
}

//export adprgo_router_receipts
func adprgo_router_receipts(h C.adpr_router, out *C.adpr_receipt, outCap C.int64_t,
	cands *C.adpr_candidate, candCap C.int64_t, nOut, nCands *C.int64_t,
	ebuf *C.char, elen C.size_t) C.adpr_status {
	return guardRouter("adpr_router_receipts", h, ebuf, elen, func(e *entry) error {
		bufs := []outBuffer{
			{"receipts", unsafe.Pointer(out), outCap, "total_receipts", nOut},
			{"candidates", unsafe.Pointer(cands), candCap, "total_candidates", nCands},
		}
		if !e.r.Config().Explain {
			return argError("the router was created without the option explain = true: it keeps no receipts")
		}
		if err := checkBuffers(bufs...); err != nil {
			return err
		}
		rcs := e.r.Receipts()
		total := 0
		for i := range rcs {
			total += len(rcs[i].Candidates)
		}
		if err := settle(bufs, int64(len(rcs)), int64(total)); err != nil {
			return err
		}
		if len(rcs) > 0 {
			writeReceipts(unsafe.Slice(out, len(rcs)), rcs)
		}
		if total > 0 {
			writeCandidates(unsafe.Slice(cands, total), rcs)
		}
		return nil
	})
}

func writeReceipts(dst []C.adpr_receipt, rcs []router.Receipt) {
	off := 0
	for i := range rcs {
		rc := &rcs[i]
		dst[i] = C.adpr_receipt{
			id:                C.uint64_t(rc.ID),
			rank:              C.int32_t(rc.Rank),
			reason:            reasonCodes[rc.Reason],
			num_tokens:        C.int64_t(rc.Len),
			step:              C.int32_t(rc.Step),
			replica_wanted:    cbool(rc.ReplicaWanted),
			max_match:         C.int64_t(rc.Gate.MaxMatch),
			match_rate:        C.double(rc.Gate.Rate),
			threshold:         C.double(rc.Gate.Threshold),
			expected:          C.int32_t(rc.Expected),
			eligible:          C.int32_t(rc.Eligible),
			affinity:          cbool(rc.Gate.On),
			ties:              C.int32_t(rc.Tied),
			capacity_fallback: cbool(rc.CapacityFallback),
			num_candidates:    C.int32_t(len(rc.Candidates)),
			candidate_offset:  C.int64_t(off),
		}
		off += len(rc.Candidates)
	}
}

// writeCandidates writes every receipt's candidates back to back, each with
// its position in the receipt's shuffle.
func writeCandidates(dst []C.adpr_candidate, rcs []router.Receipt) {
	off := 0
	for i := range rcs {
		rc := &rcs[i]
		for _, c := range rc.Candidates {
			dst[off] = C.adpr_candidate{
				rank:        C.int32_t(c.Rank),
				excluded:    exclusionCodes[c.Excluded],
				match:       C.int64_t(c.Match),
				tokens:      C.double(c.Tokens),
				load_term:   C.double(c.LoadTerm),
				score:       C.double(c.Score),
				requests:    C.int32_t(c.Requests),
				shuffle_pos: -1,
			}
			off++
		}
		base := off - len(rc.Candidates)
		for pos, k := range rc.Shuffle {
			dst[base+k].shuffle_pos = C.int32_t(pos)
		}
	}
}

func cbool(b bool) C.int32_t {
	if b {
		return 1
	}
	return 0
}

//export adprgo_router_receipt_text
func adprgo_router_receipt_text(h C.adpr_router, index C.int64_t, buf *C.char, capacity C.int64_t,
	total *C.int64_t, ebuf *C.char, elen C.size_t) C.adpr_status {
	return guardRouter("adpr_router_receipt_text", h, ebuf, elen, func(e *entry) error {
		out := textBuffer("buf", buf, capacity, total)
		rcs := e.r.Receipts()
		switch {
		case !e.r.Config().Explain:
			return argError("the router was created without the option explain = true: it keeps no receipts")
		case index < 0 || int64(index) >= int64(len(rcs)):
			return argError("index = %d, want 0..%d (the last decision's receipts)", int64(index), len(rcs)-1)
		}
		if err := checkBuffers(out); err != nil {
			return err
		}
		return putText(out, []byte(rcs[index].String()))
	})
}
