package router

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// Property tests: random configurations and call sequences, checking the
// invariants every decision must satisfy whatever the policy.

// checkResult verifies the invariants of one successful decision:
//   - Assignment has one list per rank, Ranks one entry per request;
//   - every request is placed exactly once (on Ranks[i], listed once in
//     Assignment[Ranks[i]]) or Unplaced and listed in Unassigned, which holds
//     exactly the unplaced ids in input order;
//   - no rank at or over maxn receives anything, and none is pushed past maxn;
//   - Expected >= every final count when no rank started over maxn (under
//     ScoreTTFT too, whose home rule may place above the soft cap);
//   - Expected follows the soft-cap formula, within what the explicit pass
//     may have changed;
//   - requests are left unassigned only when every rank is at maxn (the
//     soft cap never turns away what the hard cap has room for), or under
//     ScoreTTFT when the requests take every free slot (holdForHolder), so
//     a host that offers fewer requests than free slots gets none back;
//   - a targeted request (default and KV-aware) misses its target only when
//     the target is full.
func checkResult(cfg Config, states []RankState, reqs []Request, maxn int, res *Result) error {
	size := cfg.DPSize
	if len(res.Assignment) != size {
		return fmt.Errorf("len(Assignment) = %d, want dp_size %d", len(res.Assignment), size)
	}
	if len(res.Ranks) != len(reqs) {
		return fmt.Errorf("len(Ranks) = %d, want %d requests", len(res.Ranks), len(reqs))
	}
	index := make(map[uint64]int, len(reqs))
	for i := range reqs {
		index[reqs[i].ID] = i
	}
	seen := make(map[uint64]bool, len(reqs))
	for k, ids := range res.Assignment {
		for _, id := range ids {
			i, ok := index[id]
			switch {
			case !ok:
				return fmt.Errorf("rank %d lists unknown id %d", k, id)
			case seen[id]:
				return fmt.Errorf("id %d placed more than once", id)
			case res.Ranks[i] != k:
				return fmt.Errorf("id %d is on rank %d but Ranks[%d] = %d", id, k, i, res.Ranks[i])
			}
			seen[id] = true
		}
	}
	var unplaced []uint64
	for i, k := range res.Ranks {
		switch {
		case k == Unplaced:
			unplaced = append(unplaced, reqs[i].ID)
		case k < 0 || k >= size:
			return fmt.Errorf("Ranks[%d] = %d out of range", i, k)
		case !seen[reqs[i].ID]:
			return fmt.Errorf("Ranks[%d] = %d but id %d is not in Assignment[%d]", i, k, reqs[i].ID, k)
		}
	}
	if !slices.Equal(res.Unassigned, unplaced) {
		return fmt.Errorf("Unassigned = %v, want the unplaced ids in input order %v", res.Unassigned, unplaced)
	}

	final := make([]int, size)
	busiest0, busiestF, sum0 := 0, 0, 0
	within := true
	for k := range size {
		c0 := states[k].NumActiveRequests
		placed := len(res.Assignment[k])
		final[k] = c0 + placed
		if placed > 0 && final[k] > maxn {
			return fmt.Errorf("rank %d: %d active + %d placed exceeds maxn %d", k, c0, placed, maxn)
		}
		busiest0, busiestF, sum0 = max(busiest0, c0), max(busiestF, final[k]), sum0+c0
		within = within && c0 <= maxn
	}
	if within && res.Expected < busiestF {
		return fmt.Errorf("Expected = %d below the busiest rank's final count %d", res.Expected, busiestF)
	}

	// Soft cap: fair is the same before and after the explicit pass (each
	// explicit placement moves one request from "remaining" to "active").
	mult := 1.0
	switch cfg.Policy {
	case PolicyKVCacheAware:
		mult = cfg.FairShareMultiplier
	case PolicyConversation:
		mult = max(1, cfg.FairShareMultiplier)
	}
	fair := (sum0 + len(reqs) + size - 1) / size
	cm := math.Ceil(mult * float64(fair))
	soft := func(busiest int) float64 { return math.Min(math.Max(cm, float64(busiest)), float64(maxn)) }
	lo, hi := soft(busiest0), soft(busiestF)
	e := float64(res.Expected)
	if cfg.Policy == PolicyConversation {
		lo, hi = math.Max(lo, float64(busiestF)), math.Max(hi, float64(busiestF))
	}
	if e < lo || e > hi {
		return fmt.Errorf("Expected = %d outside the soft-cap range [%g, %g] (fair %d, multiplier %g)", res.Expected, lo, hi, fair, mult)
	}

	if held := cfg.Policy == PolicyKVCacheAware && cfg.Score == ScoreTTFT && sum0+len(reqs) >= size*maxn; len(res.Unassigned) > 0 && !held {
		for k, c := range final {
			if c < maxn {
				return fmt.Errorf("ids %v unassigned while rank %d has %d active (< maxn %d)", res.Unassigned, k, c, maxn)
			}
		}
	}

	for i := range reqs {
		q := &reqs[i]
		if cfg.Policy == PolicyConversation && q.ConversationID != "" {
			continue // a binding may override the target
		}
		if q.TargetRank != NoTarget && res.Ranks[i] != q.TargetRank && final[q.TargetRank] < maxn {
			return fmt.Errorf("id %d (target %d) placed on %d although its target ends with %d < maxn %d active",
				q.ID, q.TargetRank, res.Ranks[i], final[q.TargetRank], maxn)
		}
	}
	return nil
}

