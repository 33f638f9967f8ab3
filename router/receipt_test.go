package router

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// checkReceipts verifies that receipts explain res: one per request, the
// same ranks, a reason the policy can give, and for scored and least-loaded
// placements candidates whose figures make the chosen rank the policy's
// choice (the call's rank states tell whether the predicted-TTFT score
// placed by the reference's: see memoryBound). It is the property the random
// and fuzz tests hold every receipt to.
func checkReceipts(cfg Config, states []RankState, reqs []Request, res *Result, receipts []Receipt) error {
	if len(receipts) != len(reqs) {
		return fmt.Errorf("%d receipts for %d requests", len(receipts), len(reqs))
	}
	steps := make([]bool, len(reqs))
	for i := range receipts {
		s := receipts[i].Step
		if (s < 0) != (receipts[i].Rank == Unplaced) || s >= len(reqs) || (s >= 0 && steps[s]) {
			return fmt.Errorf("receipt %d: step %d (rank %d) is not a distinct placement step", i, s, receipts[i].Rank)
		}
		if s >= 0 {
			steps[s] = true
		}
	}
	for i := range receipts {
		rc, q := &receipts[i], &reqs[i]
		if rc.ID != q.ID || rc.Len != q.Len() || rc.Rank != res.Ranks[i] || rc.Expected != res.Expected {
			return fmt.Errorf("receipt %d = id %d len %d rank %d expected %d; want %d %d %d %d",
				i, rc.ID, rc.Len, rc.Rank, rc.Expected, q.ID, q.Len(), res.Ranks[i], res.Expected)
		}
		if (rc.Reason == ReasonUnplaced || rc.Reason == ReasonHeld || rc.Reason == ReasonHeldInFlight) != (rc.Rank == Unplaced) {
			return fmt.Errorf("receipt %d: reason %s with rank %d", i, rc.Reason, rc.Rank)
		}
		var ok bool
		switch rc.Reason {
		case ReasonUnplaced:
			ok = true
		case ReasonExplicit:
			ok = rc.Rank == q.TargetRank
		case ReasonColdStartWarmup, ReasonDemandWarmup:
			ok = cfg.Policy == PolicyKVCacheAware
		case ReasonScored:
			ok = cfg.Policy == PolicyKVCacheAware && (cfg.Score != ScoreTTFT || memoryBound(states))
		case ReasonPredictedTTFT:
			ok = cfg.Policy == PolicyKVCacheAware && cfg.Score == ScoreTTFT
		case ReasonHeld:
			ok = cfg.Policy == PolicyKVCacheAware && cfg.Score == ScoreTTFT && !memoryBound(states) && !q.Strict
		case ReasonHeldInFlight:
			ok = cfg.Policy == PolicyKVCacheAware && cfg.Score == ScoreTTFT && cfg.EngineReuse != ReuseOnSchedule &&
				!memoryBound(states) && !q.Strict
		case ReasonLeastLoaded:
			ok = cfg.Policy == PolicyDefault
		case ReasonConversationBound:
			ok = cfg.Policy == PolicyConversation
		case ReasonNewConversation:
			// Under the ttft score, a conversation's turn not yet bound.
			ok = cfg.Policy == PolicyConversation ||
				cfg.Policy == PolicyKVCacheAware && cfg.Score == ScoreTTFT && q.ConversationID != ""
		}
		if !ok {
			return fmt.Errorf("receipt %d: reason %s for policy %s, target %d, rank %d", i, rc.Reason, cfg.Policy, q.TargetRank, rc.Rank)
		}
		if err := checkCandidates(cfg, q, rc); err != nil {
			return fmt.Errorf("receipt %d: %v\n%s", i, err, rc)
		}
	}
	return nil
}

