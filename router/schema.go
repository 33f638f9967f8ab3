package router

//go:generate go run ../internal/schemagen/cmd/schemagen -root ..

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/adprouter/adprouter/router/internal/prefix"
)

// The option schema: the one home of every configuration option's name,
// type, default, allowed values, the policies that read it and its
// documentation. ParseOptions parses by it; the C ABI hands it out as JSON
// (adpr_option_schema), which the Python binding reads; and the option list
// of include/adprouter.h, the options struct of include/adprouter.hpp and the
// options table of docs/configuration.md are generated from it
// (go generate ./...; a test fails while one of them is stale).

// An OptionKind is the type of an option's text value.
type OptionKind string

// The option kinds and the text each accepts.
const (
	// KindEnum: one of OptionSpec.Values, exactly.
	KindEnum OptionKind = "enum"
	// KindInt: a decimal integer that fits in 32 bits ("-12", "4096").
	KindInt OptionKind = "int"
	// KindInt64: a decimal integer that fits in 64 bits (byte counts).
	KindInt64 OptionKind = "int64"
	// KindFloat: a finite decimal number ("0.5", "1e-05", "2.").
	KindFloat OptionKind = "float"
	// KindBool: "true", "True" or "1"; "false", "False" or "0".
	KindBool OptionKind = "bool"
)

// BoolTrue and BoolFalse are the texts a KindBool option accepts, the
// library's boolean grammar for every front end.
var (
	BoolTrue  = []string{"true", "True", "1"}
	BoolFalse = []string{"false", "False", "0"}
)

// OptionSpec describes one option.
type OptionSpec struct {
	// Name is the key of ParseOptions, adpr_option and the Python keyword.
	Name string     `json:"name"`
	Kind OptionKind `json:"kind"`
	// Values are a KindEnum option's values.
	Values []string `json:"values,omitempty"`
	// Default is the text of the default; "" for a required option.
	Default string `json:"default"`
	// Range says which numbers are allowed ("1..4096"); "" for enums and
	// booleans.
	Range string `json:"range,omitempty"`
	// Unit is what a number counts ("ranks", "tokens", "bytes"); "" for none.
	Unit string `json:"unit,omitempty"`
	// Policies are the policies that read the option; empty for every one.
	Policies []Policy `json:"policies,omitempty"`
	// Doc says what the option does, in a few sentences.
	Doc string `json:"doc"`

	set option                 // parses the text into a Config
	get func(c *Config) string // formats a Config's value as text
}

// Bounds of numeric options beyond MaxDPSize and MaxIndexMaxBytes.
const (
	// MaxTokensPerBlock bounds TokensPerBlock.
	MaxTokensPerBlock = 1 << 16
	// MaxIndexCapacityBlocks bounds IndexCapacityBlocks.
	MaxIndexCapacityBlocks = 1 << 30
	// MaxWarmupWindow bounds WarmupWindow.
	MaxWarmupWindow = 1 << 20
	// MaxTTFTDrainTokens bounds TTFTDrainTokens.
	MaxTTFTDrainTokens = 1 << 30
)

var (
	kvOnly  = []Policy{PolicyKVCacheAware}
	convKV  = []Policy{PolicyKVCacheAware, PolicyConversation}
	convOne = []Policy{PolicyConversation}
)

