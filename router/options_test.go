package router

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestParseOptions(t *testing.T) {
	kv := func(pairs ...string) [][2]string {
		var out [][2]string
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, [2]string{pairs[i], pairs[i+1]})
		}
		return out
	}
	// Every option reaches its Config field; floats are parsed exactly.
	cfg, err := ParseOptions(kv(
		"policy", "kv_cache_aware", "dp_size", "8", "load_balance_weight", "0.30000000000000004",
		"match_rate_threshold", "0.25", "fair_share_multiplier", "1.5", "cold_start_warmup", "true",
		"max_sessions", "7", "new_conv_placement", "least_queued", "capacity_aware", "1",
		"tokens_per_block", "64", "prefix_source", "probe+index", "index_capacity_blocks", "100",
		"warmup", "once", "warmup_factor", "2", "warmup_window", "50", "warmup_min_requests", "3",
		"index_max_bytes", "8589934592"))
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig(PolicyKVCacheAware, 8)
	want.LoadBalanceWeight, want.MatchRateThreshold, want.FairShareMultiplier = math.Nextafter(0.3, 1), 0.25, 1.5
	want.ColdStartWarmup, want.MaxSessions, want.NewConvPlacement = true, 7, PlacementLeastQueued
	want.CapacityAware, want.TokensPerBlock, want.PrefixSource = true, 64, SourceProbeIndex
	want.IndexCapacityBlocks, want.Warmup, want.WarmupFactor = 100, WarmupOnce, 2
	want.WarmupWindow, want.WarmupMinRequests = 50, 3
	want.IndexMaxBytes = 8 << 30
	if cfg != want {
		t.Errorf("ParseOptions = %+v\nwant %+v", cfg, want)
	}

	for _, tc := range []struct {
		name string
		kv   [][2]string
		want string // in the message
	}{
		{"missing dp_size", kv("policy", "default"), "dp_size is required"},
		{"unknown key", kv("dp_size", "2", "beta", "1"), `unknown option "beta"`},
		{"repeated key", kv("dp_size", "2", "dp_size", "3"), "more than once"},
		{"bad int", kv("dp_size", "two"), `dp_size = "two"`},
		{"int overflow", kv("dp_size", "99999999999"), "dp_size"},
		{"bad float", kv("dp_size", "2", "load_balance_weight", "x"), "load_balance_weight"},
		{"NaN weight", kv("dp_size", "2", "load_balance_weight", "NaN"), `load_balance_weight = "NaN"`},
		{"plus sign", kv("dp_size", "+4"), `dp_size = "+4"`},
		{"underscore", kv("dp_size", "1_0"), `dp_size = "1_0"`},
		{"hex float", kv("dp_size", "2", "warmup_factor", "0x1p1"), `warmup_factor = "0x1p1"`},
		{"inf", kv("dp_size", "2", "load_balance_weight", "inf"), `load_balance_weight = "inf"`},
		{"space", kv("dp_size", " 2"), `dp_size = " 2"`},
		{"dp_size over the bound", kv("dp_size", "4097"), "dp_size = 4097"},
		{"index_max_bytes too small", kv("dp_size", "2", "index_max_bytes", "1"), "index_max_bytes = 1"},
		{"index_max_bytes not decimal", kv("dp_size", "2", "index_max_bytes", "1e9"), `index_max_bytes = "1e9"`},
		{"float overflow", kv("dp_size", "2", "warmup_factor", "1e999"), "float64 range"},
		{"bad bool", kv("dp_size", "2", "capacity_aware", "yes"), "capacity_aware"},
		{"bad policy", kv("dp_size", "2", "policy", "random"), `policy = "random"`},
		{"contradictory warmup", kv("dp_size", "2", "cold_start_warmup", "true", "warmup", "off"), "cold_start_warmup is true"},
		{"multiplier < 1", kv("dp_size", "2", "fair_share_multiplier", "0.5"), "fair_share_multiplier = 0.5"},
	} {
		_, err := ParseOptions(tc.kv)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want ErrInvalidConfig mentioning %q", tc.name, err, tc.want)
		}
	}
}

