package router

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func ttftCfg(size int, reuse EngineReuse) Config {
	c := DefaultConfig(PolicyKVCacheAware, size)
	c.PrefixSource, c.Score, c.EngineReuse = SourceProbeIndex, ScoreTTFT, reuse
	return c
}

// quietTTFTCfg is ttftCfg under after-iteration reuse with quiet warmup,
// the recommended preset's warmup.
func quietTTFTCfg(size int) Config {
	c := ttftCfg(size, ReuseAfterIteration)
	c.Warmup = WarmupQuiet
	return c
}

// extend returns a request whose prompt is base followed by n-len(base)
// tokens of its own.
func extend(id uint64, base []int32, extra int) Request {
	t := append(append([]int32(nil), base...), make([]int32, extra)...)
	for i := len(base); i < len(t); i++ {
		t[i] = int32(1_000_000*int(id) + i)
	}
	return Request{ID: id, Tokens: t, TargetRank: NoTarget}
}

// A follow-up whose prefix was placed on a rank by an earlier call: where it
// goes depends on whether that prefix is ready (the probe says so) and, if
// not, on whether the engine reuses blocks still being computed.
func TestTTFTInFlightPrefix(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reuse  EngineReuse
		drain  int
		ready  bool // the probe reports the prefix computed on its rank
		filler int  // tokens of a request sent to that rank just before; -1: the rank reports itself idle
		home   bool // want the follow-up on the first request's rank
	}{
		{"in flight, after_iteration: computed again anyway, so anywhere else", ReuseAfterIteration, 0, false, 0, false},
		{"in flight, on_schedule: reused behind it", ReuseOnSchedule, 0, false, 0, true},
		{"ready, after_iteration", ReuseAfterIteration, 0, true, 0, true},
		{"in flight, on_schedule, its rank's queue within a block of the prompt: reused behind it", ReuseOnSchedule, 1, false, 0, true},
		{"in flight, on_schedule, its rank's queue longer than the prompt", ReuseOnSchedule, 1, false, 400, false},
		{"ready, after_iteration, queue shorter than the saving", ReuseAfterIteration, 1, true, 0, true},
		// 768 tokens of the prefix queued in whole iterations of 256
		// before the follow-up's first: computed by then, so reused.
		{"in flight for whole iterations, after_iteration: reused behind it", ReuseAfterIteration, 256, false, 0, true},
		// The rank reports nothing active: the index's record outlived the
		// blocks, and nothing queued there computes them.
		{"in flight per the index, nothing queued, after_iteration", ReuseAfterIteration, 256, false, -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ttftCfg(4, tc.reuse)
			if tc.drain > 0 {
				cfg.TTFTDrainTokens = tc.drain
			}
			r := mustNew(t, cfg)
			first := req(1, 1024)
			res := mustRoute(t, r, idle(4), []Request{first}, 8, make([]int32, 4))
			home := res.Ranks[0]
			// The first request is active on its rank; the follow-up shares
			// its 1024 tokens and adds 100 (drain 1: its whole prefill,
			// 1024 tokens, is still queued there).
			states := idle(4)
			if tc.filler >= 0 {
				states[home] = RankState{Rank: home, NumActiveRequests: 1, NumActiveTokens: 1024}
			}
			m := make([]int32, 4)
			if tc.ready {
				m[home] = 992 // whole blocks of the prompt minus its last token
			}
			if tc.drain > 0 && tc.ready {
				// A queue of 1023 tokens but a saving of 992: still home.
				states[home].NumActiveTokens = 900
			}
			batch := []Request{extend(2, first.Tokens, 100)}
			if tc.filler > 0 {
				// Placed first (an explicit target), queued before it.
				batch = []Request{targeted(3, tc.filler, home, true), batch[0]}
				m = append(make([]int32, 4), m...)
			}
			res = mustRoute(t, r, states, batch, 8, m)
			if got := res.Ranks[len(batch)-1] == home; got != tc.home {
				t.Errorf("follow-up on rank %d, first request on %d: want same rank = %v", res.Ranks[len(batch)-1], home, tc.home)
			}
		})
	}
}

// holderBatch returns a batch for 3 ranks ending in q, whose first held
// tokens rank 1 holds (the match table says so): before it, busiest tokens
// queued on rank 0 (none when 0) and holder tokens on rank 1, each a strict
// explicit target.
func holderBatch(q Request, held int32, busiest, holder int) ([]Request, []int32) {
	var batch []Request
	if busiest > 0 {
		b := extend(1, nil, busiest)
		b.TargetRank, b.Strict = 0, true
		batch = append(batch, b)
	}
	h := extend(2, nil, holder)
	h.TargetRank, h.Strict = 1, true
	batch = append(batch, h, q)
	m := make([]int32, 3*len(batch))
	m[3*(len(batch)-1)+1] = held
	return batch, m
}

// Samples of one prompt in one batch: under after_iteration each computes
// the prompt wherever it goes, so they spread (TensorRT-LLM); under
// on_schedule they pair up; the reference score with probe+index piles them
// onto one rank.
func TestTTFTSiblings(t *testing.T) {
	base := prompt(2048)
	reqs := []Request{extend(1, base, 0), extend(2, base, 0), extend(3, base, 0), extend(4, base, 0)}
	used := func(res *Result) int {
		n := 0
		for _, ids := range res.Assignment {
			if len(ids) > 0 {
				n++
			}
		}
		return n
	}
	busy := st([2]int64{0, 10000}, [2]int64{0, 10000}, [2]int64{0, 10000}, [2]int64{0, 10000})
	ref := DefaultConfig(PolicyKVCacheAware, 4)
	ref.PrefixSource, ref.FairShareMultiplier = SourceProbeIndex, 4
	if n := used(mustRoute(t, mustNew(t, ref), busy, reqs, 8, make([]int32, 16))); n != 1 {
		t.Errorf("reference score with probe+index: siblings on %d ranks, want 1", n)
	}
	cfg := ttftCfg(4, ReuseAfterIteration)
	cfg.FairShareMultiplier = 4
	if n := used(mustRoute(t, mustNew(t, cfg), busy, reqs, 8, make([]int32, 16))); n != 4 {
		t.Errorf("ttft score: siblings on %d ranks, want 4", n)
	}
	// Under on_schedule a sibling beside the first computes only the
	// prompt's last block: the second stays. The third's tail would make
	// two blocks stacked on the rank that sets the lock step, so it takes
	// another rank, where the fourth joins it (TestTTFTStackedTails).
	cfg.EngineReuse = ReuseOnSchedule
	if n := used(mustRoute(t, mustNew(t, cfg), busy, reqs, 8, make([]int32, 16))); n != 2 {
		t.Errorf("ttft score, on_schedule: siblings on %d ranks, want 2", n)
	}
}

// Samples of one prompt in one decision, each computing only its last
// partial block (its tail) beside another: the tails stacked on one rank
// lengthen its prefill, and when that rank sets the lock step, every
// rank's iteration. Up to a block of them is a tie; beyond it, a sample
// goes where it waits no longer, computing the prompt again.
func TestTTFTStackedTails(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reuse  EngineReuse
		n      int  // prompt tokens; the tail is n-1 mod 32, plus one
		ready  bool // rank 0 has computed the prompt (the probe says so)
		filler int  // tokens queued on rank 3 first
		want   int  // ranks the four samples use
	}{
		{"tails of a block, idle ranks: pairs", ReuseOnSchedule, 2048, false, 0, 2},
		{"tails of 31 tokens, idle ranks: pairs", ReuseOnSchedule, 2047, false, 0, 2},
		{"one-token tails add up to less than a block: together", ReuseOnSchedule, 2017, false, 0, 1},
		{"another rank sets the lock step: together", ReuseOnSchedule, 2048, false, 4000, 1},
		{"after_iteration, in flight: computed again anyway, spread", ReuseAfterIteration, 2048, false, 0, 4},
		{"after_iteration, ready on rank 0: elsewhere they would wait longer", ReuseAfterIteration, 2048, true, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ttftCfg(4, tc.reuse)
			cfg.FairShareMultiplier = 4 // no soft cap in the way
			cfg.Explain = true
			r := mustNew(t, cfg)
			var batch []Request
			if tc.filler > 0 {
				q := extend(10, nil, tc.filler)
				q.TargetRank, q.Strict = 3, true
				batch = append(batch, q)
			}
			base := prompt(tc.n)
			first := len(batch)
			for id := range 4 {
				batch = append(batch, extend(uint64(id+1), base, 0))
			}
			m := make([]int32, 4*len(batch))
			if tc.ready {
				for i := first; i < len(batch); i++ {
					m[4*i] = int32((tc.n - 1) / 32 * 32)
				}
			}
			res := mustRoute(t, r, idle(4), batch, 8, m)
			ranks := map[int]bool{}
			for _, k := range res.Ranks[first:] {
				ranks[k] = true
			}
			if len(ranks) != tc.want {
				t.Errorf("samples on ranks %v, want %d ranks", res.Ranks[first:], tc.want)
			}
			// The receipts name the rank a sample left for its
			// stacked tails.
			left := 0
			rcs := r.Receipts()
			if err := checkReceipts(cfg, idle(4), batch, res, rcs); err != nil {
				t.Fatal(err)
			}
			for _, rc := range rcs[first:] {
				for _, c := range rc.Candidates {
					if c.Excluded == ExcludedStackedTails {
						left++
					}
				}
			}
			if pairs := tc.want == 2; (left > 0) != pairs {
				t.Errorf("%d candidates excluded for stacked tails, want some: %v", left, pairs)
			}
		})
	}
}

// A second prompt family in the decision needs a rank of its own: the first
// family's samples leave one for it instead of pairing up on every rank,
// where the second would stack its prompt on top of theirs.
func TestTTFTStackedTailsLeaveRoom(t *testing.T) {
	cfg := ttftCfg(4, ReuseOnSchedule)
	cfg.FairShareMultiplier = 4
	r := mustNew(t, cfg)
	a, b := prompt(2048), extend(99, nil, 2048).Tokens
	var batch []Request
	for id := range 8 {
		batch = append(batch, extend(uint64(id+1), a, 0))
	}
	batch = append(batch, extend(9, b, 0), extend(10, b, 0))
	res := mustRoute(t, r, idle(4), batch, 16, make([]int32, 4*len(batch)))
	first := map[int]bool{}
	for _, k := range res.Ranks[:8] {
		first[k] = true
	}
	if len(first) != 3 {
		t.Errorf("first family on ranks %v, want 3 ranks", res.Ranks[:8])
	}
	for _, k := range res.Ranks[8:] {
		if first[k] || k != res.Ranks[8] {
			t.Errorf("second family on ranks %v, want one rank the first does not use (%v)", res.Ranks[8:], res.Ranks[:8])
			break
		}
	}
}

// A conversation stays on its rank past the soft cap (its requests mostly
// decode), up to the hard cap; a new conversation goes to the rank with the
// fewest requests even when another caches the shared system prompt (whole,
// the prompt fits one iteration: TestTTFTNewConversationNextIteration), but not
// to wait there behind another new conversation computing that prompt: under
// after_iteration the prompt in flight is no help, and the second would wait
// longer than on an idle rank.
func TestTTFTConversations(t *testing.T) {
	system := prompt(512)
	for _, tc := range []struct {
		name   string
		active int // requests active on the conversation's rank
		maxn   int
		stay   bool
	}{
		{"past the soft cap", 6, 8, true},
		{"at the hard cap", 8, 8, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustNew(t, ttftCfg(2, ReuseAfterIteration))
			q := extend(1, system, 300)
			q.ConversationID = "c"
			home := mustRoute(t, r, idle(2), []Request{q}, tc.maxn, make([]int32, 2)).Ranks[0]
			states := idle(2)
			states[home].NumActiveRequests = tc.active
			next := extend(2, q.Tokens, 50)
			next.ConversationID = "c"
			m := make([]int32, 2)
			m[home] = int32(len(q.Tokens) / 32 * 32)
			got := mustRoute(t, r, states, []Request{next}, tc.maxn, m).Ranks[0]
			if (got == home) != tc.stay {
				t.Errorf("next turn on %d, home %d: want stay = %v", got, home, tc.stay)
			}
		})
	}

	r := mustNew(t, ttftCfg(2, ReuseAfterIteration))
	states := st([2]int64{3, 0}, [2]int64{1, 0})
	a, b := extend(1, system, 100), extend(2, system, 120)
	a.ConversationID, b.ConversationID = "a", "b"
	m := []int32{512, 0, 512, 0} // rank 0 caches the system prompt
	// b, the longer, is placed first: rank 1, with the fewest requests. a
	// would wait there behind b's cold prompt: rank 0, which has it ready.
	res := mustRoute(t, r, states, []Request{a, b}, 8, m)
	if res.Ranks[0] != 0 || res.Ranks[1] != 1 {
		t.Errorf("new conversations on %v, want [0 1]: b to the fewest requests, a not behind b's cold prompt", res.Ranks)
	}
	// A third rank, as few requests, idle and cold: computing the whole
	// prompt there is within the bound, so a goes there.
	r = mustNew(t, ttftCfg(3, ReuseAfterIteration))
	states = st([2]int64{3, 0}, [2]int64{1, 0}, [2]int64{1, 0})
	res = mustRoute(t, r, states, []Request{a, b}, 8, []int32{512, 0, 0, 512, 0, 0})
	if res.Ranks[0] != 2 || res.Ranks[1] != 1 {
		t.Errorf("new conversations on %v, want [2 1]: the fewest requests among the ranks within the bound", res.Ranks)
	}
}

// The predicted TTFT of the recommended score: ranks step in lock step, so a
// rank whose queue ends within the iteration the busiest rank fills anyway
// is as fast as an idle one, and a rank that would compute a prefix cached
// elsewhere again pays for that work. A request leaves the rank holding its
// prefix only when that saves it a whole iteration or more.
func TestTTFTLockStepPrediction(t *testing.T) {
	const drain = 8192
	for _, tc := range []struct {
		name            string
		busiest, holder int // prefill queued on rank 0 and on rank 1, which holds the prefix
		leaves          bool
	}{
		{"holder's queue ends within the busiest rank's iteration: stays", 6000, 3000, false},
		{"holder's queue under the recompute: stays", 0, 500, false},
		{"holder's queue over the recompute but within one iteration: stays", 0, 3000, false},
		{"holder a full iteration behind: an idle rank computes the prefix again", 0, 12000, true},
		{"holder and busiest over one iteration: the idle rank", 12000, 12000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ttftCfg(3, ReuseAfterIteration)
			cfg.TTFTDrainTokens = drain
			r := mustNew(t, cfg)
			// Every rank is active (no warmup), with room for the queues.
			states := st([2]int64{1, 1 << 20}, [2]int64{1, 1 << 20}, [2]int64{1, 1 << 20})
			// The request: 1000 tokens, 960 of them ready on rank 1.
			batch, m := holderBatch(extend(9, prompt(960), 40), 960, tc.busiest, tc.holder)
			res := mustRoute(t, r, states, batch, 8, m)
			got := res.Ranks[len(batch)-1]
			if (got != 1) != tc.leaves || (tc.leaves && tc.busiest > 0 && got != 2) {
				t.Errorf("request on rank %d, holder 1, busiest 0: want leaves = %v", got, tc.leaves)
			}
		})
	}
}