// optionSchema is the table, in the order the documents list the options.
var optionSchema = []OptionSpec{
	enumOption("policy", func(c *Config) *Policy { return &c.Policy }, nil,
		[]Policy{PolicyDefault, PolicyKVCacheAware, PolicyConversation},
		"The routing policy: TensorRT-LLM's DefaultADPRouter (balance token load), "+
			"KVCacheAwareADPRouter (cached prefix and load) or the conversation-affinity router "+
			"(every turn of a conversation on one rank)."),
	withRange(intOption("dp_size", func(c *Config) *int { return &c.DPSize }, nil,
		"Number of attention-DP ranks (required)."), fmt.Sprintf("1..%d", MaxDPSize), "ranks"),
	withRange(floatOption("load_balance_weight", func(c *Config) *float64 { return &c.LoadBalanceWeight }, kvOnly,
		"Beta of the KV-aware score: how many tokens of prefill one token of relative load is worth."),
		">= 0, finite", ""),
	withRange(floatOption("match_rate_threshold", func(c *Config) *float64 { return &c.MatchRateThreshold }, kvOnly,
		"Cache affinity counts for a request only when its best match divided by its length is strictly greater."),
		">= 0, finite", ""),
	withRange(floatOption("fair_share_multiplier", func(c *Config) *float64 { return &c.FairShareMultiplier }, convKV,
		"Soft per-rank cap = multiplier x fair share of the batch (the default policy always uses 1); "+
			"the conversation policy clamps it to >= 1."),
		">= 1 for kv_cache_aware, finite", ""),
	boolOption("cold_start_warmup", func(c *Config) *bool { return &c.ColdStartWarmup }, kvOnly,
		`Send the first untargeted requests to every rank once, smallest rank first (warmup "once"); `+
			`true with warmup "off", "quiet" or "demand" is an error.`),
	withRange(intOption("max_sessions", func(c *Config) *int { return &c.MaxSessions }, convKV,
		`Bound of the conversation -> rank map, least recently used evicted first (the conversation policy, `+
			`and the kv_cache_aware score "ttft").`), ">= 1", "conversations"),
	enumOption("new_conv_placement", func(c *Config) *Placement { return &c.NewConvPlacement }, convOne,
		[]Placement{PlacementRoundRobin, PlacementLeastQueued, PlacementLeastTokens},
		"Where a new conversation goes: round robin, the rank with the fewest requests, or the rank "+
			"with the fewest prompt tokens (then requests, then round robin)."),
	boolOption("capacity_aware", func(c *Config) *bool { return &c.CapacityAware }, nil,
		"Avoid, for each balanced request, ranks whose free_kv_tokens (minus what the batch already "+
			"placed there) cannot hold its uncached tokens, when some rank can; else the most headroom "+
			"wins. Explicit targets and warmup are honoured anyway."),
	withRange(intOption("tokens_per_block", func(c *Config) *int { return &c.TokensPerBlock }, kvOnly,
		"KV block size: the prefix index hashes prompts in blocks of this many tokens and turns KV "+
			"capacity into index bounds."), fmt.Sprintf("1..%d", MaxTokensPerBlock), "tokens"),
	enumOption("prefix_source", func(c *Config) *PrefixSource { return &c.PrefixSource }, kvOnly,
		[]PrefixSource{SourceProbe, SourceIndex, SourceProbeIndex},
		`Where the KV-aware match lengths come from: "probe" (the caller's match_lens, the reference), `+
			`"index" (the router's own prefix index: no probe, no second allgather; needs whole prompts) `+
			`or "probe+index" (the larger of the two).`),
	withRange(intOption("index_capacity_blocks", func(c *Config) *int { return &c.IndexCapacityBlocks }, kvOnly,
		fmt.Sprintf("Prefix-index bound of a rank that reports no KV capacity (0: %d blocks); ranks "+
			"reporting kv_capacity_tokens are bounded by it.", prefix.DefaultRankBlocks)),
		fmt.Sprintf("0..%d", MaxIndexCapacityBlocks), "blocks"),
	withRange(int64Option("index_max_bytes", func(c *Config) *int { return &c.IndexMaxBytes }, kvOnly,
		"Memory bound of the prefix index, all ranks together: beyond it the least recently used "+
			"(block, rank) entries of any rank are evicted, so memory does not grow with dp_size."),
		fmt.Sprintf("%d..%d", prefix.EntryBytes, MaxIndexMaxBytes), "bytes"),
	enumOption("warmup", func(c *Config) *Warmup { return &c.Warmup }, kvOnly,
		[]Warmup{WarmupOff, WarmupOnce, WarmupQuiet, WarmupDemand},
		`"once" (= cold_start_warmup), "quiet" ("once", only while no rank has an active request `+
			`(once some decision has seen dp_size active requests, or a request arriving while a rank warms, `+
			`with two requests or more; with the prefix index, a burst of held prompt families warms only a new conversation's), or `+
			`while load starts on a cold engine; under score "ttft", a lone idle request of a prompt family `+
			`some rank holds warms only once the family's share of the traffic asks for another rank: `+
			`see docs/ROUTING.md) or `+
			`"demand" (keep each hot prompt family on about ceil(share x dp_size x warmup_factor) ranks, `+
			`replicating only while the engine is quiet).`),
	withRange(floatOption("warmup_factor", func(c *Config) *float64 { return &c.WarmupFactor }, kvOnly,
		"Scales demand warmup's replica target, and quiet warmup's for a held prompt family."), "> 0, finite", ""),
	withRange(intOption("warmup_window", func(c *Config) *int { return &c.WarmupWindow }, kvOnly,
		"Routed requests that demand warmup and score \"ttft\" (its quiet warmup too) count prompt families over."),
		fmt.Sprintf("1..%d", MaxWarmupWindow), "requests"),
	withRange(intOption("warmup_min_requests", func(c *Config) *int { return &c.WarmupMinRequests }, kvOnly,
		"Requests of a family the window must hold before demand warmup replicates it, or score \"ttft\" "+
			"counts it as demand (one-off prompts never are)."), ">= 1", "requests"),
	enumOption("score", func(c *Config) *Score { return &c.Score }, kvOnly,
		[]Score{ScoreReference, ScoreTTFT},
		`How the KV-aware policy ranks ranks: "reference" (TensorRT-LLM's score) or "ttft" (predicted `+
			`time to first token in lock-step iterations: the uncached prefill queued on the rank and the `+
			`request's own, in-flight prefixes counted as engine_reuse allows, recomputing a prefix counted `+
			`as its cost, and the KV room ranks report heeded); "ttft" needs prefix_source "index" or `+
			`"probe+index" (docs/ROUTING.md).`),
	enumOption("engine_reuse", func(c *Config) *EngineReuse { return &c.EngineReuse }, kvOnly,
		[]EngineReuse{ReuseAfterIteration, ReuseOnSchedule},
		`When a block being computed becomes reusable: "after_iteration" (TensorRT-LLM) or `+
			`"on_schedule" (vLLM); read by score "ttft".`),
	withRange(intOption("ttft_drain_tokens", func(c *Config) *int { return &c.TTFTDrainTokens }, kvOnly,
		`Prefill tokens a rank computes per iteration (the engine's max_num_tokens); read by score "ttft".`),
		fmt.Sprintf("1..%d", MaxTTFTDrainTokens), "tokens"),
	{
		Name: "preset", Kind: KindEnum, Default: PresetReference,
		Doc: "A bundle of the options above (docs/configuration.md lists each preset's options), applied " +
			"first: explicit options override it, in any order.",
	},
	boolOption("explain", func(c *Config) *bool { return &c.Explain }, nil,
		"Record a receipt per request of every decision: why it went where it did. Decisions are "+
			"identical either way and the state digest ignores it."),
}

