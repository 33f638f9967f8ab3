package sim

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Workload kinds.
const (
	// KindShared: one long shared system prompt, short unique suffixes.
	KindShared = "shared"
	// KindMultiTenant: Groups system prompts, each request picks one with
	// Zipf(ZipfS) popularity, then a unique suffix.
	KindMultiTenant = "multitenant"
	// KindConversation: multi-turn conversations. Each turn's prompt is the
	// previous prompt, the previous answer and a new user message; the next
	// turn arrives a think time after the previous answer completes.
	KindConversation = "conversation"
	// KindNoReuse: unique random prompts.
	KindNoReuse = "noreuse"
	// KindSiblings: bursts of Siblings samples of the same new prompt
	// arriving together.
	KindSiblings = "siblings"
	// KindColdStart: a long quiet period of single sequential requests that
	// share a system prompt, then a spike at SpikeFactor times the rate
	// (the scenario of TensorRT-LLM's cold_start_warmup).
	KindColdStart = "coldstart"
	// KindTenantSpike: the cold-start shape (quiet, then a spike) with
	// Groups system prompts of Zipf(ZipfS) popularity instead of one: the
	// multi-tenant spike that demand-proportional warmup is for.
	KindTenantSpike = "tenantspike"
	// KindFollowUp: multi-turn conversations over long contexts in which a
	// turn may be followed by an in-flight follow-up: a request that
	// arrives FollowUpS (mean) after the turn arrived, while the turn's
	// prefill may still be running, whose prompt is the turn's whole
	// prompt plus a new message (an agent step or a user who adds to the
	// question before the answer comes).
	KindFollowUp = "followup"
	// KindTrace: a replayed trace in the common JSONL format (see
	// ParseTrace); not generated from parameters, so not in Kinds.
	KindTrace = "trace"
	// KindMix: the workloads of Mix served together, as one engine sees
	// traffic of several kinds at once (MixWorkload); not in Kinds.
	KindMix = "mix"
)

// Kinds lists the workload kinds in their documented order.
var Kinds = []string{KindColdStart, KindTenantSpike, KindShared, KindMultiTenant, KindConversation, KindFollowUp, KindNoReuse, KindSiblings}

// Arrival processes.
const (
	// ArrivalPoisson: exponential inter-arrival times.
	ArrivalPoisson = "poisson"
	// ArrivalBursty: bursts arrive as a Poisson process at Rate/BurstSize;
	// each brings a geometric number of arrivals (mean BurstSize) at the same
	// instant. Same mean rate as Poisson, much larger batches.
	ArrivalBursty = "bursty"
)