// A rank whose queue with the request passes the busiest rank's share of the
// next iteration lengthens that iteration for every rank: the prediction
// charges half that raise. The request has 1000 tokens; rank 0 has 6000
// queued; rank 1 holds 512 of the request's tokens (computes 488) behind
// `holder` queued; rank 2 is idle and would compute all 1000, predicted
// 6000 + (1000 - 488 - 32) = 6480. On rank 1 the request ends at
// holder + 488: up to 6512 a tie with rank 2 (within a block), which the
// rank computing less wins; with half of what passes 6000 added, it leaves
// from 6342 on (holder 5854).
func TestTTFTLockStepRaise(t *testing.T) {
	for _, tc := range []struct {
		name   string
		holder int
		leaves bool
	}{
		{"holder's queue ends within the busiest rank's: stays", 5400, false},
		{"holder raises the iteration by 300: stays", 5812, false},
		{"holder raises the iteration by 420: leaves", 5932, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ttftCfg(3, ReuseAfterIteration)
			cfg.TTFTDrainTokens = 8192
			r := mustNew(t, cfg)
			states := st([2]int64{1, 1 << 20}, [2]int64{1, 1 << 20}, [2]int64{1, 1 << 20})
			busiest := extend(1, nil, 6000)
			busiest.TargetRank, busiest.Strict = 0, true
			h := extend(2, nil, tc.holder)
			h.TargetRank, h.Strict = 1, true
			q := extend(9, prompt(512), 488)
			m := make([]int32, 9)
			m[3*2+1] = 512
			res := mustRoute(t, r, states, []Request{busiest, h, q}, 8, m)
			if got := res.Ranks[2]; (got != 1) != tc.leaves || (tc.leaves && got != 2) {
				t.Errorf("request on rank %d, holder 1, busiest 0, idle 2: want leaves = %v", got, tc.leaves)
			}
		})
	}
}

// Under on_schedule reuse a request not of a conversation pays a quarter of
// the prefix it would compute again on a rank whose queue with it ends
// within the busiest rank's share of the next iteration. As in
// TestTTFTLockStepRaise: the request has 1000 tokens, rank 1 holds 512 of
// them behind `holder` queued, rank 2 is idle and `busiest` is queued on
// rank 0. With the whole charge rank 2 is predicted at busiest + 480 and the
// holder at busiest + 1.5 × its raise (x): it stays up to x = 341. With a
// quarter rank 2 is at busiest + 120, and the holder stays up to x = 101.
// A sample of a prompt rank 1 holds but for its last 8 tokens (992 of
// 1000) pays the whole charge: on a 2048-token budget, with 2500 queued on
// rank 1 (the busiest), it waits 2508 there, and 2048 + 960 on rank 2 (2048
// + 240 with a quarter).
func TestTTFTOnScheduleReplicaCharge(t *testing.T) {
	for _, tc := range []struct {
		name            string
		reuse           EngineReuse
		busiest, holder int
		conversation    bool // the request is a turn of a conversation bound to rank 1
		sample          bool // the request computes 8 tokens on rank 1, not 488
		drain           int  // ttft_drain_tokens; 0: 8192
		leaves          bool
	}{
		{"on_schedule, holder raises the iteration by 60: stays", ReuseOnSchedule, 6000, 5572, false, false, 0, false},
		{"on_schedule, holder raises the iteration by 200: leaves", ReuseOnSchedule, 6000, 5712, false, false, 0, true},
		{"after_iteration, raise 200: stays, the whole charge", ReuseAfterIteration, 6000, 5712, false, false, 0, false},
		{"on_schedule, a conversation's turn, raise 200: stays, the whole charge", ReuseOnSchedule, 6000, 5712, true, false, 0, false},
		// Rank 2's queue with the request (1000) passes the busiest's
		// (800): the whole charge, 1000 + 100 + 480 against the holder's
		// 800 + 1.5 × 400.
		{"on_schedule, the idle rank past the busiest: stays", ReuseOnSchedule, 800, 712, false, false, 0, false},
		{"on_schedule, a sample on a 2048-token budget: stays, the whole charge", ReuseOnSchedule, 0, 2500, false, true, 2048, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ttftCfg(3, tc.reuse)
			cfg.TTFTDrainTokens = 8192
			if tc.drain > 0 {
				cfg.TTFTDrainTokens = tc.drain
			}
			r := mustNew(t, cfg)
			states := st([2]int64{1, 1 << 20}, [2]int64{1, 1 << 20}, [2]int64{1, 1 << 20})
			q, held := extend(9, prompt(512), 488), int32(512)
			if tc.sample {
				q, held = extend(9, prompt(992), 8), 992
			}
			if tc.conversation {
				first := Request{ID: 8, Tokens: prompt(512), TargetRank: 1, Strict: true, ConversationID: "c"}
				mustRoute(t, r, states, []Request{first}, 8, make([]int32, 3))
				q.ConversationID = "c"
			}
			batch, m := holderBatch(q, held, tc.busiest, tc.holder)
			res := mustRoute(t, r, states, batch, 8, m)
			if got := res.Ranks[len(batch)-1]; (got != 1) != tc.leaves || (tc.leaves && got != 2) {
				t.Errorf("request on rank %d, holder 1, busiest 0, idle 2: want leaves = %v", got, tc.leaves)
			}
		})
	}
}

// The recommended score heeds the KV room ranks report (whatever
// capacity_aware says): a request the best-predicted rank cannot hold would
// wait there for memory, not for compute. The part of its prefix still in
// flight on a rank (placed there by an earlier call, not computed yet) is
// held by the request computing it, whose blocks the rank's room already
// counts: reusing it needs room for the rest of the prompt only, under
// either reuse semantics.
func TestTTFTHeedsKVRoom(t *testing.T) {
	for _, tc := range []struct {
		name     string
		reuse    EngineReuse
		free     int64 // free KV tokens reported by rank 0, which holds the prefix
		queued   int   // prefill placed on rank 0 by an earlier call, not yet computed
		inFlight bool  // that prefill is the request's 960-token prefix, not computed
		want     int
	}{
		{"room on the holder", ReuseAfterIteration, 1 << 20, 0, false, 0},
		{"no room on the holder", ReuseAfterIteration, 100, 0, false, 1},
		{"room on the holder, but not beside its queued prefill", ReuseAfterIteration, 2000, 1800, false, 1},
		{"room on the holder beside its queued prefill", ReuseAfterIteration, 4000, 1800, false, 0},
		// Its 960 cached tokens may be among the free ones the holder
		// reports (unreferenced cached blocks count as free).
		{"room on the holder for what it computes there, not for its whole prompt", ReuseAfterIteration, 1000, 0, false, 1},
		// 500 tokens of room beside the 1000 queued, for the 400 beyond
		// the prefix.
		{"prefix in flight, after_iteration: room for the rest", ReuseAfterIteration, 1500, 1000, true, 0},
		{"prefix in flight, on_schedule: room for the rest", ReuseOnSchedule, 1500, 1000, true, 0},
		{"prefix in flight, after_iteration: no room for the rest", ReuseAfterIteration, 1200, 1000, true, 1},
		{"prefix in flight, on_schedule: no room for the rest", ReuseOnSchedule, 1200, 1000, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ttftCfg(2, tc.reuse)
			cfg.TTFTDrainTokens = 1 // the earlier call's prefill stays queued
			r := mustNew(t, cfg)
			states := []RankState{
				{Rank: 0, NumActiveRequests: 1, NumActiveTokens: 1 << 20, KVCapacityTokens: 1 << 20, FreeKVTokens: tc.free},
				{Rank: 1, NumActiveRequests: 1, NumActiveTokens: 1 << 20, KVCapacityTokens: 1 << 20, FreeKVTokens: 1 << 20},
			}
			var base []int32
			probed := []int32{960, 0}
			if tc.inFlight {
				base, probed = prompt(960), []int32{0, 0}
			}
			if tc.queued > 0 {
				early := extend(8, base, tc.queued-len(base))
				early.TargetRank, early.Strict = 0, true
				mustRoute(t, r, states, []Request{early}, 8, make([]int32, 2))
			}
			q := extend(9, prompt(960), 400)
			res := mustRoute(t, r, states, []Request{q}, 8, probed)
			if got := res.Ranks[0]; got != tc.want {
				t.Errorf("request on rank %d, want %d", got, tc.want)
			}
		})
	}
}

// A new conversation prefers, among the ranks within its bound, one whose
// prefill queue with it still ends within the iteration the busiest rank
// fills anyway: in lock step a rank that overtakes the busiest lengthens
// every rank's iteration. Among such ranks (or when there is none) the
// fewest requests win, as before.
func TestTTFTNewConversationWithinBusiest(t *testing.T) {
	system := prompt(1024) // ready on ranks 1 and 2
	for _, tc := range []struct {
		name             string
		queued1, queued2 int // prefill queued on ranks 1 and 2; rank 0 has 1000
		want             int
	}{
		// Rank 1, the fewest requests, would end at 1200 > 1000; rank
		// 2 at 800.
		{"the fewest requests would overtake the busiest: the rank that would not", 900, 500, 2},
		{"both end within the busiest: the fewest requests", 600, 500, 1},
		{"both would overtake it: the fewest requests", 900, 800, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustNew(t, ttftCfg(3, ReuseAfterIteration))
			// Requests: 3 on rank 0, 1 on rank 1, 4 on rank 2, counting
			// the batch's strict ones.
			states := st([2]int64{2, 0}, [2]int64{0, 0}, [2]int64{3, 0})
			var batch []Request
			for k, n := range []int{1000, tc.queued1, tc.queued2} {
				q := extend(uint64(10+k), nil, n)
				q.TargetRank, q.Strict = k, true
				batch = append(batch, q)
			}
			x := extend(20, system, 300) // 1324 tokens, 300 of them its own
			x.ConversationID = "new"
			batch = append(batch, x)
			m := make([]int32, 3*len(batch))
			m[3*3+1], m[3*3+2] = 1024, 1024
			if got := mustRoute(t, r, states, batch, 8, m).Ranks[3]; got != tc.want {
				t.Errorf("new conversation on rank %d, want %d", got, tc.want)
			}
		})
	}
}

// A new conversation whose prompt, computed whole, would take more than one
// iteration goes where its prefill ends within the next one, a holder of
// its system prompt, when that rank holds at most one request more than the
// fewest; past that, or when the whole prompt fits one iteration anyway,
// the fewest requests win.
func TestTTFTNewConversationNextIteration(t *testing.T) {
	system := prompt(2048) // ready on rank 1
	for _, tc := range []struct {
		name   string
		drain  int // TTFTDrainTokens
		holder int // requests on rank 1; rank 0 has 1, rank 2 has 5
		want   int
	}{
		{"a request more on the holder: the holder", 1024, 2, 1},
		{"two requests more on the holder: the fewest requests", 1024, 3, 0},
		{"the whole prompt within one iteration: the fewest requests", 8192, 2, 0},
		{"the holder as few: the holder", 1024, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ttftCfg(3, ReuseAfterIteration)
			cfg.TTFTDrainTokens = tc.drain
			r := mustNew(t, cfg)
			states := st([2]int64{1, 0}, [2]int64{int64(tc.holder), 0}, [2]int64{5, 0})
			q := extend(1, system, 100)
			q.ConversationID = "new"
			if got := mustRoute(t, r, states, []Request{q}, 8, []int32{0, 2048, 0}).Ranks[0]; got != tc.want {
				t.Errorf("new conversation on rank %d, want %d", got, tc.want)
			}
		})
	}
}

// Among the ranks with the fewest requests, a new conversation passes over
// one home to recently active conversations: their next turns will come
// back to it. Only the ttftRecentHomes × dp_size most recent conversations
// count, and a rank with fewer requests wins whatever its homes.
func TestTTFTNewConversationRecentHomes(t *testing.T) {
	const dp = 2
	conv := func(id uint64, name string) Request {
		q := extend(id, prompt(64), int(id))
		q.ConversationID = name
		return q
	}
	for _, tc := range []struct {
		name  string
		homes []string // conversations bound to rank 0, oldest first
		later int      // conversations bound to rank 1 after them
		busy  bool     // rank 1 has a request more than rank 0
		want  int
	}{
		{"rank 0 home to recent conversations", []string{"x", "y"}, 1, false, 1},
		{"only old conversations on rank 0", []string{"x", "y"}, ttftRecentHomes * dp, false, 0},
		{"no conversations", nil, 0, false, 0},
		{"fewer requests first", []string{"x", "y"}, 1, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustNew(t, ttftCfg(dp, ReuseAfterIteration))
			id := uint64(1)
			bindTo := func(name string, k int) {
				q := conv(id, name)
				q.TargetRank = k
				mustRoute(t, r, idle(dp), []Request{q}, 8, make([]int32, dp))
				id++
			}
			for _, h := range tc.homes {
				bindTo(h, 0)
			}
			for j := range tc.later {
				bindTo(fmt.Sprintf("later%d", j), 1)
			}
			// Equal requests, rank 1 with more prefill queued; or
			// rank 1 with a request more.
			states := st([2]int64{1, 0}, [2]int64{1, 4000})
			if tc.busy {
				states[1].NumActiveRequests = 2
			}
			got := mustRoute(t, r, states, []Request{conv(id, "new")}, 8, make([]int32, dp)).Ranks[0]
			if got != tc.want {
				t.Errorf("new conversation on rank %d, want %d", got, tc.want)
			}
		})
	}
}

// In a burst of new conversations (ttftFreshBurst or more in one decision),
// a candidate that would compute a system prompt ready elsewhere (more than
// TTFTDrainTokens/ttftDupShare beyond the least) goes after the holders of
// the prompt at equal request counts, whatever its homes; outside a burst,
// or for a prompt cheap to compute again, the rank home to the fewest
// recently active conversations still wins, and a rank with fewer requests
// wins in a burst too.
func TestTTFTNewConversationBurst(t *testing.T) {
	const dp = 4
	for _, tc := range []struct {
		name   string
		sys    int    // system prompt tokens, held by ranks 0-2
		n      int    // new conversations in the decision
		counts [4]int // active requests per rank
		rank3  int    // of them, placed on rank 3 (no prompt, no homes)
	}{
		{"burst waits for the holders", 4096, ttftFreshBurst, [4]int{1, 1, 1, 2}, 0},
		{"burst, rank 3 with fewer requests", 4096, ttftFreshBurst, [4]int{2, 2, 2, 1}, 1},
		{"burst of a cheap prompt", 1024, ttftFreshBurst, [4]int{1, 1, 1, 2}, 1},
		{"one new conversation", 4096, 1, [4]int{1, 1, 1, 1}, 1},
		{"below a burst", 4096, ttftFreshBurst - 1, [4]int{1, 1, 1, 1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustNew(t, ttftCfg(dp, ReuseAfterIteration))
			// Ranks 0-2 are home to a recently active conversation each.
			for k := range 3 {
				q := extend(uint64(100+k), prompt(64), k+1)
				q.ConversationID, q.TargetRank = fmt.Sprintf("old%d", k), k
				mustRoute(t, r, idle(dp), []Request{q}, 8, make([]int32, dp))
			}
			sys := make([]int32, tc.sys)
			for i := range sys {
				sys[i] = int32(5_000_000 + i)
			}
			var reqs []Request
			var matches []int32
			for j := range tc.n {
				q := extend(uint64(200+j), sys, 64+j)
				q.ConversationID = fmt.Sprintf("new%d", j)
				reqs = append(reqs, q)
				matches = append(matches, int32(tc.sys), int32(tc.sys), int32(tc.sys), 0)
			}
			states := idle(dp)
			for k, c := range tc.counts {
				states[k].NumActiveRequests, states[k].NumActiveTokens = c, int64(c)*100
			}
			res := mustRoute(t, r, states, reqs, 16, matches)
			if got := len(res.Assignment[3]); got != tc.rank3 {
				t.Errorf("%d of %d new conversations on rank 3, want %d (ranks %v)", got, tc.n, tc.rank3, res.Ranks)
			}
		})
	}
}