func checkCandidates(cfg Config, q *Request, rc *Receipt) error {
	switch rc.Reason {
	case ReasonScored, ReasonLeastLoaded:
	case ReasonPredictedTTFT:
		return checkTTFTCandidates(cfg, q, rc)
	case ReasonNewConversation:
		if cfg.Policy == PolicyKVCacheAware {
			return checkTTFTCandidates(cfg, q, rc)
		}
		if len(rc.Candidates) != 0 || rc.Tied > 1 {
			return fmt.Errorf("%d candidates, %d tied for reason %s", len(rc.Candidates), rc.Tied, rc.Reason)
		}
		return nil
	case ReasonHeld:
		return checkHeldCandidates(cfg, rc)
	case ReasonHeldInFlight:
		return checkInFlightCandidates(cfg, rc)
	default:
		if len(rc.Candidates) != 0 || rc.Tied > 1 {
			return fmt.Errorf("%d candidates, %d tied for reason %s", len(rc.Candidates), rc.Tied, rc.Reason)
		}
		return nil
	}
	if len(rc.Candidates) != cfg.DPSize {
		return fmt.Errorf("%d candidates, want dp_size %d", len(rc.Candidates), cfg.DPSize)
	}
	chosen := rc.Candidates[rc.Rank]
	if chosen.Excluded != Eligible {
		return fmt.Errorf("chosen rank %d was %s", rc.Rank, chosen.Excluded)
	}
	under, maxMatch := 0, 0
	var tied, open []int
	for k, c := range rc.Candidates {
		if c.Rank != k {
			return fmt.Errorf("candidate %d names rank %d", k, c.Rank)
		}
		if c.Excluded != ExcludedAtCap {
			under++
			open = append(open, k)
			maxMatch = max(maxMatch, c.Match)
		}
		if c.Excluded != Eligible {
			continue
		}
		if rc.Reason == ReasonLeastLoaded {
			if c.Tokens < chosen.Tokens || (c.Tokens == chosen.Tokens && c.Requests < chosen.Requests) {
				return fmt.Errorf("rank %d is less loaded than the chosen one", k)
			}
			continue
		}
		m := 0
		if rc.Gate.On {
			m = c.Match
		}
		if c.Score != float64(rc.Len-m)+c.LoadTerm {
			return fmt.Errorf("rank %d: score %v is not (n - match) + load term", k, c.Score)
		}
		if c.Score < chosen.Score || (c.Score == chosen.Score && c.Tokens < chosen.Tokens) {
			return fmt.Errorf("rank %d scores lower than the chosen one", k)
		}
		if c.Score == chosen.Score && c.Tokens == chosen.Tokens {
			tied = append(tied, k)
		}
	}
	if rc.Reason == ReasonLeastLoaded {
		if rc.Eligible > under || rc.Tied > 1 {
			return fmt.Errorf("eligible %d, %d under the cap, tied %d", rc.Eligible, under, rc.Tied)
		}
		return nil
	}
	if rc.Eligible != under || rc.Gate.MaxMatch != maxMatch || rc.Tied != len(tied) {
		return fmt.Errorf("eligible %d, max match %d, tied %d; the candidates say %d, %d, %v",
			rc.Eligible, rc.Gate.MaxMatch, rc.Tied, under, maxMatch, tied)
	}
	if rc.Tied > 1 {
		if !slices.Equal(slices.Sorted(slices.Values(rc.Shuffle)), open) {
			return fmt.Errorf("shuffle %v is not a permutation of the eligible ranks %v", rc.Shuffle, open)
		}
		first := slices.IndexFunc(rc.Shuffle, func(k int) bool { return slices.Contains(tied, k) })
		if rc.Shuffle[first] != rc.Rank {
			return fmt.Errorf("shuffle %v: first tied rank is %d, chosen %d", rc.Shuffle, rc.Shuffle[first], rc.Rank)
		}
	} else if rc.Shuffle != nil {
		return fmt.Errorf("shuffle %v without a tie", rc.Shuffle)
	}
	return nil
}

