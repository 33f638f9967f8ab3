package sim

import (
	"fmt"
	"slices"
	"strings"
)

// The shapes EvalRandom draws from: every case picks one value of each
// list (a workload, ranks, a prompt family count and popularity, a system
// prompt, arrivals, a load per rank, spike timings, an engine change, user
// messages and think times), so that a rule fitted to EvalFull's table
// meets combinations that table never holds.
var (
	randomKinds = [][]string{
		{KindMultiTenant}, {KindTenantSpike}, {KindConversation}, {KindFollowUp},
		{KindShared}, {KindSiblings}, {KindColdStart},
		{KindMultiTenant, KindConversation}, {KindTenantSpike, KindConversation},
		{KindFollowUp, KindMultiTenant},
	}
	randomDPs          = []int{4, 6, 8, 12, 16, 32}
	randomGroups       = []int{2, 4, 6, 8, 16, 32, 64}
	randomZipf         = []float64{0.6, 0.8, 1.0, 1.1, 1.2, 1.4}
	randomSystem       = []int{512, 1024, 2048, 3000, 4096, 6144}
	randomBursts       = []float64{4, 8, 16}
	randomRates        = []float64{0.5, 1, 2, 3, 4}   // requests per second per rank
	randomConvRates    = []float64{0.1, 0.25, 0.5, 1} // new conversations per second per rank
	randomDurations    = []float64{30, 60}            // seconds of steady arrivals
	randomQuiet        = []float64{20, 60}            // seconds of a spike's quiet period
	randomQuietGaps    = []float64{0.5, 1.5, 3}       // seconds between its requests
	randomSpikes       = []float64{2, 5}              // seconds of the spike
	randomSpikeRates   = []float64{50, 100, 200}      // spike factor per 8 ranks
	randomBudgets      = []int{2048, 4096, 16384}     // max_num_tokens, when changed
	randomPools        = []int{1024, 2048}            // KV blocks per rank, when changed
	randomSuffixMax    = []int{1024, 4096}            // user message maximum, when changed
	randomThinks       = []float64{1, 3, 10}          // seconds, when changed
	randomChangeChance = 0.3                          // of each engine or message change
)

// evalRandomCases is how many cases EvalRandom draws.
const evalRandomCases = 150

// randomMinRequests is the fewest requests a case of EvalRandom has: its
// TTFT p99 is then at most its third slowest request. A draw with fewer
// (a low rate for a short time on few ranks) is drawn again.
const randomMinRequests = 200

// EvalRandomShapes seeds EvalRandom's draws of shapes (the workload seeds
// are the case numbers, which -eval-seed-offset shifts). RandomGrid draws
// the same kind of grid from any other seed.
const EvalRandomShapes = 1

