package sim

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
)

// The evaluation a variant (by default the recommended preset) is judged by:
// a deterministic grid of workload families × parameters × seeds × engine
// shapes, each case simulated with the References and the variant under
// both reuse semantics, and every case judged against the best reference
// there (the one with the lowest TTFT p99), by the goals of matrix.go:
//
//   - on every case and under each reuse semantics, prefill tokens at most
//     GoalPrefill (1.02) and TTFT p99 at most GoalP99 (1.05) times the best
//     reference's;
//   - under each reuse semantics, TTFT p99 at most GoalWin (0.80) times the
//     best reference's on at least EvalWinFamilies families, a trace family
//     among them; a family wins when the geometric mean of its cases' p99
//     ratios is at most GoalWin.
//
// EvalGrid builds the grid (EvalFull, the one the docs report, EvalQuick,
// the slice the tests run, EvalMixed, workloads served together,
// EvalHeavy, steady traffic under heavy load, or EvalMixedTrace, mixes
// replayed as traces);
// RunEval simulates it; WriteEval prints
// per semantics a summary per family and the worst cells, each reference
// judged the same way against the others (EvalScale), and the verdict.
//
// Every cell also carries the TTFT p99 no policy can beat there
// (FloorP99), and every family the lowest p99 geometric mean against the
// best reference that floor allows: a family whose floor is above GoalWin
// cannot be won by any router.

// EvalWinFamilies is how many families the judged variant must win under
// each reuse semantics (a trace family among them).
const EvalWinFamilies = 2

// Evaluation grids (EvalGrid).
const (
	// EvalFull is the whole grid: every family × parameters × seeds 1-3
	// on the default engine, and engine shapes (4, 16 and 32 ranks, 2048-
	// and 16384-token iteration budgets, a 32k-token KV pool per rank).
	EvalFull = "full"
	// EvalQuick is a reduced but representative slice of EvalFull, a few
	// seconds on 2 cores: the cases the tests judge the preset by.
	EvalQuick = "quick"
	// EvalMixed serves several workload kinds together on one engine
	// (KindMix): every mix of evalMixes × seeds 1-3 × 4, 8 and 16 ranks ×
	// the parts' default rates and half of them. Held out: no rule of the
	// preset was chosen on it. Its cells are judged as EvalFull's; the
	// family goals (wins, a trace family among them) are EvalFull's alone
	// (EvalOptions.CellGoalsOnly).
	EvalMixed = "mixed"
	// EvalHeavy is steady multi-tenant traffic under more load than
	// EvalFull's: one, two and four tenants (Zipf 1) at 20, 40 and 80
	// requests per second per 8 ranks, on 8 and 16 ranks, seeds 5 and 6,
	// a minute each. Held out, and judged by the cell goals, as
	// EvalMixed.
	EvalHeavy = "heavy"
	// EvalMixedTrace replays mixes of the simulator's workloads as traces
	// (generated, merged, written in the trace format and read back, as
	// -gen-trace and -trace do), so the router sees prefixes only, no
	// conversation ids: seven mixes on seeds 11-13, 4, 8 and 16 ranks, at
	// the trace's pace and stretched to 2 and 4 times as long; and four
	// others on seeds 21-22, 4 and 8 ranks, at its pace and 3 times as
	// long (the rates are not scaled with the ranks). Held out, and judged
	// by the cell goals, as EvalMixed.
	EvalMixedTrace = "mixed-trace"
	// EvalRandom is evalRandomCases cases drawn from a fixed seed over
	// workloads, mixes, ranks (4-32), prompt families (2-64 at Zipf
	// 0.6-1.4), system prompts (512-6144 tokens), Poisson and bursty
	// arrivals, loads, spike timings, iteration budgets, KV pools, message
	// lengths and think times (RandomGrid). Held out: its shapes are drawn,
	// not chosen. Judged by the cell goals, as EvalMixed.
	EvalRandom = "random"
)

// EvalGrids lists the grids, the default first.
var EvalGrids = []string{EvalFull, EvalQuick, EvalMixed, EvalHeavy, EvalMixedTrace, EvalRandom}

// CellGoalsOnly reports whether grid is judged by the cell goals alone
// (EvalOptions.CellGoalsOnly): the family goals are EvalFull's.
func CellGoalsOnly(grid string) bool {
	return grid == EvalMixed || grid == EvalHeavy || grid == EvalMixedTrace || grid == EvalRandom
}

// EvalCase is one workload on one engine.
type EvalCase struct {
	// Family names the workload family; Name the case within it (its
	// parameters, seed and engine shape).
	Family string `json:"family"`
	Name   string `json:"case"`
	// Trace reports whether the family replays a trace.
	Trace bool `json:"trace,omitempty"`
	// Workload and Engine are the case (the engine's Reuse is replaced by
	// each semantics evaluated).
	Workload WorkloadConfig `json:"workload"`
	Engine   EngineConfig   `json:"engine"`
}

// EvalCell is the judged variant on one case under one reuse semantics,
// relative to the best reference there.
type EvalCell struct {
	Family string `json:"family"`
	Case   string `json:"case"`
	Reuse  string `json:"reuse"`
	// Best is the best reference (lowest TTFT p99, ties: lower prefill).
	Best string `json:"best_reference"`
	// Prefill and P99 are the variant's prefill tokens and TTFT p99 over
	// the best reference's.
	Prefill float64 `json:"prefill_vs_best"`
	P99     float64 `json:"ttft_p99_vs_best"`
	// The absolute figures: the variant's and the best reference's.
	PrefillTokens     int64   `json:"prefill_tokens"`
	BestPrefillTokens int64   `json:"best_prefill_tokens"`
	P99Ms             float64 `json:"ttft_p99_ms"`
	BestP99Ms         float64 `json:"best_ttft_p99_ms"`
	// FloorP99Ms is the case's FloorP99: no policy's TTFT p99 is lower.
	FloorP99Ms float64 `json:"ttft_p99_floor_ms"`
}

// Miss reports whether the cell breaks a goal.
func (c EvalCell) Miss() bool { return missesGoals(c.Prefill, c.P99) }

// Excess is how far the cell is from its goals: the larger of prefill over
// GoalPrefill and p99 over GoalP99 (above 1: a miss). Cells sort by it,
// worst first.
func (c EvalCell) Excess() float64 { return goalExcess(c.Prefill, c.P99) }

