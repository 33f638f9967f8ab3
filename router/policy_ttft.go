package router

import (
	"cmp"
	"slices"

	"github.com/adprouter/adprouter/router/internal/invariants"
)

// The predicted-TTFT score (Config.Score = ScoreTTFT) of the KV-aware policy.
//
// An ADP engine steps its ranks in lock step: every iteration each rank
// computes up to about TTFTDrainTokens tokens of the prefill queued on it,
// first come, first served, and the iteration lasts as long as the busiest
// rank's share. The score predicts each request's wait on each rank from
// that model (see ttftCost) and departs from the least-prefill placement only
// when the prediction says it saves more than the work it adds. It differs
// from the reference's score (uncached tokens plus a relative load term) in
// these ways:
//
//   - The order: the reference groups a decision's requests by their first
//     PrefixTokens tokens, longer prompts first within a group, and orders
//     the groups by those tokens, which says nothing about their size. Here
//     the group with the longest prompt goes first (then the reference's
//     order): long prompts are placed while every queue is still short and
//     the short ones fill in around them, as longest-first list scheduling
//     balances a set of jobs (unrelated long prompts in one burst were
//     placed in the order of their first tokens, one of them behind
//     another). A rank whose share of the decision spills past one
//     iteration is then handed its share shortest first, while its KV
//     pool has room to spare (see shortestFirst): the short prompts end in
//     the first iterations instead of waiting for the long ones.
//   - Load is queued prefill, in tokens, not relative token load: a rank
//     whose earlier requests have finished their prefill is free for the
//     next one however many of them still decode. The router keeps, per
//     rank, the uncached tokens it placed there, drains them by
//     TTFTDrainTokens per routing call (one call per iteration with new
//     requests) and caps them by the rank's reported NumActiveTokens (an
//     upper bound: the uncached tokens of its active requests).
//   - The wait is counted in iterations: a request that brings its rank's
//     queue to t tokens waits ceil(t/drain) iterations, the last as long as
//     the larger of its remainder and the busiest rank's share. A rank whose
//     queue ends within the iteration the busiest rank fills anyway is as
//     fast as an idle one.
//   - Work no rank would otherwise do is a cost: the tokens a request
//     computes on a rank beyond the least any candidate computes (a prefix
//     cached elsewhere, or in flight elsewhere, computed again), less a
//     block, are added to its prediction. It takes GPU time and, in lock
//     step, lengthens other ranks' iterations too. A request leaves the rank
//     that holds its prefix (its conversation's context, a shared system
//     prompt, a sibling's prompt in flight) only for a wait shorter by more
//     than what it would compute again.
//   - So is lengthening the lock step: half of what a rank's share of the
//     next iteration would pass the busiest rank's by is added too. Every
//     request whose prefill ends in that iteration waits as much longer,
//     which the request's own wait does not show.
//   - An in-flight prefix — in the router's index but not yet in the probed
//     match lengths, or placed earlier in this batch — counts as cached
//     only when the engine reuses blocks as soon as they are scheduled
//     (EngineReuse = ReuseOnSchedule). Under ReuseAfterIteration
//     (TensorRT-LLM) a request that starts beside the one computing its
//     prefix computes it again, so siblings and in-flight follow-ups spread
//     instead of piling onto the rank that cannot serve them yet.
//   - A prompt family that needs another rank is not charged for being
//     computed again where that costs no other request time: when the
//     family's share of recent traffic (the demand window, WarmupWindow
//     requests, families of at least WarmupMinRequests), applied to the
//     active requests, exceeds what the ranks holding it take at the fair
//     soft cap, and the rank's queue with the request ends within the
//     busiest rank's share of the next iteration anyway, the recompute
//     charge is waived there (see ttftCost.at), and among the ties a rank
//     that would compute it again — a new holder — wins. Replicas are
//     then made while the lock step waits anyway, not by a stall of their
//     own. So, once per decision, for a family that has outgrown holders
//     which set the lock step (see outgrown): more than a fair share of
//     the active requests per holder, not the soft cap's. The charge is
//     waived too, wherever the queue ends, for a request one iteration
//     computes, on a rank holding at most half as many requests as each
//     holder of a family whose holders hold half their request slots or
//     more (see slotsFilling): the slots fill with decoding the
//     prediction does not see, and a family replicated only once its
//     holders are full is replicated all at once, under load.
//   - While the router ramps up (fewer than ttftRampRequests requests per
//     rank routed, and its demand window not yet full) under load (more
//     than ttftRampLoad active requests per rank), the first request of a
//     decision whose family needs another rank and is held by fewer than
//     ttftRampHolders ranks, and whose prompt one
//     iteration computes (ttft_drain_tokens), goes to the
//     eligible rank not holding it with the least prefill queued (a demand
//     warmup placement): one stall, shared by the family's other requests
//     of the decision, which the rule above lets follow onto further new
//     holders. How many ranks hold a popular prompt is decided in the
//     first seconds of load; made later, each replica would be a stall of
//     its own. The decision after one that made such a replica makes none:
//     its requests arrived during the stall, and a second stall in a row
//     would double their wait (on 32 ranks, three replicas in three
//     decisions of 6-13 requests each took six tenants' TTFT p99 from 0.98
//     to 1.16 times the best reference's: the drawn grid's case=146).
//   - A request's homes stay candidates past the soft cap: the soft cap
//     counts requests, most of which only decode. Its conversation's rank
//     does up to the hard cap; else every rank that computed the longest
//     prefix of it does, up to twice the soft cap of a fair share and, past
//     half its request slots, half the active requests (ttftHomeCap),
//     unless a rank under the soft cap computed more. A rank under the
//     soft cap that computed as much, often a replica just made, would
//     otherwise take every request of a popular family that its other
//     holders, at the soft cap, leave, and its iteration would set every
//     rank's (a six-tenant spike on 32 ranks: one such replica took 17 of
//     a decision's 65 requests, 2060 tokens to compute in one iteration,
//     and the TTFT p99 was 193 ms; 163 ms with the holders sharing them;
//     docs/routing-quality.md).
//   - A new conversation goes, among the ranks where it would wait no longer
//     than computing its whole prompt on an idle rank, to one with the
//     fewest requests and, among those, the one home to the fewest recently
//     active conversations (see recentHomes): its later turns and follow-ups
//     come back there, and so do theirs. A rank where its prefill ends
//     within the next iteration (a holder of its system prompt, when
//     computing the prompt whole takes longer) goes first if it holds at
//     most one request more than the fewest (see freshOrder). The bound
//     keeps it from waiting behind another new conversation computing the
//     same system prompt, in flight: under ReuseAfterIteration it would
//     compute it again beside it and double that rank's iteration.
//   - The KV room ranks report (RankState.KVCapacityTokens, FreeKVTokens)
//     is heeded, as capacity_aware does (past the KV memory, below, only
//     for a request with no prefix worth keeping), less what the rank
//     reports its active requests will still take (PendingKVTokens) or,
//     where it does not, the prefill the router believes queued there
//     (placed, not yet computed: it will take blocks the report does not
//     show yet): a request the pool of the best-predicted rank cannot hold
//     would wait there for memory, not for compute. The room a request
//     needs is its whole prompt and the output it reserves for
//     (MaxNewTokens; the free tokens count unreferenced cached blocks, its
//     reused prefix perhaps among them) less the part of its prefix the
//     rank's evictable tokens cannot hold (EvictableKVTokens, or where the
//     rank does not report them its free tokens, which hold them: held by
//     other requests), and a rank whose active requests' uncached tokens
//     exceed its pool has at least the excess queued (waitingAtLeast).
//     A rank that has computed half of the prompt (and a 64th of its
//     pool) and would compute at most an iteration of it stays a candidate
//     without room where it does not report its pending KV (see
//     keepHolders): elsewhere the prefix would be computed and held twice.
//   - Past the KV memory the prediction is given up: in a decision where
//     some rank reports that excess (see memoryBound), requests wait for
//     the memory decoding requests free, which a prediction made of compute
//     cannot foresee, and the requests the prediction would place go where
//     the reference's score puts them (uncached tokens plus the relative
//     load of active uncached tokens, which follows what holds the memory;
//     its seeded tie-break too), among the ranks under the soft cap. A
//     request with a prefix worth keeping (the reference's affinity gate
//     on) is placed as the reference places it, the room unheeded; one
//     without is placed with the same room, a rank that shows tokens
//     waiting for memory having none while another has (see
//     referenceRank). A rank that carries nothing comes first: a request
//     goes to an eligible rank with room for it that reports no active
//     request, and computes its prompt there at once, rather than where
//     the score would queue it behind the memory (see idleRank).
//   - Past the request slots a request waits for a rank that holds its
//     prompt: in a decision whose requests take every slot left (the
//     executor had at least as many waiting as slots had freed), a
//     request that would compute most of its prompt where the score puts
//     it, while every rank holding at least half of it is at the hard cap,
//     is left unplaced (Result.Unassigned, ReasonHeld), up to
//     ttftWaitPerHolder of its prompt family per such rank (see
//     holdForHolder; not past the KV memory, where the reference's score
//     places).
//   - Under ReuseAfterIteration a request waits for its prompt in flight:
//     one that the score puts on a rank computing, for another request,
//     more than half of its prompt (known to the index, not yet shown
//     computed by the probe), where the rank's queued prefill ends within
//     the next iteration, is left unplaced (Result.Unassigned,
//     ReasonHeldInFlight) and finds the prefix computed there at the next
//     decision (see holdForFlight).
//
// Every candidate whose prediction is within one block (TokensPerBlock) of
// the lowest is a tie: the index resolves whole blocks. Ties go to the
// conversation's rank, then the rank that computes fewer tokens for the
// request, then the lower prediction, then fewer active requests, then the
// rank holding fewer cached blocks, then the lower index: no randomness,
// so the decision is a pure function of the router's state and the call
// (past the KV memory, the reference's tie-break: a shuffle seeded with the
// request id).
//
// Stacked tails: samples of one prompt in one decision reuse each other's
// blocks on one rank and each computes only its last, partial block (a tail,
// one token to a block; every request computes its last token). One tail is
// within a tie, so request by request each sample stays; but their tails
// add up on that rank, and while it sets the lock step every rank's
// iteration waits for them (eight samples of a 1300-token prompt: 1500 tokens
// on one rank where the others compute 1300). So a rank where the tails of
// the request's prompt family placed there in this decision, its own
// counted, would exceed a block, and whose queue with it would be the
// longest, is taken out of the candidates (stackedTails) when another
// candidate's predicted wait is no longer — and there are more such
// candidates than prompt families still to place in the decision, each of
// which computes its prompt on some rank too: the sample computes the
// prompt again there, within the iteration the busiest rank fills anyway,
// and the family's next samples join it. A burst of samples so goes to
// pairs of ranks when their tails are most of a block, and stays together
// when they are a few tokens; two bursts in one decision share the ranks
// rather than the first pairing up on every rank and the second stacking
// its prompt on top.

