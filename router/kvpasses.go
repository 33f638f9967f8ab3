package router

import "slices"

// The parts of a KV-aware decision that every score shares: its scratch,
// the explicit and warmup pass, the soft cap and eligible ranks.

// kvBegin prepares a KV-aware decision: the active request counts, the
// token loads as float64 (the reference's Python floats), a match row, and
// the prefix index's bounds for this call.
func (r *Router) kvBegin(b *batch) (count []int, tokens []float64, row []int) {
	size := r.cfg.DPSize
	count = r.loadCounts(b)
	tokens = slices.Grow(r.tokensF[:0], size)[:size]
	r.tokensF = tokens
	for i := range b.states {
		tokens[i] = float64(b.states[i].NumActiveTokens)
	}
	row = slices.Grow(r.row[:0], size)[:size]
	r.row = row
	if r.prefix != nil {
		r.prefix.begin(&r.cfg, b, &r.digest)
	}
	return count, tokens, row
}

// warming reports whether the cold-start warmup may send this batch's
// requests to ranks not warmed yet: always under WarmupOnce (the
// reference); under WarmupQuiet when no rank reports an active request, so
// that warmup happens before a spike and never adds a cold prefill to a
// loaded engine, or when load starts on a cold engine (see coldStart).
func (r *Router) warming(b *batch) bool {
	if r.cfg.Warmup != WarmupQuiet {
		return true
	}
	active := 0
	for i := range b.states {
		active += b.states[i].NumActiveRequests
	}
	return active == 0 || r.coldStart(b, active)
}

// coldStart reports whether quiet warmup warms every rank at once in this
// decision although the engine is not idle: at most one rank is warmed yet,
// fewer requests are active than there are ranks, and the batch brings a
// request for every rank still pending. Load that starts on a cold engine
// gives no idle decision after its first; without this the first rank would
// hold every prompt and later replicas would each stall the lock step on
// their own. Here the pending ranks compute their prompts side by side, one
// stall, while little else is running. A spike after a quiet period finds
// the ranks warmed by then (or more pending ranks than requests) and is left
// alone.
func (r *Router) coldStart(b *batch, active int) bool {
	size := len(b.states)
	return r.pendingCount >= size-1 && active < size && len(b.reqs) >= r.pendingCount
}

// explicitPass is the first pass of the KV-aware policy, whatever its score:
// in relax order, each request with a target goes there and, while the
// cold-start warmup is warming, each untargeted one to the smallest rank
// not warmed yet (with skipBound, not a turn of a bound conversation), if
// that rank is under the hard cap; place does the placing. It returns the
// other requests, grouped by prompt prefix, longer prompts first.
func (r *Router) explicitPass(b *batch, count []int, skipBound bool, place func(i, k int)) []int {
	rest := r.rest[:0]
	warming := r.warming(b)
	for _, i := range r.relaxSort(b, isStrictTarget) {
		q := &b.reqs[i]
		target := q.TargetRank
		warm := false
		if !q.hasTarget() && warming && r.pendingCount > 0 && !(skipBound && r.bound(q)) {
			target, warm = slices.Index(r.pending, true), true // smallest pending rank
		}
		if target != NoTarget && count[target] < b.maxn {
			place(i, target)
			if warm {
				r.stats.warmup++
			}
			if r.rc != nil {
				r.rc.placed(i, explicitOr(warm, ReasonColdStartWarmup), 0)
			}
			if r.pendingCount > 0 && r.pending[target] {
				r.pending[target] = false
				r.pendingCount--
				r.digest = fold(r.digest, tagWarmed, uint64(target), 0)
			}
			continue
		}
		rest = append(rest, i)
	}
	r.rest = rest
	r.groups.sort(b.reqs, rest)
	return rest
}

// scoring returns, for the requests left after the explicit pass, the soft
// cap (also stored as the result's Expected), the ranks under it, and
// whether demand warmup may replicate in this decision.
//
// Demand warmup replicates only while the engine is quiet: at most one
// request per rank on average, counting this batch. Computing a long
// shared prefix stalls every rank of an ADP engine (they step in
// lockstep), so replicas are made before a spike, not during it; under
// load the score spreads a family by itself as its ranks fill up.
func (r *Router) scoring(b *batch, count []int, rest []int) (expected int, eligible []int, quiet bool) {
	expected = softCap(count, len(rest), r.cfg.FairShareMultiplier, b.maxn)
	b.res.Expected = expected
	eligible = r.eligible[:0]
	for k := range count {
		if count[k] < expected {
			eligible = append(eligible, k)
		}
	}
	if r.cfg.Warmup == WarmupDemand {
		total := len(rest)
		for _, c := range count {
			total += c
		}
		quiet = total <= len(count)
	}
	return expected, eligible, quiet
}