// options are the parsers of optionSchema, by name.
var options = func() map[string]option {
	m := make(map[string]option, len(optionSchema))
	for _, o := range optionSchema {
		if o.set != nil {
			m[o.Name] = o.set
		}
	}
	return m
}()

// init fills in what the table derives: every default from DefaultConfig,
// the preset names from the preset table.
func init() {
	def := DefaultConfig(PolicyKVCacheAware, 0).normalized()
	for i := range optionSchema {
		o := &optionSchema[i]
		switch {
		case o.Name == "preset":
			o.Values = Presets()
		case o.Name != "dp_size":
			o.Default = o.get(&def)
		}
	}
}

// OptionSchema returns the option table, in document order. The caller may
// not modify it.
func OptionSchema() []OptionSpec { return optionSchema }

// OptionSchemaJSON is the schema as the C ABI hands it out
// (adpr_option_schema): {"options": [...], "bool_true": [...],
// "bool_false": [...], "presets": {name: {policy: [[key, value], ...]}}}.
func OptionSchemaJSON() []byte {
	presetTable := map[string]map[Policy][][2]string{}
	for _, name := range Presets() {
		presetTable[name] = map[Policy][][2]string{}
		for _, p := range []Policy{PolicyDefault, PolicyKVCacheAware, PolicyConversation} {
			kv, _ := PresetOptions(name, p)
			if kv == nil {
				kv = [][2]string{}
			}
			presetTable[name][p] = kv
		}
	}
	b, err := json.Marshal(struct {
		Options   []OptionSpec                      `json:"options"`
		BoolTrue  []string                          `json:"bool_true"`
		BoolFalse []string                          `json:"bool_false"`
		Presets   map[string]map[Policy][][2]string `json:"presets"`
	}{optionSchema, BoolTrue, BoolFalse, presetTable})
	if err != nil {
		panic(err) // plain data: cannot fail
	}
	return b
}

