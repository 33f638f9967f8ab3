package router

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// family returns a prompt of n tokens that starts with a 256-token system
// prompt of family f and ends with a suffix unique to id.
func family(f, id uint64, n int) Request {
	toks := make([]int32, n)
	for i := range toks {
		if i < 256 {
			toks[i] = int32(f*1_000_000 + uint64(i))
		} else {
			toks[i] = int32(id*1_000 + uint64(i))
		}
	}
	return Request{ID: id, Tokens: toks, TargetRank: NoTarget}
}

func busy(size int, tokens int64) []RankState {
	s := idle(size)
	for k := range s {
		s[k].NumActiveTokens = tokens
	}
	return s
}

// Siblings of a new prompt in one batch: the probe source knows nothing
// cached and scatters them; the index sees the first one placed and sends
// the rest after it.
func TestIndexColocatesSiblings(t *testing.T) {
	var reqs []Request
	for id := range uint64(4) {
		reqs = append(reqs, family(1, id, 300))
		reqs[id].Tokens = reqs[0].Tokens // identical prompts
	}
	for _, tc := range []struct {
		source    PrefixSource
		wantRanks int
	}{{SourceProbe, 4}, {SourceIndex, 1}, {SourceProbeIndex, 1}} {
		cfg := sourceCfg(4, tc.source)
		cfg.FairShareMultiplier = 4 // let one rank take all four
		res := mustRoute(t, mustNew(t, cfg), busy(4, 10000), reqs, 8, nil)
		used := 0
		for _, ids := range res.Assignment {
			if len(ids) > 0 {
				used++
			}
		}
		if used != tc.wantRanks {
			t.Errorf("%s: siblings on %d ranks (%v), want %d", tc.source, used, res.Assignment, tc.wantRanks)
		}
	}
}

func TestIndexAcrossCallsAndScopes(t *testing.T) {
	r := mustNew(t, sourceCfg(4, SourceIndex))
	first := mustRoute(t, r, busy(4, 10000), []Request{family(7, 1, 400)}, 8, nil)
	home := first.Ranks[0]
	// Same family later: the index remembers where its blocks went.
	res := mustRoute(t, r, busy(4, 10000), []Request{family(7, 2, 400)}, 8, nil)
	if res.Ranks[0] != home {
		t.Errorf("same family routed to %d, want %d where its prefix is", res.Ranks[0], home)
	}
	// Same tokens under another LoRA adapter: nothing matches, so the
	// decision is the probe source's (no matches) decision.
	other := family(7, 3, 400)
	other.LoRAID = 5
	probe := mustRoute(t, mustNew(t, sourceCfg(4, SourceProbe)), busy(4, 10000), []Request{other}, 8, nil)
	res = mustRoute(t, r, busy(4, 10000), []Request{other}, 8, nil)
	if res.Ranks[0] != probe.Ranks[0] {
		t.Errorf("other LoRA routed to %d, want %d (no match: same as probe source)", res.Ranks[0], probe.Ranks[0])
	}
	if st := r.Stats(0); st.Ranks[home].PredictedHitTokens == 0 || st.IndexEntries == 0 {
		t.Errorf("stats show no index activity: %+v", st)
	}
}

// probe+index takes the larger of the two sources per rank.
func TestProbePlusIndex(t *testing.T) {
	for _, tc := range []struct {
		name    string
		probe   []int32
		want    int
		because string
	}{
		{"probe larger", []int32{0, 299}, 1, "the probe's 299 beats the index's 288 on rank 0"},
		{"index only", nil, 0, "the index's 288 on rank 0"},
	} {
		r := mustNew(t, sourceCfg(2, SourceProbeIndex))
		// The index learns that rank 0 holds 9 full blocks of 0..298.
		mustRoute(t, r, busy(2, 10000), []Request{targeted(1, 300, 0, true)}, 8, nil)
		res := mustRoute(t, r, busy(2, 10000), []Request{req(2, 300)}, 8, tc.probe)
		if res.Ranks[0] != tc.want {
			t.Errorf("%s: routed to %d, want %d (%s)", tc.name, res.Ranks[0], tc.want, tc.because)
		}
	}
}

