package router

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
	"unsafe"
)

// Benchmarks of one routing decision on a realistic batch: prompt lengths
// spread ±10% around promptLen, 7 in 8 prompts starting with one of four
// shared 512-token system prompts (the eighth is unique from its first
// token), ranks carrying uneven load, and for the KV-aware policy a dense
// match table (every rank reports every request) as radix-tree probes would
// fill it: the system prompt cached on the ranks that served its family,
// short hits elsewhere. Equal prompt lengths used to hide the cost of
// grouping by prefix (every comparison of two prompts of one family ran
// through all 64 tokens and then found the lengths equal), so they survive
// only as one row of BenchmarkRouteShape.

const benchSystemPrompt = 512

type benchBatch struct {
	states  []RankState
	reqs    []Request
	matches []int32
	maxn    int
}

// benchOpts shapes a benchmark batch beyond its size.
type benchOpts struct {
	matches  bool // a dense match table
	equalLen bool // every prompt exactly promptLen tokens
}

func newBenchBatch(nreq, size, promptLen int, o benchOpts) benchBatch {
	rng := rand.New(rand.NewPCG(uint64(nreq), uint64(size)))
	b := benchBatch{maxn: 4 * (nreq/size + 8)}
	for k := range size {
		active := rng.IntN(b.maxn / 4)
		b.states = append(b.states, RankState{
			Rank:              k,
			NumActiveRequests: active,
			NumActiveTokens:   int64(active * (500 + rng.IntN(1500))),
		})
	}
	family := make([]int, nreq) // 0..3: a shared system prompt; -1: none
	for i := range nreq {
		family[i] = -1
		if rng.IntN(8) != 0 {
			family[i] = rng.IntN(4)
		}
		n := promptLen
		if !o.equalLen {
			n += rng.IntN(promptLen/5+1) - promptLen/10
		}
		tokens := make([]int32, n)
		for t := range tokens {
			if t < benchSystemPrompt && family[i] >= 0 {
				tokens[t] = int32(1000*family[i] + t)
			} else {
				tokens[t] = rng.Int32N(32000)
			}
		}
		b.reqs = append(b.reqs, Request{
			ID:             rng.Uint64(),
			Tokens:         tokens,
			TargetRank:     NoTarget,
			ConversationID: fmt.Sprintf("conv-%d", rng.IntN(nreq/2+1)),
		})
	}
	if o.matches {
		b.matches = make([]int32, nreq*size)
		for i := range nreq {
			for k := range size {
				var m int32
				switch {
				case family[i] >= 0 && k%4 == family[i]:
					m = benchSystemPrompt // its family's system prompt is cached here
				case rng.IntN(16) == 0:
					m = int32(b.reqs[i].Len()-1) / 32 * 32 // an earlier turn, block-aligned
				default:
					m = []int32{0, 0, 32, 64}[rng.IntN(4)]
				}
				b.matches[i*size+k] = m
			}
		}
	}
	return b
}

// benchPolicy is a policy as the benchmarks name it, and whether its
// batches carry a match table.
type benchPolicy struct {
	name    string
	policy  Policy
	matches bool
}

var (
	benchKVMatches    = benchPolicy{"kv_cache_aware/matches", PolicyKVCacheAware, true}
	benchKVNoMatches  = benchPolicy{"kv_cache_aware/no_matches", PolicyKVCacheAware, false}
	benchDefault      = benchPolicy{"default", PolicyDefault, false}
	benchConversation = benchPolicy{"conversation", PolicyConversation, false}
)

// benchRoute times a router of cfg deciding the batches in turn, one per
// operation, after one untimed decision of each.
func benchRoute(b *testing.B, cfg Config, batches ...benchBatch) {
	r, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	res := new(Result)
	route := func(batch *benchBatch) {
		if err := r.RouteInto(res, batch.states, batch.reqs, batch.maxn, batch.matches); err != nil {
			b.Fatal(err)
		}
	}
	// One call first so that scratch space and the Result are sized.
	for i := range batches {
		route(&batches[i])
	}
	b.ReportAllocs()
	cpu0 := processCPUNanos()
	ops := 0
	for b.Loop() {
		route(&batches[ops%len(batches)])
		ops++
	}
	if cpu0 >= 0 && ops > 0 {
		b.ReportMetric(float64(processCPUNanos()-cpu0)/float64(ops), "cpu-ns/op")
	}
}