// EffectiveOptions returns every option of cfg as ParseOptions text, in
// schema order: the configuration a Router built from cfg runs with, presets
// expanded and unset values replaced by what they mean. ParseOptions of the
// result gives back the same configuration.
func EffectiveOptions(cfg Config) [][2]string {
	cfg = cfg.normalized()
	out := make([][2]string, 0, len(optionSchema))
	for _, o := range optionSchema {
		if o.get != nil {
			out = append(out, [2]string{o.Name, o.get(&cfg)})
		}
	}
	return out
}

// ReadBy reports whether policy p reads the option.
func (o *OptionSpec) ReadBy(p Policy) bool {
	return len(o.Policies) == 0 || slices.Contains(o.Policies, p)
}

func withRange(o OptionSpec, rng, unit string) OptionSpec {
	o.Range, o.Unit = rng, unit
	return o
}

func enumOption[T ~string](name string, field func(*Config) *T, pol []Policy, values []T, doc string) OptionSpec {
	vs := make([]string, len(values))
	for i, v := range values {
		vs[i] = string(v)
	}
	return OptionSpec{Name: name, Kind: KindEnum, Values: vs, Policies: pol, Doc: doc,
		set: textOpt(field), get: func(c *Config) string { return string(*field(c)) }}
}

func intOption(name string, field func(*Config) *int, pol []Policy, doc string) OptionSpec {
	return OptionSpec{Name: name, Kind: KindInt, Policies: pol, Doc: doc,
		set: intOpt(field), get: func(c *Config) string { return strconv.Itoa(*field(c)) }}
}

func int64Option(name string, field func(*Config) *int, pol []Policy, doc string) OptionSpec {
	o := intOption(name, field, pol, doc)
	o.Kind, o.set = KindInt64, int64Opt(field)
	return o
}

func floatOption(name string, field func(*Config) *float64, pol []Policy, doc string) OptionSpec {
	return OptionSpec{Name: name, Kind: KindFloat, Policies: pol, Doc: doc,
		set: floatOpt(field), get: func(c *Config) string { return formatFloat(*field(c)) }}
}

func boolOption(name string, field func(*Config) *bool, pol []Policy, doc string) OptionSpec {
	return OptionSpec{Name: name, Kind: KindBool, Policies: pol, Doc: doc,
		set: boolOpt(field), get: func(c *Config) string { return strconv.FormatBool(*field(c)) }}
}

// formatFloat writes f in the shortest text that parses back to it, with a
// decimal point ("1.0", "0.1", "1e-05" as Python's repr).
func formatFloat(f float64) string {
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eEn") { // n: NaN, Inf
		s += ".0"
	}
	return s
}
