package sim

import (
	"testing"
)

// The recommended preset against the best reference, on the default sweep
// and the test trace (README "Routing quality"): prefill at most GoalPrefill
// (1.02x) and TTFT p99 at most GoalP99 (1.05x) the best reference's on every
// workload, under both reuse semantics, and p99 at least 20% better on two
// workloads or more. No exceptions: every workload, both semantics. The
// variant is told the simulated engine's reuse semantics (engine_reuse), as
// an operator configures it; the preset alone defaults to TensorRT-LLM's.
func TestRecommendedVsBestReference(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the default sweep (a few seconds)")
	}
	var wcs []WorkloadConfig
	for _, k := range Kinds {
		wc, err := DefaultWorkload(k)
		if err != nil {
			t.Fatal(err)
		}
		wcs = append(wcs, wc)
	}
	trace, err := ReadTraceFile("../testdata/mixed.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	wcs = append(wcs, trace)
	sw, err := RunSweep(SweepOptions{Engine: DefaultEngine(), Workloads: wcs, Extra: mustVariants(t, VariantRecommended)})
	if err != nil {
		t.Fatal(err)
	}
	// One cell per reuse semantics and workload, judged by the matrix's
	// own rules (Cell.Miss, Cell.Win).
	wins := map[string]int{}
	seen := 0
	for _, c := range sw.Cells(0, 0) {
		if c.Policy != VariantRecommended {
			continue
		}
		seen++
		if c.Miss() {
			t.Errorf("reuse %s, %s: prefill %.2fx (bound %.2f), TTFT p99 %.2fx (bound %.2f) of the best reference %s",
				c.Reuse, c.Workload, c.Prefill, GoalPrefill, c.P99, GoalP99, c.Best)
		}
		if c.Win() {
			wins[c.Reuse]++
		}
	}
	if want := len(sw.Tables) * len(wcs); seen != want {
		t.Fatalf("%d cells of %s, want %d (every reuse semantics and workload)", seen, VariantRecommended, want)
	}
	for _, tab := range sw.Tables {
		if wins[tab.Reuse] < 2 {
			t.Errorf("reuse %s: TTFT p99 at least 20%% better than the best reference on %d workloads, want 2 or more", tab.Reuse, wins[tab.Reuse])
		}
	}
}