// EvalFamily summarises one family under one reuse semantics.
type EvalFamily struct {
	Family string `json:"family"`
	Reuse  string `json:"reuse"`
	Trace  bool   `json:"trace,omitempty"`
	Cells  int    `json:"cells"`
	Misses int    `json:"misses"`
	// WinCells counts the cells with TTFT p99 at most GoalWin.
	WinCells int `json:"win_cells"`
	// P99GeoMean is the geometric mean of the cells' p99 ratios;
	// PrefillGeoMean that of their prefill ratios. The family wins when
	// P99GeoMean <= GoalWin.
	P99GeoMean     float64 `json:"ttft_p99_geomean"`
	PrefillGeoMean float64 `json:"prefill_geomean"`
	// FloorGeoMean is the geometric mean of the cells' FloorP99Ms over the
	// best reference's p99: no policy's P99GeoMean is lower. Above GoalWin,
	// no router can win the family. 0 when a cell has no floor.
	FloorGeoMean float64 `json:"ttft_p99_floor_geomean"`
	// WorstPrefill and WorstP99 are its cells with the highest prefill and
	// the highest p99 ratio.
	WorstPrefill EvalCell `json:"worst_prefill"`
	WorstP99     EvalCell `json:"worst_p99"`
}

// EvalScale is one reference policy judged as the variant is, on every
// cell against the best of the other references, under one reuse
// semantics. It gives the goals their scale: a cell's TTFT p99 is set by a
// few of its slowest requests, and no reference keeps within GoalP99 of the
// others on most cells.
type EvalScale struct {
	Reference string `json:"reference"`
	Reuse     string `json:"reuse"`
	Cells     int    `json:"cells"`
	// Misses counts the cells where it breaks a cell goal against the best
	// of the others; WorstPrefill and WorstP99 are its largest ratios.
	Misses       int     `json:"misses"`
	WorstPrefill float64 `json:"worst_prefill"`
	WorstP99     float64 `json:"worst_p99"`
	// P99GeoMean and PrefillGeoMean are the geometric means of its
	// cells' ratios.
	P99GeoMean     float64 `json:"ttft_p99_geomean"`
	PrefillGeoMean float64 `json:"prefill_geomean"`

	logP99, logPrefill float64 // sums of the ratios' logarithms
}

// Win reports whether the family's typical p99 is at least 20% below the
// best reference's.
func (f EvalFamily) Win() bool { return f.P99GeoMean > 0 && f.P99GeoMean <= GoalWin }

// Evaluation is the outcome of RunEval.
type Evaluation struct {
	Tool    string   `json:"tool"`
	Version int      `json:"version"`
	Grid    string   `json:"grid"`
	Variant string   `json:"variant"`
	Refs    []string `json:"references"`
	Reuse   []string `json:"reuse"`
	// Cases are the grid's cases, in order; Cells one entry per case and
	// reuse semantics (cases outer).
	Cases    []EvalCase   `json:"cases"`
	Cells    []EvalCell   `json:"cells"`
	Families []EvalFamily `json:"families"`
	// Scale is every reference judged against the others (per reuse
	// semantics, references inner).
	Scale []EvalScale `json:"reference_scale"`
	// AgainstKV is the variant judged by the cell goals against the better
	// of the KV-aware references alone (KVReferences), one entry per reuse
	// semantics, Reference naming the variant: how it compares with the
	// policy it would replace in an engine that routes by KV cache.
	AgainstKV []EvalScale `json:"against_kv_aware"`
	// CellGoalsOnly reports that only the cell goals were judged
	// (EvalOptions.CellGoalsOnly).
	CellGoalsOnly bool `json:"cell_goals_only,omitempty"`
	// Problems lists every goal missed, in words; empty when all are met.
	Problems []string `json:"problems"`
}

// Pass reports whether every goal is met.
func (e *Evaluation) Pass() bool { return len(e.Problems) == 0 }

// EvalOptions is one evaluation.
type EvalOptions struct {
	// Grid names the grid, for reports; Cases are its cases (EvalGrid).
	Grid  string
	Cases []EvalCase
	// Variant is the judged variant.
	Variant Variant
	// Reuse lists the reuse semantics (nil: ReuseModes).
	Reuse []string
	// Parallel is how many simulations run at once (0: GOMAXPROCS).
	// Results do not depend on it.
	Parallel int
	// CellGoalsOnly judges the cell goals alone, not the family goals
	// (wins on EvalWinFamilies families, a trace family among them):
	// for the held-out grids (see CellGoalsOnly), which have no trace
	// family, and for a part of a grid.
	CellGoalsOnly bool
	// Requests, if not nil, receives every simulation's requests (see
	// EvalRequests), one call per simulation, in the order of the cases,
	// then the reuse semantics, then the References and the variant,
	// whatever the parallelism; calls never overlap. An error it returns
	// ends the evaluation with that error. A simulation's requests are
	// kept until those before it in that order have been passed on.
	Requests func(EvalRequests) error
	// Explain, with Requests, gives each request its Decision: the
	// router's receipt for it (Simulator.Explain). The figures are the
	// same either way.
	Explain bool
}

// EvalRequests is one simulation of an evaluation, request by request:
// what its TTFT p99 and prefill are made of.
type EvalRequests struct {
	Family, Case string
	Reuse        string
	// Policy is the reference or variant simulated.
	Policy string
	// Events holds each request's first token, by arrival (then id).
	Events []RequestEvent
}

// evalFigures is what the evaluation keeps of one simulation.
type evalFigures struct {
	prefill int64
	p99     float64
}

// evalCaseRun is one case's workload while RunEval's jobs for it run.
type evalCaseRun struct {
	once sync.Once
	wl   *Workload
	err  error
	left atomic.Int32 // the case's jobs not finished
}

