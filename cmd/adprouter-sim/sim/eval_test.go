package sim

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/adprouter/adprouter/router"
)

func evalTraces(t *testing.T) []EvalTrace {
	t.Helper()
	traces, err := LoadEvalTraces(os.DirFS("../testdata"), "mooncake")
	if err != nil {
		t.Fatal(err)
	}
	return traces
}

// The Mooncake slices load, each in its family, in name order.
func TestLoadEvalTraces(t *testing.T) {
	traces := evalTraces(t)
	var fams []string
	for _, tr := range traces {
		if len(tr.Workload.TraceRecords) < 100 || tr.Workload.Kind != KindTrace {
			t.Errorf("%s: %d records, kind %s", tr.Workload.Trace, len(tr.Workload.TraceRecords), tr.Workload.Kind)
		}
		if !slices.Contains(fams, tr.Family) {
			fams = append(fams, tr.Family)
		}
	}
	if !slices.Equal(fams, []string{"conversation", "synthetic"}) {
		t.Errorf("families %v, want conversation, synthetic", fams)
	}
}

// The grids: every family, engine shape and reuse-relevant case named once;
// the quick grid a subset of the full one; the issue's cases present.
func TestEvalGrid(t *testing.T) {
	traces := evalTraces(t)
	full, err := EvalGrid(EvalFull, traces)
	if err != nil {
		t.Fatal(err)
	}
	quick, err := EvalGrid(EvalQuick, traces)
	if err != nil {
		t.Fatal(err)
	}
	names := caseNames(t, full)
	fams := map[string]bool{}
	shapes := map[int]bool{}
	for _, c := range full {
		fams[c.Family] = true
		shapes[c.Engine.DPSize] = true
	}
	for _, c := range quick {
		if !names[c.Family+"/"+c.Name] {
			t.Errorf("quick case %s/%s is not in the full grid", c.Family, c.Name)
		}
		delete(fams, c.Family)
	}
	if len(fams) > 0 {
		t.Errorf("families without a quick case: %v", fams)
	}
	for _, dp := range []int{4, 8, 16, 32} {
		if !shapes[dp] {
			t.Errorf("no case on %d ranks", dp)
		}
	}
	for _, want := range []string{
		"tenant-spike/tenants=6 zipf=1.1 sys=3000 spike=2s seed=1 dp8",
		"conversation-cold/sys=1200 think=2s bursty(8) 8/s seed=1 dp8",
		"siblings/samples=8 seed=1 dp8",
		"noreuse/prompt=256-2048 seed=1 dp8",
		"trace-conversation/conversation-1512.jsonl time=1 len=0.5 dp8",
		"trace-synthetic/synthetic-636.jsonl time=1 len=0.5 budget2k",
	} {
		if !names[want] {
			t.Errorf("no case %s", want)
		}
	}
	if _, err := EvalGrid("huge", traces); err == nil {
		t.Error("unknown grid accepted")
	}
}

// EvalGridScaled replays the trace slices at the scales given, the first
// on every engine shape, leaves the generated cases as EvalGrid makes them,
// and refuses scales that are not positive and finite.
func TestEvalGridScaled(t *testing.T) {
	traces := evalTraces(t)
	full, err := EvalGrid(EvalFull, traces)
	if err != nil {
		t.Fatal(err)
	}
	same, err := EvalGridScaled(EvalFull, traces, EvalTraceScales())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(full, same) {
		t.Error("EvalGridScaled at EvalTraceScales differs from EvalGrid")
	}
	scales := []TraceScale{{0.2, 0.5}, {0.1, 1}}
	scaled, err := EvalGridScaled(EvalFull, traces, scales)
	if err != nil {
		t.Fatal(err)
	}
	generated := func(cs []EvalCase) []EvalCase {
		return slices.DeleteFunc(slices.Clone(cs), func(c EvalCase) bool { return c.Trace })
	}
	if !reflect.DeepEqual(generated(full), generated(scaled)) {
		t.Error("the generated cases changed with the trace scales")
	}
	var trace []EvalCase
	for _, c := range scaled {
		if c.Trace {
			trace = append(trace, c)
		}
	}
	// Per slice: both scales on the default engine, the first on every
	// other shape.
	if want := len(traces) * (len(scales) + len(evalShapes)); len(trace) != want {
		t.Fatalf("%d trace cases, want %d", len(trace), want)
	}
	for _, c := range trace {
		load := float64(c.Engine.DPSize) / float64(shapeDefault.dp)
		switch {
		case strings.HasSuffix(c.Name, " time=0.1 len=1 dp8"):
			if c.Workload.TraceTimeScale != 0.1 || c.Workload.TraceLengthScale != 1 {
				t.Errorf("%s: scales %g, %g", c.Name, c.Workload.TraceTimeScale, c.Workload.TraceLengthScale)
			}
		case strings.Contains(c.Name, " time=0.2 len=0.5 "):
			if c.Workload.TraceTimeScale != 0.2/load || c.Workload.TraceLengthScale != 0.5 {
				t.Errorf("%s on %d ranks: scales %g, %g, want %g, 0.5", c.Name, c.Engine.DPSize,
					c.Workload.TraceTimeScale, c.Workload.TraceLengthScale, 0.2/load)
			}
		default:
			t.Errorf("trace case %s/%s at a scale not asked for", c.Family, c.Name)
		}
	}
	quick, err := EvalGridScaled(EvalQuick, traces, scales[:1])
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range quick {
		if c.Trace && !strings.Contains(c.Name, " time=0.2 len=0.5 ") {
			t.Errorf("quick grid with one scale: trace case %s", c.Name)
		}
	}
	for _, bad := range [][]TraceScale{nil, {{0, 1}}, {{1, -0.5}}, {{math.Inf(1), 1}}, {{1, math.NaN()}}} {
		if _, err := EvalGridScaled(EvalFull, traces, bad); err == nil {
			t.Errorf("scales %v accepted", bad)
		}
	}
}

