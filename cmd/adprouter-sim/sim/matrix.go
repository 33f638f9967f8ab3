package sim

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// The goals a variant is held to against the best reference on every
// workload (the recommended preset's goals): prefill tokens at most
// GoalPrefill times, and TTFT p99 at most GoalP99 times, the best reference
// policy's; a TTFT p99 at most GoalWin times the best reference's is a win.
const (
	GoalPrefill = 1.02
	GoalP99     = 1.05
	GoalWin     = 0.80
)

// missesGoals reports whether a cell with these ratios to the best
// reference breaks a goal: prefill over GoalPrefill or TTFT p99 over
// GoalP99. Every kind of cell (Cell, EvalCell, DrawnCell, JudgedCell) is
// judged by it.
func missesGoals(prefill, p99 float64) bool { return prefill > GoalPrefill || p99 > GoalP99 }

// goalExcess is how far a cell with these ratios is from its goals: the
// larger of prefill over GoalPrefill and p99 over GoalP99 (above 1: a
// miss). Cells sort by it, worst first.
func goalExcess(prefill, p99 float64) float64 { return max(prefill/GoalPrefill, p99/GoalP99) }

// Cell is one variant on one workload, engine and reuse semantics of a
// robustness matrix, relative to the best reference there.
type Cell struct {
	Seed     uint64  `json:"seed"`
	DPSize   int     `json:"dp_size"`
	Reuse    string  `json:"reuse"`
	Workload string  `json:"workload"`
	Policy   string  `json:"policy"`
	Best     string  `json:"best_reference"`
	Prefill  float64 `json:"prefill_vs_best"`
	P99      float64 `json:"ttft_p99_vs_best"`
}

// Miss reports whether the cell breaks a goal: prefill over GoalPrefill or
// TTFT p99 over GoalP99 of the best reference's.
func (c Cell) Miss() bool { return missesGoals(c.Prefill, c.P99) }

// Win reports whether the cell's TTFT p99 is at least 20% below the best
// reference's.
func (c Cell) Win() bool { return c.P99 > 0 && c.P99 <= GoalWin }

// Cells returns, for every non-reference variant of the sweep, one cell per
// reuse semantics and workload; seed and dp label them.
func (s *Sweep) Cells(seed uint64, dp int) []Cell {
	var out []Cell
	for _, t := range s.Tables {
		for _, c := range t.Compare {
			for _, r := range c.Rows {
				if r.Reference {
					continue
				}
				out = append(out, Cell{Seed: seed, DPSize: dp, Reuse: t.Reuse, Workload: c.Workload, Policy: r.Policy,
					Best: c.Best, Prefill: r.PrefillVsBest, P99: r.P99VsBest})
			}
		}
	}
	return out
}

// WriteMatrix writes a robustness matrix: every cell that misses a goal or
// wins, then per variant the number of cells, misses and wins.
func WriteMatrix(w io.Writer, cells []Cell) error {
	var b strings.Builder
	fmt.Fprintf(&b, "robustness matrix: prefill > %.2fx or TTFT p99 > %.2fx of the best reference is a miss; p99 <= %.2fx a win\n",
		GoalPrefill, GoalP99, GoalWin)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "cell\tpolicy\tseed\tdp\treuse\tworkload\tprefill\tp99\tbest reference\t")
	type tally struct{ cells, misses, wins int }
	var order []string
	tallies := map[string]*tally{}
	for _, c := range cells {
		t := tallies[c.Policy]
		if t == nil {
			t = &tally{}
			tallies[c.Policy] = t
			order = append(order, c.Policy)
		}
		t.cells++
		mark := ""
		if c.Win() {
			t.wins++
			mark = "win"
		}
		if c.Miss() {
			t.misses++
			mark = "MISS"
		}
		if mark != "" {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%.2fx\t%.2fx\t%s\t\n", mark, c.Policy, c.Seed, c.DPSize, c.Reuse, c.Workload, c.Prefill, c.P99, c.Best)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range order {
		t := tallies[p]
		fmt.Fprintf(&b, "%s: %d cells, %d misses, %d wins\n", p, t.cells, t.misses, t.wins)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