// ttftState is what the TTFT score keeps across calls: per rank, the
// uncached prefill tokens it placed there and believes still queued; and
// scratch for the recent homes per rank.
type ttftState struct {
	queued []int64
	homes  []int
	// Per decision: the fair soft cap (fairCap) and the active requests
	// counting the batch, for needsReplica; and whether a replica was made
	// for a family that outgrew its holders (see outgrown), one per
	// decision.
	fair, total int
	outgrew     bool
	// stalled: whether the last decision made a ramp replica (a prefix
	// computed whole, which stalls the iteration after it).
	stalled bool
	// held, fresh: newFamiliesLast's buffers.
	held, fresh []int
	// burst: whether the decision brings at least ttftFreshBurst requests
	// of conversations not bound yet (see freshOrder).
	burst bool
	// tails: per rank, the tokens this decision's requests of the current
	// prompt family compute there while reusing a prefix, each at most a
	// block (see stackedTails); tailFam that family's first block's hash,
	// and narrowed the candidates stackedTails leaves.
	tails    []int64
	tailFam  uint64
	narrowed []int
	// under, room: referenceRank's candidates and the ranks it admits.
	under []int
	room  []bool
	// handed: the decision's placements after the explicit and warmup
	// pass, in placement order (see shortestFirst).
	handed []handed
	// waiting: per prompt family, the requests the decision left for a
	// full holder (see holdForHolder).
	waiting []waitingFamily
	// flight, flightPrev: the ids of the requests this decision and the
	// one before left for their prompt in flight (see holdForFlight).
	flight, flightPrev []uint64
	// homeRanks, inEligible: the current request's homes and
	// prefixHomes' scratch.
	homeRanks  []int
	inEligible []bool
	// heldRow's scratch, and whether some rank of the decision reports
	// its KV pool (begin).
	heldRow []int
	pools   bool
}

// waitingFamily counts the requests of one prompt family (its first
// block's hash) a decision left unplaced for a full holder.
type waitingFamily struct {
	fam uint64
	n   int
}

// handed is one placement of a decision: the rank, the request's id, the
// tokens of its prompt not known computed there, and whether most of its
// prompt is a prefix not computed yet there (see shortestFirst).
type handed struct {
	rank   int
	id     uint64
	tokens int64
	rides  bool
}

// ttftRecentHomes is how many of the most recently active conversations,
// per rank, a new conversation's placement balances: about the ones whose
// next turns are still to come (a conversation's binding is refreshed by
// every turn it places), not every conversation the router has bound.
// The window size was chosen on the simulator's follow-up and conversation
// workloads (docs/routing-quality.md has the evaluation).
const ttftRecentHomes = 4

// ttftFreshBurst is how many requests of conversations not bound yet make
// a decision a burst of new conversations, and ttftDupShare the share of
// TTFTDrainTokens beyond the least any candidate computes that makes a
// candidate a duplicate for them (see freshOrder). Spread by request
// counts and recently active conversations, such a burst goes partly to
// ranks without the conversations' system prompt, which each compute it
// whole in the same iteration while the prompt is ready elsewhere. On the
// drawn grid, two of its cases (32 ranks, 4096- and 6144-token prompts,
// conversations arriving 4 and 8 at a time) missed their TTFT p99 by
// 1.18-1.39 times, their slowest requests waiting on those computes;
// ranked first among candidates of equal counts, the holders took those
// bursts and the cases went to 0.35-1.00 times on every seed and jittered
// draw measured. Bursts of 3 (a 4-rank case's start-up, where the new
// holders pay off) and duplicates of a block (1024- and 1200-token
// prompts, cheap to replicate) each broke another cell
// (docs/routing-quality.md has the runs).
const (
	ttftFreshBurst = 4
	ttftDupShare   = 4
)

// ttftHomeCaps bounds how many requests the rank holding the longest
// prefix of a request may hold and still take it past the soft cap: this
// many times the soft cap of a fair share (fairCap), which, unlike the
// soft cap, does not rise with the busiest rank. Unbounded, every request
// of a popular prefix placed on its holder would raise the soft cap the
// next decision uses, and one rank would take all of a shared system
// prompt's traffic while the others idle: in lock step, its prefill and
// decoding then lengthen every rank's iterations. Beyond the bound the
// request goes to an eligible rank, which computes the prefix once and
// holds it from then on. The factor was chosen on the simulator's
// evaluation grid, its held-out seeds and steady traffic of one to four
// tenants at two to four times the grid's rate (docs/routing-quality.md).
// ttftHomeCap adds a bound of half the active requests past half the
// request slots.
const ttftHomeCaps = 2

// ttftHomeCap returns how many requests the rank holding the longest prefix
// of a request may hold and still take it past the soft cap: ttftHomeCaps
// times the fair soft cap fair, but no more than half the total active
// requests (this decision's counted) where that is more than fair and more
// than half of maxn; never more than maxn.
//
// On four ranks twice the fair soft cap is four fair shares, every request:
// without the half, a prompt family carrying half the traffic stays on one
// rank until that rank reaches maxn (64 requests against 7-11 on the others
// in the simulator's tenant spike on 4 ranks, docs/routing-quality.md), and
// then the family's next requests compute the prompt on every other rank at
// once. A holder below half its request slots is in no such danger, and
// refusing it the request costs the prompt computed again elsewhere, a
// stall of every rank in lock step: on 4 ranks serving tenants' 6144-token
// prompts beside conversations, a holder of 10 of the 20 active requests,
// none of them prefilling, was refused one, which then took 250 ms, and the
// TTFT p99 was 1.91 times the best reference's (1.70 without that refusal;
// the rest is a new conversation's prompt computed beside the tenants).
// Bounding by half the slots instead took the simulator's drawn grid from
// 30 and 31 cells missing their goals to 29 and 29 of 150, without a new
// miss on its evaluation grid (docs/routing-quality.md).
func ttftHomeCap(fair, total, maxn int) int {
	return min(maxn, ttftHomeCaps*fair, max(fair, (total+1)/2, maxn/2))
}

// ttftRampLoad is the load, in active requests per rank (this decision's
// counted), above which a ramping router makes a family's replica at once
// (see routeTTFT). Under lighter load a popular prompt on a few ranks costs
// little, and the stall a replica makes would decide a p99 of its own. The
// value was chosen on the simulator's evaluation grid and three shifts of
// its seeds, judged with the held-out sweeps (docs/routing-quality.md).
//
// A prompt longer than ttft_drain_tokens makes no ramp replica: computed
// whole, it stalls the lock step for two iterations or more, every request
// in flight waiting with it, which one replica's share of the family's
// traffic does not repay. One 4096-token system prompt on 16 ranks at 2
// requests per second per rank, with a 4096-token iteration budget, had
// replicas made this way (and for room, see roomRank) one by one at 7 to
// 53 s, each some 210 ms for its request and 130-200 ms for those arriving
// meanwhile: 1.84 times the KV-aware reference's TTFT p99; 0.82 times with
// neither, its four first holders serving the whole traffic (the drawn
// grid's case=25, docs/routing-quality.md).
const ttftRampLoad = 4

// ttftRampRequests is how many routed requests per rank the router counts
// as ramping up (see routeTTFT), when its demand window is larger. A
// replica made later is a stall at a load the engine has long carried:
// two tenants' steady traffic on 8 ranks with prefill at 80 µs per token
// had its TTFT p99 set by one made at 46 s (a 2224-token prompt, a 182 ms
// iteration, the nine requests arriving during it waiting for it), 2.04
// times the best reference's; with the ramp ending after 32 requests per
// rank, 0.57 times. Elsewhere on the simulator's evaluation grid and its
// held-out checks it moved a few other cells, none by more than 0.07 of
// the best reference's p99 (docs/routing-quality.md).
const ttftRampRequests = 32

// ttftRampHolders: a family held by this many ranks or more gets no ramp
// replica (see rampWants). A replica adds one rank to a family's h: much
// of its capacity on one to four, an eighth or less from eight on, while
// its stall costs every rank, and every request arriving during it, as
// much either way. As needsReplica wants at most about half the ranks for
// a family with all the traffic (at the default fair_share_multiplier of
// 2), the bound matters on more than 16 ranks.
// On drawn shapes no rule was traced on (32 ranks, one to four prompt
// families of 2048-6144 tokens at 3-4 requests per second per rank) the
// ramp made replicas of families already on 9-15 ranks, one every other
// decision two to four seconds into steady traffic, and their stalls set
// the TTFT p99: 1.21-3.33 times the best reference's, 0.33-1.67 times
// without them. The replicas traced that paid were of families on one to
// four ranks (2 tenants on 12 ranks: 1.94 times the best reference's p99
// with the ramp, 2.72 without; one prompt at 40 requests per second per 8
// ranks on 16: 1.05 and 1.07). docs/routing-quality.md has the runs.
const ttftRampHolders = 8

// recentHomes returns, per rank, how many of the ttftRecentHomes × dp_size
// most recently active conversations it is home to.
func (r *Router) recentHomes() []int {
	n := r.cfg.DPSize
	homes := slices.Grow(r.ttft.homes[:0], n)[:n]
	clear(homes)
	r.conv.CountRecent(ttftRecentHomes*n, homes)
	r.ttft.homes = homes
	return homes
}

// begin drains every rank's queued prefill by one iteration's budget, caps
// it by what the rank reports active and raises it to what the rank's KV
// pool shows must still wait (waitingAtLeast). Each change is folded into
// the digest d: the bounds depend on the call's rank states. It also notes
// whether some rank reports its KV pool (heldRow).
func (t *ttftState) begin(cfg *Config, states []RankState, d *uint64) {
	if len(t.queued) != cfg.DPSize {
		t.queued = make([]int64, cfg.DPSize)
		t.tails = make([]int64, cfg.DPSize)
	}
	clear(t.tails)
	t.tailFam = 0
	t.pools = false
	for k := range states {
		t.pools = t.pools || states[k].KVCapacityTokens > 0
	}
	drain := int64(cfg.TTFTDrainTokens)
	for k := range t.queued {
		q := max(t.queued[k]-drain, 0)
		if s := &states[k]; s.NumActiveRequests == 0 {
			q = 0
		} else {
			q = max(min(q, s.NumActiveTokens), waitingAtLeast(s))
		}
		if q != t.queued[k] {
			t.queued[k] = q
			*d = fold(*d, tagQueued, uint64(k), uint64(q))
		}
	}
}

// setStalled records whether this decision made a ramp replica.
func (r *Router) setStalled(v bool) {
	if r.ttft.stalled != v {
		r.ttft.stalled = v
		r.digest = fold(r.digest, tagRampStall, b2u(v), 0)
	}
}

// waitingAtLeast returns the uncached prompt tokens rank state s shows are
// still to compute beyond any doubt: those of its active requests
// (num_active_tokens, prompt tokens not found cached, as TensorRT-LLM counts
// them for this policy) beyond its KV capacity. A request holds KV for every
// token it computes, and an engine starts one only once its KV fits
// (TensorRT-LLM reserves its whole sequence), so active requests whose
// uncached tokens exceed the pool have not all started: that much waits for
// memory, whatever one iteration's budget would drain. The drain assumes
// the rank computes its budget every iteration; a rank whose pool is full
// computes nothing new until decoding requests finish, and without this
// bound the router would go on believing its queue short while requests
// pile up behind one that cannot start. 0 when the rank reports no
// capacity.
func waitingAtLeast(s *RankState) int64 {
	if s.KVCapacityTokens <= 0 {
		return 0
	}
	return max(s.NumActiveTokens-s.KVCapacityTokens, 0)
}