func cloneResult(r *Result) *Result {
	c := &Result{Expected: r.Expected, Ranks: slices.Clone(r.Ranks), Unassigned: slices.Clone(r.Unassigned)}
	for _, a := range r.Assignment {
		c.Assignment = append(c.Assignment, slices.Clone(a))
	}
	return c
}

// equalResults compares two results (nil and empty slices are equal).
func equalResults(a, b *Result) bool {
	return eqAssign(a.Assignment, b.Assignment) && a.Expected == b.Expected &&
		slices.Equal(a.Ranks, b.Ranks) && slices.Equal(a.Unassigned, b.Unassigned)
}

// diffState describes how the observable state of two routers differs, or
// returns "".
func diffState(a, b *Router, convIDs []string) string {
	if da, db := a.StateDigest(), b.StateDigest(); da != db {
		return fmt.Sprintf("StateDigest %#x vs %#x", da, db)
	}
	if pa, pb := a.PendingWarmup(), b.PendingWarmup(); !slices.Equal(pa, pb) {
		return fmt.Sprintf("PendingWarmup %v vs %v", pa, pb)
	}
	if na, nb := a.NumConversations(), b.NumConversations(); na != nb {
		return fmt.Sprintf("NumConversations %d vs %d", na, nb)
	}
	for _, id := range convIDs {
		ra, oka := a.Conversation(id)
		rb, okb := b.Conversation(id)
		if oka != okb || (oka && ra != rb) {
			return fmt.Sprintf("Conversation(%q) = %d,%v vs %d,%v", id, ra, oka, rb, okb)
		}
	}
	return ""
}

// ---- random generation ------------------------------------------------------

func pick[T any](rng *rand.Rand, xs ...T) T { return xs[rng.IntN(len(xs))] }

var convPool = []string{"c0", "c1", "c2", "c3", "c4", "c5", "c6", "c7"}

