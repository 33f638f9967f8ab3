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
// loaded engine, or when load starts on a cold engine.
//
// Once a decision has seen the engine loaded (its ranks reporting at least
// dp_size active requests in all, or requests arriving while a rank the
// decision before warmed computes its prompt), an idle decision warms only
// when it brings two requests or more (and, of a burst whose prompt
// families some rank holds, only a new conversation's warms: see
// heldBurst, which holds such a burst before that too once half the ranks
// are warmed, if warming would at least double what it computes). On an
// engine that has carried load,
// an idle decision is a gap between bursts, and a lone request sent to a
// pending rank computes its whole prompt there, where a rank holding its
// prefix would compute a few blocks, while the rest of its burst, arriving
// milliseconds later, waits for that iteration (docs/routing-quality.md,
// "Bursts after a quiet gap"). Requests that arrive together share the
// stall. A quiet period before the first load warms with every request; in
// one, no request arrives during a warming stall (one decision per engine
// iteration, see docs/ROUTING.md). Arrivals during it show steady traffic
// on an engine fast enough to idle between requests, which never reports
// dp_size active: there each idle decision's warming stalled the requests
// arriving during it (one or two tenants at 20 req/s on the simulator's
// engine with a 1 ms fixed iteration time: 1.22-1.30 times the best
// reference's TTFT p99 without this, 0.98-1.02 with it).
//
// Before the engine has carried load, on nearIdleRanks ranks or more, a
// decision while it carries a single request warms too, as an idle one
// does (a family takes its share of the ranks, see quietDefers), but not
// with a request of a conversation (nearIdle is then true). Such an engine
// is as good as idle: a warming stall delays the one request and what
// arrives during it, and an arrival during it marks the engine loaded. A
// quiet period that brings a request every half second, each running about
// as long, leaves the engine rarely idle, and without this its ranks
// stayed cold until a spike (the drawn grid's case=129, 32 ranks: 3.1-3.2
// times the best reference's TTFT p99, 1.08 with it). A conversation's
// first turn is left to the score, as in a light start: its warming stall
// can draw an arrival that marks the engine loaded before the quiet
// period's other prompts come, and then none of them warms a rank (a
// tenant spike beside conversations: 0.36 times the best reference's p99
// became 1.82). On fewer ranks one request is a larger part of the engine
// and the light start (see lightStart) warms half of them anyway; on 2, a
// single prompt family's share asks for the one rank that holds it, and
// warming near idle kept every request there (a shared prompt at 20 req/s:
// 1.26 times the best reference's TTFT p99). A cold start (see coldStart)
// comes first.
//
// Then spread is true when the decision warms every pending rank at once
// (see coldStart: the pending ranks are shared out among the batch's prompt
// families, see warmShare), and light is true when load builds up one
// decision at a time (see lightStart: requests of a conversation are left
// to the score).
func (r *Router) warming(b *batch) (warming, spread, light, nearIdle bool) {
	if r.cfg.Warmup != WarmupQuiet {
		return true, false, false, false
	}
	stalled := r.warmedLast && len(b.reqs) > 0
	r.setWarmedLast(false)
	active := 0
	for i := range b.states {
		active += b.states[i].NumActiveRequests
	}
	switch {
	case active == 0:
		r.setBusyFor(0)
	case r.busyFor <= lightStartRise:
		r.setBusyFor(r.busyFor + 1)
	}
	if (active >= len(b.states) || stalled) && !r.loaded {
		r.loaded = true
		r.digest = fold(r.digest, tagLoaded, 1, 0)
	}
	switch {
	case active == 0:
		return !r.loaded || len(b.reqs) >= 2, false, false, false
	case r.coldStart(b, active):
		return true, true, false, false
	case active == 1 && !r.loaded && len(b.states) >= nearIdleRanks:
		return true, false, false, true
	case r.lightStart(b, active):
		return true, false, true, false
	}
	return false, false, false, false
}