// StretchDurations lengthens the arrivals of every generated steady case and
// leaves the spikes, the trace slices and the input as they were (a changed
// input would fail the comparison below); it refuses a scale that is not
// positive and finite.
func TestStretchDurations(t *testing.T) {
	cases, err := EvalGrid(EvalQuick, evalTraces(t))
	if err != nil {
		t.Fatal(err)
	}
	long, err := StretchDurations(cases, 10)
	if err != nil {
		t.Fatal(err)
	}
	stretched, kept := 0, 0
	for i, c := range long {
		o := cases[i]
		spike := o.Workload.Kind == KindColdStart || o.Workload.Kind == KindTenantSpike
		want := o.Workload.DurationS
		if !o.Trace && !spike {
			want *= 10
			stretched++
		} else {
			kept++
		}
		if c.Workload.DurationS != want || c.Name != o.Name {
			t.Errorf("case %s: %s, %g s; want %g s, the same name", o.Name, c.Name, c.Workload.DurationS, want)
		}
		if err := c.Workload.Validate(); err != nil {
			t.Errorf("case %s: %v", c.Name, err)
		}
	}
	if stretched == 0 || kept == 0 {
		t.Errorf("%d cases stretched, %d kept: the quick grid should have both", stretched, kept)
	}
	for _, by := range []float64{0, -1, math.Inf(1), math.NaN()} {
		if _, err := StretchDurations(cases, by); err == nil {
			t.Errorf("scale %g accepted", by)
		}
	}
}

// WithIterationTime and WithMaxActive give every case, trace cases too,
// the engine setting asked for and nothing else, leave the input as it
// was, and refuse a setting that makes the engine invalid.
func TestEngineShifts(t *testing.T) {
	cases, err := EvalGrid(EvalQuick, evalTraces(t))
	if err != nil {
		t.Fatal(err)
	}
	model := DefaultEngine()
	model.IterBaseMs, model.PrefillUsPerToken, model.DecodeUsPerSeq = 10, 80, 200
	model.DPSize = 3 // not part of the model: no case takes it
	for _, tc := range []struct {
		name  string
		apply func([]EvalCase) ([]EvalCase, error)
		set   func(*EngineConfig)
		bad   []func([]EvalCase) ([]EvalCase, error)
	}{
		{
			name:  "iteration time",
			apply: func(c []EvalCase) ([]EvalCase, error) { return WithIterationTime(c, model) },
			set: func(e *EngineConfig) {
				e.IterBaseMs, e.PrefillUsPerToken, e.DecodeUsPerSeq = 10, 80, 200
			},
			bad: []func([]EvalCase) ([]EvalCase, error){
				func(c []EvalCase) ([]EvalCase, error) {
					return WithIterationTime(c, EngineConfig{PrefillUsPerToken: -1})
				},
				func(c []EvalCase) ([]EvalCase, error) {
					return WithIterationTime(c, EngineConfig{IterBaseMs: math.Inf(1)})
				},
				func(c []EvalCase) ([]EvalCase, error) { return WithIterationTime(c, EngineConfig{}) },
			},
		},
		{
			name:  "max active",
			apply: func(c []EvalCase) ([]EvalCase, error) { return WithMaxActive(c, 16) },
			set:   func(e *EngineConfig) { e.MaxActive = 16 },
			bad: []func([]EvalCase) ([]EvalCase, error){
				func(c []EvalCase) ([]EvalCase, error) { return WithMaxActive(c, 0) },
				// More slots than a rank's iteration has tokens for.
				func(c []EvalCase) ([]EvalCase, error) { return WithMaxActive(c, DefaultEngine().MaxNumTokens) },
			},
		},
	} {
		out, err := tc.apply(cases)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		traces := 0
		for i, c := range out {
			o := cases[i]
			want := o.Engine
			tc.set(&want)
			if !reflect.DeepEqual(c.Engine, want) || c.Name != o.Name || !reflect.DeepEqual(c.Workload, o.Workload) {
				t.Errorf("%s: case %s: engine %+v, want %+v and the same case", tc.name, o.Name, c.Engine, want)
			}
			if def := DefaultEngine(); o.Engine.PrefillUsPerToken != def.PrefillUsPerToken || o.Engine.MaxActive != def.MaxActive {
				t.Errorf("%s: case %s: the input changed: %+v", tc.name, o.Name, o.Engine)
			}
			if c.Trace {
				traces++
			}
		}
		if traces == 0 {
			t.Errorf("%s: the quick grid has no trace case to check", tc.name)
		}
		for j, bad := range tc.bad {
			if _, err := bad(cases); err == nil {
				t.Errorf("%s: invalid setting %d accepted", tc.name, j)
			}
		}
	}
}

