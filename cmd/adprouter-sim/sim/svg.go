package sim

import (
	"cmp"
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
)

// Series styles. Every series of a plot gets its own (colour, dash) pair,
// by its index. The palette is Okabe and Ito's colour-blind-safe set (its
// yellow left out: too pale on white), then four of Paul Tol's "muted"
// colours and a mid grey: twelve colours. The first seven, the safe ones, are
// solid lines; every further seven take the next dash pattern, so the
// later colours, which a colour-vision deficiency may confuse with an
// earlier one, differ by their dash too, and past the twelve colours no
// pair repeats.
var (
	palette = []string{
		"#0072B2", // blue
		"#D55E00", // vermillion
		"#009E73", // bluish green
		"#CC79A7", // reddish purple
		"#E69F00", // orange
		"#56B4E9", // sky blue
		"#000000", // black
		"#882255", // wine
		"#999933", // olive
		"#332288", // indigo
		"#44AA99", // teal
		"#888888", // grey
	}
	dashes = []string{"", "8 3", "2 2", "8 3 2 3"}
)

// solidSeries is how many series take each dash pattern, in index order.
const solidSeries = 7

// lineStyle is how a series is stroked: colour and SVG stroke-dasharray
// ("" for solid).
type lineStyle struct{ colour, dash string }

// seriesStyle is series i's style, distinct for every i: series i and
// i+12k share a colour but not a dash group, i/7, whose pattern is the
// dashes table's, then ever longer dashes.
func seriesStyle(i int) lineStyle {
	c, d := palette[i%len(palette)], i/solidSeries
	if d < len(dashes) {
		return lineStyle{colour: c, dash: dashes[d]}
	}
	return lineStyle{colour: c, dash: fmt.Sprintf("%d 3 1 3", d+6)}
}

// attrs writes the style as SVG stroke attributes.
func (s lineStyle) attrs() string {
	a := fmt.Sprintf(`stroke="%s"`, s.colour)
	if s.dash != "" {
		a += fmt.Sprintf(` stroke-dasharray="%s"`, s.dash)
	}
	return a
}

// Plot geometry, in SVG user units.
const (
	plotWidth   = 1000 // the narrowest SVG
	minPlotW    = 680  // the narrowest plot area
	panelHeight = 300
	marginLeft  = 70
	marginTop   = 46
	marginBot   = 46
	marginEdge  = 12 // between the legend or the plot and the SVG's right edge
	plotBins    = 100

	fontSize  = 12 // labels and axes
	noteSize  = 10 // the legend's notes
	titleSize = 14 // panel titles, bold

	lineWidth = 1.6 // a series' stroke

	legendRowH   = 32 // one legend entry: its label and its note below
	legendSwatch = 26 // the stroke sample before an entry's label
	legendPad    = 8  // inside the legend's box
	legendColGap = 14 // between legend columns
	legendGap    = 16 // between the plot and a legend right of it
)

// textWidth estimates how wide s is at size px in a sans-serif font, from
// character classes whose widths are those of the widest common fonts
// (DejaVu Sans, Verdana), so that it errs long: a layout made with it does
// not clip in narrower fonts either.
func textWidth(s string, size float64) float64 {
	var em float64
	for _, r := range s {
		switch {
		case strings.ContainsRune("ijl.,;:'|!", r):
			em += 0.34
		case strings.ContainsRune("frtI()[]{}-/ ", r):
			em += 0.44
		case strings.ContainsRune("mwMW%@", r):
			em += 1.0
		case strings.ContainsRune("+=<>~#", r):
			em += 0.84
		case r >= 'A' && r <= 'Z':
			em += 0.78
		case r < 0x80:
			em += 0.66
		default: // µ, ≤, ×, ...: as wide as the widest
			em += 1.0
		}
	}
	return em * size
}

// legendEntry is one series in a legend: its label and a note under it.
type legendEntry struct{ label, note string }

// width is the room the entry takes in a legend column: swatch and text.
func (e legendEntry) width() float64 {
	return legendSwatch + 6 + max(textWidth(e.label, fontSize), textWidth(e.note, noteSize))
}

// layout places a document's panels, all alike: the plot area [x0, x1]
// and the legend, in a box right of the plot when its entries fit the
// plot's height in one column, else under the plot in as many columns as
// the width holds (the panel growing taller). The SVG widens beyond
// plotWidth when a legend right of the plot or a title needs it; the plot
// area keeps minPlotW at least. Text widths are estimates (textWidth),
// long rather than short.
type layout struct {
	width, panelH int
	x0, x1        float64
	below         bool
	// The legend's box: left edge and top (below the panel's top); rows
	// of legendRowH, filled top to bottom, in columns colW wide (each as
	// wide as its widest entry in any panel).
	legX, legTop float64
	rows         int
	colW         []float64
}

