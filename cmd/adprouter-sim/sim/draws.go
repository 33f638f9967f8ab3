package sim

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// EvalDraws is a variant judged over several draws of the grid: the same
// cases with their arrivals jittered by another draw each (JitterArrivals).
//
// A cell's TTFT p99 is set by its slowest few requests, and which requests
// meet in one lock-step iteration often decides those: on a single run about
// half the grid's cells move by more than the p99 goal's 5% from one draw
// to the next, the best reference's as much as the variant's. Judged by the
// median of its ratios over the draws, a cell misses when it misses on most
// draws, which tells a rule's loss from one draw's luck; Every counts the
// cells that miss on every draw.
type EvalDraws struct {
	Tool    string   `json:"tool"`
	Version int      `json:"version"`
	Grid    string   `json:"grid"`
	Variant string   `json:"variant"`
	Reuse   []string `json:"reuse"`
	// Draws names each draw (the grids' labels, in order).
	Draws []string `json:"draws"`
	// Cells is one entry per case and reuse semantics, in the
	// evaluations' order; Families one per family and semantics.
	Cells    []DrawnCell   `json:"cells"`
	Families []DrawnFamily `json:"families"`
}

// DrawnCell is one cell over the draws.
type DrawnCell struct {
	Family string `json:"family"`
	Case   string `json:"case"`
	Reuse  string `json:"reuse"`
	// Prefill and P99 are the cell's ratios to the best reference on each
	// draw (EvalCell.Prefill, EvalCell.P99), in draw order.
	Prefill []float64 `json:"prefill_vs_best"`
	P99     []float64 `json:"ttft_p99_vs_best"`
	// MedianPrefill and MedianP99 are their medians (the mean of the two
	// middle ones for an even number of draws).
	MedianPrefill float64 `json:"median_prefill_vs_best"`
	MedianP99     float64 `json:"median_ttft_p99_vs_best"`
	// Missed counts the draws on which the cell misses a goal.
	Missed int `json:"draws_missed"`
}

// Miss reports whether the cell's medians break a goal.
func (c DrawnCell) Miss() bool { return missesGoals(c.MedianPrefill, c.MedianP99) }

// Excess is EvalCell.Excess of the medians.
func (c DrawnCell) Excess() float64 { return goalExcess(c.MedianPrefill, c.MedianP99) }

// DrawnFamily summarises a family's cells over the draws under one reuse
// semantics.
type DrawnFamily struct {
	Family string `json:"family"`
	Reuse  string `json:"reuse"`
	Cells  int    `json:"cells"`
	// Misses counts the cells whose medians miss; Every those that miss
	// on every draw, Some those that miss on some draws but not every.
	Misses int `json:"misses"`
	Every  int `json:"every_draw"`
	Some   int `json:"some_draws"`
	// P99GeoMean is the geometric mean of the cells' median p99 ratios.
	P99GeoMean float64 `json:"ttft_p99_geomean"`
}

// JudgeDraws combines evaluations of the same grid and variant, one per
// draw, cell by cell. It fails unless there are at least two and they list
// the same cells in the same order.
func JudgeDraws(evs []*Evaluation) (*EvalDraws, error) {
	if len(evs) < 2 {
		return nil, fmt.Errorf("judging over draws takes 2 evaluations or more, got %d", len(evs))
	}
	first := evs[0]
	d := &EvalDraws{Tool: first.Tool, Version: first.Version, Grid: first.Grid, Variant: first.Variant, Reuse: first.Reuse}
	for k, e := range evs {
		if e.Variant != first.Variant || len(e.Cells) != len(first.Cells) {
			return nil, fmt.Errorf("draw %d: %s on %d cells, want %s on %d as draw 0", k, e.Variant, len(e.Cells),
				first.Variant, len(first.Cells))
		}
		d.Draws = append(d.Draws, e.Grid)
	}
	for i, c := range first.Cells {
		dc := DrawnCell{Family: c.Family, Case: c.Case, Reuse: c.Reuse}
		for k, e := range evs {
			x := e.Cells[i]
			if x.Family != c.Family || x.Case != c.Case || x.Reuse != c.Reuse {
				return nil, fmt.Errorf("draw %d: cell %d is %s/%s %s, want %s/%s %s as draw 0", k, i, x.Family, x.Case, x.Reuse,
					c.Family, c.Case, c.Reuse)
			}
			dc.Prefill = append(dc.Prefill, x.Prefill)
			dc.P99 = append(dc.P99, x.P99)
			if x.Miss() {
				dc.Missed++
			}
		}
		dc.MedianPrefill, dc.MedianP99 = median(dc.Prefill), median(dc.P99)
		d.Cells = append(d.Cells, dc)
	}
	d.summarise(len(evs))
	return d, nil
}