// coldStart reports whether quiet warmup warms the pending ranks in this
// decision although the engine is not idle: at most one rank is warmed yet,
// fewer requests are active than there are ranks, and the batch either
// brings a request for every rank still pending or brings two requests or
// more, one of them of a prompt family no rank holds (newFamily). Load that
// starts on a cold engine gives no idle decision after its first; without
// this the first rank would hold every prompt and later replicas would each
// stall the lock step on their own. Here the pending ranks compute their
// prompts side by side, one stall, while little else is running; a new
// family's prompt is computed whole somewhere anyway, so that decision
// stalls the lock step already. A spike after a quiet period finds the
// ranks warmed by then (or more pending ranks than requests, and its
// families held) and is left alone.
func (r *Router) coldStart(b *batch, active int) bool {
	size := len(b.states)
	if r.pendingCount < size-1 || active >= size {
		return false
	}
	return len(b.reqs) >= r.pendingCount || (len(b.reqs) >= 2 && r.newFamily(b))
}

// lightStart reports whether quiet warmup warms pending ranks in this
// decision while load builds up on a cold engine one decision at a time:
// fewer requests are active than there are ranks, and fewer ranks are
// warmed than lightStartRanks and than half the ranks (rounded up), or,
// with at most half the ranks warmed (fewer than half when the prefix
// index finds more holders than the warmup warmed, see leastHeld), the
// decision brings many requests (lightStartBatch) while load builds up
// from idle or as a spike reaching a quiet engine (below). Each such
// decision warms a rank with each of its requests that is not of a
// conversation (a new conversation is balanced over the ranks by the
// score, and its later turns follow it).
//
// Under steady load no decision is idle after the first, so without this
// the prompt that every request shares (one application's system prompt)
// stays on the few ranks that took it first, whose requests then meet in
// one iteration more often than on more ranks; a replica made later, under
// load, is a lock-step stall of its own. Here ranks are warmed while little
// else runs, one stall per decision. The bound keeps those stalls few, as
// each delays the requests arriving during it: warming every rank this
// way, as the reference does, makes a dozen requests of a minute's traffic
// slow on some arrival draws. The other ranks are warmed by the next idle
// decision, or take the prompt when its holders fill up.
//
// Past the bound, while at most half the ranks are warmed, a decision that
// brings a request for at least lightStartBatch of the ranks still warms
// while load builds up from idle or as a spike reaching a quiet engine,
// unless one of its requests is of a prompt family no rank holds or longer
// than an iteration's prefill budget: its requests compute their prompts
// on pending ranks side by side, one stall for several ranks, and the
// prompt then runs on every rank instead of half of them. Load builds up
// from idle in the first lightStartRise decisions after one that found no
// request active, with the ranks carrying an active request per warmed
// rank: at high rates the holders would not keep up (4 tenants at 80
// requests per second on 8 ranks: TTFT p99 0.90-0.92 times the best
// reference's, 1.05 without it). A spike reaching a quiet engine brings two
// requests per rank while fewer requests are active than ranks are warmed,
// whenever it comes: replicas made one by one under its load would stall
// it again and again (on 32 ranks, a 3000-token prompt whose spike brought
// 69 requests while 2 were active: 2.07 times the best reference's TTFT
// p99 without it). Later in a busy period the holders have been carrying
// its load, and a decision that brings many requests is bursts meeting:
// every request of it would wait for the prompts computed whole, which the
// holders serve sooner (the drawn grid's case=130, 17 requests of a
// 2048-token prompt on 16 ranks: TTFT p99 1.77 times the best reference's,
// 0.79 left to the holders). With more than half the ranks warmed, the
// holders carry less than twice their share, and a decision that brings
// many requests is more often the arrivals of the stall just made (a light
// start's first decision can warm most ranks at once): another stall then
// delays them all again (on an engine whose prefill is twice as slow as
// the grid's, one tenant at 20 req/s: TTFT p99 2.47x the best
// reference's). A batch with a new family is left to the score, as a burst
// after a quiet gap: warming pending ranks with its other requests made
// those compute whole prompts beside the new family's. So is a batch of
// long prompts: each stalls for several iterations, and on pending ranks
// they go where the score would not balance them (a Mooncake conversation
// trace replayed past the engine's capacity, its prompts 11-18k tokens on
// average: TTFT p99 16.7 s against 9.5 s). docs/routing-quality.md has the
// measurements.
func (r *Router) lightStart(b *batch, active int) bool {
	size := r.cfg.DPSize
	if active >= size || r.pendingCount == 0 {
		return false
	}
	warmed := size - r.pendingCount
	held := max(warmed, r.leastHeld(b))
	if held < min((size+1)/2, lightStartRanks) {
		return true
	}
	rising := active >= warmed && r.busyFor <= lightStartRise
	spike := len(b.reqs) >= 2*size && active < warmed
	half := 2*held <= size
	if held > warmed {
		half = 2*held < size
	}
	return half && len(b.reqs) >= lightStartBatch(size) && (rising || spike) &&
		!r.newFamily(b) && r.withinIteration(b)
}

