package sim

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// Comparing two evaluations of one grid: a change to a rule or an option is
// judged by what it does to each cell, not only by the miss count, which
// can stay the same while cells trade places. The baseline is an
// evaluation saved with -json (WriteJSON of an Evaluation, one run, or of
// an EvalDraws, judged by the medians over draws); CompareEvals matches its
// cells to a new run's by family, case and reuse semantics.

// Thresholds of a move CompareEvals reports for a cell that neither starts
// nor stops missing: a TTFT p99 ratio that changes by more than MoveP99, or
// a prefill ratio by more than MovePrefill. Smaller changes are within one
// lock-step iteration of a p99 or a block of a prefix on most cells.
const (
	MoveP99     = 0.02
	MovePrefill = 0.005
)

// JudgedCell is one cell of an evaluation as CompareEvals reads it: its
// ratios to the best reference (the medians, for an evaluation over
// draws).
type JudgedCell struct {
	Family  string
	Case    string
	Reuse   string
	Prefill float64
	P99     float64
}

// Miss reports whether the cell breaks a goal (GoalPrefill, GoalP99).
func (c JudgedCell) Miss() bool { return missesGoals(c.Prefill, c.P99) }

// Excess is EvalCell.Excess of the cell's ratios.
func (c JudgedCell) Excess() float64 { return goalExcess(c.Prefill, c.P99) }

// key names the cell in its grid.
func (c JudgedCell) key() string { return c.Family + "/" + c.Case + " " + c.Reuse }

// Judged is an evaluation reduced to what CompareEvals compares.
type Judged struct {
	Grid    string
	Variant string
	// Draws is how many draws of the arrival jitter each cell's ratios are
	// the median of; 0 for one run.
	Draws int
	Cells []JudgedCell
}

// Judged returns the evaluation's cells as CompareEvals reads them.
func (e *Evaluation) Judged() Judged {
	j := Judged{Grid: e.Grid, Variant: e.Variant}
	for _, c := range e.Cells {
		j.Cells = append(j.Cells, JudgedCell{c.Family, c.Case, c.Reuse, c.Prefill, c.P99})
	}
	return j
}

// Judged returns the judgement's cells, by their medians, as CompareEvals
// reads them.
func (d *EvalDraws) Judged() Judged {
	j := Judged{Grid: d.Grid, Variant: d.Variant, Draws: len(d.Draws)}
	for _, c := range d.Cells {
		j.Cells = append(j.Cells, JudgedCell{c.Family, c.Case, c.Reuse, c.MedianPrefill, c.MedianP99})
	}
	return j
}

