package sim

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
)

// palette colours the variants in plots, in order.
var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

// Plot geometry, in SVG user units.
const (
	plotWidth   = 1000
	panelHeight = 300
	marginLeft  = 70
	marginRight = 250
	marginTop   = 46
	marginBot   = 46
	plotBins    = 100
)

// panel is one chart: TTFT against arrival time over [from, to] ns.
type panel struct {
	title    string
	from, to int64
	window   *Window
	results  []*Result
}

// WriteSVG draws, for every workload, the mean TTFT of the requests that
// arrived in each time bin, one line per variant, on a logarithmic axis.
// When the workload has a window (coldstart: the spike) a second chart
// zooms onto it. The SVG is hand-written, self-contained and, like the JSON,
// the same for the same options.
func (r *Report) WriteSVG(w io.Writer) error {
	var panels []panel
	for _, run := range r.Runs {
		var last int64
		var win *Window
		for _, res := range run.Results {
			for _, x := range res.samples {
				last = max(last, x.arrival)
			}
			if res.Window != nil {
				win = &Window{Start: seconds(res.Window.StartS), End: seconds(res.Window.EndS)}
			}
		}
		panels = append(panels, panel{title: fmt.Sprintf("%s, reuse %s: mean TTFT by arrival time", run.Workload.Name(), r.Engine.Reuse),
			from: 0, to: max(last, 1), window: win, results: run.Results})
		if win != nil {
			margin := (win.End - win.Start) / 10
			panels = append(panels, panel{title: fmt.Sprintf("%s: the window [%gs, %gs) up close", run.Workload.Kind,
				float64(win.Start)/nsPerSecond, float64(win.End)/nsPerSecond),
				from: max(win.Start-margin, 0), to: min(win.End+margin, max(last, win.Start+1)), window: win, results: run.Results})
		}
	}
	return writeSVG(w, plotWidth, len(panels), func(b *strings.Builder, i, top int) { panels[i].draw(b, top) })
}

// panelStride is the height of one panel with its margins.
const panelStride = panelHeight + marginTop + marginBot