// checkHeldCandidates checks a held request's candidates (holdForHolder):
// one per rank; some rank reuses at least half of the prompt and none of
// those competed (each was at its cap); some rank competed, where it would
// have computed more than half.
// checkInFlightCandidates checks a request held for its prompt in flight:
// the prediction saw every rank, and some eligible rank (the one chosen)
// would have computed more than half of the prompt.
func checkInFlightCandidates(cfg Config, rc *Receipt) error {
	if len(rc.Candidates) != cfg.DPSize {
		return fmt.Errorf("%d candidates, want dp_size %d", len(rc.Candidates), cfg.DPSize)
	}
	for _, c := range rc.Candidates {
		if c.Excluded == Eligible && 2*c.Match < rc.Len {
			return nil
		}
	}
	return fmt.Errorf("held for its prompt in flight, but no eligible rank would compute more than half of it")
}

func checkHeldCandidates(cfg Config, rc *Receipt) error {
	if len(rc.Candidates) != cfg.DPSize {
		return fmt.Errorf("%d candidates, want dp_size %d", len(rc.Candidates), cfg.DPSize)
	}
	holders, cold := 0, false
	for k, c := range rc.Candidates {
		if 2*c.Match >= rc.Len {
			holders++
			if c.Excluded != ExcludedAtCap {
				return fmt.Errorf("held, but rank %d, which reuses %d of %d tokens, was %s", k, c.Match, rc.Len, c.Excluded)
			}
		} else if c.Excluded == Eligible {
			cold = true
		}
	}
	if holders == 0 || !cold {
		return fmt.Errorf("held with %d ranks reusing half of the prompt, a competing rank computing more: %v", holders, cold)
	}
	return nil
}

// checkTTFTCandidates checks a predicted-TTFT placement: every rank's
// predicted cost is the lock-step wait for its queued prefill and the
// request's tokens it would compute (full iterations of ttft_drain_tokens,
// then the longer of its remainder and the busiest rank's share of that
// iteration), plus the tokens it would compute beyond the least an eligible
// rank computes, less a block (not when the receipt says the request's
// family wants another rank and the rank's queue with the request ends
// within the busiest rank's share of the next iteration; a quarter of it
// there under on_schedule reuse for a request not of a conversation that
// computes more than a block wherever it goes; perhaps none on a rank with
// at most half the requests of every holder, see slotsFilling), plus half
// of what its share of the next iteration exceeds the busiest rank's by;
// and no eligible rank is cheaper than the chosen one by more than a block
// (except for a new conversation, which goes to the rank with the fewest
// requests among those within its bound).
func checkTTFTCandidates(cfg Config, q *Request, rc *Receipt) error {
	if len(rc.Candidates) != cfg.DPSize {
		return fmt.Errorf("%d candidates, want dp_size %d", len(rc.Candidates), cfg.DPSize)
	}
	chosen := rc.Candidates[rc.Rank]
	if chosen.Excluded != Eligible {
		return fmt.Errorf("chosen rank %d was %s", rc.Rank, chosen.Excluded)
	}
	drain := int64(cfg.TTFTDrainTokens)
	if drain == 0 {
		drain = DefaultTTFTDrainTokens
	}
	tpb := int64(cfg.TokensPerBlock)
	var busiest int64
	least := int64(-1)
	for _, c := range rc.Candidates {
		busiest = max(busiest, int64(c.LoadTerm))
		if u := int64(max(rc.Len-c.Match, 0)); c.Excluded == Eligible && (least < 0 || u < least) {
			least = u
		}
	}
	least = max(least, 0)
	// The fewest requests on an eligible rank computing least (a holder),
	// for the waiver of slotsFilling.
	holder := -1
	for _, c := range rc.Candidates {
		if u := int64(max(rc.Len-c.Match, 0)); c.Excluded == Eligible && u == least && (holder < 0 || c.Requests < holder) {
			holder = c.Requests
		}
	}
	wait := func(t int64) int64 {
		it := max((t+drain-1)/drain, 1)
		done := (it - 1) * drain
		return done + max(t-done, min(max(busiest-done, 0), drain))
	}
	competing := 0
	for k, c := range rc.Candidates {
		if c.Rank != k || c.Match < 0 {
			return fmt.Errorf("candidate %d names rank %d, match %d", k, c.Rank, c.Match)
		}
		if c.Excluded != ExcludedAtCap && c.Excluded != ExcludedStackedTails {
			competing++
		}
		u := int64(max(rc.Len-c.Match, 0))
		t := int64(c.LoadTerm) + u
		charge := max(u-least-tpb, 0)
		switch within := t <= min(busiest, drain); {
		case rc.ReplicaWanted && within:
			charge = 0
		case within && cfg.EngineReuse == ReuseOnSchedule && q.ConversationID == "" && least > tpb:
			charge /= ttftScheduleShare
		}
		// Half of what the rank's share of the next iteration passes the
		// busiest rank's by.
		raise := max(min(t, drain)-min(busiest, drain), 0) / 2
		// The receipt does not say whether the holders were at half their
		// request slots (slotsFilling): where the rank holds at most half
		// the holder's requests, its charge may be waived.
		filling := q.ConversationID == "" && least > tpb && u > least && u <= drain && holder > 0 && ttftSlotShare*c.Requests <= holder
		if want := wait(t) + charge + raise; c.Score != float64(want) && !(filling && c.Score == float64(wait(t)+raise)) {
			return fmt.Errorf("rank %d: predicted %v, want the wait for queued %v + uncached %d, %d beyond the least and half the raise %d = %d (replica wanted: %v)",
				k, c.Score, c.LoadTerm, u, charge, raise, want, rc.ReplicaWanted)
		}
		// Predictions within a block of the lowest are ties, won by
		// the rank that computes less (or a bound turn's home); a new
		// conversation goes by its own rule.
		if c.Excluded == Eligible && c.Score+float64(tpb) < chosen.Score && rc.Reason == ReasonPredictedTTFT {
			return fmt.Errorf("rank %d predicts %v, below the chosen rank's %v", k, c.Score, chosen.Score)
		}
	}
	if rc.Eligible != competing || rc.Tied > 1 || rc.Shuffle != nil {
		return fmt.Errorf("eligible %d (candidates say %d), tied %d, shuffle %v", rc.Eligible, competing, rc.Tied, rc.Shuffle)
	}
	return nil
}