// BenchmarkRouteFresh is BenchmarkRoute's default and KV-aware decisions
// (with matches) on a different batch each call, 16 in turn, as an engine's
// decisions are: BenchmarkRoute repeats one batch, which the branch
// predictor learns (a comparison sort of its lengths then looks several
// times cheaper than it is on a new batch).
func BenchmarkRouteFresh(b *testing.B) {
	for _, pol := range []benchPolicy{benchKVMatches, benchDefault} {
		for _, c := range []struct{ nreq, size int }{{256, 16}, {1024, 64}} {
			batches := make([]benchBatch, 16)
			for i := range batches {
				batches[i] = newBenchBatch(c.nreq+i, c.size, 2048, benchOpts{matches: pol.matches})
			}
			b.Run(fmt.Sprintf("%s/%dreq_x_%dranks", pol.name, c.nreq, c.size), func(b *testing.B) {
				benchRoute(b, DefaultConfig(pol.policy, c.size), batches...)
			})
		}
	}
}

// BenchmarkRoute: one decision, 2k-token prompts, 64, 256 and 1024 requests
// over 8, 16 and 64 ranks, for every policy (KV-aware with and without
// matches).
func BenchmarkRoute(b *testing.B) {
	for _, pol := range []benchPolicy{benchKVMatches, benchKVNoMatches, benchDefault, benchConversation} {
		for _, nreq := range []int{64, 256, 1024} {
			for _, size := range []int{8, 16, 64} {
				batch := newBenchBatch(nreq, size, 2048, benchOpts{matches: pol.matches})
				b.Run(fmt.Sprintf("%s/%dreq_x_%dranks", pol.name, nreq, size), func(b *testing.B) {
					benchRoute(b, DefaultConfig(pol.policy, size), batch)
				})
			}
		}
	}
}

// BenchmarkRouteScaling: the KV-aware decision with matches, growing
// requests at 16 ranks and growing ranks at 256 requests. ns/req must stay
// flat along requests (no super-linear term such as pairwise prefix
// comparisons) and grow at most linearly along ranks.
func BenchmarkRouteScaling(b *testing.B) {
	run := func(nreq, size int) {
		batch := newBenchBatch(nreq, size, 2048, benchOpts{matches: true})
		b.Run(fmt.Sprintf("%dreq_x_%dranks", nreq, size), func(b *testing.B) {
			benchRoute(b, DefaultConfig(PolicyKVCacheAware, size), batch)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(nreq), "ns/req")
		})
	}
	for _, nreq := range []int{64, 256, 1024, 4096} {
		run(nreq, 16)
	}
	for _, size := range []int{8, 32, 64, 256} {
		run(256, size)
	}
}

// BenchmarkRouteShape: the KV-aware 256x16 decision with matches on batches
// shaped to stress one part of it: equal prompt lengths (the old benchmark
// shape), no shared prefixes, one shared prefix for all.
func BenchmarkRouteShape(b *testing.B) {
	equal := newBenchBatch(256, 16, 2048, benchOpts{matches: true, equalLen: true})
	distinct := newBenchBatch(256, 16, 2048, benchOpts{matches: true})
	for i := range distinct.reqs {
		distinct.reqs[i].Tokens[0] = int32(100_000 + i)
	}
	shared := newBenchBatch(256, 16, 2048, benchOpts{matches: true})
	for i := range shared.reqs {
		copy(shared.reqs[i].Tokens[:PrefixTokens], shared.reqs[0].Tokens)
	}
	for _, c := range []struct {
		name  string
		batch benchBatch
	}{{"equal_len", equal}, {"distinct_prefixes", distinct}, {"one_prefix", shared}} {
		b.Run(c.name+"/256req_x_16ranks", func(b *testing.B) {
			benchRoute(b, DefaultConfig(PolicyKVCacheAware, 16), c.batch)
		})
	}
}

