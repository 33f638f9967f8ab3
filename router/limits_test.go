package router

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/adprouter/adprouter/router/internal/prefix"
)

// A conversation id of exactly MaxConversationIDBytes bytes is bound like
// any other.
func TestConversationIDAtLimit(t *testing.T) {
	r := mustNew(t, DefaultConfig(PolicyConversation, 2))
	id := strings.Repeat("c", MaxConversationIDBytes)
	res := mustRoute(t, r, idle(2), []Request{conv(1, id)}, 8, nil)
	if rank, ok := r.Conversation(id); !ok || rank != res.Ranks[0] {
		t.Errorf("id of %d bytes: bound = %v to %d, want bound to %d", len(id), ok, rank, res.Ranks[0])
	}
}

// Summary and RankStatsOf cost nothing per rank the caller does not ask for:
// no allocation at the largest dp_size, and the same figures as Stats.
func TestSummaryWithoutRanks(t *testing.T) {
	r := mustNew(t, sourceCfg(MaxDPSize, SourceIndex))
	mustRoute(t, r, busy(MaxDPSize, 100), []Request{family(1, 1, 300), family(2, 2, 300)}, 8, nil)
	if n := testing.AllocsPerRun(10, func() { r.Summary(0) }); n != 0 {
		t.Errorf("Summary(0) at dp_size %d: %v allocations, want 0", MaxDPSize, n)
	}
	full, sum := r.Stats(0), r.Summary(0)
	if sum.Ranks != nil || len(full.Ranks) != MaxDPSize {
		t.Fatalf("Summary has %d ranks, Stats %d; want 0 and %d", len(sum.Ranks), len(full.Ranks), MaxDPSize)
	}
	full.Ranks = nil
	if full.Decisions != sum.Decisions || full.IndexEntries != sum.IndexEntries || full.IndexBytes != sum.IndexBytes {
		t.Errorf("Summary = %+v, Stats = %+v", sum, full)
	}
	for k := range MaxDPSize {
		if got, want := r.RankStatsOf(k), r.Stats(0).Ranks[k]; got != want {
			t.Fatalf("RankStatsOf(%d) = %+v, Stats has %+v", k, got, want)
		}
		if k == 3 {
			break // Stats allocates per call: a few ranks suffice
		}
	}
}

// The prefix index's total bound holds across ranks: at dp_size 1024 with
// every rank free to hold 65536 blocks, the index stops at IndexMaxBytes.
func TestIndexTotalBoundAcrossRanks(t *testing.T) {
	const size, maxEntries = 1024, 3000
	cfg := sourceCfg(size, SourceIndex)
	cfg.IndexMaxBytes = maxEntries * prefix.EntryBytes
	r := mustNew(t, cfg)
	for call := range uint64(200) {
		mustRoute(t, r, busy(size, 100), []Request{family(call, call, 32*40+1)}, 8, nil)
	}
	s := r.Stats(0)
	if s.IndexEntries != maxEntries {
		t.Errorf("index holds %d entries after 8000 were placed, want the bound %d", s.IndexEntries, maxEntries)
	}
	if limit := cfg.IndexMaxBytes + size*64 + 1024; s.IndexBytes > limit {
		t.Errorf("IndexBytes = %d, want at most IndexMaxBytes (%d) + a few words per rank", s.IndexBytes, cfg.IndexMaxBytes)
	}
	var evicted uint64
	for _, rs := range s.Ranks {
		evicted += rs.IndexEvictedBlocks
	}
	if evicted != 200*40-maxEntries {
		t.Errorf("%d evictions counted, want %d", evicted, 200*40-maxEntries)
	}
}

// Stats.IndexBytes is the heap the index holds: a router filled with about
// a million entries grows the live heap by IndexBytes, within 15%.
func TestIndexBytesMatchesHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a large index")
	}
	w := newSteadyWorkload(256, 16)
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	r := mustNew(t, sourceCfg(16, SourceIndex))
	var res Result
	for r.Summary(0).IndexEntries < 900_000 {
		w.next()
		if err := r.RouteInto(&res, w.states, w.reqs, 1<<20, nil); err != nil {
			t.Fatal(err)
		}
	}
	grown := float64(heap() - before)
	s := r.Summary(0)
	if ratio := float64(s.IndexBytes) / grown; ratio < 0.85 || ratio > 1.15 {
		t.Errorf("IndexBytes = %d for %d entries, heap grew by %.0f bytes: ratio %.2f, want 0.85..1.15",
			s.IndexBytes, s.IndexEntries, grown, ratio)
	}
	t.Logf("IndexBytes = %d for %d entries, heap grew by %.0f bytes", s.IndexBytes, s.IndexEntries, grown)
	runtime.KeepAlive(r)
}