// leastHeld returns how many ranks the prefix index expects to hold the
// least held prompt family (first block) among the batch's untargeted
// requests not of a conversation; 0 when there is none, or no index.
//
// lightStart counts that many ranks as warmed at least, for its bound and
// its half of the ranks (not for the load it compares with the warmed
// ranks: there more warmed ranks would read a decision as a spike on a
// quiet engine more often, and warm more). Its pending ranks are those
// the warmup has sent no request to, but the score sends prompts to ranks
// too, and past the light start's first decisions a
// prompt can be on most ranks while most are pending: one 6144-token
// prompt in bursts on 32 ranks (the drawn grid's case=101, its arrivals
// ten times as long, after-iteration reuse) was held by 24 ranks 3.5 s in,
// 5 of them warmed by the warmup, and a light start sent a burst of 34 to
// the 27 pending ranks, 8 of them cold: all 34, and 8 arriving meanwhile,
// waited 263 ms, and those were the TTFT p99 of its 8,702 requests (9.3
// times the best reference's; 1.11 times with this). The least held
// family decides: a batch with a family held by few ranks still warms
// (counting every rank that holds any prompt instead, or taking the score's
// placements off the pending ranks, left the grid's 8 tenants at Zipf 1.4
// in bursts, seed 12, a popular tenant on few ranks and the pending ones
// holding other tenants, at 1.46 times the best reference's TTFT p99
// instead of 0.99).
//
// Holders the index finds past the warmup's own count must be fewer than
// half the ranks, not at most half: they took the prompt under load, so
// they carry at least their share of it, and warming the other half
// stalls a burst for ranks the holders keep up without. The same case
// under on-schedule reuse had exactly 16 of its 32 ranks holding the
// prompt, and a light start warmed the other 16 with a burst: TTFT p99 258
// ms, 9.3 times the best reference's; 42 ms (1.52 times) with this. Where
// the warmup itself warmed half the ranks, its count stays at most half:
// made strict there too, one tenant at four times the grid's load (seed 3)
// went from 1.005 to 1.057 times the best reference's TTFT p99.
func (r *Router) leastHeld(b *batch) int {
	if r.prefix == nil {
		return 0
	}
	least := -1
	for i := range b.reqs {
		if b.reqs[i].hasTarget() || b.reqs[i].ConversationID != "" {
			continue
		}
		if fam, ok := r.prefix.family(&r.cfg, b, i); ok {
			if n := r.prefix.idx.Replicas(fam); least < 0 || n < least {
				least = n
			}
		}
	}
	return max(least, 0)
}

// withinIteration reports whether every untargeted request of the batch
// computes its whole prompt within one iteration's prefill budget
// (TTFTDrainTokens): warming a rank with it is then one lock-step stall.
func (r *Router) withinIteration(b *batch) bool {
	for i := range b.reqs {
		if !b.reqs[i].hasTarget() && b.reqs[i].Len() > r.cfg.TTFTDrainTokens {
			return false
		}
	}
	return true
}

// lightStartRanks bounds how many ranks a light start (lightStart) warms
// one decision at a time. Four holders take a prompt's steady traffic with
// few of its requests meeting in one iteration; each further one costs a
// stall. The value was chosen on the simulator's evaluation grid, three
// shifts of its seeds and the held-out sweeps (docs/routing-quality.md).
const lightStartRanks = 4

// nearIdleRanks is the fewest ranks on which a decision while the engine
// carries a single request, before its first load, warms as an idle one
// does (see warming). On 4 ranks one request is a quarter of the engine,
// a warming stall there meets load that is building, and the light start
// already warms half the ranks one decision at a time: warming near idle
// on 4 ranks too took a mixed trace's 4-rank cells from 0.66-0.71 times
// the best reference's TTFT p99 to 0.84-0.90, and a tenant spike's beside
// long outputs from 2.24 to 3.46.
const nearIdleRanks = 8

