package sim

import (
	"fmt"
	"slices"
	"strings"

	"github.com/adprouter/adprouter/router"
)

// Variant is a named router configuration the simulator can compare: a
// policy plus a mutation of its reference defaults. Adding an option to the
// comparison is one Register call (or one line in the builtin list), e.g.
//
//	sim.Register(sim.Variant{Name: "kv_cache_aware+beta0.5", Policy: router.PolicyKVCacheAware,
//		Doc: "KV-aware with load_balance_weight 0.5",
//		Apply: func(c *router.Config) { c.LoadBalanceWeight = 0.5 }})
type Variant struct {
	// Name identifies the variant on the command line and in reports.
	Name string
	// Policy is the router policy; the configuration starts from
	// router.DefaultConfig(Policy, dp_size) with the engine's block size.
	Policy router.Policy
	// Doc is a one-line description for -help and reports.
	Doc string
	// Apply, if not nil, changes the configuration (options beyond the
	// defaults).
	Apply func(c *router.Config)
	// NoProbe, when true, withholds the probed match lengths (matches = nil)
	// from a KV-aware router. Match lengths are probed for the KV-aware
	// policy only, and not when its PrefixSource is router.SourceIndex (the
	// router's own prefix index replaces the probe and its allgather).
	NoProbe bool
	// NoKVReport, when true, withholds each rank's KV pool
	// (RankState.KVCapacityTokens and FreeKVTokens are 0), as a host that
	// fills only TensorRT-LLM's fields does: the rules that read the pool
	// (capacity_aware, and the ttft score's room and memory-wait rules)
	// then have nothing to act on.
	NoKVReport bool
	// FullKVReport, when true, has each rank report, beside its pool, the
	// KV its requests not yet started will reserve
	// (RankState.PendingKVTokens: their prompt and output blocks, the
	// prefix they may reuse counted) and how much of its free KV is cached
	// blocks no request holds (EvictableKVTokens), and each request the
	// output it reserves for (Request.MaxNewTokens), as a host that fills
	// the Go API's fields does: the KV room then counts what the engine
	// will reserve and which cached prefixes need no room, instead of
	// estimating them. Ignored with NoKVReport.
	FullKVReport bool
	// PendingKVReport, when true, has each rank report its pending KV and
	// each request its output as FullKVReport does, but not the evictable
	// KV, as adprouter.trtllm does from TensorRT-LLM's objects (its KV
	// cache stats do not tell evictable blocks apart). Ignored with
	// NoKVReport.
	PendingKVReport bool
	// Gather, if not nil, is called for every rank after the simulator has
	// filled the reference fields of its RankState, so a variant can report
	// more (KV capacity, free blocks, ...) from info, as an executor would.
	Gather func(info RankInfo, st *router.RankState)
	// KnowsReuse, when true, tells the router the engine's reuse semantics
	// (router.Config.EngineReuse from EngineConfig.Reuse) and its
	// per-iteration token budget (router.Config.TTFTDrainTokens from
	// EngineConfig.MaxNumTokens), as an executor that knows its engine
	// would.
	KnowsReuse bool
}

// RankInfo is what a simulated rank knows about itself when it reports its
// state: everything a real executor could read locally.
type RankInfo struct {
	// Rank is the rank index.
	Rank int
	// TokensPerBlock is the KV block size in tokens.
	TokensPerBlock int
	// CapacityBlocks is the KV pool size; UsedBlocks the blocks in use
	// (cached or private); EvictableBlocks the unreferenced cached blocks,
	// which could be reclaimed. Free blocks are CapacityBlocks - UsedBlocks.
	CapacityBlocks  int
	UsedBlocks      int
	EvictableBlocks int
	// Waiting counts requests routed to the rank but not yet started;
	// Running, requests in prefill or decode.
	Waiting int
	Running int
}

// Config returns the router configuration of v over dpSize ranks with KV
// blocks of tokensPerBlock tokens.
func (v *Variant) Config(dpSize, tokensPerBlock int) router.Config {
	c := router.DefaultConfig(v.Policy, dpSize)
	c.TokensPerBlock = tokensPerBlock
	if v.Apply != nil {
		v.Apply(&c)
	}
	return c
}

