package sim

import (
	"fmt"
	"html"
	"io"
	"math"
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
		panels = append(panels, panel{title: fmt.Sprintf("%s: mean TTFT by arrival time", run.Workload.Kind),
			from: 0, to: max(last, 1), window: win, results: run.Results})
		if win != nil {
			margin := (win.End - win.Start) / 10
			panels = append(panels, panel{title: fmt.Sprintf("%s: the window [%gs, %gs) up close", run.Workload.Kind,
				float64(win.Start)/nsPerSecond, float64(win.End)/nsPerSecond),
				from: max(win.Start-margin, 0), to: min(win.End+margin, max(last, win.Start+1)), window: win, results: run.Results})
		}
	}
	var b strings.Builder
	height := len(panels) * (panelHeight + marginTop + marginBot)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		plotWidth, height, plotWidth, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", plotWidth, height)
	for i, p := range panels {
		p.draw(&b, i*(panelHeight+marginTop+marginBot))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
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
	if math.IsInf(lo, 0) {
		lo, hi = 1, 10
	}
	dLo, dHi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if dHi <= dLo {
		dHi = dLo + 1
	}
	fx := func(t float64) float64 {
		return x0 + (t-float64(p.from)/nsPerSecond)/(float64(p.to-p.from)/nsPerSecond)*(x1-x0)
	}
	fy := func(ms float64) float64 { return y0 - (math.Log10(ms)-dLo)/(dHi-dLo)*(y0-y1) }

	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="14" font-weight="bold">%s</text>`+"\n", marginLeft, top+24, html.EscapeString(p.title))
	if w := p.window; w != nil {
		a := max(fx(float64(w.Start)/nsPerSecond), x0)
		z := min(fx(float64(w.End)/nsPerSecond), x1)
		if z > a {
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#fff3cd"/>`+"\n", a, y1, z-a, y0-y1)
		}
	}
	// Axes and grid.
	for d := dLo; d <= dHi; d++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, d)
			if d == dHi && m > 1 {
				break
			}
			y := fy(v)
			stroke := "#eeeeee"
			if m == 1 {
				stroke = "#cccccc"
				fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%s ms</text>`+"\n", x0-6, y+4, trimFloat(v))
			}
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x0, y, x1, y, stroke)
		}
	}
	span := float64(p.to-p.from) / nsPerSecond
	step := niceStep(span / 8)
	for t := math.Ceil(float64(p.from)/nsPerSecond/step) * step; t <= float64(p.to)/nsPerSecond; t += step {
		x := fx(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999999"/>`+"\n", x, y0, x, y0+4)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, y0+18, trimFloat(t))
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">arrival time (simulated s)</text>`+"\n", (x0+x1)/2, y0+36)
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#333333"/>`+"\n", x0, y1, x1-x0, y0-y1)

	for i, pts := range lines {
		col := palette[i%len(palette)]
		var path strings.Builder
		for k, pt := range pts {
			if pt.MeanMs <= 0 {
				continue
			}
			cmd := "L"
			if k == 0 || path.Len() == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&path, "%s%.1f %.1f ", cmd, fx(pt.T+float64(p.to-p.from)/nsPerSecond/plotBins/2), fy(pt.MeanMs))
		}
		if path.Len() > 0 {
			fmt.Fprintf(b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.6" opacity="0.85"/>`+"\n", strings.TrimSpace(path.String()), col)
		}
		ly := y1 + 14 + float64(i)*32
		res := p.results[i]
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", x1+14, ly-4, x1+34, ly-4, col)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x1+40, ly, html.EscapeString(res.Policy))
		note := fmt.Sprintf("p99 %.0f ms, prefill %s", res.TTFT.P99, shortCount(res.PrefillTokens))
		if res.Window != nil {
			note = fmt.Sprintf("window p99 %.0f ms, prefill %s", res.Window.TTFT.P99, shortCount(res.Window.PrefillTokens))
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="10" fill="#555555">%s</text>`+"\n", x1+40, ly+13, note)
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