// ShiftSeeds moves every generated case to other seeds, names included, and
// leaves the trace slices and the input as they were.
func TestShiftSeeds(t *testing.T) {
	cases, err := EvalGrid(EvalQuick, evalTraces(t))
	if err != nil {
		t.Fatal(err)
	}
	shifted := ShiftSeeds(cases, 10)
	if len(shifted) != len(cases) {
		t.Fatalf("%d cases, want %d", len(shifted), len(cases))
	}
	traces := 0
	for i, c := range shifted {
		o := cases[i]
		if o.Trace {
			traces++
			if c.Name != o.Name || c.Workload.Seed != o.Workload.Seed {
				t.Errorf("trace case %s changed to %s, seed %d", o.Name, c.Name, c.Workload.Seed)
			}
			continue
		}
		want := strings.Replace(o.Name, fmt.Sprintf("seed=%d ", o.Workload.Seed), fmt.Sprintf("seed=%d ", o.Workload.Seed+10), 1)
		if c.Workload.Seed != o.Workload.Seed+10 || c.Name != want || c.Name == o.Name {
			t.Errorf("case %s: shifted to %s, seed %d; want %s, seed %d", o.Name, c.Name, c.Workload.Seed, want, o.Workload.Seed+10)
		}
		if err := c.Workload.Validate(); err != nil {
			t.Errorf("case %s: %v", c.Name, err)
		}
	}
	if traces == 0 {
		t.Error("the quick grid has no trace case to leave alone")
	}
	if cases[0].Workload.Seed == shifted[0].Workload.Seed && !cases[0].Trace {
		t.Error("ShiftSeeds changed its input")
	}
}

// JitterArrivals sets the jitter of every generated case, leaves the trace
// slices, the names and the input as they were, and refuses a jitter that
// is negative or not finite.
func TestJitterArrivals(t *testing.T) {
	cases, err := EvalGrid(EvalQuick, evalTraces(t))
	if err != nil {
		t.Fatal(err)
	}
	out, err := JitterArrivals(cases, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	jittered, traces := 0, 0
	for i, c := range out {
		o := cases[i]
		if o.Workload.JitterMS != 0 || c.Name != o.Name {
			t.Fatalf("case %s: input jitter %g ms, name %s: want the input unchanged", o.Name, o.Workload.JitterMS, c.Name)
		}
		want := WorkloadConfig{JitterMS: 2, JitterSeed: 3}
		if o.Trace {
			want = WorkloadConfig{}
			traces++
		} else {
			jittered++
		}
		if c.Workload.JitterMS != want.JitterMS || c.Workload.JitterSeed != want.JitterSeed {
			t.Errorf("case %s: jitter %g ms, draw %d; want %g, %d", c.Name, c.Workload.JitterMS, c.Workload.JitterSeed,
				want.JitterMS, want.JitterSeed)
		}
		if err := c.Workload.Validate(); err != nil {
			t.Errorf("case %s: %v", c.Name, err)
		}
	}
	if jittered == 0 || traces == 0 {
		t.Errorf("%d cases jittered, %d traces kept: the quick grid should have both", jittered, traces)
	}
	for _, ms := range []float64{-1, math.Inf(1), math.NaN()} {
		if _, err := JitterArrivals(cases, ms, 1); err == nil {
			t.Errorf("jitter %g ms accepted", ms)
		}
	}
}

// An evaluation is a pure function of its options: the same bytes whatever
// the parallelism.
func TestRunEvalDeterministic(t *testing.T) {
	cases, err := EvalGrid(EvalQuick, evalTraces(t))
	if err != nil {
		t.Fatal(err)
	}
	cases = cases[:3]
	v := mustVariants(t, VariantRecommended)[0]
	var outs []string
	for _, par := range []int{1, 3} {
		ev, err := RunEval(EvalOptions{Grid: "test", Cases: cases, Variant: v, Parallel: par})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := ev.WriteJSON(&b); err != nil {
			t.Fatal(err)
		}
		if err := ev.WriteEval(&b, 5); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, b.String())
	}
	if outs[0] != outs[1] {
		t.Error("evaluation differs with the parallelism")
	}
	if !strings.Contains(outs[0], `"reference_scale"`) || !strings.Contains(outs[0], "for scale, each reference") {
		t.Error("evaluation lacks the references' scale")
	}
	if _, err := RunEval(EvalOptions{Cases: cases, Variant: mustVariants(t, VariantKVCacheAware)[0]}); err == nil ||
		!strings.Contains(err.Error(), "reference") {
		t.Errorf("judging a reference: %v", err)
	}
	if _, err := RunEval(EvalOptions{Variant: v}); err == nil {
		t.Error("an evaluation without cases ran")
	}
}

