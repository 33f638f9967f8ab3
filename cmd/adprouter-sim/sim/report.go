package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"sync"
	"text/tabwriter"
)

// Options is one comparison: every variant on every workload, on one
// engine.
type Options struct {
	// Engine is the simulated engine.
	Engine EngineConfig
	// Workloads are generated once each and shared by every variant.
	Workloads []WorkloadConfig
	// Variants are the router configurations compared.
	Variants []Variant
	// Timing measures the wall time of every routing call (Result.Timing):
	// the only non-deterministic output.
	Timing bool
	// Parallel is how many simulations run at once; 0 means GOMAXPROCS.
	// Results do not depend on it.
	Parallel int
}

// Report is the outcome of Simulate.
type Report struct {
	// Tool names the producer; Version the report format.
	Tool    string `json:"tool"`
	Version int    `json:"version"`
	// Engine is the simulated engine.
	Engine EngineConfig `json:"engine"`
	// Runs holds one entry per workload, in the order given.
	Runs []Run `json:"runs"`
}

// Run is every variant's result on one workload.
type Run struct {
	// Workload is the configuration that generated it; Description says it
	// in words.
	Workload    WorkloadConfig `json:"workload"`
	Description string         `json:"description"`
	// Sessions and Requests count the workload's sessions and turns.
	Sessions int `json:"sessions"`
	Requests int `json:"requests"`
	// Results holds one entry per variant, in the order given.
	Results []*Result `json:"results"`
}

// Simulate runs every variant on every workload. Each simulation is
// independent and deterministic, so they run in parallel and the report is
// the same whatever the scheduling.
func Simulate(opts Options) (*Report, error) {
	if err := opts.Engine.Validate(); err != nil {
		return nil, err
	}
	if len(opts.Workloads) == 0 || len(opts.Variants) == 0 {
		return nil, errors.New("nothing to simulate: no workload or no policy variant")
	}
	rep := &Report{Tool: "adprouter-sim", Version: 1, Engine: opts.Engine}
	wls := make([]*Workload, len(opts.Workloads))
	for i, wc := range opts.Workloads {
		w, err := Generate(wc)
		if err != nil {
			return nil, err
		}
		wls[i] = w
		rep.Runs = append(rep.Runs, Run{Workload: wc, Description: wc.Describe(), Sessions: len(w.Sessions),
			Requests: w.NumRequests(), Results: make([]*Result, len(opts.Variants))})
	}
	type job struct{ w, v int }
	jobs := make(chan job)
	errs := make([]error, len(wls)*len(opts.Variants))
	par := opts.Parallel
	if par <= 0 {
		par = runtime.GOMAXPROCS(0)
	}
	var wg sync.WaitGroup
	for range min(par, len(errs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				s, err := NewSimulator(opts.Engine, wls[j.w], opts.Variants[j.v], opts.Timing)
				if err == nil {
					rep.Runs[j.w].Results[j.v], err = s.Run()
				}
				if err != nil {
					errs[j.w*len(opts.Variants)+j.v] = fmt.Errorf("workload %s: %w", opts.Workloads[j.w].Kind, err)
				}
			}
		}()
	}
	for w := range wls {
		for v := range opts.Variants {
			jobs <- job{w, v}
		}
	}
	close(jobs)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return rep, nil
}

