package sim

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
)

// References are the reference policy variants: what TensorRT-LLM offers.
// A sweep measures every configuration against the best of them on each
// workload.
var References = []string{VariantDefault, VariantKVCacheAware, VariantKVWarmup, VariantConversation}

// SweepVariants are the variants a sweep compares beside the References
// unless told otherwise: the recommended preset.
var SweepVariants = []string{VariantRecommended}

// SweepOptions is a sweep: every workload, every reference policy and the
// extra variants, under each reuse semantics.
type SweepOptions struct {
	// Engine is the simulated engine; its Reuse is replaced by each of
	// Reuse in turn.
	Engine EngineConfig
	// Reuse lists the reuse semantics, one table each (nil: ReuseModes).
	Reuse []string
	// Workloads are the workloads compared.
	Workloads []WorkloadConfig
	// Extra are variants compared beside the references (a reference
	// listed here is not repeated).
	Extra []Variant
	// Parallel is how many simulations run at once (0: GOMAXPROCS).
	Parallel int
}

// Sweep is the outcome of RunSweep.
type Sweep struct {
	// Tool names the producer; Version the sweep format.
	Tool    string `json:"tool"`
	Version int    `json:"version"`
	// References are the reference variants, in order.
	References []string `json:"references"`
	// Tables holds one entry per reuse semantics, in the order given.
	Tables []SweepTable `json:"tables"`
}

// SweepTable is every result under one reuse semantics.
type SweepTable struct {
	// Reuse is the reuse semantics (EngineConfig.Reuse) and
	// ReuseDescription says it in words.
	Reuse            string `json:"reuse"`
	ReuseDescription string `json:"reuse_description"`
	// Report holds every result (its Engine has this Reuse).
	Report *Report `json:"report"`
	// Compare holds, per run of Report, every variant relative to the
	// references.
	Compare []Comparison `json:"compare"`
}

// Comparison is one workload's variants relative to the references.
type Comparison struct {
	// Workload names the workload (WorkloadConfig.Name).
	Workload string `json:"workload"`
	// Best is the reference variant with the lowest TTFT p99 (ties: the
	// lower prefill, then the earlier reference); LowestPrefill the one
	// with the lowest prefill tokens (ties: the earlier).
	Best          string `json:"best_reference"`
	LowestPrefill string `json:"lowest_prefill_reference"`
	// Rows holds one entry per variant, in the report's order.
	Rows []ComparisonRow `json:"rows"`
}

// ComparisonRow is one variant relative to the references: prefill tokens
// over Best's and over the lowest reference prefill; TTFT percentiles over
// Best's (ratios of 0 where the denominator is 0).
type ComparisonRow struct {
	Policy          string  `json:"policy"`
	Reference       bool    `json:"reference"`
	PrefillTokens   int64   `json:"prefill_tokens"`
	PrefillVsBest   float64 `json:"prefill_vs_best"`
	PrefillVsLowest float64 `json:"prefill_vs_lowest"`
	TTFTP50         float64 `json:"ttft_p50_ms"`
	P50VsBest       float64 `json:"ttft_p50_vs_best"`
	TTFTP99         float64 `json:"ttft_p99_ms"`
	P99VsBest       float64 `json:"ttft_p99_vs_best"`
}

// Name names the workload in tables: its kind, trace:FILE, or its parts'
// names joined by "+" (a mix).
func (w *WorkloadConfig) Name() string {
	switch w.Kind {
	case KindTrace:
		return KindTrace + ":" + w.Trace
	case KindMix:
		return MixName(w.Mix)
	}
	return w.Kind
}

// RunSweep simulates every workload with the references and the extra
// variants under each reuse semantics and compares them. Like Simulate it
// is deterministic: the same options give the same sweep.
func RunSweep(o SweepOptions) (*Sweep, error) {
	variants, err := ParseVariants(strings.Join(References, ","))
	if err != nil {
		return nil, err
	}
	for _, v := range o.Extra {
		if !slices.ContainsFunc(variants, func(x Variant) bool { return x.Name == v.Name }) {
			variants = append(variants, v)
		}
	}
	modes := o.Reuse
	if len(modes) == 0 {
		modes = ReuseModes
	}
	sw := &Sweep{Tool: "adprouter-sim", Version: 1, References: slices.Clone(References)}
	for _, mode := range modes {
		if slices.ContainsFunc(sw.Tables, func(t SweepTable) bool { return t.Reuse == mode }) {
			return nil, fmt.Errorf("reuse semantics %q listed twice", mode)
		}
		eng := o.Engine
		eng.Reuse = mode
		rep, err := Simulate(Options{Engine: eng, Workloads: o.Workloads, Variants: variants, Parallel: o.Parallel})
		if err != nil {
			return nil, err
		}
		t := SweepTable{Reuse: mode, ReuseDescription: DescribeReuse(mode), Report: rep}
		for i := range rep.Runs {
			c, err := Compare(&rep.Runs[i], References)
			if err != nil {
				return nil, err
			}
			t.Compare = append(t.Compare, c)
		}
		sw.Tables = append(sw.Tables, t)
	}
	return sw, nil
}