// WorkloadConfig parameterises a workload. Start from DefaultWorkload: each
// kind reads only the fields it needs (listed per field).
type WorkloadConfig struct {
	// Kind is one of Kinds.
	Kind string `json:"kind"`
	// Seed selects the random workload; the same seed gives the same
	// workload, byte for byte.
	Seed uint64 `json:"seed"`
	// Arrival is ArrivalPoisson or ArrivalBursty.
	Arrival string `json:"arrival"`
	// JitterMS delays each session (its first turn, and the later turns
	// with it) by a uniform draw from [0, JitterMS) milliseconds, from the
	// stream that Seed and JitterSeed select; 0: none. The requests of a
	// burst then reach the engine over a few milliseconds, as requests sent
	// together do, instead of at one instant, and whatever a result owes to
	// exact arrival times (which requests meet in one lock-step iteration)
	// is drawn again.
	JitterMS   float64 `json:"jitter_ms,omitempty"`
	JitterSeed uint64  `json:"jitter_seed,omitempty"`
	// BurstSize is the mean number of arrivals per burst (bursty only).
	BurstSize float64 `json:"burst_size"`
	// Rate is the arrival rate per second: requests (shared, multitenant,
	// noreuse), new conversations (conversation), sibling groups (siblings).
	// Cold start derives its rates from QuietIntervalS and SpikeFactor.
	Rate float64 `json:"rate"`
	// DurationS is how long arrivals go on, in seconds (not coldstart).
	DurationS float64 `json:"duration_s"`
	// SystemTokens is the length of the shared system prompt (shared,
	// multitenant, coldstart; conversation: the prompt every conversation
	// opens with, 0 for none).
	SystemTokens int `json:"system_tokens"`
	// SuffixMin and SuffixMax bound the unique suffix after the system
	// prompt, and a conversation's user messages (uniform).
	SuffixMin int `json:"suffix_min"`
	SuffixMax int `json:"suffix_max"`
	// PromptMin and PromptMax bound the prompt length (noreuse, siblings).
	PromptMin int `json:"prompt_min"`
	PromptMax int `json:"prompt_max"`
	// OutputMin and OutputMax bound the output length in tokens (all).
	OutputMin int `json:"output_min"`
	OutputMax int `json:"output_max"`
	// Groups is the number of system prompts (multitenant).
	Groups int `json:"groups"`
	// ZipfS is the Zipf exponent of group popularity: group g (0-based) is
	// picked with probability proportional to 1/(g+1)^ZipfS (multitenant).
	ZipfS float64 `json:"zipf_s"`
	// TurnsMin and TurnsMax bound the turns of a conversation.
	TurnsMin int `json:"turns_min"`
	TurnsMax int `json:"turns_max"`
	// ThinkS is the mean (exponential) think time between an answer and the
	// next turn, in seconds (conversation, followup).
	ThinkS float64 `json:"think_s"`
	// FollowUpP is the probability that a turn is followed by an in-flight
	// follow-up, FollowUpS the mean (exponential) delay of the follow-up
	// after the turn's arrival, in seconds (followup).
	FollowUpP float64 `json:"followup_p"`
	FollowUpS float64 `json:"followup_s"`
	// Siblings is the number of samples per prompt (siblings).
	Siblings int `json:"siblings"`
	// QuietS is the length of the quiet period, QuietIntervalS the fixed gap
	// between its requests, SpikeS the length of the spike and SpikeFactor
	// the spike's rate as a multiple of the quiet rate 1/QuietIntervalS
	// (coldstart). The spike is the workload's Window.
	QuietS         float64 `json:"quiet_s"`
	QuietIntervalS float64 `json:"quiet_interval_s"`
	SpikeS         float64 `json:"spike_s"`
	SpikeFactor    float64 `json:"spike_factor"`
	// Vocab is the token id range [0, Vocab).
	Vocab int `json:"vocab"`
	// Trace names the replayed trace (trace: its file name, for reports);
	// TraceRecords are its requests, as ParseTrace returns them. Arrival
	// times are the records' timestamps, relative to the first, times
	// TraceTimeScale; input and output lengths are scaled by
	// TraceLengthScale, and so is the format's block size (512 tokens):
	// hash id h names the same round(512*TraceLengthScale) tokens wherever
	// it appears, so requests that share leading hash ids share a token
	// prefix.
	Trace            string        `json:"trace,omitempty"`
	TraceTimeScale   float64       `json:"trace_time_scale,omitempty"`
	TraceLengthScale float64       `json:"trace_length_scale,omitempty"`
	TraceRecords     []TraceRecord `json:"-"`
	// Mix lists the workloads of a mix, each with its own parameters
	// (mix only). Part i is generated from a seed of its own, drawn from
	// Seed and i (its Seed field is not used), so that no two parts share
	// a system prompt by accident; its conversation ids and groups are
	// renamed apart from the other parts', and JitterMS applies to the
	// merged sessions. A mix's Vocab is its answers' token range.
	Mix []WorkloadConfig `json:"mix,omitempty"`
}