// The digest is chained over every change: twins agree, one more placement,
// another index bound or another binding order tells them apart, and calls
// that change nothing leave it alone.
func TestStateDigestIncremental(t *testing.T) {
	cfg := demandCfg(4)
	cfg.PrefixSource = SourceIndex
	a, b := mustNew(t, cfg), mustNew(t, cfg)
	call := func(r *Router, states []RankState, ids ...uint64) {
		var reqs []Request
		for _, id := range ids {
			reqs = append(reqs, family(id%3, id, 300))
		}
		mustRoute(t, r, states, reqs, 8, nil)
	}
	call(a, busy(4, 10), 1, 2, 3)
	call(b, busy(4, 10), 1, 2, 3)
	if a.StateDigest() != b.StateDigest() {
		t.Fatal("twins fed the same calls differ")
	}
	a.Stats(4)
	if _, err := a.Route(busy(3, 10), nil, 8, nil); err == nil || a.StateDigest() != b.StateDigest() {
		t.Fatal("a stats call or a rejected call changed the digest")
	}
	call(a, busy(4, 10), 4)
	if a.StateDigest() == b.StateDigest() {
		t.Error("one more placement kept the digest")
	}
	c, d := mustNew(t, cfg), mustNew(t, cfg)
	call(c, busy(4, 10), 1)
	call(d, withKV(busy(4, 10), [2]int64{1 << 20, 1 << 20}, [2]int64{1 << 20, 1 << 20}, [2]int64{1 << 20, 1 << 20}, [2]int64{1 << 20, 1 << 20}), 1)
	if c.StateDigest() == d.StateDigest() {
		t.Error("different index bounds share a digest")
	}
}

// The conversation map's documented cost (Config.MaxSessions): a binding
// costs at most its id + 160 bytes, for UUID-sized ids and for the longest.
func TestConversationMapBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("binds thousands of conversations")
	}
	for _, idLen := range []int{36, MaxConversationIDBytes} {
		t.Run(fmt.Sprint(idLen, "B"), func(t *testing.T) { convMapBytes(t, idLen) })
	}
}

func convMapBytes(t *testing.T, idLen int) {
	const sessions = 8192
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	reqs := make([]Request, 256)
	var ids []string
	for i := range sessions + 1000 { // past the bound: evictions too
		ids = append(ids, fmt.Sprintf("%0*d", idLen, i))
	}
	before := heap()
	cfg := DefaultConfig(PolicyConversation, 8)
	cfg.MaxSessions = sessions
	r := mustNew(t, cfg)
	var res Result
	for i := 0; i < len(ids); i += len(reqs) {
		reqs = reqs[:min(len(reqs), len(ids)-i)]
		for k := range reqs {
			reqs[k] = Request{ID: uint64(i + k), NumTokens: 10, TargetRank: NoTarget, ConversationID: ids[i+k]}
		}
		if err := r.RouteInto(&res, idle(8), reqs, 1<<20, nil); err != nil {
			t.Fatal(err)
		}
	}
	grown := heap() - before
	runtime.KeepAlive(ids) // the caller's ids are not the map's
	if r.NumConversations() != sessions {
		t.Fatalf("%d bindings, want the bound %d", r.NumConversations(), sessions)
	}
	perBinding := float64(grown) / sessions
	t.Logf("%d bindings of %d-byte ids: %d bytes, %.0f per binding", sessions, idLen, grown, perBinding)
	if perBinding > float64(idLen+160) {
		t.Errorf("%.0f bytes per binding, documented at most %d", perBinding, idLen+160)
	}
	runtime.KeepAlive(r)
}

// anyNegative finds a negative value at every position and length, and
// none where there is none, whatever the alignment of the words it reads.
func TestAnyNegative(t *testing.T) {
	for n := 0; n <= 19; n++ {
		for off := range 2 { // word-aligned, then not
			ms := make([]int32, n+1)[off : off+n]
			for k := range ms {
				ms[k] = int32(k * 1000)
			}
			if anyNegative(ms) {
				t.Fatalf("len %d: found a negative value in %v", n, ms)
			}
			for k := range ms {
				for _, v := range []int32{-1, math.MinInt32} {
					ms[k] = v
					if !anyNegative(ms) {
						t.Fatalf("len %d: missed %d at %d", n, v, k)
					}
					ms[k] = int32(k * 1000)
				}
			}
		}
	}
}