// While the engine is light (fewer than ttftEarlyLoad active requests per
// rank, on more than ttftEarlyRanks ranks), a new conversation whose system
// prompt the holders have ready for at least an iteration's prefill goes to
// the fewest requests and, at equal counts, to a rank that computes the
// prompt whole, in a burst too; under more load, on 4 ranks, or for a
// prompt shorter than an iteration, a holder takes it as before.
func TestTTFTNewConversationWarmsEarly(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dp     int
		drain  int // TTFTDrainTokens
		active int // requests active on each rank without the prompt
		held   int // requests active on each holder of the prompt
		n      int // new conversations in the decision
		cold   int // of them, placed on a rank not holding the prompt
	}{
		{"light engine: a cold rank", 8, 4096, 1, 1, 1, 1},
		{"light engine, a burst: cold ranks", 8, 4096, 1, 1, ttftFreshBurst, ttftFreshBurst},
		{"light engine, fewer requests on a holder", 8, 4096, 1, 0, 1, 0},
		{"loaded engine: a holder", 8, 4096, 2, 2, 1, 0},
		{"prompt shorter than an iteration: a holder", 8, 8192, 1, 1, 1, 0},
		{"4 ranks: a holder", 4, 4096, 1, 1, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ttftCfg(tc.dp, ReuseAfterIteration)
			cfg.TTFTDrainTokens = tc.drain
			r := mustNew(t, cfg)
			sys := make([]int32, 4096) // held by the first half of the ranks
			for i := range sys {
				sys[i] = int32(7_000_000 + i)
			}
			var reqs []Request
			var matches []int32
			for j := range tc.n {
				q := extend(uint64(300+j), sys, len(sys)+100+j)
				q.ConversationID = fmt.Sprintf("new%d", j)
				reqs = append(reqs, q)
				for k := range tc.dp {
					m := int32(0)
					if k < tc.dp/2 {
						m = int32(len(sys))
					}
					matches = append(matches, m)
				}
			}
			states := idle(tc.dp)
			for k := range states {
				a := tc.active
				if k < tc.dp/2 {
					a = tc.held
				}
				states[k].NumActiveRequests, states[k].NumActiveTokens = a, int64(a)*100
			}
			res := mustRoute(t, r, states, reqs, 16, matches)
			cold := 0
			for _, k := range res.Ranks {
				if k >= tc.dp/2 {
					cold++
				}
			}
			if cold != tc.cold {
				t.Errorf("%d of %d new conversations on a cold rank, want %d (ranks %v)", cold, tc.n, tc.cold, res.Ranks)
			}
		})
	}
}

// Without a conversation id, the rank that computed the longest prefix of a
// request stays a candidate past the soft cap too, while it holds fewer
// than ttftHomeCap requests; the reference score moves the request to an
// idle rank.
func TestTTFTCacheHomePastSoftCap(t *testing.T) {
	base := prompt(2048)
	// Eight ranks: rank 0 holds 6 of 21 active requests, at the soft cap
	// (fair share 3, fair soft cap 6), under the home cap (maxn 8, below
	// twice the fair soft cap, 12, and half the requests, 11).
	busy8 := st([2]int64{6, 100}, [2]int64{2, 0}, [2]int64{2, 0}, [2]int64{2, 0},
		[2]int64{2, 0}, [2]int64{2, 0}, [2]int64{2, 0}, [2]int64{2, 0})
	// Four ranks: rank 0 holds 6 of 7, past the fair soft cap (4) and half
	// the requests; twice the fair soft cap (8) alone would keep it.
	busy4 := st([2]int64{6, 100}, [2]int64{0, 0}, [2]int64{0, 0}, [2]int64{0, 0})
	// Light load: rank 0 holds 2 of 4 requests (the request counted), at
	// the soft cap (fair share 1, fair soft cap 2) and at half the
	// requests, under twice the fair soft cap.
	light8 := st([2]int64{2, 100}, [2]int64{0, 0}, [2]int64{0, 0}, [2]int64{0, 0},
		[2]int64{1, 0}, [2]int64{0, 0}, [2]int64{0, 0}, [2]int64{0, 0})
	// Four ranks: rank 0 holds 10 of 20 requests (the request counted),
	// at the fair soft cap (10) and half the requests: under half its
	// slots with 64 of them, at half with 16.
	half4 := st([2]int64{10, 100}, [2]int64{3, 0}, [2]int64{3, 0}, [2]int64{3, 0})
	for _, tc := range []struct {
		name    string
		states  []RankState
		maxn    int
		matches []int32
		want    int // -1: any rank but 0
	}{
		{"8 ranks, only the busy rank holds it", busy8, 8, []int32{2016, 0, 0, 0, 0, 0, 0, 0}, 0},
		{"8 ranks, an idle rank holds as much", busy8, 8, []int32{2016, 0, 2016, 0, 0, 0, 0, 0}, 2},
		{"4 ranks, the busy rank holds half the requests", busy4, 8, []int32{2016, 0, 0, 0}, -1},
		{"4 ranks, an idle rank holds as much", busy4, 8, []int32{2016, 0, 2016, 0}, 2},
		{"8 ranks, light load: the holder has two requests", light8, 8, []int32{2016, 0, 0, 0, 0, 0, 0, 0}, 0},
		{"4 ranks, half the requests, under half the slots", half4, 64, []int32{2016, 0, 0, 0}, 0},
		{"4 ranks, half the requests, at half the slots", half4, 16, []int32{2016, 0, 0, 0}, -1},
	} {
		cfg := ttftCfg(len(tc.states), ReuseAfterIteration)
		res := mustRoute(t, mustNew(t, cfg), tc.states, []Request{extend(1, base, 30)}, tc.maxn, tc.matches)
		if got := res.Ranks[0]; got != tc.want && (tc.want >= 0 || got == 0) {
			t.Errorf("%s: rank %d, want %d (-1: not rank 0)", tc.name, got, tc.want)
		}
	}
	ref := DefaultConfig(PolicyKVCacheAware, 8)
	for _, states := range [][]RankState{busy8, light8} {
		res := mustRoute(t, mustNew(t, ref), states, []Request{extend(1, base, 30)}, 8, []int32{2016, 0, 0, 0, 0, 0, 0, 0})
		if res.Ranks[0] == 0 {
			t.Errorf("reference score: rank 0, want another (rank 0 is at the soft cap)")
		}
	}
}

// Every rank that computed the longest prefix of a request stays a
// candidate past the soft cap (up to ttftHomeCap), also when a rank under
// the soft cap holds as much: that rank, often a replica just made, would
// otherwise take every request of the family the holders at the soft cap
// leave, and its iteration would set every rank's.
func TestTTFTHoldersShareFamilyPastSoftCap(t *testing.T) {
	base := prompt(2048)
	// Eight ranks, 22 active requests and four more in the decision: fair
	// share 4, soft cap 8, home cap 13 (half the requests). Rank 0 holds
	// the family at the soft cap; rank 2 holds it too, under it.
	states := st([2]int64{8, 400}, [2]int64{2, 100}, [2]int64{2, 100}, [2]int64{2, 100},
		[2]int64{2, 100}, [2]int64{2, 100}, [2]int64{2, 100}, [2]int64{2, 100})
	var reqs []Request
	var matches []int32
	for id := uint64(1); id <= 4; id++ {
		reqs = append(reqs, extend(id, base, 1000))
		matches = append(matches, 2016, 0, 2016, 0, 0, 0, 0, 0)
	}
	res := mustRoute(t, mustNew(t, ttftCfg(8, ReuseAfterIteration)), states, reqs, 16, matches)
	per := make([]int, 8)
	for _, k := range res.Ranks {
		per[k]++
	}
	if per[0] == 0 || per[2] == 0 || per[0]+per[2] != 4 {
		t.Errorf("ranks %v: want the family on both of its holders, 0 and 2", res.Ranks)
	}
}

// Past the request slots a request waits for a full rank holding its
// prompt rather than computing it again where a slot is free
// (holdForHolder), and only there: with a slot to spare, with a holder
// that has room, or with no holder it is placed.
func TestTTFTHeldForHolder(t *testing.T) {
	base := prompt(2048)
	held := extend(1, base, 30) // 2078 tokens, 2016 of them on its holders
	other := extend(2, prompt(0), 500)
	for _, tc := range []struct {
		name    string
		active  [4]int // maxn 4: sixteen slots
		reqs    []Request
		matches []int32 // request-major
		want    []int   // per request: the rank, or Unplaced
	}{
		{"every slot taken, the holder full: held", [4]int{4, 4, 4, 3},
			[]Request{held}, []int32{2016, 0, 0, 0}, []int{Unplaced}},
		{"a slot to spare: computed again where one is free", [4]int{4, 4, 4, 2},
			[]Request{held}, []int32{2016, 0, 0, 0}, []int{3}},
		{"a holder with room takes it", [4]int{4, 3, 4, 4},
			[]Request{held}, []int32{2016, 2016, 0, 0}, []int{1}},
		{"no rank holds it", [4]int{4, 4, 4, 3},
			[]Request{held}, []int32{0, 0, 0, 0}, []int{3}},
		{"a rank holding less than half of it is no holder", [4]int{4, 4, 4, 3},
			[]Request{held}, []int32{1024, 0, 0, 0}, []int{3}},
		{"the held request's slot goes to the other request", [4]int{4, 4, 4, 2},
			[]Request{held, other}, []int32{2016, 0, 0, 0, 0, 0, 0, 0}, []int{Unplaced, 3}},
		{"two per full holder: the family's third computes it again", [4]int{4, 4, 4, 1},
			[]Request{held, extend(3, base, 20), extend(4, base, 10)},
			[]int32{2016, 0, 0, 0, 2016, 0, 0, 0, 2016, 0, 0, 0}, []int{Unplaced, Unplaced, 3}},
		{"two per full holder: two holders, four held", [4]int{4, 4, 4, 0},
			[]Request{held, extend(3, base, 20), extend(4, base, 10), extend(5, base, 5)},
			[]int32{2016, 2016, 0, 0, 2016, 2016, 0, 0, 2016, 2016, 0, 0, 2016, 2016, 0, 0},
			[]int{Unplaced, Unplaced, Unplaced, Unplaced}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ttftCfg(4, ReuseAfterIteration)
			cfg.Explain = true
			states := idle(4)
			for k, n := range tc.active {
				states[k].NumActiveRequests, states[k].NumActiveTokens = n, int64(100*n)
			}
			r := mustNew(t, cfg)
			res := mustRoute(t, r, states, tc.reqs, 4, tc.matches)
			if !slices.Equal(res.Ranks, tc.want) {
				t.Fatalf("ranks %v, want %v", res.Ranks, tc.want)
			}
			for i, rc := range r.Receipts() {
				if wantHeld := tc.want[i] == Unplaced; (rc.Reason == ReasonHeld) != wantHeld ||
					wantHeld != slices.Contains(res.Unassigned, tc.reqs[i].ID) {
					t.Errorf("request %d: reason %s, unassigned %v", tc.reqs[i].ID, rc.Reason, res.Unassigned)
				}
				if rc.Reason == ReasonHeld && !strings.Contains(rc.String(), "every rank holding its prompt at its cap") {
					t.Errorf("held receipt does not say why:\n%s", &rc)
				}
			}
		})
	}
}

// In the quiet period quiet warmup warms a pending rank with each lone
// request of a tenant no rank holds, but with a request of a held tenant only
// once the demand window holds quietSampleRequests requests and the tenant's
// share of them, times the ranks, exceeds the ranks holding it; until then
// the score sends it to the holder. Requests that come together, and a conversation's,
// warm as before.
func TestWarmupQuietReplicas(t *testing.T) {
	type step struct {
		fams []uint64 // the tenants of one idle decision's requests
		conv bool     // each request starts a conversation
	}
	lone := func(fams ...uint64) []step {
		var s []step
		for _, f := range fams {
			s = append(s, step{fams: []uint64{f}})
		}
		return s
	}
	for _, tc := range []struct {
		name    string
		steps   []step
		pending []int // after each step
	}{
		{"new tenants warm, a held one waits for its share",
			lone(1, 1, 2, 1, 3), []int{3, 3, 2, 2, 1}},
		{"one tenant is all the traffic: every rank, once the window shows it",
			lone(1, 1, 1, 1, 1, 1, 1), []int{3, 3, 3, 3, 2, 1, 0}},
		{"a tenant with a quarter of the window keeps its one rank of four",
			lone(1, 2, 2, 2, 1, 2), []int{3, 2, 2, 2, 2, 1}},
		{"a tenant with most of the requests: the ranks its share asks for",
			lone(1, 2, 1, 1, 1, 1), []int{3, 2, 2, 2, 1, 0}},
		{"requests that come together warm side by side",
			[]step{{fams: []uint64{1}}, {fams: []uint64{1, 1}}}, []int{3, 1}},
		{"a new conversation warms as before",
			[]step{{fams: []uint64{1}, conv: true}, {fams: []uint64{1}, conv: true}}, []int{3, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ttftCfg(4, ReuseAfterIteration)
			cfg.Warmup, cfg.Explain = WarmupQuiet, true
			r := mustNew(t, cfg)
			id := uint64(0)
			holders := map[uint64][]int{}
			for n, s := range tc.steps {
				var reqs []Request
				for _, f := range s.fams {
					id++
					q := family(f, id, 300)
					if s.conv {
						q.ConversationID = fmt.Sprint("c", id)
					}
					reqs = append(reqs, q)
				}
				res := mustRoute(t, r, idle(4), reqs, 8, nil)
				// A request left to the score goes where its tenant is.
				for j, f := range s.fams {
					k := res.Ranks[j]
					if warmed := r.Receipts()[j].Reason == ReasonColdStartWarmup; !warmed && !slices.Contains(holders[f], k) {
						t.Errorf("step %d: tenant %d scored onto rank %d, which does not hold it (holders %v)", n+1, f, k, holders[f])
					}
					holders[f] = append(holders[f], k)
				}
				if got := len(r.PendingWarmup()); got != tc.pending[n] {
					t.Fatalf("step %d (tenants %v): %d ranks pending, want %d (placed on %v)", n+1, s.fams, got, tc.pending[n], res.Ranks)
				}
				mustRoute(t, r, idle(4), nil, 8, nil) // an iteration apart
			}
		})
	}
}

// Before any load, a burst of a prompt family some rank holds, in an idle
// decision, warms pending ranks only while fewer than half the ranks are
// warmed; from half on it is scored onto the family's holder, unless its
// prompts are long beside what the holder has (warming them costs little).
// A burst with a family no rank holds warms as before.
func TestWarmupQuietHeldBurstHalfWarmed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		warmed  []uint64 // tenants of lone idle requests first, each warming a rank
		burst   []uint64 // tenants of the idle burst after them
		n       int      // its prompts' tokens; each tenant's first 256 are shared
		ranks   []int
		pending int
	}{
		{"one rank of four warmed", []uint64{1}, []uint64{1, 1}, 300, []int{1, 2}, 1},
		{"half the ranks warmed", []uint64{1, 2}, []uint64{1, 1}, 300, []int{0, 0}, 2},
		{"half the ranks warmed, holders computing as much as they hold", []uint64{1, 2}, []uint64{1, 1}, 512, []int{0, 0}, 2},
		{"half the ranks warmed, holders computing more than they hold", []uint64{1, 2}, []uint64{1, 1}, 544, []int{2, 3}, 0},
		{"half the ranks warmed, a new tenant in the burst", []uint64{1, 2}, []uint64{1, 3}, 300, []int{2, 3}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustNew(t, quietTTFTCfg(4))
			id := uint64(0)
			for _, f := range tc.warmed {
				id++
				mustRoute(t, r, idle(4), []Request{family(f, id, 300)}, 8, nil)
				mustRoute(t, r, idle(4), nil, 8, nil) // an iteration apart: no arrival during the stall
			}
			if got := 4 - len(r.PendingWarmup()); got != len(tc.warmed) {
				t.Fatalf("%d ranks warmed by %d lone requests of new tenants, want %d", got, len(tc.warmed), len(tc.warmed))
			}
			var reqs []Request
			for _, f := range tc.burst {
				id++
				reqs = append(reqs, family(f, id, tc.n))
			}
			res := mustRoute(t, r, idle(4), reqs, 8, nil)
			if !slices.Equal(res.Ranks, tc.ranks) || len(r.PendingWarmup()) != tc.pending {
				t.Errorf("burst of tenants %v: ranks %v, %d pending; want %v, %d pending", tc.burst, res.Ranks, len(r.PendingWarmup()), tc.ranks, tc.pending)
			}
		})
	}
}

