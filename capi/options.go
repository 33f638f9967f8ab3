package main

import (
	"fmt"
	"strconv"

	"github.com/adprouter/adprouter/router"
)

// parseOptions builds a router.Config from key/value text pairs, starting
// from the reference defaults. Unknown and repeated keys are errors; so is a
// missing dp_size.
func parseOptions(kv [][2]string) (router.Config, error) {
	cfg := router.DefaultConfig(router.PolicyKVCacheAware, 0)
	seen := make(map[string]bool, len(kv))
	bad := func(key, value, want string) error {
		return fmt.Errorf("%w: option %s = %q, want %s", router.ErrInvalidConfig, key, value, want)
	}
	for _, p := range kv {
		key, value := p[0], p[1]
		if seen[key] {
			return cfg, fmt.Errorf("%w: option %q given more than once", router.ErrInvalidConfig, key)
		}
		seen[key] = true
		var err error
		switch key {
		case "policy":
			cfg.Policy = value
		case "new_conv_placement":
			cfg.NewConvPlacement = value
		case "prefix_source":
			cfg.PrefixSource = value
		case "warmup":
			cfg.Warmup = value
		case "tokens_per_block", "index_capacity_blocks", "warmup_window", "warmup_min_requests":
			n, err := parseInt(value)
			if err != nil {
				return cfg, bad(key, value, "an integer")
			}
			switch key {
			case "tokens_per_block":
				cfg.TokensPerBlock = n
			case "index_capacity_blocks":
				cfg.IndexCapacityBlocks = n
			case "warmup_window":
				cfg.WarmupWindow = n
			default:
				cfg.WarmupMinRequests = n
			}
		case "warmup_factor":
			f, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return cfg, bad(key, value, "a decimal number")
			}
			cfg.WarmupFactor = f
		case "dp_size":
			cfg.DPSize, err = parseInt(value)
			if err != nil {
				return cfg, bad(key, value, "an integer >= 1")
			}
		case "max_sessions":
			cfg.MaxSessions, err = parseInt(value)
			if err != nil {
				return cfg, bad(key, value, "an integer >= 1")
			}
		case "load_balance_weight", "match_rate_threshold", "fair_share_multiplier":
			f, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return cfg, bad(key, value, "a decimal number")
			}
			switch key {
			case "load_balance_weight":
				cfg.LoadBalanceWeight = f
			case "match_rate_threshold":
				cfg.MatchRateThreshold = f
			default:
				cfg.FairShareMultiplier = f
			}
		case "cold_start_warmup", "capacity_aware":
			var on bool
			switch value {
			case "true", "True", "1":
				on = true
			case "false", "False", "0":
				on = false
			default:
				return cfg, bad(key, value, `"true" or "false"`)
			}
			if key == "cold_start_warmup" {
				cfg.ColdStartWarmup = on
			} else {
				cfg.CapacityAware = on
			}
		default:
			return cfg, fmt.Errorf("%w: unknown option %q", router.ErrInvalidConfig, key)
		}
	}
	if seen["cold_start_warmup"] && seen["warmup"] {
		once := cfg.Warmup == router.WarmupOnce
		if cfg.ColdStartWarmup != once && !(cfg.ColdStartWarmup && cfg.Warmup == router.WarmupDemand) {
			return cfg, fmt.Errorf("%w: cold_start_warmup = %v contradicts warmup = %q (cold_start_warmup true is warmup \"once\")",
				router.ErrInvalidConfig, cfg.ColdStartWarmup, cfg.Warmup)
		}
	}
	if !seen["dp_size"] {
		return cfg, fmt.Errorf("%w: option dp_size is required", router.ErrInvalidConfig)
	}
	return cfg, cfg.Validate()
}

func parseInt(s string) (int, error) {
	n, err := strconv.ParseInt(s, 10, 32)
	return int(n), err
}
