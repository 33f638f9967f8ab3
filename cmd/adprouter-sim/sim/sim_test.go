package sim

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/adprouter/adprouter/router"
)

// tinyEngine is a small engine that keeps tests fast.
func tinyEngine() EngineConfig {
	e := DefaultEngine()
	e.DPSize = 4
	e.KVBlocks = 512
	e.MaxActive = 16
	e.MaxNumTokens = 2048
	return e
}

// tinyWorkload shrinks kind's defaults to a few seconds.
func tinyWorkload(kind string) WorkloadConfig {
	w, _ := DefaultWorkload(kind)
	w.DurationS = 3
	w.SystemTokens = min(w.SystemTokens, 1024)
	w.PromptMax = 1024
	w.OutputMax = 64
	w.QuietS, w.QuietIntervalS, w.SpikeS, w.SpikeFactor = 12, 2, 2, 60
	w.TurnsMax = 4
	w.ThinkS = 0.5
	return w
}

func mustVariants(t testing.TB, list string) []Variant {
	t.Helper()
	v, err := ParseVariants(list)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func mustSimulate(t testing.TB, o Options) *Report {
	t.Helper()
	rep, err := Simulate(o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// runShared runs variant v on the tiny engine over the tiny shared-prompt
// workload, with or without timing.
func runShared(t testing.TB, v Variant, timing bool) *Result {
	t.Helper()
	w, err := Generate(tinyWorkload(KindShared))
	if err != nil {
		t.Fatal(err)
	}
	return runWorkload(t, tinyEngine(), w, v, timing)
}

// runWorkload runs w on eng with v and returns its result.
func runWorkload(t testing.TB, eng EngineConfig, w *Workload, v Variant, timing bool) *Result {
	t.Helper()
	s, err := NewSimulator(eng, w, v, timing)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Run()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func outputs(t *testing.T, rep *Report) (js, table, svg []byte) {
	t.Helper()
	var a, b, c bytes.Buffer
	if err := rep.WriteJSON(&a); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteSVG(&c); err != nil {
		t.Fatal(err)
	}
	return a.Bytes(), b.Bytes(), c.Bytes()
}

func TestDeterminism(t *testing.T) {
	var wls []WorkloadConfig
	for _, k := range Kinds {
		wls = append(wls, tinyWorkload(k))
	}
	opts := Options{Engine: tinyEngine(), Workloads: wls, Variants: Variants()}
	j1, t1, s1 := outputs(t, mustSimulate(t, opts))
	opts.Parallel = 1
	j2, t2, s2 := outputs(t, mustSimulate(t, opts))
	if !bytes.Equal(j1, j2) || !bytes.Equal(t1, t2) || !bytes.Equal(s1, s2) {
		t.Fatal("same seed, different output")
	}
	for i := range opts.Workloads {
		opts.Workloads[i].Seed = 2
	}
	j3, _, _ := outputs(t, mustSimulate(t, opts))
	if bytes.Equal(j1, j3) {
		t.Fatal("seeds 1 and 2 give the same JSON")
	}
	if bytes.Contains(j1, []byte(`"timing"`)) {
		t.Error("timing in the JSON although Timing is off")
	}
	opts.Timing = true
	j4, t4, _ := outputs(t, mustSimulate(t, opts))
	if !bytes.Contains(j4, []byte(`"timing"`)) || !bytes.Contains(t4, []byte("route us/call")) {
		t.Error("Timing on, but no timing in the JSON or the table")
	}
}

// TestAccounting runs every workload with every variant, also handing the
// router every waiting request (so that it returns some unassigned), and
// checks that every request is placed and completed, or counted.
func TestAccounting(t *testing.T) {
	for _, limit := range []int{0, -1, 3} {
		eng := tinyEngine()
		eng.RouteLimit = limit
		eng.MaxActive = 4
		var wls []WorkloadConfig
		for _, k := range Kinds {
			wls = append(wls, tinyWorkload(k))
		}
		burst := tinyWorkload(KindShared) // 4 ranks x 4 slots, bursts of ~40
		burst.Arrival, burst.BurstSize, burst.Rate, burst.DurationS = ArrivalBursty, 40, 60, 3
		wls = append(wls, burst)
		rep := mustSimulate(t, Options{Engine: eng, Workloads: wls, Variants: Variants()})
		unplaced := int64(0)
		for _, run := range rep.Runs {
			for _, res := range run.Results {
				name := fmt.Sprintf("limit %d, %s, %s", limit, run.Workload.Kind, res.Policy)
				if res.Requests != run.Requests || res.Completed+res.Rejected != res.Requests || res.Rejected != 0 {
					t.Errorf("%s: %d of %d requests arrived, %d completed, %d rejected", name, res.Requests, run.Requests, res.Completed, res.Rejected)
				}
				if res.Routed != int64(res.Requests)+res.Unplaced {
					t.Errorf("%s: routed %d = requests %d + unplaced %d does not hold", name, res.Routed, res.Requests, res.Unplaced)
				}
				if res.TTFT.P50 <= 0 || res.TTFT.P50 > res.TTFT.P99 || res.LoadSpread < 1 || res.LoadSpread > float64(eng.DPSize) {
					t.Errorf("%s: implausible TTFT %+v or spread %g", name, res.TTFT, res.LoadSpread)
				}
				if res.PrefillSpread < 1 || res.PrefillSpread > float64(eng.DPSize) {
					t.Errorf("%s: prefill spread %g, want 1..%d", name, res.PrefillSpread, eng.DPSize)
				}
				if res.PrefillTokens <= 0 || res.PrefillTokens > res.PromptTokens {
					t.Errorf("%s: prefill %d of %d prompt tokens", name, res.PrefillTokens, res.PromptTokens)
				}
				unplaced += res.Unplaced
			}
		}
		if limit == -1 && unplaced == 0 {
			t.Error("handing the router every waiting request never left one unassigned: the test is too weak")
		}
	}
}

// TestInvariants steps simulations and checks the pools after every
// iteration: capacity never exceeded, and everything released at the end.
func TestInvariants(t *testing.T) {
	eng := tinyEngine()
	eng.KVBlocks = 160 // tight: forces evictions and waiting
	for _, reuse := range ReuseModes {
		eng.Reuse = reuse
		for _, kind := range Kinds {
			w, err := Generate(tinyWorkload(kind))
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range Variants() {
				s, err := NewSimulator(eng, w, v, false)
				if err != nil {
					t.Fatal(err)
				}
				for {
					more, err := s.Step()
					if err != nil {
						t.Fatal(err)
					}
					for k, c := range s.Ranks() {
						if c.Used() > c.Capacity() || c.Private() < 0 {
							t.Fatalf("%s %s rank %d: used %d of %d blocks", kind, v.Name, k, c.Used(), c.Capacity())
						}
					}
					if !more {
						break
					}
				}
				res := s.Result()
				for k, c := range s.Ranks() {
					if c.Private() != 0 || c.Evictable() != c.Cached() {
						t.Errorf("%s %s rank %d: after the run %d private blocks, %d of %d cached blocks referenced",
							kind, v.Name, k, c.Private(), c.Cached()-c.Evictable(), c.Cached())
					}
				}
				if res.Completed+res.Rejected != res.Requests {
					t.Errorf("%s %s: requests lost", kind, v.Name)
				}
			}
		}
	}
}

// TestSingleRequestTiming checks the time model on one request by hand.
func TestSingleRequestTiming(t *testing.T) {
	eng := tinyEngine()
	eng.IterBaseMs, eng.PrefillUsPerToken, eng.DecodeUsPerSeq = 2, 10, 100
	w := &Workload{Config: WorkloadConfig{Seed: 1, Vocab: 100}, Sessions: []Session{{
		Group: -1, Start: 5e9, Prefix: make([]int32, 3000), Turns: []Turn{{ID: 7, Output: 3}},
	}}}
	v, _ := LookupVariant(VariantDefault)
	res := runWorkload(t, eng, w, v, false)
	// Iteration 1: 2048 prefill tokens (the budget), 2 + 20.48 ms; iteration
	// 2: 952 tokens, 2 + 9.52 ms, first token; iterations 3 and 4: one
	// decode each, 2.1 ms.
	if res.TTFT.P50 != 34 || res.MakespanS != 5.0382 || res.Iterations != 4 || res.PrefillTokens != 3000 {
		t.Errorf("TTFT %v ms, makespan %v s, %d iterations, prefill %d; want 34, 5.0382, 4, 3000",
			res.TTFT.P50, res.MakespanS, res.Iterations, res.PrefillTokens)
	}
}

// TestPrefillSpread checks the prefill spread by hand: one 3000-token
// prompt computes alone on one of 4 ranks (4, the most); two arriving
// together compute side by side on two ranks, 2048 tokens each in the
// first iteration and 952 in the second (2).
func TestPrefillSpread(t *testing.T) {
	for _, tc := range []struct {
		prompts int
		want    float64
	}{{1, 4}, {2, 2}} {
		w := &Workload{Config: WorkloadConfig{Seed: 1, Vocab: 100}}
		for i := range tc.prompts {
			w.Sessions = append(w.Sessions, Session{Group: -1, Start: 5e9,
				Prefix: slices.Repeat([]int32{int32(i)}, 3000), Turns: []Turn{{ID: uint64(i + 1), Output: 3}}})
		}
		v, _ := LookupVariant(VariantDefault)
		res := runWorkload(t, tinyEngine(), w, v, false)
		if res.PrefillSpread != tc.want || res.PrefillTokens != int64(3000*tc.prompts) {
			t.Errorf("%d prompts: prefill spread %g, prefill %d; want %g, %d", tc.prompts, res.PrefillSpread, res.PrefillTokens, tc.want, 3000*tc.prompts)
		}
	}
}

// TestWindowPrefillSpread checks the window's prefill spread by hand: a
// 3000-token prompt alone at 1 s, outside the window, then a 3000- and a
// 1000-token prompt side by side at 5 s, in a window that ends a
// millisecond later. The window's iterations are both of the pair's: the
// first computes 2048 and 1000 tokens, the second, after the window's end
// but while a request that arrived in it waits, the last 952 (4 * 3000 /
// 4000 = 3); the whole run adds the lone prompt's (4 * 6000 / 7000).
func TestWindowPrefillSpread(t *testing.T) {
	w := &Workload{Config: WorkloadConfig{Seed: 1, Vocab: 100}, Window: &Window{Start: 4e9, End: 5.001e9}}
	for i, p := range []struct {
		start  int64
		tokens int
	}{{1e9, 3000}, {5e9, 3000}, {5e9, 1000}} {
		w.Sessions = append(w.Sessions, Session{Group: -1, Start: p.start,
			Prefix: slices.Repeat([]int32{int32(i)}, p.tokens), Turns: []Turn{{ID: uint64(i + 1), Output: 3}}})
	}
	v, _ := LookupVariant(VariantDefault)
	res := runWorkload(t, tinyEngine(), w, v, false)
	if res.Window == nil || res.Window.PrefillSpread != 3 || res.PrefillSpread != 3.4286 {
		t.Fatalf("prefill spread %g, window %+v; want 3.4286 and a window spread of 3", res.PrefillSpread, res.Window)
	}
}

// TestSanity checks that the results mean what they should.
func TestSanity(t *testing.T) {
	eng := tinyEngine()
	shared := tinyWorkload(KindShared)
	shared.Rate = 40
	multi := tinyWorkload(KindMultiTenant)
	multi.Rate = 40
	cold := tinyWorkload(KindColdStart)
	cold.QuietS = 20
	conv := tinyWorkload(KindConversation)
	conv.DurationS = 6
	rep := mustSimulate(t, Options{Engine: eng, Workloads: []WorkloadConfig{shared, multi, cold, conv},
		Variants: mustVariants(t, "default,kv_cache_aware,kv_cache_aware+warmup,conversation")})
	get := func(run int, policy string) *Result {
		for _, r := range rep.Runs[run].Results {
			if r.Policy == policy {
				return r
			}
		}
		t.Fatalf("no %s result", policy)
		return nil
	}
	for run, kind := range []string{"shared", "multitenant"} {
		d, kv := get(run, "default"), get(run, "kv_cache_aware")
		if kv.PrefillTokens >= d.PrefillTokens {
			t.Errorf("%s: kv_cache_aware prefill %d >= default %d", kind, kv.PrefillTokens, d.PrefillTokens)
		}
	}
	// Cold start: warmup computes less prefill in the spike than without.
	kv, warm := get(2, "kv_cache_aware"), get(2, "kv_cache_aware+warmup")
	if warm.Window.PrefillTokens >= kv.Window.PrefillTokens {
		t.Errorf("coldstart: spike prefill with warmup %d >= without %d", warm.Window.PrefillTokens, kv.Window.PrefillTokens)
	}
	// Conversations: affinity reuses more than load balancing.
	if c, d := get(3, "conversation"), get(3, "default"); c.CacheHit <= d.CacheHit {
		t.Errorf("conversation: hit %.3f with affinity <= %.3f without", c.CacheHit, d.CacheHit)
	}
}

// TestRejectedAndHeterogeneous routes requests onto a rank too small for
// them: they are rejected and counted, never lost, and a conversation stops.
func TestRejectedAndHeterogeneous(t *testing.T) {
	eng := tinyEngine()
	eng.RankBlocks = []int{8, 512, 512, 512} // rank 0 holds 256 tokens
	wc := tinyWorkload(KindConversation)
	rep := mustSimulate(t, Options{Engine: eng, Workloads: []WorkloadConfig{wc}, Variants: mustVariants(t, "conversation")})
	res := rep.Runs[0].Results[0]
	if res.Rejected == 0 {
		t.Fatal("no request rejected on the 8-block rank")
	}
	if res.Completed+res.Rejected != res.Requests || res.Requests >= rep.Runs[0].Requests {
		t.Errorf("requests %d (of %d scripted), completed %d, rejected %d", res.Requests, rep.Runs[0].Requests, res.Completed, res.Rejected)
	}
}

func TestGatherAndNoProbe(t *testing.T) {
	calls := 0
	v := Variant{Name: "test-gather", Policy: router.PolicyKVCacheAware, NoProbe: true,
		Gather: func(info RankInfo, st *router.RankState) {
			calls++
			if info.CapacityBlocks != 512 || info.TokensPerBlock != 32 || st.Rank != info.Rank ||
				st.KVCapacityTokens != 512*32 || st.FreeKVTokens > st.KVCapacityTokens {
				panic(fmt.Sprintf("bad info %+v for %+v", info, *st))
			}
		}}
	res := runShared(t, v, false)
	if calls == 0 || int64(calls) != 4*res.RouteCalls {
		t.Errorf("Gather called %d times for %d decisions on 4 ranks", calls, res.RouteCalls)
	}
	// Without match lengths the KV-aware policy cannot see the cache.
	rep := mustSimulate(t, Options{Engine: tinyEngine(), Workloads: []WorkloadConfig{tinyWorkload(KindShared)},
		Variants: mustVariants(t, "kv_cache_aware")})
	if res.PrefillTokens == rep.Runs[0].Results[0].PrefillTokens {
		t.Error("withholding match lengths changed nothing")
	}
}

// The engine routes every iteration, with no request when none waits, as
// TensorRT-LLM's executor does under attention DP: a router that keeps
// per-decision state (the predicted-TTFT score drains its queue estimate
// once per decision) sees every iteration go by. Only decisions with
// requests are timed.
func TestRoutesEveryIteration(t *testing.T) {
	v, _ := LookupVariant(VariantRecommended)
	res := runShared(t, v, true)
	if res.RouteCalls != res.Iterations {
		t.Errorf("%d routing decisions in %d iterations, want one per iteration", res.RouteCalls, res.Iterations)
	}
	if res.Timing == nil || int64(res.Timing.Calls) >= res.RouteCalls || res.Timing.Calls == 0 {
		t.Errorf("timed %+v of %d decisions, want only those with requests", res.Timing, res.RouteCalls)
	}
}

func TestRegistry(t *testing.T) {
	if _, err := ParseVariants("default,nope"); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown variant: %v", err)
	}
	if _, err := ParseVariants("default,default"); err == nil {
		t.Error("a variant listed twice was accepted")
	}
	if v := mustVariants(t, ""); len(v) != len(DefaultVariants) || v[1].Name != DefaultVariants[1] {
		t.Errorf("empty list gives %d variants", len(v))
	}
	if err := Register(Variant{Name: VariantDefault, Policy: router.PolicyDefault}); err == nil {
		t.Error("a duplicate name was registered")
	}
	if err := Register(Variant{Name: "bad", Policy: "nope"}); err == nil {
		t.Error("an invalid policy was registered")
	}
	if err := Register(Variant{Name: "a,b", Policy: router.PolicyDefault}); err == nil {
		t.Error("a name with a comma was registered")
	}
	n := len(Variants())
	name := "kv_cache_aware+test-beta0"
	if err := Register(Variant{Name: name, Policy: router.PolicyKVCacheAware,
		Apply: func(c *router.Config) { c.LoadBalanceWeight = 0 }}); err != nil {
		t.Fatal(err)
	}
	defer func() { registry = registry[:n] }()
	v, ok := LookupVariant(name)
	if !ok || v.Config(4, 16).LoadBalanceWeight != 0 || v.Config(4, 16).DPSize != 4 || v.Config(4, 16).TokensPerBlock != 16 || len(Variants()) != n+1 {
		t.Error("registered variant not found or not applied")
	}
}

func TestEngineValidate(t *testing.T) {
	tests := []struct {
		edit func(e *EngineConfig)
		want string
	}{
		{func(e *EngineConfig) { e.DPSize = 0 }, "dp_size"},
		{func(e *EngineConfig) { e.KVBlocks = 0 }, "kv_blocks"},
		{func(e *EngineConfig) { e.RankBlocks = []int{1, 2} }, "rank_blocks"},
		{func(e *EngineConfig) { e.TokensPerBlock = 0 }, "tokens_per_block"},
		{func(e *EngineConfig) { e.MaxActive = 0 }, "max_active"},
		{func(e *EngineConfig) { e.MaxNumTokens = 10 }, "max_num_tokens"},
		{func(e *EngineConfig) { e.RouteLimit = -2 }, "route_limit"},
		{func(e *EngineConfig) { e.ActiveTokens = "all" }, "active_tokens"},
		{func(e *EngineConfig) { e.Reuse = "" }, "reuse"},
		{func(e *EngineConfig) { e.Reuse = "eager" }, "reuse"},
		{func(e *EngineConfig) { e.PrefillUsPerToken = -1 }, "prefill_us_per_token"},
		{func(e *EngineConfig) { e.IterBaseMs, e.PrefillUsPerToken, e.DecodeUsPerSeq = 0, 0, 0 }, "all zeros"},
	}
	for _, tc := range tests {
		e := DefaultEngine()
		tc.edit(&e)
		if err := e.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %s", e, err, tc.want)
		}
	}
}

func TestActiveTokens(t *testing.T) {
	r := &rank{cache: NewCache(64)}
	started := &request{prompt: make([]int32, 100)}
	queued := &request{prompt: make([]int32, 50)}
	r.add(started, 1)
	r.add(queued, 1)
	started.cached = 64 // as schedule does when the request starts
	r.fresh -= 64
	started.generated = 5
	r.tokens += 5
	tests := []struct {
		mode   string
		policy router.Policy
		want   int64
	}{
		{TokensReference, router.PolicyDefault, 150},
		{TokensReference, router.PolicyConversation, 150},
		{TokensReference, router.PolicyKVCacheAware, 36 + 50},
		{TokensPrompt, router.PolicyKVCacheAware, 150},
		{TokensUncached, router.PolicyDefault, 86},
		{TokensContext, router.PolicyDefault, 155},
	}
	for _, tc := range tests {
		if got := r.activeTokens(tc.mode, tc.policy); got != tc.want {
			t.Errorf("mode %q, policy %s: %d, want %d", tc.mode, tc.policy, got, tc.want)
		}
	}
	r.add(started, -1)
	r.add(queued, -1)
	if r.tokens != 0 || r.prompt != 0 || r.fresh != 0 {
		t.Errorf("after both left: tokens %d prompt %d fresh %d", r.tokens, r.prompt, r.fresh)
	}
}

// TestPendingKV: a rank's pending KV is the whole sequences, in blocks, of
// the requests it has not started; started ones reserved theirs.
func TestPendingKV(t *testing.T) {
	r := &rank{cache: NewCache(64)}
	r.running = []*request{{prompt: make([]int32, 300), output: 40}}
	if got := r.pendingKV(32); got != 0 {
		t.Errorf("nothing queued: pending %d, want 0", got)
	}
	r.queue = []*request{{prompt: make([]int32, 100), output: 20}, {prompt: make([]int32, 31), output: 1}}
	if got, want := r.pendingKV(32), int64(4+1)*32; got != want {
		t.Errorf("pending %d, want %d (blocks of 120 and 32 tokens)", got, want)
	}
}

// TestFullKVReport: a variant with FullKVReport has every rank report its
// pending KV (none with nothing queued) and its evictable KV (within its
// free KV), and every request its output; with PendingKVReport the same
// but the evictable KV; others, and NoKVReport, report none of them.
func TestFullKVReport(t *testing.T) {
	w, err := Generate(tinyWorkload(KindTenantSpike))
	if err != nil {
		t.Fatal(err)
	}
	eng := tinyEngine()
	eng.KVBlocks = 80 // requests queue for memory
	for _, tc := range []struct {
		name                string
		full, pending, hide bool
		reports, evictable  bool
	}{
		{"neither", false, false, false, false, false},
		{"full", true, false, false, true, true},
		{"pending", false, true, false, true, false},
		{"full, no_kv_report", true, false, true, false, false},
		{"pending, no_kv_report", false, true, true, false, false},
	} {
		var seen, reporting, queued int
		bad := ""
		v := Variant{Name: "probe", Policy: router.PolicyKVCacheAware, FullKVReport: tc.full,
			PendingKVReport: tc.pending, NoKVReport: tc.hide,
			Gather: func(info RankInfo, st *router.RankState) {
				seen++
				if st.ReportsEvictableKV != tc.evictable {
					bad = fmt.Sprintf("rank %d: reports evictable KV %v", info.Rank, st.ReportsEvictableKV)
				}
				if !st.ReportsPendingKV {
					return
				}
				reporting++
				if info.Waiting > 0 {
					queued++
				}
				evictable := int64(info.EvictableBlocks * info.TokensPerBlock)
				if tc.evictable && (st.EvictableKVTokens != evictable || evictable > st.FreeKVTokens) {
					bad = fmt.Sprintf("rank %d: evictable %d of %d free, want %d", info.Rank,
						st.EvictableKVTokens, st.FreeKVTokens, evictable)
				}
				if (st.PendingKVTokens == 0) != (info.Waiting == 0) || st.PendingKVTokens%int64(info.TokensPerBlock) != 0 {
					bad = fmt.Sprintf("rank %d: %d waiting, pending %d", info.Rank, info.Waiting, st.PendingKVTokens)
				}
			}}
		runWorkload(t, eng, w, v, false)
		want := 0
		if tc.reports {
			want = seen
		}
		if seen == 0 || reporting != want || bad != "" || (want > 0 && queued == 0) {
			t.Errorf("%s: %d of %d states report pending KV (%d with requests queued), want %d; %s",
				tc.name, reporting, seen, queued, want, bad)
		}

		s, err := NewSimulator(eng, w, v, false)
		if err != nil {
			t.Fatal(err)
		}
		s.waiting = append(s.waiting, &request{id: 1, prompt: make([]int32, 10), output: 77, sess: &Session{}})
		if err := s.route(); err != nil {
			t.Fatal(err)
		}
		if got := s.reqs[0].MaxNewTokens; got != map[bool]int{true: 77, false: 0}[tc.reports] {
			t.Errorf("%s: max_new_tokens %d given for a 77-token output", tc.name, got)
		}
	}
}

// TestReuseSemantics checks, by hand, cases where the reuse semantics
// differ, on one rank with a 2048-token iteration budget.
func TestReuseSemantics(t *testing.T) {
	prompt := func(n int) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32(i % 1000)
		}
		return p
	}
	sys := prompt(1000)
	// Two requests for the same 1000-token prompt arrive together.
	siblings := &Workload{Config: WorkloadConfig{Seed: 1, Vocab: 1000}, Sessions: []Session{
		{Group: -1, Prefix: sys, Turns: []Turn{{ID: 0, Output: 2}}},
		{Group: -1, Prefix: sys, Turns: []Turn{{ID: 1, Output: 2}}},
	}}
	// A 3000-token turn, and 1 ms later an in-flight follow-up that adds
	// 100 tokens to it.
	followup := &Workload{Config: WorkloadConfig{Seed: 1, Vocab: 1000}, Sessions: []Session{
		{ConvID: "c", Group: -1, Prefix: prompt(3000), Turns: []Turn{{ID: 0, Output: 2},
			{ID: 1, User: prompt(100), Output: 2, Think: 1e6, InFlight: true}}},
	}}
	tests := []struct {
		name    string
		wl      *Workload
		reuse   string
		prefill int64
		p50     float64
	}{
		// Both start in the first iteration and compute the prompt, 4 + 40
		// µs x 2000 = 84 ms.
		{"siblings", siblings, ReuseAfterIteration, 2000, 84},
		// The second reuses the first's 31 whole blocks scheduled before it
		// (the probe stops at the prompt minus its last token) and computes
		// 8 tokens: 4 + 40 µs x 1008.
		{"siblings", siblings, ReuseOnSchedule, 1008, 44.32},
		// Iteration 1 computes 2048 tokens of the turn; the follow-up starts
		// in iteration 2 beside the turn's last 952 tokens, reusing the 64
		// blocks committed by then: 3100 - 2048 = 1052 tokens.
		// The turn's first token comes at 85.92 + 4 + 40 µs x (952 + 1052) =
		// 170.08 ms, the follow-up's 1 ms after it arrived.
		{"followup", followup, ReuseAfterIteration, 3000 + 1052, 169.08},
		// ... or the 93 whole blocks of the turn, scheduled in full by then:
		// 3100 - 2976 = 124 tokens.
		// 85.92 + 4 + 40 µs x (952 + 124) = 132.96 ms.
		{"followup", followup, ReuseOnSchedule, 3000 + 124, 131.96},
	}
	for _, tc := range tests {
		eng := tinyEngine()
		eng.DPSize, eng.Reuse = 1, tc.reuse
		v, _ := LookupVariant(VariantConversation)
		s, err := NewSimulator(eng, tc.wl, v, false)
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Run()
		if err != nil {
			t.Fatal(err)
		}
		// Both arrived before the first token.
		inflight := len(res.samples) == 2
		for _, x := range res.samples {
			for _, y := range res.samples {
				inflight = inflight && x.arrival < y.arrival+y.ttft
			}
		}
		if res.Completed != 2 || res.PrefillTokens != tc.prefill || res.TTFT.P50 != tc.p50 || !inflight {
			t.Errorf("%s, reuse %s: %d completed, prefill %d, TTFT p50 %v ms, both in flight %v; want 2, %d, %v ms, true",
				tc.name, tc.reuse, res.Completed, res.PrefillTokens, res.TTFT.P50, inflight, tc.prefill, tc.p50)
		}
	}
}

// TestNoKVReport: a variant with NoKVReport sees ranks report no KV pool, as
// a host that fills only TensorRT-LLM's fields; others see the pool.
func TestNoKVReport(t *testing.T) {
	for _, hide := range []bool{false, true} {
		var seen, withPool int
		v := Variant{Name: "probe", Policy: router.PolicyKVCacheAware, NoKVReport: hide,
			Gather: func(_ RankInfo, st *router.RankState) {
				seen++
				if st.KVCapacityTokens > 0 || st.FreeKVTokens > 0 {
					withPool++
				}
			}}
		runShared(t, v, false)
		if want := map[bool]int{false: seen, true: 0}[hide]; seen == 0 || withPool != want {
			t.Errorf("NoKVReport %v: %d of %d rank states report a KV pool, want %d", hide, withPool, seen, want)
		}
	}
}