func TestTTFTHomeCap(t *testing.T) {
	for _, tc := range []struct{ fair, total, maxn, want int }{
		{4, 7, 8, 4},      // 4 ranks, half the slots: half the requests is under the fair soft cap
		{8, 16, 16, 8},    // 4 ranks, 16 requests, half the slots taken: fair soft cap 8, half 8
		{8, 16, 64, 16},   // the same with 64 slots: under half of them, twice the fair soft cap
		{10, 20, 64, 20},  // 4 ranks, 20 requests: twice the fair soft cap, under half the slots
		{30, 60, 64, 32},  // 4 ranks, 60 requests: half the slots, more than half the requests
		{50, 100, 64, 50}, // 4 ranks, 100 requests: half the requests, past half the slots
		{6, 21, 8, 8},     // maxn bounds it
		{6, 21, 64, 12},   // 8 ranks: twice the fair soft cap, under half the slots
		{6, 40, 64, 12},   // twice the fair soft cap
		{2, 4, 64, 4},     // light load: twice the fair soft cap, though half the requests is two
		{2, 4, 2, 2},      // maxn bounds it
		{4, 3, 64, 8},     // twice the fair soft cap
	} {
		if got := ttftHomeCap(tc.fair, tc.total, tc.maxn); got != tc.want {
			t.Errorf("ttftHomeCap(fair %d, total %d, maxn %d) = %d, want %d", tc.fair, tc.total, tc.maxn, got, tc.want)
		}
	}
}

// Quiet warmup sends requests to ranks not yet warmed while no rank has an
// active request, or while load builds up on a cold engine (fewer active
// requests than ranks, more than half the ranks pending: a light start,
// which leaves a conversation's request to the score); the reference's
// "once" warms whatever the load.
func TestWarmupQuiet(t *testing.T) {
	base := prompt(1024)
	one := func(n int) []RankState { // one request active, on rank 0
		s := idle(n)
		s[0].NumActiveRequests, s[0].NumActiveTokens = 1, 100
		return s
	}
	light := st([2]int64{1, 100}, [2]int64{1, 100}, [2]int64{0, 0}, [2]int64{0, 0})
	loaded := st([2]int64{2, 100}, [2]int64{1, 100}, [2]int64{1, 100}, [2]int64{0, 0})
	// With one request active and no load seen yet, an engine of
	// nearIdleRanks ranks or more is near idle: the request warms a rank
	// as on an idle engine, but not a conversation's. With two active (or
	// one on fewer ranks), a light start warms while fewer than half the
	// ranks are warmed. Once the engine has carried load (as many active
	// requests as ranks), one active request is a light start too.
	for _, tc := range []struct {
		name    string
		warmup  Warmup
		warmed  int  // ranks warmed first, by idle decisions of one request each
		load    bool // then a decision with as many active requests as ranks
		states  []RankState
		conv    string
		rank    int // where the request goes (its prefix is cached on the last rank)
		pending int // ranks pending afterwards
	}{
		{"idle engine", WarmupQuiet, 0, false, idle(4), "", 0, 3},
		{"light start", WarmupQuiet, 1, false, light, "", 1, 2},
		{"light start, all ranks pending", WarmupQuiet, 0, false, light, "", 0, 3},
		{"light start, a conversation's request", WarmupQuiet, 1, false, light, "c", 3, 3},
		{"light start, half the ranks warmed", WarmupQuiet, 2, false, light, "", 3, 2},
		{"as many active requests as ranks", WarmupQuiet, 1, false, loaded, "", 3, 3},
		{"once, under load", WarmupOnce, 1, false, loaded, "", 1, 2},
		{"4 ranks, one request active", WarmupQuiet, 1, false, one(4), "", 1, 2},
		{"4 ranks, one request active, a conversation's request", WarmupQuiet, 1, false, one(4), "c", 3, 3},
		{"4 ranks, one request active, half the ranks warmed", WarmupQuiet, 2, false, one(4), "", 3, 2},
		{"8 ranks, one request active", WarmupQuiet, 1, false, one(8), "", 1, 6},
		{"8 ranks, one request active, a conversation's request", WarmupQuiet, 1, false, one(8), "c", 7, 7},
		{"8 ranks, one request active, half the ranks warmed", WarmupQuiet, 4, false, one(8), "", 4, 3},
		{"8 ranks, one request active after load, half the ranks warmed", WarmupQuiet, 4, true, one(8), "", 7, 4},
	} {
		n := len(tc.states)
		cfg := ttftCfg(n, ReuseAfterIteration)
		cfg.Warmup = tc.warmup
		r := mustNew(t, cfg)
		for i := range tc.warmed {
			// Quiet-period arrivals, an (empty) iteration apart, each
			// of a tenant no rank holds yet.
			mustRoute(t, r, idle(n), []Request{family(uint64(10+i), uint64(100+i), 74)}, 8, nil)
			mustRoute(t, r, idle(n), nil, 8, nil)
		}
		if tc.load {
			full := idle(n)
			for k := range full {
				full[k].NumActiveRequests, full[k].NumActiveTokens = 1, 100
			}
			mustRoute(t, r, full, nil, 8, nil)
		}
		q := extend(1, base, 10)
		q.ConversationID = tc.conv
		matches := make([]int32, n)
		matches[n-1] = 992
		res := mustRoute(t, r, tc.states, []Request{q}, 8, matches)
		if res.Ranks[0] != tc.rank || len(r.PendingWarmup()) != tc.pending {
			t.Errorf("%s: rank %d, pending %v; want rank %d, %d pending", tc.name, res.Ranks[0], r.PendingWarmup(), tc.rank, tc.pending)
		}
	}
	// On 2 ranks one active request is half the engine: the cold start
	// warms the other rank with the next request, where a near-idle
	// decision (as on nearIdleRanks ranks or more) would leave it to its
	// family's share (one family, one rank) and the score would keep every
	// request on rank 0.
	{
		cfg := ttftCfg(2, ReuseAfterIteration)
		cfg.Warmup = WarmupQuiet
		r := mustNew(t, cfg)
		mustRoute(t, r, idle(2), []Request{family(7, 1, 300)}, 8, nil)
		mustRoute(t, r, idle(2), nil, 8, nil)
		res := mustRoute(t, r, st([2]int64{1, 300}, [2]int64{0, 0}), []Request{family(7, 2, 300)}, 8, []int32{256, 0})
		if res.Ranks[0] != 1 || len(r.PendingWarmup()) != 0 {
			t.Errorf("2 ranks, one request active: rank %d, pending %v; want rank 1, none pending", res.Ranks[0], r.PendingWarmup())
		}
	}

	// On 16 ranks a light start warms lightStartRanks of them, one per
	// decision of one request, however many decisions come.
	cfg := ttftCfg(16, ReuseAfterIteration)
	cfg.Warmup = WarmupQuiet
	r := mustNew(t, cfg)
	states := idle(16)
	states[0].NumActiveRequests, states[0].NumActiveTokens = 2, 100
	for i := range 10 {
		mustRoute(t, r, states, []Request{extend(uint64(i+1), base, 10)}, 8, nil)
	}
	if got, want := 16-len(r.PendingWarmup()), lightStartRanks; got != want {
		t.Errorf("16 ranks: %d warmed after ten light decisions, want %d", got, want)
	}

	// Past that bound, on 8 ranks, a decision warms the pending ranks when
	// it brings requests for lightStartBatch (6) of them, none of a family
	// no rank holds, each within an iteration's prefill budget, either
	// while load builds up from idle (within lightStartRise decisions of
	// one that found no request active, the ranks carrying an active
	// request per warmed rank, 4) or as a spike reaching a quiet engine
	// (two requests per rank, fewer active than ranks warmed): one stall
	// for several ranks. Later in a busy period, load on the holders is
	// left to them.
	for _, tc := range []struct {
		name    string
		n       int  // requests of the held prompt
		other   bool // and one of a prompt no rank holds
		drain   int  // TTFTDrainTokens, when not the default
		active  int  // requests active on the ranks
		late    bool // lightStartRise decisions with a request active come first
		rested  bool // and then one with none
		pending int  // ranks pending afterwards
	}{
		{"five requests", 5, false, 0, 4, false, false, 4},
		{"six requests", 6, false, 0, 4, false, false, 0},
		{"six requests, one of a new family", 5, true, 0, 4, false, false, 4},
		{"six requests longer than an iteration's budget", 6, false, 1024, 4, false, false, 4},
		{"six requests on holders carrying fewer requests than there are holders", 6, false, 0, 3, false, false, 4},
		{"fifteen requests at that load", 15, false, 0, 3, false, false, 4},
		{"sixteen requests at that load", 16, false, 0, 3, false, false, 0},
		{"six requests late in a busy period", 6, false, 0, 4, true, false, 4},
		{"six requests after an idle decision", 6, false, 0, 4, true, true, 0},
		{"sixteen requests late in a busy period", 16, false, 0, 3, true, false, 0},
		{"sixteen requests late in a busy period, a request active per warmed rank", 16, false, 0, 4, true, false, 4},
	} {
		cfg := ttftCfg(8, ReuseAfterIteration)
		cfg.Warmup = WarmupQuiet
		if tc.drain > 0 {
			cfg.TTFTDrainTokens = tc.drain
		}
		r := mustNew(t, cfg)
		states := idle(8)
		states[0].NumActiveRequests, states[0].NumActiveTokens = 1, 100
		for i := range 6 {
			mustRoute(t, r, states, []Request{extend(uint64(i+1), base, 10)}, 8, nil)
		}
		if got := len(r.PendingWarmup()); got != 8-lightStartRanks {
			t.Fatalf("%s: %d pending after the light decisions, want %d", tc.name, got, 8-lightStartRanks)
		}
		if tc.late {
			for range lightStartRise {
				mustRoute(t, r, states, nil, 8, nil)
			}
		}
		if tc.rested {
			mustRoute(t, r, idle(8), nil, 8, nil)
		}
		var batch []Request
		for i := range tc.n {
			batch = append(batch, extend(uint64(100+i), base, 10))
		}
		if tc.other {
			batch = append(batch, extend(200, prompt(2048)[1024:], 10))
		}
		loaded := idle(8)
		for k := range tc.active {
			loaded[k].NumActiveRequests, loaded[k].NumActiveTokens = 1, 100
		}
		res := mustRoute(t, r, loaded, batch, 8, nil)
		if got := len(r.PendingWarmup()); got != tc.pending {
			t.Errorf("%s: %d ranks pending after it (placed on %v), want %d", tc.name, got, res.Ranks, tc.pending)
		}
	}
	// Not with more than half the ranks warmed: a first light decision of
	// five requests warms five of 8 ranks, and a spike of sixteen requests
	// after it, while one is active, is scored (the arrivals of that
	// stall, on holders below twice their share).
	cfg = ttftCfg(8, ReuseAfterIteration)
	cfg.Warmup = WarmupQuiet
	r = mustNew(t, cfg)
	states = idle(8)
	states[0].NumActiveRequests, states[0].NumActiveTokens = 1, 100
	var batch []Request
	for i := range 5 {
		batch = append(batch, extend(uint64(i+1), base, 10))
	}
	mustRoute(t, r, states, batch, 8, nil)
	if got := len(r.PendingWarmup()); got != 3 {
		t.Fatalf("a light decision of five requests: %d ranks pending, want 3", got)
	}
	batch = batch[:0]
	for i := range 16 {
		batch = append(batch, extend(uint64(100+i), base, 10))
	}
	if res := mustRoute(t, r, states, batch, 8, nil); len(r.PendingWarmup()) != 3 {
		t.Errorf("sixteen requests with five of 8 ranks warmed: placed on %v, pending %v; want 3 pending", res.Ranks, r.PendingWarmup())
	}

	// Once a decision has seen the engine loaded, an idle decision warms
	// only with two requests or more, one of a prompt family no rank holds
	// when the prefix index knows them: a lone request goes where its
	// prefix is (a burst's first, whose rest would wait for its whole
	// prefill on a pending rank), and so does a burst of a held family (it
	// would wait for the pending ranks' prefill) but for new conversations;
	// with a new family's request, which computes its prompt anyway, they
	// warm the smallest pending ranks. Without the index two requests warm.
	held := func(id uint64) Request { return extend(id, base, 10) }
	fresh := func(id uint64) Request { return extend(id, prompt(2048)[1024:], 10) }
	conv := func(q Request) Request { q.ConversationID = fmt.Sprint("c", q.ID); return q }
	for _, tc := range []struct {
		name    string
		index   bool
		reqs    []Request
		ranks   []int
		pending []int
	}{
		{"one request", true, []Request{held(2)}, []int{3}, []int{0, 1, 2, 3}},
		{"two requests of the held family", true, []Request{held(2), held(3)}, []int{3, 3}, []int{0, 1, 2, 3}},
		{"two requests, one of a new family", true, []Request{held(2), fresh(3)}, []int{0, 1}, []int{2, 3}},
		{"two new conversations of the held family", true, []Request{conv(held(2)), conv(held(3))}, []int{0, 1}, []int{2, 3}},
		{"two requests, no index", false, []Request{held(2), held(3)}, []int{0, 1}, []int{2, 3}},
	} {
		cfg := ttftCfg(4, ReuseAfterIteration)
		cfg.Warmup = WarmupQuiet
		if !tc.index {
			cfg.Score, cfg.PrefixSource = ScoreReference, SourceProbe
		}
		r := mustNew(t, cfg)
		full := st([2]int64{1, 100}, [2]int64{1, 100}, [2]int64{1, 100}, [2]int64{1, 100})
		before := r.StateDigest()
		mustRoute(t, r, full, []Request{extend(200, prompt(64), 10)}, 8, nil)
		if len(r.PendingWarmup()) != 4 || r.StateDigest() == before {
			t.Fatalf("%s: loaded decision: pending %v, digest changed %v; want 4 pending and the load in the digest",
				tc.name, r.PendingWarmup(), r.StateDigest() != before)
		}
		// The prompt is cached on rank 3 (probe), and the index has seen it there.
		mustRoute(t, r, idle(4), []Request{held(1)}, 8, []int32{0, 0, 0, 992})
		matches := make([]int32, 4*len(tc.reqs))
		for i, q := range tc.reqs {
			if q.Tokens[0] == base[0] {
				matches[4*i+3] = 992
			}
		}
		res := mustRoute(t, r, idle(4), tc.reqs, 8, matches)
		if !slices.Equal(res.Ranks, tc.ranks) || !slices.Equal(r.PendingWarmup(), tc.pending) {
			t.Errorf("idle after load, %s: ranks %v, pending %v; want %v, %v", tc.name, res.Ranks, r.PendingWarmup(), tc.ranks, tc.pending)
		}
	}

	// A request that arrives while a warmed rank computes its prompt (in
	// the decision right after the one that warmed it) counts the engine
	// as loaded too: that is steady traffic, not a quiet period before a
	// spike, and a later idle decision of one request goes where its
	// prefix is. Not when an empty decision came between (the stall passed
	// with no arrival), nor after a decision that warmed nothing.
	busy := st([2]int64{1, 64}, [2]int64{0, 0}, [2]int64{0, 0}, [2]int64{0, 0})
	for _, tc := range []struct {
		name    string
		pending []int // before the first decision
		gap     bool  // an empty decision after the first
		next    int   // requests of the decision after that
		loaded  bool
		rank    int // where a later lone idle request goes (its prefix is on rank 3)
	}{
		{"an arrival during the stall", []int{0, 1, 2, 3}, false, 1, true, 3},
		{"two arrivals during the stall", []int{0, 1, 2, 3}, false, 2, true, 3},
		// On 4 ranks the next decision, one request active, is a light
		// start: its request warms rank 1.
		{"no arrival during the stall", []int{0, 1, 2, 3}, true, 1, false, 2},
		{"no arrival at all", []int{0, 1, 2, 3}, false, 0, false, 1},
		{"nothing warmed", []int{}, false, 1, false, 3},
	} {
		cfg := ttftCfg(4, ReuseAfterIteration)
		cfg.Warmup = WarmupQuiet
		r := mustNew(t, cfg)
		if err := r.SetPendingWarmup(tc.pending); err != nil {
			t.Fatal(err)
		}
		mustRoute(t, r, idle(4), []Request{family(7, 100, 74)}, 8, nil)
		if tc.gap {
			mustRoute(t, r, idle(4), nil, 8, nil)
		}
		var next []Request
		for i := range tc.next {
			next = append(next, family(7, uint64(110+i), 74))
		}
		mustRoute(t, r, busy, next, 8, nil)
		if r.loaded != tc.loaded {
			t.Errorf("%s: loaded = %v, want %v", tc.name, r.loaded, tc.loaded)
		}
		mustRoute(t, r, idle(4), nil, 8, nil)
		res := mustRoute(t, r, idle(4), []Request{extend(1, base, 10)}, 8, []int32{0, 0, 0, 992})
		if res.Ranks[0] != tc.rank {
			t.Errorf("%s: a later lone idle request went to rank %d (pending before: %v), want %d",
				tc.name, res.Ranks[0], r.PendingWarmup(), tc.rank)
		}
	}
	// Whether the last decision warmed is state, so it is in the digest:
	// on the reference's score with no prefix index an empty decision
	// changes nothing else, yet after a warming one it ends the stall.
	cfg = DefaultConfig(PolicyKVCacheAware, 4)
	cfg.Warmup = WarmupQuiet
	r = mustNew(t, cfg)
	mustRoute(t, r, idle(4), []Request{extend(1, base, 10)}, 8, nil)
	for _, want := range []bool{true, false} {
		before := r.StateDigest()
		mustRoute(t, r, idle(4), nil, 8, nil)
		if changed := r.StateDigest() != before; changed != want {
			t.Errorf("an empty decision changed the digest: %v, want %v", changed, want)
		}
	}
}

