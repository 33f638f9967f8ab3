package router

import (
	"fmt"
	"slices"
	"strings"
)

// A preset is a named bundle of options, in the option text of ParseOptions,
// per policy: the options a policy does not read are left out, so that one
// preset name serves every policy. This table is the one home of the
// presets: ParseOptions, the C ABI (adpr_preset_options, option "preset"),
// the Python binding and the TensorRT-LLM drop-in all read it.
var presets = map[string]func(p Policy) [][2]string{
	// PresetReference is the reference: no option beyond TensorRT-LLM's.
	PresetReference: func(Policy) [][2]string { return nil },
	// PresetRecommended is the configuration we stand behind;
	// docs/routing-quality.md has the evaluation it is judged by. KV-aware
	// only.
	PresetRecommended: func(p Policy) [][2]string {
		if p != PolicyKVCacheAware {
			return nil
		}
		return [][2]string{
			{"prefix_source", string(SourceProbeIndex)},
			{"score", string(ScoreTTFT)},
			{"warmup", string(WarmupQuiet)},
		}
	},
	// PresetIndex matches on the router's own index: no probe, no second
	// allgather.
	PresetIndex: func(p Policy) [][2]string {
		if p != PolicyKVCacheAware {
			return nil
		}
		return [][2]string{{"prefix_source", string(SourceIndex)}}
	},
	// PresetFull is index with demand warmup and capacity awareness.
	PresetFull: func(p Policy) [][2]string {
		if p != PolicyKVCacheAware {
			return [][2]string{{"capacity_aware", "true"}}
		}
		return [][2]string{
			{"prefix_source", string(SourceIndex)},
			{"warmup", string(WarmupDemand)},
			{"capacity_aware", "true"},
		}
	},
}

// The preset names.
const (
	PresetReference   = "reference"
	PresetRecommended = "recommended"
	PresetIndex       = "index"
	PresetFull        = "full"
)

// Presets returns the preset names, sorted.
func Presets() []string {
	names := make([]string, 0, len(presets))
	for name := range presets {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// PresetOptions returns preset name's options for policy as key/value
// text pairs, in ParseOptions' terms. An unknown name or policy is an error
// wrapping ErrInvalidConfig that lists the known ones.
func PresetOptions(name string, policy Policy) ([][2]string, error) {
	switch policy {
	case PolicyDefault, PolicyKVCacheAware, PolicyConversation:
	default:
		return nil, configError("policy", fmt.Sprintf("%q", policy), `"default", "kv_cache_aware" or "conversation"`)
	}
	f, ok := presets[name]
	if !ok {
		return nil, configError("preset", fmt.Sprintf("%q", name), strings.Join(quoted(Presets()), ", "))
	}
	return f(policy), nil
}

// ApplyPreset sets on cfg the options of preset name for cfg.Policy (see
// PresetOptions); it does not validate the result.
func ApplyPreset(cfg *Config, name string) error {
	return applyPreset(cfg, name, nil)
}

// applyPreset applies preset name's options for cfg.Policy except those
// in explicit: those the caller sets itself. cold_start_warmup = true (the
// reference's name for warmup "once", already in cfg) also overrides the
// preset's warmup; false, the reference's default, does not.
func applyPreset(cfg *Config, name string, explicit map[string]bool) error {
	pre, err := PresetOptions(name, cfg.Policy)
	if err != nil {
		return err
	}
	for _, p := range pre {
		if explicit[p[0]] || (p[0] == "warmup" && cfg.ColdStartWarmup) {
			continue
		}
		if err := options[p[0]](cfg, p[1]); err != nil {
			return fmt.Errorf("%w: preset %q: option %s = %q, %v", ErrInvalidConfig, name, p[0], p[1], err)
		}
	}
	return nil
}

func quoted(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = fmt.Sprintf("%q", n)
	}
	return out
}
