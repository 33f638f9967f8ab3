package router

import (
	"cmp"
	"slices"
)

// statCounters are cumulative counters a host can export as metrics. They
// never influence a decision.
type statCounters struct {
	decisions  uint64
	placed     []uint64
	hitTokens  []uint64
	unassigned uint64
	warmup     uint64 // warmup placements, once and demand
	demand     uint64 // demand warmup placements
	pressure   []bool // last MemoryPressure seen per rank
}

func (s *statCounters) init(size int) {
	s.placed = make([]uint64, size)
	s.hitTokens = make([]uint64, size)
	s.pressure = make([]bool, size)
}

// record adds one finished decision.
func (s *statCounters) record(b *batch) {
	s.decisions++
	for r, ids := range b.res.Assignment {
		s.placed[r] += uint64(len(ids))
	}
	s.unassigned += uint64(len(b.res.Unassigned))
	for r := range b.states {
		s.pressure[r] = b.states[r].MemoryPressure
	}
}

// RankStats are the cumulative counters of one rank.
type RankStats struct {
	// Placed counts requests routed to the rank.
	Placed uint64
	// PredictedHitTokens sums, over those requests, the prompt tokens the
	// router expected the rank to have cached (the match it routed on).
	PredictedHitTokens uint64
	// IndexBlocks and IndexLimitBlocks are the rank's share of the prefix
	// index and its bound; IndexEvictedBlocks counts its evictions.
	IndexBlocks, IndexLimitBlocks int
	IndexEvictedBlocks            uint64
	// MemoryPressure is the flag of the rank's last state.
	MemoryPressure bool
}

// HotGroup is a prompt family (the hash of its first KV block) that demand
// warmup tracks.
type HotGroup struct {
	Family   uint64
	Requests int     // in the window
	Share    float64 // Requests / requests in the window
	Replicas int     // ranks the index expects to hold it
	Target   int     // ranks demand warmup wants to hold it
}

// Stats is a snapshot of a Router's counters.
type Stats struct {
	Decisions        uint64
	Unassigned       uint64
	WarmupPlacements uint64 // cold-start and demand warmup
	DemandPlacements uint64 // replicas of hot families: demand warmup, ScoreTTFT ramping, room and idle ranks
	PendingWarmup    int    // ranks the cold-start warmup has yet to reach
	Conversations    int
	IndexEntries     int // (block, rank) pairs in the prefix index
	// IndexBytes is the memory the prefix index holds, in bytes (the
	// capacity of its arrays; at most Config.IndexMaxBytes plus a few words
	// per rank).
	IndexBytes int
	Ranks      []RankStats // nil from Summary
	// HotGroups lists the families demand warmup would replicate (those
	// seen at least WarmupMinRequests times in the window), most requested
	// first, at most maxGroups of them.
	HotGroups []HotGroup
	// HotGroupsTotal is how many such families there are, listed or not.
	HotGroupsTotal int
}

// Stats returns the Router's counters, with per-rank counters and at most
// maxGroups hot groups. It allocates the DPSize per-rank entries: a caller
// that wants none, or has its own storage, uses Summary and RankStatsOf.
func (r *Router) Stats(maxGroups int) Stats {
	s := r.Summary(maxGroups)
	s.Ranks = make([]RankStats, r.cfg.DPSize)
	for k := range s.Ranks {
		s.Ranks[k] = r.RankStatsOf(k)
	}
	return s
}

// RankStatsOf returns the counters of rank k (0 <= k < DPSize).
func (r *Router) RankStatsOf(k int) RankStats {
	rs := RankStats{
		Placed:             r.stats.placed[k],
		PredictedHitTokens: r.stats.hitTokens[k],
		MemoryPressure:     r.stats.pressure[k],
	}
	if p := r.prefix; p != nil {
		rs.IndexBlocks = p.idx.Blocks(k)
		rs.IndexLimitBlocks = p.idx.Limit(k)
		rs.IndexEvictedBlocks = p.idx.Evicted(k)
	}
	return rs
}

// IndexBytes returns Stats.IndexBytes without the rest of a snapshot (0
// without an index). It rises only when an array of the index doubles,
// leaving the old one as garbage: the C library reads it after every call to
// know when to give such garbage back to the operating system.
func (r *Router) IndexBytes() int {
	if r.prefix == nil {
		return 0
	}
	return r.prefix.idx.Bytes()
}

// Summary returns the router-wide counters and at most maxGroups hot groups,
// without per-rank counters (Ranks is nil). Its cost does not depend on
// DPSize.
func (r *Router) Summary(maxGroups int) Stats {
	s := Stats{
		Decisions:        r.stats.decisions,
		Unassigned:       r.stats.unassigned,
		WarmupPlacements: r.stats.warmup,
		DemandPlacements: r.stats.demand,
		PendingWarmup:    r.pendingCount,
		Conversations:    r.conv.Len(),
	}
	p := r.prefix
	if p == nil {
		return s
	}
	s.IndexEntries, s.IndexBytes = p.idx.Len(), p.idx.Bytes()
	if p.counts == nil {
		return s
	}
	for _, c := range p.counts { // a count: order does not matter
		if c >= r.cfg.WarmupMinRequests {
			s.HotGroupsTotal++
		}
	}
	if maxGroups <= 0 || s.HotGroupsTotal == 0 {
		return s
	}
	s.HotGroups = make([]HotGroup, 0, s.HotGroupsTotal)
	for fam, c := range p.counts { // sorted below: order does not leak
		if c < r.cfg.WarmupMinRequests {
			continue
		}
		g := HotGroup{Family: fam, Requests: c, Replicas: p.idx.Replicas(fam)}
		g.Share, g.Target = p.target(&r.cfg, c)
		s.HotGroups = append(s.HotGroups, g)
	}
	slices.SortFunc(s.HotGroups, func(a, b HotGroup) int {
		if c := cmp.Compare(b.Requests, a.Requests); c != 0 {
			return c
		}
		return cmp.Compare(a.Family, b.Family)
	})
	if len(s.HotGroups) > maxGroups {
		s.HotGroups = s.HotGroups[:maxGroups]
	}
	return s
}