// explainedRecommended returns the KV-aware policy's config under the
// recommended preset on dp ranks, with receipts, and a router of it.
func explainedRecommended(t *testing.T, dp int) (Config, *Router) {
	t.Helper()
	cfg, err := ParseOptions([][2]string{{"policy", "kv_cache_aware"}, {"dp_size", strconv.Itoa(dp)}, {"preset", "recommended"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Explain = true
	return cfg, mustNew(t, cfg)
}

// TestReceiptPredictedTTFT: under the recommended preset a request goes to
// the rank with the least predicted prefill ahead of it, and the receipt
// shows the figures that made it so.
func TestReceiptPredictedTTFT(t *testing.T) {
	cfg, r := explainedRecommended(t, 3)
	busy := idle(3)
	for k := range busy {
		busy[k].NumActiveRequests, busy[k].NumActiveTokens = 1, 1<<20
	}
	// Two long prompts first, on two ranks: more prefill queued there than
	// one iteration drains (ttft_drain_tokens, 8192).
	mustRoute(t, r, busy, []Request{extend(1, nil, 20000), extend(2, nil, 20000)}, 8, nil)
	reqs := []Request{req(3, 300)}
	res := mustRoute(t, r, busy, reqs, 8, nil)
	if err := checkReceipts(cfg, busy, reqs, res, r.Receipts()); err != nil {
		t.Fatal(err)
	}
	rc := r.Receipts()[0]
	if rc.Reason != ReasonPredictedTTFT || rc.Candidates[rc.Rank].LoadTerm != 0 {
		t.Errorf("want the rank with nothing queued, by predicted TTFT:\n%s", &rc)
	}
	queued := 0
	for _, c := range rc.Candidates {
		if c.LoadTerm > 0 {
			queued++
		}
	}
	if queued != 2 || !strings.Contains(rc.String(), "predicted") {
		t.Errorf("want two ranks with queued prefill in the receipt:\n%s", &rc)
	}
}

// TestReceiptNewConversationTTFT: under the ttft score a conversation's
// first turn goes by the new-conversation rule (fewest requests among the
// ranks where it waits no longer than on an idle one), and its receipt says
// so, with the predictions that rule did not follow; its next turn, bound,
// goes by the prediction.
func TestReceiptNewConversationTTFT(t *testing.T) {
	cfg, r := explainedRecommended(t, 2)
	// Rank 0 holds a 1024-token system prompt and serves two requests;
	// rank 1 serves one.
	states := st([2]int64{2, 0}, [2]int64{1, 0})
	system := extend(1, nil, 1024)
	system.TargetRank = 0
	mustRoute(t, r, states, []Request{system}, 8, nil)
	first := extend(2, system.Tokens, 64)
	first.ConversationID = "c"
	reqs := []Request{first}
	res := mustRoute(t, r, states, reqs, 8, nil)
	if err := checkReceipts(cfg, states, reqs, res, r.Receipts()); err != nil {
		t.Fatal(err)
	}
	rc := r.Receipts()[0]
	if rc.Reason != ReasonNewConversation || rc.Rank != 1 {
		t.Fatalf("want the new conversation on rank 1, the fewest requests, by the new-conversation rule:\n%s", &rc)
	}
	if c := rc.Candidates; len(c) != 2 || c[1].Score <= c[0].Score {
		t.Errorf("want rank 0's prediction (its prompt cached) below the chosen rank's:\n%s", &rc)
	}
	if text := rc.String(); !strings.Contains(text, "new conversation placement; soft cap") || !strings.Contains(text, "predicted") {
		t.Errorf("want the rule and the predictions in the text:\n%s", text)
	}
	next := extend(3, first.Tokens, 64)
	next.ConversationID = "c"
	reqs = []Request{next}
	res = mustRoute(t, r, states, reqs, 8, nil)
	if err := checkReceipts(cfg, states, reqs, res, r.Receipts()); err != nil {
		t.Fatal(err)
	}
	if rc := r.Receipts()[0]; rc.Reason != ReasonPredictedTTFT || rc.Rank != 1 {
		t.Errorf("want the bound turn on its rank by the prediction:\n%s", &rc)
	}
}

// explained routes one call on a router with Explain on and returns the
// result and receipts, checked against each other.
func explained(t *testing.T, cfg Config, states []RankState, reqs []Request, maxn int, matches []int32) (*Result, []Receipt) {
	t.Helper()
	cfg.Explain = true
	r := mustNew(t, cfg)
	res := mustRoute(t, r, states, reqs, maxn, matches)
	rcs := r.Receipts()
	if err := checkReceipts(cfg, states, reqs, res, rcs); err != nil {
		t.Fatal(err)
	}
	return res, rcs
}

func TestReceipts(t *testing.T) {
	warm := kvCfg(3, 1, 0.1, 2)
	warm.ColdStartWarmup = true
	capacity := DefaultConfig(PolicyDefault, 2)
	capacity.CapacityAware = true
	roomy := st([2]int64{0, 0}, [2]int64{0, 100})
	roomy[0].KVCapacityTokens, roomy[0].FreeKVTokens = 1000, 5
	roomy[1].KVCapacityTokens, roomy[1].FreeKVTokens = 1000, 1000
	affinity := matchTable(1, 2, func(_, k int) int32 { return int32(90 * (1 - k)) }) // rank 0 caches 90 of 100
	tests := []struct {
		name    string
		cfg     Config
		states  []RankState
		reqs    []Request
		maxn    int
		matches []int32
		// want: per request, the rank and reason; then checks of receipt 0.
		ranks   []int
		reasons []Reason
		check   func(rc *Receipt) string
		text    []string // in receipt 0's String()
	}{{
		name: "explicit target", cfg: kvCfg(2, 1, 0.1, 2), states: idle(2),
		reqs: []Request{targeted(1, 10, 1, false)}, maxn: 4,
		ranks: []int{1}, reasons: []Reason{ReasonExplicit},
		text: []string{"request 1 (10 tokens) -> rank 1: explicit target"},
	}, {
		name: "cold-start warmup, then scored", cfg: warm, states: idle(3),
		reqs: []Request{req(1, 10), req(2, 10), req(3, 10), req(4, 10)}, maxn: 4,
		ranks:   []int{0, 1, 2, 2}, // 4: a three-way tie, random.Random(4) picks 2
		reasons: []Reason{ReasonColdStartWarmup, ReasonColdStartWarmup, ReasonColdStartWarmup, ReasonScored},
		text:    []string{"-> rank 0: cold-start warmup"},
	}, {
		name: "scored, gate on", cfg: kvCfg(2, 1, 0.1, 2), states: st([2]int64{1, 50}, [2]int64{1, 0}),
		reqs: []Request{req(1, 100)}, maxn: 4, matches: affinity,
		ranks: []int{0}, reasons: []Reason{ReasonScored},
		check: func(rc *Receipt) string {
			c := rc.Candidates
			if !rc.Gate.On || rc.Gate.MaxMatch != 90 || rc.Gate.Rate != 0.9 || rc.Eligible != 2 || rc.Tied != 1 {
				return "gate, eligible or tie"
			}
			// denom = max(50 + 0, 100) = 100: rank 0 scores 10 + 50, rank 1 100 + 0.
			if c[0].Match != 90 || c[0].LoadTerm != 50 || c[0].Score != 60 || c[1].Score != 100 {
				return "scores"
			}
			return ""
		},
		text: []string{"cache affinity on (best match 90/100 = 0.9 > 0.1, probe)", "<- chosen"},
	}, {
		name: "scored, gate off: the match does not count", cfg: kvCfg(2, 1, 0.95, 2),
		states: st([2]int64{1, 50}, [2]int64{1, 0}), reqs: []Request{req(1, 100)}, maxn: 4, matches: affinity,
		ranks: []int{1}, reasons: []Reason{ReasonScored},
		check: func(rc *Receipt) string {
			if rc.Gate.On || rc.Candidates[0].Score != 150 || rc.Candidates[1].Score != 100 {
				return "gate or scores"
			}
			return ""
		},
		text: []string{"cache affinity off (best match 90/100 = 0.9 <= 0.95, probe)"},
	}, {
		name: "tie broken by the seeded shuffle", cfg: kvCfg(4, 1, 0.1, 2), states: idle(4),
		reqs: []Request{req(7, 10)}, maxn: 4,
		ranks: []int{3}, reasons: []Reason{ReasonScored},
		check: func(rc *Receipt) string {
			// random.Random(7).shuffle([0, 1, 2, 3]) == [3, 1, 0, 2] in Python
			if rc.Tied != 4 || !slices.Equal(rc.Shuffle, []int{3, 1, 0, 2}) {
				return fmt.Sprintf("tied %d shuffle %v", rc.Tied, rc.Shuffle)
			}
			return ""
		},
		text: []string{"4 ranks tied; random.Random(7).shuffle gave [3 1 0 2]: first tied is rank 3"},
	}, {
		name: "soft cap exhausted: unplaced", cfg: kvCfg(2, 1, 0.1, 1), states: st([2]int64{1, 0}, [2]int64{1, 0}),
		reqs: []Request{req(1, 10), req(2, 10), req(3, 10)}, maxn: 2,
		ranks: []int{1, 0, Unplaced}, reasons: []Reason{ReasonScored, ReasonScored, ReasonUnplaced},
		check: func(rc *Receipt) string {
			if rc.Expected != 2 || rc.Eligible != 2 {
				return "soft cap"
			}
			return ""
		},
	}, {
		name: "default policy: least loaded, full rank excluded", cfg: DefaultConfig(PolicyDefault, 3),
		states: st([2]int64{2, 0}, [2]int64{0, 30}, [2]int64{0, 20}), reqs: []Request{req(1, 10)}, maxn: 2,
		ranks: []int{2}, reasons: []Reason{ReasonLeastLoaded},
		check: func(rc *Receipt) string {
			if rc.Candidates[0].Excluded != ExcludedAtCap || rc.Eligible != 2 || rc.Candidates[2].Tokens != 20 {
				return "candidates"
			}
			return ""
		},
		text: []string{"(at cap)", "least loaded"},
	}, {
		name: "capacity aware: no room excludes, fallback flagged", cfg: capacity, states: roomy,
		reqs: []Request{req(1, 10)}, maxn: 4,
		ranks: []int{1}, reasons: []Reason{ReasonLeastLoaded},
		check: func(rc *Receipt) string {
			if rc.Candidates[0].Excluded != ExcludedNoRoom || rc.CapacityFallback {
				return "room"
			}
			return ""
		},
		text: []string{"(no KV room)"},
	}, {
		name: "conversation: new, then bound", cfg: DefaultConfig(PolicyConversation, 2), states: idle(2),
		reqs: []Request{conv(1, "a"), conv(2, "b"), conv(3, "a")}, maxn: 4,
		ranks:   []int{0, 1, 0},
		reasons: []Reason{ReasonNewConversation, ReasonNewConversation, ReasonConversationBound},
		text:    []string{"new conversation placement"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, rcs := explained(t, tc.cfg, tc.states, tc.reqs, tc.maxn, tc.matches)
			for i, rc := range rcs {
				if rc.Rank != tc.ranks[i] || rc.Reason != tc.reasons[i] {
					t.Errorf("receipt %d: rank %d, %s; want %d, %s\n%s", i, rc.Rank, rc.Reason, tc.ranks[i], tc.reasons[i], &rc)
				}
			}
			if tc.check != nil {
				if msg := tc.check(&rcs[0]); msg != "" {
					t.Errorf("receipt 0: wrong %s:\n%s\n%+v", msg, &rcs[0], rcs[0])
				}
			}
			for _, s := range tc.text {
				if !strings.Contains(rcs[0].String(), s) {
					t.Errorf("receipt 0 does not say %q:\n%s", s, &rcs[0])
				}
			}
		})
	}
}

// The capacity fallback: no rank has room, so the most headroom wins and
// the receipt says so.
func TestReceiptCapacityFallback(t *testing.T) {
	cfg := kvCfg(2, 1, 0.1, 2)
	cfg.CapacityAware = true
	states := idle(2)
	states[0].KVCapacityTokens, states[0].FreeKVTokens = 1000, 5
	states[1].KVCapacityTokens, states[1].FreeKVTokens = 1000, 8
	_, rcs := explained(t, cfg, states, []Request{req(1, 100)}, 4, nil)
	if rc := rcs[0]; rc.Rank != 1 || !rc.CapacityFallback || rc.Candidates[0].Excluded != ExcludedNoRoom {
		t.Errorf("want rank 1 by capacity fallback, rank 0 excluded:\n%s", &rc)
	}
}

// Demand warmup's replicas carry their own reason.
func TestReceiptDemandWarmup(t *testing.T) {
	cfg := DefaultConfig(PolicyKVCacheAware, 4)
	cfg.Warmup, cfg.WarmupMinRequests, cfg.Explain = WarmupDemand, 1, true
	r := mustNew(t, cfg)
	mustRoute(t, r, idle(4), []Request{req(1, 200)}, 8, nil)
	res := mustRoute(t, r, idle(4), []Request{req(2, 200)}, 8, nil)
	rc := r.Receipts()[0]
	if err := checkReceipts(cfg, idle(4), []Request{req(2, 200)}, res, r.Receipts()); err != nil {
		t.Fatal(err)
	}
	if rc.Reason != ReasonDemandWarmup {
		t.Errorf("second request of a hot family: %s, want demand warmup", &rc)
	}
}

// Without Explain there are no receipts; a failed call keeps the last ones.
func TestReceiptsLifetime(t *testing.T) {
	if r := mustNew(t, DefaultConfig(PolicyDefault, 2)); r.Receipts() != nil {
		t.Error("receipts without Explain")
	}
	cfg := DefaultConfig(PolicyDefault, 2)
	cfg.Explain = true
	r := mustNew(t, cfg)
	if len(r.Receipts()) != 0 {
		t.Error("receipts before any decision")
	}
	mustRoute(t, r, idle(2), []Request{req(1, 10), req(2, 10)}, 4, nil)
	if _, err := r.Route(idle(2), []Request{req(1, 10), req(1, 10)}, 4, nil); err == nil {
		t.Fatal("duplicate ids accepted")
	}
	if got := r.Receipts(); len(got) != 2 || got[1].ID != 2 {
		t.Errorf("a rejected call changed the receipts: %+v", got)
	}
}

// Explain is an option key, and not part of the digest: ranks may differ in
// it and still agree.
func TestExplainOption(t *testing.T) {
	cfg, err := ParseOptions([][2]string{{"dp_size", "2"}, {"explain", "true"}})
	if err != nil || !cfg.Explain {
		t.Fatalf("ParseOptions explain=true: %+v, %v", cfg, err)
	}
	off := cfg
	off.Explain = false
	if mustNew(t, cfg).StateDigest() != mustNew(t, off).StateDigest() {
		t.Error("Explain changes the state digest")
	}
}

// Recording receipts allocates nothing once the Router's memory is sized.
func TestReceiptsAllocationFree(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counting is slow under -short")
	}
	countsAllocations(t)
	batch := newBenchBatch(64, 8, 256, benchOpts{matches: true})
	cfg := DefaultConfig(PolicyKVCacheAware, 8)
	cfg.Explain = true
	r := mustNew(t, cfg)
	res := new(Result)
	route := func() {
		if err := r.RouteInto(res, batch.states, batch.reqs, batch.maxn, batch.matches); err != nil {
			t.Fatal(err)
		}
	}
	route()
	if n := testing.AllocsPerRun(10, route); n != 0 {
		t.Errorf("%v allocations per decision with Explain on, want 0", n)
	}
}

func ExampleRouter_Receipts() {
	cfg := DefaultConfig(PolicyKVCacheAware, 2)
	cfg.Explain = true
	r, err := New(cfg)
	if err != nil {
		panic(err)
	}
	states := []RankState{
		{Rank: 0, NumActiveRequests: 1, NumActiveTokens: 900},
		{Rank: 1, NumActiveRequests: 1, NumActiveTokens: 100},
	}
	reqs := []Request{{ID: 7, NumTokens: 1000, TargetRank: NoTarget}}
	matches := []int32{960, 0} // rank 0 caches 960 tokens of the prompt
	if _, err := r.Route(states, reqs, 8, matches); err != nil {
		panic(err)
	}
	for _, rc := range r.Receipts() {
		fmt.Println(&rc)
	}
	// Output:
	// request 7 (1000 tokens) -> rank 0: scored; soft cap 4, 2 eligible; cache affinity on (best match 960/1000 = 0.96 > 0.1, probe)
	//   rank  reqs      tokens   match   load term       score
	//      0     1         900     960         900         940  <- chosen
	//      1     1         100       0         100        1100
}

// BenchmarkRouteExplain: a decision with receipts on and off, side by side
// (256 requests over 16 ranks, 2k-token prompts). With Explain on, a
// decision also writes one Candidate per rank for every scored or
// least-loaded request.
func BenchmarkRouteExplain(b *testing.B) {
	for _, pol := range []benchPolicy{benchKVMatches, benchDefault} {
		batch := newBenchBatch(256, 16, 2048, benchOpts{matches: pol.matches})
		for _, explain := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/explain=%v", pol.name, explain), func(b *testing.B) {
				cfg := DefaultConfig(pol.policy, 16)
				cfg.Explain = explain
				benchRoute(b, cfg, batch)
			})
		}
	}
}
