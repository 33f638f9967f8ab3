package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/adprouter/adprouter/cmd/adprouter-sim/sim"
)

// tiny makes a run fast: a short cold start on 4 small ranks.
var tiny = []string{"-dp", "4", "-kv-blocks", "512", "-quiet", "12", "-quiet-interval", "2", "-spike", "2", "-spike-factor", "40",
	"-system-tokens", "1024", "-output-max", "64", "-duration", "2"}

func runCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

func TestRun(t *testing.T) {
	dir := t.TempDir()
	js, svg := filepath.Join(dir, "out.json"), filepath.Join(dir, "out.svg")
	code, out, errs := runCmd(t, append(tiny, "-json", js, "-plot", svg)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"workload coldstart", "default", "kv_cache_aware+warmup", "conversation", "window prefill", "TTFT p50"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	var rep struct {
		Tool string
		Runs []struct {
			Workload struct {
				Kind         string
				SystemTokens int `json:"system_tokens"`
			}
			Results []struct {
				Policy   string
				Requests int
				Window   *struct{ PrefillTokens int64 } `json:"window"`
			}
		}
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Tool != "adprouter-sim" || len(rep.Runs) != 1 || rep.Runs[0].Workload.Kind != "coldstart" ||
		rep.Runs[0].Workload.SystemTokens != 1024 || len(rep.Runs[0].Results) != 4 || rep.Runs[0].Results[0].Window == nil {
		t.Errorf("unexpected JSON: %s", b[:min(len(b), 600)])
	}
	s, err := os.ReadFile(svg)
	if err != nil || !bytes.HasPrefix(s, []byte("<svg")) || !bytes.Contains(s, []byte("kv_cache_aware+warmup")) ||
		!bytes.Contains(s, []byte("coldstart, reuse after-iteration: mean TTFT")) {
		t.Errorf("bad SVG (%v): %.200s", err, s)
	}

	// Same flags, same bytes.
	js2 := filepath.Join(dir, "again.json")
	code, out2, _ := runCmd(t, append(tiny, "-json", js2)...)
	b2, _ := os.ReadFile(js2)
	if code != 0 || out2 != out || !bytes.Equal(b, b2) {
		t.Error("a second run with the same flags gave different output")
	}
	code, out3, _ := runCmd(t, append(tiny, "-seed", "9", "-q", "-json", "-")...)
	if code != 0 || bytes.Equal([]byte(out3), b) || !strings.HasPrefix(out3, "{") {
		t.Error("-seed 9 -json - did not print a different report")
	}
}

func TestRunWorkloadsAndPolicies(t *testing.T) {
	code, out, errs := runCmd(t, append(tiny, "-workload", "shared,siblings", "-policies", "default,conversation+least_queued",
		"-arrival", "bursty", "-burst-size", "3", "-rate", "20", "-ranks", "300,500,500,500", "-route-limit", "-1", "-timing", "-active-tokens", "context", "-reuse", "on-schedule")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"workload shared", "workload siblings", "conversation+least_queued", "[300 500 500 500] blocks", "bursty", "route us/call", "active tokens context, reuse on-schedule"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// a+b serves the workloads together, each with the workload flags given:
// one run, its parts described in it.
func TestRunMix(t *testing.T) {
	code, out, errs := runCmd(t, append(tiny, "-workload", "shared+conversation,noreuse", "-policies", "kv_cache_aware", "-rate", "3")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"workload mix, seed 1: 2 workloads served together: shared system prompt", "3 req/s", "3 new/s",
		"workload noreuse"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestRunFlagsAndErrors(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string // in stdout or stderr
	}{
		{[]string{"-help"}, 0, "Workloads:"},
		{[]string{"-list-policies"}, 0, "kv_cache_aware+warmup"},
		{[]string{"-bogus"}, 2, "flag provided but not defined"},
		{[]string{"extra"}, 2, "unexpected arguments"},
		{[]string{"-workload", "nope"}, 1, "unknown workload"},
		{[]string{"-workload", "shared+nope"}, 1, `unknown workload "nope"`},
		{[]string{"-policies", "nope"}, 1, "unknown policy variant"},
		{[]string{"-dp", "0"}, 1, "dp_size"},
		{[]string{"-ranks", "1,x"}, 1, "-ranks"},
		{[]string{"-active-tokens", "all"}, 1, "active_tokens"},
		{[]string{"-dp", "3", "-ranks", "1,2"}, 1, "-ranks lists 2"},
		{[]string{"-rate", "-1", "-workload", "shared"}, 1, "rate"},
		{[]string{"-json", "/nonexistent/dir/x.json", "-dp", "1", "-quiet", "2", "-spike", "0.2"}, 1, "no such file"},
		{[]string{"-eval", "-eval-grid", "huge"}, 1, `evaluation grid "huge"`},
		{[]string{"-eval", "-policies", "kv_cache_aware"}, 1, "is a reference"},
		{[]string{"-eval", "-policies", "recommended,kv_cache_aware+index"}, 1, "judges one variant"},
		{[]string{"-eval", "-eval-duration-scale", "0"}, 1, "-eval-duration-scale: duration scale 0, want > 0"},
		{[]string{"-eval", "-eval-duration-scale", "-inf"}, 1, "-eval-duration-scale: duration scale -Inf, want > 0"},
		{[]string{"-eval", "-eval-jitter", "-1"}, 1, "-eval-jitter: arrival jitter -1 ms, want >= 0"},
		{[]string{"-eval", "-eval-grid", "quick", "-eval-case", "nope"}, 1, `-eval-case "nope": no case of grid quick`},
		{[]string{"-eval", "-prefill-us", "-1"}, 1, "-iter-base-ms, -prefill-us, -decode-us: engine: prefill_us_per_token = -1"},
		{[]string{"-eval", "-max-active", "0"}, 1, "-max-active: engine: max_active = 0"},
		{[]string{"-eval", "-eval-draws", "1"}, 1, "-eval-draws 1, want 0 (one run) or 2 or more"},
		{[]string{"-eval", "-eval-draws", "-2"}, 1, "-eval-draws -2, want 0 (one run) or 2 or more"},
		{[]string{"-eval", "-eval-trace-scales", "0.5"}, 1, `-eval-trace-scales: scale 1 "0.5", want time:length`},
		{[]string{"-eval", "-eval-trace-scales", "1:0.5,0:1"}, 1, "trace scale time 0, length 1: want both finite and > 0"},
		{[]string{"-eval", "-eval-trace-scales", "1:inf"}, 1, "trace scale time 1, length +Inf: want both finite and > 0"},
		{[]string{"-eval", "-eval-grid", "mixed", "-eval-trace-scales", "1:1"}, 1, "grid mixed replays no trace slices"},
		{[]string{"-eval", "-eval-shapes", "2"}, 1, "-eval-shapes: grid full is fixed; only -eval-grid random draws its shapes"},
		{[]string{"-eval", "-eval-traces", "/nonexistent/slices"}, 1, "-eval-traces: stat /nonexistent/slices"},
		{[]string{"-eval", "-eval-traces", "sim"}, 1, "-eval-traces sim: no *.jsonl trace slice in it"},
	}
	for _, tc := range tests {
		code, out, errs := runCmd(t, tc.args...)
		if code != tc.code || !strings.Contains(out+errs, tc.want) {
			t.Errorf("%q: exit %d, want %d with %q; got:\n%s%s", tc.args, code, tc.code, tc.want, out, errs)
		}
	}
	// A bad flag is one error line and a pointer to -h, not the whole help.
	code, out, errs := runCmd(t, "-bogus")
	if lines := strings.Split(strings.TrimSpace(errs), "\n"); code != 2 || out != "" || len(lines) != 2 ||
		!strings.Contains(lines[1], "adprouter-sim -h") {
		t.Errorf("-bogus: exit %d, stdout %q, stderr %q: want 2 lines ending with a pointer to -h", code, out, errs)
	}
}

// genTraceArgs regenerate testdata/mixed.jsonl, the trace the tests replay.
var genTraceArgs = []string{"-gen-trace", "-", "-workload", "multitenant,followup", "-duration", "4"}

func TestGenTraceTestdata(t *testing.T) {
	want, err := os.ReadFile("testdata/mixed.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCmd(t, genTraceArgs...)
	if code != 0 || out != string(want) {
		t.Fatalf("exit %d (%s): adprouter-sim %s does not reproduce testdata/mixed.jsonl", code, errs, strings.Join(genTraceArgs, " "))
	}
	_, other, _ := runCmd(t, append(genTraceArgs, "-seed", "2")...)
	if other == out || !strings.HasPrefix(other, `{"timestamp":`) {
		t.Error("-seed 2 gives the same trace")
	}
}

func TestTraceReplayCommand(t *testing.T) {
	code, out, errs := runCmd(t, "-trace", "testdata/mixed.jsonl", "-trace-time-scale", "0.5", "-trace-length-scale", "0.25", "-dp", "4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"workload trace, seed 1: trace mixed.jsonl: 130 requests over 5.54s, times x0.5, lengths x0.25 (block 128 tokens)",
		"130 requests in 130 sessions", "kv_cache_aware+warmup"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "workload coldstart") {
		t.Error("-trace alone also ran the default workload")
	}
	// A trace replayed and written again: the same trace, from time 0.
	code, out, _ = runCmd(t, "-trace", "testdata/mixed.jsonl", "-gen-trace", "-")
	if code != 0 || strings.Count(out, "\n") != 130 || !strings.HasPrefix(out, `{"timestamp":0,"input_length":2134,"output_length":161,"hash_ids":[0,1,2,3,4]}`) {
		t.Errorf("-trace -gen-trace: exit %d, %.200s", code, out)
	}
	code, out, _ = runCmd(t, "-trace", "testdata/mixed.jsonl", "-workload", "noreuse", "-dp", "4", "-duration", "1", "-q", "-json", "-")
	if code != 0 || !strings.Contains(out, `"kind": "noreuse"`) || !strings.Contains(out, `"trace": "mixed.jsonl"`) {
		t.Errorf("-trace with -workload noreuse: exit %d, want both workloads in the JSON", code)
	}
}

func TestSweepCommand(t *testing.T) {
	dir := t.TempDir()
	js, svg := filepath.Join(dir, "sweep.json"), filepath.Join(dir, "sweep.svg")
	args := append(tiny, "-sweep", "-workload", "coldstart,followup,trace", "-trace", "testdata/mixed.jsonl", "-trace-length-scale", "0.25",
		"-policies", "kv_cache_aware+probe+index", "-json", js, "-svg", svg)
	code, out, errs := runCmd(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"reuse after-iteration: blocks reusable", "reuse on-schedule: blocks reusable",
		"  trace:mixed.jsonl (seed 1, 130 requests)", "reuse on-schedule, summary", "kv_cache_aware+probe+index"} {
		if !strings.Contains(out, want) {
			t.Errorf("sweep output lacks %q:\n%s", want, out)
		}
	}
	var sw struct {
		Tables []struct {
			Reuse   string
			Compare []struct{ Workload string }
		}
	}
	b, _ := os.ReadFile(js)
	if err := json.Unmarshal(b, &sw); err != nil || len(sw.Tables) != 2 || len(sw.Tables[1].Compare) != 3 || sw.Tables[1].Compare[2].Workload != "trace:mixed.jsonl" {
		t.Errorf("sweep JSON (%v): %.300s", err, b)
	}
	if s, err := os.ReadFile(svg); err != nil || !bytes.Contains(s, []byte("coldstart, reuse on-schedule: TTFT percentiles")) {
		t.Errorf("sweep SVG (%v): %.300s", err, s)
	}
	code, again, _ := runCmd(t, args...)
	b2, _ := os.ReadFile(js)
	if code != 0 || again != out || !bytes.Equal(b, b2) {
		t.Error("the same sweep gave different output")
	}
	// One semantics only; -eager-reuse is -reuse on-schedule.
	code, out, _ = runCmd(t, append(tiny, "-sweep", "-workload", "coldstart", "-eager-reuse")...)
	if code != 0 || !strings.Contains(out, "reuse on-schedule:") || strings.Contains(out, "reuse after-iteration") {
		t.Errorf("-sweep -eager-reuse: exit %d:\n%s", code, out)
	}
}

func TestSweepMatrixCommand(t *testing.T) {
	args := append(tiny, "-sweep", "-workload", "coldstart,siblings", "-seeds", "1,2", "-dps", "2,4")
	code, out, errs := runCmd(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	// Two seeds x two rank counts x two workloads x two reuse semantics.
	if !strings.Contains(out, "robustness matrix:") || !strings.Contains(out, "recommended: 16 cells, ") {
		t.Errorf("matrix output:\n%s", out)
	}
	if _, again, _ := runCmd(t, args...); again != out {
		t.Error("the same matrix gave different output")
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-sweep", "-seeds", "1,x"}, "-seeds"},
		{[]string{"-workload", "coldstart", "-seeds", "1,2"}, "need -sweep"},
		{[]string{"-sweep", "-seeds", "1,2", "-json", "m.json"}, "-json and -svg are for a single sweep"},
		{[]string{"-sweep", "-dps", "4,y"}, "-dps"},
		{[]string{"-sweep", "-dps", "4", "-ranks", "100,100"}, "-dps and -ranks"},
		{[]string{"-sweep", "-workload", "coldstart", "-dps", "0"}, "dp_size"},
	} {
		if code, out, errs := runCmd(t, tc.args...); code != 1 || !strings.Contains(out+errs, tc.want) {
			t.Errorf("%q: exit %d, want 1 with %q; got:\n%s%s", tc.args, code, tc.want, out, errs)
		}
	}
}

func TestTraceAndReuseErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte(`{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": []}`+"\n"+
		`{"timestamp": 1, "input_length": "10", "output_length": 1, "hash_ids": []}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"-trace", filepath.Join(dir, "none.jsonl")}, "no such file"},
		{[]string{"-trace", bad}, "bad.jsonl: trace line 2: field input_length: want an integer, got string"},
		{[]string{"-workload", "trace"}, "workload trace needs -trace FILE"},
		{[]string{"-trace", "testdata/mixed.jsonl", "-trace-time-scale", "0"}, "trace_time_scale"},
		{[]string{"-reuse", "eager"}, "reuse"},
		{[]string{"-reuse", "all"}, "-sweep to compare them"},
		{[]string{"-sweep", "-plot", "x.svg"}, "-plot and -timing are for single runs"},
		{[]string{"-sweep", "-policies", "nope"}, "unknown policy variant"},
	}
	for _, tc := range tests {
		code, out, errs := runCmd(t, tc.args...)
		if code != 1 || !strings.Contains(out+errs, tc.want) {
			t.Errorf("%q: exit %d, want 1 with %q; got:\n%s%s", tc.args, code, tc.want, out, errs)
		}
	}
}

// -eval runs the evaluation grid: the quick one here, on one reuse
// semantics. It prints the families, the worst cells and the verdict, and
// exits 3 when a goal is missed (the quick grid has a known miss under
// on-schedule reuse, none under after-iteration).
func TestEvalCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the quick evaluation")
	}
	code, out, errs := runCmd(t, "-eval", "-eval-grid", "quick", "-reuse", "after-iteration", "-eval-worst", "3")
	if code != 0 && code != 3 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"evaluation quick of recommended", "trace-conversation", "trace-synthetic", "tenant-spike",
		"worst 3 cells", "verdict:"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "reuse on-schedule") {
		t.Errorf("-reuse after-iteration evaluated on-schedule too:\n%s", out)
	}
	if (code == 3) != strings.Contains(out, "verdict: FAIL") {
		t.Errorf("exit %d with verdict:\n%s", code, out)
	}
	// -eval-case runs the cells named, judged on the cell goals alone; so
	// are the held-out grids' cells.
	for _, tc := range []struct{ grid, only, label string }{
		{"mixed", "mix-shared+followup/seed=1 load=0.5 dp", "3 cases in 1 families"},
		{"heavy", "tenants=1 rate=20/8 ranks seed=5 dp8", "1 cases in 1 families"},
		{"mixed-trace", "mixtrace-shared+followup/seed=11 time=4 dp4", "1 cases in 1 families"},
	} {
		code, one, errs := runCmd(t, "-eval", "-eval-grid", tc.grid, "-reuse", "after-iteration", "-eval-case", tc.only)
		if code != 0 && code != 3 {
			t.Fatalf("-eval-grid %s -eval-case: exit %d: %s", tc.grid, code, errs)
		}
		for _, want := range []string{fmt.Sprintf("evaluation %s (cases matching %q) of recommended: %s", tc.grid, tc.only, tc.label),
			"family goals are not judged"} {
			if !strings.Contains(one, want) {
				t.Errorf("-eval-grid %s -eval-case: output lacks %q:\n%s", tc.grid, want, one)
			}
		}
		if strings.Contains(one, "families, a trace family") || (code == 3) != strings.Contains(one, "MISS") {
			t.Errorf("-eval-grid %s -eval-case: exit %d, family goals judged or a verdict without its cell:\n%s", tc.grid, code, one)
		}
	}
	// -eval-shapes draws the random grid from another seed: case=1 is
	// another shape (sim.TestEvalGridRandom pins it), and the report says
	// which draw it judged.
	code, drawn, errs := runCmd(t, "-eval", "-eval-grid", "random", "-eval-shapes", "3", "-reuse", "after-iteration", "-eval-case", "case=1 ")
	if code != 0 && code != 3 {
		t.Fatalf("-eval-shapes 3: exit %d: %s", code, errs)
	}
	for _, want := range []string{`evaluation random (shapes drawn from seed 3) (cases matching "case=1 ") of recommended: 1 cases in 1 families`,
		"random-siblings"} {
		if !strings.Contains(drawn, want) {
			t.Errorf("-eval-shapes 3: output lacks %q:\n%s", want, drawn)
		}
	}
	// -iter-base-ms, -prefill-us and -decode-us give every case's engine
	// that iteration time model, -max-active those request slots, and the
	// label says so.
	js := filepath.Join(t.TempDir(), "cost.json")
	code, cost, errs := runCmd(t, "-eval", "-eval-grid", "quick", "-reuse", "after-iteration", "-eval-case", "noreuse/",
		"-prefill-us", "80", "-decode-us", "200", "-max-active", "16", "-json", js)
	if code != 0 && code != 3 {
		t.Fatalf("-prefill-us: exit %d: %s", code, errs)
	}
	if !strings.Contains(cost, "(iterations of 4 ms + 80 µs per prefill token + 200 µs per decoding request) (max_active 16 per rank) of recommended") {
		t.Errorf("-prefill-us 80 -decode-us 200 -max-active 16: the label does not say so:\n%s", cost)
	}
	cases := savedCases(t, js)
	if len(cases) == 0 {
		t.Fatal("-json: no case")
	}
	for _, c := range cases {
		if e := c.Engine; e.IterBaseMs != 4 || e.PrefillUsPerToken != 80 || e.DecodeUsPerSeq != 200 || e.MaxActive != 16 {
			t.Errorf("case %s ran with %g ms + %g µs + %g µs and %d slots, want 4 + 80 + 200 and 16",
				c.Name, e.IterBaseMs, e.PrefillUsPerToken, e.DecodeUsPerSeq, e.MaxActive)
		}
	}
	// The same grid with its arrivals jittered says so, and comes out
	// otherwise.
	code, jit, errs := runCmd(t, "-eval", "-eval-grid", "quick", "-reuse", "after-iteration", "-eval-worst", "3",
		"-eval-jitter", "2", "-eval-jitter-seed", "3")
	if code != 0 && code != 3 {
		t.Fatalf("-eval-jitter: exit %d: %s", code, errs)
	}
	if !strings.Contains(jit, "evaluation quick (arrivals jittered up to 2 ms, draw 3) of recommended") || jit == out {
		t.Errorf("-eval-jitter 2 -eval-jitter-seed 3: want the label and other results:\n%s", jit)
	}
}

// savedCases returns the cases of the evaluation -json wrote to file.
func savedCases(t *testing.T, file string) []sim.EvalCase {
	t.Helper()
	var saved struct {
		Cases []sim.EvalCase `json:"cases"`
	}
	if raw, err := os.ReadFile(file); err != nil {
		t.Fatal(err)
	} else if err := json.Unmarshal(raw, &saved); err != nil {
		t.Fatal(err)
	}
	return saved.Cases
}

// -eval-traces replays the slices of a folder in the grid's trace
// families, at -eval-trace-scales, and the label says so.
func TestEvalTracesCommand(t *testing.T) {
	raw, err := os.ReadFile("testdata/mooncake/conversation-0.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mine-0.jsonl"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	js := filepath.Join(t.TempDir(), "mine.json")
	code, out, errs := runCmd(t, "-eval", "-eval-grid", "quick", "-reuse", "on-schedule", "-eval-traces", dir,
		"-eval-trace-scales", "0.2:0.5", "-eval-case", "trace-", "-json", js)
	if code != 0 && code != 3 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if want := fmt.Sprintf("evaluation quick (trace slices of %s) (trace slices at time:length 0.2:0.5)", dir); !strings.Contains(out, want) {
		t.Errorf("the label does not say %q:\n%s", want, out)
	}
	cases := savedCases(t, js)
	var names []string
	for _, c := range cases {
		names = append(names, c.Family+"/"+c.Name)
	}
	if want := []string{"trace-mine/mine-0.jsonl time=0.2 len=0.5 dp8"}; !slices.Equal(names, want) {
		t.Errorf("cases %q, want %q", names, want)
	}
}

// -eval-baseline compares the run with an evaluation saved by -json, cell
// by cell; it refuses, before running, a file that is no evaluation or one
// judged otherwise, and a baseline with no cell in common.
func TestEvalBaselineCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("runs part of the quick evaluation")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "base.json")
	part := []string{"-eval", "-eval-grid", "quick", "-reuse", "after-iteration", "-eval-case", "multitenant/"}
	code, _, errs := runCmd(t, append(part, "-json", file)...)
	if code != 0 && code != 3 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var ev sim.Evaluation
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	misses := 0
	for _, c := range ev.Cells {
		if c.Miss() {
			misses++
		}
	}
	// The same run again: deterministic, so nothing starts, stops or moves.
	code2, out, errs := runCmd(t, append(part, "-q", "-eval-baseline", file)...)
	if code2 != code {
		t.Fatalf("exit %d, the baseline's run %d: %s", code2, code, errs)
	}
	want := fmt.Sprintf("against the baseline (quick (cases matching \"multitenant/\") of recommended): misses %d -> %d of %d cells in both\n",
		misses, misses, len(ev.Cells))
	if out != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"tool":"adprouter-sim","cells":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-eval-baseline", bad}, "not an evaluation written by adprouter-sim -eval -json"},
		{[]string{"-eval-baseline", filepath.Join(dir, "missing.json")}, "no such file"},
		{[]string{"-eval-baseline", file, "-eval-draws", "2"}, "the baseline is judged on one run, this run by the median over 2 draws"},
		{[]string{"-eval-baseline", file, "-eval-seed-offset", "10"}, "no cell in common"},
	} {
		code, _, errs := runCmd(t, append(part, tc.args...)...)
		if code != 1 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want 1 and %q", tc.args, code, errs, tc.want)
		}
	}
}

// -eval-draws judges every cell by its median over draws of the arrival
// jitter (2 ms unless -eval-jitter says otherwise), from -eval-jitter-seed
// on, and exits 3 when a median misses; -json writes the per-draw ratios.
func TestEvalDrawsCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the quick evaluation twice")
	}
	file := filepath.Join(t.TempDir(), "draws.json")
	code, out, errs := runCmd(t, "-eval", "-eval-grid", "quick", "-reuse", "after-iteration", "-eval-worst", "2",
		"-eval-draws", "2", "-eval-jitter-seed", "3", "-json", file)
	if code != 0 && code != 3 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"evaluation quick of recommended over 2 draws", "draw 1: quick (arrivals jittered up to 2 ms, draw 3)",
		"draw 2: quick (arrivals jittered up to 2 ms, draw 4)", "worst 2 cells by median", "verdict by median:"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if (code == 3) != strings.Contains(out, "verdict by median: FAIL") {
		t.Errorf("exit %d with verdict:\n%s", code, out)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d sim.EvalDraws
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Draws) != 2 || len(d.Cells) == 0 || len(d.Cells[0].P99) != 2 {
		t.Errorf("-json: %d draws, %d cells, want 2 draws and every cell's two ratios", len(d.Draws), len(d.Cells))
	}
}

// -eval-requests writes the simulations' requests, one JSON object a line,
// and refuses what would mix them with the report or span several runs.
func TestEvalRequestsCommand(t *testing.T) {
	file := filepath.Join(t.TempDir(), "requests.jsonl")
	one := []string{"-eval", "-eval-grid", "quick", "-eval-case", "shared-spike/sys=4096 seed=1 dp8", "-reuse", "after-iteration"}
	code, out, errs := runCmd(t, append(one, "-eval-requests", file)...)
	if code != 0 && code != 3 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "verdict:") {
		t.Errorf("the report is missing:\n%s", out)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	perPolicy := map[string]int{}
	for _, l := range strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n") {
		var r struct {
			Family, Case, Reuse, Policy string
			Rank                        int
			TTFT                        float64 `json:"ttft_ms"`
			Prompt                      int     `json:"prompt_tokens"`
			Cached                      int     `json:"cached_tokens"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if r.Family != "shared-spike" || r.Case != "sys=4096 seed=1 dp8" || r.Reuse != sim.ReuseAfterIteration ||
			r.Rank < 0 || r.Rank >= 8 || r.TTFT <= 0 || r.Cached > r.Prompt {
			t.Fatalf("line %q", l)
		}
		perPolicy[r.Policy]++
	}
	want := append(slices.Clone(sim.References), sim.VariantRecommended)
	for _, p := range want {
		if perPolicy[p] == 0 || perPolicy[p] != perPolicy[want[0]] {
			t.Errorf("requests per policy %v, want the same number for each of %v", perPolicy, want)
			break
		}
	}
	if len(perPolicy) != len(want) {
		t.Errorf("policies %v, want %v", perPolicy, want)
	}

	// With -q, stdout carries the requests alone.
	code, out, errs = runCmd(t, append(slices.Clone(one), "-q", "-eval-requests", "-")...)
	if (code != 0 && code != 3) || out != string(raw) {
		t.Errorf("-q -eval-requests -: exit %d (%s), %d bytes on stdout, want the file's %d", code, errs, len(out), len(raw))
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-eval-requests", "-"}, "add -q"},
		{[]string{"-eval-requests", "-", "-q", "-json", "-"}, "add -q"},
		{[]string{"-eval-requests", file, "-eval-draws", "2"}, "records one run"},
		{[]string{"-eval-requests", filepath.Join(t.TempDir(), "no", "such", "dir", "r.jsonl")}, "-eval-requests"},
		{[]string{"-eval-explain"}, "give -eval-requests"},
	} {
		code, _, errs := runCmd(t, append(slices.Clone(one), tc.args...)...)
		if code != 1 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: exit %d, %q; want 1 and %q", tc.args, code, errs, tc.want)
		}
	}

	// -eval-explain adds each request's receipt, for the rank it went to,
	// and changes nothing else.
	code, out, errs = runCmd(t, append(slices.Clone(one), "-q", "-eval-requests", "-", "-eval-explain")...)
	if code != 0 && code != 3 {
		t.Fatalf("-eval-explain: exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	plain := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	if len(lines) != len(plain) {
		t.Fatalf("-eval-explain: %d lines, %d without", len(lines), len(plain))
	}
	for i, l := range lines {
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		rc, ok := r["receipt"].(map[string]any)
		if !ok || rc["reason"] == "" || rc["reason"] == "unplaced" || rc["offers"].(float64) < 1 {
			t.Fatalf("line %q: no receipt for a placed request", l)
		}
		if cands, ok := rc["candidates"].([]any); ok {
			if c := cands[int(r["rank"].(float64))].(map[string]any); c["rank"] != r["rank"] {
				t.Fatalf("line %q: candidates not in rank order", l)
			}
		}
		delete(r, "receipt")
		var p map[string]any
		if err := json.Unmarshal([]byte(plain[i]), &p); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(r, p) {
			t.Fatalf("with receipts %v, without %v", r, p)
		}
	}
}
