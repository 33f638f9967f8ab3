// Command adprouter-sim compares adprouter's routing policies on simulated
// attention-data-parallel engines: the same seeded workload is run through
// each policy variant and the prefill computed, cache hits, time to first
// token, load spread and evictions are tabulated side by side.
//
// Usage:
//
//	adprouter-sim [flags]
//
// With no flags it runs the cold-start scenario (a quiet period, then a
// spike) on 8 ranks with the default, kv_cache_aware, kv_cache_aware+warmup
// and conversation policies, and prints one table. -json writes every number
// as JSON, -plot an SVG of TTFT over time, -svg one of TTFT percentiles,
// -workload all runs every workload, -trace FILE replays a trace in the
// common JSONL format, -gen-trace FILE writes one, -reuse picks the
// engine's block reuse semantics, and -sweep compares every workload and
// reference policy (plus -policies) under both reuse semantics; with -seeds
// and -dps it runs once per seed and rank count and prints the robustness
// matrix: every cell where a variant misses the goals, and the count. Same flags
// and seed, same output, byte for byte (unless -timing adds the measured
// routing time). Run with -help for every flag and default; the model is
// documented in package github.com/adprouter/adprouter/cmd/adprouter-sim/sim.
package main

import (
	"embed"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/adprouter/adprouter/cmd/adprouter-sim/sim"
)