// A request whose prefix is still being computed (known to the index, on
// no rank's probe) and that computes more than a block beyond it is not
// charged for computing the prefix again on a rank whose queue still ends
// within the busiest rank's share. Family F (2048 tokens) arrives with
// three requests on three ranks, nothing computed: 1 (300-token suffix)
// computes F on rank 0. Under on-schedule reuse 2 (200) would reuse F
// there and lengthen rank 0, which sets the lock step, by its suffix; it
// computes F again on rank 1 instead, within rank 0's share, and 3 (a
// 10-token tail, a sample) joins it there. Under after-iteration reuse
// nothing in flight is reusable, and each computes F on its own rank.
func TestTTFTPrefixInFlight(t *testing.T) {
	f := prompt(2048)
	for _, tc := range []struct {
		reuse EngineReuse
		want  []int
	}{
		{ReuseOnSchedule, []int{0, 1, 1}},
		{ReuseAfterIteration, []int{0, 1, 2}},
	} {
		cfg := ttftCfg(3, tc.reuse)
		cfg.Explain = true
		r := mustNew(t, cfg)
		states := st([2]int64{1, 100}, [2]int64{1, 100}, [2]int64{1, 100})
		res := mustRoute(t, r, states, []Request{extend(1, f, 300), extend(2, f, 200), extend(3, f, 10)}, 8, make([]int32, 9))
		if !slices.Equal(res.Ranks, tc.want) {
			t.Errorf("%s: ranks %v, want %v", tc.reuse, res.Ranks, tc.want)
		}
		// The receipts say which requests were not charged: 2 only (1
		// finds nothing in flight, 3 computes a partial block).
		rcs := r.Receipts()
		for i, want := range []bool{false, true, false} {
			if got := rcs[i].ReplicaWanted; got != want {
				t.Errorf("%s: request %d ReplicaWanted %v, want %v", tc.reuse, i+1, got, want)
			}
		}
	}
}

// A decision places the prompt groups some rank holds before those no rank
// holds: a new family's request computes its whole prompt wherever it goes,
// so it takes the rank the bound requests left shortest, not the holder's
// rank, where they would queue behind it (the busiest rank sets every
// rank's iteration). With no prefix held anywhere the order stays longest
// first.
func TestTTFTNewFamiliesLast(t *testing.T) {
	held := prompt(960)
	for _, tc := range []struct {
		name     string
		matched  bool // rank 0 holds family A's 960 tokens
		wantNew  []int
		wantHeld []int
	}{
		// Longest first, the 2000-token newcomer would take rank 0 (the
		// lowest of idle ranks) and A's requests would queue behind it.
		{"a held family and a new one", true, []int{1, 2}, []int{0}},
		// Nothing held: longest first, the newcomer on rank 0, A's
		// requests (each computing 1160 tokens) on the other two; the one
		// that would compute A's prompt beside another there waits for it
		// (holdForFlight).
		{"nothing held", false, []int{0}, []int{1, 2, Unplaced}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustNew(t, ttftCfg(3, ReuseAfterIteration))
			states := st([2]int64{1, 100}, [2]int64{1, 100}, [2]int64{1, 100})
			batch := []Request{extend(1, held, 200), extend(2, held, 200), extend(3, held, 200), extend(4, nil, 2000)}
			m := make([]int32, 3*len(batch))
			if tc.matched {
				for i := range 3 {
					m[3*i] = 960
				}
			}
			res := mustRoute(t, r, states, batch, 8, m)
			if k := res.Ranks[3]; !slices.Contains(tc.wantNew, k) {
				t.Errorf("new family's request on rank %d, want one of %v", k, tc.wantNew)
			}
			for i, k := range res.Ranks[:3] {
				if !slices.Contains(tc.wantHeld, k) {
					t.Errorf("family A's request %d on rank %d, want one of %v", i+1, k, tc.wantHeld)
				}
			}
		})
	}
}

// The TTFT score decides from the router's state and the call alone: two
// routers fed the same calls agree, decision for decision and in their
// digests, and a warm decision allocates nothing.
func TestTTFTDeterministic(t *testing.T) {
	for _, reuse := range []EngineReuse{ReuseAfterIteration, ReuseOnSchedule} {
		cfg := ttftCfg(8, reuse)
		cfg.Warmup = WarmupQuiet
		a, b := mustNew(t, cfg), mustNew(t, cfg)
		res := new(Result)
		for call := range 50 {
			var reqs []Request
			for i := range 6 {
				q := extend(uint64(call*10+i+1), prompt(64*(1+(call+i)%5)), 40*(i%3))
				q.ConversationID = fmt.Sprint("c", (call+i)%7)
				reqs = append(reqs, q)
			}
			states := idle(8)
			for k := range states {
				states[k].NumActiveRequests = (call + k) % 4
				states[k].NumActiveTokens = int64(((call * k) % 5) * 300)
			}
			ra := mustRoute(t, a, states, reqs, 16, nil)
			if err := b.RouteInto(res, states, reqs, 16, nil); err != nil {
				t.Fatal(err)
			}
			if !eqAssign(ra.Assignment, res.Assignment) || a.StateDigest() != b.StateDigest() {
				t.Fatalf("%s call %d: routers disagree", reuse, call)
			}
		}
		if testing.Short() {
			continue
		}
		batch := newBenchBatch(64, 8, 2048, benchOpts{matches: true})
		r := mustNew(t, cfg)
		route := func() {
			if err := r.RouteInto(res, batch.states, batch.reqs, batch.maxn, batch.matches); err != nil {
				t.Fatal(err)
			}
		}
		route()
		if n := testing.AllocsPerRun(10, route); n != 0 {
			t.Errorf("%s: %v allocations per warm decision, want 0", reuse, n)
		}
	}
}

func TestTTFTConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(c *Config)
		want string
	}{
		{"ttft without an index", func(c *Config) { c.PrefixSource = SourceProbe }, "prefix_source"},
		{"ttft on the default policy", func(c *Config) { c.Policy, c.PrefixSource = PolicyDefault, SourceProbe }, "score"},
		{"unknown score", func(c *Config) { c.Score = "fast" }, `"fast"`},
		{"unknown reuse", func(c *Config) { c.EngineReuse = "eager" }, "engine_reuse"},
		{"negative drain", func(c *Config) { c.TTFTDrainTokens = -1 }, "ttft_drain_tokens"},
		{"quiet with cold_start_warmup", func(c *Config) { c.Warmup, c.ColdStartWarmup = WarmupQuiet, true }, "warmup"},
	} {
		c := ttftCfg(2, ReuseAfterIteration)
		tc.set(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate() = %v, want an error naming %s", tc.name, err, tc.want)
		}
	}
}

// BenchmarkTTFTScore is BenchmarkIndexSource under the recommended preset
// (probe+index, ttft score, quiet warmup): batches of 8 requests of 2,300
// tokens over 16 prompt families, probed matches of zero. Compare the two
// for the score's cost over the index's.
func BenchmarkTTFTScore(b *testing.B) {
	cfg := sourceCfg(8, SourceProbeIndex)
	if err := ApplyPreset(&cfg, PresetRecommended); err != nil {
		b.Fatal(err)
	}
	benchFamilies(b, cfg, make([]int32, 8*8))
}

// The queued prefill the TTFT score keeps is state that decides later calls,
// and it depends on the rank states a call passes (the cap), which the
// placements alone do not show: routers fed different states must report
// different digests, equal ones equal digests.
func TestTTFTQueuedInDigest(t *testing.T) {
	cfg := ttftCfg(2, ReuseAfterIteration)
	busy := func(tokens int64) []RankState {
		s := idle(2)
		for k := range s {
			s[k].NumActiveRequests, s[k].NumActiveTokens = 1, tokens
		}
		return s
	}
	a, b, c := mustNew(t, cfg), mustNew(t, cfg), mustNew(t, cfg)
	for _, r := range []*Router{a, b, c} {
		mustRoute(t, r, busy(1<<20), []Request{extend(1, nil, 30000)}, 8, nil)
	}
	// Same call, but b's ranks report less active work: its queued
	// prefill is capped lower, which will change where the next request
	// goes.
	mustRoute(t, a, busy(1<<20), nil, 8, nil)
	mustRoute(t, b, busy(100), nil, 8, nil)
	mustRoute(t, c, busy(1<<20), nil, 8, nil)
	if a.StateDigest() == b.StateDigest() {
		t.Errorf("routers with different queued prefill share digest %#x", a.StateDigest())
	}
	if a.StateDigest() != c.StateDigest() {
		t.Errorf("routers fed the same calls: digests %#x and %#x", a.StateDigest(), c.StateDigest())
	}
}

// An empty batch is a decision too: it drains one iteration's budget from
// every rank's queued prefill (TensorRT-LLM routes every iteration, with no
// new requests as well), so a rank's queue empties while nothing arrives.
func TestTTFTEmptyBatchesDrain(t *testing.T) {
	cfg := ttftCfg(2, ReuseAfterIteration)
	cfg.TTFTDrainTokens = 1000
	r := mustNew(t, cfg)
	res := mustRoute(t, r, idle(2), []Request{req(1, 4000)}, 8, make([]int32, 2))
	k := res.Ranks[0]
	busy := idle(2)
	busy[k] = RankState{Rank: k, NumActiveRequests: 1, NumActiveTokens: 4000}
	for calls, want := range []int64{4000, 3000, 2000, 1000, 0, 0} {
		if got := r.ttft.queued[k]; got != want {
			t.Fatalf("after %d empty batches: %d tokens queued on rank %d, want %d", calls, got, k, want)
		}
		before := r.StateDigest()
		mustRoute(t, r, busy, nil, 8, nil)
		if want > 0 && r.StateDigest() == before {
			t.Fatalf("empty batch %d drained the queue but left the state digest unchanged", calls+1)
		}
	}
}

// A rank whose active requests' uncached tokens exceed its KV pool has at
// least the excess queued, whatever the drain says: those requests cannot
// all hold KV at once, so some wait for memory.
func TestTTFTQueuedAtLeastPoolExcess(t *testing.T) {
	for _, tc := range []struct {
		name             string
		capacity, active int64
		want             int64 // queued prefill after an empty decision
	}{
		{"the pool holds every active request", 100_000, 50_000, 0},
		{"active uncached tokens beyond the pool wait", 100_000, 130_000, 30_000},
		{"no capacity reported", 0, 130_000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustNew(t, ttftCfg(2, ReuseAfterIteration))
			states := []RankState{
				{Rank: 0, NumActiveRequests: 9, NumActiveTokens: tc.active, KVCapacityTokens: tc.capacity, FreeKVTokens: tc.capacity / 2},
				{Rank: 1, NumActiveRequests: 1, NumActiveTokens: 10_000, KVCapacityTokens: 100_000, FreeKVTokens: 50_000},
			}
			mustRoute(t, r, states, nil, 16, nil)
			if got := r.ttft.queued[0]; got != tc.want {
				t.Errorf("rank 0: %d tokens queued, want %d", got, tc.want)
			}

			// A request whose prefix rank 0 holds stays there: while
			// nothing waits for its pool by the prediction, past it by the
			// reference's score, which for a request with a prefix to keep
			// heeds no room, however much waits there.
			q := extend(9, prompt(960), 40)
			res := mustRoute(t, r, states, []Request{q}, 16, []int32{960, 0})
			if got := res.Ranks[0]; got != 0 {
				t.Errorf("request on rank %d, want 0, the holder of its prefix", got)
			}
		})
	}
}

