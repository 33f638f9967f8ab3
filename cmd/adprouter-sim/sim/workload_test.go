package sim

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

func gen(t *testing.T, kind string, edit func(w *WorkloadConfig)) *Workload {
	t.Helper()
	wc, err := DefaultWorkload(kind)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(&wc)
	}
	w, err := Generate(wc)
	if err != nil {
		t.Fatalf("Generate(%+v): %v", wc, err)
	}
	return w
}

// checkCommon checks what every workload guarantees: sessions sorted by
// start, unique ids 0..n-1, valid tokens, outputs in range.
func checkCommon(t *testing.T, w *Workload) {
	t.Helper()
	cfg := w.Config
	if len(w.Sessions) == 0 {
		t.Fatal("no sessions")
	}
	next := uint64(0)
	for i, s := range w.Sessions {
		if i > 0 && s.Start < w.Sessions[i-1].Start {
			t.Fatalf("session %d starts before session %d", i, i-1)
		}
		for k, turn := range s.Turns {
			if turn.ID != next {
				t.Fatalf("session %d turn %d: id %d, want %d", i, k, turn.ID, next)
			}
			next++
			if turn.Output < cfg.OutputMin || turn.Output > cfg.OutputMax {
				t.Fatalf("output %d outside %d..%d", turn.Output, cfg.OutputMin, cfg.OutputMax)
			}
			p := w.Prompt(&w.Sessions[i], k)
			if len(p) == 0 {
				t.Fatal("empty prompt")
			}
			for _, tok := range p {
				if tok < 0 || int(tok) >= cfg.Vocab {
					t.Fatalf("token %d outside [0, %d)", tok, cfg.Vocab)
				}
			}
		}
	}
	if w.NumRequests() != int(next) {
		t.Errorf("NumRequests = %d, want %d", w.NumRequests(), next)
	}
}

func TestWorkloadShared(t *testing.T) {
	w := gen(t, KindShared, func(c *WorkloadConfig) { c.DurationS = 5; c.SystemTokens = 300; c.SuffixMin, c.SuffixMax = 10, 20 })
	checkCommon(t, w)
	sys := w.Sessions[0].Prefix
	if len(sys) != 300 {
		t.Fatalf("system prompt %d tokens, want 300", len(sys))
	}
	for i := range w.Sessions {
		p := w.Prompt(&w.Sessions[i], 0)
		if !slices.Equal(p[:300], sys) {
			t.Fatalf("request %d does not start with the system prompt", i)
		}
		if n := len(p) - 300; n < 10 || n > 20 {
			t.Fatalf("request %d: suffix of %d tokens, want 10..20", i, n)
		}
	}
	// Suffixes are unique: no two prompts share the first suffix block.
	seen := map[int32]int{}
	dups := 0
	for i := range w.Sessions {
		p := w.Prompt(&w.Sessions[i], 0)
		h := p[300] ^ p[301]<<8 ^ p[302]<<16
		if _, ok := seen[h]; ok {
			dups++
		}
		seen[h] = i
	}
	if dups > 1 {
		t.Errorf("%d suffixes repeat", dups)
	}
	// ~20 req/s over 5 s.
	if n := len(w.Sessions); n < 60 || n > 140 {
		t.Errorf("%d requests in 5 s at 20/s", n)
	}
}

func TestWorkloadMultiTenantZipf(t *testing.T) {
	tests := []struct {
		groups int
		s      float64
	}{{4, 1.0}, {8, 1.5}, {5, 0}}
	for _, tc := range tests {
		w := gen(t, KindMultiTenant, func(c *WorkloadConfig) {
			c.Groups, c.ZipfS, c.Rate, c.DurationS = tc.groups, tc.s, 2000, 10
			c.SystemTokens, c.SuffixMin, c.SuffixMax, c.OutputMin, c.OutputMax = 64, 1, 4, 1, 2
		})
		checkCommon(t, w)
		counts := make([]int, tc.groups)
		prefixOf := map[int][]int32{}
		for i := range w.Sessions {
			s := &w.Sessions[i]
			counts[s.Group]++
			if p, ok := prefixOf[s.Group]; ok && !slices.Equal(p, s.Prefix) {
				t.Fatalf("group %d has two system prompts", s.Group)
			}
			prefixOf[s.Group] = s.Prefix
		}
		if slices.Equal(prefixOf[0], prefixOf[1]) {
			t.Fatal("groups 0 and 1 share a system prompt")
		}
		var norm float64
		for g := range tc.groups {
			norm += math.Pow(float64(g+1), -tc.s)
		}
		n := float64(len(w.Sessions))
		for g, c := range counts {
			want := math.Pow(float64(g+1), -tc.s) / norm
			if got := float64(c) / n; math.Abs(got-want) > 0.02 {
				t.Errorf("groups %d, s %g: group %d share %.3f, want %.3f", tc.groups, tc.s, g, got, want)
			}
		}
	}
}

