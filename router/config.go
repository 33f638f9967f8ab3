package router

import (
	"errors"
	"fmt"
	"math"

	"github.com/adprouter/adprouter/router/internal/prefix"
)

// A Policy names a routing policy, as TensorRT-LLM spells it. The zero
// Policy is not a policy: Validate rejects it.
type Policy string

// The policies.
const (
	// PolicyDefault balances by token load only (TensorRT-LLM's DefaultADPRouter).
	PolicyDefault Policy = "default"
	// PolicyKVCacheAware scores ranks by cached prefix and load
	// (TensorRT-LLM's KVCacheAwareADPRouter).
	PolicyKVCacheAware Policy = "kv_cache_aware"
	// PolicyConversation keeps every turn of a conversation on one rank.
	PolicyConversation Policy = "conversation"
)

// A Placement is how the conversation policy places a new conversation. The
// zero Placement means PlacementRoundRobin.
type Placement string

// The placements.
const (
	PlacementRoundRobin  Placement = "round_robin"
	PlacementLeastQueued Placement = "least_queued"
	// PlacementLeastTokens: the rank with the fewest prompt tokens (its
	// reported load plus this decision's placements), then the fewest
	// requests, then the first at or after the round-robin cursor, which it
	// moves past the chosen rank (TensorRT-LLM's "least_tokens").
	PlacementLeastTokens Placement = "least_tokens"
)

// A PrefixSource is where the KV-aware policy's match lengths come from. The
// zero PrefixSource means SourceProbe.
type PrefixSource string

// The prefix sources.
const (
	// SourceProbe uses only the match lengths the caller passes (each rank
	// probes its radix tree and the results are allgathered): the reference.
	SourceProbe PrefixSource = "probe"
	// SourceIndex uses only the router's own prefix index: no probing and no
	// second allgather.
	SourceIndex PrefixSource = "index"
	// SourceProbeIndex uses the larger of the two, so that requests placed
	// earlier in the same batch count.
	SourceProbeIndex PrefixSource = "probe+index"
)

// A Warmup is the KV-aware policy's warmup mode. The zero Warmup means
// WarmupOnce when Config.ColdStartWarmup is set and WarmupOff otherwise.
type Warmup string

// The warmup modes.
const (
	WarmupOff Warmup = "off"
	// WarmupOnce is the reference's cold-start warmup (ColdStartWarmup).
	WarmupOnce Warmup = "once"
	// WarmupDemand keeps each hot prompt family replicated on about
	// ceil(share of traffic × dp_size × WarmupFactor) ranks. Replicas are
	// made only while the engine is quiet (at most one active or new request
	// per rank): computing a long prefix stalls every rank of an ADP engine,
	// so replication belongs before a spike, not in it.
	WarmupDemand Warmup = "demand"
	// WarmupQuiet is WarmupOnce only in decisions where no rank reports an
	// active request: every rank gets a request once, so that the first spike
	// finds the shared prefix everywhere, but warming never costs a loaded
	// engine a cold prefill it did not need. On 8 ranks or more, before the
	// first load, a decision while a single request is active counts as idle,
	// but for a conversation's request. Once a decision has seen dp_size
	// active requests or more, or a request that arrived while a rank warmed
	// by the decision before computed its prompt, an idle decision warms only
	// with two requests or more: a lone one starts a burst whose rest would
	// wait for its whole prefill. With the prefix index, a burst whose prompt
	// families some rank holds all is left to the score too (but for a new
	// conversation's request), as the whole burst would wait for the pending
	// ranks' prefill; so it is before that once half the ranks are warmed,
	// when warming would at least double what the burst computes. Load that
	// starts on a cold engine is the exception, while fewer requests are
	// active than there are ranks. While at most one
	// rank is warmed, a decision that brings a request for every pending rank,
	// or (with the prefix index) two requests or more, one of a prompt family
	// no rank holds (a stall anyway), warms pending ranks with its requests at
	// once; with the prefix index a family takes at most ceil(dp_size /
	// families) of them while another family's request waits. And until four
	// ranks, and half of them, are warmed, any decision warms pending ranks
	// with its requests that are not of a conversation (a light start), so
	// that steady traffic does not stay on the first rank; past that, while at
	// most half the ranks are warmed, a decision that brings requests for
	// three quarters of the ranks, none of a prompt family no rank holds and
	// none longer than ttft_drain_tokens, still does (one stall warms several
	// ranks). Under ScoreTTFT, an idle decision's lone request of a prompt
	// family some rank holds warms only once the demand window holds four
	// requests and the family's share of them asks for another rank: its
	// holder has the prefix ready, and the pending rank is left to a family no
	// rank holds, which computes its prompt wherever it goes.
	WarmupQuiet Warmup = "quiet"
)

