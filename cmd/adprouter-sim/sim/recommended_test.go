package sim

import (
	"os"
	"strings"
	"testing"
)

// The recommended preset against the best reference policy on the quick
// slice of the evaluation (EvalQuick: every family, both reuse semantics, the
// issue's cases among them, and the Mooncake slices), judged by the
// evaluation's own rules (EvalCell.Miss, EvalFamily.Win): prefill at most
// GoalPrefill (1.02x) and TTFT p99 at most GoalP99 (1.05x) the best
// reference's on every cell, and TTFT p99 at least 20% better on at least
// EvalWinFamilies families per semantics. The variant is told the simulated
// engine's reuse semantics and iteration budget, as an operator configures
// them.
//
// The cells listed in knownMisses miss a goal on purpose (a trade the preset
// makes; docs/routing-quality.md); each must stay within the bounds given.
// Any other miss fails. Not asserted: that a trace family is among the
// winning ones, which the preset does not achieve (the full evaluation
// reports it).
func TestRecommendedEvaluation(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the quick evaluation (a few seconds)")
	}
	traces, err := LoadEvalTraces(os.DirFS("../testdata"), "mooncake")
	if err != nil {
		t.Fatal(err)
	}
	if len(traces) < 5 {
		t.Fatalf("%d Mooncake slices, want 5 or more", len(traces))
	}
	cases, err := EvalGrid(EvalQuick, traces)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := RunEval(EvalOptions{Grid: EvalQuick, Cases: cases, Variant: mustVariants(t, VariantRecommended)[0]})
	if err != nil {
		t.Fatal(err)
	}
	knownMisses := []struct {
		reuse, family, caseName string
		maxPrefill, maxP99      float64
		why                     string
	}{
		{ReuseOnSchedule, "siblings", "samples=8 seed=1 dp8", 0.30, 1.11,
			"samples of one prompt stay beside the first under on-schedule reuse: computing the prompt again elsewhere " +
				"is counted as its cost, so they take a quarter of the best reference's prefill and serialise their last blocks on one rank"},
		{ReuseOnSchedule, "loaded", "tenants=1 zipf=0 rate=4x seed=1 dp8", 1.00, 1.15,
			"one system prompt at four times the steady rate: the ranks it reaches while the router ramps up take all " +
				"its traffic later (4 here, where the conversation policy's round robin reaches all 8), and in lock step " +
				"their prefill and decoding lengthen every rank's iterations"},
	}
	if want := len(cases) * len(ReuseModes); len(ev.Cells) != want {
		t.Fatalf("%d cells, want %d (every case and reuse semantics)", len(ev.Cells), want)
	}
	for _, c := range ev.Cells {
		if !c.Miss() {
			continue
		}
		known := false
		for _, k := range knownMisses {
			if k.reuse == c.Reuse && k.family == c.Family && strings.HasPrefix(c.Case, k.caseName) {
				known = true
				if c.Prefill > k.maxPrefill || c.P99 > k.maxP99 {
					t.Errorf("reuse %s, %s/%s: prefill %.3fx (known miss, bound %.2f), TTFT p99 %.3fx (bound %.2f) of %s; %s",
						c.Reuse, c.Family, c.Case, c.Prefill, k.maxPrefill, c.P99, k.maxP99, c.Best, k.why)
				}
			}
		}
		if !known {
			t.Errorf("reuse %s, %s/%s: prefill %.3fx (goal %.2f), TTFT p99 %.3fx (goal %.2f) of the best reference %s",
				c.Reuse, c.Family, c.Case, c.Prefill, GoalPrefill, c.P99, GoalP99, c.Best)
		}
	}
	// Against the KV-aware references alone, the policy the preset is a
	// setting of, only the siblings case above misses (under on-schedule
	// reuse, where its samples serialise their last blocks).
	for _, s := range ev.AgainstKV {
		want := 0
		if s.Reuse == ReuseOnSchedule {
			want = 1
		}
		if s.Cells != len(cases) || s.Misses > want || s.WorstPrefill > GoalPrefill || s.WorstP99 > 1.11 {
			t.Errorf("reuse %s, against %v alone: %d misses of %d cells (want at most %d of %d), worst prefill %.3fx, worst p99 %.3fx (want at most %.2f and 1.11)",
				s.Reuse, KVReferences, s.Misses, s.Cells, want, len(cases), s.WorstPrefill, s.WorstP99, GoalPrefill)
		}
	}
	wins := map[string]int{}
	for _, f := range ev.Families {
		if f.Win() {
			wins[f.Reuse]++
		}
	}
	for _, m := range ReuseModes {
		if wins[m] < EvalWinFamilies {
			t.Errorf("reuse %s: TTFT p99 geometric mean <= %.2fx of the best reference on %d families, want %d or more",
				m, GoalWin, wins[m], EvalWinFamilies)
		}
	}
}