func TestWorkloadConversationGrowth(t *testing.T) {
	w := gen(t, KindConversation, func(c *WorkloadConfig) { c.DurationS = 10; c.TurnsMin, c.TurnsMax = 2, 5 })
	checkCommon(t, w)
	ids := map[string]bool{}
	for i := range w.Sessions {
		s := &w.Sessions[i]
		if s.ConvID == "" || ids[s.ConvID] {
			t.Fatalf("session %d: conversation id %q empty or reused", i, s.ConvID)
		}
		ids[s.ConvID] = true
		if len(s.Turns) < 2 || len(s.Turns) > 5 {
			t.Fatalf("session %d: %d turns, want 2..5", i, len(s.Turns))
		}
		prev := w.Prompt(s, 0)
		if !slices.Equal(prev[:512], s.Prefix) || len(s.Prefix) != 512 {
			t.Fatalf("session %d does not open with the 512-token system prompt", i)
		}
		for k := 1; k < len(s.Turns); k++ {
			p := w.Prompt(s, k)
			answer := w.OutputTokens(nil, s.Turns[k-1].ID, s.Turns[k-1].Output)
			want := append(append(slices.Clone(prev), answer...), s.Turns[k].User...)
			if !slices.Equal(p, want) {
				t.Fatalf("session %d turn %d: prompt is not previous prompt + answer + user message", i, k)
			}
			if s.Turns[k].Think <= 0 {
				t.Fatalf("session %d turn %d: think time %d", i, k, s.Turns[k].Think)
			}
			prev = p
		}
		if s.Turns[0].Think != 0 {
			t.Fatalf("first turn has a think time")
		}
	}
	// The same id always yields the same answer; different ids differ.
	a := w.OutputTokens(nil, 5, 50)
	if !slices.Equal(a, w.OutputTokens(nil, 5, 50)) || slices.Equal(a, w.OutputTokens(nil, 6, 50)) {
		t.Error("OutputTokens is not a function of the id")
	}
}

func TestWorkloadNoReuse(t *testing.T) {
	w := gen(t, KindNoReuse, func(c *WorkloadConfig) { c.DurationS = 5; c.PromptMin, c.PromptMax = 40, 90 })
	checkCommon(t, w)
	first := map[uint64]bool{}
	for i := range w.Sessions {
		p := w.Prompt(&w.Sessions[i], 0)
		if len(p) < 40 || len(p) > 90 {
			t.Fatalf("prompt of %d tokens, want 40..90", len(p))
		}
		h := AppendBlockHashes(nil, p, 32)[0]
		if first[h] {
			t.Fatalf("two prompts share their first block")
		}
		first[h] = true
	}
}

func TestWorkloadSiblings(t *testing.T) {
	w := gen(t, KindSiblings, func(c *WorkloadConfig) { c.DurationS = 10; c.Siblings = 5 })
	checkCommon(t, w)
	byGroup := map[int][]*Session{}
	for i := range w.Sessions {
		s := &w.Sessions[i]
		byGroup[s.Group] = append(byGroup[s.Group], s)
	}
	for g, ss := range byGroup {
		if len(ss) != 5 {
			t.Fatalf("burst %d has %d samples, want 5", g, len(ss))
		}
		p := w.Prompt(ss[0], 0)
		for _, s := range ss[1:] {
			if s.Start != ss[0].Start || !slices.Equal(w.Prompt(s, 0), p) {
				t.Fatalf("burst %d: samples differ in arrival or prompt", g)
			}
		}
	}
	if len(byGroup) < 10 || len(byGroup) > 45 {
		t.Errorf("%d bursts in 10 s at 2.5/s", len(byGroup))
	}
}