// Describe says in words what the workload is.
func (w *WorkloadConfig) Describe() string {
	arr := "Poisson"
	if w.Arrival == ArrivalBursty {
		arr = fmt.Sprintf("bursty (mean burst %g)", w.BurstSize)
	}
	out := fmt.Sprintf("%d-%d output tokens", w.OutputMin, w.OutputMax)
	sfx := fmt.Sprintf("%d-%d", w.SuffixMin, w.SuffixMax)
	switch w.Kind {
	case KindMix:
		parts := make([]string, len(w.Mix))
		for i := range w.Mix {
			parts[i] = w.Mix[i].Describe()
		}
		return fmt.Sprintf("%d workloads served together: %s", len(parts), strings.Join(parts, "; and "))
	case KindShared:
		return fmt.Sprintf("shared system prompt of %d tokens + %s unique tokens, %g req/s %s for %gs, %s",
			w.SystemTokens, sfx, w.Rate, arr, w.DurationS, out)
	case KindMultiTenant:
		return fmt.Sprintf("%d system prompts of %d tokens, Zipf(%g) popularity, + %s unique tokens, %g req/s %s for %gs, %s",
			w.Groups, w.SystemTokens, w.ZipfS, sfx, w.Rate, arr, w.DurationS, out)
	case KindConversation:
		return fmt.Sprintf("conversations of %d-%d turns (system prompt %d tokens, user messages %s tokens, think time %gs), %g new/s %s for %gs, %s",
			w.TurnsMin, w.TurnsMax, w.SystemTokens, sfx, w.ThinkS, w.Rate, arr, w.DurationS, out)
	case KindNoReuse:
		return fmt.Sprintf("unique prompts of %d-%d tokens, %g req/s %s for %gs, %s",
			w.PromptMin, w.PromptMax, w.Rate, arr, w.DurationS, out)
	case KindSiblings:
		return fmt.Sprintf("bursts of %d samples of one new %d-%d-token prompt, %g bursts/s %s for %gs, %s",
			w.Siblings, w.PromptMin, w.PromptMax, w.Rate, arr, w.DurationS, out)
	case KindColdStart:
		return fmt.Sprintf("cold start: %gs quiet (one request every %gs), then a %gs spike at %gx the rate (%g req/s %s); system prompt %d tokens + %s unique, %s",
			w.QuietS, w.QuietIntervalS, w.SpikeS, w.SpikeFactor, w.SpikeFactor/w.QuietIntervalS, arr, w.SystemTokens, sfx, out)
	case KindFollowUp:
		return fmt.Sprintf("conversations of %d-%d turns over long contexts (system prompt %d tokens, user messages %s tokens, think time %gs), a turn followed with probability %g by an in-flight follow-up %gs (mean) after it arrived, extending its prompt; %g new/s %s for %gs, %s",
			w.TurnsMin, w.TurnsMax, w.SystemTokens, sfx, w.ThinkS, w.FollowUpP, w.FollowUpS, w.Rate, arr, w.DurationS, out)
	case KindTrace:
		lo, hi := math.Inf(1), 0.0
		for _, r := range w.TraceRecords {
			lo, hi = min(lo, r.Timestamp), max(hi, r.Timestamp)
		}
		span := max(hi-lo, 0)
		return fmt.Sprintf("trace %s: %d requests over %.3gs, times x%g, lengths x%g (block %d tokens)",
			w.Trace, len(w.TraceRecords), span/1e3*w.TraceTimeScale, w.TraceTimeScale, w.TraceLengthScale, w.scaleLen(TraceBlockTokens))
	case KindTenantSpike:
		return fmt.Sprintf("multi-tenant cold start: %gs quiet (one request every %gs), then a %gs spike at %gx the rate (%g req/s %s); %d system prompts of %d tokens, Zipf(%g) popularity, + %s unique, %s",
			w.QuietS, w.QuietIntervalS, w.SpikeS, w.SpikeFactor, w.SpikeFactor/w.QuietIntervalS, arr, w.Groups, w.SystemTokens, w.ZipfS, sfx, out)
	}
	return w.Kind
}