// Past the KV memory the prediction gives way to the reference's score: a
// rank that holds many tokens of decoding requests computes nothing new
// (nothing queued there), so the prediction sends a request to it, while
// the reference's load term, the active uncached tokens, follows the
// memory they hold. Once some rank shows tokens waiting for memory, the
// decision places as the reference does (and says so in its receipts),
// except that for a request with no prefix to keep, as here, the waiting
// rank has no room while another has.
func TestTTFTPastMemory(t *testing.T) {
	for _, tc := range []struct {
		name     string
		capacity int64 // rank 2's pool; it holds 2000 active uncached tokens
		want     int
		reason   Reason
	}{
		{"within the memory", 100_000, 0, ReasonPredictedTTFT},
		{"past the memory", 1_000, 1, ReasonScored},
	} {
		t.Run(tc.name, func(t *testing.T) {
			states := []RankState{
				{Rank: 0, NumActiveRequests: 1, NumActiveTokens: 60_000, KVCapacityTokens: 100_000, FreeKVTokens: 90_000},
				{Rank: 1, NumActiveRequests: 5, NumActiveTokens: 1_500, KVCapacityTokens: 100_000, FreeKVTokens: 90_000},
				{Rank: 2, NumActiveRequests: 1, NumActiveTokens: 2_000, KVCapacityTokens: tc.capacity, FreeKVTokens: 0},
			}
			if got := memoryBound(states); got != (tc.reason == ReasonScored) {
				t.Fatalf("memoryBound = %v", got)
			}
			reqs := []Request{extend(1, nil, 1000)}
			res, rcs := explained(t, ttftCfg(3, ReuseAfterIteration), states, reqs, 8, make([]int32, 3))
			if got := res.Ranks[0]; got != tc.want || rcs[0].Reason != tc.reason {
				t.Fatalf("request on rank %d (%s), want %d (%s):\n%s", got, rcs[0].Reason, tc.want, tc.reason, &rcs[0])
			}
			if tc.reason != ReasonScored {
				return
			}
			if c := rcs[0].Candidates[2]; c.Excluded != ExcludedNoRoom {
				t.Errorf("rank 2, tokens waiting for memory: %s, want %s", c.Excluded, ExcludedNoRoom)
			}
			// The reference's own policy makes the same choice.
			ref := DefaultConfig(PolicyKVCacheAware, 3)
			ref.PrefixSource = SourceProbeIndex
			want := mustRoute(t, mustNew(t, ref), states, reqs, 8, make([]int32, 3)).Ranks[0]
			if res.Ranks[0] != want {
				t.Errorf("rank %d, the reference's %d", res.Ranks[0], want)
			}
		})
	}
}

// Past the KV memory the room is not heeded for a request with a prefix to
// keep, as the reference does not heed it: a 40k-token prompt whose
// 36k-token prefix rank 0 holds goes there although rank 0's free KV is
// short of the prompt. Heeding it would compute the prefix again on
// another rank, a second copy of its blocks in an engine already short of
// them. Within the memory, and past it for a request with no prefix to
// keep, the room is heeded (capacity_aware's rule).
func TestTTFTPastMemoryRoom(t *testing.T) {
	const prompt = 40_000
	for _, tc := range []struct {
		name         string
		capacity     int64 // rank 2's pool; it holds 2000 active uncached tokens
		held         int32 // the prefix of the prompt rank 0 holds
		free0, free1 int64 // ranks 0 and 1's free KV tokens
		want         int
		reason       Reason
		excluded     Exclusion // rank 0's mark in the receipt
		fallback     bool      // the receipt's CapacityFallback
	}{
		// Rank 0 would compute 9280 tokens, more than an iteration: the
		// room is heeded (TestTTFTKeepsHolders).
		{"within the memory", 100_000, 30_720, 30_000, 90_000, 1, ReasonPredictedTTFT, ExcludedNoRoom, false},
		{"past the memory", 1_000, 36_864, 30_000, 90_000, 0, ReasonScored, Eligible, false},
		{"past the memory, no prefix", 1_000, 0, 30_000, 90_000, 1, ReasonScored, ExcludedNoRoom, false},
		// No rank has room for what it needs, but the room is unheeded: no
		// fallback narrowed the candidates.
		{"past the memory, no room anywhere", 1_000, 36_864, 30_000, 30_000, 0, ReasonScored, Eligible, false},
		// A prefix under the reference's gate keeps the room heeded. Rank
		// 0's 38,000 free tokens would hold the 36,992 it computes, but
		// they may be that prefix's own blocks: no rank has room for the
		// whole prompt, and the most headroom (rank 0) is allowed.
		{"past the memory, a short prefix, no room", 1_000, 3_008, 38_000, 30_000, 0, ReasonScored, Eligible, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			states := []RankState{
				{Rank: 0, NumActiveRequests: 2, NumActiveTokens: 4_000, KVCapacityTokens: 100_000, FreeKVTokens: tc.free0},
				{Rank: 1, NumActiveRequests: 2, NumActiveTokens: 4_000, KVCapacityTokens: 100_000, FreeKVTokens: tc.free1},
				{Rank: 2, NumActiveRequests: 1, NumActiveTokens: 2_000, KVCapacityTokens: tc.capacity, FreeKVTokens: 0},
			}
			if got := memoryBound(states); got != (tc.reason == ReasonScored) {
				t.Fatalf("memoryBound = %v", got)
			}
			reqs := []Request{extend(1, nil, prompt)}
			matches := []int32{tc.held, 0, 0}
			cfg := ttftCfg(3, ReuseAfterIteration)
			cfg.CapacityAware = true
			res, rcs := explained(t, cfg, states, reqs, 8, matches)
			if got := res.Ranks[0]; got != tc.want || rcs[0].Reason != tc.reason {
				t.Fatalf("request on rank %d (%s), want %d (%s):\n%s", got, rcs[0].Reason, tc.want, tc.reason, &rcs[0])
			}
			if c := rcs[0].Candidates[0]; c.Excluded != tc.excluded {
				t.Errorf("rank 0 (free %d, the prompt %d): %s, want %s", states[0].FreeKVTokens, prompt, c.Excluded, tc.excluded)
			}
			if rcs[0].CapacityFallback != tc.fallback {
				t.Errorf("CapacityFallback = %v, want %v:\n%s", rcs[0].CapacityFallback, tc.fallback, &rcs[0])
			}
			if tc.reason != ReasonScored || tc.held == 0 || tc.fallback {
				return // the reference's own placement: a prefix to keep, the room unheeded
			}
			ref := DefaultConfig(PolicyKVCacheAware, 3)
			ref.PrefixSource = SourceProbeIndex
			if want := mustRoute(t, mustNew(t, ref), states, reqs, 8, matches).Ranks[0]; res.Ranks[0] != want {
				t.Errorf("rank %d, the reference's %d", res.Ranks[0], want)
			}
		})
	}
}

// Past the KV memory an idle rank takes the request: while the prefix's
// holders hold the memory and some rank shows tokens waiting for it, a rank
// with no active request and room for the prompt computes it whole at
// once, where the reference's score (the holders compute least) would
// queue it behind the memory. Within the memory, or with no idle rank with
// room, the placement is as before. Of two idle ranks the one matching
// more of the prompt goes first, then the lower.
func TestTTFTPastMemoryIdleRank(t *testing.T) {
	const prompt, prefix = 8_000, 6_144
	for _, tc := range []struct {
		name     string
		capacity int64 // rank 2's pool; it holds 2000 active uncached tokens
		active3  int   // rank 3's active requests (rank 4's: 1)
		free3    int64 // rank 3's free KV tokens
		match4   int32 // of the prompt, on rank 4
		idle4    bool  // rank 4 carries nothing
		want     int   // -1: a holder (rank 0 or 1)
		reason   Reason
	}{
		{"idle rank", 1_000, 0, 100_000, 0, false, 3, ReasonDemandWarmup},
		{"within the memory", 100_000, 0, 100_000, 0, false, -1, ReasonPredictedTTFT},
		{"no idle rank", 1_000, 1, 100_000, 0, false, -1, ReasonScored},
		{"an idle rank without room", 1_000, 0, 1_000, 0, false, -1, ReasonScored},
		{"two idle ranks, one holding the prefix", 1_000, 0, 100_000, prefix, true, 4, ReasonDemandWarmup},
		{"two idle ranks, the lower first", 1_000, 0, 100_000, 0, true, 3, ReasonDemandWarmup},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tokens3 int64
			if tc.active3 > 0 {
				tokens3 = 3_000
			}
			active4, tokens4 := 1, int64(3_000)
			if tc.idle4 {
				active4, tokens4 = 0, 0
			}
			states := []RankState{
				{Rank: 0, NumActiveRequests: 2, NumActiveTokens: 50_000, KVCapacityTokens: 100_000, FreeKVTokens: 50_000},
				{Rank: 1, NumActiveRequests: 2, NumActiveTokens: 50_000, KVCapacityTokens: 100_000, FreeKVTokens: 50_000},
				{Rank: 2, NumActiveRequests: 1, NumActiveTokens: 2_000, KVCapacityTokens: tc.capacity, FreeKVTokens: 0},
				{Rank: 3, NumActiveRequests: tc.active3, NumActiveTokens: tokens3, KVCapacityTokens: 100_000, FreeKVTokens: tc.free3},
				{Rank: 4, NumActiveRequests: active4, NumActiveTokens: tokens4, KVCapacityTokens: 100_000, FreeKVTokens: 90_000},
			}
			reqs := []Request{extend(1, nil, prompt)}
			matches := []int32{prefix, prefix, 0, 0, tc.match4}
			res, rcs := explained(t, ttftCfg(5, ReuseAfterIteration), states, reqs, 16, matches)
			got := res.Ranks[0]
			if rcs[0].Reason != tc.reason || (tc.want >= 0 && got != tc.want) || (tc.want < 0 && got > 1) {
				t.Fatalf("request on rank %d (%s), want %d (%s; -1: a holder):\n%s", got, rcs[0].Reason, tc.want, tc.reason, &rcs[0])
			}
		})
	}
}

// TestTTFTKeepsHolders: a rank that has computed at least half of a prompt
// and would compute at most ttft_drain_tokens of it keeps the request
// whatever its KV room, unless it reports its pending KV or the part held
// is under a 64th of its pool; elsewhere the request would compute the
// prefix again and hold a second copy of it. A rank that holds less, or
// would compute more, or whose room is the engine's own account, is left
// to the room check.
func TestTTFTKeepsHolders(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prompt  int   // tokens; rank 0 has computed held of them
		held    int32 // a whole number of 32-token blocks
		drain   int   // ttft_drain_tokens
		free0   int64 // rank 0's free KV tokens (rank 1's pool is empty)
		pending bool  // rank 0 reports its pending KV (none)
		want    int
	}{
		{"three quarters held, an iteration to compute, no room", 4032, 3008, 8192, 500, false, 0},
		{"half held, no room", 4032, 2016, 8192, 500, false, 0},
		{"under half held, no room", 4032, 1984, 8192, 500, false, 1},
		{"computes exactly an iteration, no room", 4032, 3008, 1024, 500, false, 0},
		{"computes more than an iteration, no room", 4032, 3008, 1000, 500, false, 1},
		{"under half held, room", 4032, 1984, 8192, 32_768, false, 0},
		{"three quarters held, no room, pending KV reported", 4032, 3008, 8192, 500, true, 1},
		// The pool is 32768 tokens: a 64th of it is 512.
		{"a 64th of the pool held, no room", 1024, 512, 8192, 100, false, 0},
		{"under a 64th of the pool held, no room", 960, 480, 8192, 100, false, 1},
	} {
		for _, reuse := range []EngineReuse{ReuseAfterIteration, ReuseOnSchedule} {
			t.Run(tc.name+"/"+string(reuse), func(t *testing.T) {
				cfg := ttftCfg(2, reuse)
				cfg.TTFTDrainTokens = tc.drain
				states := []RankState{
					{Rank: 0, NumActiveRequests: 4, NumActiveTokens: 2000, KVCapacityTokens: 32_768, FreeKVTokens: tc.free0,
						ReportsPendingKV: tc.pending},
					{Rank: 1, NumActiveRequests: 4, NumActiveTokens: 2000, KVCapacityTokens: 32_768, FreeKVTokens: 32_768},
				}
				reqs := []Request{extend(1, nil, tc.prompt)}
				res, rcs := explained(t, cfg, states, reqs, 8, []int32{tc.held, 0})
				if got := res.Ranks[0]; got != tc.want {
					t.Fatalf("request on rank %d, want %d:\n%s", got, tc.want, &rcs[0])
				}
				want := Eligible
				if tc.want == 1 {
					want = ExcludedNoRoom
				}
				if c := rcs[0].Candidates[0]; c.Excluded != want {
					t.Errorf("rank 0 in the receipt: %s, want %s", c.Excluded, want)
				}
			})
		}
	}
}

// TestTTFTTiesPreferRoom: of two ranks a request's prediction ties, one
// with at least an eighth of its KV pool free goes before one with fewer
// requests where some rank holds the request's prefix: the prediction
// counts queued prefill, not the blocks the queue will wait for. A prompt
// no rank holds, and a new conversation, are spread by request counts
// alone.
func TestTTFTTiesPreferRoom(t *testing.T) {
	const pool = 32_768 // tokens; an eighth is 4096
	for _, tc := range []struct {
		name  string
		held  int32 // prompt tokens both ranks have computed
		free0 int64 // rank 0's free KV tokens; it serves 2 requests, rank 1 4
		conv  bool  // the request opens a conversation
		want  int
	}{
		{"held, rank 0 short of an eighth", 512, 4095, false, 1},
		{"held, rank 0 at an eighth", 512, 4096, false, 0},
		{"held, both with room", 512, pool, false, 0},
		{"not held, rank 0 short of an eighth", 0, 4095, false, 0},
		{"new conversation, held, rank 0 short of an eighth", 512, 4095, true, 0},
	} {
		for _, reuse := range []EngineReuse{ReuseAfterIteration, ReuseOnSchedule} {
			t.Run(tc.name+"/"+string(reuse), func(t *testing.T) {
				states := []RankState{
					{Rank: 0, NumActiveRequests: 2, NumActiveTokens: 2000, KVCapacityTokens: pool, FreeKVTokens: tc.free0},
					{Rank: 1, NumActiveRequests: 4, NumActiveTokens: 2000, KVCapacityTokens: pool, FreeKVTokens: pool / 2},
				}
				req := extend(1, nil, 1024)
				if tc.conv {
					req.ConversationID = "c1"
				}
				res, rcs := explained(t, ttftCfg(2, reuse), states, []Request{req}, 8, []int32{tc.held, tc.held})
				if got := res.Ranks[0]; got != tc.want {
					t.Fatalf("request on rank %d, want %d:\n%s", got, tc.want, &rcs[0])
				}
			})
		}
	}
}

// rampFamilies makes the ramp tests' requests: family f's share a
// 2048-token prefix, each request adds a 32-token tail of its own, and ids
// count up from 1 across families.
type rampFamilies struct{ id uint64 }

func (g *rampFamilies) requests(f, n, target int) []Request {
	var out []Request
	for range n {
		g.id++
		toks := make([]int32, 2080)
		for k := range toks {
			toks[k] = int32(f*100_000 + k)
			if k >= 2048 {
				toks[k] = int32(g.id*1000 + uint64(k))
			}
		}
		out = append(out, Request{ID: g.id, Tokens: toks, TargetRank: target})
	}
	return out
}

// loadedStates returns dp ranks with 5 active requests each: past
// ttftRampLoad, so a ramping router makes replicas.
func loadedStates(dp int) []RankState {
	states := make([]RankState, dp)
	for k := range states {
		states[k] = RankState{Rank: k, NumActiveRequests: 5, NumActiveTokens: 500}
	}
	return states
}

// demandPlacements counts the last decision's demand warmup placements
// (ramp replicas among them), from its receipts.
func demandPlacements(r *Router) (n int) {
	for _, rc := range r.Receipts() {
		if rc.Reason == ReasonDemandWarmup {
			n++
		}
	}
	return n
}

