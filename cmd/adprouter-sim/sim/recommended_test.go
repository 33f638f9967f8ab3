package sim

import (
	"testing"
)

// The recommended preset against the best reference, on the default sweep
// and the test trace (README "Routing quality"): prefill at most 1.02x and
// TTFT p99 at most 1.05x the best reference's on every workload, under both
// reuse semantics, and p99 at least 20% better on two workloads or more.
// The misses README states are bounded here too, so that they cannot grow
// unnoticed: followup computes up to 6% more prefill than the conversation
// policy (in-flight follow-ups moved off a busy rank compute their context
// again; their TTFT is lower).
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
	prefillBound := map[string]float64{KindFollowUp: 1.06}
	for _, tab := range sw.Tables {
		wins := 0
		for _, c := range tab.Compare {
			var row *ComparisonRow
			for i := range c.Rows {
				if c.Rows[i].Policy == VariantRecommended {
					row = &c.Rows[i]
				}
			}
			bound := 1.02
			if b, ok := prefillBound[c.Workload]; ok {
				bound = b
			}
			if row.PrefillVsBest > bound || row.P99VsBest > 1.05 {
				t.Errorf("reuse %s, %s: prefill %.2fx (bound %.2f), TTFT p99 %.2fx (bound 1.05) of the best reference %s",
					tab.Reuse, c.Workload, row.PrefillVsBest, bound, row.P99VsBest, c.Best)
			}
			if row.P99VsBest <= 0.8 {
				wins++
			}
		}
		if wins < 2 {
			t.Errorf("reuse %s: TTFT p99 at least 20%% better than the best reference on %d workloads, want 2 or more", tab.Reuse, wins)
		}
	}
}