// routeTTFT is the KV-aware policy under ScoreTTFT: explicit targets and
// warmup as routeKVAware, then each request, grouped by prompt prefix (the
// longest prompt's group first, the groups no rank holds after the others:
// see newFamiliesLast), to the eligible rank with the lowest predicted TTFT.
func (r *Router) routeTTFT(b *batch) {
	count, tokens, row := r.kvBegin(b)
	ready := slices.Grow(r.ready[:0], len(row))[:len(row)]
	r.ready = ready
	r.ttft.begin(&r.cfg, b.states, &r.digest)
	r.ttft.burst = r.freshRequests(b) >= ttftFreshBurst
	queued := r.ttft.queued
	if invariants.Enabled {
		checkQueued(queued, b.states)
	}
	// The prefill placed on a rank and not yet computed will take KV
	// blocks there that its reported free room does not show yet, unless
	// the rank reports what its requests will still take (the room
	// counts that already: kvRoom).
	for k, q := range queued {
		if _, ok := b.states[k].pendingKV(); !ok {
			r.room.take(k, int(q))
		}
	}
	onSchedule := r.cfg.EngineReuse == ReuseOnSchedule

	// place puts request i on rank k: the index and the loads learn it.
	place := func(i, k int) {
		n := b.reqs[i].Len()
		if u := int64(max(n-usable(k, row, ready, onSchedule), 0)); u > 0 {
			// What the request computes depends on the probe: folded.
			queued[k] += u
			r.digest = fold(r.digest, tagQueued, uint64(k), uint64(queued[k]))
		}
		r.placeKV(b, i, k, row, tokens)
		if id := b.reqs[i].ConversationID; id != "" {
			if home, ok := r.conv.Get(id); ok && home == k {
				r.conv.Touch(id)
				r.digest = fold(r.digest, tagTouch, hashString(id), 0)
			} else {
				r.bind(id, k)
			}
		}
	}

	// Explicit + warmup pass, as the reference, except that a bound
	// conversation's turn never warms a rank.
	rest := r.explicitPass(b, count, true, func(i, k int) {
		r.ttftRows(b, i, row, ready)
		place(i, k)
	})
	r.newFamiliesLast(b, rest)
	expected, eligible, quiet := r.scoring(b, count, rest)
	// How far past the soft cap a prefix's home stays a candidate (see
	// ttftHomeCap).
	r.ttft.fair = fairCap(count, len(rest), r.cfg.FairShareMultiplier, b.maxn)
	r.ttft.total = len(rest)
	for _, c := range count {
		r.ttft.total += c
	}
	homeCap := ttftHomeCap(r.ttft.fair, r.ttft.total, b.maxn)
	// Ramping under load: one replica of a family that needs it may be made
	// at once in this decision (see ttftRampLoad), but not right after one:
	// the decision's requests arrived during that replica's stall, and a
	// second would stall them again.
	ramp := r.prefix.wfill < min(len(r.prefix.window), ttftRampRequests*len(count)) &&
		r.ttft.total > ttftRampLoad*len(count) && !r.ttft.stalled
	r.setStalled(false)
	r.ttft.outgrew = false
	// Past the KV memory the reference's score places (memoryBound); its
	// tie-break draws the reference's shuffles.
	pastMemory := memoryBound(b.states)
	if pastMemory {
		r.seeds.reset(len(rest))
	}
	r.ttft.handed = r.ttft.handed[:0]
	r.ttft.flight, r.ttft.flightPrev = r.ttft.flightPrev[:0], r.ttft.flight
	r.ttft.waiting = r.ttft.waiting[:0]
	// At light load, where ramp makes no replicas, one replica of a
	// family whose holders' pools are full may go to a rank with room
	// (roomRank; in a decision that brings other requests too, only of a
	// request that computes most of its prompt anyway).
	roomOnce := r.ttft.total <= ttftRampLoad*len(count)
	lone := len(rest) == 1
	// The decision's requests take every request slot left: the executor
	// has more waiting than slots freed (see holdForHolder).
	slotBound := r.ttft.total >= len(count)*b.maxn

	for pos, i := range rest {
		q := &b.reqs[i]
		// The request's homes stay candidates past the soft cap,
		// which counts requests, most of which only decode: its
		// conversation's rank up to the hard cap, else the ranks
		// holding its longest computed prefix up to homeCap.
		r.ttftRows(b, i, row, ready)
		homes := r.ttft.homeRanks[:0]
		if q.ConversationID != "" {
			if h, ok := r.conv.Get(q.ConversationID); ok && count[h] < b.maxn && !slices.Contains(eligible, h) {
				homes = append(homes, h)
			}
		}
		if len(homes) == 0 {
			homes = r.prefixHomes(homes, eligible, ready, count, homeCap)
		}
		r.ttft.homeRanks = homes
		// The homes are candidates for this request alone: they are the
		// tail of eligible until it is placed.
		eligible = append(eligible, homes...)
		if len(eligible) == 0 {
			break
		}
		// The room it needs on a rank is its whole prompt (and the output
		// it reserves for), not only what it computes there: a rank's free
		// KV counts its unreferenced cached blocks, and the prefix the
		// request would reuse may be among them (reusing it takes them out
		// of the free pool). Only the part of the prefix in flight, and of
		// the computed part what a rank's evictable tokens (at most its
		// free tokens) cannot hold, is surely held by other requests and
		// needs no room (heldRow).
		held := r.heldRow(b, i, row)
		allow := r.room.allow(eligible, q, held)
		r.keepHolders(b, allow, eligible, q, ready)

		k := -1
		if quiet && !q.Strict {
			k = r.demandRank(b, i, eligible, allow, tokens)
		}
		// Not with a prompt longer than an iteration computes: that
		// replica would stall the lock step for more than one (see
		// ttftRampLoad).
		if k < 0 && ramp && !q.Strict && q.Len() <= r.cfg.TTFTDrainTokens && r.rampWants(b, i) {
			if k = r.rampRank(b, i, eligible, allow); k >= 0 {
				ramp = false // one stall per decision
				r.setStalled(true)
			}
		}
		if k < 0 && roomOnce && !q.Strict && !r.bound(q) {
			if k = r.roomRank(b, i, eligible, allow, ready, lone); k >= 0 {
				roomOnce = false
			}
		}
		if k < 0 && pastMemory && !q.Strict {
			k = r.idleRank(b, eligible, allow, row)
		}
		if k >= 0 {
			r.stats.warmup++
			r.stats.demand++
			if r.rc != nil {
				r.rc.placed(i, ReasonDemandWarmup, len(eligible))
			}
		}
		if k < 0 && pastMemory {
			k = r.referenceRank(b, pos, rest, eligible, allow, held, expected, row, tokens)
		}
		predicted := k < 0
		if predicted {
			cands := r.stackedTails(b, i, rest[pos+1:], eligible, allow, row, ready, onSchedule)
			if r.rc != nil {
				r.rc.ttft(r, b, i, eligible, cands, allow, row, ready, held, tokens, onSchedule)
			}
			k = r.ttftRank(b, i, cands, allow, row, ready, onSchedule)
		}
		if predicted && k >= 0 && !q.Strict && r.holdForFlight(b, i, k, row, ready, onSchedule) {
			// Left for the executor to offer again, as below.
			if r.rc != nil {
				r.rc.held(i, ReasonHeldInFlight)
			}
			eligible = eligible[:len(eligible)-len(homes)]
			continue
		}
		if predicted && slotBound && k >= 0 && !q.Strict && r.holdForHolder(b, i, k, row, ready, onSchedule) {
			// Left for the executor to offer again: the rank it would
			// have taken stays open to the decision's other requests.
			if r.rc != nil {
				r.rc.held(i, ReasonHeld)
			}
			eligible = eligible[:len(eligible)-len(homes)]
			continue
		}
		r.tailPlaced(b, i, k, row, ready, onSchedule)
		r.ttft.handed = append(r.ttft.handed, handed{rank: k, id: q.ID,
			tokens: int64(max(q.Len()-ready[k], 0)), rides: 2*(row[k]-ready[k]) > q.Len()})
		place(i, k)
		eligible = eligible[:len(eligible)-len(homes)]
		if count[k] >= expected {
			eligible = slices.DeleteFunc(eligible, func(e int) bool { return count[e] >= expected })
		}
	}
	r.eligible = eligible
	if !pastMemory {
		r.shortestFirst(b)
	}
	r.coverPlaced(b)
	r.finish(b)
}

// keepHolders allows request q, whatever their KV room, on the eligible
// ranks that have computed at least half of its prompt (ready) and would
// compute at most TTFTDrainTokens of it, one iteration: there it needs
// room for little more than that, and the blocks decoding requests free
// soon give it, while a rank with room computes its prefix again and holds
// a second copy of the prefix's blocks. Where pools are short, such copies
// multiply: every rank then holds several families' prefixes, fewer
// requests share each pool, more wait for memory, and evicted prefixes are
// computed again. In the drawn grid's cases with 1024-block pools (a 4096-
// or 6144-token system prompt is an eighth to a fifth of such a pool) the
// room sent tenants' requests off the ranks holding their prompts, eleven
// replicas in two seconds in one case, and the engine fell behind its
// memory for half a minute, TTFT p99 1.8-2.2 times the KV-aware
// reference's, which leaves every request on its holders
// (docs/routing-quality.md, "Drawn shapes").
// A request that computes more than an iteration on the holder, or reuses
// less than half of its prompt there, keeps the room check: it would take
// much of the memory it waits for. So does one whose reused prefix is
// under a 64th of the holder's pool (ttftKeepShare): a copy of it costs
// little, while the memory the holder lacks may be held by one long
// request for seconds. On the Mooncake conversation traces, turns of a few
// hundred tokens reusing a 256-512-token prefix, kept on a rank whose
// 131k-token pool one request of 60k-120k tokens held, waited 4.5-7.6 s
// for that memory.
//
// Only on ranks that do not report their pending KV (RankState.
// ReportsPendingKV): there the room is a guess, the free KV less the
// prefill the router placed, which counts twice the blocks of requests the
// engine has admitted, and the prefix may be among the free tokens for all
// it knows. Where the rank reports what its requests will still take, the
// room is the engine's own account, and overriding it cost more than it
// gained: on the trace slices replayed at six speeds on every engine shape
// (924 cells) the preset with the pending and evictable KV reported missed
// 98 cells with holders kept against 82 without, and with the pending KV
// alone 96 against 94, its worst TTFT p99 2.32× against 1.79×
// (docs/routing-quality.md, "With the engine's KV state reported").
// allow nil (the room unheeded) is left as it is.
func (r *Router) keepHolders(b *batch, allow []bool, eligible []int, q *Request, ready []int) {
	if allow == nil {
		return
	}
	n := q.Len()
	for _, k := range eligible {
		if _, reported := b.states[k].pendingKV(); !reported && 2*ready[k] >= n && n-ready[k] <= r.cfg.TTFTDrainTokens &&
			int64(ready[k])*ttftKeepShare >= b.states[k].KVCapacityTokens {
			allow[k] = true
		}
	}
}

// ttftKeepShare: keepHolders keeps a request on a rank without room only
// when the part of its prompt the rank has computed is at least
// 1/ttftKeepShare of the rank's KV pool (a 4096-token system prompt on a
// 32k-token pool is an eighth; 512 tokens on a 131k-token pool, a 256th).
const ttftKeepShare = 64

// heldRow returns, per rank, the tokens of row (request i's match) held by
// other requests beyond doubt, or nil when no rank reports its KV pool: the
// part the probe does not show computed (in flight) is held by the request
// computing it, which has its blocks reserved (or counted in the rank's
// pending KV, or in the prefill queued there), and of the computed part
// what RankState.heldMatch says. Without a probe all of it counts as
// computed.
func (r *Router) heldRow(b *batch, i int, row []int) []int {
	if !r.ttft.pools {
		return nil
	}
	held := slices.Grow(r.ttft.heldRow[:0], len(row))[:len(row)]
	r.ttft.heldRow = held
	for k, m := range row {
		computed := m
		if b.matches != nil {
			computed = min(b.match(i, k, len(row)), m)
		}
		held[k] = b.states[k].heldMatch(computed) + m - computed
	}
	return held
}