func TestIsDecimal(t *testing.T) {
	for _, tc := range []struct {
		v            string
		isInt, isNum bool
	}{
		{"0", true, true}, {"-12", true, true}, {"4096", true, true},
		{"0.5", false, true}, {"1e-05", false, true}, {"2.", false, true}, {".5", false, true},
		{"1E+16", false, true}, {"-0.0", false, true},
		{"", false, false}, {"-", false, false}, {"+4", false, false}, {"1_0", false, false},
		{"0x10", false, false}, {"0x1p1", false, false}, {"inf", false, false}, {"NaN", false, false},
		{" 1", false, false}, {"1 ", false, false}, {".", false, false}, {"1e", false, false},
		{"e5", false, false}, {"1.2.3", false, false}, {"--1", false, false},
	} {
		if got := isDecimal(tc.v, false); got != tc.isInt {
			t.Errorf("isDecimal(%q, int) = %v, want %v", tc.v, got, tc.isInt)
		}
		if got := isDecimal(tc.v, true); got != tc.isNum {
			t.Errorf("isDecimal(%q, float) = %v, want %v", tc.v, got, tc.isNum)
		}
	}
}

func FuzzIsDecimal(f *testing.F) {
	for _, s := range []string{"1", "-0.5e3", "+1", "0x1p1", "1_0", "inf"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		// Whatever isDecimal accepts, strconv parses (to a value or a range
		// error), and an accepted float text holds no letters but e/E.
		if isDecimal(v, false) {
			if _, err := strconv.ParseInt(v, 10, 64); err != nil && !errors.Is(err, strconv.ErrRange) {
				t.Errorf("isDecimal(%q, int) but ParseInt: %v", v, err)
			}
		}
		if isDecimal(v, true) {
			if _, err := strconv.ParseFloat(v, 64); err != nil && !errors.Is(err, strconv.ErrRange) {
				t.Errorf("isDecimal(%q, float) but ParseFloat: %v", v, err)
			}
			if strings.ContainsAny(strings.ToLower(v), "abcdfghijklmnopqrstuvwxyz_+ ") && !strings.Contains(v, "e+") && !strings.Contains(v, "E+") {
				t.Errorf("isDecimal(%q, float) accepted a non-decimal character", v)
			}
		}
	})
}

// Unset ("") enums mean their defaults: a Router built with them has the
// same Config and digest as one built with the defaults spelled out, and
// the contradictions between ColdStartWarmup and Warmup are errors.
func TestConfigNormalized(t *testing.T) {
	unset := DefaultConfig(PolicyKVCacheAware, 4)
	unset.NewConvPlacement, unset.PrefixSource, unset.Warmup = "", "", ""
	spelled := DefaultConfig(PolicyKVCacheAware, 4)
	spelled.NewConvPlacement, spelled.PrefixSource, spelled.Warmup = PlacementRoundRobin, SourceProbe, WarmupOff
	a, b := mustNew(t, unset), mustNew(t, spelled)
	if a.Config() != b.Config() || a.StateDigest() != b.StateDigest() {
		t.Errorf("unset enums: Config %+v digest %x; spelled out: %+v %x", a.Config(), a.StateDigest(), b.Config(), b.StateDigest())
	}

	cold := DefaultConfig(PolicyKVCacheAware, 4)
	cold.ColdStartWarmup = true
	once := DefaultConfig(PolicyKVCacheAware, 4)
	once.Warmup = WarmupOnce
	c, o := mustNew(t, cold), mustNew(t, once)
	if c.Config() != o.Config() || c.StateDigest() != o.StateDigest() || len(c.PendingWarmup()) != 4 {
		t.Errorf("cold_start_warmup %+v and warmup once %+v differ", c.Config(), o.Config())
	}

	for _, w := range []Warmup{WarmupOff, WarmupDemand} {
		bad := DefaultConfig(PolicyKVCacheAware, 4)
		bad.ColdStartWarmup, bad.Warmup = true, w
		if _, err := New(bad); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "cold_start_warmup") {
			t.Errorf("ColdStartWarmup with Warmup %q: %v, want an error naming cold_start_warmup", w, err)
		}
		if _, err := ParseOptions([][2]string{{"dp_size", "4"}, {"cold_start_warmup", "true"}, {"warmup", string(w)}}); err == nil {
			t.Errorf("ParseOptions accepted cold_start_warmup true with warmup %q", w)
		}
	}
}

// Options as the C and Python front ends pass them: text, parsed and
// validated in one place.
func ExampleParseOptions() {
	cfg, err := ParseOptions([][2]string{
		{"policy", "kv_cache_aware"}, {"dp_size", "8"}, {"cold_start_warmup", "true"},
	})
	fmt.Println(cfg.Policy, cfg.DPSize, cfg.ColdStartWarmup, err)
	_, err = ParseOptions([][2]string{{"dp_size", "+8"}})
	fmt.Println(err)
	// Output:
	// kv_cache_aware 8 true <nil>
	// invalid router configuration: option dp_size = "+8", want a decimal integer (digits with an optional leading -)
}