// lightStartBatch is how many requests a decision brings for a light start
// to warm past lightStartRanks (with the load lightStart asks for): three
// quarters of the ranks, rounded up.
// With four on 8 ranks (half of them), bursts of a few requests warmed
// ranks at low rates too, and their stalls made more cells miss than the
// rule fixed (docs/routing-quality.md).
func lightStartBatch(size int) int { return (3*size + 3) / 4 }

// lightStartRise is how many decisions after one that found no request
// active a light start still takes for load building up from idle (see
// lightStart). On the evaluation grids the steady high rates that warming
// served showed within 3 decisions of an idle one, and the bursts meeting
// that it hurt came 165 or more into a busy period (one cell where it
// served came 111 in: 1.02 times the best reference's TTFT p99 became 1.08
// without it).
const lightStartRise = 8

// newFamily reports whether an untargeted request of the batch is of a
// prompt family (first block) that the prefix index shows on no rank.
func (r *Router) newFamily(b *batch) bool {
	if r.prefix == nil {
		return false
	}
	for i := range b.reqs {
		if b.reqs[i].hasTarget() {
			continue
		}
		if fam, ok := r.prefix.family(&r.cfg, b, i); ok && r.prefix.idx.Replicas(fam) == 0 {
			return true
		}
	}
	return false
}

// warmShare returns how many ranks one prompt family may hold before a
// cold-start decision (coldStart) warms another rank for it while other
// families wait: ceil(dp_size / families), counting the distinct families
// (first block hashes) of the batch's untargeted requests; 0, no bound,
// without the prefix index or any such family. A cold engine does not know
// yet which family its traffic needs most, and the batch that warms it is a
// draw: in arrival order one family could take most ranks (five of eight in
// a measured case) while the busiest family ran on two. Requests held back
// by the share take the ranks still pending afterwards (warmHeld), so every
// pending rank is still warmed in this one stall.
func (r *Router) warmShare(b *batch) int {
	if r.prefix == nil {
		return 0
	}
	fams := r.fams[:0]
	for i := range b.reqs {
		if b.reqs[i].hasTarget() {
			continue
		}
		if fam, ok := r.prefix.family(&r.cfg, b, i); ok {
			fams = append(fams, fam)
		}
	}
	slices.Sort(fams)
	fams = slices.Compact(fams)
	r.fams = fams
	if len(fams) == 0 {
		return 0
	}
	return (len(b.states) + len(fams) - 1) / len(fams)
}

// quietDefers reports whether quiet warmup, in an idle decision, leaves
// request i to the score instead of a pending rank: the decision brings it
// alone, it is not of a conversation, its prompt family (first block) is held
// by some rank already, and the traffic seen does not call for another
// replica yet: the demand window holds fewer than quietSampleRequests
// requests, or the family's share of them asks for no more ranks than hold
// it (as demand warmup's target counts them, without its
// WarmupMinRequests: on 32 ranks a quiet minute shows most tenants once or
// twice, and each still warms a rank of its own).
//
// A request of a family no rank holds computes its whole prompt wherever it
// goes, so warming a pending rank with it costs nothing. One whose family a
// rank holds computes there the prefix a holder has ready: one more slow
// first token and the prefix's prefill again, a bet that a spike will need
// the replica. Taken with the first requests that come, that bet went to
// the few families that came first: six tenants at Zipf 1.1 on 2 and 3
// ranks put the most popular tenant on every rank and left the spike's
// other tenants to share the ranks it did not need, and on 4 ranks
// replicas no spike used cost up to 1.14 times the prefill. The share
// decides instead, once a few requests show it; a family that is all the
// traffic still warms every rank. Requests that arrive together warm side
// by side (one stall), and a new conversation warms a pending rank: its
// later turns follow it there. Without the demand window (score "ttft"
// keeps one; the reference score does not, and its Stats report no hot
// groups) every idle request warms.
// docs/routing-quality.md has the measurements.
func (r *Router) quietDefers(b *batch, i int) bool {
	p := r.prefix
	if p == nil || p.window == nil || len(b.reqs) != 1 || b.reqs[i].ConversationID != "" {
		return false
	}
	fam, ok := p.family(&r.cfg, b, i)
	if !ok {
		return false
	}
	have := p.idx.Replicas(fam)
	if have == 0 {
		return false
	}
	if p.wfill < quietSampleRequests {
		return true
	}
	_, want := p.target(&r.cfg, p.counts[fam])
	return have >= want
}