// TestTTFTRampNotTwiceInARow: while ramping under load, a decision that
// makes a family's replica stalls the next iteration; the decision after it
// makes no replica, however few requests it brings (they arrived during the
// stall), but one after a decision without a replica does.
func TestTTFTRampNotTwiceInARow(t *testing.T) {
	// Prompt families (2080-token prompts) on 8 ranks with 5 active
	// requests each.
	var fams rampFamilies
	family := func(f, n int) []Request { return fams.requests(f, n, NoTarget) }
	states := loadedStates(8)
	replicas := demandPlacements
	for _, tc := range []struct {
		name    string
		between bool // an empty decision after the first replica
		burst   int  // requests of the second family
		want    int  // replicas the last decision makes
	}{
		{"a burst right after a replica", false, 10, 0},
		{"a burst after an iteration without one", true, 10, 1},
		{"no more requests than ranks right after a replica", false, 8, 0},
		{"no more requests than ranks after an iteration without one", true, 8, 1},
		{"a few requests right after a replica", false, 3, 0},
		{"a few requests after an iteration without one", true, 3, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig(PolicyKVCacheAware, len(states))
			if err := ApplyPreset(&cfg, PresetRecommended); err != nil {
				t.Fatal(err)
			}
			cfg.Explain = true
			r := mustNew(t, cfg)
			route := func(reqs []Request) {
				t.Helper()
				if _, err := r.Route(states, reqs, 64, nil); err != nil {
					t.Fatal(err)
				}
			}
			route(family(1, 3))
			if got := replicas(r); got != 1 {
				t.Fatalf("the first decision made %d replicas, want 1 (the case no longer ramps)", got)
			}
			if tc.between {
				route(nil)
			}
			route(family(2, tc.burst))
			if got := replicas(r); got != tc.want {
				t.Errorf("the last decision made %d replicas, want %d", got, tc.want)
			}
		})
	}
}

// TestTTFTRampWithinAnIteration: a ramp replica is made only of a prompt one
// iteration computes (ttft_drain_tokens): a longer one, computed whole,
// would stall the lock step for two.
func TestTTFTRampWithinAnIteration(t *testing.T) {
	var fams rampFamilies
	states := loadedStates(8)
	for _, tc := range []struct {
		drain int // ttft_drain_tokens; the prompts are 2080 tokens
		want  int // replicas
	}{
		{8192, 1},
		{2080, 1},
		{2079, 0},
	} {
		cfg := DefaultConfig(PolicyKVCacheAware, len(states))
		if err := ApplyPreset(&cfg, PresetRecommended); err != nil {
			t.Fatal(err)
		}
		cfg.TTFTDrainTokens = tc.drain
		cfg.Explain = true
		r := mustNew(t, cfg)
		mustRoute(t, r, states, fams.requests(1, 3, NoTarget), 64, nil)
		if got := demandPlacements(r); got != tc.want {
			t.Errorf("ttft_drain_tokens %d: %d replicas of 2080-token prompts, want %d", tc.drain, got, tc.want)
		}
	}
}

// TestTTFTRampEndsAfterRequestsPerRank: the router ramps up only while it
// has routed fewer than ttftRampRequests requests per rank, however large
// its demand window: a family's replica made later would be a stall at a
// load the engine has long carried.
func TestTTFTRampEndsAfterRequestsPerRank(t *testing.T) {
	const dp = 8
	states := loadedStates(dp)
	var fams rampFamilies
	family := func(n, target int) []Request { return fams.requests(1, n, target) }
	for _, tc := range []struct {
		routed int // requests routed before the last decision, all to rank 0
		want   int // replicas the last decision makes
	}{
		{0, 1},
		{ttftRampRequests*dp - 3, 1}, // its requests are the ramp's last
		{ttftRampRequests * dp, 0},
	} {
		cfg := DefaultConfig(PolicyKVCacheAware, dp)
		if err := ApplyPreset(&cfg, PresetRecommended); err != nil {
			t.Fatal(err)
		}
		if cfg.WarmupWindow <= ttftRampRequests*dp {
			t.Fatalf("warmup_window %d: the test wants a window larger than the ramp", cfg.WarmupWindow)
		}
		cfg.Explain = true
		r := mustNew(t, cfg)
		// The family's traffic so far, sent to rank 0 by explicit target:
		// one holder, and the whole demand window.
		for left := tc.routed; left > 0; left -= 32 {
			mustRoute(t, r, states, family(min(left, 32), 0), 64, nil)
		}
		// Three more under load (5 active requests per rank): the family
		// wants another rank.
		mustRoute(t, r, states, family(3, NoTarget), 64, nil)
		if got := demandPlacements(r); got != tc.want {
			t.Errorf("after %d requests routed: %d replicas, want %d", tc.routed, got, tc.want)
		}
	}
}

// TestTTFTRampFewHolders: a ramping router makes a replica only of a family
// held by fewer than ttftRampHolders ranks: on more, one replica adds
// little to the family's ranks and stalls every rank as much.
func TestTTFTRampFewHolders(t *testing.T) {
	const dp = 32
	states := loadedStates(dp)
	for _, tc := range []struct {
		holders int
		want    int // replicas the last decision makes
	}{
		{1, 1},
		{7, 1},
		{8, 0}, // ttftRampHolders
		{12, 0},
	} {
		var fams rampFamilies
		cfg := DefaultConfig(PolicyKVCacheAware, dp)
		if err := ApplyPreset(&cfg, PresetRecommended); err != nil {
			t.Fatal(err)
		}
		cfg.Explain = true
		r := mustNew(t, cfg)
		// The family on its first holders, by explicit target.
		for k := range tc.holders {
			mustRoute(t, r, states, fams.requests(1, 1, k), 64, nil)
		}
		// Three more under load (5 active requests per rank, 163 in
		// all): more than the holders take at the soft cap of a fair
		// share (12), so the family wants another rank however many
		// hold it here.
		mustRoute(t, r, states, fams.requests(1, 3, NoTarget), 64, nil)
		if got := demandPlacements(r); got != tc.want {
			t.Errorf("a family on %d of %d ranks: %d replicas, want %d", tc.holders, dp, got, tc.want)
		}
	}
}

// TestTTFTShortestFirst: a rank whose share of a decision spills past one
// iteration is handed it shortest first, while its KV pool has room to
// spare; otherwise in placement order (longest first).
func TestTTFTShortestFirst(t *testing.T) {
	// Prompts of 5000, 3000, 200 and 100 tokens, 8300 in all: placed
	// longest first, they spill past an 8192-token iteration.
	reqs := []Request{extend(1, nil, 3000), extend(2, nil, 200), extend(3, nil, 5000), extend(4, nil, 100)}
	const pool = 100_000
	placed, shortest := []uint64{3, 1, 2, 4}, []uint64{4, 2, 1, 3}
	for _, tc := range []struct {
		name  string
		drain int
		// free is rank 0's free KV (0: no pool reported); past puts
		// rank 1 past its memory.
		free int64
		past bool
		want []uint64
	}{
		{"spills, room to spare", 8192, pool, false, shortest},
		{"within one iteration", 8300, pool, false, placed},
		// 21000 - 8300 left is at least an eighth of the pool; 20000 - 8300 is not.
		{"an eighth of the pool left", 8192, 21_000, false, shortest},
		{"less than an eighth left", 8192, 20_000, false, placed},
		{"past the memory", 8192, pool, true, placed},
		{"no pool reported", 8192, 0, false, placed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ttftCfg(2, ReuseAfterIteration)
			cfg.TTFTDrainTokens = tc.drain
			states := []RankState{
				{Rank: 0, KVCapacityTokens: pool, FreeKVTokens: tc.free},
				// Rank 1 is full: every request goes to rank 0.
				{Rank: 1, NumActiveRequests: 8, NumActiveTokens: 800, KVCapacityTokens: pool, FreeKVTokens: 0},
			}
			if tc.past {
				states[1].KVCapacityTokens, states[1].NumActiveTokens = 500, 800
			}
			if tc.free == 0 {
				states[0].KVCapacityTokens = 0
			}
			res, _ := explained(t, cfg, states, reqs, 8, make([]int32, 2*len(reqs)))
			if got := res.Assignment[0]; !slices.Equal(got, tc.want) {
				t.Errorf("rank 0 handed %v, want %v (all: %v)", got, tc.want, res.Assignment)
			}
		})
	}
}

// TestTTFTShortestFirstSamples: a rank where a request rides on a prefix not
// computed yet (here a sample of a prompt placed beside it) keeps the
// placement order, which decides whether it reuses that prefix.
func TestTTFTShortestFirstSamples(t *testing.T) {
	prompt := extend(100, nil, 5000).Tokens
	sample := func(id uint64) Request { return Request{ID: id, Tokens: prompt, TargetRank: NoTarget} }
	for _, tc := range []struct {
		name string
		reqs []Request
		want []uint64
	}{
		// Unrelated prompts of 5000, 4000, 3000 and 100 tokens.
		{"no samples", []Request{extend(1, nil, 3000), extend(2, nil, 5000), extend(3, nil, 4000), extend(4, nil, 100)},
			[]uint64{4, 1, 3, 2}},
		// Two samples of one 5000-token prompt: the second rides on the
		// first's prefix.
		{"samples", []Request{extend(1, nil, 3000), sample(2), sample(3), extend(4, nil, 100)},
			[]uint64{2, 3, 1, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			states := []RankState{
				{Rank: 0, KVCapacityTokens: 100_000, FreeKVTokens: 100_000},
				{Rank: 1, NumActiveRequests: 8, NumActiveTokens: 800, KVCapacityTokens: 100_000},
			}
			res, _ := explained(t, ttftCfg(2, ReuseAfterIteration), states, tc.reqs, 8, make([]int32, 2*len(tc.reqs)))
			if got := res.Assignment[0]; !slices.Equal(got, tc.want) {
				t.Errorf("rank 0 handed %v, want %v", got, tc.want)
			}
		})
	}
}

// TestTTFTRoomReplica: at light load, a family whose holders' KV pools are
// full (by the index) takes a rank whose pool is mostly empty; not while a
// holder has room, under load, in a decision that brings another request
// (it would wait for the replica's prompt), nor for a request whose held
// prefix is its own context, a bound conversation's turn or a family not
// in demand.
func TestTTFTRoomReplica(t *testing.T) {
	// A family of 1024-token prompts (32 blocks), each request adding 1024
	// tokens of its own; pools of 4096 tokens (128 blocks). Two requests
	// on rank 0 fill its index to 96 blocks: the third's 64 do not fit.
	family := make([]int32, 1024)
	for k := range family {
		family[k] = int32(500_000 + k)
	}
	first, second := extend(1, family, 1024), extend(2, family, 1024)
	for _, tc := range []struct {
		name      string
		pool      int64
		minDemand int
		active    int // per rank, in the third decision
		third     Request
		with      bool // the third decision brings a request of another prompt too
		want      int
	}{
		{"holder full, others empty", 4096, 2, 0, extend(3, family, 1024), false, 1},
		{"holder full, with another request", 4096, 2, 0, extend(3, family, 1024), true, 0},
		// 1024 of 4096 tokens held: it computes three quarters anyway.
		{"holder full, with another request, mostly uncached", 4096, 2, 0, extend(3, family, 3072), true, 1},
		{"holder full, with another request, a token short", 4096, 2, 0, extend(3, family, 3071), true, 0},
		{"holder with room", 1 << 20, 2, 0, extend(3, family, 1024), false, 0},
		{"no pool reported", 0, 2, 0, extend(3, family, 1024), false, 0},
		{"family not in demand", 4096, 3, 0, extend(3, family, 1024), false, 0},
		// Past ttftRampLoad active requests per rank.
		{"under load", 4096, 2, 5, extend(3, family, 1024), false, 0},
		// The second request's whole prompt and 256 tokens: its context.
		{"own context", 4096, 2, 0, extend(3, second.Tokens, 256), false, 0},
		{"bound conversation", 4096, 2, 0, func() Request {
			q := extend(3, family, 1024)
			q.ConversationID = "c"
			return q
		}(), false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ttftCfg(4, ReuseAfterIteration)
			cfg.WarmupMinRequests = tc.minDemand
			// A window the first two requests fill: no ramp replicas.
			cfg.WarmupWindow = 2
			cfg.Explain = true
			r := mustNew(t, cfg)
			states := make([]RankState, 4)
			for k := range states {
				states[k] = RankState{Rank: k, KVCapacityTokens: tc.pool, FreeKVTokens: tc.pool}
			}
			a, b := first, second
			if tc.third.ConversationID != "" {
				a.ConversationID = tc.third.ConversationID
			}
			for _, q := range []Request{a, b} {
				res := mustRoute(t, r, states, []Request{q}, 8, nil)
				if !slices.Contains(res.Assignment[0], q.ID) {
					t.Fatalf("request %d went to %v, want rank 0 (the setup no longer holds)", q.ID, res.Assignment)
				}
			}
			for k := range states {
				states[k].NumActiveRequests, states[k].NumActiveTokens = tc.active, int64(100*tc.active)
			}
			batch := []Request{tc.third}
			if tc.with {
				batch = append(batch, extend(4, prompt(64), 64))
			}
			res := mustRoute(t, r, states, batch, 8, nil)
			if !slices.Contains(res.Assignment[tc.want], tc.third.ID) {
				t.Errorf("the third request went to %v, want rank %d", res.Assignment, tc.want)
			}
			replica := slices.ContainsFunc(r.Receipts(), func(rc Receipt) bool { return rc.Reason == ReasonDemandWarmup })
			if replica != (tc.want != 0) {
				t.Errorf("demand-warmup receipt: %v, want %v", replica, tc.want != 0)
			}
		})
	}
}

// TestTTFTRoomReplicaWithinHalfAnIteration: a replica for room is made only
// of a prefix of at most half an iteration (ttft_drain_tokens): computed
// again at light load, a longer one is a lock-step stall of its own. The
// prompt's length beyond it does not matter where the prefix is its
// family's (held on two ranks), not the request's own context.
func TestTTFTRoomReplicaWithinHalfAnIteration(t *testing.T) {
	// A family of 1024-token prompts (32 blocks) on ranks 0 and 1, each
	// holding two requests that add 1024 tokens of their own: 96 of their
	// 128 blocks (4096-token pools).
	family := make([]int32, 1024)
	for k := range family {
		family[k] = int32(700_000 + k)
	}
	for _, tc := range []struct {
		drain   int  // ttft_drain_tokens
		own     int  // the last request's tokens beyond the family's
		replica bool // it goes to rank 2 or 3
	}{
		{8192, 1024, true},
		{2048, 1024, true},
		{2047, 1024, false},
		{8192, 256, true}, // mostly the family's prefix
		{2047, 256, false},
	} {
		cfg := ttftCfg(4, ReuseAfterIteration)
		cfg.TTFTDrainTokens = tc.drain
		cfg.WarmupMinRequests, cfg.WarmupWindow = 2, 4
		cfg.Explain = true
		r := mustNew(t, cfg)
		states := make([]RankState, 4)
		for k := range states {
			states[k] = RankState{Rank: k, KVCapacityTokens: 4096, FreeKVTokens: 4096}
		}
		for id, k := range []int{0, 0, 1, 1} {
			q := extend(uint64(id+1), family, 1024)
			q.TargetRank = k
			mustRoute(t, r, states, []Request{q}, 8, nil)
		}
		last := extend(9, family, tc.own)
		res := mustRoute(t, r, states, []Request{last}, 8, nil)
		got := slices.Contains(res.Assignment[2], last.ID) || slices.Contains(res.Assignment[3], last.ID)
		if got != tc.replica {
			t.Errorf("ttft_drain_tokens %d, %d tokens beyond the 1024-token prefix: went to %v, want a replica %v",
				tc.drain, tc.own, res.Assignment, tc.replica)
		}
		if receipt := demandPlacements(r) == 1; receipt != tc.replica {
			t.Errorf("ttft_drain_tokens %d, %d tokens beyond the 1024-token prefix: demand-warmup receipt %v, want %v",
				tc.drain, tc.own, receipt, tc.replica)
		}
	}
}

