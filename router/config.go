package router

import (
	"errors"
	"fmt"
	"math"
)

// Policy names, as TensorRT-LLM spells them.
const (
	// PolicyDefault balances by token load only (TensorRT-LLM's DefaultADPRouter).
	PolicyDefault = "default"
	// PolicyKVCacheAware scores ranks by cached prefix and load
	// (TensorRT-LLM's KVCacheAwareADPRouter).
	PolicyKVCacheAware = "kv_cache_aware"
	// PolicyConversation keeps every turn of a conversation on one rank.
	PolicyConversation = "conversation"
)

// New-conversation placements of the conversation policy.
const (
	PlacementRoundRobin  = "round_robin"
	PlacementLeastQueued = "least_queued"
)

// Defaults of the configuration options (the reference's values).
const (
	DefaultLoadBalanceWeight   = 1.0
	DefaultMatchRateThreshold  = 0.1
	DefaultFairShareMultiplier = 2.0
	DefaultMaxSessions         = 65536
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
	Policy string
	// DPSize is the number of attention-DP ranks (>= 1).
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
	// bindings are evicted first). >= 1.
	MaxSessions int
	// NewConvPlacement places new conversations: PlacementRoundRobin or
	// PlacementLeastQueued.
	NewConvPlacement string

	// CapacityAware makes every policy avoid, for each balanced request, a
	// rank whose remaining KV room (RankState.FreeKVTokens minus the uncached
	// tokens this batch already placed there) cannot hold the request's
	// uncached tokens, when some candidate rank can; when none can, the
	// request goes to the candidate with the most headroom. Explicit targets
	// and warmup placements are honoured regardless. Off by default, which
	// keeps decisions identical to the reference.
	CapacityAware bool
}

// DefaultConfig returns the reference defaults for policy over dpSize ranks.
func DefaultConfig(policy string, dpSize int) Config {
	return Config{
		Policy:              policy,
		DPSize:              dpSize,
		LoadBalanceWeight:   DefaultLoadBalanceWeight,
		MatchRateThreshold:  DefaultMatchRateThreshold,
		FairShareMultiplier: DefaultFairShareMultiplier,
		MaxSessions:         DefaultMaxSessions,
		NewConvPlacement:    PlacementRoundRobin,
	}
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
	if c.DPSize < 1 {
		return configError("dp_size", c.DPSize, ">= 1")
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
	case PlacementRoundRobin, PlacementLeastQueued:
	default:
		return configError("new_conv_placement", fmt.Sprintf("%q", c.NewConvPlacement),
			`"round_robin" or "least_queued"`)
	}
	return nil
}