// MixWorkload returns the mix of parts (KindMix) with seed 1: the parts'
// sessions merged in order of arrival.
func MixWorkload(parts ...WorkloadConfig) WorkloadConfig {
	w, _ := DefaultWorkload(KindTrace)
	w.Kind, w.Trace, w.TraceTimeScale, w.TraceLengthScale = KindMix, "", 0, 0
	w.Mix = slices.Clone(parts)
	for _, p := range parts {
		w.Vocab = max(w.Vocab, p.Vocab)
	}
	return w
}

// MixName names a mix by its parts' kinds: "shared+followup".
func MixName(parts []WorkloadConfig) string {
	kinds := make([]string, len(parts))
	for i := range parts {
		kinds[i] = parts[i].Name()
	}
	return strings.Join(kinds, "+")
}

// DefaultWorkload returns the documented defaults for kind (see the package
// documentation), or an error for an unknown kind.
func DefaultWorkload(kind string) (WorkloadConfig, error) {
	w := WorkloadConfig{
		Kind:           kind,
		Seed:           1,
		Arrival:        ArrivalPoisson,
		BurstSize:      8,
		Rate:           20,
		DurationS:      60,
		SystemTokens:   2048,
		SuffixMin:      32,
		SuffixMax:      256,
		PromptMin:      256,
		PromptMax:      2048,
		OutputMin:      32,
		OutputMax:      256,
		Groups:         16,
		ZipfS:          1.1,
		TurnsMin:       2,
		TurnsMax:       8,
		ThinkS:         5,
		FollowUpP:      0.5,
		FollowUpS:      0.05,
		Siblings:       8,
		QuietS:         60,
		QuietIntervalS: 3,
		SpikeS:         10,
		SpikeFactor:    150,
		Vocab:          32000,
	}
	switch kind {
	case KindShared, KindMultiTenant, KindNoReuse:
	case KindColdStart:
		w.SystemTokens = 4096
	case KindTenantSpike:
		w.SystemTokens = 4096
		w.Groups = 4
	case KindConversation:
		w.Rate = 4
		w.SystemTokens = 512
	case KindFollowUp:
		w.Rate = 2
		w.SystemTokens = 1024
		w.SuffixMin, w.SuffixMax = 256, 2048
		w.TurnsMin, w.TurnsMax = 2, 6
		w.ThinkS = 3
	case KindSiblings:
		w.Rate = 2.5
	case KindTrace:
		w.TraceTimeScale, w.TraceLengthScale = 1, 1
	default:
		return w, fmt.Errorf("unknown workload %q, want one of %s", kind, strings.Join(Kinds, ", "))
	}
	return w, nil
}

