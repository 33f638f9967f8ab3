package router

import (
	"slices"

	"github.com/adprouter/adprouter/router/internal/invariants"
)

// routeKVAware is TensorRT-LLM's KV-cache-aware ADP policy: explicit targets
// and cold-start warmup first, then each request (grouped by prompt prefix) to
// the eligible rank with the lowest (uncached tokens + β · relative load)
// score, ties broken by a Python-compatible shuffle seeded with the request id.
//
// Beyond the reference, and only when configured: match lengths from the
// router's own prefix index (PrefixSource), demand-proportional warmup, and
// capacity awareness.
func (r *Router) routeKVAware(b *batch) {
	count, tokens, row := r.kvBegin(b)

	rest := r.explicitPass(b, count, false, func(i, k int) {
		r.matchRow(b, i, row)
		r.placeKV(b, i, k, row, tokens)
	})
	expected, eligible, quiet := r.scoring(b, count, rest)

	beta := r.cfg.LoadBalanceWeight
	r.seeds.reset(len(rest))

	// The reference sums the eligible ranks' token loads afresh for every
	// request. While every load and the whole batch's tokens stay below
	// 2^53 those sums are of integers, exact in any order, so one running
	// sum (less ranks leaving, plus tokens placed) equals them bit for bit.
	// Above that the sum is recomputed in the reference's order.
	bound := 0.0
	for _, t := range tokens {
		bound += t
	}
	for _, i := range rest {
		bound += float64(b.reqs[i].Len())
	}
	running := bound < 1<<53
	var eligSum float64
	for _, k := range eligible {
		eligSum += tokens[k]
	}
	lows := lowestLoads{}
	var initial []int // the eligible ranks when scoring began (invariants builds)
	if invariants.Enabled {
		initial = slices.Clone(eligible)
	}
	// place puts request i on rank k, keeping eligible, eligSum and lows.
	place := func(i, k int) {
		before := tokens[k]
		r.placeKV(b, i, k, row, tokens)
		eligSum += tokens[k] - before
		leaves := count[k] >= expected
		if leaves {
			eligible = slices.DeleteFunc(eligible, func(e int) bool { return e == k })
			eligSum -= tokens[k]
		}
		if before == lows.load && (tokens[k] != before || leaves) {
			lows.drop(k)
		}
		if invariants.Enabled {
			checkKVLoop(initial, eligible, count, expected, tokens, running, eligSum, &lows)
		}
	}

	for pos, i := range rest {
		if len(eligible) == 0 {
			break // every rank is at the soft cap: the rest stay unassigned
		}
		q := &b.reqs[i]
		n := q.Len()
		rowMax := r.matchRow(b, i, row)
		allow := r.room.allow(eligible, n, row)

		if quiet && !q.Strict {
			if k := r.demandRank(b, i, eligible, allow, tokens); k >= 0 {
				r.stats.warmup++
				r.stats.demand++
				if r.rc != nil {
					r.rc.placed(i, ReasonDemandWarmup, len(eligible))
				}
				place(i, k)
				continue
			}
		}

		nf := float64(n)
		sum := eligSum
		if !running {
			sum = 0
			for _, k := range eligible {
				sum += tokens[k]
			}
		}
		maxMatch := rowMax // every rank is eligible until one reaches the soft cap
		if len(eligible) < len(row) {
			maxMatch = 0
			for _, k := range eligible {
				maxMatch = max(maxMatch, row[k])
			}
		}
		denom := max(sum, nf)
		if denom == 0 {
			denom = 1 // the reference divides by zero here
		}
		gate := float64(maxMatch)/float64(max(n, 1)) > r.cfg.MatchRateThreshold

		// The lowest (score, tokens) pair, and how many ranks share it.
		var bestScore, bestTokens float64
		best, ties := -1, 0
		if !gate {
			// Without cache affinity the score is n + β·(tokens/denom·n):
			// each operation is monotone (β, n >= 0, denom > 0), so a
			// lower load never scores higher and equal loads score the
			// same. The lowest pair is the first rank with the lowest
			// load, its ties the ranks with that load: no divisions.
			if allow == nil {
				best, bestTokens, ties = lows.get(eligible, tokens)
			} else {
				best, bestTokens, ties = lowestLoad(eligible, allow, tokens)
			}
			if best >= 0 {
				bestScore = score(n, row[best], gate, nf, denom, beta, bestTokens)
			}
		} else {
			for _, k := range eligible {
				if !allowed(allow, k) {
					continue
				}
				// The load term is >= 0 and rounding is monotone, so a
				// score is never below its uncached tokens: a rank whose
				// uncached tokens exceed the best score so far can neither
				// win nor tie, and its division is skipped.
				if best >= 0 && float64(n-row[k]) > bestScore {
					continue
				}
				s := score(n, row[k], gate, nf, denom, beta, tokens[k])
				switch {
				case best < 0 || s < bestScore || (s == bestScore && tokens[k] < bestTokens):
					best, bestScore, bestTokens, ties = k, s, tokens[k], 1
				case s == bestScore && tokens[k] == bestTokens:
					ties++
				}
			}
		}
		if r.rc != nil {
			r.rc.scored(r, b, i, eligible, allow, row, tokens, denom, gate, maxMatch, ties)
		}
		if ties > 1 {
			// The first tied rank in random.Random(id).shuffle(eligible).
			shuffled := append(r.shuffled[:0], eligible...)
			r.shuffled = shuffled
			st := r.seeds.stream(pos, rest, b.reqs, len(eligible), ties)
			st.shuffle(shuffled)
			if r.rc != nil {
				r.rc.shuffle(i, shuffled)
			}
			for _, k := range shuffled {
				// Without the gate equal loads score the same (see above).
				if allowed(allow, k) && tokens[k] == bestTokens &&
					(!gate || score(n, row[k], gate, nf, denom, beta, tokens[k]) == bestScore) {
					best = k
					break
				}
			}
		}

		place(i, best)
	}
	r.eligible = eligible
	r.finish(b)
}