// heldBurst reports whether quiet warmup, in an idle decision, leaves the
// requests of this burst to the score instead of pending ranks, but for new
// conversations': the decision brings two requests or more (a burst after a
// gap), the prefix index shows every untargeted request's prompt family
// (first block) on some rank (no newFamily), and either a decision has seen
// the engine loaded (see warming) or, before that, half the ranks or more
// are warmed and warming would at least double what the burst computes
// (heldMostly).
//
// Every rank steps in lock step with the ones that warm, so the whole burst
// waits while its warming requests compute their prompts, where holders
// would compute a few blocks each. A request of a family no rank holds
// computes its whole prompt wherever it goes: that decision stalls the lock
// step anyway, and its other requests warm pending ranks within the same
// stall. A new conversation warms as before (its later turns follow it).
// Without the index the router cannot tell, and the burst warms. On 16
// ranks, a 6144-token prompt every request shares, in bursts of 8 at one
// request per second per rank, one burst warmed the 7 ranks still pending,
// 260 ms for each of its requests: 5.86 times the best reference's TTFT p99
// and 1.19 times its prefill; 0.79 and 1.00 times with this
// (docs/routing-quality.md).
//
// Before the first load a spike still finds the other half of the ranks
// warming one by one with a quiet period's lone requests (see
// quietDefers), and a burst that warms them makes all its requests wait
// for replicas the traffic may never need. On 16 ranks, one 2048-token
// prompt in bursts of 16 at one request per second per rank, each burst
// finding the engine idle: the first burst computed the prompt on 10
// ranks, and the next one warmed the other 6, which no request needed,
// 1.11 times the prefill of the KV-aware reference at its TTFT p99; with
// this, 1.00 times (the drawn grid's case=132). A burst of long prompts
// whose held prefixes are a small part of them computes nearly as much on
// holders: its warming costs little, and the ranks it warms share the load
// to come (a Mooncake conversation slice replayed twice as fast on 1k-block
// pools, whose first burst of 7 shares 3.6k of its 70k tokens: TTFT p99
// 1.18 times the best reference's when that burst was held, 0.90 warmed).
func (r *Router) heldBurst(b *batch) bool {
	if r.prefix == nil || len(b.reqs) < 2 || !r.loaded && 2*r.pendingCount > len(b.states) || r.newFamily(b) {
		return false
	}
	return r.loaded || r.heldMostly(b)
}

// heldMostly reports whether the untargeted requests of the batch would
// compute, each on the rank holding its longest prefix, at most as many
// tokens as those prefixes hold: sent to pending ranks, which hold none,
// they would compute twice that or more. It fills the match row scratch,
// which the score refills per request.
func (r *Router) heldMostly(b *batch) bool {
	var held, rest int
	for i := range b.reqs {
		if b.reqs[i].hasTarget() {
			continue
		}
		l := r.matchRow(b, i, r.row)
		held += l
		rest += max(b.reqs[i].Len()-l, 0)
	}
	return held >= rest
}

// quietSampleRequests is how many routed requests the demand window must
// hold before quiet warmup lets a family's share of them warm another rank
// for it (quietDefers). The first few requests of a workload of several
// tenants are often of one tenant (its share then reads 1), and the ranks
// they would warm are those the other tenants' first requests take at no
// cost. Chosen on the simulator's tenant spikes (docs/routing-quality.md).
const quietSampleRequests = 4

// familyRanks returns how many ranks the prefix index says hold request i's
// prompt family (its first block), or 0 for a prompt shorter than a block.
func (r *Router) familyRanks(b *batch, i int) int {
	if fam, ok := r.prefix.family(&r.cfg, b, i); ok {
		return r.prefix.idx.Replicas(fam)
	}
	return 0
}