// BenchmarkRouteTies is the KV-aware worst case for the tie-break: idle
// ranks and identical prompts, so most requests tie and need a seeded shuffle.
func BenchmarkRouteTies(b *testing.B) {
	for _, size := range []int{16, 64} {
		batch := newTiesBatch(256, size)
		b.Run(fmt.Sprintf("256req_x_%dranks", size), func(b *testing.B) {
			benchRoute(b, DefaultConfig(PolicyKVCacheAware, size), batch)
		})
	}
}

// newTiesBatch is the tie-break's worst case: idle ranks and identical
// prompts, so nearly every request ties on every eligible rank.
func newTiesBatch(nreq, size int) benchBatch {
	batch := newBenchBatch(nreq, size, 2048, benchOpts{})
	for k := range batch.states {
		batch.states[k] = RankState{Rank: k}
	}
	for i := range batch.reqs {
		batch.reqs[i].Tokens = batch.reqs[0].Tokens
	}
	return batch
}

// BenchmarkPromptLength: the same KV-aware decision with 2k- and 32k-token
// prompts; time and allocations must not grow with the prompt (only the first
// PrefixTokens tokens are read).
func BenchmarkPromptLength(b *testing.B) {
	for _, n := range []int{2048, 32768} {
		batch := newBenchBatch(256, 16, n, benchOpts{matches: true})
		b.Run(fmt.Sprintf("kv_cache_aware/256req_x_16ranks/%dtok", n), func(b *testing.B) {
			benchRoute(b, DefaultConfig(PolicyKVCacheAware, 16), batch)
		})
	}
}

// Allocations of a decision into a reused Result do not depend on prompt
// length, for any policy (the conversation map is warm: same ids each call).
func TestAllocsIndependentOfPromptLength(t *testing.T) {
	countsAllocations(t)
	if testing.Short() {
		t.Skip("allocation counting is slow under -short")
	}
	for _, policy := range []Policy{PolicyKVCacheAware, PolicyDefault, PolicyConversation} {
		allocs := map[int]float64{}
		for _, n := range []int{2048, 32768} {
			batch := newBenchBatch(256, 16, n, benchOpts{matches: policy == PolicyKVCacheAware})
			r := mustNew(t, DefaultConfig(policy, 16))
			res := new(Result)
			route := func() {
				if err := r.RouteInto(res, batch.states, batch.reqs, batch.maxn, batch.matches); err != nil {
					t.Fatal(err)
				}
			}
			route()
			allocs[n] = testing.AllocsPerRun(20, route)
		}
		if allocs[2048] != allocs[32768] {
			t.Errorf("%s: %v allocs per decision with 2k-token prompts, %v with 32k", policy, allocs[2048], allocs[32768])
		}
		t.Logf("%s: %v allocs per warm decision", policy, allocs[2048])
	}
}

// BenchmarkRouteCold: the KV-aware decision with matches, 256 x 16, with
// the caches evicted before every call (a 32 MiB walk, untimed: the last
// level cache of this project's machine), as an engine calls the router
// after running its own code. The decision then takes 1.6x its warm time
// (52-59 us against 33; 78-92 before the grouping pass prefetched the
// prompts' prefixes), as it does inside the Python binding's end-to-end
// figure (python/bench_route.py --phases). What a decision touches (its
// scratch, the seeders' states, the prompts) counts here.
func BenchmarkRouteCold(b *testing.B) {
	batch := newBenchBatch(256, 16, 2048, benchOpts{matches: true})
	r, err := New(DefaultConfig(PolicyKVCacheAware, 16))
	if err != nil {
		b.Fatal(err)
	}
	res := new(Result)
	if err := r.RouteInto(res, batch.states, batch.reqs, batch.maxn, batch.matches); err != nil {
		b.Fatal(err)
	}
	junk := make([]uint64, 32<<20/8)
	var sink uint64
	for b.Loop() {
		b.StopTimer()
		for k := range junk {
			junk[k] += uint64(k)
		}
		sink += junk[len(junk)-1]
		b.StartTimer()
		if err := r.RouteInto(res, batch.states, batch.reqs, batch.maxn, batch.matches); err != nil {
			b.Fatal(err)
		}
	}
	if sink == 1 {
		b.Log(sink)
	}
}

