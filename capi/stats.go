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
	groups *C.adpr_hot_group, maxGroups C.int32_t, ebuf *C.char, elen C.size_t) C.adpr_status {
	return guardRouter("adpr_router_stats", h, ebuf, elen, func(e *entry) error {
		switch size := e.r.Config().DPSize; {
		case out == nil:
			return argError("stats is NULL")
		case maxGroups < 0 || (maxGroups > 0 && groups == nil):
			return argError("groups = %p with max_groups = %d, want a non-NULL array when max_groups > 0", groups, int32(maxGroups))
		case ranks != nil && int(nranks) != size:
			return argError("num_ranks = %d, want dp_size = %d", int32(nranks), size)
		}
		e.stats(out, ranks, groups, maxGroups)
		return nil
	})
}

// stats copies the router's counters into the caller's structs.
func (e *entry) stats(out *C.adpr_stats, ranks *C.adpr_rank_stats, groups *C.adpr_hot_group, maxGroups C.int32_t) {
	size := e.r.Config().DPSize
	s := e.r.Summary(int(maxGroups)) // per-rank counters only when asked for, without allocating
	*out = C.adpr_stats{
		decisions:         C.uint64_t(s.Decisions),
		unassigned:        C.uint64_t(s.Unassigned),
		warmup_placements: C.uint64_t(s.WarmupPlacements),
		demand_placements: C.uint64_t(s.DemandPlacements),
		pending_warmup:    C.int64_t(s.PendingWarmup),
		conversations:     C.int64_t(s.Conversations),
		index_entries:     C.int64_t(s.IndexEntries),
		index_bytes:       C.int64_t(s.IndexBytes),
		num_hot_groups:    C.int32_t(len(s.HotGroups)),
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
	if len(s.HotGroups) > 0 {
		dst := unsafe.Slice(groups, int(maxGroups))
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
}

//export adprgo_block_hashes
func adprgo_block_hashes(tokens *C.int32_t, n C.int64_t, tpb C.int32_t, lora, salt C.uint64_t,
	out *C.uint64_t, outCap C.int64_t, nOut *C.int64_t, ebuf *C.char, elen C.size_t) C.adpr_status {
	return guard("adpr_block_hashes", ebuf, elen, func() error {
		return blockHashes(tokens, n, tpb, lora, salt, out, outCap, nOut)
	})
}

// maxHashTokens bounds adpr_block_hashes' num_tokens (2^31: far beyond any
// context window).
const maxHashTokens = 1 << 31

func blockHashes(tokens *C.int32_t, n C.int64_t, tpb C.int32_t, lora, salt C.uint64_t,
	out *C.uint64_t, outCap C.int64_t, nOut *C.int64_t) (err error) {
	switch {
	case n < 0 || n > maxHashTokens || (n > 0 && tokens == nil):
		err = argError("tokens = %p with num_tokens = %d, want a non-NULL buffer of 0..%d tokens", tokens, int64(n), maxHashTokens)
	case tpb < 1 || tpb > 1<<16:
		err = argError("tokens_per_block = %d, want 1..65536", int32(tpb))
	case outCap < 0 || (outCap > 0 && out == nil):
		err = argError("out = %p with out_cap = %d, want a non-NULL buffer when out_cap > 0", out, int64(outCap))
	case nOut == nil:
		err = argError("num_out is NULL")
	}
	if err != nil {
		return err
	}
	var toks []int32
	if n > 0 {
		toks = unsafe.Slice((*int32)(unsafe.Pointer(tokens)), int(n))
	}
	blocks := int64(n) / int64(tpb)
	*nOut = C.int64_t(blocks)
	if outCap == 0 {
		return nil
	}
	dst := unsafe.Slice((*uint64)(unsafe.Pointer(out)), int(outCap))
	// Hash only the blocks that fit; appending within dst's capacity writes
	// straight into the caller's buffer.
	k := min(blocks, int64(outCap)) * int64(tpb)
	router.AppendBlockHashes(dst[:0:outCap], toks[:k], int(tpb), uint64(lora), uint64(salt))
	return nil
}
