package main

/*
#include "adprouter.h"
*/
import "C"

import (
	"unsafe"

	"github.com/adprouter/adprouter/router"
)

//export adprgo_router_stats
func adprgo_router_stats(h C.adpr_router, out *C.adpr_stats, ranks *C.adpr_rank_stats, nranks C.int32_t,
	groups *C.adpr_hot_group, capacity C.int64_t, total *C.int64_t, ebuf *C.char, elen C.size_t) C.adpr_status {
	return guardRouter("adpr_router_stats", h, ebuf, elen, func(e *entry) error {
		buf := outBuffer{"groups", unsafe.Pointer(groups), capacity, "total_groups", total}
		switch size := e.r.Config().DPSize; {
		case out == nil:
			return argError("stats is NULL")
		case ranks != nil && int(nranks) != size:
			return argError("num_ranks = %d, want dp_size = %d", int32(nranks), size)
		}
		if err := checkBuffers(buf); err != nil {
			return err
		}
		return e.stats(out, ranks, buf)
	})
}

// stats copies the router's counters into the caller's structs, and the
// hot groups under the buffer rule (stats and ranks are written either way).
func (e *entry) stats(out *C.adpr_stats, ranks *C.adpr_rank_stats, groups outBuffer) error {
	size := e.r.Config().DPSize
	// Per-rank counters only when asked for, and the groups only when they
	// fit, without allocating.
	s := e.r.Summary(int(groups.capacity))
	*out = C.adpr_stats{
		decisions:         C.uint64_t(s.Decisions),
		unassigned:        C.uint64_t(s.Unassigned),
		warmup_placements: C.uint64_t(s.WarmupPlacements),
		demand_placements: C.uint64_t(s.DemandPlacements),
		pending_warmup:    C.int64_t(s.PendingWarmup),
		conversations:     C.int64_t(s.Conversations),
		index_entries:     C.int64_t(s.IndexEntries),
		index_bytes:       C.int64_t(s.IndexBytes),
	}
	if ranks != nil {
		dst := unsafe.Slice(ranks, size)
		for k := range dst {
			src := e.r.RankStatsOf(k)
			var flags C.uint32_t
			if src.MemoryPressure {
				flags = C.ADPR_RANK_MEMORY_PRESSURE
			}
			dst[k] = C.adpr_rank_stats{
				placed:               C.uint64_t(src.Placed),
				predicted_hit_tokens: C.uint64_t(src.PredictedHitTokens),
				index_blocks:         C.int64_t(src.IndexBlocks),
				index_limit_blocks:   C.int64_t(src.IndexLimitBlocks),
				index_evicted_blocks: C.uint64_t(src.IndexEvictedBlocks),
				flags:                flags,
			}
		}
	}
	if err := settle([]outBuffer{groups}, int64(s.HotGroupsTotal)); err != nil {
		return err
	}
	if len(s.HotGroups) > 0 {
		dst := unsafe.Slice((*C.adpr_hot_group)(groups.ptr), len(s.HotGroups))
		for k, g := range s.HotGroups {
			dst[k] = C.adpr_hot_group{
				family:   C.uint64_t(g.Family),
				requests: C.int64_t(g.Requests),
				share:    C.double(g.Share),
				replicas: C.int32_t(g.Replicas),
				target:   C.int32_t(g.Target),
			}
		}
	}
	return nil
}

//export adprgo_block_hashes
func adprgo_block_hashes(tokens *C.int32_t, n C.int64_t, tpb C.int32_t, lora, salt C.uint64_t,
	out *C.uint64_t, capacity C.int64_t, total *C.int64_t, ebuf *C.char, elen C.size_t) C.adpr_status {
	return guard("adpr_block_hashes", ebuf, elen, func() error {
		return blockHashes(tokens, n, tpb, lora, salt, outBuffer{"out", unsafe.Pointer(out), capacity, "total", total})
	})
}

// maxHashTokens bounds adpr_block_hashes' num_tokens (2^31: far beyond any
// context window).
const maxHashTokens = 1 << 31

func blockHashes(tokens *C.int32_t, n C.int64_t, tpb C.int32_t, lora, salt C.uint64_t, out outBuffer) error {
	switch {
	case n < 0 || n > maxHashTokens || (n > 0 && tokens == nil):
		return argError("tokens = %p with num_tokens = %d, want a non-NULL buffer of 0..%d tokens", tokens, int64(n), maxHashTokens)
	case tpb < 1 || tpb > router.MaxTokensPerBlock:
		return argError("tokens_per_block = %d, want 1..%d", int32(tpb), router.MaxTokensPerBlock)
	}
	if err := checkBuffers(out); err != nil {
		return err
	}
	blocks := int64(n) / int64(tpb)
	if err := settle([]outBuffer{out}, blocks); err != nil {
		return err
	}
	if blocks == 0 {
		return nil
	}
	toks := unsafe.Slice((*int32)(unsafe.Pointer(tokens)), int(n))
	// Appending within dst's capacity writes straight into the caller's buffer.
	dst := unsafe.Slice((*uint64)(out.ptr), int(blocks))
	router.AppendBlockHashes(dst[:0:blocks], toks[:blocks*int64(tpb)], int(tpb), uint64(lora), uint64(salt))
	return nil
}