// holdForFlight reports whether request i, which the score puts on rank k,
// is better left unplaced until the next decision because k is computing
// its prompt for another request: under ReuseAfterIteration, with a probe
// (without one the index cannot tell a prefix in flight from one
// computed), the part of its prefix k is known to hold beyond what the
// probe shows computed there is more than half of its prompt, and k's
// queued prefill, at least that part and at most TTFTDrainTokens, ends
// within the next iteration; and the previous decision did not hold it
// so (it waits one decision at most).
//
// A block is reusable only once the iteration that computed it ends, so a
// request placed beside the one computing its prefix computes the prefix
// again in the same iteration, and the rank's share of that iteration,
// which every rank waits for in lock step, grows by the whole prefix.
// Left unplaced, the executor offers it again at the next decision, one
// iteration later, where it finds the prefix computed on k and computes
// a few blocks. The score chooses such a rank where every other one
// computes the prompt whole too: a tenant's requests past its holders'
// cap in a spike (four tenants on 4 ranks, 16384-token iterations: seven
// of them computing a 3000-token prompt two and three to a rank, a 438 ms
// iteration; the drawn grid's case=108 went from 1.42 to 1.22 times the
// best reference's TTFT p99), or new conversations of a burst sharing
// their system prompt (bursts of 8 with 1200-token prompts on 8 ranks:
// from 1.00 to 0.38 times). A queue shorter than that part means nothing
// computes it (the index's record outlived the blocks), and a request
// held for it would wait for ever; a queue longer than an iteration
// computes the prefix in whole iterations before the request starts
// (readyBehind), which the prediction has counted. Even so the router's
// queue is an estimate, so a request waits one decision at most. Samples
// of one prompt (at most a block beyond the prefix) are left to
// stackedTails. docs/routing-quality.md has the evaluation.
func (r *Router) holdForFlight(b *batch, i, k int, row, ready []int, onSchedule bool) bool {
	if onSchedule || b.matches == nil {
		return false
	}
	q := &b.reqs[i]
	n := q.Len()
	flight := row[k] - ready[k]
	if n-row[k] <= r.cfg.TokensPerBlock || 2*flight <= n {
		return false
	}
	if queued := r.ttft.queued[k]; queued < int64(flight) || queued > int64(r.cfg.TTFTDrainTokens) ||
		slices.Contains(r.ttft.flightPrev, q.ID) {
		return false
	}
	r.ttft.flight = append(r.ttft.flight, q.ID)
	r.digest = fold(r.digest, tagFlightHeld, q.ID, uint64(k))
	return true
}

// holdForHolder reports whether request i, which the score puts on rank k
// in a decision that takes every request slot left, is better left
// unplaced, and counts it: it would compute more than half of its prompt on
// k, every rank whose usable prefix of it is at least half of it (a holder;
// there is one) is at the hard cap, and the decision has left fewer than
// ttftWaitPerHolder requests of its prompt family per holder unplaced.
//
// Past the slots the executor fetches only as many requests as slots have
// freed, so the slots that free up, not the score, decide where most
// requests go, and a family held by a few ranks finds them full: each of
// its requests then computes the prompt again wherever a slot freed, a
// lock-step stall for every rank exactly when the engine is behind, which
// slows the iterations that free slots and keeps it behind (four tenants at
// four times the grid's rate on 8 ranks of 16 slots: 21 such prefills
// within 2 s, TTFT p99 1189 ms against 117 ms for the `conversation`
// policy's, at the same total prefill). Left unplaced, the executor offers
// it again at the head of its queue, the next decisions place it when a
// holder frees a slot, and the slot on k goes to a request warm there or to
// the next one waiting. Only a decision that takes every slot holds: with
// slots to spare the engine is not behind, and a request held there waits
// while ranks idle (a 16-tenant spike on 8 ranks at 80 µs per prefill
// token: p99 0.99× the best reference's; 3.4× holding whenever the holders
// were full, for at most ten decisions each). And only a few per holder: a
// holder frees its slots one by one, and where decoding is long it frees
// them seldom, so a family's backlog beyond that waits while the slots it
// leaves idle go unused; its next request computes the prompt again where a
// slot freed (four tenants on 4 ranks with 128-1024-token outputs: 700 ms;
// 2709 ms holding every such request, 1633 ms holding none).
// docs/routing-quality.md has the evaluation.
func (r *Router) holdForHolder(b *batch, i, k int, row, ready []int, onSchedule bool) bool {
	n := b.reqs[i].Len()
	if 2*(n-usable(k, row, ready, onSchedule)) <= n {
		return false
	}
	holders := 0
	for h := range row {
		if 2*usable(h, row, ready, onSchedule) >= n {
			if r.count[h] < b.maxn {
				return false
			}
			holders++
		}
	}
	if holders == 0 {
		return false
	}
	fam, ok := r.prefix.family(&r.cfg, b, i)
	if !ok {
		return false
	}
	for j := range r.ttft.waiting {
		if w := &r.ttft.waiting[j]; w.fam == fam {
			if w.n >= ttftWaitPerHolder*holders {
				return false
			}
			w.n++
			return true
		}
	}
	r.ttft.waiting = append(r.ttft.waiting, waitingFamily{fam: fam, n: 1})
	return true
}

// prefixHomes appends to homes the ranks outside eligible, holding fewer
// than homeCap requests, that computed the longest prefix of the request
// any of them has (ready), when that prefix is not empty and no eligible
// rank computed more of it.
func (r *Router) prefixHomes(homes, eligible, ready, count []int, homeCap int) []int {
	in := slices.Grow(r.ttft.inEligible[:0], len(ready))[:len(ready)]
	r.ttft.inEligible = in
	clear(in)
	held := 0
	for _, k := range eligible {
		in[k] = true
		held = max(held, ready[k])
	}
	top := 0
	for k, m := range ready {
		if !in[k] && count[k] < homeCap {
			top = max(top, m)
		}
	}
	if top == 0 || top < held {
		return homes
	}
	for k, m := range ready {
		if m == top && !in[k] && count[k] < homeCap {
			homes = append(homes, k)
		}
	}
	return homes
}

// ttftWaitPerHolder is how many requests of a prompt family a decision
// leaves unplaced per full rank holding it (see holdForHolder). Chosen on
// the simulator's evaluation grid with 16 and 32 request slots per rank
// and at 80 µs per prefill token, and on its sweeps with 16 slots and with
// long outputs (docs/routing-quality.md); the grid itself, whose spikes
// leave slots free, never holds. On the mixed grid, where a tenant spike
// fills 4 ranks' slots, two cost prefill (1.04-1.14× the best reference's,
// at 0.11-0.21× its TTFT p99) where one did not (0.91-0.98×, 0.27-0.41×);
// one is not yet judged on the other checks.
const ttftWaitPerHolder = 2

// memoryBound reports whether some rank reports more uncached prompt tokens
// active than its KV pool holds (waitingAtLeast): requests there wait for
// memory, not compute, and the engine is past what its memory serves.
// There the predicted TTFT, made of compute, is wrong by however long the
// decoding requests hold their blocks. On Mooncake's traces replayed five
// and ten times faster than eight ranks compute them, placing by the
// reference's score in such decisions took the preset's TTFT p99 from 1.17×
// to 1.11× the best reference's (geometric mean); deciding so earlier, at
// 90% of a pool, cost more where the engine keeps up
// (docs/routing-quality.md).
func memoryBound(states []RankState) bool {
	for k := range states {
		if waitingAtLeast(&states[k]) > 0 {
			return true
		}
	}
	return false
}

// shortestFirst reorders the requests the decision's scored pass placed on
// a rank (the tail of its Result.Assignment list) when the prefill queued
// there, theirs counted, spills past one iteration: fewest tokens first,
// counting the prefix known computed on the rank (ready), ties in
// placement order.
//
// A rank serves its queue first come, first served, TTFTDrainTokens per
// lock-step iteration, and every request whose prefill ends in an
// iteration gets its first token at that iteration's end. Placed longest
// first (see routeTTFT), a burst's short prompts would be queued behind
// its long ones and wait for the last iteration with them. Handed over
// shortest first, the short ones end in the first iterations and only the
// long ones, for which an iteration more is a small part of their wait,
// in the last. The order changes when each request's prefill ends, not
// which rank computes it.
//
// A rank short of KV memory keeps the placement order: a long prompt
// handed over last may find too few blocks free when it reaches the head
// of the queue (the requests handed over before it, and the decoding ones,
// took them meanwhile), and then it waits there for memory and every
// request queued behind it waits too.
// So a rank is reordered only while its reported room, less the prefill
// the router believes queued there with this decision's, stays at least
// 1/shortestFirstSlack of its pool; a rank that reports no pool, whose
// room the router cannot tell, is not, and past the memory (memoryBound)
// no rank is.
//
// Nor is a rank where one of the requests rides on a prefix not computed
// yet: more than half its prompt is in the index's match there but not in
// the part known computed (a sample of a prompt placed beside it, or a
// follow-up of a turn still in flight). Whether it reuses that prefix or
// computes it again depends on when it starts against the request
// computing it (under ReuseAfterIteration, only blocks computed in an
// earlier iteration are reused), and reordering the rank's queue moves
// them: two bursts of 16 samples in one decision, handed shortest first,
// put each burst's samples into one iteration, where in placement order
// the second samples started after the first had computed most of the
// prompt and reused it (980.9 against 771.2 ms).
func (r *Router) shortestFirst(b *batch) {
	h := r.ttft.handed
	slices.SortStableFunc(h, func(x, y handed) int {
		if c := cmp.Compare(x.rank, y.rank); c != 0 {
			return c
		}
		return cmp.Compare(x.tokens, y.tokens)
	})
	for lo := 0; lo < len(h); {
		k, hi := h[lo].rank, lo+1
		rides := h[lo].rides
		for hi < len(h) && h[hi].rank == k {
			rides = rides || h[hi].rides
			hi++
		}
		pool := b.states[k].KVCapacityTokens
		if hi-lo > 1 && !rides && r.ttft.queued[k] > int64(r.cfg.TTFTDrainTokens) &&
			pool > 0 && r.room.left(k) >= pool/shortestFirstSlack {
			a := b.res.Assignment[k]
			tail := a[len(a)-(hi-lo):]
			for j := range tail {
				tail[j] = h[lo+j].id
			}
		}
		lo = hi
	}
}

// shortestFirstSlack: shortestFirst reorders a rank's requests only while
// the KV room left there, with the decision's prefill counted, is at least
// 1/shortestFirstSlack of its pool. On Mooncake's traces replayed five and
// ten times faster than eight ranks compute them, requests handed shortest
// first with no slack left a long prompt waiting for memory at a rank's
// head on one slice (its TTFT p99 about 2× the best reference's); an
// eighth of the pool kept every slice within 1.06× at half the prompt
// lengths, where a quarter, a half, or room for the decision's longest
// request again left one at 1.43× (docs/routing-quality.md).
const shortestFirstSlack = 8