// The verdict: a cell over either bound is a miss; a family wins on the
// geometric mean of its cells' p99 ratios; a semantics needs
// EvalWinFamilies winning families, a trace family among them.
func TestEvalVerdict(t *testing.T) {
	cell := func(fam, reuse string, prefill, p99 float64) EvalCell {
		return EvalCell{Family: fam, Case: "c", Reuse: reuse, Best: VariantKVCacheAware, Prefill: prefill, P99: p99}
	}
	e := &Evaluation{Reuse: []string{ReuseAfterIteration}, Cases: []EvalCase{
		{Family: "a"}, {Family: "b"}, {Family: "trace-x", Trace: true}}}
	e.Cells = []EvalCell{
		cell("a", ReuseAfterIteration, 1.00, 0.70), cell("a", ReuseAfterIteration, 1.02, 0.85),
		cell("b", ReuseAfterIteration, 1.00, 0.60), cell("b", ReuseAfterIteration, 1.00, 1.10),
		cell("trace-x", ReuseAfterIteration, 1.03, 0.50),
	}
	e.summarise()
	got := map[string]EvalFamily{}
	for _, f := range e.Families {
		got[f.Family] = f
	}
	if !got["a"].Win() || got["a"].Misses != 0 || got["a"].WinCells != 1 {
		t.Errorf("family a: %+v, want a win (geomean %.3f), no miss", got["a"], got["a"].P99GeoMean)
	}
	if got["b"].Win() || got["b"].Misses != 1 {
		t.Errorf("family b: %+v, want no win, one miss", got["b"])
	}
	if !got["trace-x"].Win() || got["trace-x"].Misses != 1 {
		t.Errorf("family trace-x: %+v, want a win and a (prefill) miss", got["trace-x"])
	}
	// Two misses, and the wins goal met (a and trace-x).
	if len(e.Problems) != 2 || e.Pass() {
		t.Errorf("problems %q, want the two missed cells", e.Problems)
	}
	var b bytes.Buffer
	if err := e.WriteEval(&b, 2); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"MISS", "verdict: FAIL, 2 goals missed", "x win"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
	// Without a trace family among the wins: a problem of its own.
	e.Cells[4].P99 = 0.95
	e.Cells[4].Prefill = 1
	e.summarise()
	if e.Pass() || !strings.Contains(strings.Join(e.Problems, "\n"), "no trace family") {
		t.Errorf("problems %q, want the missing trace win", e.Problems)
	}
	if got["a"].FloorGeoMean != 0 {
		t.Errorf("family a without floors: floor geomean %v, want 0 (unknown)", got["a"].FloorGeoMean)
	}

	// The floor: the geometric mean of floor over best p99; a trace family
	// whose floor is above GoalWin is named in the problem as unwinnable.
	e.Cells[4].FloorP99Ms, e.Cells[4].BestP99Ms = 9, 10
	e.summarise()
	for _, f := range e.Families {
		if f.Family == "trace-x" && f.FloorGeoMean != 0.9 {
			t.Errorf("trace-x floor geomean %v, want 0.9", f.FloorGeoMean)
		}
	}
	if p := strings.Join(e.Problems, "\n"); !strings.Contains(p, "the least any router can reach: trace-x 0.90x") {
		t.Errorf("problems %q, want trace-x's floor named", p)
	}
	e.Cells[4].FloorP99Ms = 7
	e.summarise()
	if p := strings.Join(e.Problems, "\n"); !strings.Contains(p, "no trace family") || strings.Contains(p, "least any router") {
		t.Errorf("problems %q, want the missing trace win without a floor (0.70x is reachable)", p)
	}

	// The mixed grid is judged on its cells alone: the same cells, no
	// trace family won, and only the missed cell is a problem.
	e.CellGoalsOnly = true
	e.summarise()
	if len(e.Problems) != 1 || !strings.Contains(e.Problems[0], "b/c") {
		t.Errorf("mixed grid: problems %q, want the one missed cell", e.Problems)
	}
}

// The scale judges each reference against the best of the others, by the
// same goals: the best is the lowest p99 (ties: less prefill), the
// reference itself left out.
func TestEvalScale(t *testing.T) {
	f := func(prefill int64, p99 float64) evalFigures { return evalFigures{prefill: prefill, p99: p99} }
	for _, tc := range []struct {
		name       string
		figs       []evalFigures
		skip, best int
	}{
		{"lowest p99", []evalFigures{f(100, 30), f(90, 20), f(80, 25)}, -1, 1},
		{"itself left out", []evalFigures{f(100, 30), f(90, 20), f(80, 25)}, 1, 2},
		{"tie on p99: less prefill", []evalFigures{f(100, 20), f(90, 20), f(80, 25)}, -1, 1},
		{"tie on both: the first", []evalFigures{f(90, 20), f(90, 20)}, -1, 0},
		{"first left out", []evalFigures{f(90, 20), f(90, 20)}, 0, 1},
	} {
		if got := bestFigures(tc.figs, tc.skip); got != tc.best {
			t.Errorf("%s: best %d, want %d", tc.name, got, tc.best)
		}
	}

	var s EvalScale
	s.add(f(100, 21), f(100, 20))   // p99 1.05: within the goal
	s.add(f(103, 10), f(100, 20))   // prefill 1.03: a miss
	s.add(f(100, 22.2), f(100, 20)) // p99 1.11: a miss
	if s.Cells != 3 || s.Misses != 2 || s.WorstPrefill != 1.03 || s.WorstP99 != 1.11 {
		t.Errorf("scale %+v, want 3 cells, 2 misses, worst prefill 1.03, worst p99 1.11", s)
	}
	// Geometric means: p99 (1.05 * 0.5 * 1.11)^(1/3), prefill 1.03^(1/3).
	if s.P99GeoMean != round(math.Cbrt(1.05*0.5*1.11), 4) || s.PrefillGeoMean != round(math.Cbrt(1.03), 4) {
		t.Errorf("scale geomeans p99 %v, prefill %v, want %.4f and %.4f", s.P99GeoMean, s.PrefillGeoMean,
			math.Cbrt(1.05*0.5*1.11), math.Cbrt(1.03))
	}
}

// Observe sees every request's first token once, on the rank it ran on.
func TestObserve(t *testing.T) {
	wc, _ := DefaultWorkload(KindConversation)
	wc.DurationS = 2
	wl, err := Generate(wc)
	if err != nil {
		t.Fatal(err)
	}
	eng := DefaultEngine()
	s, err := NewSimulator(eng, wl, mustVariants(t, VariantRecommended)[0], false)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	s.Observe = func(e RequestEvent) {
		if seen[e.ID] || e.Rank < 0 || e.Rank >= eng.DPSize || e.FirstToken < e.Arrival || e.Cached > e.Prompt || e.ConvID == "" {
			t.Errorf("event %+v (seen before: %v)", e, seen[e.ID])
		}
		seen[e.ID] = true
	}
	res, err := s.Run()
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != res.Completed {
		t.Errorf("%d events, %d requests completed", len(seen), res.Completed)
	}
}