// Compare puts every result of run relative to the reference variants refs,
// which must all be in it.
func Compare(run *Run, refs []string) (Comparison, error) {
	c := Comparison{Workload: run.Workload.Name()}
	var best, low *Result
	for _, name := range refs {
		i := slices.IndexFunc(run.Results, func(r *Result) bool { return r.Policy == name })
		if i < 0 {
			return c, fmt.Errorf("workload %s: no result for reference %s", c.Workload, name)
		}
		r := run.Results[i]
		if best == nil || r.TTFT.P99 < best.TTFT.P99 || (r.TTFT.P99 == best.TTFT.P99 && r.PrefillTokens < best.PrefillTokens) {
			best = r
		}
		if low == nil || r.PrefillTokens < low.PrefillTokens {
			low = r
		}
	}
	if best == nil {
		return c, errors.New("no reference variant to compare with")
	}
	c.Best, c.LowestPrefill = best.Policy, low.Policy
	for _, r := range run.Results {
		c.Rows = append(c.Rows, ComparisonRow{
			Policy: r.Policy, Reference: slices.Contains(refs, r.Policy), PrefillTokens: r.PrefillTokens,
			PrefillVsBest: ratio(r.PrefillTokens, best.PrefillTokens), PrefillVsLowest: ratio(r.PrefillTokens, low.PrefillTokens),
			TTFTP50: r.TTFT.P50, P50VsBest: fratio(r.TTFT.P50, best.TTFT.P50),
			TTFTP99: r.TTFT.P99, P99VsBest: fratio(r.TTFT.P99, best.TTFT.P99),
		})
	}
	return c, nil
}

func fratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return round(a/b, 4)
}

// WriteJSON writes the sweep as indented JSON (same options, same bytes).
func (s *Sweep) WriteJSON(w io.Writer) error { return writeJSON(w, s) }

// WriteTable writes the workloads, then per reuse semantics the engine and
// one table of every workload and variant relative to the references, and
// a summary: per variant and workload, prefill over the lowest reference
// prefill and TTFT p99 over the best reference's.
func (s *Sweep) WriteTable(w io.Writer) error {
	var b strings.Builder
	if len(s.Tables) > 0 {
		b.WriteString("workloads:\n")
		for _, run := range s.Tables[0].Report.Runs {
			fmt.Fprintf(&b, "  %s (seed %d, %d requests): %s\n", run.Workload.Name(), run.Workload.Seed, run.Requests, run.Description)
		}
	}
	for _, t := range s.Tables {
		fmt.Fprintf(&b, "\nreuse %s: %s\nengine: %s\n", t.Reuse, t.ReuseDescription, t.Report.Engine.Describe())
		fmt.Fprintf(&b, "(* best reference: the lowest TTFT p99 among %s; min: the lowest reference prefill; TTFT in simulated ms)\n",
			strings.Join(s.References, ", "))
		wl, pol := len("workload"), len("policy")
		for _, c := range t.Compare {
			wl = max(wl, len(c.Workload))
			for _, r := range c.Rows {
				pol = max(pol, len(r.Policy)+2)
			}
		}
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "%-*s\t%-*s\tprefill tok\tvs best\tvs min\tTTFT p50\tvs best\tp99\tvs best\t\n", wl, "workload", pol, "policy")
		for _, c := range t.Compare {
			for i, r := range c.Rows {
				name := c.Workload
				if i > 0 {
					name = ""
				}
				pname := r.Policy
				if r.Policy == c.Best {
					pname += " *"
				}
				fmt.Fprintf(tw, "%-*s\t%-*s\t%d\t%.2fx\t%.2fx\t%.1f\t%.2fx\t%.1f\t%.2fx\t\n", wl, name, pol, pname,
					r.PrefillTokens, r.PrefillVsBest, r.PrefillVsLowest, r.TTFTP50, r.P50VsBest, r.TTFTP99, r.P99VsBest)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(&b, "\nreuse %s, summary: prefill vs min / TTFT p99 vs best\n", t.Reuse)
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		head := fmt.Sprintf("%-*s\t", pol, "policy")
		for _, c := range t.Compare {
			head += c.Workload + "\t"
		}
		fmt.Fprintln(tw, head)
		if len(t.Compare) > 0 {
			for i, r := range t.Compare[0].Rows {
				fmt.Fprintf(tw, "%-*s\t", pol, r.Policy)
				for _, c := range t.Compare {
					x := c.Rows[i]
					fmt.Fprintf(tw, "%.2f / %.2f\t", x.PrefillVsLowest, x.P99VsBest)
				}
				fmt.Fprintln(tw)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Reports returns the sweep's reports, one per reuse semantics.
func (s *Sweep) Reports() []*Report {
	var out []*Report
	for _, t := range s.Tables {
		out = append(out, t.Report)
	}
	return out
}
