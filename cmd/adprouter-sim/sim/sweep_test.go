package sim

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func tinySweep(t *testing.T) (SweepOptions, *Sweep) {
	t.Helper()
	o := SweepOptions{Engine: tinyEngine(), Workloads: []WorkloadConfig{tinyWorkload(KindTenantSpike), tinyWorkload(KindFollowUp), tinyWorkload(KindSiblings)},
		Extra: mustVariants(t, "kv_cache_aware+probe+index,kv_cache_aware")}
	sw, err := RunSweep(o)
	if err != nil {
		t.Fatal(err)
	}
	return o, sw
}

func TestSweepStructure(t *testing.T) {
	o, sw := tinySweep(t)
	wantPolicies := append(slices.Clone(References), VariantKVProbeIndex) // kv_cache_aware not repeated
	if len(sw.Tables) != 2 || sw.Tables[0].Reuse != ReuseAfterIteration || sw.Tables[1].Reuse != ReuseOnSchedule {
		t.Fatalf("%d tables, want one per reuse semantics in order", len(sw.Tables))
	}
	for _, tab := range sw.Tables {
		if tab.Report.Engine.Reuse != tab.Reuse || tab.ReuseDescription != DescribeReuse(tab.Reuse) || len(tab.Compare) != len(o.Workloads) {
			t.Fatalf("reuse %s: engine reuse %s, %d comparisons", tab.Reuse, tab.Report.Engine.Reuse, len(tab.Compare))
		}
		for i, c := range tab.Compare {
			run := &tab.Report.Runs[i]
			if c.Workload != o.Workloads[i].Kind {
				t.Errorf("comparison %d is of %s", i, c.Workload)
			}
			var policies []string
			var best, low *Result
			for _, r := range run.Results {
				policies = append(policies, r.Policy)
				if slices.Contains(References, r.Policy) {
					if best == nil || r.TTFT.P99 < best.TTFT.P99 {
						best = r
					}
					if low == nil || r.PrefillTokens < low.PrefillTokens {
						low = r
					}
				}
			}
			if !slices.Equal(policies, wantPolicies) {
				t.Fatalf("policies %v, want %v", policies, wantPolicies)
			}
			if c.Best != best.Policy || c.LowestPrefill != low.Policy {
				t.Errorf("%s: best %s lowest %s, want %s %s", c.Workload, c.Best, c.LowestPrefill, best.Policy, low.Policy)
			}
			for k, row := range c.Rows {
				r := run.Results[k]
				if row.Policy != r.Policy || row.Reference != slices.Contains(References, r.Policy) ||
					row.PrefillVsLowest != ratio(r.PrefillTokens, low.PrefillTokens) || row.P99VsBest != fratio(r.TTFT.P99, best.TTFT.P99) ||
					row.PrefillVsBest != ratio(r.PrefillTokens, best.PrefillTokens) || row.P50VsBest != fratio(r.TTFT.P50, best.TTFT.P50) {
					t.Errorf("%s %s: row %+v does not match result", c.Workload, r.Policy, row)
				}
				if row.Policy == c.Best && (row.P99VsBest != 1 || row.PrefillVsBest != 1) {
					t.Errorf("%s: the best reference is not 1x itself: %+v", c.Workload, row)
				}
				if row.Reference && row.P99VsBest < 1 {
					t.Errorf("%s: reference %s beats the best p99", c.Workload, row.Policy)
				}
			}
		}
	}

	var table, js, svg bytes.Buffer
	if err := sw.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	out := table.String()
	for _, want := range []string{"workloads:\n  tenantspike (seed 1", "  followup (seed 1",
		"\nreuse after-iteration: blocks reusable after the iteration that computed them (TensorRT-LLM)\nengine: ",
		"\nreuse on-schedule: blocks reusable as soon as scheduled (vLLM-like)\nengine: ", ", reuse on-schedule;",
		"reuse after-iteration, summary: prefill vs min / TTFT p99 vs best", "reuse on-schedule, summary:",
		"prefill tok  vs best  vs min  TTFT p50  vs best", " *  "} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// One row per workload and variant in each detail table, one row per
	// variant in each summary.
	for _, p := range wantPolicies {
		if n := strings.Count(out, "\n  "+p+" "); n != 2 {
			t.Errorf("%s: %d summary rows, want 2", p, n)
		}
	}
	if n := strings.Count(out, "kv_cache_aware+probe+index"); n != 2*len(o.Workloads)+2 {
		t.Errorf("kv_cache_aware+probe+index appears %d times, want %d", n, 2*len(o.Workloads)+2)
	}
	if err := sw.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Sweep
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Tables) != 2 || back.Tables[1].Reuse != ReuseOnSchedule || back.Tables[1].Report.Engine.Reuse != ReuseOnSchedule ||
		back.Tables[0].Compare[2].Rows[4].P99VsBest != sw.Tables[0].Compare[2].Rows[4].P99VsBest {
		t.Error("the JSON does not carry the sweep")
	}
	if err := WritePercentileSVG(&svg, sw.Reports()); err != nil {
		t.Fatal(err)
	}
	s := svg.String()
	if !strings.HasPrefix(s, "<svg") || strings.Count(s, "TTFT percentiles") != 2 ||
		!strings.Contains(s, "tenantspike, reuse on-schedule") || strings.Contains(s, "followup, reuse") || strings.Count(s, "<path") != 2*len(wantPolicies) {
		t.Errorf("percentile SVG: want one panel per reuse semantics for the spike only, one line per variant:\n%.600s", s)
	}

	// Deterministic, whatever the parallelism.
	o.Parallel = 1
	again, err := RunSweep(o)
	if err != nil {
		t.Fatal(err)
	}
	var js2 bytes.Buffer
	if err := again.WriteJSON(&js2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(js.Bytes(), js2.Bytes()) {
		t.Error("same sweep, different JSON")
	}
}

func TestSweepErrors(t *testing.T) {
	o := SweepOptions{Engine: tinyEngine(), Workloads: []WorkloadConfig{tinyWorkload(KindShared)}}
	o.Reuse = []string{ReuseOnSchedule, ReuseOnSchedule}
	if _, err := RunSweep(o); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a reuse semantics listed twice: %v", err)
	}
	o.Reuse = []string{"eager"}
	if _, err := RunSweep(o); err == nil || !strings.Contains(err.Error(), "reuse") {
		t.Errorf("unknown reuse semantics: %v", err)
	}
	run := &Run{Workload: tinyWorkload(KindShared), Results: []*Result{{Policy: VariantDefault}}}
	if _, err := Compare(run, References); err == nil || !strings.Contains(err.Error(), "kv_cache_aware") {
		t.Errorf("a missing reference: %v", err)
	}
}