func randConfig(rng *rand.Rand) Config {
	policy := pick(rng, PolicyDefault, PolicyKVCacheAware, PolicyConversation)
	size := 1 + rng.IntN(8)
	switch rng.IntN(10) {
	case 0:
		size = 21 + rng.IntN(50)
	case 1, 2:
		size = 9 + rng.IntN(12)
	}
	c := DefaultConfig(policy, size)
	c.LoadBalanceWeight = pick(rng, 0, 0.1, 1, 2, 10, rng.Float64()*5)
	c.MatchRateThreshold = pick(rng, 0, 0.1, 0.5, 1, rng.Float64())
	if policy == PolicyKVCacheAware {
		c.FairShareMultiplier = pick(rng, 1, 1.5, 2, 4, 1+rng.Float64()*3)
	} else {
		c.FairShareMultiplier = pick(rng, -1, 0, 0.5, 1, 1.5, 2, 3.5)
	}
	c.ColdStartWarmup = rng.IntN(2) == 0
	c.MaxSessions = pick(rng, 1, 2, 3, 5, DefaultMaxSessions)
	c.NewConvPlacement = pick(rng, PlacementRoundRobin, PlacementLeastQueued, PlacementLeastTokens)
	c.CapacityAware = rng.IntN(4) == 0
	// Options beyond the reference: the invariants hold for them too.
	if policy == PolicyKVCacheAware {
		c.PrefixSource = pick(rng, SourceProbe, SourceProbe, SourceIndex, SourceProbeIndex)
		c.Warmup = pick(rng, "", WarmupOff, WarmupOnce, WarmupQuiet, WarmupDemand)
		if c.Warmup == WarmupOff || c.Warmup == WarmupQuiet {
			c.ColdStartWarmup = false // true would contradict it (Validate rejects that)
		}
		if c.Warmup == WarmupDemand {
			c.ColdStartWarmup = false
			c.WarmupMinRequests = 1 + rng.IntN(3)
			c.WarmupWindow = pick(rng, 4, 64, DefaultWarmupWindow)
		}
	}
	c.TokensPerBlock = pick(rng, 1, 4, 16, DefaultTokensPerBlock)
	return c
}

// randPrompt returns a prompt from one of a few families sharing prefixes,
// so that grouping, equal sizes and ties all occur.
func randPrompt(rng *rand.Rand) (tokens []int32, numTokens int) {
	family := int32(rng.IntN(4))
	n := pick(rng, 0, 1, 10, 10, 10, 32, 64, 65, 80, rng.IntN(100))
	tokens = make([]int32, n)
	diverge := pick(rng, 40, 64, 64) // tails diverge inside or only past the 64-token prefix
	for i := range tokens {
		tokens[i] = family*1000 + int32(i)
		if i >= diverge && rng.IntN(4) == 0 {
			tokens[i] = int32(rng.IntN(3))
		}
	}
	switch rng.IntN(5) {
	case 0:
		return tokens, n + rng.IntN(3000) // only a prefix given
	case 1:
		if n > 0 {
			return tokens, n // explicit and equal
		}
	}
	return tokens, 0
}

func randCall(rng *rand.Rand, size int) callArgs {
	c := callArgs{maxn: 1 + rng.IntN(6)}
	idleRanks := rng.IntN(3) == 0
	capacity := rng.IntN(3) == 0
	for k := range size {
		s := RankState{Rank: k}
		if capacity && rng.IntN(4) > 0 {
			s.KVCapacityTokens = 1 + rng.Int64N(4000)
			s.FreeKVTokens = rng.Int64N(s.KVCapacityTokens + 1)
			if rng.IntN(3) == 0 {
				s.PendingKVTokens, s.ReportsPendingKV = rng.Int64N(2*s.KVCapacityTokens), true
			}
			if rng.IntN(3) == 0 {
				s.EvictableKVTokens, s.ReportsEvictableKV = rng.Int64N(s.FreeKVTokens+1), true
			}
		}
		if !idleRanks {
			s.NumActiveRequests = rng.IntN(c.maxn + 1)
			if rng.IntN(10) == 0 {
				s.NumActiveRequests = c.maxn + rng.IntN(3) // over the hard cap
			}
			if rng.IntN(3) > 0 {
				s.NumActiveTokens = rng.Int64N(5000)
			}
		}
		c.states = append(c.states, s)
	}
	nreq := rng.IntN(min(3*size+6, 48))
	used := make(map[uint64]bool)
	for range nreq {
		var id uint64
		for {
			switch rng.IntN(3) {
			case 0:
				id = rng.Uint64()
			case 1:
				id = uint64(rng.IntN(64))
			default:
				id = math.MaxUint64 - uint64(rng.IntN(64))
			}
			if !used[id] {
				break
			}
		}
		used[id] = true
		tokens, num := randPrompt(rng)
		q := Request{ID: id, Tokens: tokens, NumTokens: num, TargetRank: NoTarget}
		if rng.IntN(10) < 3 {
			q.TargetRank = rng.IntN(size)
		}
		q.Strict = rng.IntN(2) == 0
		if capacity && rng.IntN(4) == 0 {
			q.MaxNewTokens = rng.IntN(1000)
		}
		if rng.IntN(2) == 0 {
			q.ConversationID = pick(rng, convPool...)
		}
		c.reqs = append(c.reqs, q)
	}
	if rng.IntN(5) < 3 {
		c.matches = make([]int32, nreq*size)
		for i := range nreq {
			n := c.reqs[i].Len()
			for k := range size {
				var m int
				switch rng.IntN(6) {
				case 0, 1:
				case 2:
					m = rng.IntN(n + 1)
				case 3:
					m = max(n-1, 0) / 32 * 32 // block-aligned, at most n-1
				case 4:
					m = n / 2
				default:
					m = n + rng.IntN(5) // more than the prompt: clamped
				}
				c.matches[i*size+k] = int32(m)
			}
		}
	}
	return c
}