// Validate reports the first field that is out of range.
func (w *WorkloadConfig) Validate() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("workload %s: %s = %v, want %s", w.Kind, field, v, want)
	}
	pos := func(f float64) bool { return f > 0 && !math.IsInf(f, 0) }
	if !slices.Contains(Kinds, w.Kind) && w.Kind != KindTrace && w.Kind != KindMix {
		return fmt.Errorf("unknown workload %q, want one of %s", w.Kind, strings.Join(Kinds, ", "))
	}
	if w.Kind == KindMix {
		return w.validateMix()
	}
	switch w.Arrival {
	case ArrivalPoisson:
	case ArrivalBursty:
		if !(w.BurstSize >= 1) || math.IsInf(w.BurstSize, 0) {
			return bad("burst_size", w.BurstSize, ">= 1")
		}
	default:
		return bad("arrival", fmt.Sprintf("%q", w.Arrival), `"poisson" or "bursty"`)
	}
	if !validJitter(w.JitterMS) {
		return bad("jitter_ms", w.JitterMS, ">= 0 and finite")
	}
	if w.Vocab < 2 || w.Vocab > math.MaxInt32 {
		return bad("vocab", w.Vocab, "2..2^31-1")
	}
	if w.OutputMin < 1 || w.OutputMax < w.OutputMin {
		return bad("output_min..output_max", fmt.Sprintf("%d..%d", w.OutputMin, w.OutputMax), "1 <= min <= max")
	}
	if w.SuffixMin < 0 || w.SuffixMax < w.SuffixMin {
		return bad("suffix_min..suffix_max", fmt.Sprintf("%d..%d", w.SuffixMin, w.SuffixMax), "0 <= min <= max")
	}
	if w.SystemTokens < 0 {
		return bad("system_tokens", w.SystemTokens, ">= 0")
	}
	if w.Kind == KindTrace {
		return w.validateTrace()
	}
	if w.Kind != KindColdStart && w.Kind != KindTenantSpike {
		if !pos(w.Rate) {
			return bad("rate", w.Rate, "> 0")
		}
		if !pos(w.DurationS) {
			return bad("duration_s", w.DurationS, "> 0")
		}
	}
	switch w.Kind {
	case KindShared, KindMultiTenant, KindColdStart, KindTenantSpike:
		if w.SystemTokens+w.SuffixMin < 1 {
			return bad("system_tokens + suffix_min", w.SystemTokens+w.SuffixMin, ">= 1")
		}
	case KindNoReuse, KindSiblings:
		if w.PromptMin < 1 || w.PromptMax < w.PromptMin {
			return bad("prompt_min..prompt_max", fmt.Sprintf("%d..%d", w.PromptMin, w.PromptMax), "1 <= min <= max")
		}
	case KindConversation, KindFollowUp:
		if w.TurnsMin < 1 || w.TurnsMax < w.TurnsMin {
			return bad("turns_min..turns_max", fmt.Sprintf("%d..%d", w.TurnsMin, w.TurnsMax), "1 <= min <= max")
		}
		if !(w.ThinkS >= 0) || math.IsInf(w.ThinkS, 0) {
			return bad("think_s", w.ThinkS, ">= 0")
		}
		if w.SystemTokens+w.SuffixMin < 1 {
			return bad("system_tokens + suffix_min", w.SystemTokens+w.SuffixMin, ">= 1")
		}
	}
	if w.Kind == KindFollowUp {
		if !(w.FollowUpP >= 0 && w.FollowUpP <= 1) {
			return bad("followup_p", w.FollowUpP, "0..1")
		}
		if !(w.FollowUpS >= 0) || math.IsInf(w.FollowUpS, 0) {
			return bad("followup_s", w.FollowUpS, ">= 0")
		}
	}
	if w.Kind == KindMultiTenant || w.Kind == KindTenantSpike {
		if w.Groups < 1 {
			return bad("groups", w.Groups, ">= 1")
		}
		if !(w.ZipfS >= 0) || math.IsInf(w.ZipfS, 0) {
			return bad("zipf_s", w.ZipfS, ">= 0")
		}
	}
	switch w.Kind {
	case KindSiblings:
		if w.Siblings < 1 {
			return bad("siblings", w.Siblings, ">= 1")
		}
	case KindColdStart, KindTenantSpike:
		if !(w.QuietS >= 0) || math.IsInf(w.QuietS, 0) {
			return bad("quiet_s", w.QuietS, ">= 0")
		}
		if !pos(w.QuietIntervalS) {
			return bad("quiet_interval_s", w.QuietIntervalS, "> 0")
		}
		if !pos(w.SpikeS) {
			return bad("spike_s", w.SpikeS, "> 0")
		}
		if !pos(w.SpikeFactor) {
			return bad("spike_factor", w.SpikeFactor, "> 0")
		}
	}
	return nil
}