// RunEval simulates every case with the References and the variant under
// each reuse semantics and judges the variant. Deterministic: each
// simulation is sequential and its result lands in a slot of its own.
func RunEval(o EvalOptions) (*Evaluation, error) {
	if len(o.Cases) == 0 {
		return nil, errors.New("evaluation: no case")
	}
	refs, err := ParseVariants(strings.Join(References, ","))
	if err != nil {
		return nil, err
	}
	if slices.Contains(References, o.Variant.Name) {
		return nil, fmt.Errorf("evaluation: variant %s is a reference", o.Variant.Name)
	}
	variants := append(refs, o.Variant)
	modes := o.Reuse
	if len(modes) == 0 {
		modes = ReuseModes
	}
	for i, m := range modes {
		if !slices.Contains(ReuseModes, m) || slices.Contains(modes[:i], m) {
			return nil, fmt.Errorf("evaluation: reuse semantics %q unknown or listed twice", m)
		}
	}
	for _, c := range o.Cases {
		if err := c.Engine.Validate(); err != nil {
			return nil, fmt.Errorf("case %s/%s: %w", c.Family, c.Name, err)
		}
		if err := c.Workload.Validate(); err != nil {
			return nil, fmt.Errorf("case %s/%s: %w", c.Family, c.Name, err)
		}
	}
	nv, nm := len(variants), len(modes)
	perCase := nm*nv + 1 // its simulations, then its floor
	figs := make([]evalFigures, len(o.Cases)*nm*nv)
	floors := make([]float64, len(o.Cases))
	errs := make([]error, len(o.Cases)*perCase)
	// A case's workload is generated by its first job and dropped after its
	// last: jobs go out case by case, so only the cases in flight hold their
	// prompts, not the whole grid (which, with long steady cases, would not
	// fit in memory).
	runs := make([]evalCaseRun, len(o.Cases))
	for c := range runs {
		runs[c].left.Store(int32(perCase))
	}
	par := o.Parallel
	if par <= 0 {
		par = runtime.GOMAXPROCS(0)
	}
	out := newRequestStream(o, len(errs), perCase, nv, modes, variants)
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range min(par, len(errs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				c, k := j/perCase, j%perCase
				run := &runs[c]
				run.once.Do(func() { run.wl, run.err = Generate(o.Cases[c].Workload) })
				if run.err != nil {
					if k == 0 { // once per case
						errs[j] = fmt.Errorf("case %s/%s: %w", o.Cases[c].Family, o.Cases[c].Name, run.err)
					}
				} else if k == perCase-1 {
					floors[c] = FloorP99(run.wl, o.Cases[c].Engine)
				} else {
					m, v := k/nv, k%nv
					eng := o.Cases[c].Engine
					eng.Reuse = modes[m]
					s, err := NewSimulator(eng, run.wl, variants[v], false)
					var res *Result
					evs := []RequestEvent{} // not nil: a simulation ran
					if err == nil && out != nil {
						s.Observe = func(e RequestEvent) { evs = append(evs, e) }
						if o.Explain {
							err = s.Explain()
						}
					}
					if err == nil {
						res, err = s.Run()
					}
					if err == nil && out != nil {
						err = out.done(j, evs)
					}
					if err != nil {
						errs[j] = fmt.Errorf("case %s/%s, reuse %s: %w", o.Cases[c].Family, o.Cases[c].Name, modes[m], err)
					} else {
						figs[c*nm*nv+k] = evalFigures{prefill: res.PrefillTokens, p99: res.TTFT.P99}
					}
				}
				if out != nil && (run.err != nil || k == perCase-1) {
					// No simulation's requests: the floor, or a case that
					// failed to generate.
					if err := out.done(j, nil); err != nil && errs[j] == nil {
						errs[j] = err
					}
				}
				if run.left.Add(-1) == 0 {
					run.wl = nil
				}
			}
		}()
	}
	// Longest first would balance better; the order of the jobs does not
	// change any result.
	for j := range len(errs) {
		jobs <- j
	}
	close(jobs)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	e := &Evaluation{Tool: "adprouter-sim", Version: 1, Grid: o.Grid, Variant: o.Variant.Name,
		Refs: slices.Clone(References), Reuse: slices.Clone(modes), Cases: o.Cases, CellGoalsOnly: o.CellGoalsOnly}
	e.Scale = make([]EvalScale, nm*len(refs))
	for m := range modes {
		for r := range refs {
			e.Scale[m*len(refs)+r] = EvalScale{Reference: refs[r].Name, Reuse: modes[m]}
		}
		e.AgainstKV = append(e.AgainstKV, EvalScale{Reference: o.Variant.Name, Reuse: modes[m]})
	}
	var kv []int // indices of KVReferences in refs
	for r := range refs {
		if slices.Contains(KVReferences, refs[r].Name) {
			kv = append(kv, r)
		}
	}
	for c := range o.Cases {
		for m := range modes {
			base := (c*nm + m) * nv
			rf := figs[base : base+len(refs)]
			best := bestFigures(rf, -1)
			b, x := rf[best], figs[base+nv-1]
			e.Cells = append(e.Cells, EvalCell{Family: o.Cases[c].Family, Case: o.Cases[c].Name, Reuse: modes[m],
				Best: refs[best].Name, Prefill: ratio(x.prefill, b.prefill), P99: fratio(x.p99, b.p99),
				PrefillTokens: x.prefill, BestPrefillTokens: b.prefill, P99Ms: x.p99, BestP99Ms: b.p99,
				FloorP99Ms: floors[c]})
			for r := range refs {
				e.Scale[m*len(refs)+r].add(rf[r], rf[bestFigures(rf, r)])
			}
			kf := make([]evalFigures, len(kv))
			for k, r := range kv {
				kf[k] = rf[r]
			}
			e.AgainstKV[m].add(x, kf[bestFigures(kf, -1)])
		}
	}
	e.summarise()
	return e, nil
}

// KVReferences are the References that route by KV cache: the policy
// the recommended preset is a setting of, with and without its warmup.
var KVReferences = []string{VariantKVCacheAware, VariantKVWarmup}

// bestFigures returns the index of the best of figs, the one with the
// lowest TTFT p99 (ties: fewer prefill tokens, then the first), leaving out
// index skip (-1: none). figs holds at least one other entry.
func bestFigures(figs []evalFigures, skip int) int {
	best := -1
	for r, f := range figs {
		if r == skip {
			continue
		}
		if best < 0 || f.p99 < figs[best].p99 || (f.p99 == figs[best].p99 && f.prefill < figs[best].prefill) {
			best = r
		}
	}
	return best
}

// add judges one cell: the reference's figures x against the best of the
// others, b.
func (s *EvalScale) add(x, b evalFigures) {
	c := EvalCell{Prefill: ratio(x.prefill, b.prefill), P99: fratio(x.p99, b.p99)}
	s.Cells++
	if c.Miss() {
		s.Misses++
	}
	s.WorstPrefill = max(s.WorstPrefill, c.Prefill)
	s.WorstP99 = max(s.WorstP99, c.P99)
	s.logP99 += math.Log(max(c.P99, 1e-9))
	s.logPrefill += math.Log(max(c.Prefill, 1e-9))
	s.P99GeoMean = round(math.Exp(s.logP99/float64(s.Cells)), 4)
	s.PrefillGeoMean = round(math.Exp(s.logPrefill/float64(s.Cells)), 4)
}