// referenceRank returns the rank the reference's KV-aware score picks for
// the request at routing position pos of rest (match lengths row, token
// loads tokens; allow the KV room judged with the match roomMatch, which
// the receipt repeats): among the ranks of eligible under the soft cap expected,
// the lowest (score, tokens), a tie broken by random.Random(id).shuffle
// (kvLoop.choose; the decision reset the seeds for rest). -1 when no rank
// of eligible is under the soft cap (a home kept past it).
//
// Where the score's cache affinity is on (some candidate holds more than
// MatchRateThreshold of the prompt), the KV room is not heeded, as the
// reference does not heed it: past the memory every rank's room is short,
// and what the router reads of it misleads. Free tokens less the prefill
// it believes queued count twice the blocks of requests already admitted
// (allocated, not yet computed), so the rank holding a long prompt's
// prefix looks full, and heeding that computes the prompt again where the
// room looks larger, a second copy of its blocks in an engine already
// short of them. On a slice of Mooncake's synthetic trace whose
// 37-66k-token prompts overrun 4 ranks' pools, heeding the room put the
// preset's prefill at 2.02× and its TTFT p99 at 4.87×
// kv_cache_aware+warmup's (on-schedule reuse: 1.88× and 3.28×); unheeded,
// 1.33× and 1.77× (1.12× and 1.49×).
//
// Without affinity the score has no prefix to keep and balances load
// alone, and there the room is heeded: beside the ranks allow excludes, a
// rank that shows tokens waiting for memory (waitingAtLeast) has no room
// while another candidate has, as a request queued behind them waits with
// them however little it computes. On trace replays with no prefix to
// reuse, far past the memory, the room balanced what the load term does
// not see (a conversation slice at 80 µs per prompt token: TTFT p99 0.75×
// the best reference's heeding it, 1.06× not).
func (r *Router) referenceRank(b *batch, pos int, rest, eligible []int, allow []bool, roomMatch []int, expected int, row []int, tokens []float64) int {
	under := r.ttft.under[:0]
	for _, k := range eligible {
		if r.count[k] < expected {
			under = append(under, k)
		}
	}
	r.ttft.under = under
	if len(under) == 0 {
		return -1
	}
	rowMax, held := 0, 0
	for _, m := range row {
		rowMax = max(rowMax, m)
	}
	for _, k := range under {
		held = max(held, row[k])
	}
	// kvLoop.choose's gate, on the candidates' longest match.
	if r.affinity(held, b.reqs[rest[pos]].Len()) {
		allow = nil
	} else {
		room := slices.Grow(r.ttft.room[:0], len(row))[:len(row)]
		r.ttft.room = room
		for k := range room {
			room[k] = allowed(allow, k) && waitingAtLeast(&b.states[k]) == 0
		}
		if slices.ContainsFunc(under, func(k int) bool { return room[k] }) {
			allow = room
		}
	}
	// A loop of one request: its sums are taken afresh (running false)
	// and its lowest loads found afresh (lows zero), as the candidates and
	// loads here change from one request to the next.
	l := kvLoop{rest: rest, row: row, tokens: tokens, eligible: under, held: roomMatch}
	return l.choose(r, b, pos, rest[pos], rowMax, allow)
}

// ttftRows fills row with request i's match on every rank as the index (and
// probe) know it, and ready with the part the request finds computed when
// it starts there: the probed match when the caller probes, and under
// ReuseAfterIteration what the rank computes of the prefix in flight there
// before the request starts (readyBehind); without a probe (prefix_source
// "index") the index's match, which cannot tell in-flight prefixes from
// computed ones.
func (r *Router) ttftRows(b *batch, i int, row, ready []int) {
	r.matchRow(b, i, row)
	size := len(row)
	for k := range ready {
		if b.matches != nil {
			ready[k] = b.match(i, k, size)
		} else {
			ready[k] = row[k]
		}
	}
	if b.matches != nil && r.cfg.EngineReuse != ReuseOnSchedule {
		r.readyBehind(b, i, row, ready)
	}
}

// readyBehind adds to ready[k] the part of request i's prefix in flight on
// rank k (known there, row[k], beyond what the probe shows computed,
// ready[k]) that k computes before the request starts. A rank serves its
// queue first come first served, the prefill queued on it (ttftState.queued)
// before a request placed now, in lock-step iterations of ttft_drain_tokens
// each; under ReuseAfterIteration a block is reusable once the iteration
// that computed it ends. So the whole iterations the queue fills before the
// request's first one compute that much of it, and the request reuses what
// of the in-flight prefix they hold: taking the prefix to be at the queue's
// end (the latest placement), the whole iterations' tokens beyond the rest
// of the queue, in whole blocks, at most the prefix. Without it a request
// placed beside the one computing its prefix is predicted to compute the
// prefix again, and goes to another rank that does (a long shared prompt
// computed twice for the same TTFT). A queue shorter than the prefix (the
// index's record may outlive the blocks) counts only its whole iterations.
// A request that computes at most a block beyond the prefix (a sample of
// the same prompt) is left to stackedTails.
func (r *Router) readyBehind(b *batch, i int, row, ready []int) {
	drain := int64(r.cfg.TTFTDrainTokens)
	block := r.cfg.TokensPerBlock
	n := b.reqs[i].Len()
	for k, known := range row {
		flight := int64(known - ready[k])
		if flight <= 0 || n-known <= block {
			continue
		}
		queued := r.ttft.queued[k]
		whole := queued / drain * drain
		computed := min(max(whole-max(queued-flight, 0), 0), flight)
		ready[k] += int(computed) / block * block
	}
}

// usable is how many of a request's tokens rank k will not compute: its
// ready prefix, or under ReuseOnSchedule its whole known prefix.
func usable(k int, row, ready []int, onSchedule bool) int {
	if onSchedule {
		return row[k]
	}
	return ready[k]
}

// ttftRank returns the eligible, allowed rank with the lowest predicted TTFT
// for request i (see ttftCost), preferring its conversation's rank on ties,
// then the rank that computes less — or, when the request's family needs
// another rank (needsReplica), the one that computes more: a new holder.
// A request of a conversation not bound yet goes instead, among the ranks
// where it waits no longer than it would computing its whole prompt on an
// idle rank, to the first by freshOrder: while the engine is light and
// its prompt is ready elsewhere for at least an iteration's prefill
// (warmsEarly), the one with the fewest requests, then one that computes
// the prompt whole; otherwise preferably one whose queue with
// it ends within the iteration the busiest rank fills anyway, then one
// where it ends within the next iteration (among those with at most one
// request more than the fewest), then the one with the fewest requests,
// then, in a burst of new conversations, one that computes no system
// prompt ready elsewhere, then the one home to the fewest recently active
// conversations, then the lowest prediction. Among the ties of any other
// request whose prefix some rank holds, a rank with KV room (see hasRoom)
// goes before one with fewer requests.
func (r *Router) ttftRank(b *batch, i int, eligible []int, allow []bool, row, ready []int, onSchedule bool) int {
	q := &b.reqs[i]
	home, fresh := -1, false
	if q.ConversationID != "" {
		if h, ok := r.conv.Get(q.ConversationID); ok {
			home = h
		} else {
			fresh = true
		}
	}
	pred := r.ttftCoster(b, i, eligible, allow, row, ready, onSchedule)
	var homes []int
	if fresh {
		homes = r.recentHomes()
	}
	// The lowest prediction; every candidate within a block of it is a
	// tie: the index resolves whole blocks. And the fewest requests on a
	// candidate and the most tokens a candidate computes (see freshOrder).
	least := int64(-1)
	fewest := -1
	var most int64
	for _, k := range eligible {
		if allowed(allow, k) {
			c, _, unc := pred.at(k)
			if least < 0 || c < least {
				least = c
			}
			if fewest < 0 || r.count[k] < fewest {
				fewest = r.count[k]
			}
			most = max(most, unc)
		}
	}
	limit := least + int64(r.cfg.TokensPerBlock)
	// A new conversation's bound: computing its whole prompt on an idle
	// rank (or, when every rank is worse, the lowest prediction).
	bound := max(pred.idle(), least)
	// Also a new conversation's: the wait of a request that adds nothing,
	// the busiest rank's share of the next iteration.
	var lockStep int64
	early := false
	if fresh {
		lockStep = pred.wait(0)
		early = r.warmsEarly(most - pred.least)
	}
	best := -1
	var bestCost, bestUnc int64
	var bestFresh freshOrder
	// roomier orders rank k against best by KV room (hasRoom) for a
	// request whose prefix some rank holds: +1 when only k has room, -1
	// when only best has, else 0. For a prompt no rank holds it is always
	// 0: computed whole wherever it goes, it is spread by request counts
	// alone. held caches heldAnywhere, asked when first needed.
	held := 0
	roomier := func(k, best int) int {
		rk, rb := hasRoom(&b.states[k]), hasRoom(&b.states[best])
		if rk == rb {
			return 0
		}
		if held == 0 {
			held = -1
			if r.heldAnywhere(b, i) {
				held = 1
			}
		}
		switch {
		case held < 0:
			return 0
		case rk:
			return 1
		}
		return -1
	}
	spreads := func(k, best int) bool {
		if d := roomier(k, best); d != 0 {
			return d > 0
		}
		return r.spreads(k, best)
	}
	for _, k := range eligible {
		if !allowed(allow, k) {
			continue
		}
		c, wait, unc := pred.at(k)
		var better bool
		switch {
		case fresh:
			// Never where it waits behind more than its own prefill
			// would take on an idle rank (a rank computing the same
			// prefix, in flight, is no help under ReuseAfterIteration).
			o := freshOrder{
				free:  wait <= lockStep,
				next:  wait <= int64(r.cfg.TTFTDrainTokens) && r.count[k] <= fewest+1,
				count: r.count[k],
				homes: homes[k],
				cost:  c,
				dup:   r.ttft.burst && unc > pred.least+int64(r.cfg.TTFTDrainTokens/ttftDupShare),
				early: early,
				cold:  early && unc > pred.least+int64(r.cfg.TokensPerBlock),
			}
			if better = wait <= bound && (best < 0 || o.before(bestFresh)); better {
				bestFresh = o
			}
		case c > limit || (best >= 0 && best == home):
		case best < 0 || k == home:
			better = true
		case pred.replicate:
			// The family needs another rank: among the ties a new
			// holder wins.
			better = unc > bestUnc || (unc == bestUnc && (c < bestCost || (c == bestCost && spreads(k, best))))
		default:
			// Among the ties the rank that computes less wins.
			better = unc < bestUnc || (unc == bestUnc && (c < bestCost || (c == bestCost && spreads(k, best))))
		}
		if better {
			best, bestCost, bestUnc = k, c, unc
		}
	}
	if pred.outgrown && best >= 0 && bestUnc > pred.least+int64(r.cfg.TokensPerBlock) {
		r.ttft.outgrew = true
	}
	return best
}

// A freshOrder ranks a candidate for a new conversation's turn (see
// ttftRank).
//
//   - early: the turn warms ranks early (warmsEarly, the same for every
//     candidate): the fewest requests go first, then cold, and only then
//     the order below.
//   - cold: early, and the candidate computes the prompt the holders have
//     ready (more than a block beyond the least any candidate computes).
//   - free: its queue with the turn ends within the iteration the busiest
//     rank fills anyway. In lock step a rank that overtakes the busiest
//     lengthens every rank's iteration.
//   - next: the turn's prefill ends within the next iteration, on a rank
//     holding at most one request more than the fewest. Elsewhere its
//     prompt, computed whole, takes several iterations, in each of which
//     that rank sets the lock step for every rank (a 6144-token system
//     prompt on a 4096-token budget: two iterations, against one for the
//     new conversation's message on a holder of the prompt). Past one
//     request more than the fewest the conversation's later turns
//     outweigh that: a pure conversation workload would stack its
//     conversations on the prompt's first holders.
//   - count: as it brings its later turns with it, the fewest requests
//     (not room first: see ttftRoomShare).
//   - dup: in a burst of new conversations (ttftFreshBurst), not a
//     candidate that computes more than a share of TTFTDrainTokens
//     (ttftDupShare) beyond the least any candidate computes: a system
//     prompt ready elsewhere, computed whole again. Spread over such
//     candidates by homes, a burst computes its prompt on several ranks
//     in the same iteration, and every request of that iteration waits
//     for the longest. Outside a burst one such compute makes a new
//     holder for the turns to come.
//   - homes: the fewest recently active conversations, whose turns will
//     come back there.
//   - cost: the lower prediction.
type freshOrder struct {
	early, cold     bool
	free, next, dup bool
	count, homes    int
	cost            int64
}