// mooncake holds the slices of Mooncake's public traces the evaluation
// replays (testdata/mooncake/README.md).
//
//go:embed testdata/mooncake/*.jsonl
var mooncake embed.FS

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole command: it parses args, simulates, writes the table to
// stdout and the requested files, and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("adprouter-sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // a parse error is reported below, with a pointer to -h

	eng := sim.DefaultEngine()
	base, _ := sim.DefaultWorkload(sim.KindShared)

	workloads := fs.String("workload", sim.KindColdStart, "workloads to run, comma-separated, or all (-sweep: default all): "+strings.Join(sim.Kinds, ", ")+"; trace stands for the -trace files")
	policies := fs.String("policies", strings.Join(sim.DefaultVariants, ","), "policy variants to compare, comma-separated, or all (see -list-policies); -sweep: variants compared beside the references (default "+strings.Join(sim.SweepVariants, ",")+")")
	sweep := fs.Bool("sweep", false, "compare every workload (default all) and reference policy ("+strings.Join(sim.References, ", ")+"), plus -policies, relative to the best reference, under each -reuse semantics (default both)")
	reuse := fs.String("reuse", sim.ReuseAfterIteration, "prompt-block reuse semantics of the engine: "+sim.ReuseAfterIteration+" (TensorRT-LLM: from the end of the iteration that computed them) or "+sim.ReuseOnSchedule+" (vLLM-like: as soon as scheduled); -sweep: a comma-separated list or all (default all)")
	traces := fs.String("trace", "", "replay the traces in `FILES` (comma-separated; JSONL: timestamp ms, input_length, output_length, hash_ids of 512-token blocks); alone, instead of the default workload")
	traceTime := fs.Float64("trace-time-scale", 1, "trace replay: arrival time = timestamp (relative to the first) x this (< 1 compresses)")
	traceLen := fs.Float64("trace-length-scale", 1, "trace replay: input and output lengths, and the 512-token block, x this")
	genTrace := fs.String("gen-trace", "", "write the -workload workloads (merged, one trace) to `FILE` in the trace format (- for stdout) and exit")
	svgFile := fs.String("svg", "", "write an SVG of TTFT percentiles per policy for the spike workloads (coldstart, tenantspike; else every workload) to `FILE`")
	listPolicies := fs.Bool("list-policies", false, "list the registered policy variants and exit")
	jsonFile := fs.String("json", "", "write the full report as JSON to `FILE` (- for stdout)")
	plotFile := fs.String("plot", "", "write an SVG of TTFT over time per policy to `FILE`")
	timing := fs.Bool("timing", false, "measure the wall time of each routing call (non-deterministic; off keeps the output byte-identical per seed)")
	parallel := fs.Int("parallel", 0, "simulations run at once (0 = GOMAXPROCS); does not change results")
	quiet := fs.Bool("q", false, "do not print the table")
	seeds := fs.String("seeds", "", "-sweep: a robustness matrix over these workload seeds (comma-separated): prints every cell where a -policies variant misses the goals, and the miss count")
	dps := fs.String("dps", "", "-sweep: a robustness matrix over these rank counts (comma-separated), as -seeds")
	eval := fs.Bool("eval", false, "judge a variant (-policies, default "+sim.VariantRecommended+") on the evaluation grid against the best reference policy on every case, under each -reuse semantics (default both): prints the families, the worst cells and the verdict; exits 3 when a goal is missed")
	evalGrid := fs.String("eval-grid", sim.EvalFull, "-eval: the grid, "+strings.Join(sim.EvalGrids, " or ")+" (the reduced slice the tests run)")
	evalWorst := fs.Int("eval-worst", 12, "-eval: cells listed per reuse semantics, worst first")

	fs.IntVar(&eng.DPSize, "dp", eng.DPSize, "attention-DP ranks (dp_size)")
	fs.IntVar(&eng.KVBlocks, "kv-blocks", eng.KVBlocks, "KV pool per rank, in blocks")
	ranks := fs.String("ranks", "", "per-rank KV pool sizes in blocks, comma-separated (sets -dp; for heterogeneous ranks)")
	fs.IntVar(&eng.TokensPerBlock, "tokens-per-block", eng.TokensPerBlock, "KV block size in tokens")
	fs.IntVar(&eng.MaxActive, "max-active", eng.MaxActive, "max_num_active_requests per rank")
	fs.IntVar(&eng.MaxNumTokens, "max-num-tokens", eng.MaxNumTokens, "token budget per rank and iteration (decodes + prefill chunks)")
	fs.IntVar(&eng.RouteLimit, "route-limit", eng.RouteLimit, "requests handed to the router per iteration: 0 = free slots (as TensorRT-LLM), N > 0 = at most N, -1 = all waiting")
	fs.Float64Var(&eng.IterBaseMs, "iter-base-ms", eng.IterBaseMs, "iteration time: fixed part, ms")
	fs.Float64Var(&eng.PrefillUsPerToken, "prefill-us", eng.PrefillUsPerToken, "iteration time: µs per prefill token")
	fs.Float64Var(&eng.DecodeUsPerSeq, "decode-us", eng.DecodeUsPerSeq, "iteration time: µs per decoding request")
	fs.StringVar(&eng.ActiveTokens, "active-tokens", eng.ActiveTokens, "num_active_tokens each rank reports: \"\" = as TensorRT-LLM for the policy (prompt; KV-aware: uncached prompt), or prompt, uncached, context (prompt + generated)")
	fs.BoolFunc("eager-reuse", "alias of -reuse "+sim.ReuseOnSchedule, func(string) error { return fs.Set("reuse", sim.ReuseOnSchedule) })

	w := base
	seed := fs.Uint64("seed", base.Seed, "workload seed")
	fs.StringVar(&w.Arrival, "arrival", base.Arrival, "arrival process: poisson or bursty")
	fs.Float64Var(&w.BurstSize, "burst-size", base.BurstSize, "bursty: mean arrivals per burst")
	fs.Float64Var(&w.Rate, "rate", base.Rate, "arrivals per second (conversation: new conversations, default 4; siblings: bursts, default 2.5)")
	fs.Float64Var(&w.DurationS, "duration", base.DurationS, "seconds of arrivals (not coldstart)")
	fs.IntVar(&w.SystemTokens, "system-tokens", base.SystemTokens, "shared system prompt length (coldstart: default 4096; conversation: default 512)")
	fs.IntVar(&w.SuffixMin, "suffix-min", base.SuffixMin, "unique suffix / user message length, minimum")
	fs.IntVar(&w.SuffixMax, "suffix-max", base.SuffixMax, "unique suffix / user message length, maximum")
	fs.IntVar(&w.PromptMin, "prompt-min", base.PromptMin, "noreuse, siblings: prompt length, minimum")
	fs.IntVar(&w.PromptMax, "prompt-max", base.PromptMax, "noreuse, siblings: prompt length, maximum")
	fs.IntVar(&w.OutputMin, "output-min", base.OutputMin, "output length, minimum")
	fs.IntVar(&w.OutputMax, "output-max", base.OutputMax, "output length, maximum")
	fs.IntVar(&w.Groups, "groups", base.Groups, "multitenant, tenantspike: number of system prompts (tenantspike: default 4)")
	fs.Float64Var(&w.ZipfS, "zipf", base.ZipfS, "multitenant, tenantspike: Zipf exponent of system prompt popularity")
	fs.IntVar(&w.TurnsMin, "turns-min", base.TurnsMin, "conversation: turns, minimum")
	fs.IntVar(&w.TurnsMax, "turns-max", base.TurnsMax, "conversation: turns, maximum")
	fs.Float64Var(&w.ThinkS, "think", base.ThinkS, "conversation, followup: mean think time between turns, s (followup: default 3)")
	fs.Float64Var(&w.FollowUpP, "followup-p", base.FollowUpP, "followup: probability that a turn gets an in-flight follow-up")
	fs.Float64Var(&w.FollowUpS, "followup-delay", base.FollowUpS, "followup: mean delay of a follow-up after its turn arrived, s")
	fs.IntVar(&w.Siblings, "siblings", base.Siblings, "siblings: samples per prompt")
	fs.Float64Var(&w.QuietS, "quiet", base.QuietS, "coldstart, tenantspike: quiet period, s")
	fs.Float64Var(&w.QuietIntervalS, "quiet-interval", base.QuietIntervalS, "coldstart, tenantspike: gap between quiet requests, s")
	fs.Float64Var(&w.SpikeS, "spike", base.SpikeS, "coldstart, tenantspike: spike length, s")
	fs.Float64Var(&w.SpikeFactor, "spike-factor", base.SpikeFactor, "coldstart, tenantspike: spike rate / quiet rate")
	fs.IntVar(&w.Vocab, "vocab", base.Vocab, "token ids are drawn from [0, vocab)")

	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `adprouter-sim: compare ADP routing policies on a simulated engine.

Usage: adprouter-sim [flags]

With no flags: the coldstart workload, 8 ranks, policies `+strings.Join(sim.DefaultVariants, ", ")+`.
Workload flags default as shown for every workload, except where noted; a flag
given on the command line applies to every workload run. Output: an aligned
table on stdout; -json, -plot and -svg files. -sweep compares every workload
and reference policy (and -policies) under both reuse semantics, relative to
the best reference; with -seeds and -dps, once per seed and rank count, as a
robustness matrix of the cells that miss the goals. Without -timing the output depends only on the flags
(same seed, same bytes).

Workloads:
  coldstart     quiet period of sequential requests sharing a system prompt, then a spike
  tenantspike   coldstart with -groups system prompts of Zipf(-zipf) popularity
  shared        one long shared system prompt + short unique suffixes
  multitenant   -groups system prompts with Zipf(-zipf) popularity + unique suffixes
  conversation  multi-turn conversations: growing context, think time, conversation ids
  followup      long-context conversations whose turns may get in-flight follow-ups
  noreuse       unique random prompts
  siblings      bursts of -siblings samples of the same new prompt
  trace         the -trace files, replayed

Policy variants (-policies; -policies all runs every one):
`)
		for _, v := range sim.Variants() {
			fmt.Fprintf(fs.Output(), "  %-34s %s\n", v.Name, v.Doc)
		}
		fmt.Fprint(fs.Output(), "\nFlags:\n")
		fs.PrintDefaults()
	}

	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fs.SetOutput(stdout)
			fs.Usage()
			return 0
		}
		fmt.Fprintf(stderr, "adprouter-sim: %v\nRun adprouter-sim -h for its flags, workloads and policies.\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "adprouter-sim: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *listPolicies {
		for _, v := range sim.Variants() {
			fmt.Fprintf(stdout, "%-34s %s\n", v.Name, v.Doc)
		}
		return 0
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "adprouter-sim: %v\n", err)
		return 1
	}

	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *ranks != "" {
		eng.RankBlocks = nil
		for _, f := range strings.Split(*ranks, ",") {
			b, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return fail(fmt.Errorf("-ranks: %v", err))
			}
			eng.RankBlocks = append(eng.RankBlocks, b)
		}
		if set["dp"] && eng.DPSize != len(eng.RankBlocks) {
			return fail(fmt.Errorf("-dp %d but -ranks lists %d ranks", eng.DPSize, len(eng.RankBlocks)))
		}
		eng.DPSize = len(eng.RankBlocks)
	}

	modes := strings.Split(*reuse, ",")
	if strings.TrimSpace(*reuse) == "all" || (*sweep && !set["reuse"] && !set["eager-reuse"]) {
		modes = sim.ReuseModes
	}
	for i := range modes {
		modes[i] = strings.TrimSpace(modes[i])
	}
	if len(modes) > 1 && !*sweep && !*eval {
		return fail(fmt.Errorf("-reuse %s: one reuse semantics at a time, or -sweep to compare them", *reuse))
	}
	eng.Reuse = modes[0]

	list := *workloads
	if *sweep && !set["workload"] {
		list = "all"
	}
	kinds := strings.Split(list, ",")
	if strings.TrimSpace(list) == "all" {
		kinds = sim.Kinds
	}
	var traceWCs []sim.WorkloadConfig
	if *traces != "" {
		for _, f := range strings.Split(*traces, ",") {
			wc, err := sim.ReadTraceFile(strings.TrimSpace(f))
			if err != nil {
				return fail(err)
			}
			wc.TraceTimeScale, wc.TraceLengthScale = *traceTime, *traceLen
			traceWCs = append(traceWCs, wc)
		}
		if !set["workload"] && !*sweep {
			kinds = nil // a trace alone replaces the default workload
		}
		if !slices.Contains(kinds, sim.KindTrace) {
			kinds = append(kinds, sim.KindTrace)
		}
	}
	var wcs []sim.WorkloadConfig
	for _, k := range kinds {
		k = strings.TrimSpace(k)
		if k == sim.KindTrace {
			if len(traceWCs) == 0 {
				return fail(fmt.Errorf("workload trace needs -trace FILE"))
			}
			for _, wc := range traceWCs {
				wc.Seed = *seed
				overrideSet(&wc, &w, set)
				wcs = append(wcs, wc)
			}
			continue
		}
		wc, err := sim.DefaultWorkload(k)
		if err != nil {
			return fail(err)
		}
		wc.Seed = *seed
		overrideSet(&wc, &w, set)
		wcs = append(wcs, wc)
	}
	if *genTrace != "" {
		var wls []*sim.Workload
		for _, wc := range wcs {
			wl, err := sim.Generate(wc)
			if err != nil {
				return fail(err)
			}
			wls = append(wls, wl)
		}
		write := func(out io.Writer) error { return sim.ToTrace(out, wls) }
		if err := writeFile(*genTrace, stdout, write); err != nil {
			return fail(err)
		}
		return 0
	}
	if *eval {
		return evaluate(*evalGrid, *policies, set["policies"], modes, set["reuse"] || set["eager-reuse"], *evalWorst, *parallel, *jsonFile, *quiet, stdout, stderr)
	}
	if !*sweep && (*seeds != "" || *dps != "") {
		return fail(fmt.Errorf("-seeds and -dps run a robustness matrix and need -sweep"))
	}
	if *sweep {
		list := strings.Join(sim.SweepVariants, ",")
		if set["policies"] {
			list = *policies
		}
		extra, err := sim.ParseVariants(list)
		if err != nil {
			return fail(err)
		}
		if *plotFile != "" || *timing {
			return fail(fmt.Errorf("-sweep writes -json and -svg; -plot and -timing are for single runs"))
		}
		if *seeds != "" || *dps != "" {
			if *jsonFile != "" || *svgFile != "" {
				return fail(fmt.Errorf("-seeds and -dps print the robustness matrix; -json and -svg are for a single sweep"))
			}
			return matrix(eng, modes, wcs, extra, *parallel, *seed, *seeds, *dps, stdout, stderr)
		}
		sw, err := sim.RunSweep(sim.SweepOptions{Engine: eng, Reuse: modes, Workloads: wcs, Extra: extra, Parallel: *parallel})
		if err != nil {
			return fail(err)
		}
		if !*quiet {
			if err := sw.WriteTable(stdout); err != nil {
				return fail(err)
			}
		}
		if *jsonFile != "" {
			if err := writeFile(*jsonFile, stdout, sw.WriteJSON); err != nil {
				return fail(err)
			}
		}
		if *svgFile != "" {
			write := func(out io.Writer) error { return sim.WritePercentileSVG(out, sw.Reports()) }
			if err := writeFile(*svgFile, stdout, write); err != nil {
				return fail(err)
			}
		}
		return 0
	}
	variants, err := sim.ParseVariants(*policies)
	if err != nil {
		return fail(err)
	}
	rep, err := sim.Simulate(sim.Options{Engine: eng, Workloads: wcs, Variants: variants, Timing: *timing, Parallel: *parallel})
	if err != nil {
		return fail(err)
	}
	if !*quiet {
		if err := rep.WriteTable(stdout); err != nil {
			return fail(err)
		}
	}
	if *jsonFile != "" {
		if err := writeFile(*jsonFile, stdout, rep.WriteJSON); err != nil {
			return fail(err)
		}
	}
	if *plotFile != "" {
		if err := writeFile(*plotFile, stdout, rep.WriteSVG); err != nil {
			return fail(err)
		}
	}
	if *svgFile != "" {
		write := func(out io.Writer) error { return sim.WritePercentileSVG(out, []*sim.Report{rep}) }
		if err := writeFile(*svgFile, stdout, write); err != nil {
			return fail(err)
		}
	}
	return 0
}

