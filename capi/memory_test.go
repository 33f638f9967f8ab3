package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/adprouter/adprouter/router"
)

// Requests made while a release runs cost one more release, not one each,
// and a release that panics ends quietly.
func TestReleaserCoalesces(t *testing.T) {
	block, started := make(chan struct{}), make(chan struct{}, 16)
	r := newReleaser(func() {
		started <- struct{}{}
		<-block
	})
	r.request()
	<-started // the first release runs
	for range 5 {
		r.request()
	}
	close(block)
	r.wait()
	require.Equal(t, 2, r.runs, "five requests during a release: one more release")
	r.request()
	r.wait()
	require.Equal(t, 3, r.runs)

	p := newReleaser(func() { panic("in the release") })
	p.request()
	p.wait()
	require.Equal(t, 1, p.runs)
}

// residentBytes is this process's resident set size, from /proc/self/statm.
func residentBytes(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skipf("no /proc/self/statm (%v): resident memory is measured on Linux", err)
	}
	f := strings.Fields(string(b))
	require.GreaterOrEqual(t, len(f), 2, "/proc/self/statm: %q", b)
	pages, err := strconv.Atoi(f[1])
	require.NoError(t, err)
	return pages * os.Getpagesize()
}

// A router filling its prefix index grows the process by what index_bytes
// reports, within 10%, once the releases it asked for are done (without
// them, Go keeps the arrays that growth copied from: 1.7 times as much), and
// destroying it gives the memory back.
func TestIndexGrowthReturnedToOS(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a 60 MB index: skipped with -short")
	}
	const nreq, ranks, promptLen, system = 256, 16, 2048, 512
	reqs := make([]router.Request, nreq)
	for i := range reqs {
		toks := make([]int32, promptLen-200+(i*7919)%400)
		for k := range toks {
			toks[k] = int32((i*131 + k*31) % 32000)
			if k < system && i%8 != 7 {
				toks[k] = int32(100_000*(i%4+1) + k) // one of four system prompts
			}
		}
		reqs[i] = router.Request{Tokens: toks, TargetRank: router.NoTarget}
	}
	states := make([]router.RankState, ranks)
	for k := range states {
		states[k] = router.RankState{Rank: k, NumActiveRequests: 8, NumActiveTokens: 50_000}
	}
	cfg := router.DefaultConfig(router.PolicyKVCacheAware, ranks)
	cfg.PrefixSource = router.SourceIndex
	r, err := router.New(cfg)
	require.NoError(t, err)

	runtime.GC()
	debug.FreeOSMemory()
	base := residentBytes(t)
	h := handles.add(r)
	evicting := false
	for call := 1; !evicting || call%16 != 0; call++ {
		for i := range reqs { // fresh prompts: every block after the system prompt is new
			reqs[i].ID = uint64(call*nreq + i)
			reqs[i].Tokens[system] = int32(1_000_000 + call)
		}
		require.NoError(t, withRouter("test", h, func(e *entry) error {
			evicting = e.r.Stats(0).Ranks[0].IndexEvictedBlocks > 0
			return e.r.RouteInto(&e.res, states, reqs, 1<<20, nil)
		}))
		require.Less(t, call, 1000, "the index never filled")
	}
	release.wait()
	held := r.Stats(0).IndexBytes
	grown := residentBytes(t) - base
	t.Logf("index_bytes %.1f MB, resident growth %.1f MB (%.2fx)", float64(held)/1e6, float64(grown)/1e6,
		float64(grown)/float64(held))
	require.Greater(t, held, 8*releaseMinBytes, "the index is too small for this test to mean anything")
	require.InEpsilon(t, grown, held, 0.10, "resident growth against index_bytes")

	require.NoError(t, handles.remove(h))
	release.wait()
	left := residentBytes(t) - base
	require.Less(t, left, held/10, "resident growth after destroying the router: %d bytes of %d", left, held)
	runtime.KeepAlive(reqs)
}
