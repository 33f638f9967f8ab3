package sim

import (
	"strings"
	"testing"
)

func TestCellGoals(t *testing.T) {
	for _, tc := range []struct {
		prefill, p99 float64
		miss, win    bool
	}{
		{1.00, 1.00, false, false},
		{1.02, 1.05, false, false},
		{1.021, 1.00, true, false},
		{0.50, 1.051, true, false},
		{1.00, 0.80, false, true},
		{1.03, 0.50, true, true}, // a win that computes too much is still a miss
		{1.00, 0, false, false},  // no TTFT to compare: not a win
	} {
		c := Cell{Prefill: tc.prefill, P99: tc.p99}
		if c.Miss() != tc.miss || c.Win() != tc.win {
			t.Errorf("prefill %.3f p99 %.3f: miss %v win %v, want %v %v", tc.prefill, tc.p99, c.Miss(), c.Win(), tc.miss, tc.win)
		}
	}
}

func TestMatrix(t *testing.T) {
	_, sw := tinySweep(t)
	cells := sw.Cells(7, tinyEngine().DPSize)
	// Two extra variants (kv_cache_aware is a reference, not repeated),
	// three workloads, two reuse semantics.
	if len(cells) != 1*3*2 {
		t.Fatalf("%d cells, want 6", len(cells))
	}
	misses := 0
	for _, c := range cells {
		if c.Seed != 7 || c.Policy != VariantKVProbeIndex || c.Best == "" {
			t.Errorf("cell %+v", c)
		}
		if c.Miss() {
			misses++
		}
	}
	var b strings.Builder
	if err := WriteMatrix(&b, cells); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if want := VariantKVProbeIndex + ": 6 cells, "; !strings.Contains(out, want) || strings.Count(out, "MISS ") != misses {
		t.Errorf("matrix output lacks %q or lists other than %d misses:\n%s", want, misses, out)
	}
}
