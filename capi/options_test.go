package main

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/adprouter/adprouter/kvsize"
	"github.com/adprouter/adprouter/router"
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
	cfg, err := parseOptions(kv(
		"policy", "kv_cache_aware", "dp_size", "8", "load_balance_weight", "0.30000000000000004",
		"match_rate_threshold", "0.25", "fair_share_multiplier", "1.5", "cold_start_warmup", "true",
		"max_sessions", "7", "new_conv_placement", "least_queued", "capacity_aware", "1",
		"tokens_per_block", "64", "prefix_source", "probe+index", "index_capacity_blocks", "100",
		"warmup", "once", "warmup_factor", "2", "warmup_window", "50", "warmup_min_requests", "3",
		"index_max_bytes", "8589934592"))
	if err != nil {
		t.Fatal(err)
	}
	want := router.DefaultConfig(router.PolicyKVCacheAware, 8)
	want.LoadBalanceWeight, want.MatchRateThreshold, want.FairShareMultiplier = math.Nextafter(0.3, 1), 0.25, 1.5
	want.ColdStartWarmup, want.MaxSessions, want.NewConvPlacement = true, 7, router.PlacementLeastQueued
	want.CapacityAware, want.TokensPerBlock, want.PrefixSource = true, 64, router.SourceProbeIndex
	want.IndexCapacityBlocks, want.Warmup, want.WarmupFactor = 100, router.WarmupOnce, 2
	want.WarmupWindow, want.WarmupMinRequests = 50, 3
	want.IndexMaxBytes = 8 << 30
	if cfg != want {
		t.Errorf("parseOptions = %+v\nwant %+v", cfg, want)
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
		{"contradictory warmup", kv("dp_size", "2", "cold_start_warmup", "true", "warmup", "off"), "contradicts"},
		{"multiplier < 1", kv("dp_size", "2", "fair_share_multiplier", "0.5"), "fair_share_multiplier = 0.5"},
	} {
		_, err := parseOptions(tc.kv)
		if !errors.Is(err, router.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want ErrInvalidConfig mentioning %q", tc.name, err, tc.want)
		}
		if statusOf(err) != statusConfig {
			t.Errorf("%s: status %d, want ADPR_ERR_CONFIG", tc.name, statusOf(err))
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

func TestStatusOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, int(statusOK)},
		{argError("x"), int(statusInvalidArgument)},
		{router.ErrInvalidInput, int(statusInvalidArgument)},
		{kvsize.ErrInvalid, int(statusInvalidArgument)},
		{router.ErrInvalidConfig, int(statusConfig)},
		{errBadHandle, int(statusInvalidHandle)},
		{errors.New("anything else"), int(statusInternal)},
	} {
		if got := int(statusOf(tc.err)); got != tc.want {
			t.Errorf("statusOf(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