func TestTokensRead(t *testing.T) {
	for _, tc := range []struct {
		opts [][2]string
		want int
	}{
		{[][2]string{{"dp_size", "2"}, {"policy", "default"}}, 0},
		{[][2]string{{"dp_size", "2"}, {"policy", "conversation"}}, 0},
		{[][2]string{{"dp_size", "2"}}, PrefixTokens},
		{[][2]string{{"dp_size", "2"}, {"cold_start_warmup", "true"}}, PrefixTokens},
		{[][2]string{{"dp_size", "2"}, {"prefix_source", "index"}}, AllTokens},
		{[][2]string{{"dp_size", "2"}, {"prefix_source", "probe+index"}}, AllTokens},
		{[][2]string{{"dp_size", "2"}, {"warmup", "demand"}}, AllTokens},
	} {
		cfg, err := ParseOptions(tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		if got := mustNew(t, cfg).TokensRead(); got != tc.want {
			t.Errorf("%v: TokensRead() = %d, want %d", tc.opts, got, tc.want)
		}
	}
}

// The preset's options come first and every explicit option after them,
// whatever the order of the pairs; a preset leaves out what a policy does
// not read.
func TestParseOptionsPreset(t *testing.T) {
	rec := DefaultConfig(PolicyKVCacheAware, 4)
	rec.PrefixSource, rec.Score, rec.Warmup = SourceProbeIndex, ScoreTTFT, WarmupQuiet
	for _, tc := range []struct {
		name string
		kv   [][2]string
		want func() Config
	}{
		{"reference is the default", [][2]string{{"preset", "reference"}, {"dp_size", "4"}},
			func() Config { return DefaultConfig(PolicyKVCacheAware, 4) }},
		{"recommended", [][2]string{{"dp_size", "4"}, {"preset", "recommended"}},
			func() Config { return rec }},
		{"explicit before the preset wins", [][2]string{{"engine_reuse", "on_schedule"}, {"warmup", "demand"}, {"preset", "recommended"}, {"dp_size", "4"}},
			func() Config { c := rec; c.EngineReuse, c.Warmup = ReuseOnSchedule, WarmupDemand; return c }},
		{"explicit after the preset wins", [][2]string{{"preset", "recommended"}, {"dp_size", "4"}, {"prefix_source", "index"}},
			func() Config { c := rec; c.PrefixSource = SourceIndex; return c }},
		{"cold_start_warmup replaces the preset's warmup", [][2]string{{"preset", "recommended"}, {"dp_size", "4"}, {"cold_start_warmup", "true"}},
			func() Config { c := rec; c.Warmup, c.ColdStartWarmup = "", true; return c }},
		{"cold_start_warmup false, the reference's default, keeps it", [][2]string{{"cold_start_warmup", "false"}, {"preset", "recommended"}, {"dp_size", "4"}},
			func() Config { return rec }},
		{"recommended for the default policy is the reference", [][2]string{{"preset", "recommended"}, {"policy", "default"}, {"dp_size", "4"}},
			func() Config { return DefaultConfig(PolicyDefault, 4) }},
		{"full for the conversation policy", [][2]string{{"policy", "conversation"}, {"preset", "full"}, {"dp_size", "4"}},
			func() Config { c := DefaultConfig(PolicyConversation, 4); c.CapacityAware = true; return c }},
	} {
		cfg, err := ParseOptions(tc.kv)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if want := tc.want(); cfg != want {
			t.Errorf("%s: ParseOptions = %+v\nwant %+v", tc.name, cfg, want)
		}
	}
	for _, tc := range []struct {
		kv   [][2]string
		want string
	}{
		{[][2]string{{"preset", "fastest"}, {"dp_size", "2"}}, `preset = "fastest", want "full", "index", "recommended", "reference"`},
		{[][2]string{{"preset", "index"}, {"preset", "full"}, {"dp_size", "2"}}, `"preset" given more than once`},
		{[][2]string{{"preset", "recommended"}, {"prefix_source", "probe"}, {"dp_size", "2"}}, "score"},
	} {
		if _, err := ParseOptions(tc.kv); err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("ParseOptions(%v) = %v, want an ErrInvalidConfig naming %s", tc.kv, err, tc.want)
		}
	}
}

func ExamplePresetOptions() {
	kv, _ := PresetOptions(PresetRecommended, PolicyKVCacheAware)
	fmt.Println(kv)
	// Output: [[prefix_source probe+index] [score ttft] [warmup quiet]]
}