// summarise fills Families and Problems from Cells.
func (e *Evaluation) summarise() {
	var order []string
	trace := map[string]bool{}
	for _, c := range e.Cases {
		if !slices.Contains(order, c.Family) {
			order = append(order, c.Family)
		}
		trace[c.Family] = trace[c.Family] || c.Trace
	}
	e.Families, e.Problems = nil, nil
	for _, m := range e.Reuse {
		wins, traceWin := 0, false
		for _, fam := range order {
			f := EvalFamily{Family: fam, Reuse: m, Trace: trace[fam]}
			lp, lq, lf, floors := 0.0, 0.0, 0.0, true
			for _, c := range e.Cells {
				if c.Family != fam || c.Reuse != m {
					continue
				}
				if f.Cells == 0 || c.Prefill > f.WorstPrefill.Prefill {
					f.WorstPrefill = c
				}
				if f.Cells == 0 || c.P99 > f.WorstP99.P99 {
					f.WorstP99 = c
				}
				f.Cells++
				if c.Miss() {
					f.Misses++
					e.Problems = append(e.Problems, fmt.Sprintf("reuse %s, %s/%s: prefill %.2fx (goal %.2fx), TTFT p99 %.2fx (goal %.2fx) of %s",
						m, c.Family, c.Case, c.Prefill, GoalPrefill, c.P99, GoalP99, c.Best))
				}
				if c.P99 > 0 && c.P99 <= GoalWin {
					f.WinCells++
				}
				lp += math.Log(max(c.Prefill, 1e-9))
				lq += math.Log(max(c.P99, 1e-9))
				if c.FloorP99Ms > 0 && c.BestP99Ms > 0 {
					lf += math.Log(c.FloorP99Ms / c.BestP99Ms)
				} else {
					floors = false
				}
			}
			if f.Cells == 0 {
				continue
			}
			f.PrefillGeoMean = round(math.Exp(lp/float64(f.Cells)), 4)
			f.P99GeoMean = round(math.Exp(lq/float64(f.Cells)), 4)
			if floors {
				f.FloorGeoMean = round(math.Exp(lf/float64(f.Cells)), 4)
			}
			if f.Win() {
				wins++
				traceWin = traceWin || f.Trace
			}
			e.Families = append(e.Families, f)
		}
		if wins < EvalWinFamilies && !e.CellGoalsOnly {
			e.Problems = append(e.Problems, fmt.Sprintf("reuse %s: TTFT p99 geometric mean <= %.2fx of the best reference on %d families, want %d or more",
				m, GoalWin, wins, EvalWinFamilies))
		}
		if !traceWin && !e.CellGoalsOnly {
			var floors []string
			for _, f := range e.Families {
				if f.Reuse == m && f.Trace && f.FloorGeoMean > GoalWin {
					floors = append(floors, fmt.Sprintf("%s %.2fx", f.Family, f.FloorGeoMean))
				}
			}
			p := fmt.Sprintf("reuse %s: no trace family with TTFT p99 geometric mean <= %.2fx of the best reference", m, GoalWin)
			if len(floors) > 0 {
				p += fmt.Sprintf(" (the least any router can reach: %s)", strings.Join(floors, ", "))
			}
			e.Problems = append(e.Problems, p)
		}
	}
}