// A Score is how the KV-aware policy ranks the eligible ranks for a request.
// The zero Score means ScoreReference.
type Score string

// The scores.
const (
	// ScoreReference is TensorRT-LLM's: uncached tokens plus β times the
	// rank's relative token load, scaled by the request's length.
	ScoreReference Score = "reference"
	// ScoreTTFT predicts the request's time to first token on the rank, in
	// prefill tokens under the lock-step iteration model: the iterations
	// the uncached prefill queued there and its own uncached tokens take,
	// the last as long as the busiest rank's share, counting in-flight
	// prefixes as the engine's reuse semantics allow (EngineReuse); the
	// tokens it would compute beyond the least any candidate computes and
	// half of what it would lengthen the next iteration are added as a
	// cost, and the KV room ranks report is heeded. See policy_ttft.go.
	ScoreTTFT Score = "ttft"
)

// An EngineReuse is when the engine lets a request reuse prompt blocks that
// another request on the same rank is still computing. The zero EngineReuse
// means ReuseAfterIteration.
type EngineReuse string

// The reuse semantics.
const (
	// ReuseAfterIteration: a block is reusable once the iteration that
	// computed it has ended (TensorRT-LLM): requests that start their
	// prefill together compute a shared prefix once each.
	ReuseAfterIteration EngineReuse = "after_iteration"
	// ReuseOnSchedule: a block is reusable as soon as the chunk computing it
	// is scheduled (vLLM v1): a request queued behind it reuses it.
	ReuseOnSchedule EngineReuse = "on_schedule"
)

// Defaults of the configuration options (the reference's values, and ours
// for options the reference lacks).
const (
	DefaultLoadBalanceWeight   = 1.0
	DefaultMatchRateThreshold  = 0.1
	DefaultFairShareMultiplier = 2.0
	DefaultMaxSessions         = 65536
	DefaultTokensPerBlock      = 32
	DefaultWarmupFactor        = 1.0
	DefaultWarmupWindow        = 1024
	DefaultWarmupMinRequests   = 2
	// DefaultTTFTDrainTokens is TensorRT-LLM's default max_num_tokens: how
	// many queued prefill tokens a rank computes per iteration.
	DefaultTTFTDrainTokens = 8192
	// DefaultIndexMaxBytes bounds the prefix index to 320 MiB, 4,194,304
	// (block, rank) entries of prefix.EntryBytes: 64 ranks of the default
	// 65536 blocks each, so that the bound binds only above 64 ranks or
	// with ranks that report larger KV pools.
	DefaultIndexMaxBytes = 320 << 20
)

// Bounds of the configuration that keep a Router's memory proportional to
// what it is configured for, whatever a caller passes.
const (
	// MaxDPSize bounds DPSize. A Router keeps O(DPSize) state (per-rank
	// counters, warmup set, index lists) and a decision costs O(requests ×
	// DPSize) (every request scores every eligible rank; the caller passes
	// requests × DPSize match lengths), so an unbounded dp_size turns a typo
	// such as 2^31-1 into a fatal out-of-memory. Attention-DP runs one rank
	// per GPU and the largest deployments have tens to hundreds of them;
	// 4096 leaves an order of magnitude of headroom at ~1 ms per
	// 256-request decision.
	MaxDPSize = 4096
	// MaxIndexMaxBytes bounds IndexMaxBytes (128 GiB): the index numbers its
	// entries with int32, and 2^37 / prefix.EntryBytes is under 2^31.
	MaxIndexMaxBytes = 1 << 37
)

// ErrInvalidConfig is wrapped by every error about a Config.
var ErrInvalidConfig = errors.New("invalid router configuration")

// ErrInvalidInput is wrapped by every error about the arguments of a Route
// call (states, requests, matches, maxActive). A call that returns it has
// changed nothing.
var ErrInvalidInput = errors.New("invalid routing input")