func TestWorkloadColdStart(t *testing.T) {
	w := gen(t, KindColdStart, func(c *WorkloadConfig) { c.QuietS, c.QuietIntervalS, c.SpikeS, c.SpikeFactor = 30, 2, 20, 40 })
	checkCommon(t, w)
	if w.Window == nil || w.Window.Start != seconds(30) || w.Window.End != seconds(50) {
		t.Fatalf("window %+v, want [30 s, 50 s)", w.Window)
	}
	var quiet, spike []int64
	for _, s := range w.Sessions {
		if s.Start < w.Window.Start {
			quiet = append(quiet, s.Start)
		} else {
			spike = append(spike, s.Start)
		}
		if len(s.Prefix) != 4096 {
			t.Fatalf("request without the 4096-token system prompt")
		}
	}
	if len(quiet) != 15 {
		t.Fatalf("%d quiet requests, want 15", len(quiet))
	}
	for i := 1; i < len(quiet); i++ {
		if quiet[i]-quiet[i-1] != seconds(2) {
			t.Fatalf("quiet requests %d and %d are %d ns apart, want 2 s", i-1, i, quiet[i]-quiet[i-1])
		}
	}
	// Spike rate: 40 x 0.5/s = 20/s over 20 s = 400 expected.
	if n := len(spike); n < 340 || n > 460 {
		t.Errorf("%d spike requests, want about 400", n)
	}
	quietRate := float64(len(quiet)) / 30
	spikeRate := float64(len(spike)) / 20
	if r := spikeRate / quietRate; r < 30 || r > 50 {
		t.Errorf("spike/quiet rate %.1f, want about 40", r)
	}
}

func TestWorkloadBursty(t *testing.T) {
	w := gen(t, KindNoReuse, func(c *WorkloadConfig) {
		c.Arrival, c.BurstSize, c.Rate, c.DurationS = ArrivalBursty, 10, 100, 50
		c.PromptMin, c.PromptMax, c.OutputMin, c.OutputMax = 1, 2, 1, 1
	})
	checkCommon(t, w)
	instants := map[int64]int{}
	for _, s := range w.Sessions {
		instants[s.Start]++
	}
	n := float64(len(w.Sessions))
	if rate := n / 50; rate < 80 || rate > 120 {
		t.Errorf("mean rate %.1f, want about 100", rate)
	}
	if mean := n / float64(len(instants)); mean < 8 || mean > 12 {
		t.Errorf("mean burst %.2f, want about 10", mean)
	}
}