// newLayout lays out panels with these titles and legends (one list of
// entries per panel).
func newLayout(titles []string, legends [][]legendEntry) layout {
	n := 0
	for _, es := range legends {
		n = max(n, len(es))
	}
	titleW := 0.0
	for _, t := range titles {
		titleW = max(titleW, 1.1*textWidth(t, titleSize)) // bold
	}
	minW := max(plotWidth, int(math.Ceil(marginLeft+titleW))+marginEdge)
	l := layout{x0: marginLeft}
	if n <= (panelHeight-2*legendPad+4)/legendRowH {
		l.rows, l.colW = n, columns(legends, n)
		boxW := l.boxW()
		l.width = max(minW, int(math.Ceil(marginLeft+minPlotW+legendGap+boxW))+marginEdge)
		l.legX = float64(l.width-marginEdge) - boxW
		l.x1 = l.legX - legendGap
		l.legTop = marginTop
		l.panelH = marginTop + panelHeight + marginBot
		return l
	}
	// Under the plot: the fewest rows whose columns fit the width (one
	// column, the SVG widened to it, when none do).
	l.below = true
	l.legX = l.x0 - legendPad
	for rows := 1; rows <= n; rows++ {
		l.rows, l.colW = rows, columns(legends, rows)
		if l.legX+l.boxW() <= float64(minW-marginEdge) {
			break
		}
	}
	l.width = max(minW, int(math.Ceil(l.legX+l.boxW()))+marginEdge)
	l.x1 = float64(l.width - marginEdge - 18)
	l.legTop = marginTop + panelHeight + marginBot + 6
	l.panelH = int(math.Ceil(l.legTop+l.boxH())) + 10
	return l
}

// columns is the width of each legend column when entries fill rows per
// column: the widest of its entries in any panel.
func columns(legends [][]legendEntry, rows int) []float64 {
	var w []float64
	for _, es := range legends {
		for i, e := range es {
			c := i / rows
			for len(w) <= c {
				w = append(w, 0)
			}
			w[c] = max(w[c], math.Ceil(e.width()))
		}
	}
	return w
}

// boxW and boxH are the legend box's size.
func (l layout) boxW() float64 {
	w := float64(2 * legendPad)
	for c, cw := range l.colW {
		w += cw
		if c > 0 {
			w += legendColGap
		}
	}
	return w
}
func (l layout) boxH() float64 { return float64(l.rows)*legendRowH - 4 + 2*legendPad }

// drawLegend draws the legend of a panel at top: a box, then per entry its
// series' style, label and note, filling columns top to bottom.
func (l layout) drawLegend(b *strings.Builder, top int, entries []legendEntry) {
	if len(entries) == 0 {
		return
	}
	y := float64(top) + l.legTop
	fmt.Fprintf(b, `<rect class="legend" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="white" stroke="#dddddd"/>`+"\n",
		l.legX, y, l.boxW(), l.boxH())
	x := l.legX + legendPad
	for i, e := range entries {
		c, r := i/l.rows, i%l.rows
		if r == 0 && c > 0 {
			x += l.colW[c-1] + legendColGap
		}
		ly := y + legendPad + 12 + float64(r)*legendRowH
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" %s stroke-width="3"/>`+"\n",
			x, ly-4, x+legendSwatch, ly-4, seriesStyle(i).attrs())
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x+legendSwatch+6, ly, html.EscapeString(e.label))
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="%d" fill="#555555">%s</text>`+"\n",
			x+legendSwatch+6, ly+13, noteSize, html.EscapeString(e.note))
	}
}

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
// zooms onto it. Every variant has its own colour and dash (seriesStyle),
// lines that coincide are drawn side by side (spread) and the legend sits
// beside or under each plot, sized to its labels (newLayout). The SVG is
// hand-written, self-contained and, like the JSON, the same for the same
// options.
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
	titles := make([]string, len(panels))
	legends := make([][]legendEntry, len(panels))
	for i, p := range panels {
		titles[i], legends[i] = p.title, timeLegend(p.results)
	}
	lay := newLayout(titles, legends)
	return writeSVG(w, lay, len(panels), func(b *strings.Builder, i, top int) { panels[i].draw(b, lay, top, legends[i]) })
}

// timeLegend is the legend of a timeline: per variant, its TTFT p99 and
// prefill, of the window when there is one.
func timeLegend(results []*Result) []legendEntry {
	es := make([]legendEntry, len(results))
	for i, res := range results {
		note := fmt.Sprintf("p99 %.0f ms, prefill %s", res.TTFT.P99, shortCount(res.PrefillTokens))
		if res.Window != nil {
			note = fmt.Sprintf("window p99 %.0f ms, prefill %s", res.Window.TTFT.P99, shortCount(res.Window.PrefillTokens))
		}
		es[i] = legendEntry{label: res.Policy, note: note}
	}
	return es
}

// writeSVG writes a self-contained SVG document laid out by lay with n
// panels (room for one at least), white, each drawn by draw at its top.
func writeSVG(w io.Writer, lay layout, n int, draw func(b *strings.Builder, i, top int)) error {
	var b strings.Builder
	height := max(n, 1) * lay.panelH
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="%d">`+"\n",
		lay.width, height, lay.width, height, fontSize)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", lay.width, height)
	for i := range n {
		draw(&b, i, i*lay.panelH)
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
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="%d" font-weight="bold">%s</text>`+"\n", marginLeft, top+24, titleSize, html.EscapeString(title))
}

// drawFrame draws the x axis label under the plot [x0, x1] x [y1, y0] and
// its border.
func drawFrame(b *strings.Builder, label string, x0, x1, y0, y1 float64) {
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", (x0+x1)/2, y0+36, label)
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#333333"/>`+"\n", x0, y1, x1-x0, y0-y1)
}