// lowestLoad returns the first of the eligible ranks that allow admits with
// the lowest token load, that load, and how many admitted eligible ranks
// share it; best is -1 if allow admits none.
func lowestLoad(eligible []int, allow []bool, tokens []float64) (best int, lowest float64, ties int) {
	best = -1
	for _, k := range eligible {
		if !allowed(allow, k) {
			continue
		}
		switch t := tokens[k]; {
		case best < 0 || t < lowest:
			best, lowest, ties = k, t, 1
		case t == lowest:
			ties++
		}
	}
	return best, lowest, ties
}

// lowestLoads keeps lowestLoad's answer for all eligible ranks across the
// requests of one decision. Within a decision loads only grow and ranks only
// leave eligibility, so a placement can only take a rank out of the set with
// the lowest load; the set is recomputed once it is empty. With many equal
// loads (idle or equally loaded ranks, where most requests tie) that is one
// scan of the ranks per round of placements instead of one per request.
type lowestLoads struct {
	load  float64 // the lowest load; meaningful while count > 0
	count int     // eligible ranks with that load; 0: not known (the zero value)
	first int     // the first of them in eligible order, while count > 0; -1: not known
}

// get returns the first eligible rank with the lowest load, that load and
// how many eligible ranks have it (-1, 0, 0 without eligible ranks).
func (l *lowestLoads) get(eligible []int, tokens []float64) (first int, load float64, count int) {
	if l.count == 0 {
		l.first, l.load, l.count = lowestLoad(eligible, nil, tokens)
	}
	if l.first < 0 && l.count > 0 {
		for _, k := range eligible {
			if tokens[k] == l.load {
				l.first = k
				break
			}
		}
	}
	return l.first, l.load, l.count
}

// drop notes that rank k, which had the lowest load, no longer has it or
// is no longer eligible.
func (l *lowestLoads) drop(k int) {
	if l.count == 0 {
		return
	}
	l.count--
	if l.first == k {
		l.first = -1
	}
}

// matchRow fills row with request i's match length on every rank, from the
// configured source, and returns the longest (0 for an empty row).
func (r *Router) matchRow(b *batch, i int, row []int) int {
	size := len(row)
	longest := 0
	switch r.cfg.PrefixSource {
	case SourceIndex:
		longest = r.prefix.matchRow(&r.cfg, b, i, row)
	case SourceProbeIndex:
		r.prefix.matchRow(&r.cfg, b, i, row)
		for k := range row {
			row[k] = max(row[k], b.match(i, k, size))
			longest = max(longest, row[k])
		}
	default:
		if b.matches == nil {
			clear(row)
			break
		}
		src := b.matches[i*size : (i+1)*size]
		row = row[:len(src)] // no bounds check per rank below
		for k, m := range src {
			row[k] = int(m)
			longest = max(longest, int(m))
		}
	}
	return longest
}