// evaluate runs the evaluation grid with the variant named by policies
// (default: the recommended preset) and writes it; it returns 3 when a goal
// is missed.
func evaluate(grid, policies string, setPolicies bool, modes []string, setReuse bool, worst, parallel int,
	jsonFile string, quiet bool, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "adprouter-sim: %v\n", err)
		return 1
	}
	name := sim.VariantRecommended
	if setPolicies {
		name = policies
	}
	vs, err := sim.ParseVariants(name)
	if err != nil {
		return fail(err)
	}
	if len(vs) != 1 {
		return fail(fmt.Errorf("-eval judges one variant, -policies lists %d", len(vs)))
	}
	if !setReuse {
		modes = sim.ReuseModes
	}
	traces, err := sim.LoadEvalTraces(mooncake, "testdata/mooncake")
	if err != nil {
		return fail(err)
	}
	cases, err := sim.EvalGrid(grid, traces)
	if err != nil {
		return fail(err)
	}
	ev, err := sim.RunEval(sim.EvalOptions{Grid: grid, Cases: cases, Variant: vs[0], Reuse: modes, Parallel: parallel})
	if err != nil {
		return fail(err)
	}
	if !quiet {
		if err := ev.WriteEval(stdout, worst); err != nil {
			return fail(err)
		}
	}
	if jsonFile != "" {
		if err := writeFile(jsonFile, stdout, ev.WriteJSON); err != nil {
			return fail(err)
		}
	}
	if !ev.Pass() {
		return 3
	}
	return 0
}