// The mixed grid: every mix on 4, 8 and 16 ranks, at the parts' rates and
// half of them, each case valid and named once; seed shifts and duration
// stretches reach its parts without touching the grid they were given.
func TestEvalGridMixed(t *testing.T) {
	cases, err := EvalGrid(EvalMixed, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) != len(evalMixes)*3*len(evalMixLoads)*3 {
		t.Fatalf("%d cases, want %d", len(cases), len(evalMixes)*3*len(evalMixLoads)*3)
	}
	caseNames(t, cases)
	fams, shapes := map[string]int{}, map[int]bool{}
	for _, c := range cases {
		key := c.Family + "/" + c.Name
		fams[c.Family]++
		shapes[c.Engine.DPSize] = true
		if c.Workload.Kind != KindMix || c.Trace {
			t.Errorf("case %s: kind %s, trace %v; want a generated mix", key, c.Workload.Kind, c.Trace)
		}
	}
	if len(fams) != len(evalMixes) || len(shapes) != 3 || !shapes[4] || !shapes[16] {
		t.Errorf("families %v, shapes %v", fams, shapes)
	}
	half := func(name string) *EvalCase {
		for i := range cases {
			if cases[i].Family+"/"+cases[i].Name == name {
				return &cases[i]
			}
		}
		t.Fatalf("no case %s", name)
		return nil
	}
	full, slow := half("mix-tenantspike+followup/seed=2 load=1 dp4"), half("mix-tenantspike+followup/seed=2 load=0.5 dp4")
	if s, f := slow.Workload.Mix[0], full.Workload.Mix[0]; s.QuietIntervalS != 2*f.QuietIntervalS || s.SpikeS != 2*f.SpikeS {
		t.Errorf("tenant spike at half load: quiet gap %g s, spike %g s; want twice %g s, %g s", s.QuietIntervalS, s.SpikeS, f.QuietIntervalS, f.SpikeS)
	}
	if s, f := slow.Workload.Mix[1], full.Workload.Mix[1]; s.Rate != f.Rate/2 || s.DurationS != 2*f.DurationS || s.ThinkS != f.ThinkS {
		t.Errorf("followup at half load: %g/s for %g s, think %g s; want %g/s for %g s, think %g s", s.Rate, s.DurationS, s.ThinkS, f.Rate/2, 2*f.DurationS, f.ThinkS)
	}

	shifted := ShiftSeeds(cases, 10)
	if c := shifted[0]; c.Workload.Seed != cases[0].Workload.Seed+10 || !strings.HasPrefix(c.Name, "seed=11 ") {
		t.Errorf("shifted case %s, seed %d; want seed 11", c.Name, c.Workload.Seed)
	}
	long, err := StretchDurations(cases, 10)
	if err != nil {
		t.Fatal(err)
	}
	if l, o := long[0].Workload.Mix, cases[0].Workload.Mix; l[0].DurationS != 10*o[0].DurationS || l[1].DurationS != 10*o[1].DurationS {
		t.Errorf("stretched parts last %g s and %g s; want ten times %g s and %g s", l[0].DurationS, l[1].DurationS, o[0].DurationS, o[1].DurationS)
	}
	spike := long[len(long)-1].Workload.Mix[0] // tenantspike+siblings+noreuse
	if spike.Kind != KindTenantSpike || spike.QuietS != cases[len(cases)-1].Workload.Mix[0].QuietS {
		t.Errorf("stretched spike part %s: quiet %g s, want it unchanged", spike.Kind, spike.QuietS)
	}
}

