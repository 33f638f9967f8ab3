package router

import (
	"math/rand/v2"
	"testing"
)

// Randomized coverage of the TTFT score and the presets built on it. The
// generators here are separate from randConfig, which the differential test
// shares: adding options there would change that test's generated cases.

// randTTFTConfig returns a random valid KV-aware configuration with
// ScoreTTFT: sometimes the recommended preset as is, else random options
// around it.
func randTTFTConfig(rng *rand.Rand) Config {
	c := randConfig(rng)
	c.Policy = PolicyKVCacheAware
	if c.FairShareMultiplier < 1 {
		c.FairShareMultiplier = 2
	}
	c.ColdStartWarmup = false
	c.PrefixSource = pick(rng, SourceIndex, SourceProbeIndex)
	c.Score = ScoreTTFT
	c.EngineReuse = pick(rng, "", ReuseAfterIteration, ReuseOnSchedule)
	c.Warmup = pick(rng, "", WarmupOff, WarmupOnce, WarmupQuiet, WarmupDemand)
	c.WarmupMinRequests = 1 + rng.IntN(3)
	c.WarmupWindow = pick(rng, 1, 4, 64, DefaultWarmupWindow)
	c.TTFTDrainTokens = pick(rng, 0, 1, 64, DefaultTTFTDrainTokens)
	if rng.IntN(4) == 0 {
		c = DefaultConfig(PolicyKVCacheAware, c.DPSize)
		if err := ApplyPreset(&c, PresetRecommended); err != nil {
			panic(err)
		}
	}
	return c
}

// TestRandomBatchesTTFT is TestRandomBatches for the TTFT score: on random
// call sequences three routers built from the same random TTFT config (two
// with Route, one with RouteInto on a reused Result) must agree call for
// call and keep identical states (digests included); every request is placed
// once or returned unassigned, no rank goes past the hard cap, explicit
// targets are honoured unless full, and conversations bind only where one of
// their requests went.
func TestRandomBatchesTTFT(t *testing.T) {
	iterations := 2000
	if testing.Short() {
		iterations = 200
	}
	rng := rand.New(rand.NewPCG(15, 0x77f7))
	for it := range iterations {
		cfg := randTTFTConfig(rng)
		if err := cfg.Validate(); err != nil {
			t.Fatalf("iteration %d: generated an invalid config: %v", it, err)
		}
		if err := runSequence(rng, cfg); err != nil {
			t.Fatalf("iteration %d, config %+v: %v", it, cfg, err)
		}
	}
}
