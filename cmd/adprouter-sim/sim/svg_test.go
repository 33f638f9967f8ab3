package sim

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// fakeResult is a variant's result with n samples, one every 10 ms of
// arrival time, of ttft(k) ms, and notes as long as they get.
func fakeResult(policy string, n int, ttft func(k int) float64) *Result {
	r := &Result{Policy: policy, PrefillTokens: 12_345_678,
		TTFT: Latency{P50: 12345, P99: 123456}}
	for k := range n {
		r.samples = append(r.samples, sample{arrival: int64(k) * 10_000_000, ttft: int64(ttft(k) * 1e6)})
	}
	r.Window = &WindowResult{StartS: 1, EndS: 2, PrefillTokens: 12_345_678, TTFT: Latency{P99: 123456}}
	return r
}

// wavy is a distinct TTFT curve per series i.
func wavy(i int) func(k int) float64 {
	return func(k int) float64 { return 20 + 5*float64(i) + 10*math.Sin(float64(k+7*i)/9) }
}

// fakeReport has one coldstart run (a window: two timeline panels) with
// these results.
func fakeReport(results ...*Result) *Report {
	return &Report{Engine: tinyEngine(), Runs: []Run{{Workload: tinyWorkload(KindColdStart), Results: results}}}
}

// builtinVariants names the builtin variants (Variants also holds those
// the tests register).
var builtinVariants = []string{VariantDefault, VariantKVCacheAware, VariantKVWarmup, VariantKVCapacity,
	VariantKVIndex, VariantKVProbeIndex, VariantKVDemand, VariantKVProbeDemand, VariantRecommended,
	VariantConversation, VariantConversationLeast}

// builtinResults is one result per builtin variant, each its own curve.
func builtinResults() []*Result {
	var rs []*Result
	for i, v := range builtinVariants {
		rs = append(rs, fakeResult(v, 300, wavy(i)))
	}
	return rs
}

// manyResults is n results named as long as the longest builtin variant,
// and more.
func manyResults(n int) []*Result {
	var rs []*Result
	for i := range n {
		rs = append(rs, fakeResult(fmt.Sprintf("kv_cache_aware+probe+index+demand+registered%02d", i), 300, wavy(i)))
	}
	return rs
}

// plots writes both kinds of SVG of the report.
func plots(t *testing.T, rep *Report) map[string]string {
	t.Helper()
	var a, b bytes.Buffer
	if err := rep.WriteSVG(&a); err != nil {
		t.Fatal(err)
	}
	if err := WritePercentileSVG(&b, []*Report{rep}); err != nil {
		t.Fatal(err)
	}
	return map[string]string{"timeline": a.String(), "percentiles": b.String()}
}

type box struct{ x0, y0, x1, y1 float64 }

func (b box) contains(c box) bool {
	return c.x0 >= b.x0-0.05 && c.y0 >= b.y0-0.05 && c.x1 <= b.x1+0.05 && c.y1 <= b.y1+0.05
}

func (b box) overlaps(c box) bool {
	return b.x0 < c.x1 && c.x0 < b.x1 && b.y0 < c.y1 && c.y0 < b.y1
}

var (
	reViewBox = regexp.MustCompile(`viewBox="0 0 (\d+) (\d+)"`)
	reRect    = regexp.MustCompile(`<rect (class="legend" )?x="([-\d.]+)" y="([-\d.]+)" width="([\d.]+)" height="([\d.]+)" fill="(none|white)" stroke="(#333333|#dddddd)"/>`)
	reText    = regexp.MustCompile(`<text ([^>]*)>([^<]*)</text>`)
	reAttr    = regexp.MustCompile(`([a-z-]+)="([^"]*)"`)
	rePath    = regexp.MustCompile(`<path d="([^"]*)" fill="none" stroke="([^"]*)"( stroke-dasharray="([^"]*)")?`)
)