// breakCall makes a valid call invalid in one random way.
func breakCall(rng *rand.Rand, c callArgs, size int) callArgs {
	c = c.clone()
	for {
		switch rng.IntN(6) {
		case 0:
			c.maxn = -rng.IntN(2)
		case 1:
			c.states = c.states[:len(c.states)-1]
		case 2:
			c.states[len(c.states)-1].Rank = size
		case 3:
			if len(c.reqs) < 2 {
				continue
			}
			c.reqs[len(c.reqs)-1].ID = c.reqs[0].ID
		case 4:
			if len(c.reqs) == 0 {
				continue
			}
			c.reqs[rng.IntN(len(c.reqs))].TargetRank = pick(rng, size, -2, size+7)
		default:
			if len(c.matches) == 0 {
				continue
			}
			c.matches[rng.IntN(len(c.matches))] = -1
		}
		return c
	}
}

// TestRandomBatches routes random call sequences on three routers built
// from the same random config: two with Route, one with RouteInto on a single
// reused Result. Every result must satisfy checkResult, the three must agree
// call for call (errors included), and their states must stay identical.
func TestRandomBatches(t *testing.T) {
	iterations := 3000
	if testing.Short() {
		iterations = 300
	}
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		for it := range iterations / 4 {
			cfg := randConfig(rng)
			if err := runSequence(rng, cfg); err != nil {
				t.Fatalf("seed %d iteration %d, config %+v: %v", seed, it, cfg, err)
			}
		}
	}
}