// The heavy grid: every tenant count, rate, shape and seed once, each case
// steady multi-tenant traffic at Zipf 1 for a minute, the rate scaled with
// the ranks; judged by the cell goals alone, as the mixed grid.
func TestEvalGridHeavy(t *testing.T) {
	cases, err := EvalGrid(EvalHeavy, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := len(heavyTenants) * len(heavyRates) * len(heavyShapes) * len(heavySeeds); len(cases) != want {
		t.Fatalf("%d cases, want %d", len(cases), want)
	}
	caseNames(t, cases)
	perRank := map[float64]int{}
	for _, c := range cases {
		key := c.Family + "/" + c.Name
		w := c.Workload
		if c.Family != "heavy" || c.Trace || w.Kind != KindMultiTenant || w.ZipfS != 1 || w.DurationS != 60 ||
			(w.Seed != 5 && w.Seed != 6) || (c.Engine.DPSize != 8 && c.Engine.DPSize != 16) {
			t.Errorf("case %s: %+v on %d ranks", key, w, c.Engine.DPSize)
		}
		perRank[w.Rate*8/float64(c.Engine.DPSize)]++
	}
	for _, r := range heavyRates {
		if perRank[r] != len(cases)/len(heavyRates) {
			t.Errorf("rates per 8 ranks %v, want each of %v on a third of the cases", perRank, heavyRates)
		}
	}
	if !CellGoalsOnly(EvalHeavy) || !CellGoalsOnly(EvalMixed) || CellGoalsOnly(EvalFull) || CellGoalsOnly(EvalQuick) {
		t.Error("CellGoalsOnly: want the held-out grids (mixed, heavy) only")
	}
}

// The mixed-trace grid: each set's mixes, seeds, ranks and time scales
// once, every case a trace replay (no conversation ids) whose records are
// every request of the mix's parts, shared by the mix's cases.
func TestEvalGridMixedTrace(t *testing.T) {
	cases, err := EvalGrid(EvalMixedTrace, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, fams := 0, 0
	for _, set := range mixTraceSets {
		want += len(set.mixes) * len(set.seeds) * len(set.dps) * len(set.times)
		fams += len(set.mixes)
	}
	if len(cases) != want {
		t.Fatalf("%d cases, want %d", len(cases), want)
	}
	caseNames(t, cases)
	families := map[string]bool{}
	for _, c := range cases {
		key := c.Family + "/" + c.Name
		families[c.Family] = true
		if !c.Trace || c.Workload.Kind != KindTrace || len(c.Workload.TraceRecords) == 0 || c.Workload.TraceLengthScale != 1 {
			t.Errorf("case %s: kind %s, trace %v, %d records; want a trace replay", key, c.Workload.Kind, c.Trace, len(c.Workload.TraceRecords))
		}
	}
	if len(families) != fams || !CellGoalsOnly(EvalMixedTrace) {
		t.Errorf("%d families, want %d; cell goals only: %v", len(families), fams, CellGoalsOnly(EvalMixedTrace))
	}
	// The first case is the first mix, seed 11: as many records as its
	// parts have requests.
	n := 0
	for _, k := range mixTraceSets[0].mixes[0] {
		wc, _ := DefaultWorkload(k)
		wc.Seed = 11
		wl, err := Generate(wc)
		if err != nil {
			t.Fatal(err)
		}
		for _, se := range wl.Sessions {
			n += len(se.Turns)
		}
	}
	if got := len(cases[0].Workload.TraceRecords); got != n || cases[0].Name != "seed=11 time=1 dp4" {
		t.Errorf("case %s: %d records, want %d (every request of the mix's parts)", cases[0].Name, got, n)
	}
}

// caseNames returns the set of cases' "family/name" keys, failing t for a
// key named twice.
func caseNames(t *testing.T, cases []EvalCase) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, c := range cases {
		key := c.Family + "/" + c.Name
		if names[key] {
			t.Errorf("case %s twice", key)
		}
		names[key] = true
	}
	return names
}

// The random grid: evalRandomCases valid cases of randomMinRequests
// requests or more, the same on every build,
// drawing every kind (or mix), rank count and the engine changes; a steady
// part's rate and a spike's rate scale with the ranks, and each case's
// name carries its number and ranks, so -eval-case selects it alone. So
// is a grid drawn from other seeds (-eval-shapes), each its own.
func TestEvalGridRandom(t *testing.T) {
	grid, err := EvalGrid(EvalRandom, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !CellGoalsOnly(EvalRandom) {
		t.Error("CellGoalsOnly(random) = false, want true: a held-out grid")
	}
	// The draws are pinned: the same cases on every build (the docs'
	// figures name them).
	pins := map[uint64]map[int]string{
		EvalRandomShapes: {
			0:   "random-followup/case=1 sys=3000 conv=1/s/rank for 30s think=1s dp32",
			149: "random-tenantspike+conversation/case=150 tenants=64 zipf=1 sys=1024 quiet=20s every 0.5s spike=2s at 200/s per 8 ranks conv=0.5/s/rank for 60s bursty(8) dp16",
		},
		2: {0: "random-followup+multitenant/case=1 tenants=8 zipf=0.8 sys=3000 conv=1/s/rank for 60s rate=0.5/s/rank for 60s pool=1024 bursty(16) msg=64-1024 dp4"},
		3: {0: "random-siblings/case=1 sys=6144 rate=3/s/rank for 60s budget=2048 bursty(8) think=3s dp4"},
	}
	seen := map[string]uint64{}
	for _, shapes := range []uint64{EvalRandomShapes, 2, 3} {
		cases := grid // EvalGrid(EvalRandom) is RandomGrid(EvalRandomShapes): pinned
		if shapes != EvalRandomShapes {
			if cases, err = RandomGrid(shapes); err != nil {
				t.Fatalf("shapes %d: %v", shapes, err)
			}
		}
		t.Run(fmt.Sprintf("shapes=%d", shapes), func(t *testing.T) {
			checkRandomGrid(t, cases, pins[shapes])
		})
		// Another seed draws other shapes: few of its names (number and
		// shape) can be another grid's.
		same := 0
		for _, c := range cases {
			if s, ok := seen[c.Family+"/"+c.Name]; ok && s != shapes {
				same++
			}
			seen[c.Family+"/"+c.Name] = shapes
		}
		if same > evalRandomCases/20 {
			t.Errorf("shapes %d: %d of %d cases named as another seed's, want other shapes", shapes, same, len(cases))
		}
	}
}

// checkRandomGrid checks one draw of the random grid, whose cases at the
// indices of pins are named as pins says.
func checkRandomGrid(t *testing.T, cases []EvalCase, pins map[int]string) {
	t.Helper()
	if len(cases) != evalRandomCases {
		t.Fatalf("%d cases, want %d", len(cases), evalRandomCases)
	}
	for i, want := range pins {
		if got := cases[i].Family + "/" + cases[i].Name; got != want {
			t.Errorf("case %d: %q, want %q", i+1, got, want)
		}
	}
	caseNames(t, cases)
	fams, dps := map[string]bool{}, map[int]bool{}
	changed := map[string]int{}
	for i, c := range cases {
		if c.Workload.Seed != uint64(i+1) {
			t.Errorf("case %s: seed %d, want %d", c.Name, c.Workload.Seed, i+1)
		}
		if !strings.HasPrefix(c.Name, fmt.Sprintf("case=%d ", i+1)) || !strings.HasSuffix(c.Name, fmt.Sprintf(" dp%d", c.Engine.DPSize)) {
			t.Errorf("case %q: want it named case=%d ... dp%d", c.Name, i+1, c.Engine.DPSize)
		}
		fams[c.Family], dps[c.Engine.DPSize] = true, true
		if c.Engine.MaxNumTokens != shapeDefault.budget {
			changed["budget"]++
		}
		if c.Engine.KVBlocks != shapeDefault.blocks {
			changed["pool"]++
		}
		if wl, err := Generate(c.Workload); err != nil || wl.NumRequests() < randomMinRequests {
			t.Errorf("case %s: %v, want at least %d requests", c.Name, err, randomMinRequests)
		}
		parts := []WorkloadConfig{c.Workload}
		if c.Workload.Kind == KindMix {
			parts = c.Workload.Mix
		}
		for _, w := range parts {
			per := w.Rate / float64(c.Engine.DPSize)
			switch w.Kind {
			case KindConversation, KindFollowUp:
				if !oneOf(randomConvRates, per) {
					t.Errorf("case %s: %s at %g new conversations/s per rank, want one of %v", c.Name, w.Kind, per, randomConvRates)
				}
			case KindTenantSpike, KindColdStart:
				if r := w.SpikeFactor * 8 / float64(c.Engine.DPSize); !oneOf(randomSpikeRates, r) {
					t.Errorf("case %s: spike factor %g on %d ranks, want one of %v per 8 ranks", c.Name, w.SpikeFactor, c.Engine.DPSize, randomSpikeRates)
				}
			default:
				if !oneOf(randomRates, per) {
					t.Errorf("case %s: %s at %g/s per rank, want one of %v", c.Name, w.Kind, per, randomRates)
				}
			}
		}
	}
	if len(fams) != len(randomKinds) || len(dps) != len(randomDPs) || changed["budget"] == 0 || changed["pool"] == 0 {
		t.Errorf("%d families of %d, %d rank counts of %d, engine changes %v: want every one drawn",
			len(fams), len(randomKinds), len(dps), len(randomDPs), changed)
	}
}

// oneOf reports whether v is one of xs up to rounding.
func oneOf(xs []float64, v float64) bool {
	return slices.ContainsFunc(xs, func(x float64) bool { return math.Abs(x-v) <= 1e-9*math.Abs(x) })
}

// EvalOptions.Requests receives every simulation, in the order of the
// cases, the reuse semantics and the policies, whatever the parallelism,
// and what it receives is what the cells are made of.
func TestRunEvalRequests(t *testing.T) {
	cases, err := EvalGrid(EvalQuick, evalTraces(t))
	if err != nil {
		t.Fatal(err)
	}
	cases = cases[:2]
	v := mustVariants(t, VariantRecommended)[0]
	policies := append(slices.Clone(References), v.Name)
	var runs [2][]EvalRequests
	var evs [2]*Evaluation
	for n, par := range []int{1, 3} {
		evs[n], err = RunEval(EvalOptions{Grid: "test", Cases: cases, Variant: v, Parallel: par,
			Requests: func(r EvalRequests) error { runs[n] = append(runs[n], r); return nil }})
		if err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(runs[0], runs[1]) {
		t.Error("the requests passed on differ with the parallelism")
	}
	if want := len(cases) * len(ReuseModes) * len(policies); len(runs[0]) != want {
		t.Fatalf("%d simulations passed on, want %d", len(runs[0]), want)
	}
	for j, r := range runs[0] {
		c, m, p := j/(len(ReuseModes)*len(policies)), j/len(policies)%len(ReuseModes), j%len(policies)
		if r.Family != cases[c].Family || r.Case != cases[c].Name || r.Reuse != ReuseModes[m] || r.Policy != policies[p] {
			t.Fatalf("simulation %d is %s/%s %s %s, want %s/%s %s %s", j, r.Family, r.Case, r.Reuse, r.Policy,
				cases[c].Family, cases[c].Name, ReuseModes[m], policies[p])
		}
		wl, err := Generate(cases[c].Workload)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, s := range wl.Sessions {
			n += len(s.Turns)
		}
		if len(r.Events) != n {
			t.Errorf("%s %s %s: %d requests, the workload has %d", r.Case, r.Reuse, r.Policy, len(r.Events), n)
		}
		if !slices.IsSortedFunc(r.Events, func(a, b RequestEvent) int { return cmp.Compare(a.Arrival, b.Arrival) }) {
			t.Errorf("%s %s %s: requests not by arrival", r.Case, r.Reuse, r.Policy)
		}
		if p != len(policies)-1 {
			continue
		}
		// The variant's cell: its p99 and prefill from these requests.
		cell := evs[0].Cells[c*len(ReuseModes)+m]
		ttft := make([]int64, len(r.Events))
		var prefill int64
		for i, e := range r.Events {
			ttft[i] = e.FirstToken - e.Arrival
			prefill += int64(e.Prompt - e.Cached)
		}
		slices.Sort(ttft)
		if got := float64(quantile(ttft, 0.99)) / 1e6; math.Abs(got-cell.P99Ms) > 0.0005 { // the cell's is rounded to the µs
			t.Errorf("%s %s: p99 of the requests %.3f ms, the cell's %.3f", r.Case, r.Reuse, got, cell.P99Ms)
		}
		if prefill != cell.PrefillTokens {
			t.Errorf("%s %s: prefill of the requests %d, the cell's %d", r.Case, r.Reuse, prefill, cell.PrefillTokens)
		}
	}

	// An error from Requests ends the evaluation with it.
	stop := errors.New("disk full")
	calls := 0
	_, err = RunEval(EvalOptions{Cases: cases, Variant: v, Parallel: 2,
		Requests: func(EvalRequests) error { calls++; return stop }})
	if !errors.Is(err, stop) || calls != 1 || strings.Count(err.Error(), stop.Error()) != 1 {
		t.Errorf("Requests failing: %v after %d calls, want %v after 1", err, calls, stop)
	}
}

// With EvalOptions.Explain every request carries the router's receipt for
// the call that placed it, and the simulations are those without receipts.
func TestRunEvalExplain(t *testing.T) {
	cases, err := EvalGrid(EvalQuick, evalTraces(t))
	if err != nil {
		t.Fatal(err)
	}
	cases = cases[:1]
	v := mustVariants(t, VariantRecommended)[0]
	var runs [2][]EvalRequests
	var evs [2]*Evaluation
	for n, explain := range []bool{false, true} {
		evs[n], err = RunEval(EvalOptions{Grid: "test", Cases: cases, Variant: v, Parallel: 2, Explain: explain,
			Requests: func(r EvalRequests) error { runs[n] = append(runs[n], r); return nil }})
		if err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(evs[0].Cells, evs[1].Cells) {
		t.Error("the cells differ with receipts recorded")
	}
	dp := cases[0].Engine.DPSize
	for j, r := range runs[1] {
		plain := runs[0][j]
		if len(r.Events) != len(plain.Events) || len(r.Events) == 0 {
			t.Fatalf("%s %s: %d requests with receipts, %d without", r.Reuse, r.Policy, len(r.Events), len(plain.Events))
		}
		for i, e := range r.Events {
			d := e.Decision
			if plain.Events[i].Decision != nil {
				t.Fatalf("%s %s: a receipt without Explain", r.Reuse, r.Policy)
			}
			if d == nil {
				t.Fatalf("%s %s: request %d has no receipt", r.Reuse, r.Policy, e.ID)
			}
			e.Decision = nil
			if e != plain.Events[i] {
				t.Fatalf("%s %s: request %+v with receipts, %+v without", r.Reuse, r.Policy, e, plain.Events[i])
			}
			rc := &d.Receipt
			if rc.ID != e.ID || rc.Rank != e.Rank || rc.Reason == router.ReasonUnplaced ||
				d.At < e.Arrival || d.At > e.FirstToken || d.Batch < 1 || d.Offers < 1 {
				t.Fatalf("%s %s: request %d on rank %d, arrived %d, first token %d: decision %+v",
					r.Reuse, r.Policy, e.ID, e.Rank, e.Arrival, e.FirstToken, d)
			}
			if rc.Reason == router.ReasonPredictedTTFT && len(rc.Candidates) != dp {
				t.Fatalf("%s %s: request %d: %d candidates on %d ranks", r.Reuse, r.Policy, e.ID, len(rc.Candidates), dp)
			}
		}
	}
}

// Explain must come before the simulation: the router it records with is a
// new one.
func TestSimulatorExplainAfterRun(t *testing.T) {
	w, err := Generate(tinyWorkload(KindShared))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSimulator(DefaultEngine(), w, mustVariants(t, VariantRecommended)[0], false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(); err != nil {
		t.Fatal(err)
	}
	if err := s.Explain(); err == nil || !strings.Contains(err.Error(), "before Run") {
		t.Errorf("Explain after Run: %v, want an error saying to call it before Run", err)
	}
}

func ExampleWriteEvalRequests() {
	r := EvalRequests{Family: "shared", Case: "dp2", Reuse: ReuseAfterIteration, Policy: VariantRecommended,
		Events: []RequestEvent{{ID: 7, Group: 0, Rank: 1, Arrival: 2_000_000, FirstToken: 14_500_000, Prompt: 1100, Cached: 1024}}}
	if err := WriteEvalRequests(os.Stdout, r); err != nil {
		fmt.Println(err)
	}
	// Output:
	// {"family":"shared","case":"dp2","reuse":"after-iteration","policy":"recommended","id":7,"group":0,"rank":1,"arrival_ms":2,"ttft_ms":12.5,"prompt_tokens":1100,"cached_tokens":1024}
}

// A request with a Decision (EvalOptions.Explain) carries its receipt.
func ExampleWriteEvalRequests_explain() {
	rc := router.Receipt{ID: 7, Rank: 1, Reason: router.ReasonPredictedTTFT, Len: 1100, Expected: 4, Eligible: 2,
		Candidates: []router.Candidate{
			{Rank: 0, Requests: 3, Tokens: 5200, Match: 0, LoadTerm: 180, Score: 1280, Excluded: router.Eligible},
			{Rank: 1, Requests: 2, Tokens: 4100, Match: 1024, LoadTerm: 0, Score: 76, Excluded: router.Eligible},
		}}
	r := EvalRequests{Family: "shared", Case: "dp2", Reuse: ReuseAfterIteration, Policy: VariantRecommended,
		Events: []RequestEvent{{ID: 7, Group: 0, Rank: 1, Arrival: 2_000_000, FirstToken: 14_500_000, Prompt: 1100, Cached: 1024,
			Decision: &Decision{At: 2_250_000, Batch: 3, Offers: 1, Receipt: rc}}}}
	if err := WriteEvalRequests(os.Stdout, r); err != nil {
		fmt.Println(err)
	}
	// Output:
	// {"family":"shared","case":"dp2","reuse":"after-iteration","policy":"recommended","id":7,"group":0,"rank":1,"arrival_ms":2,"ttft_ms":12.5,"prompt_tokens":1100,"cached_tokens":1024,"receipt":{"decided_ms":2.25,"batch":3,"offers":1,"reason":"lowest predicted TTFT","step":0,"expected":4,"eligible":2,"candidates":[{"rank":0,"requests":3,"tokens":5200,"match":0,"load_term":180,"score":1280,"excluded":"eligible"},{"rank":1,"requests":2,"tokens":4100,"match":1024,"load_term":0,"score":76,"excluded":"eligible"}]}}
}