func num(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// svgLayout parses the SVG's viewBox, legend boxes, plot frames and text
// boxes (estimated as the layout does: textWidth).
func svgLayout(t *testing.T, svg string) (view box, legends, frames []box, texts []box, labels []string) {
	t.Helper()
	m := reViewBox.FindStringSubmatch(svg)
	if m == nil {
		t.Fatalf("no viewBox:\n%.300s", svg)
	}
	view = box{0, 0, num(t, m[1]), num(t, m[2])}
	for _, m := range reRect.FindAllStringSubmatch(svg, -1) {
		x, y := num(t, m[2]), num(t, m[3])
		b := box{x, y, x + num(t, m[4]), y + num(t, m[5])}
		if m[1] != "" {
			legends = append(legends, b)
		} else {
			frames = append(frames, b)
		}
	}
	for _, m := range reText.FindAllStringSubmatch(svg, -1) {
		attrs := map[string]string{"font-size": "12", "text-anchor": "start"}
		for _, a := range reAttr.FindAllStringSubmatch(m[1], -1) {
			attrs[a[1]] = a[2]
		}
		x, y, size := num(t, attrs["x"]), num(t, attrs["y"]), num(t, attrs["font-size"])
		s := html.UnescapeString(m[2])
		w := textWidth(s, size)
		if attrs["font-weight"] == "bold" {
			w *= 1.1
		}
		switch attrs["text-anchor"] {
		case "end":
			x -= w
		case "middle":
			x -= w / 2
		}
		texts = append(texts, box{x, y - size, x + w, y + 0.25*size})
		labels = append(labels, s)
	}
	return view, legends, frames, texts, labels
}

// TestLegendFits checks that the legend boxes lie inside the SVG, beside
// or under the plots and off the other text, and that every text, legend
// labels included, fits the SVG and its legend box: for few series with
// the longest builtin names, for all the builtin variants and for many
// series with longer names still.
func TestLegendFits(t *testing.T) {
	longest := ""
	for _, v := range builtinVariants {
		if len(v) > len(longest) {
			longest = v
		}
	}
	cases := map[string][]*Result{
		"few long": {fakeResult(longest, 300, wavy(0)), fakeResult(longest+"+x", 300, wavy(1))},
		"builtin":  builtinResults(),
		"many":     manyResults(30),
	}
	for _, name := range []string{"few long", "builtin", "many"} {
		for kind, svg := range plots(t, fakeReport(cases[name]...)) {
			t.Run(name+"/"+kind, func(t *testing.T) {
				view, legends, frames, texts, labels := svgLayout(t, svg)
				if len(legends) != len(frames) || len(frames) == 0 {
					t.Fatalf("%d legends for %d plots", len(legends), len(frames))
				}
				panelH := view.y1 / float64(len(frames)) // all panels alike
				for i, l := range legends {
					if !view.contains(l) {
						t.Errorf("legend %v outside the SVG %v", l, view)
					}
					if band := (box{0, float64(i) * panelH, view.x1, float64(i+1) * panelH}); !band.contains(l) || !band.contains(frames[i]) {
						t.Errorf("legend %v and plot %v not both in panel %d, %v", l, frames[i], i, band)
					}
					for _, f := range frames {
						if l.overlaps(f) {
							t.Errorf("legend %v over the plot %v", l, f)
						}
					}
					for _, o := range legends[i+1:] {
						if l.overlaps(o) {
							t.Errorf("legends %v and %v overlap", l, o)
						}
					}
				}
				inLegend := 0
				for k, tb := range texts {
					if !view.contains(tb) {
						t.Errorf("text %q (%v) clipped by the SVG %v", labels[k], tb, view)
					}
					for _, l := range legends {
						if l.contains(box{tb.x0, tb.y1 - 1, tb.x0 + 1, tb.y1}) { // starts in the legend
							inLegend++
							if !l.contains(tb) {
								t.Errorf("legend text %q (%v) runs out of its box %v", labels[k], tb, l)
							}
						} else if l.overlaps(tb) {
							t.Errorf("text %q (%v) under the legend %v", labels[k], tb, l)
						}
					}
				}
				if want := 2 * len(cases[name]) * len(legends); inLegend != want {
					t.Errorf("%d texts in the legends, want %d (a label and a note per series and panel)", inLegend, want)
				}
			})
		}
	}
}

// TestLegendPlacement checks the two layouts: a legend that fits beside the
// plot stays there (the SVG as narrow as before), one that does not goes
// under it, in columns.
func TestLegendPlacement(t *testing.T) {
	few := newLayout([]string{"t"}, [][]legendEntry{{{"default", "p99 449 ms, prefill 122k"}, {"kv_cache_aware+warmup", "p99 25 ms, prefill 69k"}}})
	if few.below || few.width > plotWidth+20 || few.x1-few.x0 < minPlotW || few.legX < few.x1 {
		t.Errorf("two series: want the legend right of a plot %d wide at least, got %+v", minPlotW, few)
	}
	var es []legendEntry
	for _, r := range builtinResults() {
		es = append(es, legendEntry{r.Policy, "window p99 123456 ms, prefill 12M"})
	}
	all := newLayout([]string{"t"}, [][]legendEntry{es})
	if !all.below || len(all.colW) < 2 || all.width != plotWidth || all.panelH <= marginTop+panelHeight+marginBot {
		t.Errorf("%d series: want the legend under the plot, in columns, got %+v", len(es), all)
	}
}

// TestSeriesStylesDistinct checks that every series gets its own
// (colour, dash) pair, however many, and every builtin variant its own
// colour.
func TestSeriesStylesDistinct(t *testing.T) {
	seen := map[lineStyle]int{}
	for i := range 500 {
		s := seriesStyle(i)
		if j, ok := seen[s]; ok {
			t.Fatalf("series %d and %d share %+v", j, i, s)
		}
		seen[s] = i
	}
	colours := map[string]bool{}
	for i := range len(builtinVariants) + 1 {
		colours[seriesStyle(i).colour] = true
	}
	if len(colours) != len(builtinVariants)+1 {
		t.Errorf("%d colours for the %d builtin variants and one registered", len(colours), len(builtinVariants))
	}
	for i := range solidSeries {
		if seriesStyle(i).dash != "" {
			t.Errorf("series %d dashed: want the first %d solid", i, solidSeries)
		}
	}
	for i := solidSeries; i < 2*solidSeries; i++ {
		if seriesStyle(i).dash == "" {
			t.Errorf("series %d solid: want the series past %d dashed", i, solidSeries)
		}
	}
	// In the SVG too: as many styles as lines, the legend's as the line's.
	svg := plots(t, fakeReport(manyResults(30)...))["percentiles"]
	paths := rePath.FindAllStringSubmatch(svg, -1)
	styles := map[string]bool{}
	for _, p := range paths {
		styles[p[2]+"/"+p[4]] = true
	}
	if len(paths) != 30 || len(styles) != 30 {
		t.Errorf("%d lines in %d styles, want 30 in 30", len(paths), len(styles))
	}
	for i := range 30 {
		want := seriesStyle(i).attrs() + ` stroke-width="3"`
		if !strings.Contains(svg, want) {
			t.Errorf("no legend entry stroked %s", want)
		}
	}
}

// TestCoincidingSeriesVisible checks that series drawn over one another
// are set side by side, each visible in its own style, centred on their
// value, and that series apart or merely crossing are drawn where they are.
func TestCoincidingSeriesVisible(t *testing.T) {
	flat := func(y float64) []vtx {
		var l []vtx
		for k := range 10 {
			l = append(l, vtx{float64(100 + 10*k), y})
		}
		return l
	}
	out, moved := spread([][]vtx{flat(50), flat(50), flat(50), flat(80)})
	if !moved {
		t.Fatal("three equal lines not moved")
	}
	for k := range 10 {
		if a, b, c := out[0][k].y, out[1][k].y, out[2][k].y; a != 50-ribbonGap || b != 50 || c != 50+ribbonGap {
			t.Errorf("vertex %d: three equal lines at %g, %g, %g, want %g apart around 50", k, a, b, c, ribbonGap)
		}
		if out[0][k].x != 100+10*float64(k) || out[3][k] != flat(80)[k] {
			t.Errorf("vertex %d: moved along x or moved a line apart: %v, %v", k, out[0][k], out[3][k])
		}
	}
	// Two lines crossing at one vertex hide nothing: not moved.
	up, down := flat(0), flat(0)
	for k := range up {
		up[k].y, down[k].y = float64(10*k), float64(90-10*k)
	}
	up[4].y, down[4].y = 45, 45 // the crossing, on a vertex
	if _, moved := spread([][]vtx{up, down}); moved {
		t.Error("two crossing lines moved")
	}
	// Along a slope the move is along the normal: the lines stay parallel.
	a, b := flat(0), flat(0)
	for k := range a {
		a[k].y, b[k].y = float64(10*k), float64(10*k)
	}
	out, _ = spread([][]vtx{a, b})
	for k := 1; k < 9; k++ {
		dx, dy := out[1][k].x-out[0][k].x, out[1][k].y-out[0][k].y
		if math.Abs(math.Hypot(dx, dy)-ribbonGap) > 1e-9 || math.Abs(dx+dy) > 1e-9 {
			t.Errorf("vertex %d: lines on a 45° slope %v apart, want %g across the slope", k, [2]float64{dx, dy}, ribbonGap)
		}
	}

	// In the SVG: two variants with the same results, two lines, two styles,
	// two paths, and the panel says the lines were set apart.
	same := func(k int) float64 { return 10 + float64(k%17) }
	for kind, svg := range plots(t, fakeReport(fakeResult("kv_cache_aware+warmup", 300, same), fakeResult("recommended", 300, same))) {
		paths := rePath.FindAllStringSubmatch(svg, -1)
		if want := map[string]int{"timeline": 4, "percentiles": 2}[kind]; len(paths) != want { // two per panel
			t.Errorf("%s: %d lines", kind, len(paths))
			continue
		}
		for i := 0; i < len(paths); i += 2 {
			p, q := paths[i], paths[i+1]
			if p[1] == q[1] {
				t.Errorf("%s: equal series drawn on the same path", kind)
			}
			if p[2]+p[4] == q[2]+q[4] {
				t.Errorf("%s: equal series drawn in the same style %s", kind, p[2]+p[4])
			}
		}
		if !strings.Contains(svg, "lines that coincide are drawn side by side") {
			t.Errorf("%s: the panel does not say lines were moved", kind)
		}
	}
	// Series apart are not moved, and nothing says they were.
	for kind, svg := range plots(t, fakeReport(fakeResult("a", 300, func(int) float64 { return 10 }), fakeResult("b", 300, func(int) float64 { return 100 }))) {
		if strings.Contains(svg, "side by side") {
			t.Errorf("%s: lines apart reported as moved", kind)
		}
	}
}

// TestSVGDeterministic checks that the same report gives the same bytes.
func TestSVGDeterministic(t *testing.T) {
	same := func(k int) float64 { return 10 + float64(k%17) }
	rs := append(builtinResults(), fakeResult("copy", 300, same), fakeResult("copy again", 300, same))
	for kind, svg := range plots(t, fakeReport(rs...)) {
		for range 3 {
			if again := plots(t, fakeReport(rs...))[kind]; again != svg {
				t.Fatalf("%s: the same report, different SVG", kind)
			}
		}
	}
}

// TestTextWidthErrsLong checks the width estimate against DejaVu Sans, the
// widest common sans-serif font (advances in em, from its metrics): the
// estimate must not fall short, or labels would clip.
func TestTextWidthErrsLong(t *testing.T) {
	dejavu := map[rune]float64{'k': 0.579, 'v': 0.592, '_': 0.5, 'c': 0.55, 'a': 0.613, 'h': 0.634, 'e': 0.615,
		'w': 0.818, 'r': 0.411, '+': 0.838, 'p': 0.635, 'o': 0.612, 'b': 0.635, 'i': 0.278, 'n': 0.634, 'd': 0.635,
		'x': 0.592, 'm': 0.974, 'u': 0.634, 's': 0.521, 'q': 0.635, 'l': 0.278, 't': 0.392, ' ': 0.318, ',': 0.318,
		'9': 0.636, '1': 0.636, '2': 0.636, '4': 0.636, 'M': 0.863, 'f': 0.352, 'y': 0.592, 'g': 0.635}
	for _, s := range []string{"kv_cache_aware+probe+index+demand", "conversation+least_queued", "window p99 449 ms, prefill 12M"} {
		var em float64
		for _, r := range s {
			w, ok := dejavu[r]
			if !ok {
				t.Fatalf("no width for %q", r)
			}
			em += w
		}
		if got := textWidth(s, 12); got < em*12 || got > em*12*1.25 {
			t.Errorf("textWidth(%q) = %.0f, DejaVu Sans %.0f: want at least that, at most 25%% more", s, got, em*12)
		}
	}
}
