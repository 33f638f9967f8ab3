package sim

import (
	"testing"
)

// The recommended preset against the best reference, on the default sweep
// and the test trace (README "Routing quality"): prefill at most GoalPrefill
// (1.02x) and TTFT p99 at most GoalP99 (1.05x) the best reference's on every
// workload, under both reuse semantics, and p99 at least 20% better on two
// workloads or more. No exceptions: every workload, both semantics.
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
	for _, tab := range sw.Tables {
		wins := 0
		for _, c := range tab.Compare {
			var row *ComparisonRow
			for i := range c.Rows {
				if c.Rows[i].Policy == VariantRecommended {
					row = &c.Rows[i]
				}
			}
			if row.PrefillVsBest > GoalPrefill || row.P99VsBest > GoalP99 {
				t.Errorf("reuse %s, %s: prefill %.2fx (bound %.2f), TTFT p99 %.2fx (bound %.2f) of the best reference %s",
					tab.Reuse, c.Workload, row.PrefillVsBest, GoalPrefill, row.P99VsBest, GoalP99, c.Best)
			}
			if row.P99VsBest <= GoalWin {
				wins++
			}
		}
		if wins < 2 {
			t.Errorf("reuse %s: TTFT p99 at least 20%% better than the best reference on %d workloads, want 2 or more", tab.Reuse, wins)
		}
	}
}