// RandomGrid returns EvalRandom's kind of grid with its shapes drawn from
// the seed shapes: evalRandomCases cases, one family per workload kind (or
// mix), named case=1 onwards. EvalRandom is RandomGrid(EvalRandomShapes).
// The rules of the recommended preset have been traced on that grid's
// cells; a grid drawn from another seed holds combinations no rule was
// checked against, the held-out measure of the preset (docs/routing-quality.md,
// "Shapes drawn from other seeds"). Every value comes from one generator, each draw taking
// the same number of values whatever it uses, so a seed's grid is the same
// on every run and every Go release.
func RandomGrid(shapes uint64) ([]EvalCase, error) {
	r := newRNG(shapes, streamShapes)
	pickI := func(xs []int) int { return xs[r.intn(len(xs))] }
	pickF := func(xs []float64) float64 { return xs[r.intn(len(xs))] }
	chance := func() bool { return r.float64() < randomChangeChance }
	cases := make([]EvalCase, 0, evalRandomCases)
	for len(cases) < evalRandomCases {
		n := len(cases) + 1
		kinds := randomKinds[r.intn(len(randomKinds))]
		s := evalShape{dp: pickI(randomDPs), budget: shapeDefault.budget, blocks: shapeDefault.blocks}
		groups, zipf, sys := pickI(randomGroups), pickF(randomZipf), pickI(randomSystem)
		bursty, burst := r.float64() < 0.5, pickF(randomBursts)
		rate, convRate, dur := pickF(randomRates), pickF(randomConvRates), pickF(randomDurations)
		quiet, gap, spike, spikeRate := pickF(randomQuiet), pickF(randomQuietGaps), pickF(randomSpikes), pickF(randomSpikeRates)
		budget, pool, suffix, think := pickI(randomBudgets), pickI(randomPools), pickI(randomSuffixMax), pickF(randomThinks)
		changeBudget, changePool, changeSuffix, changeThink := chance(), chance(), chance(), chance()

		var desc []string
		if changeBudget {
			s.budget = budget
			desc = append(desc, fmt.Sprintf("budget=%d", budget))
		}
		if changePool {
			s.blocks = pool
			desc = append(desc, fmt.Sprintf("pool=%d", pool))
		}
		s.name = fmt.Sprintf("dp%d", s.dp)
		parts := make([]WorkloadConfig, len(kinds))
		for i, k := range kinds {
			w, err := DefaultWorkload(k)
			if err != nil {
				return nil, err
			}
			w.Groups, w.ZipfS, w.SystemTokens = groups, zipf, sys
			if bursty {
				w.Arrival, w.BurstSize = ArrivalBursty, burst
			}
			switch k {
			case KindConversation, KindFollowUp:
				w.Rate, w.DurationS = convRate*float64(s.dp), dur
			case KindTenantSpike, KindColdStart:
				w.QuietS, w.QuietIntervalS, w.SpikeS = quiet, gap, spike
				w.SpikeFactor = spikeRate * float64(s.dp) / float64(shapeDefault.dp)
			default:
				w.Rate, w.DurationS = rate*float64(s.dp), dur
			}
			if changeSuffix {
				w.SuffixMin, w.SuffixMax = 64, suffix
			}
			if changeThink {
				w.ThinkS = think
			}
			parts[i] = w
		}
		w := parts[0]
		if len(parts) > 1 {
			w = MixWorkload(parts...)
		}
		w.Seed = uint64(n)
		if err := w.Validate(); err != nil {
			return nil, fmt.Errorf("random case %d: %w", n, err)
		}
		if wl, err := Generate(w); err != nil {
			return nil, fmt.Errorf("random case %d: %w", n, err)
		} else if wl.NumRequests() < randomMinRequests {
			continue // too few for a p99: drawn again
		}
		// Only the multi-tenant kinds draw their system prompt from Groups
		// (tenants); the others share one, and their names say so.
		head := []string{fmt.Sprintf("case=%d", n)}
		if slices.ContainsFunc(kinds, func(k string) bool { return k == KindMultiTenant || k == KindTenantSpike }) {
			head = append(head, fmt.Sprintf("tenants=%d zipf=%g", groups, zipf))
		}
		head = append(head, fmt.Sprintf("sys=%d", sys))
		for _, k := range kinds {
			switch k {
			case KindConversation, KindFollowUp:
				head = append(head, fmt.Sprintf("conv=%g/s/rank for %gs", convRate, dur))
			case KindTenantSpike, KindColdStart:
				head = append(head, fmt.Sprintf("quiet=%gs every %gs spike=%gs at %.4g/s per 8 ranks", quiet, gap, spike, spikeRate/gap))
			default:
				head = append(head, fmt.Sprintf("rate=%g/s/rank for %gs", rate, dur))
			}
		}
		desc = append(head, desc...)
		if bursty {
			desc = append(desc, fmt.Sprintf("bursty(%g)", burst))
		}
		if changeSuffix {
			desc = append(desc, fmt.Sprintf("msg=64-%d", suffix))
		}
		if changeThink {
			desc = append(desc, fmt.Sprintf("think=%gs", think))
		}
		cases = append(cases, EvalCase{Family: "random-" + strings.Join(kinds, "+"),
			Name: strings.Join(desc, " ") + " " + s.name, Workload: w, Engine: s.engine()})
	}
	return cases, nil
}
