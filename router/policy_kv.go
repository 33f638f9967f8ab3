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
