package router

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every option of the schema parses, and every Config field has an option:
// EffectiveOptions of a configuration set through ParseOptions gives back the
// same configuration.
func TestSchemaRoundTrip(t *testing.T) {
	for _, pol := range []Policy{PolicyDefault, PolicyKVCacheAware, PolicyConversation} {
		cfg, err := ParseOptions([][2]string{{"policy", string(pol)}, {"dp_size", "3"}, {"preset", "recommended"}})
		if pol != PolicyKVCacheAware {
			cfg, err = ParseOptions([][2]string{{"policy", string(pol)}, {"dp_size", "3"}})
		}
		require.NoError(t, err)
		eff := EffectiveOptions(cfg)
		again, err := ParseOptions(eff)
		require.NoError(t, err, "ParseOptions(EffectiveOptions) for %s: %v", pol, eff)
		assert.Equal(t, cfg.normalized(), again.normalized(), "policy %s", pol)
	}
}

// The schema's defaults are DefaultConfig's, its names are unique, every
// enum lists the values Validate accepts, and every numeric option says its
// range.
func TestSchemaTable(t *testing.T) {
	seen := map[string]bool{}
	for _, o := range OptionSchema() {
		require.False(t, seen[o.Name], "option %s twice", o.Name)
		seen[o.Name] = true
		assert.NotEmpty(t, o.Doc, o.Name)
		switch o.Kind {
		case KindEnum:
			require.NotEmpty(t, o.Values, o.Name)
			assert.Contains(t, o.Values, o.Default, "%s: default not among the values", o.Name)
			for _, v := range o.Values {
				if o.Name == "preset" {
					continue
				}
				_, err := ParseOptions(withOption(o, v))
				assert.NoError(t, err, "%s = %q", o.Name, v)
			}
			_, err := ParseOptions(withOption(o, "no-such-value"))
			assert.ErrorIs(t, err, ErrInvalidConfig, o.Name)
		case KindInt, KindInt64, KindFloat:
			assert.NotEmpty(t, o.Range, o.Name)
		case KindBool:
			for _, v := range append(slices.Clone(BoolTrue), BoolFalse...) {
				_, err := ParseOptions(withOption(o, v))
				assert.NoError(t, err, "%s = %q", o.Name, v)
			}
			for _, v := range []string{"yes", "on", "TRUE", ""} {
				_, err := ParseOptions(withOption(o, v))
				assert.ErrorIs(t, err, ErrInvalidConfig, "%s = %q", o.Name, v)
			}
		default:
			t.Errorf("%s: kind %q", o.Name, o.Kind)
		}
	}
	// The defaults as the schema states them.
	def := map[string]string{}
	for _, o := range OptionSchema() {
		def[o.Name] = o.Default
	}
	assert.Equal(t, "", def["dp_size"])
	assert.Equal(t, "kv_cache_aware", def["policy"])
	assert.Equal(t, "1.0", def["load_balance_weight"])
	assert.Equal(t, "0.1", def["match_rate_threshold"])
	assert.Equal(t, "65536", def["max_sessions"])
	assert.Equal(t, "off", def["warmup"])
	assert.Equal(t, "reference", def["preset"])
	// Every option ParseOptions knows is in the table, and nothing else.
	for name := range options {
		assert.True(t, seen[name], name)
	}
}

func withOption(o OptionSpec, v string) [][2]string {
	kv := [][2]string{{"dp_size", "2"}, {o.Name, v}}
	if !o.ReadBy(PolicyKVCacheAware) {
		kv = append(kv, [2]string{"policy", string(o.Policies[0])})
	}
	if o.Name == "dp_size" || o.Name == "policy" {
		kv = [][2]string{{"dp_size", "2"}}
		if o.Name == "policy" {
			kv = append(kv, [2]string{"policy", v})
		} else {
			kv[0][1] = v
		}
	}
	if o.Name == "score" && v == string(ScoreTTFT) {
		kv = append(kv, [2]string{"prefix_source", "index"})
	}
	return kv
}

// The JSON the C ABI hands out holds the table, the boolean grammar and
// every preset's options per policy.
func TestOptionSchemaJSON(t *testing.T) {
	var got struct {
		Options   []map[string]any                  `json:"options"`
		BoolTrue  []string                          `json:"bool_true"`
		BoolFalse []string                          `json:"bool_false"`
		Presets   map[string]map[string][][2]string `json:"presets"`
	}
	require.NoError(t, json.Unmarshal(OptionSchemaJSON(), &got))
	require.Len(t, got.Options, len(OptionSchema()))
	assert.Equal(t, BoolTrue, got.BoolTrue)
	assert.Equal(t, "policy", got.Options[0]["name"])
	rec := got.Presets[PresetRecommended][string(PolicyKVCacheAware)]
	assert.NotEmpty(t, rec)
	assert.Empty(t, got.Presets[PresetReference][string(PolicyDefault)])
	var names []string
	for _, o := range got.Options {
		names = append(names, o["name"].(string))
	}
	assert.Contains(t, strings.Join(names, ","), "cold_start_warmup")
}