func runSequence(rng *rand.Rand, cfg Config) error {
	a, err := New(cfg)
	if err != nil {
		return err
	}
	// b explains itself when a does not and the reverse: receipts must not
	// change a decision.
	bcfg := cfg
	bcfg.Explain = !cfg.Explain
	b, _ := New(bcfg)
	c, _ := New(cfg)
	reused := new(Result)
	noEviction := cfg.MaxSessions >= len(convPool)
	ncalls := 1 + rng.IntN(6)
	for call := range ncalls {
		args := randCall(rng, cfg.DPSize)
		invalid := rng.IntN(12) == 0
		if invalid {
			args = breakCall(rng, args, cfg.DPSize)
		}
		pendingBefore := a.PendingWarmup()
		boundBefore := map[string]int{}
		for _, id := range convPool {
			if k, ok := a.Conversation(id); ok {
				boundBefore[id] = k
			}
		}
		before := cloneResult(reused)

		ra, errA := a.Route(args.states, args.reqs, args.maxn, args.matches)
		rb, errB := b.Route(args.states, args.reqs, args.maxn, args.matches)
		errC := c.RouteInto(reused, args.states, args.reqs, args.maxn, args.matches)
		if (errA == nil) != (errB == nil) || (errA == nil) != (errC == nil) {
			return fmt.Errorf("call %d: errors disagree: %v / %v / %v", call, errA, errB, errC)
		}
		if errA != nil {
			if !invalid {
				return fmt.Errorf("call %d: valid call failed: %v", call, errA)
			}
			if !errors.Is(errA, ErrInvalidInput) {
				return fmt.Errorf("call %d: error %v does not wrap ErrInvalidInput", call, errA)
			}
			if !equalResults(reused, before) {
				return fmt.Errorf("call %d: RouteInto modified its result on error", call)
			}
		} else {
			if invalid {
				return fmt.Errorf("call %d: invalid call accepted: %+v", call, args)
			}
			if err := checkResult(cfg, args.states, args.reqs, args.maxn, ra); err != nil {
				return fmt.Errorf("call %d: %v\nargs %+v", call, err, args)
			}
			if !equalResults(ra, rb) {
				return fmt.Errorf("call %d: twin routers (explain %v, %v) disagree: %+v vs %+v", call, cfg.Explain, bcfg.Explain, ra, rb)
			}
			if err := checkReceipts(cfg, args.states, args.reqs, rb, b.Receipts()); err != nil {
				return fmt.Errorf("call %d: %v\nargs %+v", call, err, args)
			}
			if !equalResults(ra, reused) {
				return fmt.Errorf("call %d: RouteInto on a reused Result = %+v, Route = %+v", call, reused, ra)
			}
			if err := checkState(cfg, args, ra, a, pendingBefore, boundBefore, noEviction); err != nil {
				return fmt.Errorf("call %d: %v\nargs %+v", call, err, args)
			}
		}
		if d := diffState(a, b, convPool); d != "" {
			return fmt.Errorf("call %d: twin states differ: %s", call, d)
		}
		if d := diffState(a, c, convPool); d != "" {
			return fmt.Errorf("call %d: RouteInto router state differs: %s", call, d)
		}
	}
	return nil
}

// checkState verifies how one decision changed the router's state.
func checkState(cfg Config, args callArgs, res *Result, r *Router, pendingBefore []int, boundBefore map[string]int, noEviction bool) error {
	pending := r.PendingWarmup()
	if cfg.Policy != PolicyKVCacheAware || !(cfg.ColdStartWarmup || cfg.Warmup == WarmupOnce || cfg.Warmup == WarmupQuiet) {
		if len(pending) != 0 {
			return fmt.Errorf("PendingWarmup() = %v without KV-aware warmup", pending)
		}
	}
	for _, k := range pending {
		if !slices.Contains(pendingBefore, k) {
			return fmt.Errorf("warmup re-armed rank %d", k)
		}
	}
	for _, k := range pendingBefore {
		if !slices.Contains(pending, k) && len(res.Assignment[k]) == 0 {
			return fmt.Errorf("rank %d left the warmup set without receiving a request", k)
		}
	}
	binds := cfg.Policy == PolicyConversation || cfg.Score == ScoreTTFT
	if !binds {
		if r.NumConversations() != 0 {
			return fmt.Errorf("%d conversations bound by the %s policy", r.NumConversations(), cfg.Policy)
		}
		return nil
	}
	if n := r.NumConversations(); n > cfg.MaxSessions {
		return fmt.Errorf("%d bindings exceed max_sessions %d", n, cfg.MaxSessions)
	}
	if !noEviction || cfg.CapacityAware {
		return nil // capacity awareness may send a conversation away from home
	}
	if cfg.Score == ScoreTTFT {
		// The TTFT score may move a conversation to a faster rank: a
		// placed conversation is bound to a rank one of its requests got.
		for i := range args.reqs {
			id := args.reqs[i].ConversationID
			if id == "" || res.Ranks[i] == Unplaced {
				continue
			}
			now, ok := r.Conversation(id)
			got := false
			for j := range args.reqs {
				got = got || (args.reqs[j].ConversationID == id && res.Ranks[j] == now)
			}
			if !ok || !got {
				return fmt.Errorf("conversation %q bound to %d (%v) where none of its requests went", id, now, ok)
			}
		}
		return nil
	}
	// Without eviction a binding never changes, a bound conversation goes
	// home unless home is full, and every placed conversation is bound to a
	// rank that one of its requests got.
	final := make([]int, cfg.DPSize)
	for k := range final {
		final[k] = args.states[k].NumActiveRequests + len(res.Assignment[k])
	}
	for i := range args.reqs {
		q := &args.reqs[i]
		if q.ConversationID == "" {
			continue
		}
		home, was := boundBefore[q.ConversationID]
		now, ok := r.Conversation(q.ConversationID)
		if was {
			if !ok || now != home {
				return fmt.Errorf("conversation %q rebound from %d to %d,%v", q.ConversationID, home, now, ok)
			}
			if res.Ranks[i] != home && final[home] < args.maxn {
				return fmt.Errorf("id %d of conversation %q placed on %d, home %d has room (%d < %d)",
					q.ID, q.ConversationID, res.Ranks[i], home, final[home], args.maxn)
			}
			continue
		}
		if res.Ranks[i] != Unplaced {
			if !ok {
				return fmt.Errorf("placed conversation %q not bound", q.ConversationID)
			}
			got := false
			for j := range args.reqs {
				got = got || (args.reqs[j].ConversationID == q.ConversationID && res.Ranks[j] == now)
			}
			if !got {
				return fmt.Errorf("conversation %q bound to %d where none of its requests went", q.ConversationID, now)
			}
		}
	}
	return nil
}