// vtx is a point of a series' line, in SVG user units.
type vtx struct{ x, y float64 }

// Series that coincide would hide one another: two series coincide on a
// segment when their vertices at both its ends lie within coincideTol of
// each other (a mere crossing at one vertex hides nothing). spread draws
// them side by side instead, as a ribbon centred on their common value: at
// each vertex the series coinciding there on a segment either side (and
// those coinciding with them), ordered by y and then by series index, move
// along their line's normal to slots ribbonGap apart (closer when many
// share, so the ribbon stays within ribbonMax). Where they part, each
// returns to its own value. The moves are a pixel or two, a few percent on
// the log axis; the panel says so when it made any.
const (
	coincideTol = 0.75
	ribbonGap   = 2.0
	ribbonMax   = 12.0
)

// spread returns lines with coinciding stretches moved apart (see
// coincideTol), and whether it moved any.
func spread(lines [][]vtx) ([][]vtx, bool) {
	// xs[i][k]: line i's vertex k's x as written, in tenths; increasing.
	xs := make([][]int64, len(lines))
	for i, l := range lines {
		for _, v := range l {
			xs[i] = append(xs[i], int64(math.Round(v.x*10)))
		}
	}
	// near: line i's vertex k has one of line j within coincideTol.
	near := func(i, j, k int) bool {
		kj, ok := slices.BinarySearch(xs[j], xs[i][k])
		return ok && math.Abs(lines[j][kj].y-lines[i][k].y) <= coincideTol
	}
	shares := func(i, j, k int) bool {
		return near(i, j, k) && (k > 0 && near(i, j, k-1) || k+1 < len(lines[i]) && near(i, j, k+1))
	}
	type ref struct {
		xr   int64
		y    float64
		i, k int
	}
	var all []ref
	for i, l := range lines {
		for k, v := range l {
			all = append(all, ref{xr: xs[i][k], y: v.y, i: i, k: k})
		}
	}
	slices.SortFunc(all, func(a, b ref) int {
		return cmp.Or(cmp.Compare(a.xr, b.xr), cmp.Compare(a.y, b.y), cmp.Compare(a.i, b.i))
	})
	out := make([][]vtx, len(lines))
	for i, l := range lines {
		out[i] = slices.Clone(l)
	}
	moved := false
	for lo := 0; lo < len(all); {
		hi := lo + 1
		for hi < len(all) && all[hi].xr == all[lo].xr {
			hi++
		}
		// The vertices at this x, in clusters of lines coinciding on a
		// segment here, transitively (union-find over the group).
		g := all[lo:hi]
		root := make([]int, len(g))
		for a := range root {
			root[a] = a
		}
		var find func(a int) int
		find = func(a int) int {
			if root[a] != a {
				root[a] = find(root[a])
			}
			return root[a]
		}
		for a := range g {
			for c := a + 1; c < len(g); c++ {
				if shares(g[a].i, g[c].i, g[a].k) {
					root[max(find(a), find(c))] = min(find(a), find(c))
				}
			}
		}
		for a := range g {
			if find(a) != a {
				continue // not the first of its cluster
			}
			var members []ref // in g's order: by y, then index
			for c := a; c < len(g); c++ {
				if find(c) == a {
					members = append(members, g[c])
				}
			}
			m := len(members)
			if m < 2 {
				continue
			}
			moved = true
			gap := min(ribbonGap, ribbonMax/float64(m-1))
			for r, v := range members {
				nx, ny := normalAt(lines[v.i], v.k)
				off := (float64(r) - float64(m-1)/2) * gap
				out[v.i][v.k] = vtx{lines[v.i][v.k].x + nx*off, v.y + ny*off}
			}
		}
		lo = hi
	}
	return out, moved
}

