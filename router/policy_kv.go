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
	r.seeds.reset(len(rest))
	var l kvLoop // on the stack: a decision allocates nothing
	l.init(b, rest, count, tokens, row, expected, eligible)

	for pos, i := range rest {
		if len(l.eligible) == 0 {
			break // every rank is at the soft cap: the rest stay unassigned
		}
		q := &b.reqs[i]
		rowMax := r.matchRow(b, i, row)
		allow := r.room.allow(l.eligible, q, row)
		if quiet && !q.Strict {
			if k := r.demandRank(b, i, l.eligible, allow, tokens); k >= 0 {
				r.stats.warmup++
				r.stats.demand++
				if r.rc != nil {
					r.rc.placed(i, ReasonDemandWarmup, len(l.eligible))
				}
				l.place(r, b, i, k)
				continue
			}
		}
		l.place(r, b, i, l.choose(r, b, pos, i, rowMax, allow))
	}
	r.eligible = l.eligible
	r.finish(b)
}

// kvLoop is the state routeKVAware keeps from one request to the next: the
// ranks under the soft cap, the running sum of their loads and the set of
// those with the lowest load, each updated as requests are placed instead
// of recomputed (an invariants build rechecks them after every placement).
// It holds no pointer to the router or the batch (its methods take them),
// so that the batch stays on RouteInto's stack.
type kvLoop struct {
	rest     []int // the requests to score, in routing order
	count    []int
	tokens   []float64
	row      []int // the current request's match per rank
	expected int   // the soft cap
	eligible []int // the ranks under it
	// The reference sums the eligible ranks' token loads afresh for every
	// request. While every load and the whole batch's tokens stay below
	// 2^53 those sums are of integers, exact in any order, so one running
	// sum (less ranks leaving, plus tokens placed) equals them bit for bit
	// (running). Above that the sum is recomputed in the reference's order.
	running bool
	eligSum float64
	lows    lowestLoads
	initial []int // the eligible ranks when scoring began (invariants builds)
	// held is the match the KV room was judged with where it is not row
	// (the ttft score's heldRow), for the receipt; nil: row.
	held []int
}

func (l *kvLoop) init(b *batch, rest, count []int, tokens []float64, row []int, expected int, eligible []int) {
	*l = kvLoop{rest: rest, count: count, tokens: tokens, row: row, expected: expected, eligible: eligible}
	bound := 0.0
	for _, t := range tokens {
		bound += t
	}
	for _, i := range rest {
		bound += float64(b.reqs[i].Len())
	}
	l.running = bound < 1<<53
	for _, k := range eligible {
		l.eligSum += tokens[k]
	}
	if invariants.Enabled {
		l.initial = slices.Clone(eligible)
	}
}

// place puts request i on rank k, keeping eligible, eligSum and lows.
func (l *kvLoop) place(r *Router, b *batch, i, k int) {
	before := l.tokens[k]
	r.placeKV(b, i, k, l.row, l.tokens)
	l.eligSum += l.tokens[k] - before
	leaves := l.count[k] >= l.expected
	if leaves {
		l.eligible = slices.DeleteFunc(l.eligible, func(e int) bool { return e == k })
		l.eligSum -= l.tokens[k]
	}
	if before == l.lows.load && (l.tokens[k] != before || leaves) {
		l.lows.drop(k)
	}
	if invariants.Enabled {
		checkKVLoop(l.initial, l.eligible, l.count, l.expected, l.tokens, l.running, l.eligSum, &l.lows)
	}
}

// affinity reports whether the reference's score is cache-affine for a
// prompt of n tokens whose longest match on a candidate rank is maxMatch:
// the match rate above Config.MatchRateThreshold turns the score's uncached
// term on.
func (r *Router) affinity(maxMatch, n int) bool {
	return float64(maxMatch)/float64(max(n, 1)) > r.cfg.MatchRateThreshold
}

// choose returns the rank for request i at routing position pos, whose
// longest match on any rank is rowMax: the eligible rank allow admits with
// the lowest (score, tokens), a tie broken by random.Random(id).shuffle of
// the eligible ranks.
func (l *kvLoop) choose(r *Router, b *batch, pos, i, rowMax int, allow []bool) int {
	row, tokens, eligible := l.row, l.tokens, l.eligible
	n := b.reqs[i].Len()
	nf := float64(n)
	beta := r.cfg.LoadBalanceWeight
	sum := l.eligSum
	if !l.running {
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
	gate := r.affinity(maxMatch, n)

	// The lowest (score, tokens) pair, and how many ranks share it.
	var bestScore, bestTokens float64
	best, ties := -1, 0
	if !gate {
		// Without cache affinity the score is n + β·(tokens/denom·n):
		// each operation is monotone (β, n >= 0, denom > 0), so a lower
		// load never scores higher and equal loads score the same. The
		// lowest pair is the first rank with the lowest load, its ties the
		// ranks with that load: no divisions.
		if allow == nil {
			best, bestTokens, ties = l.lows.get(eligible, tokens)
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
			// The load term is >= 0 and rounding is monotone, so a score
			// is never below its uncached tokens: a rank whose uncached
			// tokens exceed the best score so far can neither win nor tie,
			// and its division is skipped.
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
	// best is -1 only when allow admits none of eligible, which the ttft
	// score's referenceRank can ask (its candidates are a subset of those
	// the room was judged over): it then places by its prediction, which
	// records the receipt.
	if r.rc != nil && best >= 0 {
		r.rc.scored(r, b, i, eligible, allow, row, l.held, tokens, denom, gate, maxMatch, ties)
	}
	if ties <= 1 {
		return best
	}
	// The first tied rank in random.Random(id).shuffle(eligible).
	shuffled := append(r.shuffled[:0], eligible...)
	r.shuffled = shuffled
	st := r.seeds.stream(pos, l.rest, b.reqs, len(eligible), ties)
	st.shuffle(shuffled)
	if r.rc != nil {
		r.rc.shuffle(i, shuffled)
	}
	for _, k := range shuffled {
		// Without the gate equal loads score the same (see above).
		if allowed(allow, k) && tokens[k] == bestTokens &&
			(!gate || score(n, row[k], gate, nf, denom, beta, tokens[k]) == bestScore) {
			return k
		}
	}
	return best
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
