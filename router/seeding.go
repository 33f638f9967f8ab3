package router

import "slices"

// The tie-break's seeding strategy, in one place: which requests to seed
// and how many at once. The seeders themselves are generated from one table
// (router/internal/seedwidths: pyrandom_seed_amd64.s, seeders_amd64.go,
// seeders_other.go; go generate ./router), and mtLanes is its widest.

// The thresholds of seedWidth, named.
const (
	// seedRareTies: once a decision has seeded, and fewer than one in
	// seedRareTies routing positions so far asked for a stream, each tie
	// seeds only its own request.
	seedRareTies = 80
	// seedWastedRatio: once fewer than one in seedWastedRatio of the
	// streams seeded so far were used, the narrowest seeder runs (one
	// chain's latency bounds a single seed and two vectors alike, so its
	// extra lanes come nearly free).
	seedWastedRatio = 8
	// seedHalfUsed: while fewer than half the streams seeded so far were
	// used (or before the first run), a middle seeder is enough.
	seedHalfUsed = 2
	// seedNarrow, seedMiddle and seedTail are the widths chosen for the last
	// few requests or sparse ties, for the first tie or ties now and then,
	// and for the last positions of a decision that ties throughout (the
	// widest, mtLanes, would seed idle lanes there).
	seedNarrow = 16
	seedMiddle = 32
	seedTail   = 64
)

// seedWidth returns how many of the lanes pending seeds (the next unseeded
// requests from routing position pos) the next AVX2 seeding run seeds: one of
// seederWidths, or 1. ties of m ranks are tied for the request at pos.
func (c *seedCache) seedWidth(pos, lanes, m, ties int) int {
	width := mtLanes
	switch {
	case c.fills > 0 && c.used*seedRareTies <= pos:
		return 1
	case lanes <= seedNarrow || c.fills > 0 && c.used*seedWastedRatio < c.seeded:
		return seedNarrow
	case c.fills == 0 && 2*ties >= m && lanes > seedMiddle:
		// A first tie among most of the ranks: they are idle or equally
		// loaded, and the requests after it will mostly tie too: the
		// widest.
	case c.fills == 0 || c.used*seedHalfUsed < c.seeded || lanes <= seedMiddle:
		return seedMiddle
	}
	if lanes <= seedTail {
		width = seedTail
	}
	return width
}

// seedCache holds, for the requests of one decision, the first outputs of
// their random.Random(id) streams. Seeding MT19937 is the dominant cost of the
// tie-break (a chain of ~1,250 dependent multiplies per seed), and it is only
// needed for requests whose best score is tied, so streams are computed on
// demand, several requests at a time along the routing order: the chains of
// independent seeds run side by side at little more than the cost of one
// (four interleaved in portable Go; with AVX2, the seeders of
// router/internal/seedwidths, chosen by seedWidth).
type seedCache struct {
	off     []int32 // per routing position: offset into outs, or -1
	n       []int32 // per routing position: outputs stored
	outs    []uint32
	simd    bool       // this decision seeds with the AVX2 seeders
	fills   int        // seeding runs in this decision
	seeded  int        // streams computed in this decision
	used    int        // streams asked for in this decision
	width   []int32    // per routing position: distance in outs between its outputs
	accept  []uint64   // per routing position: draws a shuffle of acceptM[pos] accepts
	acceptM []int32    // per routing position: that shuffle's size, 0 if unknown
	lanes   *seedLanes // scratch, allocated on first use
}

// seedLanes is the scratch of one seeding run.
type seedLanes struct {
	four [4][mtN]uint32        // portable: four states
	st   [mtN * mtLanes]uint32 // AVX2: the states, lane-interleaved
	add  [2 * mtLanes]uint32   // AVX2: per-lane addends (odd, even i)
	acc  [2 * mtLanes]uint32   // AVX2: per-lane accepted-draw masks (low, high words)
}