// Arrival jitter delays each session by less than JitterMS and changes
// nothing else: the same sessions, turns and prompts, in order of their new
// starts, request ids renumbered in that order. Its draws depend on the
// seed and JitterSeed alone, and a burst no longer arrives at one instant.
func TestWorkloadJitter(t *testing.T) {
	edit := func(c *WorkloadConfig) {
		c.Arrival, c.BurstSize, c.Rate, c.DurationS = ArrivalBursty, 8, 40, 10
		c.PromptMin, c.PromptMax, c.OutputMin, c.OutputMax = 40, 60, 1, 3
	}
	jittered := func(ms float64, draw uint64) *Workload {
		return gen(t, KindNoReuse, func(c *WorkloadConfig) { edit(c); c.JitterMS, c.JitterSeed = ms, draw })
	}
	base := gen(t, KindNoReuse, edit)
	if zero := jittered(0, 5); !slices.EqualFunc(zero.Sessions, base.Sessions, func(a, b Session) bool { return a.Start == b.Start }) {
		t.Error("jitter 0 moved arrivals")
	}
	// Each unique prompt names its session.
	start := map[string]int64{}
	for i := range base.Sessions {
		start[fmt.Sprint(base.Prompt(&base.Sessions[i], 0))] = base.Sessions[i].Start
	}
	const ms = 2
	w := jittered(ms, 1)
	checkCommon(t, w) // in order of start, ids renumbered
	if len(w.Sessions) != len(base.Sessions) {
		t.Fatalf("%d sessions, want %d", len(w.Sessions), len(base.Sessions))
	}
	moved, instants := 0, map[int64]bool{}
	for i := range w.Sessions {
		s := &w.Sessions[i]
		b, ok := start[fmt.Sprint(w.Prompt(s, 0))]
		if d := s.Start - b; !ok || d < 0 || d >= ms*1e6 {
			t.Fatalf("session %d: start %d, unjittered %d (found %v): want a delay in [0, %d ms)", i, s.Start, b, ok, ms)
		}
		if s.Start != b {
			moved++
		}
		instants[s.Start] = true
	}
	bursts := map[int64]bool{}
	for _, s := range base.Sessions {
		bursts[s.Start] = true
	}
	if moved < len(w.Sessions)*9/10 || len(bursts) >= len(base.Sessions) || len(instants) != len(w.Sessions) {
		t.Errorf("%d of %d sessions moved, %d arrival instants (unjittered %d): want nearly all moved, every burst spread",
			moved, len(w.Sessions), len(instants), len(bursts))
	}
	again, other := jittered(ms, 1), jittered(ms, 2)
	same := func(x, y *Workload) bool {
		return slices.EqualFunc(x.Sessions, y.Sessions, func(a, b Session) bool { return a.Start == b.Start })
	}
	if !same(w, again) || same(w, other) {
		t.Errorf("draw 1 twice the same: %v; draws 1 and 2 the same: %v; want true, false", same(w, again), same(w, other))
	}
}

func TestWorkloadDeterministic(t *testing.T) {
	for _, kind := range Kinds {
		edit := func(c *WorkloadConfig) { c.DurationS = 3; c.QuietS, c.SpikeS = 6, 1 }
		a, b := gen(t, kind, edit), gen(t, kind, edit)
		c := gen(t, kind, func(c *WorkloadConfig) { edit(c); c.Seed = 2 })
		same := func(x, y *Workload) bool {
			if len(x.Sessions) != len(y.Sessions) {
				return false
			}
			for i := range x.Sessions {
				sx, sy := &x.Sessions[i], &y.Sessions[i]
				if sx.Start != sy.Start || sx.ConvID != sy.ConvID || len(sx.Turns) != len(sy.Turns) {
					return false
				}
				for k := range sx.Turns {
					if sx.Turns[k].Output != sy.Turns[k].Output || sx.Turns[k].Think != sy.Turns[k].Think ||
						!slices.Equal(x.Prompt(sx, k), y.Prompt(sy, k)) {
						return false
					}
				}
			}
			return true
		}
		if !same(a, b) {
			t.Errorf("%s: same seed, different workloads", kind)
		}
		if same(a, c) {
			t.Errorf("%s: seeds 1 and 2 give the same workload", kind)
		}
	}
}