// before reports whether candidate o goes before b.
func (o freshOrder) before(b freshOrder) bool {
	switch {
	case o.early && o.count != b.count:
		return o.count < b.count
	case o.early && o.cold != b.cold:
		return o.cold
	case o.free != b.free:
		return o.free
	case o.next != b.next:
		return o.next
	case o.count != b.count:
		return o.count < b.count
	case o.dup != b.dup:
		return b.dup
	case o.homes != b.homes:
		return o.homes < b.homes
	}
	return o.cost < b.cost
}

// warmsEarly reports whether a new conversation's turn warms ranks early:
// whether it goes to the fewest requests and, among those, to a rank that
// computes its prompt whole, though a holder of the prompt would take it
// within the iteration under way. That is so while the engine is light
// (fewer than ttftEarlyLoad active requests per rank), on more than
// ttftEarlyRanks ranks, for a turn whose prompt a holder has ready for at
// least an iteration's prefill (again: the most any candidate computes
// beyond the least, at least TTFTDrainTokens).
//
// Such a prompt, computed on a new rank, stalls the lock step for a whole
// iteration or more. Left to its holders while the engine is light, the
// conversations pile up there, and the other ranks take the prompt later,
// one at a time, each stall delaying every request of a loaded engine: on
// drawn shapes no rule was traced on (16 ranks, 4096-token prompts on
// 2048- and 4096-token budgets, 0.5 new conversations per second per
// rank) the fifteenth rank warmed 30 s in and the TTFT p99 was 4.5 times
// the conversation policy's, which spreads new conversations round robin
// and so warms every rank in the first 3 s at the same prefill; warmed
// early the cases went to 0.95-0.97 times. Rare conversations pay for it
// (0.1 per second per rank for 30 s on 16 ranks: 1.29 times the prefill of
// the KV-aware policy, which warms 6 ranks, and 1.82 times its p99, set by
// the clustered cold turns of a run of 218 requests): the router cannot
// tell the rate from a few first turns, and over the four held-out draws
// the early warming removed more misses than it added
// (docs/routing-quality.md, "Shapes drawn from other seeds"). On 4 ranks
// it added misses (1.08 and 1.22 times, a rank of four warmed late costs
// little), and from half an iteration on as well (the drawn grid's bursts
// of new conversations on 32 ranks: 0.39 to 1.39 times; see ROUTING.md,
// "Early warming").
func (r *Router) warmsEarly(again int64) bool {
	if len(r.count) <= ttftEarlyRanks || again < int64(r.cfg.TTFTDrainTokens) {
		return false
	}
	active := 0
	for _, c := range r.count {
		active += c
	}
	return active < ttftEarlyLoad*len(r.count)
}

// ttftEarlyLoad and ttftEarlyRanks bound warmsEarly: fewer than
// ttftEarlyLoad active requests per rank, more than ttftEarlyRanks ranks.
const (
	ttftEarlyLoad  = 2
	ttftEarlyRanks = 4
)

// A ttftCost predicts one request's time to first token on each rank, in
// prefill tokens.
//
// The ranks of an ADP engine step in lock step: every iteration each rank
// computes up to TTFTDrainTokens of its queued prefill, and the iteration
// lasts as long as the busiest rank's share. A request that brings the
// prefill queued on rank k to t tokens gets its first token after
// it = ceil(t/drain) iterations; the first it-1 are full, and the last lasts
// as long as the larger of its own remainder and the busiest rank's share of
// that iteration. So a rank whose queue ends within the iteration another
// rank's queue fills anyway is as fast as an idle one.
//
// To that wait the prediction adds what the request computes beyond the
// least any candidate rank would (less a block's grace): a prefix computed
// again — ready elsewhere, or in flight elsewhere — is work no rank would
// otherwise do, which takes GPU time and, in lock step, lengthens other
// ranks' iterations too. A rank that computes more wins only when its wait
// is shorter by more than that. The charge is waived when the request's
// family needs another rank (needsReplica), has outgrown holders that set
// the lock step (outgrown), or its prefix is still in flight
// (prefixInFlight), and the rank's queue with the request ends within the
// busiest rank's share of the next iteration (its queued prefill, at most
// TTFTDrainTokens): that iteration lasts as long anyway, and the new holder
// serves the family's later requests. Past the next iteration the rank's
// queue would hold the prefix's rest when the next decision's requests
// arrive. With the waiver reaching as far as the busiest rank's whole
// queue the Mooncake slices at six speeds on every engine shape missed 106
// of 924 cells against 97, and, with outgrown's waiver so too, a 64-tenant
// spike with 6144-token prompts on a 4096-token budget, each replica's
// second iteration in the way of later requests, went from 0.36 to 0.86
// times the KV-aware reference's TTFT p99 (the drawn grid's case=32, under
// ReuseOnSchedule; docs/routing-quality.md).
//
// Under ReuseOnSchedule a request not of a conversation, which computes
// more than a block on every candidate, pays a quarter of that charge
// (1/ttftScheduleShare) on a rank whose queue with it ends within the
// busiest rank's share of the next iteration: the replica is one compute
// in an iteration that lasts as long anyway, and the decision's later
// requests of its family on that rank reuse it as they are scheduled.
// A holder that sets the lock step then gives way to such a rank once its
// wait is longer by a quarter of the prefix. Without it a decision of 86
// requests, eight tenants' 512-token prompts beside conversations on 12
// ranks, stacked 1,872 uncached tokens on one holder while another rank
// computed 405: TTFT p99 1.23 times the best reference's, 0.94 with it (the
// drawn grid's case=38). Under ReuseAfterIteration each of those later
// requests would compute the prefix again (there a 64-tenant workload
// beside conversations went from 1.00 to 1.06 times with it), and a
// conversation's turn brings a context that serves no other request. Nor
// does a request that computes at most a block on some candidate (a
// sample of a prompt a rank holds): a quarter spread bursts of samples
// over ranks that each computed their prompt again, and an engine short of
// KV memory fell behind (the drawn grid's case=138 with jittered arrivals:
// TTFT p99 0.9 s became 18.6 s, its prefill 2.4 times as much).
//
// The prediction also adds a share (1/ttftRaiseShare) of what the request
// raises the next iteration beyond the busiest rank's share of it: in lock
// step that iteration lasts longer on every rank, and every other request
// whose prefill ends in it waits as much longer. The request's own wait
// does not show that cost; without it a rank that already sets the lock
// step takes a follow-up whenever the follow-up's own wait there is
// shortest, and the iteration grows for everyone. A rank whose queue ends
// within the busiest rank's share raises nothing.
type ttftCost struct {
	r          *Router
	b          *batch
	i          int
	row, ready []int
	onSchedule bool
	// replicate: needsReplica, outgrown or prefixInFlight for the
	// request; outgrown: by outgrown alone.
	replicate, outgrown bool
	// least is the fewest tokens any eligible, allowed rank computes for
	// the request; busiest the most prefill queued on any rank.
	least, busiest int64
	// filling: the fewest requests on a rank that computes least for the
	// request, where each such rank holds at least half its request slots
	// (see slotsFilling); 0 otherwise.
	filling int
}

// ttftCoster returns the predictor of request i's TTFT over the eligible,
// allowed ranks.
func (r *Router) ttftCoster(b *batch, i int, eligible []int, allow []bool, row, ready []int, onSchedule bool) ttftCost {
	c := ttftCost{r: r, b: b, i: i, row: row, ready: ready, onSchedule: onSchedule, least: -1,
		replicate: r.needsReplica(b, i) || r.prefixInFlight(b, i, row, ready)}
	// fewest: the fewest requests on a rank computing least (slotsFilling).
	fewest := 0
	for _, k := range eligible {
		if allowed(allow, k) {
			switch u := c.unc(k); {
			case c.least < 0 || u < c.least:
				c.least, fewest = u, r.count[k]
			case u == c.least:
				fewest = min(fewest, r.count[k])
			}
		}
	}
	c.least = max(c.least, 0)
	for _, v := range r.ttft.queued {
		c.busiest = max(c.busiest, v)
	}
	if !c.replicate {
		c.outgrown = r.outgrown(b, i, eligible, allow, c)
		c.replicate = c.outgrown
	}
	c.filling = r.slotsFilling(b, i, fewest, c)
	return c
}

// unc returns the tokens the request computes on rank k.
func (c ttftCost) unc(k int) int64 {
	return max(int64(c.b.reqs[c.i].Len()-usable(k, c.row, c.ready, c.onSchedule)), 0)
}

// wait returns the predicted wait, in prefill tokens, of a request that
// brings the prefill queued on its rank to t tokens (see ttftCost).
func (c ttftCost) wait(t int64) int64 {
	drain := int64(c.r.cfg.TTFTDrainTokens)
	it := max((t+drain-1)/drain, 1)
	done := (it - 1) * drain
	return done + max(t-done, min(max(c.busiest-done, 0), drain))
}

// idle returns the predicted wait of the request computing its whole prompt
// on a rank with nothing queued.
func (c ttftCost) idle() int64 { return c.wait(int64(c.b.reqs[c.i].Len())) }

// at returns the prediction for rank k (its wait, plus what it computes
// beyond the least, less a block, and its share of the raise it makes to the
// next iteration, unless those are waived), its wait alone, and the tokens
// the request computes there.
func (c ttftCost) at(k int) (cost, wait, unc int64) {
	unc = c.unc(k)
	t := c.r.ttft.queued[k] + unc
	wait = c.wait(t)
	within := t <= min(c.busiest, int64(c.r.cfg.TTFTDrainTokens))
	if c.replicate && within {
		return wait, wait, unc
	}
	if c.filling > 0 && unc > c.least && ttftSlotShare*c.r.count[k] <= c.filling && unc <= int64(c.r.cfg.TTFTDrainTokens) {
		return wait + c.raise(t)/ttftRaiseShare, wait, unc
	}
	again := max(unc-c.least-int64(c.r.cfg.TokensPerBlock), 0)
	if within && c.onSchedule && c.b.reqs[c.i].ConversationID == "" && c.least > int64(c.r.cfg.TokensPerBlock) {
		again /= ttftScheduleShare
	}
	return wait + c.raise(t)/ttftRaiseShare + again, wait, unc
}

// ttftScheduleShare: under ReuseOnSchedule a request not of a conversation
// (and not computing at most a block where its prompt is held) is charged
// 1/ttftScheduleShare of the prefix it computes again on a rank whose
// queue with it ends within the busiest rank's share of the next iteration
// (see ttftCost). Chosen on the simulator's evaluation grids
// (docs/routing-quality.md): the whole charge waived there took the drawn
// grid's prefill up by 1.8% (geometric mean), half of it left case=38
// missing.
const ttftScheduleShare = 4