// matrix runs the sweep once per seed in seedList (default: seed) and rank
// count in dpList (default: eng's) and writes the robustness matrix.
func matrix(eng sim.EngineConfig, modes []string, wcs []sim.WorkloadConfig, extra []sim.Variant, parallel int,
	seed uint64, seedList, dpList string, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "adprouter-sim: %v\n", err)
		return 1
	}
	seedsV, dpsV := []uint64{seed}, []int{eng.DPSize}
	if seedList != "" {
		seedsV = nil
		for _, f := range strings.Split(seedList, ",") {
			v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if err != nil {
				return fail(fmt.Errorf("-seeds: %v", err))
			}
			seedsV = append(seedsV, v)
		}
	}
	if dpList != "" {
		if eng.RankBlocks != nil {
			return fail(fmt.Errorf("-dps and -ranks: give one"))
		}
		dpsV = nil
		for _, f := range strings.Split(dpList, ",") {
			v, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return fail(fmt.Errorf("-dps: %v", err))
			}
			dpsV = append(dpsV, v)
		}
	}
	var cells []sim.Cell
	for _, s := range seedsV {
		for _, dp := range dpsV {
			e := eng
			e.DPSize = dp
			ws := slices.Clone(wcs)
			for i := range ws {
				ws[i].Seed = s
			}
			sw, err := sim.RunSweep(sim.SweepOptions{Engine: e, Reuse: modes, Workloads: ws, Extra: extra, Parallel: parallel})
			if err != nil {
				return fail(fmt.Errorf("seed %d, dp %d: %v", s, dp, err))
			}
			cells = append(cells, sw.Cells(s, dp)...)
		}
	}
	if err := sim.WriteMatrix(stdout, cells); err != nil {
		return fail(err)
	}
	return 0
}