func TestWorkloadValidate(t *testing.T) {
	tests := []struct {
		kind string
		edit func(c *WorkloadConfig)
		want string
	}{
		{"nope", nil, "unknown workload"},
		{KindShared, func(c *WorkloadConfig) { c.Rate = 0 }, "rate"},
		{KindShared, func(c *WorkloadConfig) { c.DurationS = math.Inf(1) }, "duration_s"},
		{KindShared, func(c *WorkloadConfig) { c.Arrival = "uniform" }, "arrival"},
		{KindShared, func(c *WorkloadConfig) { c.Arrival, c.BurstSize = ArrivalBursty, 0.5 }, "burst_size"},
		{KindShared, func(c *WorkloadConfig) { c.OutputMin = 0 }, "output_min"},
		{KindShared, func(c *WorkloadConfig) { c.SuffixMin, c.SuffixMax = 5, 4 }, "suffix_min"},
		{KindShared, func(c *WorkloadConfig) { c.SystemTokens, c.SuffixMin = 0, 0 }, "system_tokens + suffix_min"},
		{KindMultiTenant, func(c *WorkloadConfig) { c.Groups = 0 }, "groups"},
		{KindMultiTenant, func(c *WorkloadConfig) { c.ZipfS = math.NaN() }, "zipf_s"},
		{KindConversation, func(c *WorkloadConfig) { c.TurnsMin = 0 }, "turns_min"},
		{KindConversation, func(c *WorkloadConfig) { c.ThinkS = -1 }, "think_s"},
		{KindFollowUp, func(c *WorkloadConfig) { c.FollowUpP = 1.5 }, "followup_p"},
		{KindFollowUp, func(c *WorkloadConfig) { c.FollowUpS = math.NaN() }, "followup_s"},
		{KindFollowUp, func(c *WorkloadConfig) { c.TurnsMax = 0 }, "turns_min"},
		{KindNoReuse, func(c *WorkloadConfig) { c.PromptMin = 0 }, "prompt_min"},
		{KindSiblings, func(c *WorkloadConfig) { c.Siblings = 0 }, "siblings"},
		{KindColdStart, func(c *WorkloadConfig) { c.QuietIntervalS = 0 }, "quiet_interval_s"},
		{KindColdStart, func(c *WorkloadConfig) { c.SpikeFactor = -1 }, "spike_factor"},
		{KindColdStart, func(c *WorkloadConfig) { c.Vocab = 1 }, "vocab"},
		{KindShared, func(c *WorkloadConfig) { c.JitterMS = -1 }, "jitter_ms"},
		{KindShared, func(c *WorkloadConfig) { c.JitterMS = math.NaN() }, "jitter_ms"},
		{KindShared, func(c *WorkloadConfig) { c.JitterMS = math.Inf(1) }, "jitter_ms"},
	}
	for _, tc := range tests {
		wc, _ := DefaultWorkload(tc.kind)
		wc.Kind = tc.kind
		if tc.edit != nil {
			tc.edit(&wc)
		}
		_, err := Generate(wc)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %+v: error %v, want one naming %q", tc.kind, wc, err, tc.want)
		}
	}
	for _, kind := range Kinds {
		wc, _ := DefaultWorkload(kind)
		if err := wc.Validate(); err != nil {
			t.Errorf("default %s workload invalid: %v", kind, err)
		}
	}
}

func TestWorkloadFollowUp(t *testing.T) {
	w := gen(t, KindFollowUp, func(c *WorkloadConfig) { c.DurationS = 30; c.FollowUpP = 0.4 })
	checkCommon(t, w)
	turns, inflight := 0, 0
	for i := range w.Sessions {
		s := &w.Sessions[i]
		if s.ConvID == "" || len(s.Turns) < 2 || len(s.Turns) > 6 || s.Turns[0].InFlight {
			t.Fatalf("session %d: conversation id %q, %d turns, first in flight %v", i, s.ConvID, len(s.Turns), s.Turns[0].InFlight)
		}
		for k := 1; k < len(s.Turns); k++ {
			turns++
			prev, p := w.Prompt(s, k-1), w.Prompt(s, k)
			cur := s.Turns[k]
			if cur.Think <= 0 {
				t.Fatalf("session %d turn %d: delay %d", i, k, cur.Think)
			}
			answer := w.OutputTokens(nil, s.Turns[k-1].ID, s.Turns[k-1].Output)
			want := append(slices.Clone(prev), answer...)
			if cur.InFlight {
				inflight++
				want = slices.Clone(prev) // the whole previous prompt, no answer
				if s.Turns[k-1].InFlight {
					t.Fatalf("session %d turn %d: a follow-up of a follow-up", i, k)
				}
			}
			if !slices.Equal(p, append(want, cur.User...)) {
				t.Fatalf("session %d turn %d (in flight %v): prompt is not the history + user message", i, k, cur.InFlight)
			}
		}
	}
	// A turn after a turn in flight cannot be; of the others, 40%.
	if f := float64(inflight) / float64(turns); f < 0.2 || f > 0.45 {
		t.Errorf("%d of %d later turns in flight", inflight, turns)
	}
	if w := gen(t, KindFollowUp, func(c *WorkloadConfig) { c.FollowUpP = 0 }); slices.ContainsFunc(w.Sessions, func(s Session) bool {
		return slices.ContainsFunc(s.Turns, func(t Turn) bool { return t.InFlight })
	}) {
		t.Error("follow-ups with followup_p 0")
	}
}

