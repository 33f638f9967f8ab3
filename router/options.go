package router

import (
	"fmt"
	"slices"
	"strconv"
)

// Configuration as text: the C ABI (adpr_option key/value pairs) and the
// Python binding (keyword arguments, formatted by the binding) pass options
// as text, and this file is the one place that parses them, strictly and the
// same way for every front end.

// An option parses one key's text value into its Config field.
type option func(cfg *Config, value string) error

// textOpt stores the text as is (an enum: Validate checks its value).
func textOpt[T ~string](field func(*Config) *T) option {
	return func(cfg *Config, v string) error { *field(cfg) = T(v); return nil }
}

func intOpt(field func(*Config) *int) option {
	return func(cfg *Config, v string) error {
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
func int64Opt(field func(*Config) *int) option {
	return func(cfg *Config, v string) error {
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

func floatOpt(field func(*Config) *float64) option {
	return func(cfg *Config, v string) error {
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

func boolOpt(field func(*Config) *bool) option {
	return func(cfg *Config, v string) error {
		switch {
		case slices.Contains(BoolTrue, v):
			*field(cfg) = true
		case slices.Contains(BoolFalse, v):
			*field(cfg) = false
		default:
			return fmt.Errorf(`want "true" or "false" (or "True"/"False", "1"/"0")`)
		}
		return nil
	}
}

// ParseOptions builds a Config from key/value text pairs (the names of
// include/adprouter.h and the Python keyword arguments: "policy",
// "dp_size", "load_balance_weight", ...), starting from DefaultConfig and
// validating the result. Numbers are plain decimal text (no "+", "_", hex
// or "inf"); booleans "true"/"false"/"1"/"0". Unknown and repeated keys are
// errors, and so is a missing dp_size. Every error wraps ErrInvalidConfig
// and names the option.
//
// The key "preset" names a bundle of options (see PresetOptions): the
// preset's options for the policy given are applied first, then every
// explicit option, whatever the order of the pairs, so an explicit option
// always overrides the preset. "reference", the default, adds nothing.
func ParseOptions(kv [][2]string) (Config, error) {
	cfg := DefaultConfig(PolicyKVCacheAware, 0)
	seen := make(map[string]bool, len(kv))
	preset := PresetReference
	for _, p := range kv {
		key := p[0]
		_, ok := options[key]
		switch {
		case !ok && key != "preset":
			return cfg, fmt.Errorf("%w: unknown option %q", ErrInvalidConfig, key)
		case seen[key]:
			return cfg, fmt.Errorf("%w: option %q given more than once", ErrInvalidConfig, key)
		}
		seen[key] = true
		if key == "preset" {
			preset = p[1]
			continue
		}
		if err := options[key](&cfg, p[1]); err != nil {
			return cfg, fmt.Errorf("%w: option %s = %q, %v", ErrInvalidConfig, key, p[1], err)
		}
	}
	// The preset fills in what the caller did not set (its keys never
	// overlap the explicit ones, so the order of the two is free).
	if err := applyPreset(&cfg, preset, seen); err != nil {
		return cfg, err
	}
	if !seen["dp_size"] {
		return cfg, fmt.Errorf("%w: option dp_size is required", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		if preset != PresetReference {
			return cfg, fmt.Errorf("%w (options of preset %q included)", err, preset)
		}
		return cfg, err
	}
	return cfg, nil
}