func (c *seedCache) reset(n int) {
	c.off = slices.Grow(c.off[:0], n)[:n]
	c.n = slices.Grow(c.n[:0], n)[:n]
	c.width = slices.Grow(c.width[:0], n)[:n]
	c.accept = slices.Grow(c.accept[:0], n)[:n]
	c.acceptM = slices.Grow(c.acceptM[:0], n)[:n]
	for i := range c.off {
		c.off[i] = -1
	}
	c.outs = c.outs[:0]
	c.simd, c.fills, c.seeded, c.used = seedSIMD, 0, 0, 0
}

// stream returns the random stream of the request at routing position pos,
// sized for shuffles of up to m ranks, ties of which are tied.
func (c *seedCache) stream(pos int, rest []int, reqs []Request, m, ties int) mtStream {
	c.used++
	if c.off[pos] < 0 {
		c.fill(pos, rest, reqs, m, ties)
	}
	o, n, w := int(c.off[pos]), int(c.n[pos]), int(c.width[pos])
	return mtStream{
		seed:     reqs[rest[pos]].ID,
		prefix:   c.outs[o : o+(n-1)*w+1],
		stride:   w,
		accepted: c.accept[pos],
		acceptM:  int(c.acceptM[pos]),
	}
}

// fill computes the streams of the request at routing position pos and of
// the next unseeded ones after it, as many as one seeding run handles; ties
// of the m ranks are tied for this request.
func (c *seedCache) fill(pos int, rest []int, reqs []Request, m, ties int) {
	if c.lanes == nil {
		c.lanes = new(seedLanes)
	}
	sl := c.lanes
	// Enough outputs for a shuffle of m ranks in all but rare cases (each
	// draw is accepted with probability > 1/2); mtStream falls back to the
	// full generator if a shuffle needs more.
	want := min(2*m+16, mtFastOutputs)
	width := 4
	if c.simd {
		width = mtLanes
	}
	var seeds [mtLanes]uint64
	var at [mtLanes]int
	lanes := 0
	for p := pos; p < len(rest) && lanes < width; p++ {
		if c.off[p] < 0 {
			seeds[lanes], at[lanes] = reqs[rest[p]].ID, p
			lanes++
		}
	}
	if c.simd {
		width = c.seedWidth(pos, lanes, m, ties)
	}
	lanes = min(lanes, width)
	c.fills++
	c.seeded += lanes
	start := len(c.outs)
	if c.simd && width > 1 {
		// The outputs stay lane-interleaved: stream l reads every
		// width-th word from start+l.
		for l := range width {
			sl.add[l], sl.add[width+l] = seedAddends(seeds[l])
		}
		c.outs = slices.Grow(c.outs, want*width)[:start+want*width]
		mtSeedAVX2(width, &sl.st[0], &sl.add[0], &c.outs[start], want)
		// The shuffles' rejections, resolved for every lane at once
		// while the outputs are at hand, for shuffles of m ranks (what
		// most of these requests will need; a request that needs another
		// size shuffles the ordinary way).
		acceptM := 0
		if want <= 64 && width%32 == 0 {
			acceptM = m
			mtAcceptAVX2(&c.outs[start], &sl.acc[0], width, want, m)
		}
		for l := range lanes {
			p := at[l]
			c.off[p], c.n[p], c.width[p] = int32(start+l), int32(want), int32(width)
			c.acceptM[p] = int32(acceptM)
			if acceptM > 0 {
				c.accept[p] = uint64(sl.acc[l]) | uint64(sl.acc[width+l])<<32
			}
		}
		return
	}
	if lanes == 1 {
		mtSeed(&sl.four[0], seeds[0])
	} else {
		mtSeed4(&sl.four, (*[4]uint64)(seeds[:4]))
	}
	c.outs = slices.Grow(c.outs, want*lanes)[:start+want*lanes]
	for l := range lanes {
		o := start + l*want
		mtFirstOutputs(&sl.four[l], c.outs[o:o+want])
		c.off[at[l]], c.n[at[l]], c.width[at[l]] = int32(o), int32(want), 1
		c.acceptM[at[l]] = 0
	}
}