// Config selects a policy and its options. The names map one to one onto
// TensorRT-LLM's AttentionDpConfig (kv_cache_routing_*) and onto the C and
// Python front ends. Use DefaultConfig to get the reference defaults: the zero
// value of the float options is a legal but different setting.
type Config struct {
	// Policy is PolicyDefault, PolicyKVCacheAware or PolicyConversation.
	Policy Policy
	// DPSize is the number of attention-DP ranks (1..MaxDPSize).
	DPSize int

	// LoadBalanceWeight is β of the KV-aware score: how many tokens of
	// prefill one token of relative load is worth. Finite, >= 0.
	LoadBalanceWeight float64
	// MatchRateThreshold turns cache affinity on for a request only when its
	// best match divided by its length is strictly greater. Finite, >= 0.
	MatchRateThreshold float64
	// FairShareMultiplier sets the soft per-rank cap to this multiple of the
	// fair share. KV-aware: finite, >= 1. Conversation: clamped to >= 1.
	// The default policy always uses 1.
	FairShareMultiplier float64
	// ColdStartWarmup makes the KV-aware policy send the first request
	// without a target to every rank once (smallest rank first), so that each
	// rank caches the shared prefix before traffic spikes.
	ColdStartWarmup bool

	// MaxSessions bounds the conversation -> rank map (least recently used
	// bindings are evicted first). >= 1. With conversation ids of at most
	// MaxConversationIDBytes bytes, the map holds at most about
	// MaxSessions × (MaxConversationIDBytes + 160) bytes: 74 MiB at the
	// default 65536 sessions (each binding costs its id in 64-byte chunks,
	// 4 bytes more per chunk past the first, and 40 to 56 bytes of entry,
	// recency links and hash table; ids of 36 bytes cost about 100, ids of
	// 1024 bytes about 1125). The map holds no pointers: however large, the
	// garbage collector does not scan it.
	MaxSessions int
	// NewConvPlacement places new conversations: PlacementRoundRobin,
	// PlacementLeastQueued or PlacementLeastTokens.
	NewConvPlacement Placement

	// CapacityAware makes every policy avoid, for each balanced request, a
	// rank whose remaining KV room (RankState.FreeKVTokens minus the uncached
	// tokens this batch already placed there) cannot hold the request's
	// uncached tokens, when some candidate rank can; when none can, the
	// request goes to the candidate with the most headroom. Explicit targets
	// and warmup placements are honoured regardless. Off by default, which
	// keeps decisions identical to the reference.
	CapacityAware bool

	// TokensPerBlock is the KV block size in tokens, used to hash prompts for
	// the prefix index and to turn KV capacity into index bounds. 1..65536.
	TokensPerBlock int
	// PrefixSource selects the KV-aware policy's match lengths: SourceProbe
	// (the default, the reference), SourceIndex or SourceProbeIndex. The
	// index sources need the full prompt tokens (minus nothing: the router
	// drops the last token itself) in Request.Tokens.
	PrefixSource PrefixSource
	// IndexCapacityBlocks bounds a rank's share of the prefix index when its
	// RankState reports no KV capacity; 0 means prefix.DefaultRankBlocks.
	// Ranks that report a capacity are bounded by it.
	IndexCapacityBlocks int
	// IndexMaxBytes bounds the memory of the prefix index, all ranks
	// together, in bytes: it holds at most IndexMaxBytes / prefix.EntryBytes
	// (block, rank) entries, and beyond that evicts the least recently used
	// entry of any rank. Unlike the per-rank bounds it does not grow with
	// DPSize. prefix.EntryBytes..MaxIndexMaxBytes; the default is
	// DefaultIndexMaxBytes.
	IndexMaxBytes int

	// Warmup is WarmupOff, WarmupOnce (same as ColdStartWarmup),
	// WarmupQuiet or WarmupDemand, all for the KV-aware policy; unset (""), it follows
	// ColdStartWarmup. ColdStartWarmup with WarmupOff, WarmupQuiet or
	// WarmupDemand is a
	// contradiction that Validate rejects.
	Warmup Warmup
	// WarmupFactor scales the replica target of demand warmup (> 0).
	WarmupFactor float64
	// WarmupWindow is how many recently routed requests demand warmup and
	// ScoreTTFT count prompt families over (1..1<<20). It counts requests,
	// not time, so that every rank agrees.
	WarmupWindow int
	// WarmupMinRequests is how many requests of a family the window must
	// hold before demand warmup replicates it or ScoreTTFT counts it as
	// demand: one-off prompts are never scattered. >= 1.
	WarmupMinRequests int

	// Score is ScoreReference (the default) or ScoreTTFT, for the KV-aware
	// policy. ScoreTTFT needs a prefix index (PrefixSource index or
	// probe+index) to know in-flight prefixes; with probe+index the probe
	// tells which of them are ready.
	Score Score
	// EngineReuse is the engine's reuse semantics, ReuseAfterIteration (the
	// default, TensorRT-LLM) or ReuseOnSchedule; read by ScoreTTFT only.
	EngineReuse EngineReuse
	// TTFTDrainTokens is how many queued prefill tokens ScoreTTFT assumes a
	// rank computes between two routing calls (the engine's per-iteration
	// token budget, max_num_tokens). 1..2^30; read by ScoreTTFT only.
	TTFTDrainTokens int
	// Explain makes the Router record a Receipt per request of every
	// decision (Router.Receipts): why it went where it did. Decisions are
	// identical with and without it, and it is not part of StateDigest:
	// ranks may differ in it and still agree. Off, it costs nothing; on, a
	// decision keeps O(requests × DPSize) receipt memory (one Candidate per
	// rank for each scored or least-loaded request), reused by the next.
	Explain bool
}