// EngineConfig returns the router configuration of v on eng: Config, and
// with KnowsReuse the engine's reuse semantics and iteration budget.
func (v *Variant) EngineConfig(eng *EngineConfig) router.Config {
	c := v.Config(eng.DPSize, eng.TokensPerBlock)
	if v.KnowsReuse {
		c.EngineReuse = router.ReuseAfterIteration
		if eng.Reuse == ReuseOnSchedule {
			c.EngineReuse = router.ReuseOnSchedule
		}
		c.TTFTDrainTokens = eng.MaxNumTokens
	}
	return c
}

// probes reports whether the simulator passes match lengths to v's router.
func (v *Variant) probes(cfg *router.Config) bool {
	return cfg.Policy == router.PolicyKVCacheAware && !v.NoProbe && cfg.PrefixSource != router.SourceIndex
}

// reportsPendingKV reports whether v's ranks report their pending KV and
// its requests their output.
func (v *Variant) reportsPendingKV() bool {
	return (v.FullKVReport || v.PendingKVReport) && !v.NoKVReport
}

// Names of the builtin variants.
const (
	VariantDefault              = "default"
	VariantKVCacheAware         = "kv_cache_aware"
	VariantKVWarmup             = "kv_cache_aware+warmup"
	VariantConversation         = "conversation"
	VariantConversationLeast    = "conversation+least_queued"
	VariantKVCapacity           = "kv_cache_aware+capacity"
	VariantKVIndex              = "kv_cache_aware+index"
	VariantKVProbeIndex         = "kv_cache_aware+probe+index"
	VariantKVDemand             = "kv_cache_aware+demand"
	VariantKVProbeDemand        = "kv_cache_aware+probe+index+demand"
	VariantRecommended          = "recommended"
	VariantRecommendedNoKV      = "recommended+no_kv_report"
	VariantRecommendedFullKV    = "recommended+full_kv_report"
	VariantRecommendedPendingKV = "recommended+pending_kv_report"
)

// registry holds the variants in registration order.
var registry = []Variant{
	{Name: VariantDefault, Policy: router.PolicyDefault,
		Doc: "reference default policy: largest requests to the least-loaded rank"},
	{Name: VariantKVCacheAware, Policy: router.PolicyKVCacheAware,
		Doc: "reference KV-cache-aware policy (β 1, threshold 0.1, fair share ×2)"},
	{Name: VariantKVWarmup, Policy: router.PolicyKVCacheAware,
		Doc:   "kv_cache_aware with cold_start_warmup (first request to every rank once)",
		Apply: func(c *router.Config) { c.ColdStartWarmup = true }},
	{Name: VariantKVCapacity, Policy: router.PolicyKVCacheAware,
		Doc:   "kv_cache_aware with capacity_aware (skip ranks whose free KV cannot hold the uncached tokens)",
		Apply: func(c *router.Config) { c.CapacityAware = true }},
	{Name: VariantKVIndex, Policy: router.PolicyKVCacheAware,
		Doc:   "kv_cache_aware matching on the router's own prefix index instead of probes",
		Apply: func(c *router.Config) { c.PrefixSource = router.SourceIndex }},
	{Name: VariantKVProbeIndex, Policy: router.PolicyKVCacheAware,
		Doc:   "kv_cache_aware matching on the larger of probe and prefix index (same-batch siblings count)",
		Apply: func(c *router.Config) { c.PrefixSource = router.SourceProbeIndex }},
	{Name: VariantKVDemand, Policy: router.PolicyKVCacheAware,
		Doc:   "kv_cache_aware with demand-proportional warmup of hot prompt families",
		Apply: func(c *router.Config) { c.Warmup = router.WarmupDemand }},
	{Name: VariantKVProbeDemand, Policy: router.PolicyKVCacheAware,
		Doc: "kv_cache_aware with prefix_source probe+index and demand warmup",
		Apply: func(c *router.Config) {
			c.PrefixSource = router.SourceProbeIndex
			c.Warmup = router.WarmupDemand
		}},
	{Name: VariantRecommended, Policy: router.PolicyKVCacheAware, KnowsReuse: true,
		Doc:   `preset "recommended": predicted-TTFT score, in-flight-aware probe+index, quiet warmup (engine_reuse and ttft_drain_tokens from the engine)`,
		Apply: applyRecommended},
	{Name: VariantRecommendedNoKV, Policy: router.PolicyKVCacheAware, KnowsReuse: true, NoKVReport: true,
		Doc:   `recommended on ranks that report no KV pool (a host that fills only TensorRT-LLM's rank-state fields)`,
		Apply: applyRecommended},
	{Name: VariantRecommendedFullKV, Policy: router.PolicyKVCacheAware, KnowsReuse: true, FullKVReport: true,
		Doc:   `recommended on ranks that also report the KV their queued requests will reserve and their evictable KV, for requests that give their output (the Go API's fields)`,
		Apply: applyRecommended},
	{Name: VariantRecommendedPendingKV, Policy: router.PolicyKVCacheAware, KnowsReuse: true, PendingKVReport: true,
		Doc:   `recommended on ranks that also report the KV their queued requests will reserve, for requests that give their output, but not their evictable KV (what adprouter.trtllm fills)`,
		Apply: applyRecommended},
	{Name: VariantConversation, Policy: router.PolicyConversation,
		Doc: "reference conversation affinity, new conversations round robin"},
	{Name: VariantConversationLeast, Policy: router.PolicyConversation,
		Doc:   "conversation affinity, new conversations to the least queued rank",
		Apply: func(c *router.Config) { c.NewConvPlacement = router.PlacementLeastQueued }},
}

