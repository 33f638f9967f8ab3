package sim

import (
	"math"
	"slices"

	"github.com/adprouter/adprouter/router"
)

// sample is one request's first token.
type sample struct {
	arrival  int64
	ttft     int64
	inWindow bool
}

// collector accumulates one run's metrics.
type collector struct {
	arrived, completed, rejected int
	promptTokens, cachedTokens   int64
	winPrompt, winCached         int64
	samples                      []sample
	spreadMax, spreadTotal       float64
	prefillMax, prefillSum       int64 // per iteration: the busiest rank's prefill tokens, all ranks'
	// The same over the window's iterations (see WindowResult), and the
	// requests that arrived in the window and have no first token yet.
	winPrefillMax, winPrefillSum int64
	winWaiting                   int
	unplaced                     int64
	routeCalls, routed           int64
	routeNs                      []int64
}

func (c *collector) started(q *request) {
	c.promptTokens += int64(len(q.prompt))
	c.cachedTokens += int64(q.cached)
	if q.inWindow {
		c.winPrompt += int64(len(q.prompt))
		c.winCached += int64(q.cached)
	}
}

func (c *collector) firstToken(q *request, now int64) {
	if q.inWindow {
		c.winWaiting--
	}
	c.samples = append(c.samples, sample{arrival: q.arrival, ttft: now - q.arrival, inWindow: q.inWindow})
}

// Result holds one variant's metrics on one workload. Every field but Timing
// is a deterministic function of the configuration and the seed.
type Result struct {
	// Policy is the variant name; Router its full router configuration.
	Policy string        `json:"policy"`
	Router router.Config `json:"router"`
	// Requests arrived; Completed finished; Rejected were larger than the
	// KV pool of the rank they were routed to and never ran. Requests =
	// Completed + Rejected: none is lost.
	Requests  int `json:"requests"`
	Completed int `json:"completed"`
	Rejected  int `json:"rejected"`
	// Iterations of the engine; RouteCalls the routing decisions made (one
	// per iteration, those with no request included);
	// Routed the requests handed to them (a request returned unassigned is
	// handed again later); Unplaced the unassigned returns.
	Iterations int64 `json:"iterations"`
	RouteCalls int64 `json:"route_calls"`
	Routed     int64 `json:"routed"`
	Unplaced   int64 `json:"unplaced"`
	// PromptTokens of the started requests, of which PrefillTokens were
	// computed and the rest found cached; CacheHit = cached / prompt.
	PromptTokens  int64   `json:"prompt_tokens"`
	PrefillTokens int64   `json:"prefill_tokens"`
	CacheHit      float64 `json:"cache_hit"`
	// TTFT is the time from arrival to first token, in simulated ms.
	TTFT Latency `json:"ttft_ms"`
	// LoadSpread is the busiest rank's active tokens over the mean, averaged
	// over iterations weighted by each iteration's total load (1 = perfectly
	// even, DPSize = everything on one rank): sum(max) * dp / sum(total).
	// Weighting keeps near-idle iterations, where one request alone makes
	// max/mean = dp, from dominating.
	LoadSpread float64 `json:"load_spread"`
	// PrefillSpread is the busiest rank's prefill over the mean in the
	// iterations that compute some, weighted by their prefill:
	// sum(max) * dp / sum(total), 1 when every rank computes as much as the
	// busiest, DPSize when one rank computes alone. In lock step an
	// iteration lasts as long as its busiest rank's, so a router that
	// computes fewer tokens but unevenly can still take longer: the
	// engine's prefill time follows sum(max), PrefillTokens * PrefillSpread
	// / DPSize tokens.
	PrefillSpread float64 `json:"prefill_spread"`
	// Evictions counts KV blocks evicted over all ranks; DuplicateBlocks
	// the blocks computed while already cached on their rank (the same
	// prompt prefilled twice at once).
	Evictions       int64 `json:"evictions"`
	DuplicateBlocks int64 `json:"duplicate_blocks"`
	// Warmups counts the router's warmup placements (cold-start and demand
	// warmup); PredictedHitTokens sums the match lengths the router placed
	// requests on (what it expected cached, against CachedTokens found).
	Warmups            uint64 `json:"warmups"`
	PredictedHitTokens uint64 `json:"predicted_hit_tokens"`
	CachedTokens       int64  `json:"cached_tokens"`
	// MakespanS is the simulated time at which the last request finished.
	MakespanS float64 `json:"makespan_s"`
	// Window repeats the request metrics for the requests that arrived in
	// the workload's window (coldstart: the spike), if it has one.
	Window *WindowResult `json:"window,omitempty"`
	// Series is the TTFT over time: the requests binned by arrival time.
	Series []Point `json:"series"`
	// Timing is the measured wall time of the routing calls (only with
	// timing on; the one non-deterministic part).
	Timing *Timing `json:"timing,omitempty"`

	samples []sample
}

// Latency summarises a latency distribution, in ms (nearest-rank
// percentiles; all zero when there are no samples).
type Latency struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// WindowResult is the request metrics of a time window.
type WindowResult struct {
	StartS        float64 `json:"start_s"`
	EndS          float64 `json:"end_s"`
	Requests      int     `json:"requests"`
	PromptTokens  int64   `json:"prompt_tokens"`
	PrefillTokens int64   `json:"prefill_tokens"`
	CacheHit      float64 `json:"cache_hit"`
	TTFT          Latency `json:"ttft_ms"`
	// PrefillSpread is Result.PrefillSpread over the iterations that start
	// in the window or while a request that arrived in it waits for its
	// first token: the engine's pace while it serves the window, where the
	// run's figure also counts the quiet periods around it.
	PrefillSpread float64 `json:"prefill_spread"`
}