// WriteEval writes the evaluation: per reuse semantics a table of the
// families (cells, misses, worst prefill and p99 cells, geometric means,
// winning cells) and the worst cells overall, then the verdict and every
// goal missed. worst bounds the cells listed per semantics.
func (e *Evaluation) WriteEval(w io.Writer, worst int) error {
	var b strings.Builder
	sims := len(e.Cells) * (len(e.Refs) + 1)
	fmt.Fprintf(&b, "evaluation %s of %s: %d cases in %d families x %d reuse semantics, %d simulations\n",
		e.Grid, e.Variant, len(e.Cases), len(e.Families)/max(len(e.Reuse), 1), len(e.Reuse), sims)
	fmt.Fprintf(&b, "goals, against the best reference (lowest TTFT p99 of %s) on each cell:\n", strings.Join(e.Refs, ", "))
	fmt.Fprintf(&b, "  every cell: prefill <= %.2fx and TTFT p99 <= %.2fx\n", GoalPrefill, GoalP99)
	if e.CellGoalsOnly {
		fmt.Fprintf(&b, "  (the family goals are not judged here: they are the %s grid's)\n", EvalFull)
	} else {
		fmt.Fprintf(&b, "  per reuse semantics: TTFT p99 geometric mean <= %.2fx on >= %d families, a trace family among them\n", GoalWin, EvalWinFamilies)
	}
	fmt.Fprintf(&b, "floor: the least p99 geometric mean any router can reach (sim.FloorP99: each request alone on an idle rank, every shareable prefix cached, one per prompt family computing it whole)\n")
	for _, m := range e.Reuse {
		fmt.Fprintf(&b, "\nreuse %s: %s\n", m, DescribeReuse(m))
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  family\tcells\tmisses\tp99 geomean\tfloor\twin cells\tprefill geomean\tworst prefill\tworst p99\t")
		for _, f := range e.Families {
			if f.Reuse != m {
				continue
			}
			mark := ""
			if f.Win() {
				mark = " win"
			}
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%.2fx%s\t%.2fx\t%d\t%.3fx\t%.3fx\t%.3fx\t\n", f.Family, f.Cells, f.Misses, f.P99GeoMean, mark,
				f.FloorGeoMean, f.WinCells, f.PrefillGeoMean, f.WorstPrefill.Prefill, f.WorstP99.P99)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		cells := worstCells(e.Cells, func(c EvalCell) bool { return c.Reuse == m }, worst)
		fmt.Fprintf(&b, "worst %d cells (by the larger of prefill/%.2f and p99/%.2f):\n", len(cells), GoalPrefill, GoalP99)
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  \tfamily\tcase\tprefill\tp99\tp99 ms\t+ms\tbest reference\t")
		for _, c := range cells {
			mark := ""
			if c.Miss() {
				mark = "MISS"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%.3fx\t%.3fx\t%.1f\t%+.1f\t%s\t\n", mark, c.Family, c.Case, c.Prefill, c.P99, c.P99Ms, c.P99Ms-c.BestP99Ms, c.Best)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(e.Scale) > 0 {
		fmt.Fprintf(&b, "\nfor scale, each reference judged the same way against the best of the others:\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  reference\treuse\tmisses\tof\tworst prefill\tworst p99\t")
		for _, s := range e.Scale {
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%.3fx\t%.3fx\t\n", s.Reference, s.Reuse, s.Misses, s.Cells, s.WorstPrefill, s.WorstP99)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(e.AgainstKV) > 0 {
		fmt.Fprintf(&b, "\n%s against the better of %s alone, by the same cell goals:\n", e.Variant, strings.Join(KVReferences, " and "))
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  reuse\tmisses\tof\tp99 geomean\tprefill geomean\tworst prefill\tworst p99\t")
		for _, s := range e.AgainstKV {
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%.3fx\t%.3fx\t%.3fx\t%.3fx\t\n", s.Reuse, s.Misses, s.Cells, s.P99GeoMean, s.PrefillGeoMean,
				s.WorstPrefill, s.WorstP99)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if e.Pass() {
		fmt.Fprintf(&b, "\nverdict: PASS (%d cells, no goal missed)\n", len(e.Cells))
	} else {
		fmt.Fprintf(&b, "\nverdict: FAIL, %d goals missed:\n", len(e.Problems))
		for _, p := range e.Problems {
			fmt.Fprintf(&b, "  %s\n", p)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// worstCells returns at most n of the cells that keep selects, the largest
// Excess first (equal ones in their order).
func worstCells[C interface{ Excess() float64 }](cells []C, keep func(C) bool, n int) []C {
	var out []C
	for _, c := range cells {
		if keep(c) {
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, func(x, y C) int { return cmp.Compare(y.Excess(), x.Excess()) })
	return out[:min(n, len(out))]
}

// WriteJSON writes the evaluation as indented JSON (same grid, same bytes).
func (e *Evaluation) WriteJSON(w io.Writer) error { return writeJSON(w, e) }

// EvalTrace is a trace the evaluation replays: its family (conversation,
// synthetic, ...) and its records.
type EvalTrace struct {
	Family   string
	Workload WorkloadConfig
}

// evalShape is an engine shape of the grid.
type evalShape struct {
	name   string
	dp     int
	budget int
	blocks int
}

// The engine shapes: the default engine (8 ranks, 8192-token budget, 4096
// blocks of 32 tokens per rank) and one change each.
var (
	shapeDefault = evalShape{"dp8", 8, 8192, 4096}
	evalShapes   = []evalShape{
		{"dp4", 4, 8192, 4096},
		{"dp16", 16, 8192, 4096},
		{"dp32", 32, 8192, 4096},
		{"budget2k", 8, 2048, 4096},
		{"budget16k", 8, 16384, 4096},
		{"pool1k", 8, 8192, 1024},
	}
)

func (s evalShape) engine() EngineConfig {
	e := DefaultEngine()
	e.DPSize, e.MaxNumTokens, e.KVBlocks = s.dp, s.budget, s.blocks
	return e
}

// load is the factor by which a case scales its arrival rate on this
// shape: the load per rank stays that of the default engine.
func (s evalShape) load() float64 { return float64(s.dp) / float64(shapeDefault.dp) }

// evalParam is one parameter setting of a family.
type evalParam struct {
	name string
	set  func(w *WorkloadConfig, load float64)
}

// evalFamily is a family of the grid: a workload kind, its parameter
// settings, and which of them run on the other engine shapes.
type evalFamily struct {
	name   string
	kind   string
	params []evalParam
	// shaped lists the indexes of params that also run on every engine
	// shape (seed 1); quick the (param, seed) pairs of EvalQuick, on the
	// default engine, and quickShapes the shapes EvalQuick adds (param 0,
	// seed 1).
	shaped      []int
	quick       [][2]int
	quickShapes []string
}

// evalFamilies are the generated families of the grid.
func evalFamilies() []evalFamily {
	spike := func(w *WorkloadConfig, load float64, sys, groups int, zipf, spikeS float64) {
		w.SystemTokens, w.Groups, w.ZipfS = sys, groups, zipf
		w.QuietS, w.QuietIntervalS, w.SpikeS = 60, 1.5, spikeS
		w.SpikeFactor = 150 * load // 100 req/s on 8 ranks
	}
	tenants := func(groups int, zipf float64, sys int, spikeS float64) evalParam {
		return evalParam{fmt.Sprintf("tenants=%d zipf=%g sys=%d spike=%gs", groups, zipf, sys, spikeS), func(w *WorkloadConfig, load float64) {
			spike(w, load, sys, groups, zipf, spikeS)
		}}
	}
	steady := func(groups int, zipf float64, arrival string) evalParam {
		return evalParam{fmt.Sprintf("tenants=%d zipf=%g %s", groups, zipf, arrival), func(w *WorkloadConfig, load float64) {
			w.Groups, w.ZipfS, w.Arrival = groups, zipf, arrival
			w.Rate, w.DurationS = 20*load, evalDuration
		}}
	}
	loaded := func(groups int, zipf, times float64) evalParam {
		return evalParam{fmt.Sprintf("tenants=%d zipf=%g rate=%gx", groups, zipf, times), func(w *WorkloadConfig, load float64) {
			w.Groups, w.ZipfS, w.Arrival = groups, zipf, ArrivalPoisson
			w.Rate, w.DurationS = 20*times*load, evalDuration
		}}
	}
	return []evalFamily{
		{name: "shared-spike", kind: KindColdStart, params: []evalParam{
			{"sys=4096", func(w *WorkloadConfig, load float64) { spike(w, load, 4096, 1, 0, 8) }},
			{"sys=1024", func(w *WorkloadConfig, load float64) { spike(w, load, 1024, 1, 0, 8) }},
		}, shaped: []int{0}, quick: [][2]int{{0, 1}}},
		{name: "tenant-spike", kind: KindTenantSpike, params: []evalParam{
			tenants(6, 1.1, 3000, 2),
			tenants(2, 0.6, 4096, 8),
			tenants(16, 1.1, 2048, 8),
			tenants(64, 1.4, 2048, 8),
			tenants(64, 0.6, 1024, 8),
		}, shaped: []int{0, 2}, quick: [][2]int{{0, 1}, {0, 2}, {3, 1}}, quickShapes: []string{"dp16"}},
		{name: "multitenant", kind: KindMultiTenant, params: []evalParam{
			steady(1, 0, ArrivalPoisson),
			steady(2, 1.0, ArrivalPoisson),
			steady(8, 0.6, ArrivalPoisson),
			steady(8, 1.4, ArrivalBursty),
			steady(32, 1.1, ArrivalPoisson),
			steady(64, 0.6, ArrivalBursty),
			steady(64, 1.4, ArrivalPoisson),
		}, shaped: []int{4}, quick: [][2]int{{0, 1}, {4, 1}, {5, 1}}},
		{name: "loaded", kind: KindMultiTenant, params: []evalParam{
			loaded(1, 0, 2),
			loaded(1, 0, 4),
			loaded(2, 1, 2),
			loaded(4, 1, 4),
		}, shaped: []int{0}, quick: [][2]int{{1, 1}}},
		{name: "mixed-lengths", kind: KindMultiTenant, params: []evalParam{
			{"tenants=8 zipf=1.1 sys=1024 suffix=32-6144", func(w *WorkloadConfig, load float64) {
				w.Groups, w.ZipfS, w.SystemTokens, w.SuffixMin, w.SuffixMax = 8, 1.1, 1024, 32, 6144
				w.Rate, w.DurationS = 10*load, evalDuration
			}},
			{"tenants=4 zipf=0.8 sys=512 suffix=64-8192 bursty", func(w *WorkloadConfig, load float64) {
				w.Groups, w.ZipfS, w.SystemTokens, w.SuffixMin, w.SuffixMax = 4, 0.8, 512, 64, 8192
				w.Arrival, w.Rate, w.DurationS = ArrivalBursty, 8*load, evalDuration
			}},
		}, shaped: []int{0}, quick: [][2]int{{1, 1}}},
		{name: "siblings", kind: KindSiblings, params: []evalParam{
			{"samples=8", func(w *WorkloadConfig, load float64) { w.Siblings, w.Rate, w.DurationS = 8, 2.5*load, evalDuration }},
			{"samples=4", func(w *WorkloadConfig, load float64) { w.Siblings, w.Rate, w.DurationS = 4, 5*load, evalDuration }},
			{"samples=16 prompt=1024-8192", func(w *WorkloadConfig, load float64) {
				w.Siblings, w.Rate, w.DurationS, w.PromptMin, w.PromptMax = 16, 0.6*load, evalDuration, 1024, 8192
			}},
		}, shaped: []int{0}, quick: [][2]int{{0, 1}, {2, 1}}},
		{name: "noreuse", kind: KindNoReuse, params: []evalParam{
			{"prompt=256-2048", func(w *WorkloadConfig, load float64) { w.Rate, w.DurationS = 20*load, evalDuration }},
			{"prompt=64-8192 bursty", func(w *WorkloadConfig, load float64) {
				w.PromptMin, w.PromptMax, w.Arrival, w.Rate, w.DurationS = 64, 8192, ArrivalBursty, 8*load, evalDuration
			}},
		}, shaped: []int{0}, quick: [][2]int{{1, 1}}},
		{name: "conversation-cold", kind: KindConversation, params: []evalParam{
			{"sys=1200 think=5s", func(w *WorkloadConfig, load float64) {
				w.SystemTokens, w.ThinkS, w.Rate, w.DurationS = 1200, 5, 4*load, evalDuration
			}},
			{"sys=1200 think=1s", func(w *WorkloadConfig, load float64) {
				w.SystemTokens, w.ThinkS, w.Rate, w.DurationS = 1200, 1, 4*load, evalDuration
			}},
			{"sys=4096 think=10s msg=256-2048", func(w *WorkloadConfig, load float64) {
				w.SystemTokens, w.ThinkS, w.Rate, w.DurationS, w.SuffixMin, w.SuffixMax = 4096, 10, 2*load, evalDuration, 256, 2048
			}},
			{"sys=1200 think=2s bursty(8) 8/s", func(w *WorkloadConfig, load float64) {
				w.SystemTokens, w.ThinkS, w.Arrival, w.Rate, w.DurationS = 1200, 2, ArrivalBursty, 8*load, evalDuration/2
			}},
		}, shaped: []int{0, 3}, quick: [][2]int{{0, 1}, {1, 2}, {3, 1}}, quickShapes: []string{"budget2k"}},
		{name: "followup", kind: KindFollowUp, params: []evalParam{
			{"p=0.5 delay=50ms", func(w *WorkloadConfig, load float64) { w.Rate, w.DurationS = 2*load, evalDuration }},
		}, shaped: []int{0}, quick: [][2]int{{0, 1}}},
	}
}

// evalDuration is how long the steady families' arrivals go on, in
// seconds: long enough that a TTFT p99 is a statistic of a thousand
// requests or more, not the few slowest of a cold start.
const evalDuration = 60

// TraceScale is one replay of a trace slice: its arrival times
// (WorkloadConfig.TraceTimeScale; below 1 replays it faster) and its
// lengths (TraceLengthScale) scaled.
type TraceScale struct {
	Time, Length float64
}

// evalTraceScales are the scales at which every trace runs on the default
// engine, the first also on the other shapes (the time scale divided by the
// load factor there).
var evalTraceScales = []TraceScale{{1, 0.5}, {0.5, 0.5}, {1, 1}}

// EvalTraceScales returns the scales EvalGrid replays every trace slice at.
func EvalTraceScales() []TraceScale { return slices.Clone(evalTraceScales) }

// EvalGrid returns the cases of the named grid (one of EvalGrids). traces
// are the traces replayed, each in its family ("trace-" + Family), at
// EvalTraceScales; the mixed, heavy, mixed-trace and random grids replay
// none of them.
func EvalGrid(grid string, traces []EvalTrace) ([]EvalCase, error) {
	return EvalGridScaled(grid, traces, evalTraceScales)
}

// EvalGridScaled is EvalGrid with the trace slices replayed at scales
// instead: each scale on the default engine, the first also on the other
// engine shapes (the quick grid takes the first two in turn). It judges the
// grid's engines on slices run faster or slower than the grid runs them.
func EvalGridScaled(grid string, traces []EvalTrace, scales []TraceScale) ([]EvalCase, error) {
	if !slices.Contains(EvalGrids, grid) {
		return nil, fmt.Errorf("evaluation grid %q, want one of %s", grid, strings.Join(EvalGrids, ", "))
	}
	if len(scales) == 0 {
		return nil, errors.New("trace scales: none, want at least one")
	}
	for _, sc := range scales {
		if !(sc.Time > 0 && sc.Length > 0) || math.IsInf(sc.Time, 0) || math.IsInf(sc.Length, 0) {
			return nil, fmt.Errorf("trace scale time %g, length %g: want both finite and > 0", sc.Time, sc.Length)
		}
	}
	switch grid {
	case EvalMixed:
		return mixedGrid()
	case EvalHeavy:
		return heavyGrid()
	case EvalMixedTrace:
		return mixTraceGrid()
	case EvalRandom:
		return RandomGrid(EvalRandomShapes)
	}
	quick := grid == EvalQuick
	var cases []EvalCase
	add := func(fam string, trace bool, name string, w WorkloadConfig, s evalShape) {
		cases = append(cases, EvalCase{Family: fam, Name: name + " " + s.name, Trace: trace, Workload: w, Engine: s.engine()})
	}
	shapeByName := func(n string) evalShape {
		for _, s := range evalShapes {
			if s.name == n {
				return s
			}
		}
		panic("unknown shape " + n)
	}
	for _, f := range evalFamilies() {
		gen := func(p int, seed uint64, s evalShape) {
			w, err := DefaultWorkload(f.kind)
			if err != nil {
				panic(err) // the families name known kinds
			}
			w.Seed = seed
			f.params[p].set(&w, s.load())
			add(f.name, false, fmt.Sprintf("%s seed=%d", f.params[p].name, seed), w, s)
		}
		if quick {
			for _, q := range f.quick {
				gen(q[0], uint64(q[1]), shapeDefault)
			}
			for _, n := range f.quickShapes {
				gen(0, 1, shapeByName(n))
			}
			continue
		}
		for p := range f.params {
			for seed := uint64(1); seed <= 3; seed++ {
				gen(p, seed, shapeDefault)
			}
		}
		for _, p := range f.shaped {
			for _, s := range evalShapes {
				gen(p, 1, s)
			}
		}
	}
	for i, t := range traces {
		fam := "trace-" + t.Family
		gen := func(ts, ls float64, s evalShape) {
			w := t.Workload
			w.Seed = 1
			w.TraceTimeScale, w.TraceLengthScale = ts/s.load(), ls
			add(fam, true, fmt.Sprintf("%s time=%g len=%g", w.Trace, ts, ls), w, s)
		}
		if quick {
			sc := scales[min(i%2, len(scales)-1)]
			gen(sc.Time, sc.Length, shapeDefault)
			continue
		}
		for _, sc := range scales {
			gen(sc.Time, sc.Length, shapeDefault)
		}
		for _, s := range evalShapes {
			gen(scales[0].Time, scales[0].Length, s)
		}
	}
	for i := range cases {
		if err := cases[i].Workload.Validate(); err != nil {
			return nil, fmt.Errorf("case %s/%s: %w", cases[i].Family, cases[i].Name, err)
		}
	}
	return cases, nil
}

// evalMixes are the mixes of EvalMixed, each a list of kinds at their
// default parameters: a spike, conversations or samples under steady
// traffic of other families, and unrelated prompts.
var evalMixes = [][]string{
	{KindShared, KindFollowUp},
	{KindShared, KindConversation},
	{KindMultiTenant, KindSiblings},
	{KindMultiTenant, KindFollowUp},
	{KindMultiTenant, KindConversation, KindNoReuse, KindSiblings},
	{KindConversation, KindFollowUp, KindNoReuse},
	{KindColdStart, KindNoReuse},
	{KindColdStart, KindConversation, KindSiblings},
	{KindTenantSpike, KindConversation},
	{KindTenantSpike, KindFollowUp},
	{KindTenantSpike, KindSiblings, KindNoReuse},
}

// evalMixLoads are the rate factors of EvalMixed: each part's arrivals
// come this many times as often, over a time that much shorter (the same
// requests; think times unchanged).
var evalMixLoads = []float64{1, 0.5}

// mixedGrid returns the cases of EvalMixed, a family per mix.
func mixedGrid() ([]EvalCase, error) {
	var cases []EvalCase
	for _, kinds := range evalMixes {
		parts := make([]WorkloadConfig, len(kinds))
		for i, k := range kinds {
			w, err := DefaultWorkload(k)
			if err != nil {
				return nil, err
			}
			parts[i] = w
		}
		fam := "mix-" + MixName(parts)
		for seed := uint64(1); seed <= 3; seed++ {
			for _, load := range evalMixLoads {
				for _, s := range []evalShape{evalShapes[0], shapeDefault, evalShapes[1]} {
					w := MixWorkload(parts...)
					w.Seed = seed
					for i := range w.Mix {
						scaleRate(&w.Mix[i], load)
					}
					if err := w.Validate(); err != nil {
						return nil, fmt.Errorf("case %s: %w", fam, err)
					}
					cases = append(cases, EvalCase{Family: fam, Name: fmt.Sprintf("seed=%d load=%g %s", seed, load, s.name),
						Workload: w, Engine: s.engine()})
				}
			}
		}
	}
	return cases, nil
}

// The parameters of EvalHeavy: tenants, rates per 8 ranks, engine shapes
// and seeds.
var (
	heavyTenants = []int{1, 2, 4}
	heavyRates   = []float64{20, 40, 80}
	heavyShapes  = []evalShape{shapeDefault, evalShapes[1]}
	heavySeeds   = []uint64{5, 6}
)

// heavyGrid returns the cases of EvalHeavy, one family: the rates scaled
// with the ranks (evalShape.load), so 16 ranks carry the load per rank of 8.
func heavyGrid() ([]EvalCase, error) {
	var cases []EvalCase
	for _, g := range heavyTenants {
		for _, rate := range heavyRates {
			for _, s := range heavyShapes {
				for _, seed := range heavySeeds {
					w, err := DefaultWorkload(KindMultiTenant)
					if err != nil {
						return nil, err
					}
					w.Seed, w.Groups, w.ZipfS, w.Rate, w.DurationS = seed, g, 1, rate*s.load(), 60
					if err := w.Validate(); err != nil {
						return nil, fmt.Errorf("case heavy: %w", err)
					}
					cases = append(cases, EvalCase{Family: "heavy",
						Name:     fmt.Sprintf("tenants=%d rate=%g/8 ranks seed=%d %s", g, rate, seed, s.name),
						Workload: w, Engine: s.engine()})
				}
			}
		}
	}
	return cases, nil
}

// mixTraceSets are the sets of EvalMixedTrace: mixes (kinds at their
// default parameters), the seeds each is generated with, the ranks and the
// time scales each trace is replayed at.
var mixTraceSets = []struct {
	mixes [][]string
	seeds []uint64
	dps   []int
	times []float64
}{
	{mixes: [][]string{
		{KindMultiTenant, KindConversation, KindNoReuse, KindSiblings},
		{KindTenantSpike, KindConversation},
		{KindShared, KindFollowUp},
		{KindColdStart, KindNoReuse},
		{KindMultiTenant, KindSiblings},
		{KindConversation, KindFollowUp, KindNoReuse},
		{KindTenantSpike, KindSiblings, KindNoReuse},
	}, seeds: []uint64{11, 12, 13}, dps: []int{4, 8, 16}, times: []float64{1, 2, 4}},
	{mixes: [][]string{
		{KindShared, KindConversation},
		{KindMultiTenant, KindFollowUp},
		{KindTenantSpike, KindFollowUp},
		{KindColdStart, KindConversation, KindSiblings},
	}, seeds: []uint64{21, 22}, dps: []int{4, 8}, times: []float64{1, 3}},
}

// mixTraceGrid returns the cases of EvalMixedTrace, a family per mix.
func mixTraceGrid() ([]EvalCase, error) {
	var cases []EvalCase
	for _, set := range mixTraceSets {
		for _, kinds := range set.mixes {
			name := strings.Join(kinds, "+")
			for _, seed := range set.seeds {
				recs, err := mixTrace(kinds, seed)
				if err != nil {
					return nil, fmt.Errorf("case mixtrace-%s seed=%d: %w", name, seed, err)
				}
				for _, dp := range set.dps {
					for _, t := range set.times {
						w, _ := DefaultWorkload(KindTrace)
						w.Trace = fmt.Sprintf("%s seed=%d", name, seed)
						w.TraceRecords, w.TraceTimeScale, w.TraceLengthScale = recs, t, 1
						eng := DefaultEngine()
						eng.DPSize = dp
						cases = append(cases, EvalCase{Family: "mixtrace-" + name, Trace: true,
							Name:     fmt.Sprintf("seed=%d time=%g dp%d", seed, t, dp),
							Workload: w, Engine: eng})
					}
				}
			}
		}
	}
	return cases, nil
}

// mixTrace generates each kind at its defaults with seed and returns them
// merged as one trace's records (ToTrace, then ParseTrace).
func mixTrace(kinds []string, seed uint64) ([]TraceRecord, error) {
	var wls []*Workload
	for _, k := range kinds {
		wc, err := DefaultWorkload(k)
		if err != nil {
			return nil, err
		}
		wc.Seed = seed
		wl, err := Generate(wc)
		if err != nil {
			return nil, err
		}
		wls = append(wls, wl)
	}
	var buf bytes.Buffer
	if err := ToTrace(&buf, wls); err != nil {
		return nil, err
	}
	return ParseTrace(&buf)
}

// scaleRate makes a generated workload's arrivals come by times as often,
// over a time that much shorter: the rates (a spike's quiet gap) and the
// durations (a spike's quiet period and spike) scaled, the requests the
// same.
func scaleRate(w *WorkloadConfig, by float64) {
	switch w.Kind {
	case KindColdStart, KindTenantSpike:
		w.QuietS, w.QuietIntervalS, w.SpikeS = w.QuietS/by, w.QuietIntervalS/by, w.SpikeS/by
	default:
		w.Rate, w.DurationS = w.Rate*by, w.DurationS/by
	}
}

// ShiftSeeds returns a copy of cases with by added to every generated case's
// workload seed (and to the "seed=N" in its name); trace cases are
// unchanged. It is the grid on seeds the preset was not tuned on: a cell's
// TTFT p99 turns on a few requests, so a rule is judged on several shifts
// (docs/routing-quality.md), not on seeds 1-3 alone.
func ShiftSeeds(cases []EvalCase, by uint64) []EvalCase {
	out := slices.Clone(cases)
	for i := range out {
		c := &out[i]
		if c.Trace || by == 0 {
			continue
		}
		old := c.Workload.Seed
		c.Workload.Seed += by
		c.Name = strings.Replace(c.Name, fmt.Sprintf("seed=%d ", old), fmt.Sprintf("seed=%d ", c.Workload.Seed), 1)
	}
	return out
}

// StretchDurations returns a copy of cases in which every generated case
// whose arrivals go on for Workload.DurationS (every kind but the coldstart
// and tenantspike spikes, whose quiet period and spike are their shape)
// has them go on by times as long; trace cases are unchanged. An engine
// serves for hours and the grid's steady cases last a minute, so a cost paid
// once, as load starts, weighs more in their TTFT p99 than it would in
// service, and a standing imbalance less. by must be positive and finite.
func StretchDurations(cases []EvalCase, by float64) ([]EvalCase, error) {
	if !(by > 0) || math.IsInf(by, 1) {
		return nil, fmt.Errorf("duration scale %g, want > 0 and finite", by)
	}
	out := slices.Clone(cases)
	stretch := func(w *WorkloadConfig) {
		if w.Kind != KindTrace && w.Kind != KindColdStart && w.Kind != KindTenantSpike {
			w.DurationS *= by
		}
	}
	for i := range out {
		w := &out[i].Workload
		switch {
		case out[i].Trace:
		case w.Kind == KindMix:
			w.Mix = slices.Clone(w.Mix)
			for p := range w.Mix {
				stretch(&w.Mix[p])
			}
		default:
			stretch(w)
		}
	}
	return out, nil
}

// WithIterationTime returns a copy of cases whose engines all take the
// iteration time model of t (EngineConfig.IterBaseMs, PrefillUsPerToken,
// DecodeUsPerSeq), trace cases too. The grid's engines share
// DefaultEngine's model, while an engine serving a larger model, or on
// another GPU, weighs prefill, decoding and an iteration's fixed part
// otherwise: an iteration that computes a cold prompt then stalls the lock
// step for longer or shorter against the same arrivals, and a rule that
// holds on one model need not hold on another. It fails when the model is
// invalid (EngineConfig.Validate).
func WithIterationTime(cases []EvalCase, t EngineConfig) ([]EvalCase, error) {
	out := slices.Clone(cases)
	for i := range out {
		e := &out[i].Engine
		e.IterBaseMs, e.PrefillUsPerToken, e.DecodeUsPerSeq = t.IterBaseMs, t.PrefillUsPerToken, t.DecodeUsPerSeq
		if err := e.Validate(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// WithMaxActive returns a copy of cases whose engines all take n request
// slots per rank (EngineConfig.MaxActive, max_num_active_requests), trace
// cases too. The grid's engines have DefaultEngine's 64, which its spikes
// leave partly free; with fewer slots a spike fills every rank, the
// executor fetches only as many requests as slots have freed, and where
// those slots are, not the router's choice, decides where most requests
// go. It fails when the engine is then invalid (EngineConfig.Validate).
func WithMaxActive(cases []EvalCase, n int) ([]EvalCase, error) {
	out := slices.Clone(cases)
	for i := range out {
		out[i].Engine.MaxActive = n
		if err := out[i].Engine.Validate(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// JitterArrivals returns a copy of cases in which every generated case's
// sessions arrive up to ms milliseconds late, each by its own draw from
// substream draw (WorkloadConfig.JitterMS, JitterSeed); trace cases are
// unchanged. A case's TTFT p99 is often decided by which requests meet in
// one lock-step iteration, and the grid's bursts arrive at one instant:
// draws of a jitter much shorter than an iteration tell a rule that holds
// from one that owes its result to exact arrival times. ms must be >= 0
// and finite (0: the cases as they are).
func JitterArrivals(cases []EvalCase, ms float64, draw uint64) ([]EvalCase, error) {
	if !validJitter(ms) {
		return nil, fmt.Errorf("arrival jitter %g ms, want >= 0 and finite", ms)
	}
	out := slices.Clone(cases)
	for i := range out {
		if !out[i].Trace {
			out[i].Workload.JitterMS, out[i].Workload.JitterSeed = ms, draw
		}
	}
	return out, nil
}

// LoadEvalTraces reads every *.jsonl file of dir in fsys, in name order, as
// a trace of the evaluation; a file's family is its name up to the first
// "-" (conversation-0.jsonl: conversation).
func LoadEvalTraces(fsys fs.FS, dir string) ([]EvalTrace, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var out []EvalTrace
	for _, n := range names {
		f, err := fsys.Open(n)
		if err != nil {
			return nil, err
		}
		recs, err := ParseTrace(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		wc, _ := DefaultWorkload(KindTrace)
		wc.Trace, wc.TraceRecords = path.Base(n), recs
		fam, _, _ := strings.Cut(strings.TrimSuffix(path.Base(n), ".jsonl"), "-")
		out = append(out, EvalTrace{Family: fam, Workload: wc})
	}
	return out, nil
}