// writeSVG writes a self-contained SVG document width wide with n panels
// (room for one at least), white, each drawn by draw at its top.
func writeSVG(w io.Writer, width, n int, draw func(b *strings.Builder, i, top int)) error {
	var b strings.Builder
	height := max(n, 1) * panelStride
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	for i := range n {
		draw(&b, i, i*panelStride)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// logAxis is a panel's y axis: milliseconds on a logarithmic scale over
// whole decades, drawn from y0 (bottom) up to y1 (top).
type logAxis struct{ dLo, dHi, y0, y1 float64 }

// newLogAxis spans the decades around [lo, hi] (1 to 10 ms when lo is
// infinite: no data).
func newLogAxis(lo, hi, y0, y1 float64) logAxis {
	if math.IsInf(lo, 0) {
		lo, hi = 1, 10
	}
	dLo, dHi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if dHi <= dLo {
		dHi = dLo + 1
	}
	return logAxis{dLo: dLo, dHi: dHi, y0: y0, y1: y1}
}

// y is the position of ms milliseconds.
func (a logAxis) y(ms float64) float64 {
	return a.y0 - (math.Log10(ms)-a.dLo)/(a.dHi-a.dLo)*(a.y0-a.y1)
}

// drawGrid draws a line across [x0, x1] at 1, 2 and 5 times each power of
// ten of the axis, labelling the powers.
func (a logAxis) drawGrid(b *strings.Builder, x0, x1 float64) {
	for d := a.dLo; d <= a.dHi; d++ {
		for _, m := range []float64{1, 2, 5} {
			if d == a.dHi && m > 1 {
				break
			}
			v := m * math.Pow(10, d)
			y := a.y(v)
			stroke := "#eeeeee"
			if m == 1 {
				stroke = "#cccccc"
				fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%s ms</text>`+"\n", x0-6, y+4, trimFloat(v))
			}
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x0, y, x1, y, stroke)
		}
	}
}

// drawTitle draws a panel's title above its plot.
func drawTitle(b *strings.Builder, top int, title string) {
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="14" font-weight="bold">%s</text>`+"\n", marginLeft, top+24, html.EscapeString(title))
}

// drawFrame draws the x axis label under the plot [x0, x1] x [y1, y0] and
// its border.
func drawFrame(b *strings.Builder, label string, x0, x1, y0, y1 float64) {
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", (x0+x1)/2, y0+36, label)
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#333333"/>`+"\n", x0, y1, x1-x0, y0-y1)
}

// drawVariant draws variant i's line (path, an SVG path's data; none when
// empty) and its legend entry right of the plot: colour, policy and note.
func drawVariant(b *strings.Builder, i int, path, policy, note string, x1, y1 float64) {
	col := palette[i%len(palette)]
	if path != "" {
		fmt.Fprintf(b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.6" opacity="0.85"/>`+"\n", path, col)
	}
	ly := y1 + 14 + float64(i)*32
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", x1+14, ly-4, x1+34, ly-4, col)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x1+40, ly, html.EscapeString(policy))
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="10" fill="#555555">%s</text>`+"\n", x1+40, ly+13, note)
}

func (p *panel) draw(b *strings.Builder, top int) {
	x0, x1 := float64(marginLeft), float64(plotWidth-marginRight)
	y0, y1 := float64(top+marginTop+panelHeight), float64(top+marginTop)
	lines := make([][]Point, len(p.results))
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, res := range p.results {
		lines[i] = series(res.samples, p.from, p.to, plotBins)
		for _, pt := range lines[i] {
			if pt.MeanMs > 0 {
				lo, hi = min(lo, pt.MeanMs), max(hi, pt.MeanMs)
			}
		}
	}
	ax := newLogAxis(lo, hi, y0, y1)
	fx := func(t float64) float64 {
		return x0 + (t-float64(p.from)/nsPerSecond)/(float64(p.to-p.from)/nsPerSecond)*(x1-x0)
	}

	drawTitle(b, top, p.title)
	if w := p.window; w != nil {
		a := max(fx(float64(w.Start)/nsPerSecond), x0)
		z := min(fx(float64(w.End)/nsPerSecond), x1)
		if z > a {
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#fff3cd"/>`+"\n", a, y1, z-a, y0-y1)
		}
	}
	// Axes and grid.
	ax.drawGrid(b, x0, x1)
	span := float64(p.to-p.from) / nsPerSecond
	step := niceStep(span / 8)
	for t := math.Ceil(float64(p.from)/nsPerSecond/step) * step; t <= float64(p.to)/nsPerSecond; t += step {
		x := fx(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999999"/>`+"\n", x, y0, x, y0+4)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, y0+18, trimFloat(t))
	}
	drawFrame(b, "arrival time (simulated s)", x0, x1, y0, y1)

	for i, pts := range lines {
		var path strings.Builder
		for k, pt := range pts {
			if pt.MeanMs <= 0 {
				continue
			}
			cmd := "L"
			if k == 0 || path.Len() == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&path, "%s%.1f %.1f ", cmd, fx(pt.T+float64(p.to-p.from)/nsPerSecond/plotBins/2), ax.y(pt.MeanMs))
		}
		res := p.results[i]
		note := fmt.Sprintf("p99 %.0f ms, prefill %s", res.TTFT.P99, shortCount(res.PrefillTokens))
		if res.Window != nil {
			note = fmt.Sprintf("window p99 %.0f ms, prefill %s", res.Window.TTFT.P99, shortCount(res.Window.PrefillTokens))
		}
		drawVariant(b, i, strings.TrimSpace(path.String()), res.Policy, note, x1, y1)
	}
}

// niceStep rounds a tick step up to 1, 2 or 5 times a power of ten.
func niceStep(s float64) float64 {
	if s <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(s)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= s {
			return m * p
		}
	}
	return 10 * p
}

func trimFloat(v float64) string { return fmt.Sprintf("%g", round(v, 6)) }

// shortCount writes a token count with a k or M suffix.
func shortCount(n int64) string {
	switch {
	case n >= 10_000_000:
		return fmt.Sprintf("%.0fM", float64(n)/1e6)
	case n >= 1_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 10_000:
		return fmt.Sprintf("%.0fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

// Percentile plot geometry: the x axis is in "nines", -log10(1-q), from
// the median (q = 0.5) to p99.9.
const (
	pctFromNines = 0.30103 // q = 0.5
	pctToNines   = 3       // q = 0.999
	pctPoints    = 120
)

// WritePercentileSVG draws, per report (one per reuse semantics) and per
// spike workload (a workload with a window; every workload when none has
// one), the TTFT percentiles of all its requests, one line per variant:
// TTFT on a logarithmic axis against the percentile, p50 to p99.9, on a
// "nines" axis that gives the tail room. Deterministic like WriteSVG.
func WritePercentileSVG(w io.Writer, reps []*Report) error {
	type pctPanel struct {
		title   string
		results []*Result
	}
	var panels []pctPanel
	for _, rep := range reps {
		spike := slices.ContainsFunc(rep.Runs, func(r Run) bool { return r.Workload.Kind == KindColdStart || r.Workload.Kind == KindTenantSpike })
		for _, run := range rep.Runs {
			if spike && run.Workload.Kind != KindColdStart && run.Workload.Kind != KindTenantSpike {
				continue
			}
			panels = append(panels, pctPanel{title: fmt.Sprintf("%s, reuse %s: TTFT percentiles of all requests", run.Workload.Name(), rep.Engine.Reuse),
				results: run.Results})
		}
	}
	width := plotWidth + 80 // room for long variant names in the legend
	return writeSVG(w, width, len(panels), func(b *strings.Builder, i, top int) {
		drawPercentiles(b, top, panels[i].title, panels[i].results)
	})
}

func drawPercentiles(b *strings.Builder, top int, title string, results []*Result) {
	x0, x1 := float64(marginLeft), float64(plotWidth-marginRight)
	y0, y1 := float64(top+marginTop+panelHeight), float64(top+marginTop)
	curves := make([][]float64, len(results)) // TTFT ms at each point
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, res := range results {
		ns := make([]int64, len(res.samples))
		for k, x := range res.samples {
			ns[k] = x.ttft
		}
		slices.Sort(ns)
		if len(ns) == 0 {
			continue
		}
		for k := range pctPoints + 1 {
			nines := pctFromNines + (pctToNines-pctFromNines)*float64(k)/pctPoints
			ms := max(float64(quantile(ns, 1-math.Pow(10, -nines)))/1e6, 1e-3)
			curves[i] = append(curves[i], ms)
			lo, hi = min(lo, ms), max(hi, ms)
		}
	}
	ax := newLogAxis(lo, hi, y0, y1)
	fx := func(nines float64) float64 {
		return x0 + (nines-pctFromNines)/(pctToNines-pctFromNines)*(x1-x0)
	}

	drawTitle(b, top, title)
	ax.drawGrid(b, x0, x1)
	for _, t := range []struct {
		q     float64
		label string
	}{{0.5, "p50"}, {0.75, "p75"}, {0.9, "p90"}, {0.95, "p95"}, {0.99, "p99"}, {0.999, "p99.9"}} {
		x := fx(-math.Log10(1 - t.q))
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eeeeee"/>`+"\n", x, y1, x, y0)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, y0+18, t.label)
	}
	drawFrame(b, "percentile of TTFT (simulated)", x0, x1, y0, y1)
	for i, c := range curves {
		var path strings.Builder
		for k, ms := range c {
			cmd := "L"
			if k == 0 {
				cmd = "M"
			}
			nines := pctFromNines + (pctToNines-pctFromNines)*float64(k)/pctPoints
			fmt.Fprintf(&path, "%s%.1f %.1f ", cmd, fx(nines), ax.y(ms))
		}
		res := results[i]
		note := fmt.Sprintf("p50 %.0f, p99 %.0f ms, prefill %s", res.TTFT.P50, res.TTFT.P99, shortCount(res.PrefillTokens))
		drawVariant(b, i, strings.TrimSpace(path.String()), res.Policy, note, x1, y1)
	}
}
