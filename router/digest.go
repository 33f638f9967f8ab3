package router

import (
	"encoding/binary"
	"hash/fnv"
	"math"
)

// StateDigest returns a 64-bit FNV-1a hash of everything that determines the
// Router's future decisions: its configuration, the pending warmup ranks, the
// round-robin cursor and the conversation bindings in recency order. Routers
// on different ranks that have seen the same calls return the same digest;
// comparing digests across ranks (e.g. with an MPI allreduce) detects a rank
// whose inputs diverged before the divergence costs a deadlock.
func (r *Router) StateDigest() uint64 {
	h := fnv.New64a()
	var buf [8]byte
	u64 := func(v uint64) {
		binary.LittleEndian.PutUint64(buf[:], v)
		h.Write(buf[:])
	}
	str := func(s string) {
		u64(uint64(len(s)))
		h.Write([]byte(s))
	}
	c := &r.cfg
	str(c.Policy)
	u64(uint64(c.DPSize))
	u64(math.Float64bits(c.LoadBalanceWeight))
	u64(math.Float64bits(c.MatchRateThreshold))
	u64(math.Float64bits(c.FairShareMultiplier))
	u64(b2u(c.ColdStartWarmup))
	u64(uint64(c.MaxSessions))
	str(c.NewConvPlacement)
	u64(b2u(c.CapacityAware))
	u64(uint64(c.TokensPerBlock))
	str(c.PrefixSource)
	u64(uint64(c.IndexCapacityBlocks))
	str(c.Warmup)
	u64(math.Float64bits(c.WarmupFactor))
	u64(uint64(c.WarmupWindow))
	u64(uint64(c.WarmupMinRequests))

	u64(uint64(len(r.pending)))
	for _, p := range r.pending {
		u64(b2u(p))
	}
	u64(uint64(r.cursor))
	u64(uint64(r.conv.Len()))
	r.conv.each(func(key string, rank int) {
		str(key)
		u64(uint64(rank))
	})
	if p := r.prefix; p != nil {
		// The index in per-rank recency order, then the demand window from
		// its oldest entry.
		p.idx.Each(func(rank int, hash uint64) {
			u64(uint64(rank))
			u64(hash)
		})
		u64(uint64(p.wfill))
		for k := range p.wfill {
			j := (p.wpos - p.wfill + k + len(p.window)) % len(p.window)
			u64(b2u(p.hasFam[j]))
			u64(p.window[j])
		}
	}
	return h.Sum64()
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