// A rank's share of the index is bounded by its KV capacity in blocks.
func TestIndexBoundedByCapacity(t *testing.T) {
	r := mustNew(t, sourceCfg(1, SourceIndex))
	s := withKV(idle(1), [2]int64{64, 64}) // 2 blocks of 32
	mustRoute(t, r, s, []Request{family(1, 1, 1000)}, 8, nil)
	st := r.Stats(0)
	if st.Ranks[0].IndexBlocks != 2 || st.Ranks[0].IndexLimitBlocks != 2 {
		t.Errorf("index holds %d blocks (limit %d), want 2 (capacity 64 tokens)", st.Ranks[0].IndexBlocks, st.Ranks[0].IndexLimitBlocks)
	}
}

func demandCfg(size int) Config {
	c := DefaultConfig(PolicyKVCacheAware, size)
	c.Warmup = WarmupDemand
	c.WarmupMinRequests = 2
	return c
}

// A family that carries all the traffic is replicated onto every rank, one
// rank per request once it is hot, while one-off prompts are not.
func TestDemandWarmupReplicatesHotFamily(t *testing.T) {
	r := mustNew(t, demandCfg(4))
	var seen []int
	for id := range uint64(8) {
		// Probe matches: rank(s) already holding the family report them,
		// as an engine's radix tree would.
		res := mustRoute(t, r, busy(4, 10000), []Request{family(1, id, 400)}, 16, nil)
		seen = append(seen, res.Ranks[0])
	}
	st := r.Stats(4)
	if len(st.HotGroups) != 1 || st.HotGroups[0].Replicas != 4 || st.HotGroups[0].Target != 4 {
		t.Fatalf("hot groups = %+v, want one family on all 4 ranks", st.HotGroups)
	}
	distinct := slices.Compact(slices.Sorted(slices.Values(seen)))
	if len(distinct) != 4 {
		t.Errorf("placements %v reach %d ranks, want all 4", seen, len(distinct))
	}
	if st.DemandPlacements == 0 {
		t.Error("no demand placements counted")
	}

	// One-off prompts (each family once) are never replicated.
	r = mustNew(t, demandCfg(4))
	for id := range uint64(8) {
		mustRoute(t, r, busy(4, 10000), []Request{family(100+id, id, 400)}, 16, nil)
	}
	if st := r.Stats(4); st.DemandPlacements != 0 || len(st.HotGroups) != 0 {
		t.Errorf("one-off prompts: %d demand placements, hot groups %+v; want none", st.DemandPlacements, st.HotGroups)
	}
}

// Two routers with the index and demand warmup, fed the same calls, keep
// identical state and make identical decisions.
func TestIndexDeterminism(t *testing.T) {
	cfg := demandCfg(3)
	cfg.PrefixSource = SourceProbeIndex
	a, b := mustNew(t, cfg), mustNew(t, cfg)
	for call := range uint64(20) {
		reqs := []Request{family(call%3, call*10, 300+int(call)), family(1, call*10+1, 350)}
		ra := mustRoute(t, a, busy(3, int64(1000*call)), reqs, 8, nil)
		rb := mustRoute(t, b, busy(3, int64(1000*call)), reqs, 8, nil)
		if !eqAssign(ra.Assignment, rb.Assignment) {
			t.Fatalf("call %d: decisions differ", call)
		}
		if a.StateDigest() != b.StateDigest() {
			t.Fatalf("call %d: digests differ", call)
		}
	}
}