// DefaultConfig returns the reference defaults for policy over dpSize ranks.
func DefaultConfig(policy Policy, dpSize int) Config {
	return Config{
		Policy:              policy,
		DPSize:              dpSize,
		LoadBalanceWeight:   DefaultLoadBalanceWeight,
		MatchRateThreshold:  DefaultMatchRateThreshold,
		FairShareMultiplier: DefaultFairShareMultiplier,
		MaxSessions:         DefaultMaxSessions,
		NewConvPlacement:    PlacementRoundRobin,
		TokensPerBlock:      DefaultTokensPerBlock,
		PrefixSource:        SourceProbe,
		IndexMaxBytes:       DefaultIndexMaxBytes,
		WarmupFactor:        DefaultWarmupFactor,
		WarmupWindow:        DefaultWarmupWindow,
		WarmupMinRequests:   DefaultWarmupMinRequests,
		Score:               ScoreReference,
		EngineReuse:         ReuseAfterIteration,
		TTFTDrainTokens:     DefaultTTFTDrainTokens,
	}
}

// normalized returns c with every unset ("") enum replaced by what it
// means, so that a Router's Config, digest and behaviour do not depend on
// whether an option was left unset or given its default explicitly.
func (c Config) normalized() Config {
	if c.NewConvPlacement == "" {
		c.NewConvPlacement = PlacementRoundRobin
	}
	if c.PrefixSource == "" {
		c.PrefixSource = SourceProbe
	}
	if c.Warmup == "" {
		c.Warmup = WarmupOff
		if c.ColdStartWarmup {
			c.Warmup = WarmupOnce
		}
	}
	if c.Warmup == WarmupOnce {
		c.ColdStartWarmup = true
	}
	if c.Score == "" {
		c.Score = ScoreReference
	}
	if c.EngineReuse == "" {
		c.EngineReuse = ReuseAfterIteration
	}
	if c.TTFTDrainTokens == 0 {
		c.TTFTDrainTokens = DefaultTTFTDrainTokens
	}
	return c
}

// indexed reports whether the Router keeps a prefix index.
func (c *Config) indexed() bool {
	return c.PrefixSource == SourceIndex || c.PrefixSource == SourceProbeIndex || c.Warmup == WarmupDemand
}

func configError(field string, value any, want string) error {
	return fmt.Errorf("%w: %s = %v, want %s", ErrInvalidConfig, field, value, want)
}