// A mix holds every part's sessions, each part drawn from a seed of its own
// (so two parts of one kind differ, and the same seed gives the same mix),
// conversation ids and groups renamed apart, the spike's window kept, and
// the sessions in order of arrival with ids numbered across the parts.
func TestWorkloadMix(t *testing.T) {
	part := func(kind string) WorkloadConfig {
		w, err := DefaultWorkload(kind)
		if err != nil {
			t.Fatal(err)
		}
		w.DurationS = 20
		return w
	}
	parts := []WorkloadConfig{part(KindConversation), part(KindConversation), part(KindMultiTenant), part(KindColdStart)}
	cfg := MixWorkload(parts...)
	cfg.Seed = 7
	w, err := Generate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkCommon(t, w)
	if got := cfg.Name(); got != "conversation+conversation+multitenant+coldstart" {
		t.Errorf("Name() = %q", got)
	}
	alone := 0
	for i, p := range parts {
		p.Seed = newSubRNG(cfg.Seed, streamMix, uint64(i)).uint64()
		pw, err := Generate(p)
		if err != nil {
			t.Fatal(err)
		}
		alone += pw.NumRequests()
		if p.Kind == KindColdStart && (w.Window == nil || *w.Window != *pw.Window) {
			t.Errorf("window %v, want the cold start's %v", w.Window, pw.Window)
		}
	}
	if w.NumRequests() != alone {
		t.Errorf("%d requests, want the parts' %d", w.NumRequests(), alone)
	}
	convs := map[string]bool{}
	firstTurns := map[string][]int32{} // a conversation's first prompt, by part
	groups := map[int]bool{}
	for i := range w.Sessions {
		s := &w.Sessions[i]
		if s.ConvID != "" {
			if convs[s.ConvID] {
				t.Fatalf("conversation id %s twice", s.ConvID)
			}
			convs[s.ConvID] = true
			p, _, _ := strings.Cut(s.ConvID, "/")
			if _, ok := firstTurns[p]; !ok {
				firstTurns[p] = w.Prompt(s, 0)
			}
		}
		if s.Group >= 0 {
			groups[s.Group] = true
		}
	}
	if len(firstTurns) != 2 || slices.Equal(firstTurns["0"][:64], firstTurns["1"][:64]) {
		t.Errorf("conversation parts: %d, first prompts alike: the two conversation parts must be drawn apart", len(firstTurns))
	}
	// multitenant's 16 groups, then the cold start's one.
	if len(groups) != 17 || !groups[16] {
		t.Errorf("groups %v, want 0..16", groups)
	}
	again, _ := Generate(cfg)
	if !slices.EqualFunc(w.Sessions, again.Sessions, func(a, b Session) bool {
		return a.Start == b.Start && a.ConvID == b.ConvID && slices.Equal(a.Prefix, b.Prefix)
	}) {
		t.Error("the same mix generated twice differs")
	}
	cfg.Seed = 8
	other, _ := Generate(cfg)
	if other.Sessions[0].Start == w.Sessions[0].Start && slices.Equal(other.Sessions[0].Prefix, w.Sessions[0].Prefix) {
		t.Error("seed 8 gives seed 7's mix")
	}

	for _, tc := range []struct {
		name string
		edit func(c *WorkloadConfig)
		want string
	}{
		{"no part", func(c *WorkloadConfig) { c.Mix = nil }, "no part"},
		{"nested", func(c *WorkloadConfig) { c.Mix = append(c.Mix, MixWorkload(part(KindShared))) }, "part 4 is a mix"},
		{"bad part", func(c *WorkloadConfig) { c.Mix[2].Groups = 0 }, "part 2: workload multitenant: groups"},
		{"vocab", func(c *WorkloadConfig) { c.Vocab = 1 }, "vocab"},
		{"jitter", func(c *WorkloadConfig) { c.JitterMS = math.Inf(1) }, "jitter_ms"},
	} {
		c := MixWorkload(parts...)
		tc.edit(&c)
		if _, err := Generate(c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.name, err, tc.want)
		}
	}
}
