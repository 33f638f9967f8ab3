package sim

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// cell is a judged cell of family f, case c, on-schedule reuse.
func cell(f, c string, prefill, p99 float64) JudgedCell {
	return JudgedCell{Family: f, Case: c, Reuse: ReuseOnSchedule, Prefill: prefill, P99: p99}
}

// keys names the cells of changes, in order.
func keys(changes []CellChange) string {
	var s []string
	for _, c := range changes {
		s = append(s, c.After.Case)
	}
	return strings.Join(s, ",")
}

// CompareEvals matches cells by family, case and semantics and sorts every
// cell into one list: starts missing (worst first), stops missing (most
// moved first), moved past a threshold (largest move first), or
// unchanged within the thresholds (listed nowhere).
func TestCompareEvals(t *testing.T) {
	base := Judged{Grid: "full", Variant: "recommended", Cells: []JudgedCell{
		cell("a", "still", 1.00, 1.00),
		cell("a", "breaks", 1.00, 1.00),
		cell("a", "breaks-more", 1.00, 1.04),
		cell("a", "heals", 1.00, 1.10),
		cell("a", "heals-more", 1.05, 1.00),
		cell("b", "slower", 1.00, 0.90),
		cell("b", "faster", 1.00, 0.80),
		cell("b", "more-prefill", 0.95, 1.00),
		cell("b", "jitter", 1.000, 1.000),
		cell("b", "still-missing", 1.00, 1.20),
		cell("b", "gone", 1.00, 1.00),
	}}
	run := Judged{Grid: "full", Variant: "variant", Cells: []JudgedCell{
		cell("a", "still", 1.00, 1.00),
		cell("a", "breaks", 1.00, 1.06),
		cell("a", "breaks-more", 1.05, 1.04),
		cell("a", "heals", 1.00, 1.05),
		cell("a", "heals-more", 0.90, 0.90),
		cell("b", "slower", 1.00, 0.95),
		cell("b", "faster", 1.00, 0.70),
		cell("b", "more-prefill", 0.96, 1.00),
		cell("b", "jitter", 1.004, 1.019),
		cell("b", "still-missing", 1.00, 1.30),
		cell("b", "new", 1.00, 1.00),
		// The same case under the other semantics is another cell.
		{Family: "a", Case: "still", Reuse: ReuseAfterIteration, Prefill: 1, P99: 1},
	}}
	c, err := CompareEvals(base, run)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what      string
		got, want any
	}{
		{"common", c.Common, 10},
		{"only in the baseline", c.OnlyBase, 1},
		{"only in the run", c.OnlyRun, 2},
		{"misses before", c.MissesBefore, 3},
		{"misses after", c.MissesAfter, 3},
		{"now missing", keys(c.NowMissing), "breaks-more,breaks"},
		{"no longer missing", keys(c.NoLongerMissing), "heals-more,heals"},
		{"moved", keys(c.Moved), "faster,still-missing,slower,more-prefill"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %v, want %v", tc.what, tc.got, tc.want)
		}
	}
}

// Evaluations that cannot be compared are refused, saying why.
func TestCompareEvalsRefuses(t *testing.T) {
	one := Judged{Grid: "full", Cells: []JudgedCell{cell("a", "x", 1, 1)}}
	drawn := Judged{Grid: "full", Draws: 5, Cells: []JudgedCell{cell("a", "x", 1, 1)}}
	other := Judged{Grid: "full (seeds +10)", Cells: []JudgedCell{cell("a", "y", 1, 1)}}
	for _, tc := range []struct {
		name      string
		base, run Judged
		want      string
	}{
		{"one run against draws", one, drawn, "the baseline is judged on one run, this run by the median over 5 draws"},
		{"draws against one run", drawn, one, "the baseline is judged by the median over 5 draws, this run on one run"},
		{"no cell in common", one, other, "no cell in common between the baseline (full, 1 cells) and this run (full (seeds +10), 1 cells)"},
	} {
		if _, err := CompareEvals(tc.base, tc.run); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}

// ReadJudged reads what WriteJSON writes, one run by its ratios and a
// judgement over draws by its medians, and refuses anything else.
func TestReadJudged(t *testing.T) {
	ev := &Evaluation{Tool: "adprouter-sim", Version: 1, Grid: "quick", Variant: "recommended", Cells: []EvalCell{
		{Family: "a", Case: "x", Reuse: ReuseAfterIteration, Prefill: 1.01, P99: 1.07},
	}}
	draws := &EvalDraws{Tool: "adprouter-sim", Version: 1, Grid: "quick", Variant: "recommended", Draws: []string{"d1", "d2", "d3"},
		Cells: []DrawnCell{{Family: "a", Case: "x", Reuse: ReuseAfterIteration, Prefill: []float64{1, 1.03, 1.01},
			P99: []float64{1.2, 0.9, 1.0}, MedianPrefill: 1.01, MedianP99: 1.0}}}
	for _, tc := range []struct {
		name  string
		write func(*bytes.Buffer) error
		want  Judged
	}{
		{"one run", func(b *bytes.Buffer) error { return ev.WriteJSON(b) },
			Judged{Grid: "quick", Variant: "recommended", Cells: []JudgedCell{{"a", "x", ReuseAfterIteration, 1.01, 1.07}}}},
		{"over draws", func(b *bytes.Buffer) error { return draws.WriteJSON(b) },
			Judged{Grid: "quick", Variant: "recommended", Draws: 3, Cells: []JudgedCell{{"a", "x", ReuseAfterIteration, 1.01, 1.0}}}},
	} {
		var b bytes.Buffer
		if err := tc.write(&b); err != nil {
			t.Fatal(err)
		}
		got, err := ReadJudged(&b)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: read %+v, want %+v", tc.name, got, tc.want)
		}
	}
	for _, bad := range []string{"", "not json", `{"tool":"adprouter-sim","cells":[]}`,
		`{"tool":"other","cells":[{"family":"a","case":"x","reuse":"on-schedule","ttft_p99_vs_best":1}]}`,
		`{"tool":"adprouter-sim","cells":[{"family":"a","case":"x","reuse":"on-schedule"}]}`,
		`{"tool":"adprouter-sim","draws":["d1"],"cells":[{"family":"a","ttft_p99_vs_best":1}]}`} {
		if _, err := ReadJudged(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "evaluation") {
			t.Errorf("ReadJudged(%q): error %v, want one naming what it expected", bad, err)
		}
	}
}

// Write lists every cell that starts or stops missing and the first cells
// that moved otherwise.
func TestEvalComparisonWrite(t *testing.T) {
	base := Judged{Grid: "quick", Variant: "recommended", Cells: []JudgedCell{
		cell("a", "breaks", 1, 1), cell("a", "m1", 1, 0.9), cell("a", "m2", 1, 0.8)}}
	run := Judged{Grid: "quick", Variant: "v", Cells: []JudgedCell{
		cell("a", "breaks", 1, 1.1), cell("a", "m1", 1, 0.95), cell("a", "m2", 1, 0.9)}}
	c, err := CompareEvals(base, run)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := c.Write(&b, 1); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"against the baseline (quick of recommended): misses 0 -> 1 of 3 cells in both\n",
		"now missing (1):", "1.000x -> 1.100x", "moved by more than 0.02x p99 or 0.005x prefill (2, the first 1):", "m2"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "no longer missing") || strings.Contains(out, "m1") {
		t.Errorf("output lists an empty list or a cell past the bound:\n%s", out)
	}
}