// validJitter reports whether ms is an arrival jitter a workload accepts
// (WorkloadConfig.JitterMS): >= 0 and finite.
// validateMix checks a mix: its answers' vocabulary, its jitter and every
// part, none of them a mix.
func (w *WorkloadConfig) validateMix() error {
	if len(w.Mix) == 0 {
		return fmt.Errorf("workload mix: no part, want one or more")
	}
	if w.Vocab < 2 || w.Vocab > math.MaxInt32 {
		return fmt.Errorf("workload mix: vocab = %d, want 2..2^31-1", w.Vocab)
	}
	if !validJitter(w.JitterMS) {
		return fmt.Errorf("workload mix: jitter_ms = %v, want >= 0 and finite", w.JitterMS)
	}
	for i := range w.Mix {
		p := &w.Mix[i]
		if p.Kind == KindMix {
			return fmt.Errorf("workload mix: part %d is a mix, want a workload of another kind", i)
		}
		if err := p.Validate(); err != nil {
			return fmt.Errorf("workload mix: part %d: %w", i, err)
		}
	}
	return nil
}

func validJitter(ms float64) bool { return ms >= 0 && !math.IsInf(ms, 0) }

// Workload is a generated, policy-independent script of sessions. Prompts,
// answers, output lengths, request ids and first arrival times are fixed
// here; only the arrival of a conversation's later turns depends on the
// simulation (a think time after the previous answer completes).
type Workload struct {
	// Config is what generated the workload.
	Config WorkloadConfig
	// Sessions in order of Start (then generation order).
	Sessions []Session
	// Window is the time span of interest, reported separately (coldstart:
	// the spike), or nil.
	Window *Window
}

// Window is a span of simulated time, in nanoseconds since the start.
type Window struct {
	Start, End int64
}

// Session is one single request, or one conversation's turns.
type Session struct {
	// ConvID is the conversation id passed to the router ("" for none).
	ConvID string
	// Group is the prompt family (the system prompt index of multitenant,
	// the burst index of siblings), or -1.
	Group int
	// Start is the arrival time of the first turn, in ns.
	Start int64
	// Prefix opens the first prompt; it may be shared (same backing array)
	// with other sessions.
	Prefix []int32
	// Turns are the requests of the session, in order.
	Turns []Turn
}

// Turn is one request of a session. Its prompt is the session's Prefix, then
// for every earlier turn its User tokens and its answer (OutputTokens), then
// its own User tokens; except that the answer of a turn followed by an
// in-flight follow-up (the next turn has InFlight) is not in the history.
type Turn struct {
	// ID is the request id: unique in the workload.
	ID uint64
	// User is appended after the history.
	User []int32
	// Output is the number of tokens generated (>= 1).
	Output int
	// Think is the delay between the previous turn's completion and this
	// turn's arrival, in ns (0 for the first turn); with InFlight, between
	// the previous turn's arrival and this turn's.
	Think int64
	// InFlight marks an in-flight follow-up: it arrives Think after the
	// previous turn arrived, whether or not that one has been answered, and
	// its prompt extends the previous prompt without the previous answer.
	InFlight bool
}

// NumRequests returns the total number of turns.
func (w *Workload) NumRequests() int {
	n := 0
	for i := range w.Sessions {
		n += len(w.Sessions[i].Turns)
	}
	return n
}

// OutputTokens appends to dst the answer of the request with the given id:
// n tokens determined by the workload seed and the id alone.
func (w *Workload) OutputTokens(dst []int32, id uint64, n int) []int32 {
	return newRNG(w.Config.Seed, streamAnswer+id).tokens(dst, n, w.Config.Vocab)
}

// Prompt returns the prompt of turn k of session s (rebuilding the history).
func (w *Workload) Prompt(s *Session, k int) []int32 {
	p := append([]int32(nil), s.Prefix...)
	for j := 0; j < k; j++ {
		p = append(p, s.Turns[j].User...)
		if !s.Turns[j+1].InFlight {
			p = w.OutputTokens(p, s.Turns[j].ID, s.Turns[j].Output)
		}
	}
	return append(p, s.Turns[k].User...)
}

const nsPerSecond = 1e9

func seconds(s float64) int64 { return int64(math.Round(s * nsPerSecond)) }