// checkResult must itself be able to fail: corrupt a correct result in each
// way it checks and make sure it notices.
func TestCheckResultCatchesCorruption(t *testing.T) {
	cfg := DefaultConfig(PolicyDefault, 2)
	states := idle(2)
	reqs := []Request{req(1, 5), req(2, 5), req(3, 5), targeted(4, 5, 1, true)}
	res := mustRoute(t, mustNew(t, cfg), states, reqs, 2, nil)
	if err := checkResult(cfg, states, reqs, 2, res); err != nil {
		t.Fatalf("correct result rejected: %v", err)
	}
	corruptions := map[string]func(r *Result){
		"drop a placement":    func(r *Result) { r.Assignment[0] = r.Assignment[0][:len(r.Assignment[0])-1] },
		"duplicate":           func(r *Result) { r.Assignment[0] = append(r.Assignment[0], r.Assignment[1][0]) },
		"wrong Ranks":         func(r *Result) { r.Ranks[0] = 1 - r.Ranks[0] },
		"unknown id":          func(r *Result) { r.Assignment[0][0] = 99 },
		"spurious unassigned": func(r *Result) { r.Unassigned = append(r.Unassigned, 1) },
		"expected too low":    func(r *Result) { r.Expected = 1 },
		"expected too high":   func(r *Result) { r.Expected = 3 },
		"missing rank":        func(r *Result) { r.Assignment = r.Assignment[:1] },
	}
	for name, f := range corruptions {
		c := cloneResult(res)
		f(c)
		if err := checkResult(cfg, states, reqs, 2, c); err == nil {
			t.Errorf("%s: corrupted result %+v accepted", name, c)
		}
	}
	// Over capacity and a missed target with room.
	over := &Result{Assignment: assign(u(1, 2, 3), u(4)), Ranks: []int{0, 0, 0, 1}, Expected: 3}
	if err := checkResult(cfg, states, reqs, 2, over); err == nil {
		t.Error("a rank pushed past maxn was accepted")
	}
	missed := &Result{Assignment: assign(u(1, 4), u(2, 3)), Ranks: []int{0, 1, 1, 0}, Expected: 2}
	if err := checkResult(cfg, states, reqs, 3, missed); err == nil {
		t.Error("a request placed off its free target was accepted")
	}
}