// convWorkload is the conversation policy's steady state as
// python/bench_trtllm.py's row 3 drives it: each decision's batch has half
// its requests return to a conversation started in the last 32 decisions,
// 40% start one and 10% carry none, with ids like "chat-<call>-<i>". Ids are
// written into per-request buffers (the router copies what it keeps), so
// making a batch allocates nothing.
type convWorkload struct {
	batch   benchBatch
	call    int
	rng     *rand.Rand
	bufs    [][]byte
	started [32][]int // per recent call (ring): request positions that started one
}

func newConvWorkload(nreq, size int) *convWorkload {
	w := &convWorkload{batch: newBenchBatch(nreq, size, 2048, benchOpts{}), rng: rand.New(rand.NewPCG(7, 9))}
	w.bufs = make([][]byte, nreq)
	for i := range w.bufs {
		w.bufs[i] = make([]byte, 0, 32)
	}
	return w
}

// next makes the next decision's batch.
func (w *convWorkload) next() {
	w.call++
	slot := w.call % len(w.started)
	w.started[slot] = w.started[slot][:0]
	for i := range w.batch.reqs {
		q := &w.batch.reqs[i]
		q.ID = uint64(w.call*len(w.batch.reqs) + i)
		u := w.rng.IntN(10)
		switch {
		case u < 5 && w.call > 1:
			back := 1 + w.rng.IntN(min(w.call-1, len(w.started)-1))
			prev := w.started[(w.call-back)%len(w.started)]
			if len(prev) == 0 {
				q.ConversationID = ""
				continue
			}
			j := prev[w.rng.IntN(len(prev))]
			q.ConversationID = convID(&w.bufs[i], w.call-back, j)
		case u < 9:
			q.ConversationID = convID(&w.bufs[i], w.call, i)
			w.started[slot] = append(w.started[slot], i)
		default:
			q.ConversationID = ""
		}
	}
}

// convID writes "chat-<call>-<i>" into *buf and returns it as a string
// aliasing the buffer (valid until the next write).
func convID(buf *[]byte, call, i int) string {
	b := append((*buf)[:0], "chat-"...)
	b = strconv.AppendInt(b, int64(call), 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, int64(i), 10)
	*buf = b
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// BenchmarkConversationSteady: the conversation policy with its map full
// (DefaultMaxSessions bindings, least recently used evicted), a new batch per
// decision: the steady state of an engine, where most lookups miss the
// caches, unlike BenchmarkRoute's conversation rows (the same ids every call).
func BenchmarkConversationSteady(b *testing.B) {
	for _, c := range []struct{ nreq, size int }{{256, 16}, {1024, 64}} {
		b.Run(fmt.Sprintf("%dreq_x_%dranks", c.nreq, c.size), func(b *testing.B) {
			w := newConvWorkload(c.nreq, c.size)
			r := mustNew(b, DefaultConfig(PolicyConversation, c.size))
			res := new(Result)
			route := func() {
				if err := r.RouteInto(res, w.batch.states, w.batch.reqs, 1<<20, nil); err != nil {
					b.Fatal(err)
				}
			}
			for n := 0; r.NumConversations() < DefaultMaxSessions || n < 64; n++ { // then 64 evicting
				w.next()
				route()
			}
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				w.next()
				b.StartTimer()
				route()
			}
		})
	}
}

// BenchmarkConversationGrowth is the conversation policy while its map
// grows: each operation is one decision of convWorkload's batches, on a
// router replaced by a new one once its map is full (DefaultMaxSessions
// bindings, after about 650 decisions: -benchtime 700x times one router).
// It reports the slowest decision (worst-ms) beside the median (median-ms):
// a decision that grows the map copies it into new memory.
func BenchmarkConversationGrowth(b *testing.B) {
	const nreq, size = 256, 16
	var w *convWorkload
	var r *Router
	res := new(Result)
	var took []time.Duration
	for b.Loop() {
		if r == nil || r.NumConversations() >= DefaultMaxSessions {
			b.StopTimer()
			w, r = newConvWorkload(nreq, size), mustNew(b, DefaultConfig(PolicyConversation, size))
			b.StartTimer()
		}
		w.next()
		t0 := time.Now()
		if err := r.RouteInto(res, w.batch.states, w.batch.reqs, 1<<20, nil); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(t0))
	}
	reportSpread(b, took)
}