// raise returns how much a rank whose queue comes to t tokens lengthens the
// next lock-step iteration: its share of that iteration beyond the busiest
// rank's.
func (c ttftCost) raise(t int64) int64 {
	drain := int64(c.r.cfg.TTFTDrainTokens)
	return max(min(t, drain)-min(c.busiest, drain), 0)
}

// ttftRaiseShare: a request is charged 1/ttftRaiseShare of the raise it makes
// to the next iteration (see ttftCost), for the other requests whose prefill
// ends in that iteration, which may be none. With the whole raise the
// simulator's evaluation grid missed more cells than without it; half
// missed fewer. Chosen on that grid, its seed shifts and jitter draws,
// judged with the held-out sweeps (docs/routing-quality.md).
const ttftRaiseShare = 2

// needsReplica reports whether request i's prompt family needs another rank
// to hold it: a family of the demand window whose share of it, applied to
// the active requests (this batch's counted), exceeds what the ranks the
// index expects to hold it take at the fair soft cap.
func (r *Router) needsReplica(b *batch, i int) bool {
	return r.familyExceeds(b, i, r.ttft.fair)
}

// rampWants reports whether a ramping router makes a replica of request i's
// prompt family: the family needs another rank (needsReplica) and fewer
// than ttftRampHolders ranks hold it, as the index expects.
func (r *Router) rampWants(b *batch, i int) bool {
	if !r.needsReplica(b, i) {
		return false
	}
	fam, _, _ := r.prefix.demand(&r.cfg, b, i)
	return r.prefix.idx.Replicas(fam) < ttftRampHolders
}

// familyExceeds reports whether request i's prompt family, a family of the
// demand window, takes more of the active requests (this batch's counted)
// by its share of the window than perRank for each rank the index expects
// to hold it.
func (r *Router) familyExceeds(b *batch, i, perRank int) bool {
	p := r.prefix
	if p.wfill == 0 {
		return false
	}
	fam, c, ok := p.demand(&r.cfg, b, i)
	if !ok {
		return false
	}
	share := float64(c) / float64(p.wfill)
	return share*float64(r.ttft.total) > float64(p.idx.Replicas(fam))*float64(perRank)
}

// outgrown reports whether request i, not a conversation's turn, belongs
// to a prompt family that has outgrown its holders while they set the lock
// step: its share of the demand window, applied to the active requests,
// exceeds a fair share of them (not the soft cap, as needsReplica's: a
// multiple of it) for each rank holding it, every rank that would compute
// least for it would take its queue past the busiest rank's, and this
// decision has not yet made a replica for that reason.
//
// Such a family's requests stack on its holders: each rank computes what
// its own families bring, and the holders' iteration is every rank's. A
// 512-token prompt with two fifths of the traffic, held by one of four
// ranks, took eight of a burst's seventeen requests there, and the next
// burst's six: 1.51 times the TTFT p99 of the conversation policy, which
// spreads by requests (the drawn grid's case=61). A replica on a rank whose
// queue with it ends within the next iteration costs no one time (see
// ttftCost); with one the cell is at 1.12 times. One per decision: each
// replica is free when it is made, but the decision's later requests fill
// the ranks anyway, and every replica adds a prompt to what they compute
// (two tenants on six ranks, bursts of 118 requests: three replicas in one
// took the TTFT p99 from 1.12 to 1.26 times the best reference's,
// case=114).
// A conversation's turn is left out: its family is its system prompt, but
// what its home holds is its whole context, which a replica would compute
// again for that one conversation, not for the family's later requests.
// Samples of one prompt, each a block or less beyond it, are left to
// stackedTails.
func (r *Router) outgrown(b *batch, i int, eligible []int, allow []bool, c ttftCost) bool {
	if r.ttft.outgrew || b.reqs[i].ConversationID != "" || c.least <= int64(r.cfg.TokensPerBlock) {
		return false
	}
	n := len(b.states)
	if !r.familyExceeds(b, i, (r.ttft.total+n-1)/n) {
		return false
	}
	holders := false
	for _, k := range eligible {
		if allowed(allow, k) && c.unc(k) == c.least {
			if r.ttft.queued[k]+c.least <= c.busiest {
				return false
			}
			holders = true
		}
	}
	return holders
}

// slotsFilling returns fewest, the fewest requests on an eligible, allowed
// rank that computes least for request i (a holder of its prefix), when
// each such rank holds at least 1/ttftSlotShare of its request slots, the
// request is not a conversation's turn and it computes more than a block
// on every candidate; 0 otherwise. ttftCost then waives the recompute
// charge on ranks holding at most 1/ttftSlotShare as many requests as
// that holder, where the request computes at most TTFTDrainTokens: it
// computes the prefix again there when its own wait, with the lock
// step's raise, is shorter. A longer prompt would stall the lock step for more than one
// iteration, each in the way of later requests (a 64-tenant spike of
// 6144-token prompts on a 4096-token budget went from 0.18 to 0.86 times
// the best reference's TTFT p99 when such replicas were waived too).
//
// A rank's request slots (max_num_active_requests) fill with its
// requests' decoding, which the predicted TTFT does not see: a holder
// whose queue is short takes a family's requests until its slots are
// full, while ranks without the family carry a few requests each. When
// the holders are full, every request computes the prompt wherever slots
// are left, and the family is replicated all at once, under the load that
// filled the holders. Two tenants' 1024-token prompts beside
// conversations on 16 ranks, a spike of 200 requests per second after a
// quiet period (64 slots per rank): the spike ran on the 8 ranks holding
// a prompt for 2.3 s while 8 ranks carried 3-5 conversations each; then
// 16 replicas followed, 10 of them in the spike's last second, with
// conversations' turns leaving their full homes (8.9k tokens of context
// computed again), iterations of 87 ms instead of 45 and TTFT p99 2.86
// times the conversation policy's, which spreads by request counts (shapes
// 7's case=86). Replicated while the holders fill, at half their slots,
// the family spreads over the idle ranks early: 1.15 times
// (docs/routing-quality.md, "Shapes drawn from other seeds").
func (r *Router) slotsFilling(b *batch, i, fewest int, c ttftCost) int {
	if b.reqs[i].ConversationID != "" || c.least <= int64(r.cfg.TokensPerBlock) || ttftSlotShare*fewest < b.maxn {
		return 0
	}
	return fewest
}

// ttftSlotShare: a family's holders at 1/ttftSlotShare of their request
// slots or more let ranks holding at most 1/ttftSlotShare as many
// requests compute its prefix again uncharged (see slotsFilling). A
// quarter of the slots took shapes 1's case=114 (two tenants on 8 ranks)
// from 1.12 to 1.40 times the best reference's TTFT p99.
const ttftSlotShare = 2

// prefixInFlight reports whether request i's prefix is still being
// computed: its longest prefix as the index knows it
// (counting this decision's placements and prefixes not computed yet) is
// more than a block longer than the longest any rank has computed, as the
// probe shows it, and the request computes more than a block beyond it.
//
// The ranks computing that prefix set the lock step while they do: a
// request that joins one (reusing the prefix as it is scheduled, under
// ReuseOnSchedule) lengthens the busiest rank's iteration by its own part,
// and every rank waits for it. On a rank whose queue, with the prefix
// computed again, still ends within the busiest rank's share, it adds
// nothing to any iteration, so ttftCost waives the recompute charge there, as
// for a family that needs another rank: a new tenant's first requests in a
// spike spread over the ranks instead of stacking on the one computing
// its prompt. Samples of one prompt (beyond the prefix only a partial
// block each) are left to stackedTails, which shares a rank while their
// tails add up to a block. Without a probe the index's match is all the
// router knows, and nothing is in flight.
func (r *Router) prefixInFlight(b *batch, i int, row, ready []int) bool {
	known, computed := 0, 0
	for k := range row {
		known, computed = max(known, row[k]), max(computed, ready[k])
	}
	block := r.cfg.TokensPerBlock
	return known > computed+block && b.reqs[i].Len()-known > block
}

// rampRank returns the eligible, allowed rank that does not hold request i's
// prompt family (as the index knows it) with the least prefill queued, then
// the fewest requests, then the lowest index; -1 when every candidate holds
// it.
func (r *Router) rampRank(b *batch, i int, eligible []int, allow []bool) int {
	fam, _, _ := r.prefix.demand(&r.cfg, b, i)
	queued := r.ttft.queued
	best := -1
	for _, k := range eligible {
		if !allowed(allow, k) || r.prefix.idx.Has(k, fam) {
			continue
		}
		if best < 0 || queued[k] < queued[best] || (queued[k] == queued[best] && r.count[k] < r.count[best]) {
			best = k
		}
	}
	return best
}

// roomRank returns the rank that takes request i's prompt family when every
// rank holding the family has filled its KV pool while another is mostly
// empty: the eligible, allowed rank not holding the family whose pool is
// at most half full, the least filled, then the one with least prefill
// queued, then the lowest index; -1 when there is none, when some holder has
// room for the request, when the family is not in demand (see
// prefixState.demand), when a holder has computed more than half an
// iteration (ttft_drain_tokens) of the request's prompt, or when the
// request's computed prefix is its own context rather than its family's
// (more than half its prompt, its last block on a single rank).
//
// routeTTFT asks it once per decision. Where the decision brings other
// requests than this one (lone false), the request must also compute at
// least three quarters of its prompt on its holders: the replica's prompt
// is computed whole, a stall of the lock step that every other request of
// the decision waits for, and a request that computes most of its prompt
// anyway stalls it nearly as long where it is (the replica adds at most a
// third to its own). Of a mostly cached prompt it is a stall of its own:
// 12 requests of a 4096-token prompt held by 6 of 12 ranks waited 181 ms
// each for one, against 61 ms for such a burst left on the holders (the
// drawn grid's case=55). Of a mostly uncached one it pays where its KV
// would evict a full holder's cached prefixes: in Mooncake's synthetic
// slice replayed twice as fast at half length on 1k-block pools (ranks
// reporting their pending KV), a 15.7k-token prompt reusing 2.7k tokens
// of the family's one holder, which came with 4 other requests, evicted
// there a 15.1k-token prefix that a request 234 ms later computed again
// (prefill 1.23 times the best reference's, 1.18 with the replica).
//
// Fill is as the index knows it: the blocks placed on a rank against its
// bound (the KV capacity the rank reports), so a full holder is one where
// every new block evicts a cached one. At light load the predicted TTFT
// keeps every request of a family on its holders, whose queues are empty
// and which compute least; they then serve all the traffic, and their pools
// evict conversation contexts and prefixes that are computed again, while
// other ranks' pools stay empty. One replica moves the family's next
// requests to a rank with room at the cost of its prefix once. On mixed
// traces (shared prompts, conversations with in-flight follow-ups, a
// tenant spike among conversations) replayed on 4 ranks, this took the
// worst TTFT p99 from 1.39 to 1.25 times the best reference's, and left
// the evaluation grid's generated cases, where pools rarely fill while a
// rank stays empty, as they were (docs/routing-quality.md).
//
// A prefix longer than half an iteration stays on its holders: computed
// again at light load, where no other rank's queue fills the iteration, it
// is a stall of the lock step of its own, and a holder's full index is
// then mostly its requests' own tails, never reused, not the contexts and
// prefixes the replica is for: each new holder's fills as the others' did,
// and the replicas follow one another. One 4096-token system prompt with
// 64-1024-token messages on 16 ranks at 2 requests per second per rank,
// with a 4096-token iteration budget, made one every 10 s or so, each a
// stall of some 210 ms (see ttftRampLoad). The Mooncake slices' replicas
// for room move requests that reuse a few hundred tokens of prompts
// thousands long; a 2048-token shared prompt beside follow-ups on an
// 8192-token budget (the mixed traces) still gets its replica.
func (r *Router) roomRank(b *batch, i int, eligible []int, allow []bool, ready []int, lone bool) int {
	p := r.prefix
	fam, _, ok := p.demand(&r.cfg, b, i)
	if !ok {
		return -1
	}
	tpb := r.cfg.TokensPerBlock
	n := b.reqs[i].Len()
	need := (n + tpb - 1) / tpb
	holders, held := 0, 0
	for k := range b.states {
		if !p.idx.Has(k, fam) {
			continue
		}
		if p.idx.Blocks(k)+need <= p.idx.Limit(k) {
			return -1
		}
		holders++
		held = max(held, ready[k])
	}
	if holders == 0 {
		return -1
	}
	if 2*held > r.cfg.TTFTDrainTokens || (!lone && 4*held > n) {
		return -1
	}
	if 2*held > n {
		// A prefix held on one rank only is a context (a conversation's),
		// not the family's: moving would compute it again.
		hs := p.hashesOf(&r.cfg, b, i)
		if d := held / tpb; d == 0 || d > len(hs) || p.idx.Replicas(hs[d-1]) < 2 {
			return -1
		}
	}
	queued := r.ttft.queued
	best := -1
	for _, k := range eligible {
		if !allowed(allow, k) || p.idx.Has(k, fam) || 2*p.idx.Blocks(k) > p.idx.Limit(k) {
			continue
		}
		if best < 0 {
			best = k
			continue
		}
		if fk, fb := p.idx.Blocks(k), p.idx.Blocks(best); fk < fb || (fk == fb && queued[k] < queued[best]) {
			best = k
		}
	}
	return best
}