// TestTTFTSlotsFilling: when every rank holding a request's prefix holds
// at least half its request slots, a rank with at most half as many
// requests as the least loaded holder computes the prefix again without
// the recompute charge (see slotsFilling). Not while a holder is under
// half its slots, not on a rank with more than half the holder's
// requests, not for a sample of the prompt (a block or less beyond it on
// the holder), and not for a prompt longer than an iteration computes.
func TestTTFTSlotsFilling(t *testing.T) {
	const prefix, maxn = 2048, 16
	for _, tc := range []struct {
		name     string
		holder   int // rank 0's active requests, before this decision's first
		other    int // rank 1's (ranks 2 and 3 hold 9)
		tail     int // the request's tokens beyond the prefix
		drain    int // ttft_drain_tokens; 0 the default
		wantRank int
	}{
		{"holder at half its slots", 7, 4, 200, 0, 1},
		{"holder under half its slots", 6, 3, 200, 0, 0},
		{"no rank at half the holder's requests", 7, 5, 200, 0, 0},
		{"a sample of the prompt", 7, 4, 16, 0, 0},
		{"a prompt one iteration computes", 7, 4, 200, 2248, 1},
		{"a prompt longer than an iteration", 7, 4, 200, 2000, 0},
	} {
		for _, reuse := range []EngineReuse{ReuseAfterIteration, ReuseOnSchedule} {
			t.Run(tc.name+"/"+string(reuse), func(t *testing.T) {
				states := []RankState{
					{Rank: 0, NumActiveRequests: tc.holder, NumActiveTokens: 100_000},
					{Rank: 1, NumActiveRequests: tc.other, NumActiveTokens: 100_000},
					{Rank: 2, NumActiveRequests: 9, NumActiveTokens: 100_000},
					{Rank: 3, NumActiveRequests: 9, NumActiveTokens: 100_000},
				}
				// A request bound to rank 0 queues 3000 tokens there first
				// (and takes a slot); then the family's request, whose
				// prefix rank 0 holds: 3200 tokens to wait for there, the
				// busiest rank's 3000 on rank 1.
				busy := extend(1, nil, 3000)
				busy.TargetRank, busy.Strict = 0, true
				shared := extend(2, nil, prefix)
				reqs := []Request{busy, extend(3, shared.Tokens, tc.tail)}
				matches := []int32{0, 0, 0, 0, prefix, 0, 0, 0}
				cfg := ttftCfg(4, reuse)
				if tc.drain > 0 {
					cfg.TTFTDrainTokens = tc.drain
				}
				res, rcs := explained(t, cfg, states, reqs, maxn, matches)
				if got := res.Ranks[1]; got != tc.wantRank || rcs[1].Reason != ReasonPredictedTTFT {
					t.Fatalf("request on rank %d (%s), want %d (%s):\n%s", got, rcs[1].Reason, tc.wantRank, ReasonPredictedTTFT, &rcs[1])
				}
			})
		}
	}
}

// TestTTFTOutgrownFamily: a prompt family with more than a fair share of the
// traffic per rank holding it, whose holders set the lock step, gets one
// replica per decision on a rank whose queue with it ends within the next
// iteration (see outgrown). Not past that iteration, not for a
// conversation's turns, not for a family its holders serve at a fair share,
// and not while another family's holder sets the lock step.
func TestTTFTOutgrownFamily(t *testing.T) {
	const dp, prefix = 4, 512
	// A family: the ranks holding its 512-token prefix, its requests among
	// the demand window's (placed on the holders by target, in turn), and
	// its requests in the decision, each with tail tokens of its own.
	type family struct {
		holders       []int
		warm, n, tail int
	}
	mk := func(id uint64, f, tail, target int, conv string) Request {
		toks := make([]int32, prefix+tail)
		for k := range toks {
			toks[k] = int32(f*100_000 + k)
			if k >= prefix {
				toks[k] = int32(id*1000 + uint64(k))
			}
		}
		return Request{ID: id, Tokens: toks, TargetRank: target, Strict: target != NoTarget, ConversationID: conv}
	}
	// Family 0 is held by the three ranks family 1 is not on; its share of
	// the window is two thirds, within what its holders take. Family 1's
	// share is a third: more than a fair share of the active requests for
	// its one holder, less than the fair soft cap's (past which
	// needsReplica wants another holder), through the decision.
	three := func(n, tail int) family { return family{[]int{0, 1, 3}, 12, n, tail} }
	one := family{[]int{2}, 6, 6, 200}
	for _, tc := range []struct {
		name    string
		drain   int  // ttft_drain_tokens; 0 the default
		conv    bool // the last family's requests are conversations' turns
		fams    []family
		wantOff int // requests of families 1.. placed off their holders
	}{
		{"one replica", 0, false, []family{three(4, 200), one}, 1},
		{"a replica past the next iteration", 700, false, []family{three(4, 200), one}, 0},
		{"conversations' turns", 0, true, []family{three(4, 200), one}, 0},
		{"held at a fair share", 0, false, []family{{[]int{0, 3}, 12, 4, 200}, {[]int{1, 2}, 6, 6, 200}}, 0},
		{"a family 0 holder sets the lock step", 0, false, []family{three(1, 3000), one}, 0},
		// Two families outgrow one holder each; family 0 is at a fair
		// share on its two. One replica in all.
		{"one replica per decision", 0, false, []family{{[]int{0, 1}, 6, 2, 200},
			{[]int{2}, 7, 6, 200}, {[]int{3}, 7, 6, 200}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ttftCfg(dp, ReuseAfterIteration)
			cfg.TTFTDrainTokens, cfg.Explain = tc.drain, true
			r := mustNew(t, cfg)
			last := len(tc.fams) - 1
			conv := func(f int, id uint64) string {
				if tc.conv && f == last {
					return fmt.Sprintf("c%d", id)
				}
				return ""
			}
			var warm []Request
			id := uint64(0)
			for f, fam := range tc.fams {
				for n := range fam.warm {
					id++
					warm = append(warm, mk(id, f, 200, fam.holders[n%len(fam.holders)], conv(f, id)))
				}
			}
			mustRoute(t, r, idle(dp), warm, 32, make([]int32, dp*len(warm)))
			// The decision, each prefix computed where its requests went
			// (the ranks idle: no ramp replicas, see ttftRampLoad); the
			// turns come back to the conversations opened above.
			var reqs []Request
			var matches []int32
			var fams []int
			for f, fam := range tc.fams {
				for n := range fam.n {
					q := mk(uint64(100+len(reqs)), f, fam.tail, NoTarget, "")
					if conv(f, 0) != "" {
						q.ConversationID = conv(f, id-uint64(n))
					}
					reqs, fams = append(reqs, q), append(fams, f)
					for k := range dp {
						var m int32
						if slices.Contains(fam.holders, k) {
							m = prefix
						}
						matches = append(matches, m)
					}
				}
			}
			states := idle(dp)
			res := mustRoute(t, r, states, reqs, 32, matches)
			rcs := r.Receipts()
			if err := checkReceipts(cfg, states, reqs, res, rcs); err != nil {
				t.Fatal(err)
			}
			off := 0
			for i, k := range res.Ranks {
				if f := fams[i]; f > 0 && !slices.Contains(tc.fams[f].holders, k) {
					off++
					if !rcs[i].ReplicaWanted {
						t.Errorf("request %d left family %d's holders without ReplicaWanted:\n%s", reqs[i].ID, f, &rcs[i])
					}
				}
			}
			if off != tc.wantOff {
				var sb strings.Builder
				for n := range rcs {
					fmt.Fprintf(&sb, "%s\n", &rcs[n])
				}
				t.Errorf("ranks %v: %d requests off their family's holders, want %d\n%s", res.Ranks, off, tc.wantOff, sb.String())
			}
		})
	}
}

// Under ReuseAfterIteration a request the score puts on the rank computing
// its prompt for another request, ready by the next iteration, is left
// unplaced (holdForFlight): placed there it would compute the prompt again
// in the same iteration. Not where blocks are reusable as scheduled, nor
// without a probe, nor for a sample of the prompt, nor where the rank's
// queue takes more than an iteration, nor where another rank is free.
func TestTTFTHeldForPromptInFlight(t *testing.T) {
	base := prompt(2048)
	first := extend(1, base, 100) // computes base on the rank it takes
	for _, tc := range []struct {
		name   string
		reuse  EngineReuse
		probe  bool
		drain  int    // TTFTDrainTokens; 0 for the default
		active [4]int // maxn 4: ranks 1-3 full leave rank 0 alone eligible
		second Request
		want   []int
	}{
		{"beside the request computing its prompt: held", ReuseAfterIteration, true, 0,
			[4]int{0, 4, 4, 4}, extend(2, base, 60), []int{0, Unplaced}},
		{"blocks reusable as scheduled: placed beside it", ReuseOnSchedule, true, 0,
			[4]int{0, 4, 4, 4}, extend(2, base, 60), []int{0, 0}},
		{"no probe: the index cannot tell a prompt in flight", ReuseAfterIteration, false, 0,
			[4]int{0, 4, 4, 4}, extend(2, base, 60), []int{0, 0}},
		{"a sample of the prompt, its tail within a block", ReuseAfterIteration, true, 0,
			[4]int{0, 4, 4, 4}, extend(2, base, 10), []int{0, 0}},
		{"a queue longer than an iteration computes the prompt first", ReuseAfterIteration, true, 2048,
			[4]int{0, 4, 4, 4}, extend(2, base, 60), []int{0, 0}},
		{"another rank free: computed there side by side", ReuseAfterIteration, true, 0,
			[4]int{0, 0, 4, 4}, extend(2, base, 60), []int{0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ttftCfg(4, tc.reuse)
			cfg.Explain = true
			if tc.drain > 0 {
				cfg.TTFTDrainTokens = tc.drain
			}
			states := idle(4)
			for k, n := range tc.active {
				states[k].NumActiveRequests, states[k].NumActiveTokens = n, int64(100*n)
			}
			var matches []int32
			if tc.probe {
				matches = make([]int32, 8) // nothing computed anywhere
			}
			r := mustNew(t, cfg)
			res := mustRoute(t, r, states, []Request{first, tc.second}, 4, matches)
			if !slices.Equal(res.Ranks, tc.want) {
				t.Fatalf("ranks %v, want %v", res.Ranks, tc.want)
			}
			held := tc.want[1] == Unplaced
			if held != slices.Contains(res.Unassigned, tc.second.ID) {
				t.Errorf("unassigned %v", res.Unassigned)
			}
			rc := r.Receipts()[1]
			if (rc.Reason == ReasonHeldInFlight) != held {
				t.Errorf("second request's reason %s", rc.Reason)
			}
			if held && !strings.Contains(rc.String(), "computing its prompt for another request") {
				t.Errorf("held receipt does not say why:\n%s", &rc)
			}
		})
	}
}

// A prompt the index still records on a rank that computes nothing (its
// blocks evicted, the rank idle) is not in flight: a request held for it
// would wait for ever.
func TestTTFTNotHeldForStaleIndex(t *testing.T) {
	base := prompt(2048)
	r := mustNew(t, ttftCfg(4, ReuseAfterIteration))
	states := st([2]int64{0, 0}, [2]int64{4, 400}, [2]int64{4, 400}, [2]int64{4, 400})
	mustRoute(t, r, states, []Request{extend(1, base, 100)}, 4, make([]int32, 4))
	// The next decision: rank 0 idle, the probe showing base nowhere, the
	// other ranks full.
	res := mustRoute(t, r, states, []Request{extend(2, base, 60)}, 4, make([]int32, 4))
	if res.Ranks[0] == Unplaced {
		t.Fatalf("held for a prompt nothing computes: unassigned %v", res.Unassigned)
	}
}

// A request waits for its prompt in flight one decision at most: offered
// again while the rank it would take still shows the prompt in flight with
// a queue to compute it (the router's queue is an estimate), it is placed.
func TestTTFTHeldForPromptInFlightOnce(t *testing.T) {
	base := prompt(2048)
	second := extend(2, base, 60)
	r := mustNew(t, ttftCfg(4, ReuseAfterIteration))
	states := st([2]int64{0, 0}, [2]int64{4, 400}, [2]int64{4, 400}, [2]int64{4, 400})
	res := mustRoute(t, r, states, []Request{extend(1, base, 100), second}, 4, make([]int32, 8))
	if !slices.Equal(res.Ranks, []int{0, Unplaced}) {
		t.Fatalf("first decision: ranks %v, want [0 -1]", res.Ranks)
	}
	// Rank 0 still shows nothing of base computed, and a longer request
	// sharing base, placed first (its queue was empty: not held), fills
	// rank 0's queue past the in-flight part.
	states[0].NumActiveRequests, states[0].NumActiveTokens = 1, 2148
	longer := extend(3, base, 1500)
	res = mustRoute(t, r, states, []Request{second, longer}, 4, make([]int32, 8))
	if res.Ranks[1] != 0 {
		t.Fatalf("second decision: the longer request on rank %d, want 0 (ranks %v)", res.Ranks[1], res.Ranks)
	}
	if res.Ranks[0] != 0 {
		t.Fatalf("second decision: ranks %v, unassigned %v: want the request placed on rank 0", res.Ranks, res.Unassigned)
	}
}

// A light start counts as warmed at least the ranks the index expects to
// hold the batch's least held prompt family: ranks the score (or a target)
// sent the family to hold it as a warmed rank would, though the warmup's
// pending set still lists them. A batch whose family most ranks hold is
// left to the score; one with a family few ranks hold still warms. Holders
// past the warmup's own count must be fewer than half the ranks; ranks the
// warmup warmed itself, at most half.
func TestLightStartCountsHolders(t *testing.T) {
	for _, tc := range []struct {
		name    string
		holders int   // ranks holding the batch's family before it: 0, 1, ...
		pending []int // the host's pending set: ranks the warmup has not sent a request to
		warms   bool
	}{
		{"family on 6 of 8 ranks", 6, []int{2, 3, 4, 5, 6, 7}, false},
		// Half the ranks hold it, more than the warmup warmed: they
		// carry its load, and a burst is not stalled to warm the rest.
		{"family on 4 of 8 ranks", 4, []int{2, 3, 4, 5, 6, 7}, false},
		{"family on 4 of 8 ranks, all warmed by the warmup", 4, []int{4, 5, 6, 7}, true},
		{"family on 1 of 8 ranks", 1, []int{2, 3, 4, 5, 6, 7}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustNew(t, quietTTFTCfg(8))
			id := uint64(0)
			for k := range tc.holders {
				id++
				q := family(1, id, 300)
				q.TargetRank = k
				mustRoute(t, r, idle(8), []Request{q}, 8, nil)
			}
			if err := r.SetPendingWarmup(tc.pending); err != nil {
				t.Fatal(err)
			}
			before := r.Summary(0).WarmupPlacements
			// Load building up: a request active on each warmed rank,
			// fewer than the ranks, and a decision bringing six of the
			// family's.
			states := idle(8)
			for k := range 8 - len(tc.pending) {
				states[k].NumActiveRequests, states[k].NumActiveTokens = 1, 100
			}
			var batch []Request
			for range 6 {
				id++
				batch = append(batch, family(1, id, 300))
			}
			res := mustRoute(t, r, states, batch, 8, nil)
			warmed := r.Summary(0).WarmupPlacements - before
			if got := warmed > 0; got != tc.warms {
				t.Errorf("placed on %v with %d warmup placements; want warming %v", res.Ranks, warmed, tc.warms)
			}
		})
	}
}