// explicitPass is the first pass of the KV-aware policy, whatever its score:
// in relax order, each request with a target goes there and, while the
// cold-start warmup is warming, each untargeted one to the smallest rank
// not warmed yet (with ttft, not a turn of a bound conversation; in a light
// start, see lightStart, or a decision near idle, see warming, no request
// of a conversation), if that rank is under the hard cap; place does the
// placing. It returns the other requests, grouped by prompt prefix, longer
// prompts first within a group; the groups in the reference's order (by
// prefix) or, with ttft, the group with the longest prompt first (see
// routeTTFT).
func (r *Router) explicitPass(b *batch, count []int, ttft bool, place func(i, k int)) []int {
	rest := r.rest[:0]
	warming, spread, light, nearIdle := r.warming(b)
	idle := r.cfg.Warmup == WarmupQuiet && !spread && !light
	convs := !light && !nearIdle // a conversation's request may warm
	share := 0
	if spread {
		share = r.warmShare(b)
	}
	burst := idle && warming && r.pendingCount > 0 && r.heldBurst(b) // left to the score, see heldBurst
	held := r.held[:0]
	for _, i := range r.relaxSort(b, isStrictTarget) {
		q := &b.reqs[i]
		target := q.TargetRank
		warm := false
		if !q.hasTarget() && warming && r.pendingCount > 0 && !(ttft && r.bound(q)) && (convs || q.ConversationID == "") {
			if idle && (r.quietDefers(b, i) || burst && q.ConversationID == "") {
				rest = append(rest, i) // scored: its family needs no other rank yet
				continue
			}
			if share > 0 && r.familyRanks(b, i) >= share {
				held = append(held, i) // its family has its share: later
			} else {
				target, warm = slices.Index(r.pending, true), true // smallest pending rank
			}
		}
		if target != NoTarget && count[target] < b.maxn {
			r.placeExplicit(i, target, warm, place)
			continue
		}
		rest = append(rest, i)
	}
	r.held = held
	if len(held) > 0 {
		rest = r.warmHeld(b, count, rest, held, place)
	}
	r.rest = rest
	r.groups.sort(b.reqs, rest, ttft)
	return rest
}

// warmHeld gives the ranks still pending after the first pass to the
// requests warmShare held back, in relax order, and returns rest without
// the requests it placed.
func (r *Router) warmHeld(b *batch, count []int, rest, held []int, place func(i, k int)) []int {
	n := 0
	for _, i := range held {
		k := slices.Index(r.pending, true)
		if k < 0 || count[k] >= b.maxn {
			break
		}
		r.placeExplicit(i, k, true, place)
		n++
	}
	// held is a subsequence of rest, both in relax order; drop its first n.
	placed := held[:n]
	out := rest[:0]
	for _, i := range rest {
		if len(placed) > 0 && placed[0] == i {
			placed = placed[1:]
			continue
		}
		out = append(out, i)
	}
	return out
}

// placeExplicit places request i on rank k in the explicit pass (warm: as
// the cold-start warmup), counting it and clearing k's pending warmup.
func (r *Router) placeExplicit(i, k int, warm bool, place func(i, k int)) {
	place(i, k)
	if warm {
		r.stats.warmup++
		if r.cfg.Warmup == WarmupQuiet && !r.loaded {
			r.setWarmedLast(true) // read only until the engine is loaded
		}
	}
	if r.rc != nil {
		r.rc.placed(i, explicitOr(warm, ReasonColdStartWarmup), 0)
	}
	if r.pendingCount > 0 && r.pending[k] {
		r.pending[k] = false
		r.pendingCount--
		r.digest = fold(r.digest, tagWarmed, uint64(k), 0)
	}
}

// setWarmedLast records whether the last decision warmed a rank (see
// warming), folding each change into the digest.
func (r *Router) setWarmedLast(v bool) {
	if r.warmedLast != v {
		r.warmedLast = v
		r.digest = fold(r.digest, tagWarmStall, b2u(v), 0)
	}
}

// setBusyFor records for how many decisions the engine has carried
// requests (see warming), folding each change into the digest.
func (r *Router) setBusyFor(v int) {
	if r.busyFor != v {
		r.busyFor = v
		r.digest = fold(r.digest, tagBusy, uint64(v), 0)
	}
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