// arrivalTimes returns the arrival times in [start, start+dur) of a process
// with the given mean rate, in ns.
func arrivalTimes(r *rng, cfg *WorkloadConfig, start, dur, rate float64) []int64 {
	var ts []int64
	end := start + dur
	t := start
	switch cfg.Arrival {
	case ArrivalBursty:
		for {
			t += r.exp(cfg.BurstSize / rate)
			if t >= end {
				return ts
			}
			for range r.geometric(cfg.BurstSize) {
				ts = append(ts, seconds(t))
			}
		}
	default:
		for {
			t += r.exp(1 / rate)
			if t >= end {
				return ts
			}
			ts = append(ts, seconds(t))
		}
	}
}

// Generate builds the workload cfg describes.
func Generate(cfg WorkloadConfig) (*Workload, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w := &Workload{Config: cfg}
	arr := newRNG(cfg.Seed, streamArrivals)
	lens := newRNG(cfg.Seed, streamLengths)
	tok := newRNG(cfg.Seed, streamTokens)
	grp := newRNG(cfg.Seed, streamGroups)
	think := newRNG(cfg.Seed, streamThink)
	follow := newRNG(cfg.Seed, streamFollowUp)
	output := func() int { return lens.between(cfg.OutputMin, cfg.OutputMax) }
	suffix := func() []int32 { return tok.tokens(nil, lens.between(cfg.SuffixMin, cfg.SuffixMax), cfg.Vocab) }
	single := func(t int64, group int, prefix, user []int32) {
		w.Sessions = append(w.Sessions, Session{Group: group, Start: t, Prefix: prefix,
			Turns: []Turn{{User: user, Output: output()}}})
	}

	switch cfg.Kind {
	case KindShared:
		system := tok.tokens(nil, cfg.SystemTokens, cfg.Vocab)
		for _, t := range arrivalTimes(arr, &cfg, 0, cfg.DurationS, cfg.Rate) {
			single(t, 0, system, suffix())
		}
	case KindMultiTenant:
		systems := make([][]int32, cfg.Groups)
		for g := range systems {
			systems[g] = tok.tokens(nil, cfg.SystemTokens, cfg.Vocab)
		}
		cdf := zipfCDF(cfg.Groups, cfg.ZipfS)
		for _, t := range arrivalTimes(arr, &cfg, 0, cfg.DurationS, cfg.Rate) {
			g := pick(cdf, grp.float64())
			single(t, g, systems[g], suffix())
		}
	case KindNoReuse:
		for _, t := range arrivalTimes(arr, &cfg, 0, cfg.DurationS, cfg.Rate) {
			single(t, -1, nil, tok.tokens(nil, lens.between(cfg.PromptMin, cfg.PromptMax), cfg.Vocab))
		}
	case KindSiblings:
		for g, t := range arrivalTimes(arr, &cfg, 0, cfg.DurationS, cfg.Rate) {
			p := tok.tokens(nil, lens.between(cfg.PromptMin, cfg.PromptMax), cfg.Vocab)
			for range cfg.Siblings {
				single(t, g, p, nil)
			}
		}
	case KindConversation, KindFollowUp:
		// Conversations; followup turns may also come while the previous
		// one is in flight (follow is drawn only for followup).
		system := tok.tokens(nil, cfg.SystemTokens, cfg.Vocab)
		for c, t := range arrivalTimes(arr, &cfg, 0, cfg.DurationS, cfg.Rate) {
			s := Session{ConvID: fmt.Sprintf("conv-%d", c), Group: -1, Start: t, Prefix: system}
			for k := range lens.between(cfg.TurnsMin, cfg.TurnsMax) {
				turn := Turn{User: suffix(), Output: output()}
				switch {
				case k == 0:
				case cfg.Kind == KindFollowUp && follow.float64() < cfg.FollowUpP && !s.Turns[k-1].InFlight:
					turn.InFlight = true
					turn.Think = seconds(follow.exp(cfg.FollowUpS))
				default:
					turn.Think = seconds(think.exp(cfg.ThinkS))
				}
				s.Turns = append(s.Turns, turn)
			}
			w.Sessions = append(w.Sessions, s)
		}
	case KindTrace:
		w.fromTrace()
	case KindMix:
		if err := w.mix(); err != nil {
			return nil, err
		}
	case KindColdStart, KindTenantSpike:
		groups := 1
		if cfg.Kind == KindTenantSpike {
			groups = cfg.Groups
		}
		systems := make([][]int32, groups)
		for g := range systems {
			systems[g] = tok.tokens(nil, cfg.SystemTokens, cfg.Vocab)
		}
		cdf := zipfCDF(groups, cfg.ZipfS)
		one := func(t int64) {
			g := 0
			if groups > 1 {
				g = pick(cdf, grp.float64())
			}
			single(t, g, systems[g], suffix())
		}
		for t := 0.0; t < cfg.QuietS; t += cfg.QuietIntervalS {
			one(seconds(t))
		}
		spikeRate := cfg.SpikeFactor / cfg.QuietIntervalS
		for _, t := range arrivalTimes(arr, &cfg, cfg.QuietS, cfg.SpikeS, spikeRate) {
			one(t)
		}
		w.Window = &Window{Start: seconds(cfg.QuietS), End: seconds(cfg.QuietS + cfg.SpikeS)}
	}

	if cfg.JitterMS > 0 {
		jit := newSubRNG(cfg.Seed, streamJitter, cfg.JitterSeed)
		for i := range w.Sessions {
			w.Sessions[i].Start += int64(jit.float64() * cfg.JitterMS * 1e6)
		}
	}
	slices.SortStableFunc(w.Sessions, func(a, b Session) int {
		switch {
		case a.Start < b.Start:
			return -1
		case a.Start > b.Start:
			return 1
		}
		return 0
	})
	id := uint64(0)
	for i := range w.Sessions {
		for k := range w.Sessions[i].Turns {
			w.Sessions[i].Turns[k].ID = id
			id++
		}
	}
	return w, nil
}