func TestIndexConfigValidation(t *testing.T) {
	for _, mut := range []func(*Config){
		func(c *Config) { c.PrefixSource = "radix" },
		func(c *Config) { c.Policy, c.PrefixSource = PolicyDefault, SourceIndex },
		func(c *Config) { c.Warmup = "always" },
		func(c *Config) { c.Warmup, c.ColdStartWarmup = WarmupDemand, true },
		func(c *Config) { c.Policy, c.Warmup = PolicyConversation, WarmupDemand },
		func(c *Config) { c.TokensPerBlock = 0 },
		func(c *Config) { c.WarmupFactor = 0 },
		func(c *Config) { c.WarmupWindow = 0 },
		func(c *Config) { c.WarmupMinRequests = 0 },
		func(c *Config) { c.IndexCapacityBlocks = -1 },
	} {
		c := DefaultConfig(PolicyKVCacheAware, 2)
		mut(&c)
		if _, err := New(c); err == nil {
			t.Errorf("config %+v accepted, want an error", c)
		}
	}
}

// Demand warmup replicates only while the engine is quiet: under load the
// same hot family is routed by score alone.
func TestDemandWarmupWaitsForQuiet(t *testing.T) {
	cfg := demandCfg(4)
	cfg.PrefixSource = SourceIndex // affinity keeps the family on one rank
	r := mustNew(t, cfg)
	loaded := busy(4, 10000)
	for k := range loaded {
		loaded[k].NumActiveRequests = 3 // 12 active requests on 4 ranks
	}
	for id := range uint64(8) {
		mustRoute(t, r, loaded, []Request{family(1, id, 400)}, 16, nil)
	}
	if st := r.Stats(4); st.DemandPlacements != 0 || st.HotGroups[0].Replicas != 1 {
		t.Errorf("under load: %d demand placements, groups %+v; want 0 and one replica", st.DemandPlacements, st.HotGroups)
	}
	// Quiet again: the now hot family is replicated.
	mustRoute(t, r, busy(4, 10000), []Request{family(1, 100, 400)}, 16, nil)
	if st := r.Stats(4); st.DemandPlacements != 1 {
		t.Errorf("%d demand placements once quiet, want 1", st.DemandPlacements)
	}
}

// BenchmarkIndexSource routes batches of 8 requests of 2,300 tokens (16
// prompt families) with the router's own prefix index: hashing, matching and
// inserting dominate.
func BenchmarkIndexSource(b *testing.B) {
	benchFamilies(b, sourceCfg(8, SourceIndex), nil)
}

// benchFamilies routes, with cfg over 8 ranks, batches of 8 requests of
// 2,300 tokens from 16 prompt families, with the given match lengths.
func benchFamilies(b *testing.B, cfg Config, matches []int32) {
	r := mustNew(b, cfg)
	var reqs []Request
	for i := range uint64(8) {
		reqs = append(reqs, family(i%16, i, 2300))
	}
	states := busy(8, 10000)
	var res Result
	b.ResetTimer()
	for i := range b.N {
		for k := range reqs {
			reqs[k].ID = uint64(i*8 + k)
		}
		if err := r.RouteInto(&res, states, reqs, 64, matches); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*8), "ns/request")
}

// steadyWorkload is the index-mode workload of BenchmarkIndexSteady: batches
// of fresh prompts of 2048 ± 10% tokens, 7 in 8 of them starting with one of
// four 512-token system prompts, the rest unrelated to anything.
type steadyWorkload struct {
	reqs   []Request
	states []RankState
	call   int
}

func newSteadyWorkload(nreq, size int) *steadyWorkload {
	w := &steadyWorkload{states: busy(size, 50_000)}
	for i := range nreq {
		n := 2048 - 204 + (i*7919)%409 // 2048 ± 10%
		toks := make([]int32, n)
		for t := range toks {
			toks[t] = int32((i*131 + t*31) % 32000)
		}
		if i%8 != 7 {
			fam := int32(i*i%7) % 4
			for t := range 512 {
				toks[t] = 100_000*(fam+1) + int32(t)
			}
		}
		w.reqs = append(w.reqs, Request{Tokens: toks, TargetRank: NoTarget})
	}
	return w
}

// next makes every prompt fresh (its first token after the system prompt,
// or its first token, names the call) and gives the requests new ids.
func (w *steadyWorkload) next() {
	w.call++
	for i := range w.reqs {
		q := &w.reqs[i]
		q.ID = uint64(w.call*len(w.reqs) + i)
		at := 512
		if i%8 == 7 {
			at = 0
		}
		q.Tokens[at] = int32(1_000_000 + w.call)
	}
}