// Point is one bin of a TTFT time series.
type Point struct {
	// T is the start of the bin (arrival time, s); N the requests in it.
	T      float64 `json:"t_s"`
	N      int     `json:"n"`
	MeanMs float64 `json:"mean_ms"`
	P90Ms  float64 `json:"p90_ms"`
}

// Timing is measured, not simulated: the wall time of the router calls.
type Timing struct {
	// Calls is the number of routing decisions timed: those with at least
	// one request (an empty decision costs next to nothing).
	Calls int `json:"calls"`
	// MeanNs, P50Ns and P99Ns describe the time per decision;
	// NsPerRequest is the total time over the requests routed.
	MeanNs       float64 `json:"mean_ns"`
	P50Ns        float64 `json:"p50_ns"`
	P99Ns        float64 `json:"p99_ns"`
	NsPerRequest float64 `json:"ns_per_request"`
}

// round rounds x to digits decimals, so that reports stay short and stable.
func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return round(float64(a)/float64(b), 4)
}

// latency summarises ns durations in ms.
func latency(ns []int64) Latency {
	if len(ns) == 0 {
		return Latency{}
	}
	s := slices.Clone(ns)
	slices.Sort(s)
	var sum float64
	for _, v := range s {
		sum += float64(v)
	}
	ms := func(v float64) float64 { return round(v/1e6, 3) }
	return Latency{Mean: ms(sum / float64(len(s))), P50: ms(float64(quantile(s, 0.50))),
		P90: ms(float64(quantile(s, 0.90))), P99: ms(float64(quantile(s, 0.99))), Max: ms(float64(s[len(s)-1]))}
}

// quantile returns the nearest-rank q-quantile of sorted values.
func quantile(sorted []int64, q float64) int64 {
	k := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(k, 0), len(sorted)-1)]
}

// DefaultBins is the number of bins of Result.Series.
const DefaultBins = 100

// Result returns the metrics collected so far (complete after Run).
func (s *Simulator) Result() *Result {
	c := &s.m
	res := &Result{
		Policy: s.variant.Name, Router: s.cfg,
		Requests: c.arrived, Completed: c.completed, Rejected: c.rejected,
		Iterations: s.iterations, RouteCalls: c.routeCalls, Routed: c.routed, Unplaced: c.unplaced,
		PromptTokens: c.promptTokens, PrefillTokens: c.promptTokens - c.cachedTokens,
		CacheHit: ratio(c.cachedTokens, c.promptTokens), CachedTokens: c.cachedTokens,
		MakespanS: round(float64(s.now)/nsPerSecond, 6),
		samples:   c.samples,
	}
	all := make([]int64, 0, len(c.samples))
	var win []int64
	for _, x := range c.samples {
		all = append(all, x.ttft)
		if x.inWindow {
			win = append(win, x.ttft)
		}
	}
	res.TTFT = latency(all)
	if c.spreadTotal > 0 {
		res.LoadSpread = round(c.spreadMax*float64(len(s.ranks))/c.spreadTotal, 4)
	}
	if c.prefillSum > 0 {
		res.PrefillSpread = round(float64(c.prefillMax)*float64(len(s.ranks))/float64(c.prefillSum), 4)
	}
	st := s.rt.Stats(0)
	res.Warmups = st.WarmupPlacements
	for _, r := range st.Ranks {
		res.PredictedHitTokens += r.PredictedHitTokens
	}
	for _, r := range s.ranks {
		res.Evictions += r.cache.Evictions()
		res.DuplicateBlocks += r.cache.Duplicates()
	}
	if w := s.wl.Window; w != nil {
		res.Window = &WindowResult{
			StartS: round(float64(w.Start)/nsPerSecond, 6), EndS: round(float64(w.End)/nsPerSecond, 6),
			Requests: len(win), PromptTokens: c.winPrompt, PrefillTokens: c.winPrompt - c.winCached,
			CacheHit: ratio(c.winCached, c.winPrompt), TTFT: latency(win),
		}
		if c.winPrefillSum > 0 {
			res.Window.PrefillSpread = round(float64(c.winPrefillMax)*float64(len(s.ranks))/float64(c.winPrefillSum), 4)
		}
	}
	res.Series = series(c.samples, 0, s.lastArrival(), DefaultBins)
	if s.timing && len(c.routeNs) > 0 {
		ns := slices.Clone(c.routeNs)
		slices.Sort(ns)
		var sum float64
		for _, v := range ns {
			sum += float64(v)
		}
		res.Timing = &Timing{Calls: len(ns), MeanNs: round(sum/float64(len(ns)), 1),
			P50Ns: float64(quantile(ns, 0.5)), P99Ns: float64(quantile(ns, 0.99)),
			NsPerRequest: round(sum/float64(max(c.routed, 1)), 1)}
	}
	return res
}

// lastArrival returns the latest arrival time sampled.
func (s *Simulator) lastArrival() int64 {
	var t int64
	for _, x := range s.m.samples {
		t = max(t, x.arrival)
	}
	return t
}

// series bins samples by arrival time over [from, to] into bins bins.
func series(samples []sample, from, to int64, bins int) []Point {
	if bins < 1 || len(samples) == 0 {
		return []Point{}
	}
	width := max((to-from)/int64(bins)+1, 1)
	groups := make([][]int64, bins)
	for _, x := range samples {
		if x.arrival < from || x.arrival > to {
			continue
		}
		b := min(int((x.arrival-from)/width), bins-1)
		groups[b] = append(groups[b], x.ttft)
	}
	pts := []Point{}
	for b, g := range groups {
		if len(g) == 0 {
			continue
		}
		l := latency(g)
		pts = append(pts, Point{T: round(float64(from+int64(b)*width)/nsPerSecond, 6), N: len(g), MeanMs: l.Mean, P90Ms: l.P90})
	}
	return pts
}