// idleRank returns the eligible rank with room (allow) that carries nothing:
// no active request or token reported, none placed by this decision; of
// several, the one matching the longest prefix of the request (row), then
// the lowest index. -1 when there is none.
//
// Past the KV memory (memoryBound) a request goes to it first. The
// reference's score keeps a family's requests on its holders, which compute
// least of each prompt, however long they wait there for memory that
// decoding requests free; a rank with nothing active has its whole pool
// free and computes the prompt in the next iterations, and once it holds
// the prefix the score itself sends it the family's next requests (its
// load term is the lowest). One 6144-token prompt with user messages of up
// to 4096 tokens on 16 ranks with a 2048-token budget and 2048-block pools,
// in bursts of 8 (the drawn grid's shapes 5, case=9): the prediction kept
// every request on 10 ranks, whose pools overflowed 4 s in, and 6 ranks
// stayed empty for the whole run. Under after-iteration reuse the TTFT p99
// was 9.86 times conversation's (4.3 s against 436 ms); with the idle ranks
// taking requests, 1.18 (docs/routing-quality.md). A rank that carries
// anything is left to the score: its pool may be the next to overflow.
func (r *Router) idleRank(b *batch, eligible []int, allow []bool, row []int) int {
	best := -1
	for _, k := range eligible {
		if r.count[k] > 0 || b.states[k].NumActiveTokens > 0 || !allowed(allow, k) {
			continue
		}
		if best < 0 || row[k] > row[best] || (row[k] == row[best] && k < best) {
			best = k
		}
	}
	return best
}

// bound reports whether q's conversation is bound to a rank: such a turn
// carries its conversation's context, which warming a cold rank with it
// would compute again.
func (r *Router) bound(q *Request) bool {
	if q.ConversationID == "" {
		return false
	}
	_, ok := r.conv.Get(q.ConversationID)
	return ok
}

// hasRoom reports whether a rank reports at least 1/ttftRoomShare of its KV
// pool free, or reports no pool.
func hasRoom(s *RankState) bool {
	return s.KVCapacityTokens <= 0 || s.FreeKVTokens*ttftRoomShare >= s.KVCapacityTokens
}

// ttftRoomShare: among ranks a request's prediction ties, one with at least
// 1/ttftRoomShare of its KV pool free goes first where some rank holds the
// request's prefix. The prediction counts queued prefill, not memory: a
// rank with few requests but a pool nearly full (one long request holding
// it) makes the queue there wait for blocks while a rank with more,
// shorter requests computes (a Mooncake conversation slice five times
// faster: 9k of 131k tokens free, 2.64× the best reference's TTFT p99).
// A prompt no rank holds is left to request counts: there the free KV
// of a rank says little about its queue, and preferring it unbalanced
// unique prompts (docs/routing-quality.md). So is a new conversation,
// whose later turns follow it and whose pool it fills over minutes: room
// first there took follow-ups beside tenants on 32k-token pools from
// 0.88× to 1.69× the best reference's TTFT p99.
const ttftRoomShare = 8

// spreads reports whether rank k is a better home than rank best for a
// request both serve equally well: the one serving fewer requests (each
// lengthens every lock-step iteration a little while it decodes, and the
// busiest rank sets the iteration for all), then the one whose prefix cache
// holds fewer blocks, so that prompt families spread over every rank instead
// of piling on the lowest ones.
func (r *Router) spreads(k, best int) bool {
	if r.count[k] != r.count[best] {
		return r.count[k] < r.count[best]
	}
	return r.prefix.idx.Blocks(k) < r.prefix.idx.Blocks(best)
}

// newFamiliesLast moves the prompt groups of rest (as explicitPass's sort
// left them: see groupStarts) that no rank holds a block of (see
// heldAnywhere) behind the others, each part keeping its order.
//
// A request of a new family computes its whole prompt wherever it goes, so
// every rank serves it alike, while a request whose prefix some rank holds
// is all but bound to that rank. Placed first, as the longest prompts, the
// new family's requests take the ranks the others' holders then queue
// behind, and that rank's iteration sets every rank's; placed last, they
// go to the ranks the bound requests left shortest. A decision with no
// prefix held anywhere (unique prompts) keeps its order.
func (r *Router) newFamiliesLast(b *batch, rest []int) {
	held, fresh := r.ttft.held[:0], r.ttft.fresh[:0]
	starts := r.groups.groupStarts()
	for k, s := range starts {
		e := len(rest)
		if k+1 < len(starts) {
			e = starts[k+1]
		}
		group := rest[s:e]
		if slices.ContainsFunc(group, func(i int) bool { return r.heldAnywhere(b, i) }) {
			held = append(held, group...)
		} else {
			fresh = append(fresh, group...)
		}
	}
	if len(held) > 0 && len(fresh) > 0 {
		copy(rest, held)
		copy(rest[len(held):], fresh)
	}
	r.ttft.held, r.ttft.fresh = held, fresh
}

// freshRequests returns how many of the decision's requests belong to
// conversations not bound to a rank yet.
func (r *Router) freshRequests(b *batch) int {
	n := 0
	for i := range b.reqs {
		if q := &b.reqs[i]; q.ConversationID != "" && !r.bound(q) {
			n++
		}
	}
	return n
}

// heldAnywhere reports whether some rank holds the first block of request
// i's prompt by the configured prefix source (a probed match, or the
// router's index), which is whether matchRow would find any match: one
// lookup rather than the whole chain.
func (r *Router) heldAnywhere(b *batch, i int) bool {
	if r.cfg.PrefixSource != SourceIndex && b.matches != nil {
		size := len(b.states)
		if slices.ContainsFunc(b.matches[i*size:(i+1)*size], func(m int32) bool { return m > 0 }) {
			return true
		}
	}
	if r.cfg.PrefixSource == SourceIndex || r.cfg.PrefixSource == SourceProbeIndex {
		hs := r.prefix.hashesOf(&r.cfg, b, i)
		return len(hs) > 0 && r.prefix.idx.Replicas(hs[0]) > 0
	}
	return false
}

// tailPlaced records, before request i is placed on rank k, the tokens it
// computes there when it reuses a prefix there and computes at most a
// block: a tail (see stackedTails).
func (r *Router) tailPlaced(b *batch, i, k int, row, ready []int, onSchedule bool) {
	if !r.tailFamily(b, i) {
		return
	}
	if m := usable(k, row, ready, onSchedule); m > 0 {
		if u := max(b.reqs[i].Len()-m, 0); u <= r.cfg.TokensPerBlock {
			r.ttft.tails[k] += int64(u)
		}
	}
}

// tailFamily makes request i's prompt family (its first block's hash) the
// one whose tails r.ttft.tails counts, clearing them when it changes; false
// for a prompt shorter than a block. The decision places a family's
// requests one after another, so the count is that family's.
func (r *Router) tailFamily(b *batch, i int) bool {
	hs := r.prefix.hashesOf(&r.cfg, b, i)
	if len(hs) == 0 {
		return false
	}
	if hs[0] != r.ttft.tailFam {
		r.ttft.tailFam = hs[0]
		clear(r.ttft.tails)
	}
	return true
}

// stackedTails returns the candidates for request i: eligible, less the
// ranks where the tails of its prompt family's requests placed in this
// decision, its own counted, would add up to more than a block while that
// rank's queue with it would be the longest, when another candidate's
// predicted wait is no longer (see "Stacked tails" above), and more such
// candidates than the prompt families still to place in the decision (next,
// the requests after it): each of those computes its prompt somewhere too,
// and a rank this family takes is one they cannot. A bound conversation's
// turn keeps its candidates: its home holds its context.
func (r *Router) stackedTails(b *batch, i int, next, eligible []int, allow []bool, row, ready []int, onSchedule bool) []int {
	if !r.tailFamily(b, i) || !slices.ContainsFunc(r.ttft.tails, func(t int64) bool { return t > 0 }) || r.bound(&b.reqs[i]) {
		return eligible
	}
	queued := r.ttft.queued
	// The longest queue, and the longest but one.
	first, second := int64(-1), int64(-1)
	for _, v := range queued {
		if v > first {
			first, second = v, first
		} else if v > second {
			second = v
		}
	}
	block, n := int64(r.cfg.TokensPerBlock), b.reqs[i].Len()
	out, over := r.ttft.narrowed[:0], false
	for _, k := range eligible {
		other := first
		if queued[k] == first {
			other = second
		}
		m := usable(k, row, ready, onSchedule)
		u := int64(max(n-m, 0))
		if allowed(allow, k) && m > 0 && u <= block && r.ttft.tails[k]+u > block && queued[k]+u > other {
			over = true
			continue
		}
		out = append(out, k)
	}
	r.ttft.narrowed = out
	if !over || len(out) == 0 {
		return eligible
	}
	// The least wait on a rank taken out, against the least on the others.
	all := r.ttftCoster(b, i, eligible, allow, row, ready, onSchedule)
	least := int64(-1)
	for _, k := range eligible {
		if allowed(allow, k) && !slices.Contains(out, k) {
			if _, w, _ := all.at(k); least < 0 || w < least {
				least = w
			}
		}
	}
	free := 0
	for _, k := range out {
		if allowed(allow, k) {
			if _, w, _ := all.at(k); w <= least {
				free++
			}
		}
	}
	if free > 0 && free > r.familiesIn(b, next, free) {
		return out
	}
	return eligible
}

// familiesIn counts the prompt families (first block's hash) among requests
// reqs, whose families follow one another, beyond the current one
// (r.ttft.tailFam), up to limit.
func (r *Router) familiesIn(b *batch, reqs []int, limit int) int {
	n, last := 0, r.ttft.tailFam
	for _, j := range reqs {
		if n >= limit {
			break
		}
		if hs := r.prefix.hashesOf(&r.cfg, b, j); len(hs) > 0 && hs[0] != last {
			n, last = n+1, hs[0]
		}
	}
	return n
}