// median returns the median of xs (the mean of the two middle values when
// there are an even number), leaving xs as it is.
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// summarise fills Families, in the order the cells name them.
func (d *EvalDraws) summarise(draws int) {
	index := map[[2]string]int{}
	logs := map[[2]string]float64{}
	for _, c := range d.Cells {
		key := [2]string{c.Family, c.Reuse}
		i, ok := index[key]
		if !ok {
			i = len(d.Families)
			index[key] = i
			d.Families = append(d.Families, DrawnFamily{Family: c.Family, Reuse: c.Reuse})
		}
		f := &d.Families[i]
		f.Cells++
		logs[key] += math.Log(c.MedianP99)
		if c.Miss() {
			f.Misses++
		}
		switch {
		case c.Missed == draws:
			f.Every++
		case c.Missed > 0:
			f.Some++
		}
	}
	for i := range d.Families {
		f := &d.Families[i]
		f.P99GeoMean = math.Exp(logs[[2]string{f.Family, f.Reuse}] / float64(f.Cells))
	}
}

// Misses counts the cells whose medians miss a goal.
func (d *EvalDraws) Misses() int {
	n := 0
	for _, c := range d.Cells {
		if c.Miss() {
			n++
		}
	}
	return n
}

// WriteDraws writes the judgement: per reuse semantics a table of the
// families (cells, misses by median, cells missing on every draw and on
// some, the median p99 geometric mean) and the worst cells by median, each
// with its ratios on every draw; then the verdict. worst bounds the cells
// listed per semantics.
func (d *EvalDraws) WriteDraws(w io.Writer, worst int) error {
	var b strings.Builder
	fmt.Fprintf(&b, "evaluation %s of %s over %d draws of the arrival jitter:\n", d.Grid, d.Variant, len(d.Draws))
	for k, g := range d.Draws {
		fmt.Fprintf(&b, "  draw %d: %s\n", k+1, g)
	}
	fmt.Fprintf(&b, "a cell misses when the median of its ratios to the best reference does (prefill > %.2fx or TTFT p99 > %.2fx)\n",
		GoalPrefill, GoalP99)
	for _, m := range d.Reuse {
		fmt.Fprintf(&b, "\nreuse %s:\n", m)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  family\tcells\tmisses\tevery draw\tsome draws\tmedian p99 geomean\t")
		var misses, every, some int
		for _, f := range d.Families {
			if f.Reuse != m {
				continue
			}
			misses, every, some = misses+f.Misses, every+f.Every, some+f.Some
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%.2fx\t\n", f.Family, f.Cells, f.Misses, f.Every, f.Some, f.P99GeoMean)
		}
		fmt.Fprintf(tw, "  all\t\t%d\t%d\t%d\t\t\n", misses, every, some)
		if err := tw.Flush(); err != nil {
			return err
		}
		cells := worstCells(d.Cells, func(c DrawnCell) bool { return c.Reuse == m }, worst)
		fmt.Fprintf(&b, "worst %d cells by median (p99 on each draw):\n", len(cells))
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  \tfamily\tcase\tprefill\tp99\tmissed\tp99 per draw\t")
		for _, c := range cells {
			mark := ""
			if c.Miss() {
				mark = "MISS"
			}
			per := make([]string, len(c.P99))
			for k, v := range c.P99 {
				per[k] = fmt.Sprintf("%.3f", v)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%.3fx\t%.3fx\t%d of %d\t%s\t\n", mark, c.Family, c.Case, c.MedianPrefill, c.MedianP99,
				c.Missed, len(c.P99), strings.Join(per, " "))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if n := d.Misses(); n == 0 {
		fmt.Fprintf(&b, "\nverdict by median: PASS (%d cells)\n", len(d.Cells))
	} else {
		fmt.Fprintf(&b, "\nverdict by median: FAIL, %d of %d cells miss\n", n, len(d.Cells))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the judgement as indented JSON.
func (d *EvalDraws) WriteJSON(w io.Writer) error { return writeJSON(w, d) }