// normalAt is the unit normal of line l at vertex k (pointing down for a
// line running right), the mean of its segments' normals, lengthened at a
// bend so that a parallel line keeps its distance (at most twice).
func normalAt(l []vtx, k int) (nx, ny float64) {
	var sx, sy float64
	n := 0
	add := func(a, b vtx) {
		dx, dy := b.x-a.x, b.y-a.y
		if d := math.Hypot(dx, dy); d > 1e-9 {
			sx, sy, n = sx-dy/d, sy+dx/d, n+1
		}
	}
	if k > 0 {
		add(l[k-1], l[k])
	}
	if k+1 < len(l) {
		add(l[k], l[k+1])
	}
	d := math.Hypot(sx, sy)
	if n == 0 || d < 1e-9 {
		return 0, 1
	}
	scale := 1 / d
	if n == 2 {
		scale = 1 / d / max(d/2, 0.5) // unit, over the cosine of half the bend
	}
	return sx * scale, sy * scale
}

// drawLines draws the series' lines in the plot, solid lines first and
// dashed ones over them (each group by index), coinciding stretches side by
// side (spread), and says so above the plot's right corner when it moved
// any.
func drawLines(b *strings.Builder, lines [][]vtx, x1, y1 float64) {
	lines, moved := spread(lines)
	order := make([]int, len(lines))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, c int) int {
		return cmp.Compare(boolInt(seriesStyle(a).dash != ""), boolInt(seriesStyle(c).dash != ""))
	})
	for _, i := range order {
		if len(lines[i]) == 0 {
			continue
		}
		var path strings.Builder
		for k, v := range lines[i] {
			cmd := "L"
			if k == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&path, "%s%.1f %.1f ", cmd, v.x, v.y)
		}
		fmt.Fprintf(b, `<path d="%s" fill="none" %s stroke-width="%g" stroke-linejoin="round" opacity="0.9"/>`+"\n",
			strings.TrimSpace(path.String()), seriesStyle(i).attrs(), lineWidth)
	}
	if moved {
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" font-size="%d" fill="#555555">lines that coincide are drawn side by side</text>`+"\n",
			x1, y1-6, noteSize)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (p *panel) draw(b *strings.Builder, lay layout, top int, legend []legendEntry) {
	x0, x1 := lay.x0, lay.x1
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

	vs := make([][]vtx, len(lines))
	for i, pts := range lines {
		for _, pt := range pts {
			if pt.MeanMs > 0 {
				vs[i] = append(vs[i], vtx{fx(pt.T + float64(p.to-p.from)/nsPerSecond/plotBins/2), ax.y(pt.MeanMs)})
			}
		}
	}
	drawLines(b, vs, x1, y1)
	lay.drawLegend(b, top, legend)
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
	titles := make([]string, len(panels))
	legends := make([][]legendEntry, len(panels))
	for i, p := range panels {
		titles[i] = p.title
		for _, res := range p.results {
			legends[i] = append(legends[i], legendEntry{label: res.Policy,
				note: fmt.Sprintf("p50 %.0f, p99 %.0f ms, prefill %s", res.TTFT.P50, res.TTFT.P99, shortCount(res.PrefillTokens))})
		}
	}
	lay := newLayout(titles, legends)
	return writeSVG(w, lay, len(panels), func(b *strings.Builder, i, top int) {
		drawPercentiles(b, lay, top, panels[i].title, panels[i].results, legends[i])
	})
}

func drawPercentiles(b *strings.Builder, lay layout, top int, title string, results []*Result, legend []legendEntry) {
	x0, x1 := lay.x0, lay.x1
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
	vs := make([][]vtx, len(curves))
	for i, c := range curves {
		for k, ms := range c {
			nines := pctFromNines + (pctToNines-pctFromNines)*float64(k)/pctPoints
			vs[i] = append(vs[i], vtx{fx(nines), ax.y(ms)})
		}
	}
	drawLines(b, vs, x1, y1)
	lay.drawLegend(b, top, legend)
}