// fillIndex calls route until r's prefix index is full: it has evicted, and
// over the last 50 calls its entries grew by less than 1% and its memory
// not at all (python/tests/index_fill.py is the Python benchmarks' copy of
// the rule). The first eviction comes long before that (one rank's share
// is full while the others' still grow), and a full index is larger, so
// slower, than one still filling.
func fillIndex(tb testing.TB, r *Router, route func()) {
	const settle, most = 50, 20_000
	type held struct{ entries, bytes int }
	var h []held
	for range most {
		st := r.Stats(0)
		h = append(h, held{st.IndexEntries, st.IndexBytes})
		evicted := uint64(0)
		for _, rs := range st.Ranks {
			evicted += rs.IndexEvictedBlocks
		}
		if n := len(h); evicted > 0 && n > settle {
			was, now := h[n-1-settle], h[n-1]
			if 100*(now.entries-was.entries) < now.entries && now.bytes == was.bytes {
				return
			}
		}
		route()
	}
	tb.Fatalf("the prefix index is not full after %d decisions", most)
}

// BenchmarkIndexSteady is index mode in steady state: 256 fresh prompts over
// 16 ranks per decision with the index full and evicting ("full"), against
// the same decisions on an index that is still filling ("early": a new
// Router every 4 decisions). Late decisions should cost little more than
// early ones.
func BenchmarkIndexSteady(b *testing.B) {
	const nreq, size = 256, 16
	cfg := sourceCfg(size, SourceIndex)
	for _, phase := range []string{"early", "full"} {
		b.Run(fmt.Sprintf("%s/%dreq_x_%dranks", phase, nreq, size), func(b *testing.B) {
			w := newSteadyWorkload(nreq, size)
			r := mustNew(b, cfg)
			var res Result
			route := func() {
				w.next()
				if err := r.RouteInto(&res, w.states, w.reqs, 1<<20, nil); err != nil {
					b.Fatal(err)
				}
			}
			if phase == "full" {
				fillIndex(b, r, route)
			}
			b.ReportAllocs()
			n := 0
			var cpu int64
			for b.Loop() {
				if phase == "early" && n%4 == 0 {
					b.StopTimer()
					r = mustNew(b, cfg)
					b.StartTimer()
				}
				c0 := processCPUNanos()
				route()
				cpu += processCPUNanos() - c0
				n++
			}
			if cpu >= 0 && n > 0 {
				b.ReportMetric(float64(cpu)/float64(n), "cpu-ns/op")
			}
		})
	}
}

// BenchmarkIndexGrowth is index mode while the index grows: each operation
// is one decision of 256 fresh prompts over 16 ranks, on a router replaced
// by a new one every 64 decisions, past the index's last doubling (at about
// 80 MB; -benchtime 64x times one router). It reports the slowest decision (worst-ms) beside the median
// (median-ms): a decision that doubles the index's arrays first touches
// their new memory, which a lock-step engine waits for on every rank.
func BenchmarkIndexGrowth(b *testing.B) {
	const nreq, size, cycle = 256, 16, 64
	cfg := sourceCfg(size, SourceIndex)
	w := newSteadyWorkload(nreq, size)
	var r *Router
	var res Result
	var took []time.Duration
	n := 0
	for b.Loop() {
		if n%cycle == 0 {
			b.StopTimer()
			r = mustNew(b, cfg)
			b.StartTimer()
		}
		w.next()
		t0 := time.Now()
		if err := r.RouteInto(&res, w.states, w.reqs, 1<<20, nil); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(t0))
		n++
	}
	reportSpread(b, took)
}

// reportSpread reports the median and the slowest of took, in ms.
func reportSpread(b *testing.B, took []time.Duration) {
	slices.Sort(took)
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	b.ReportMetric(ms(took[len(took)/2]), "median-ms")
	b.ReportMetric(ms(took[len(took)-1]), "worst-ms")
}
