package main

import (
	"fmt"
	"strconv"

	"github.com/adprouter/adprouter/router"
)

// An option parses one key's text value into its router.Config field.
type option func(cfg *router.Config, value string) error

func textOpt(field func(*router.Config) *string) option {
	return func(cfg *router.Config, v string) error { *field(cfg) = v; return nil }
}

func intOpt(field func(*router.Config) *int) option {
	return func(cfg *router.Config, v string) error {
		if !isDecimal(v, false) {
			return fmt.Errorf("want a decimal integer (digits with an optional leading -)")
		}
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			return fmt.Errorf("want a decimal integer that fits in 32 bits")
		}
		*field(cfg) = int(n)
		return nil
	}
}

// int64Opt parses a decimal integer that fits in 64 bits (byte counts).
func int64Opt(field func(*router.Config) *int) option {
	return func(cfg *router.Config, v string) error {
		if !isDecimal(v, false) {
			return fmt.Errorf("want a decimal integer (digits with an optional leading -)")
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("want a decimal integer that fits in 64 bits")
		}
		*field(cfg) = int(n)
		return nil
	}
}

func floatOpt(field func(*router.Config) *float64) option {
	return func(cfg *router.Config, v string) error {
		if !isDecimal(v, true) {
			return fmt.Errorf("want a finite decimal number such as 0.5 or 1e-05")
		}
		f, err := strconv.ParseFloat(v, 64) // correctly rounded: repr() round-trips
		if err != nil {
			return fmt.Errorf("want a decimal number within float64 range")
		}
		*field(cfg) = f
		return nil
	}
}

// isDecimal reports whether v is plain decimal text: an optional "-", digits,
// and for a float an optional fraction and exponent ("-12", "0.5", "1e-05",
// "2.", ".5"). It rejects what strconv would also take but a C or Python
// user would not mean: "+4", "0x1p1", "1_0", "inf", "nan", spaces.
func isDecimal(v string, float bool) bool {
	i := 0
	if i < len(v) && v[i] == '-' {
		i++
	}
	digits := func() int {
		j := i
		for i < len(v) && v[i] >= '0' && v[i] <= '9' {
			i++
		}
		return i - j
	}
	n := digits()
	if float && i < len(v) && v[i] == '.' {
		i++
		n += digits()
	}
	if n == 0 {
		return false
	}
	if float && i < len(v) && (v[i] == 'e' || v[i] == 'E') {
		i++
		if i < len(v) && (v[i] == '-' || v[i] == '+') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(v)
}

func boolOpt(field func(*router.Config) *bool) option {
	return func(cfg *router.Config, v string) error {
		switch v {
		case "true", "True", "1":
			*field(cfg) = true
		case "false", "False", "0":
			*field(cfg) = false
		default:
			return fmt.Errorf(`want "true" or "false"`)
		}
		return nil
	}
}

// options are the configuration keys of include/adprouter.h, by name.
var options = map[string]option{
	"policy":                textOpt(func(c *router.Config) *string { return &c.Policy }),
	"dp_size":               intOpt(func(c *router.Config) *int { return &c.DPSize }),
	"load_balance_weight":   floatOpt(func(c *router.Config) *float64 { return &c.LoadBalanceWeight }),
	"match_rate_threshold":  floatOpt(func(c *router.Config) *float64 { return &c.MatchRateThreshold }),
	"fair_share_multiplier": floatOpt(func(c *router.Config) *float64 { return &c.FairShareMultiplier }),
	"cold_start_warmup":     boolOpt(func(c *router.Config) *bool { return &c.ColdStartWarmup }),
	"max_sessions":          intOpt(func(c *router.Config) *int { return &c.MaxSessions }),
	"new_conv_placement":    textOpt(func(c *router.Config) *string { return &c.NewConvPlacement }),
	"capacity_aware":        boolOpt(func(c *router.Config) *bool { return &c.CapacityAware }),
	"tokens_per_block":      intOpt(func(c *router.Config) *int { return &c.TokensPerBlock }),
	"prefix_source":         textOpt(func(c *router.Config) *string { return &c.PrefixSource }),
	"index_capacity_blocks": intOpt(func(c *router.Config) *int { return &c.IndexCapacityBlocks }),
	"index_max_bytes":       int64Opt(func(c *router.Config) *int { return &c.IndexMaxBytes }),
	"warmup":                textOpt(func(c *router.Config) *string { return &c.Warmup }),
	"warmup_factor":         floatOpt(func(c *router.Config) *float64 { return &c.WarmupFactor }),
	"warmup_window":         intOpt(func(c *router.Config) *int { return &c.WarmupWindow }),
	"warmup_min_requests":   intOpt(func(c *router.Config) *int { return &c.WarmupMinRequests }),
}

// parseOptions builds a router.Config from key/value text pairs, starting
// from the reference defaults. Unknown and repeated keys are errors; so is a
// missing dp_size, and cold_start_warmup contradicting warmup.
func parseOptions(kv [][2]string) (router.Config, error) {
	cfg := router.DefaultConfig(router.PolicyKVCacheAware, 0)
	seen := make(map[string]bool, len(kv))
	for _, p := range kv {
		key, value := p[0], p[1]
		set, ok := options[key]
		switch {
		case !ok:
			return cfg, fmt.Errorf("%w: unknown option %q", router.ErrInvalidConfig, key)
		case seen[key]:
			return cfg, fmt.Errorf("%w: option %q given more than once", router.ErrInvalidConfig, key)
		}
		seen[key] = true
		if err := set(&cfg, value); err != nil {
			return cfg, fmt.Errorf("%w: option %s = %q, %v", router.ErrInvalidConfig, key, value, err)
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
