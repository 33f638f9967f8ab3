package sim

import (
	"bytes"
	"strings"
	"testing"
)

// drawn builds one draw's evaluation from (prefill, p99) ratios, one pair
// per cell of a fixed three-cell grid: two cells of family a, one of b.
func drawn(label string, ratios ...[2]float64) *Evaluation {
	e := &Evaluation{Grid: label, Variant: VariantRecommended, Reuse: []string{ReuseAfterIteration}}
	names := [][2]string{{"a", "one"}, {"a", "two"}, {"b", "three"}}
	for i, r := range ratios {
		e.Cells = append(e.Cells, EvalCell{Family: names[i][0], Case: names[i][1], Reuse: ReuseAfterIteration, Prefill: r[0], P99: r[1]})
	}
	return e
}

// A cell misses by its medians: one draw's loss does not make a miss, a
// loss on most draws does, and the counts of draws missed say which cells
// miss on every draw and which on some.
func TestJudgeDraws(t *testing.T) {
	evs := []*Evaluation{
		drawn("d1", [2]float64{1.00, 1.20}, [2]float64{1.00, 1.10}, [2]float64{1.03, 0.90}),
		drawn("d2", [2]float64{1.00, 0.95}, [2]float64{1.00, 1.08}, [2]float64{1.03, 0.90}),
		drawn("d3", [2]float64{1.00, 0.97}, [2]float64{1.00, 1.00}, [2]float64{1.05, 0.80}),
	}
	d, err := JudgeDraws(evs)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		prefill, p99 float64
		missed       int
		miss         bool
	}{
		{1.00, 0.97, 1, false}, // one draw's 1.20
		{1.00, 1.08, 2, true},  // two of three
		{1.03, 0.90, 3, true},  // prefill on every draw
	} {
		c := d.Cells[i]
		if c.MedianPrefill != want.prefill || c.MedianP99 != want.p99 || c.Missed != want.missed || c.Miss() != want.miss {
			t.Errorf("cell %d: medians %.2f/%.2f, missed %d, miss %v; want %.2f/%.2f, %d, %v", i, c.MedianPrefill, c.MedianP99,
				c.Missed, c.Miss(), want.prefill, want.p99, want.missed, want.miss)
		}
	}
	if got, want := d.Families, []DrawnFamily{
		{Family: "a", Reuse: ReuseAfterIteration, Cells: 2, Misses: 1, Every: 0, Some: 2},
		{Family: "b", Reuse: ReuseAfterIteration, Cells: 1, Misses: 1, Every: 1, Some: 0},
	}; len(got) != len(want) {
		t.Fatalf("families %+v, want %+v", got, want)
	} else {
		for i := range want {
			g := got[i]
			g.P99GeoMean = 0
			if g != want[i] {
				t.Errorf("family %d: %+v, want %+v", i, g, want[i])
			}
		}
	}
	if d.Misses() != 2 {
		t.Errorf("%d misses by median, want 2", d.Misses())
	}
	var out bytes.Buffer
	if err := d.WriteDraws(&out, 2); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"over 3 draws", "draw 3: d3", "verdict by median: FAIL, 2 of 3 cells miss",
		"worst 2 cells by median", "1.100 1.080 1.000"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// An even number of draws takes the mean of the two middle ratios.
func TestMedianEven(t *testing.T) {
	xs := []float64{1.3, 0.9, 1.0, 1.1}
	if got := median(xs); got != 1.05 {
		t.Errorf("median %v = %v, want 1.05", xs, got)
	}
	if xs[0] != 1.3 {
		t.Errorf("median reordered its input: %v", xs)
	}
}

func TestJudgeDrawsMismatch(t *testing.T) {
	a := drawn("d1", [2]float64{1, 1}, [2]float64{1, 1}, [2]float64{1, 1})
	for _, tc := range []struct {
		name string
		evs  []*Evaluation
		want string
	}{
		{"one draw", []*Evaluation{a}, "2 evaluations or more, got 1"},
		{"fewer cells", []*Evaluation{a, drawn("d2", [2]float64{1, 1})}, "draw 1: recommended on 1 cells, want recommended on 3"},
		{"other cells", []*Evaluation{a, func() *Evaluation {
			e := drawn("d2", [2]float64{1, 1}, [2]float64{1, 1}, [2]float64{1, 1})
			e.Cells[2].Case = "four"
			return e
		}()}, "draw 1: cell 2 is b/four after-iteration, want b/three after-iteration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := JudgeDraws(tc.evs); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}