// ReadJudged reads an evaluation written by Evaluation.WriteJSON or
// EvalDraws.WriteJSON (adprouter-sim -eval -json, with or without
// -eval-draws).
func ReadJudged(r io.Reader) (Judged, error) {
	raw, err := io.ReadAll(r)
	if err != nil {
		return Judged{}, err
	}
	var head struct {
		Tool  string   `json:"tool"`
		Draws []string `json:"draws"`
		Cells []struct {
			Family string          `json:"family"`
			Case   string          `json:"case"`
			Reuse  string          `json:"reuse"`
			P99    json.RawMessage `json:"ttft_p99_vs_best"`
		} `json:"cells"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return Judged{}, fmt.Errorf("not an evaluation written by adprouter-sim -eval -json: %w", err)
	}
	if head.Tool != "adprouter-sim" || len(head.Cells) == 0 || len(head.Cells[0].P99) == 0 {
		return Judged{}, errors.New("not an evaluation written by adprouter-sim -eval -json: want its tool, cells and their ratios")
	}
	if head.Draws != nil {
		var d EvalDraws
		if err := json.Unmarshal(raw, &d); err != nil {
			return Judged{}, fmt.Errorf("evaluation over draws: %w", err)
		}
		return d.Judged(), nil
	}
	var e Evaluation
	if err := json.Unmarshal(raw, &e); err != nil {
		return Judged{}, fmt.Errorf("evaluation: %w", err)
	}
	return e.Judged(), nil
}

// CellChange is one cell in both evaluations.
type CellChange struct {
	Before, After JudgedCell
}

// EvalComparison is what CompareEvals finds.
type EvalComparison struct {
	Base, Run Judged
	// Common counts the cells in both; OnlyBase and OnlyRun those in one
	// alone (another grid, seed offset or reuse semantics).
	Common, OnlyBase, OnlyRun int
	// MissesBefore and MissesAfter count the misses among the common
	// cells.
	MissesBefore, MissesAfter int
	// NowMissing lists the common cells that miss only in the run, worst
	// (largest Excess) first; NoLongerMissing those that missed only in the
	// baseline, and Moved the others whose ratios moved by more than
	// MoveP99 or MovePrefill, largest move (CellChange.Size) first.
	NowMissing, NoLongerMissing, Moved []CellChange
}

// CompareEvals compares the run with the baseline cell by cell. It fails
// when they share no cell or are judged differently (one run against a
// median over draws): their ratios would not measure the same thing.
func CompareEvals(base, run Judged) (*EvalComparison, error) {
	if err := JudgedAlike(base.Draws, run.Draws); err != nil {
		return nil, err
	}
	c := &EvalComparison{Base: base, Run: run}
	before := make(map[string]JudgedCell, len(base.Cells))
	for _, b := range base.Cells {
		before[b.key()] = b
	}
	seen := make(map[string]bool, len(run.Cells))
	for _, a := range run.Cells {
		b, ok := before[a.key()]
		if !ok {
			c.OnlyRun++
			continue
		}
		seen[a.key()] = true
		c.Common++
		ch := CellChange{Before: b, After: a}
		if b.Miss() {
			c.MissesBefore++
		}
		if a.Miss() {
			c.MissesAfter++
		}
		switch {
		case a.Miss() && !b.Miss():
			c.NowMissing = append(c.NowMissing, ch)
		case b.Miss() && !a.Miss():
			c.NoLongerMissing = append(c.NoLongerMissing, ch)
		case ch.Size() > 1:
			c.Moved = append(c.Moved, ch)
		}
	}
	c.OnlyBase = len(base.Cells) - len(seen)
	if c.Common == 0 {
		return nil, fmt.Errorf("no cell in common between the baseline (%s, %d cells) and this run (%s, %d cells): compare evaluations of one grid and seed offset",
			base.Grid, len(base.Cells), run.Grid, len(run.Cells))
	}
	// Worst or largest first, then by name: the order does not depend on
	// the input's.
	byKey := func(x, y CellChange) int { return strings.Compare(x.After.key(), y.After.key()) }
	slices.SortFunc(c.NowMissing, func(x, y CellChange) int {
		return cmp.Or(cmp.Compare(y.After.Excess(), x.After.Excess()), byKey(x, y))
	})
	largest := func(x, y CellChange) int { return cmp.Or(cmp.Compare(y.Size(), x.Size()), byKey(x, y)) }
	slices.SortFunc(c.NoLongerMissing, largest)
	slices.SortFunc(c.Moved, largest)
	return c, nil
}

// Size is how far the cell moved, in thresholds: the larger of its p99
// ratio's change over MoveP99 and its prefill ratio's over MovePrefill
// (above 1: a move CompareEvals reports).
func (x CellChange) Size() float64 {
	return max(math.Abs(x.After.P99-x.Before.P99)/MoveP99, math.Abs(x.After.Prefill-x.Before.Prefill)/MovePrefill)
}

// JudgedAlike reports whether a baseline judged over baseDraws draws of the
// arrival jitter (0: one run) compares with a run judged over runDraws:
// only when they are the same, as a median over draws is steadier than
// one run's ratio.
func JudgedAlike(baseDraws, runDraws int) error {
	if baseDraws != runDraws {
		return fmt.Errorf("the baseline is judged %s, this run %s: compare evaluations judged the same way",
			judgedHow(baseDraws), judgedHow(runDraws))
	}
	return nil
}

// judgedHow says how an evaluation's cells are judged.
func judgedHow(draws int) string {
	if draws == 0 {
		return "on one run"
	}
	return fmt.Sprintf("by the median over %d draws", draws)
}

// Write writes the comparison: the misses among the common cells before and
// after, every cell that starts or stops missing, and at most moved of the
// cells that moved most otherwise.
func (c *EvalComparison) Write(w io.Writer, moved int) error {
	var b bytes.Buffer
	fmt.Fprintf(&b, "against the baseline (%s of %s): misses %d -> %d of %d cells in both", c.Base.Grid, c.Base.Variant,
		c.MissesBefore, c.MissesAfter, c.Common)
	if c.OnlyBase > 0 || c.OnlyRun > 0 {
		fmt.Fprintf(&b, " (%d only in the baseline, %d only in this run)", c.OnlyBase, c.OnlyRun)
	}
	b.WriteString("\n")
	list := func(title string, cells []CellChange, n int) error {
		if len(cells) == 0 {
			return nil
		}
		shown := cells[:min(n, len(cells))]
		fmt.Fprintf(&b, "%s (%d", title, len(cells))
		if len(shown) < len(cells) {
			fmt.Fprintf(&b, ", the first %d", len(shown))
		}
		b.WriteString("):\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  family\tcase\treuse\tprefill\tp99\t")
		for _, x := range shown {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%.3fx -> %.3fx\t%.3fx -> %.3fx\t\n", x.After.Family, x.After.Case, x.After.Reuse,
				x.Before.Prefill, x.After.Prefill, x.Before.P99, x.After.P99)
		}
		return tw.Flush()
	}
	if err := list("now missing", c.NowMissing, len(c.NowMissing)); err != nil {
		return err
	}
	if err := list("no longer missing", c.NoLongerMissing, len(c.NoLongerMissing)); err != nil {
		return err
	}
	if err := list(fmt.Sprintf("moved by more than %.2fx p99 or %.3fx prefill", MoveP99, MovePrefill), c.Moved, moved); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}