// mix builds the sessions of a mix: each part's, generated from the part's
// own seed without jitter, its conversation ids prefixed with its index
// ("1/conv-3") and its groups numbered after the previous parts'. The
// window spans every part's window.
func (w *Workload) mix() error {
	cfg := &w.Config
	groups := 0
	for i, p := range cfg.Mix {
		p.Seed = newSubRNG(cfg.Seed, streamMix, uint64(i)).uint64()
		p.JitterMS, p.JitterSeed = 0, 0
		part, err := Generate(p)
		if err != nil {
			return fmt.Errorf("workload mix: part %d: %w", i, err)
		}
		top := -1
		for _, s := range part.Sessions {
			if s.ConvID != "" {
				s.ConvID = fmt.Sprintf("%d/%s", i, s.ConvID)
			}
			if s.Group >= 0 {
				top = max(top, s.Group)
				s.Group += groups
			}
			w.Sessions = append(w.Sessions, s)
		}
		groups += top + 1
		if win := part.Window; win != nil {
			if w.Window == nil {
				w.Window = &Window{Start: win.Start, End: win.End}
			} else {
				w.Window.Start, w.Window.End = min(w.Window.Start, win.Start), max(w.Window.End, win.End)
			}
		}
	}
	return nil
}

// zipfCDF returns the cumulative distribution of Zipf(s) over n groups.
func zipfCDF(n int, s float64) []float64 {
	cdf := make([]float64, n)
	sum := 0.0
	for g := range n {
		sum += math.Pow(float64(g+1), -s)
		cdf[g] = sum
	}
	for g := range cdf {
		cdf[g] /= sum
	}
	return cdf
}

// pick returns the first index whose cumulative probability exceeds u.
func pick(cdf []float64, u float64) int {
	i, _ := slices.BinarySearchFunc(cdf, u, func(c, u float64) int {
		if c <= u {
			return -1
		}
		return 1
	})
	return min(i, len(cdf)-1)
}