// overrideSet copies into dst the workload fields whose flags were given.
func overrideSet(dst, src *sim.WorkloadConfig, set map[string]bool) {
	for name, apply := range map[string]func(){
		"arrival":        func() { dst.Arrival = src.Arrival },
		"burst-size":     func() { dst.BurstSize = src.BurstSize },
		"rate":           func() { dst.Rate = src.Rate },
		"duration":       func() { dst.DurationS = src.DurationS },
		"system-tokens":  func() { dst.SystemTokens = src.SystemTokens },
		"suffix-min":     func() { dst.SuffixMin = src.SuffixMin },
		"suffix-max":     func() { dst.SuffixMax = src.SuffixMax },
		"prompt-min":     func() { dst.PromptMin = src.PromptMin },
		"prompt-max":     func() { dst.PromptMax = src.PromptMax },
		"output-min":     func() { dst.OutputMin = src.OutputMin },
		"output-max":     func() { dst.OutputMax = src.OutputMax },
		"groups":         func() { dst.Groups = src.Groups },
		"zipf":           func() { dst.ZipfS = src.ZipfS },
		"turns-min":      func() { dst.TurnsMin = src.TurnsMin },
		"turns-max":      func() { dst.TurnsMax = src.TurnsMax },
		"think":          func() { dst.ThinkS = src.ThinkS },
		"followup-p":     func() { dst.FollowUpP = src.FollowUpP },
		"followup-delay": func() { dst.FollowUpS = src.FollowUpS },
		"siblings":       func() { dst.Siblings = src.Siblings },
		"quiet":          func() { dst.QuietS = src.QuietS },
		"quiet-interval": func() { dst.QuietIntervalS = src.QuietIntervalS },
		"spike":          func() { dst.SpikeS = src.SpikeS },
		"spike-factor":   func() { dst.SpikeFactor = src.SpikeFactor },
		"vocab":          func() { dst.Vocab = src.Vocab },
	} {
		if set[name] {
			apply() // each assignment touches its own field: order is irrelevant
		}
	}
}

// writeFile writes through write to name, or to stdout when name is "-".
func writeFile(name string, stdout io.Writer, write func(io.Writer) error) error {
	if name == "-" {
		return write(stdout)
	}
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