// Validate reports the first option that is out of range, naming it, its
// value and what was expected.
func (c *Config) Validate() error {
	switch c.Policy {
	case PolicyDefault, PolicyKVCacheAware, PolicyConversation:
	default:
		return configError("policy", fmt.Sprintf("%q", c.Policy),
			`"default", "kv_cache_aware" or "conversation"`)
	}
	if c.DPSize < 1 || c.DPSize > MaxDPSize {
		return configError("dp_size", c.DPSize, fmt.Sprintf("1..%d ranks (router.MaxDPSize)", MaxDPSize))
	}
	finite := func(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
	if !finite(c.LoadBalanceWeight) || c.LoadBalanceWeight < 0 {
		return configError("load_balance_weight", c.LoadBalanceWeight, "a finite number >= 0")
	}
	if !finite(c.MatchRateThreshold) || c.MatchRateThreshold < 0 {
		return configError("match_rate_threshold", c.MatchRateThreshold, "a finite number >= 0")
	}
	if !finite(c.FairShareMultiplier) {
		return configError("fair_share_multiplier", c.FairShareMultiplier, "a finite number")
	}
	if c.Policy == PolicyKVCacheAware && c.FairShareMultiplier < 1 {
		return configError("fair_share_multiplier", c.FairShareMultiplier,
			">= 1 for the kv_cache_aware policy")
	}
	if c.MaxSessions < 1 {
		return configError("max_sessions", c.MaxSessions, ">= 1")
	}
	switch c.NewConvPlacement {
	case "", PlacementRoundRobin, PlacementLeastQueued, PlacementLeastTokens:
	default:
		return configError("new_conv_placement", fmt.Sprintf("%q", c.NewConvPlacement),
			`"round_robin", "least_queued" or "least_tokens"`)
	}
	if c.TokensPerBlock < 1 || c.TokensPerBlock > MaxTokensPerBlock {
		return configError("tokens_per_block", c.TokensPerBlock, fmt.Sprintf("1..%d", MaxTokensPerBlock))
	}
	switch c.PrefixSource {
	case "", SourceProbe:
	case SourceIndex, SourceProbeIndex:
		if c.Policy != PolicyKVCacheAware {
			return configError("prefix_source", fmt.Sprintf("%q", c.PrefixSource), `"probe" unless policy is "kv_cache_aware"`)
		}
	default:
		return configError("prefix_source", fmt.Sprintf("%q", c.PrefixSource), `"probe", "index" or "probe+index"`)
	}
	if c.IndexCapacityBlocks < 0 || c.IndexCapacityBlocks > MaxIndexCapacityBlocks {
		return configError("index_capacity_blocks", c.IndexCapacityBlocks, "0 (default)..2^30")
	}
	if c.IndexMaxBytes < prefix.EntryBytes || c.IndexMaxBytes > MaxIndexMaxBytes {
		return configError("index_max_bytes", c.IndexMaxBytes, fmt.Sprintf("%d..2^37 bytes", prefix.EntryBytes))
	}
	switch c.Warmup {
	case "", WarmupOnce:
	case WarmupOff:
		if c.ColdStartWarmup {
			return configError("warmup", `"off"`, `"once" or unset when cold_start_warmup is true (cold_start_warmup is warmup "once")`)
		}
	case WarmupDemand, WarmupQuiet:
		if c.Policy != PolicyKVCacheAware {
			return configError("warmup", fmt.Sprintf("%q", c.Warmup), `"off" or "once" unless policy is "kv_cache_aware"`)
		}
		if c.ColdStartWarmup {
			return configError("warmup", fmt.Sprintf("%q", c.Warmup), `"once" or "off" when cold_start_warmup is true (choose one warmup)`)
		}
	default:
		return configError("warmup", fmt.Sprintf("%q", c.Warmup), `"off", "once", "quiet" or "demand"`)
	}
	if !finite(c.WarmupFactor) || c.WarmupFactor <= 0 {
		return configError("warmup_factor", c.WarmupFactor, "a finite number > 0")
	}
	if c.WarmupWindow < 1 || c.WarmupWindow > MaxWarmupWindow {
		return configError("warmup_window", c.WarmupWindow, fmt.Sprintf("1..%d requests", MaxWarmupWindow))
	}
	if c.WarmupMinRequests < 1 {
		return configError("warmup_min_requests", c.WarmupMinRequests, ">= 1")
	}
	switch c.Score {
	case "", ScoreReference:
	case ScoreTTFT:
		if c.Policy != PolicyKVCacheAware {
			return configError("score", `"ttft"`, `"reference" unless policy is "kv_cache_aware"`)
		}
		if c.PrefixSource != SourceIndex && c.PrefixSource != SourceProbeIndex {
			return configError("score", `"ttft"`, `"reference" unless prefix_source is "index" or "probe+index" (the ttft score tracks in-flight prefixes in the index)`)
		}
	default:
		return configError("score", fmt.Sprintf("%q", c.Score), `"reference" or "ttft"`)
	}
	switch c.EngineReuse {
	case "", ReuseAfterIteration, ReuseOnSchedule:
	default:
		return configError("engine_reuse", fmt.Sprintf("%q", c.EngineReuse), `"after_iteration" or "on_schedule"`)
	}
	if c.TTFTDrainTokens < 0 || c.TTFTDrainTokens > MaxTTFTDrainTokens {
		return configError("ttft_drain_tokens", c.TTFTDrainTokens, "1..2^30 tokens (0: the default)")
	}
	return nil
}