// applyRecommended applies the preset "recommended".
func applyRecommended(c *router.Config) {
	if err := router.ApplyPreset(c, router.PresetRecommended); err != nil {
		panic(err) // a builtin preset
	}
}

// DefaultVariants names the variants compared when none are given: the
// References.
var DefaultVariants = slices.Clone(References)

// Register adds v to the registry. It fails when the name is taken or empty,
// or when v's configuration is invalid. Call it from init functions or
// before running simulations: the registry is not safe for concurrent
// mutation.
func Register(v Variant) error {
	if v.Name == "" || strings.ContainsAny(v.Name, ", \t\n") {
		return fmt.Errorf("variant name %q: want a non-empty name without commas or spaces", v.Name)
	}
	if _, ok := LookupVariant(v.Name); ok {
		return fmt.Errorf("variant %q is already registered", v.Name)
	}
	cfg := v.Config(1, router.DefaultTokensPerBlock)
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("variant %q: %w", v.Name, err)
	}
	registry = append(registry, v)
	return nil
}

// Variants returns every registered variant, in registration order.
func Variants() []Variant { return slices.Clone(registry) }

// LookupVariant returns the registered variant called name.
func LookupVariant(name string) (Variant, bool) {
	for _, v := range registry {
		if v.Name == name {
			return v, true
		}
	}
	return Variant{}, false
}

// ParseVariants resolves a comma-separated list of variant names; "all"
// means every registered variant, "" the DefaultVariants.
func ParseVariants(list string) ([]Variant, error) {
	list = strings.TrimSpace(list)
	switch list {
	case "all":
		return Variants(), nil
	case "":
		list = strings.Join(DefaultVariants, ",")
	}
	var out []Variant
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		v, ok := LookupVariant(name)
		if !ok {
			names := make([]string, len(registry))
			for i, r := range registry {
				names[i] = r.Name
			}
			return nil, fmt.Errorf("unknown policy variant %q, want one of %s (or all)", name, strings.Join(names, ", "))
		}
		if slices.ContainsFunc(out, func(o Variant) bool { return o.Name == name }) {
			return nil, fmt.Errorf("policy variant %q listed twice", name)
		}
		out = append(out, v)
	}
	return out, nil
}