// Describe says in words what the engine is.
func (e *EngineConfig) Describe() string {
	pool := fmt.Sprintf("%d blocks", e.KVBlocks)
	if len(e.RankBlocks) > 0 {
		pool = fmt.Sprintf("%v blocks", e.RankBlocks)
	}
	limit := "free slots"
	switch {
	case e.RouteLimit < 0:
		limit = "all waiting"
	case e.RouteLimit > 0:
		limit = fmt.Sprintf("at most %d", e.RouteLimit)
	}
	active := "as TensorRT-LLM"
	if e.ActiveTokens != TokensReference {
		active = e.ActiveTokens
	}
	return fmt.Sprintf("%d ranks x %s x %d tokens, max_active %d, max_num_tokens %d, route %s per iteration, active tokens %s, reuse %s; iteration = %g ms + %g us/prefill token + %g us/decoding request (max over ranks)",
		e.DPSize, pool, e.TokensPerBlock, e.MaxActive, e.MaxNumTokens, limit, active, e.Reuse, e.IterBaseMs, e.PrefillUsPerToken, e.DecodeUsPerSeq)
}

// WriteJSON writes the report as indented JSON. Without timing the bytes
// depend only on the options (same seed, same bytes).
func (r *Report) WriteJSON(w io.Writer) error { return writeJSON(w, r) }

// writeJSON writes v as indented JSON, the one format of every -json file.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// WriteTable writes one aligned table per workload comparing the variants.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "engine: %s\n", r.Engine.Describe())
	for _, run := range r.Runs {
		fmt.Fprintf(&b, "\nworkload %s, seed %d: %s\n%d requests in %d sessions\n",
			run.Workload.Kind, run.Workload.Seed, run.Description, run.Requests, run.Sessions)
		if len(run.Results) > 0 && run.Results[0].Window != nil {
			win := run.Results[0].Window
			fmt.Fprintf(&b, "window [%gs, %gs): %d requests arrived in it\n", win.StartS, win.EndS, win.Requests)
		}
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		hasWin := len(run.Results) > 0 && run.Results[0].Window != nil
		hasTiming := false
		width := len("policy")
		for _, res := range run.Results {
			hasTiming = hasTiming || res.Timing != nil
			width = max(width, len(res.Policy))
		}
		first := run.Results[0]
		fmt.Fprintf(&b, "(vs 1st: prefill relative to %s; TTFT in simulated ms)\n", first.Policy)
		head := fmt.Sprintf("%-*s\tprefill tok\tvs 1st\thit\tTTFT p50\tp90\tp99\tspread\tpf spread\tevicted\tunplaced\trejected\t", width, "policy")
		if hasWin {
			head += "|\twindow prefill\tvs 1st\thit\tTTFT p50\tp99\tpf spread\t"
		}
		if hasTiming {
			head += "|\troute us/call\tns/request\t"
		}
		fmt.Fprintln(tw, head)
		for _, res := range run.Results {
			fmt.Fprintf(tw, "%-*s\t%d\t%s\t%.1f%%\t%.1f\t%.1f\t%.1f\t%.2f\t%.2f\t%d\t%d\t%d\t",
				width, res.Policy, res.PrefillTokens, rel(res.PrefillTokens, first.PrefillTokens), 100*res.CacheHit,
				res.TTFT.P50, res.TTFT.P90, res.TTFT.P99, res.LoadSpread, res.PrefillSpread, res.Evictions, res.Unplaced, res.Rejected)
			if hasWin {
				x := res.Window
				fmt.Fprintf(tw, "|\t%d\t%s\t%.1f%%\t%.1f\t%.1f\t%.2f\t", x.PrefillTokens, rel(x.PrefillTokens, first.Window.PrefillTokens),
					100*x.CacheHit, x.TTFT.P50, x.TTFT.P99, x.PrefillSpread)
			}
			if hasTiming {
				if t := res.Timing; t != nil {
					fmt.Fprintf(tw, "|\t%.2f\t%.0f\t", t.MeanNs/1e3, t.NsPerRequest)
				} else {
					fmt.Fprint(tw, "|\t-\t-\t")
				}
			}
			fmt.Fprintln(tw)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// rel formats a as a multiple of b.
func rel(a, b int64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", float64(a)/float64(b))
}