// placeKV places request i on rank k with the KV-aware bookkeeping: the
// rank's token load grows by the uncached tokens (the raw match, whatever the
// gate said), the index learns the request's blocks.
func (r *Router) placeKV(b *batch, i, k int, row []int, tokens []float64) {
	n := b.reqs[i].Len()
	uncached := max(n-row[k], 0)
	r.place(b, i, k, uncached)
	tokens[k] += float64(uncached)
	r.stats.hitTokens[k] += uint64(min(row[k], n))
	if r.prefix != nil {
		r.prefix.placed(&r.cfg, b, i, k, &r.digest)
	}
}

// demandRank returns the rank demand warmup sends request i to, or -1: when
// the request's prompt family is hot and held by fewer ranks than its share
// of traffic calls for, the eligible rank lacking it with the least token
// load, then the emptiest prefix cache (so that replicas of different
// families spread over all ranks instead of piling on the lowest ones), then
// the fewest requests, then the lowest index.
func (r *Router) demandRank(b *batch, i int, eligible []int, allow []bool, tokens []float64) int {
	fam, want, have, ok := r.prefix.replicaTarget(&r.cfg, b, i)
	if !ok || have >= want {
		return -1
	}
	idx := r.prefix.idx
	best := -1
	for _, k := range eligible {
		if !allowed(allow, k) || idx.Has(k, fam) {
			continue
		}
		if best < 0 || tokens[k] < tokens[best] ||
			(tokens[k] == tokens[best] && (idx.Blocks(k) < idx.Blocks(best) ||
				(idx.Blocks(k) == idx.Blocks(best) && r.count[k] < r.count[best]))) {
			best = k
		}
	}
	return best
}

// score is the reference's cost of putting a request of n tokens on a rank
// that caches match of them and holds tok tokens, evaluated in the same
// order of IEEE operations: (n - m) + β · (tok / denom · n). The explicit
// float64 conversions forbid fused multiply-adds, which would round
// differently from Python.
func score(n, match int, gate bool, nf, denom, beta, tok float64) float64 {
	m := 0
	if gate {
		m = match
	}
	load := float64(tok / denom * nf)
	load = float64(beta * load)
	return float64(n-m) + load
}

// prefixOf returns the tokens the KV-aware policy groups by.
func prefixOf(q *Request) []int32 {
	return q.Tokens[:min(len(q.Tokens), PrefixTokens)]
}

// seedCache holds, for the requests of one decision, the first outputs of
// their random.Random(id) streams. Seeding MT19937 is the dominant cost of the
// tie-break (a chain of ~1,250 dependent multiplies per seed), and it is only
// needed for requests whose best score is tied, so streams are computed on
// demand, several requests at a time along the routing order: the chains of
// independent seeds run side by side at little more than the cost of one
// (four interleaved in portable Go; with AVX2, 32 as four 8-lane vectors for
// a decision's first tie, or 96 as twelve when most ranks tie at once, then
// 96 while most seeded streams get used (64 as eight when no more than 64
// positions are left to seed), 16 as two once few do (one chain's latency
// bounds a single seed and two vectors alike, so the 15 extra come nearly
// free), one at a time once ties are rarer than one in 80 positions).
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
	switch {
	case !c.simd:
	case c.fills > 0 && c.used*80 <= pos:
		width = 1 // under one tie in 80 positions so far: seed just this one
	case lanes <= 16 || c.fills > 0 && c.used*8 < c.seeded:
		// The last few, or ties now and then: two vectors cost about
		// what one seed does.
		width = 16
	case c.fills == 0 && 2*ties >= m && lanes > 32:
		// A first tie among most of the ranks: they are idle or equally
		// loaded, and the requests after it will mostly tie too; width
		// stays the widest.
	case c.fills == 0 || c.used*2 < c.seeded || lanes <= 32:
		width = 32 // the first tie, ties now and then, or 32 lanes are enough
	}
	if width == mtLanes && lanes <= 64 {
		width = 64 // the last few: twelve vectors would seed idle lanes
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
		switch width {
		case 16:
			mtSeed16AVX2(&sl.st[0], &sl.add[0], &c.outs[start], want)
		case 32:
			mtSeed32AVX2(&sl.st[0], &sl.add[0], &c.outs[start], want)
		case 64:
			mtSeed64AVX2(&sl.st[0], &sl.add[0], &c.outs[start], want)
		default:
			mtSeed96AVX2(&sl.st[0], &sl.add[0], &c.outs[start], want)
		}
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
