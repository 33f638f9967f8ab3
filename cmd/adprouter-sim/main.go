// Command adprouter-sim compares adprouter's routing policies on simulated
// attention-data-parallel engines: the same seeded workload is run through
// each policy variant and the prefill computed, cache hits, time to first
// token, load and prefill spread and evictions are tabulated side by side.
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
	"bufio"
	"embed"
	"errors"
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

// command holds the command line: the flag set and what it parsed into.
type command struct {
	fs             *flag.FlagSet
	stdout, stderr io.Writer
	set            map[string]bool // the flags given

	eng sim.EngineConfig
	w   sim.WorkloadConfig // the workload flags (copied into each workload when given)

	workloads, policies, reuse, traces, genTrace, svgFile, jsonFile, plotFile *string
	evalBaseline, evalRequests                                                *string
	seeds, dps, evalGrid, evalCase, ranks                                     *string
	sweep, listPolicies, timing, quiet, eval, evalExplain                     *bool
	traceTime, traceLen                                                       *float64
	parallel, evalWorst, evalDraws                                            *int
	seed, evalSeeds, evalJitterSeed, evalShapes                               *uint64
	evalStretch, evalJitter                                                   *float64
	evalTraces, evalTraceScales                                               *string
}

// newCommand defines every flag.
func newCommand(stdout, stderr io.Writer) *command {
	fs := flag.NewFlagSet("adprouter-sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // a parse error is reported by run, with a pointer to -h
	c := &command{fs: fs, stdout: stdout, stderr: stderr, eng: sim.DefaultEngine(), set: map[string]bool{}}
	base, _ := sim.DefaultWorkload(sim.KindShared)
	c.w = base

	c.workloads = fs.String("workload", sim.KindColdStart, "workloads to run, comma-separated, or all (-sweep: default all): "+strings.Join(sim.Kinds, ", ")+"; trace stands for the -trace files; a+b serves workloads a and b together, as one mix")
	c.policies = fs.String("policies", strings.Join(sim.DefaultVariants, ","), "policy variants to compare, comma-separated, or all (see -list-policies); -sweep: variants compared beside the references (default "+strings.Join(sim.SweepVariants, ",")+")")
	c.sweep = fs.Bool("sweep", false, "compare every workload (default all) and reference policy ("+strings.Join(sim.References, ", ")+"), plus -policies, relative to the best reference, under each -reuse semantics (default both)")
	c.reuse = fs.String("reuse", sim.ReuseAfterIteration, "prompt-block reuse semantics of the engine: "+sim.ReuseAfterIteration+" (TensorRT-LLM: from the end of the iteration that computed them) or "+sim.ReuseOnSchedule+" (vLLM-like: as soon as scheduled); -sweep: a comma-separated list or all (default all)")
	c.traces = fs.String("trace", "", "replay the traces in `FILES` (comma-separated; JSONL: timestamp ms, input_length, output_length, hash_ids of 512-token blocks); alone, instead of the default workload")
	c.traceTime = fs.Float64("trace-time-scale", 1, "trace replay: arrival time = timestamp (relative to the first) x this (< 1 compresses)")
	c.traceLen = fs.Float64("trace-length-scale", 1, "trace replay: input and output lengths, and the 512-token block, x this")
	c.genTrace = fs.String("gen-trace", "", "write the -workload workloads (merged, one trace) to `FILE` in the trace format (- for stdout) and exit")
	c.svgFile = fs.String("svg", "", "write an SVG of TTFT percentiles per policy for the spike workloads (coldstart, tenantspike; else every workload) to `FILE`")
	c.listPolicies = fs.Bool("list-policies", false, "list the registered policy variants and exit")
	c.jsonFile = fs.String("json", "", "write the full report as JSON to `FILE` (- for stdout)")
	c.plotFile = fs.String("plot", "", "write an SVG of TTFT over time per policy to `FILE`")
	c.timing = fs.Bool("timing", false, "measure the wall time of each routing call (non-deterministic; off keeps the output byte-identical per seed)")
	c.parallel = fs.Int("parallel", 0, "simulations run at once (0 = GOMAXPROCS); does not change results")
	c.quiet = fs.Bool("q", false, "do not print the table")
	c.seeds = fs.String("seeds", "", "-sweep: a robustness matrix over these workload seeds (comma-separated): prints every cell where a -policies variant misses the goals, and the miss count")
	c.dps = fs.String("dps", "", "-sweep: a robustness matrix over these rank counts (comma-separated), as -seeds")
	c.eval = fs.Bool("eval", false, "judge a variant (-policies, default "+sim.VariantRecommended+") on the evaluation grid against the best reference policy on every case, under each -reuse semantics (default both): prints the families, the worst cells and the verdict; exits 3 when a goal is missed")
	c.evalGrid = fs.String("eval-grid", sim.EvalFull, "-eval: the grid, "+strings.Join(sim.EvalGrids, ", ")+" ("+sim.EvalQuick+": the reduced slice the tests run; "+sim.EvalMixed+": workloads served together, held out of the preset's tuning; "+sim.EvalHeavy+": steady traffic under heavy load, "+sim.EvalMixedTrace+": mixes replayed as traces, and "+sim.EvalRandom+": 150 shapes drawn from a fixed seed, held out too)")
	c.evalCase = fs.String("eval-case", "", "-eval: run only the cases whose family/case name contains this `text` (a cell of the report: \"mix-shared+followup/seed=2 load=0.5 dp4\"); the family goals are not judged")
	c.evalShapes = fs.Uint64("eval-shapes", sim.EvalRandomShapes, "-eval-grid "+sim.EvalRandom+": draw its 150 shapes from this seed (the default is the grid docs/routing-quality.md reports, whose cells the preset's rules were traced on; any other is a grid no rule was checked against)")
	c.evalWorst = fs.Int("eval-worst", 12, "-eval: cells listed per reuse semantics, worst first")
	c.evalSeeds = fs.Uint64("eval-seed-offset", 0, "-eval: add this to every generated case's workload seed (trace slices unchanged): the grid on seeds it was not tuned on")
	c.evalStretch = fs.Float64("eval-duration-scale", 1, "-eval: run every generated steady case's arrivals this many times as long (spikes and trace slices unchanged): one-time costs weigh less, standing imbalances more")
	c.evalJitter = fs.Float64("eval-jitter", 0, "-eval: delay every session of a generated case by a uniform draw from [0, this) ms (trace slices unchanged): a burst arrives over a few ms instead of at one instant, and results owed to exact arrival times are drawn again")
	c.evalJitterSeed = fs.Uint64("eval-jitter-seed", 1, "-eval: which draw of -eval-jitter")
	c.evalBaseline = fs.String("eval-baseline", "", "-eval: compare with the evaluation saved in `FILE` (-eval -json of the same grid and seed offset, judged the same way): the misses before and after, every cell that starts or stops missing, and the -eval-worst cells that moved most otherwise")
	c.evalRequests = fs.String("eval-requests", "", "-eval: write every simulated request to `FILE` (- for stdout, with -q) as JSON Lines, case by case, then by reuse semantics and policy, each simulation's requests by arrival: family, case, reuse, policy, id, conversation, group, rank, arrival_ms, ttft_ms, prompt_tokens, cached_tokens (use with -eval-case: a whole grid writes millions)")
	c.evalExplain = fs.Bool("eval-explain", false, "-eval-requests: add to each request the router's receipt for it (receipt: why it went to its rank, with every rank's score; cmd/adprouter-sim/README.md lists the fields)")
	c.evalTraces = fs.String("eval-traces", "", "-eval: replay the trace slices in `DIR` (its *.jsonl files, each in the family named by its file name up to the first '-') instead of the bundled Mooncake slices")
	c.evalTraceScales = fs.String("eval-trace-scales", formatTraceScales(sim.EvalTraceScales()), "-eval: replay every trace slice at these `time:length` scales (comma-separated; a time scale below 1 replays it faster) on the default engine, the first also on the other engine shapes")
	c.evalDraws = fs.Int("eval-draws", 0, "-eval: judge over this many draws of -eval-jitter (2 ms when not given), from -eval-jitter-seed on: a cell misses when the median of its ratios over the draws does (0: one run)")

	fs.IntVar(&c.eng.DPSize, "dp", c.eng.DPSize, "attention-DP ranks (dp_size)")
	fs.IntVar(&c.eng.KVBlocks, "kv-blocks", c.eng.KVBlocks, "KV pool per rank, in blocks")
	c.ranks = fs.String("ranks", "", "per-rank KV pool sizes in blocks, comma-separated (sets -dp; for heterogeneous ranks)")
	fs.IntVar(&c.eng.TokensPerBlock, "tokens-per-block", c.eng.TokensPerBlock, "KV block size in tokens")
	fs.IntVar(&c.eng.MaxActive, "max-active", c.eng.MaxActive, "max_num_active_requests per rank (-eval: every case's engine)")
	fs.IntVar(&c.eng.MaxNumTokens, "max-num-tokens", c.eng.MaxNumTokens, "token budget per rank and iteration (decodes + prefill chunks)")
	fs.IntVar(&c.eng.RouteLimit, "route-limit", c.eng.RouteLimit, "requests handed to the router per iteration: 0 = free slots (as TensorRT-LLM), N > 0 = at most N, -1 = all waiting")
	fs.Float64Var(&c.eng.IterBaseMs, "iter-base-ms", c.eng.IterBaseMs, "iteration time: fixed part, ms (-eval: with -prefill-us and -decode-us, the model of every case's engine)")
	fs.Float64Var(&c.eng.PrefillUsPerToken, "prefill-us", c.eng.PrefillUsPerToken, "iteration time: µs per prefill token (-eval: see -iter-base-ms)")
	fs.Float64Var(&c.eng.DecodeUsPerSeq, "decode-us", c.eng.DecodeUsPerSeq, "iteration time: µs per decoding request (-eval: see -iter-base-ms)")
	fs.StringVar(&c.eng.ActiveTokens, "active-tokens", c.eng.ActiveTokens, "num_active_tokens each rank reports: \"\" = as TensorRT-LLM for the policy (prompt; KV-aware: uncached prompt), or prompt, uncached, context (prompt + generated)")
	fs.BoolFunc("eager-reuse", "alias of -reuse "+sim.ReuseOnSchedule, func(string) error { return fs.Set("reuse", sim.ReuseOnSchedule) })

	c.seed = fs.Uint64("seed", base.Seed, "workload seed")
	fs.StringVar(&c.w.Arrival, "arrival", base.Arrival, "arrival process: poisson or bursty")
	fs.Float64Var(&c.w.BurstSize, "burst-size", base.BurstSize, "bursty: mean arrivals per burst")
	fs.Float64Var(&c.w.Rate, "rate", base.Rate, "arrivals per second (conversation: new conversations, default 4; siblings: bursts, default 2.5)")
	fs.Float64Var(&c.w.DurationS, "duration", base.DurationS, "seconds of arrivals (not coldstart)")
	fs.IntVar(&c.w.SystemTokens, "system-tokens", base.SystemTokens, "shared system prompt length (coldstart: default 4096; conversation: default 512)")
	fs.IntVar(&c.w.SuffixMin, "suffix-min", base.SuffixMin, "unique suffix / user message length, minimum")
	fs.IntVar(&c.w.SuffixMax, "suffix-max", base.SuffixMax, "unique suffix / user message length, maximum")
	fs.IntVar(&c.w.PromptMin, "prompt-min", base.PromptMin, "noreuse, siblings: prompt length, minimum")
	fs.IntVar(&c.w.PromptMax, "prompt-max", base.PromptMax, "noreuse, siblings: prompt length, maximum")
	fs.IntVar(&c.w.OutputMin, "output-min", base.OutputMin, "output length, minimum")
	fs.IntVar(&c.w.OutputMax, "output-max", base.OutputMax, "output length, maximum")
	fs.IntVar(&c.w.Groups, "groups", base.Groups, "multitenant, tenantspike: number of system prompts (tenantspike: default 4)")
	fs.Float64Var(&c.w.ZipfS, "zipf", base.ZipfS, "multitenant, tenantspike: Zipf exponent of system prompt popularity")
	fs.IntVar(&c.w.TurnsMin, "turns-min", base.TurnsMin, "conversation: turns, minimum")
	fs.IntVar(&c.w.TurnsMax, "turns-max", base.TurnsMax, "conversation: turns, maximum")
	fs.Float64Var(&c.w.ThinkS, "think", base.ThinkS, "conversation, followup: mean think time between turns, s (followup: default 3)")
	fs.Float64Var(&c.w.FollowUpP, "followup-p", base.FollowUpP, "followup: probability that a turn gets an in-flight follow-up")
	fs.Float64Var(&c.w.FollowUpS, "followup-delay", base.FollowUpS, "followup: mean delay of a follow-up after its turn arrived, s")
	fs.IntVar(&c.w.Siblings, "siblings", base.Siblings, "siblings: samples per prompt")
	fs.Float64Var(&c.w.QuietS, "quiet", base.QuietS, "coldstart, tenantspike: quiet period, s")
	fs.Float64Var(&c.w.QuietIntervalS, "quiet-interval", base.QuietIntervalS, "coldstart, tenantspike: gap between quiet requests, s")
	fs.Float64Var(&c.w.SpikeS, "spike", base.SpikeS, "coldstart, tenantspike: spike length, s")
	fs.Float64Var(&c.w.SpikeFactor, "spike-factor", base.SpikeFactor, "coldstart, tenantspike: spike rate / quiet rate")
	fs.IntVar(&c.w.Vocab, "vocab", base.Vocab, "token ids are drawn from [0, vocab)")

	fs.Usage = c.usage
	return c
}

// usage prints the help (-h).
func (c *command) usage() {
	fs := c.fs
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
  a+b+...       the workloads named, served together (each from a seed of its own)

Policy variants (-policies; -policies all runs every one):
`)
	for _, v := range sim.Variants() {
		fmt.Fprintf(fs.Output(), "  %-34s %s\n", v.Name, v.Doc)
	}
	fmt.Fprint(fs.Output(), "\nFlags:\n")
	fs.PrintDefaults()
}

// run is the whole command: it parses args, simulates, writes the table to
// stdout and the requested files, and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	c := newCommand(stdout, stderr)
	if err := c.fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			c.fs.SetOutput(stdout)
			c.fs.Usage()
			return 0
		}
		fmt.Fprintf(stderr, "adprouter-sim: %v\nRun adprouter-sim -h for its flags, workloads and policies.\n", err)
		return 2
	}
	if c.fs.NArg() > 0 {
		fmt.Fprintf(stderr, "adprouter-sim: unexpected arguments %q\n", c.fs.Args())
		return 2
	}
	if *c.listPolicies {
		for _, v := range sim.Variants() {
			fmt.Fprintf(stdout, "%-34s %s\n", v.Name, v.Doc)
		}
		return 0
	}
	c.fs.Visit(func(f *flag.Flag) { c.set[f.Name] = true })
	modes, err := c.engine()
	if err != nil {
		return c.fail(err)
	}
	wcs, err := c.workloadConfigs()
	if err != nil {
		return c.fail(err)
	}
	if err := c.checkModes(); err != nil {
		return c.fail(err)
	}
	switch {
	case *c.genTrace != "":
		return c.writeTrace(wcs)
	case *c.eval:
		scales, err := parseTraceScales(*c.evalTraceScales)
		if err != nil {
			return c.fail(fmt.Errorf("-eval-trace-scales: %w", err))
		}
		shift := evalShifts{*c.evalCase, *c.evalSeeds, *c.evalStretch, *c.evalJitter, *c.evalJitterSeed, *c.evalDraws, nil, nil,
			*c.evalTraces, scales, *c.evalShapes}
		if c.set["iter-base-ms"] || c.set["prefill-us"] || c.set["decode-us"] {
			shift.timing = &c.eng
		}
		if c.set["max-active"] {
			shift.maxActive = &c.eng.MaxActive
		}
		return evaluate(*c.evalGrid, shift, *c.policies, c.set["policies"], modes, c.set["reuse"] || c.set["eager-reuse"],
			*c.evalWorst, *c.parallel, *c.jsonFile, *c.evalBaseline, *c.evalRequests, *c.evalExplain, *c.quiet, stdout, stderr)
	case *c.sweep:
		return c.runSweep(modes, wcs)
	}
	return c.runSimulation(wcs)
}

// checkModes reports the flag combinations run refuses before it
// simulates: trace slices asked of a grid that replays none, and a
// robustness matrix without -sweep. (-gen-trace ignores both.)
func (c *command) checkModes() error {
	switch {
	case *c.genTrace != "":
	case *c.eval:
		if (c.set["eval-traces"] || c.set["eval-trace-scales"]) && slices.Contains(sim.EvalGrids, *c.evalGrid) &&
			*c.evalGrid != sim.EvalFull && *c.evalGrid != sim.EvalQuick {
			return fmt.Errorf("-eval-traces and -eval-trace-scales: grid %s replays no trace slices; the %s and %s grids do", *c.evalGrid, sim.EvalFull, sim.EvalQuick)
		}
		if c.set["eval-shapes"] && *c.evalGrid != sim.EvalRandom {
			return fmt.Errorf("-eval-shapes: grid %s is fixed; only -eval-grid %s draws its shapes", *c.evalGrid, sim.EvalRandom)
		}
	case !*c.sweep && (*c.seeds != "" || *c.dps != ""):
		return errors.New("-seeds and -dps run a robustness matrix and need -sweep")
	}
	return nil
}

func (c *command) fail(err error) int {
	fmt.Fprintf(c.stderr, "adprouter-sim: %v\n", err)
	return 1
}

// engine applies -ranks to the engine and returns the reuse semantics to
// run (the engine takes the first).
func (c *command) engine() ([]string, error) {
	if *c.ranks != "" {
		c.eng.RankBlocks = nil
		for _, f := range strings.Split(*c.ranks, ",") {
			b, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				return nil, fmt.Errorf("-ranks: %v", err)
			}
			c.eng.RankBlocks = append(c.eng.RankBlocks, b)
		}
		if c.set["dp"] && c.eng.DPSize != len(c.eng.RankBlocks) {
			return nil, fmt.Errorf("-dp %d but -ranks lists %d ranks", c.eng.DPSize, len(c.eng.RankBlocks))
		}
		c.eng.DPSize = len(c.eng.RankBlocks)
	}
	modes := strings.Split(*c.reuse, ",")
	if strings.TrimSpace(*c.reuse) == "all" || (*c.sweep && !c.set["reuse"] && !c.set["eager-reuse"]) {
		modes = sim.ReuseModes
	}
	for i := range modes {
		modes[i] = strings.TrimSpace(modes[i])
	}
	if len(modes) > 1 && !*c.sweep && !*c.eval {
		return nil, fmt.Errorf("-reuse %s: one reuse semantics at a time, or -sweep to compare them", *c.reuse)
	}
	c.eng.Reuse = modes[0]
	return modes, nil
}

// workloadConfigs returns the workloads to run: the -workload kinds (all
// for -sweep) and the -trace files, each with the seed and the workload
// flags given.
func (c *command) workloadConfigs() ([]sim.WorkloadConfig, error) {
	list := *c.workloads
	if *c.sweep && !c.set["workload"] {
		list = "all"
	}
	kinds := strings.Split(list, ",")
	if strings.TrimSpace(list) == "all" {
		kinds = sim.Kinds
	}
	var traceWCs []sim.WorkloadConfig
	if *c.traces != "" {
		for _, f := range strings.Split(*c.traces, ",") {
			wc, err := sim.ReadTraceFile(strings.TrimSpace(f))
			if err != nil {
				return nil, err
			}
			wc.TraceTimeScale, wc.TraceLengthScale = *c.traceTime, *c.traceLen
			traceWCs = append(traceWCs, wc)
		}
		if !c.set["workload"] && !*c.sweep {
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
				return nil, fmt.Errorf("workload trace needs -trace FILE")
			}
			for _, wc := range traceWCs {
				wc.Seed = *c.seed
				overrideSet(&wc, &c.w, c.set)
				wcs = append(wcs, wc)
			}
			continue
		}
		var parts []sim.WorkloadConfig
		for _, p := range strings.Split(k, "+") {
			wc, err := sim.DefaultWorkload(strings.TrimSpace(p))
			if err != nil {
				return nil, err
			}
			wc.Seed = *c.seed
			overrideSet(&wc, &c.w, c.set)
			parts = append(parts, wc)
		}
		if len(parts) == 1 {
			wcs = append(wcs, parts[0])
			continue
		}
		mix := sim.MixWorkload(parts...)
		mix.Seed = *c.seed
		wcs = append(wcs, mix)
	}
	return wcs, nil
}

// writeTrace writes the workloads, merged, as one trace (-gen-trace).
func (c *command) writeTrace(wcs []sim.WorkloadConfig) int {
	var wls []*sim.Workload
	for _, wc := range wcs {
		wl, err := sim.Generate(wc)
		if err != nil {
			return c.fail(err)
		}
		wls = append(wls, wl)
	}
	write := func(out io.Writer) error { return sim.ToTrace(out, wls) }
	if err := writeFile(*c.genTrace, c.stdout, write); err != nil {
		return c.fail(err)
	}
	return 0
}

// runSweep runs -sweep: the sweep, or with -seeds or -dps the robustness
// matrix.
func (c *command) runSweep(modes []string, wcs []sim.WorkloadConfig) int {
	list := strings.Join(sim.SweepVariants, ",")
	if c.set["policies"] {
		list = *c.policies
	}
	extra, err := sim.ParseVariants(list)
	if err != nil {
		return c.fail(err)
	}
	if *c.plotFile != "" || *c.timing {
		return c.fail(fmt.Errorf("-sweep writes -json and -svg; -plot and -timing are for single runs"))
	}
	if *c.seeds != "" || *c.dps != "" {
		if *c.jsonFile != "" || *c.svgFile != "" {
			return c.fail(fmt.Errorf("-seeds and -dps print the robustness matrix; -json and -svg are for a single sweep"))
		}
		return matrix(c.eng, modes, wcs, extra, *c.parallel, *c.seed, *c.seeds, *c.dps, c.stdout, c.stderr)
	}
	sw, err := sim.RunSweep(sim.SweepOptions{Engine: c.eng, Reuse: modes, Workloads: wcs, Extra: extra, Parallel: *c.parallel})
	if err != nil {
		return c.fail(err)
	}
	return c.write(sw.WriteTable, sw.WriteJSON, nil, func(out io.Writer) error {
		return sim.WritePercentileSVG(out, sw.Reports())
	})
}

// runSimulation runs the -policies variants on the workloads, once.
func (c *command) runSimulation(wcs []sim.WorkloadConfig) int {
	variants, err := sim.ParseVariants(*c.policies)
	if err != nil {
		return c.fail(err)
	}
	rep, err := sim.Simulate(sim.Options{Engine: c.eng, Workloads: wcs, Variants: variants, Timing: *c.timing,
		Parallel: *c.parallel})
	if err != nil {
		return c.fail(err)
	}
	return c.write(rep.WriteTable, rep.WriteJSON, rep.WriteSVG, func(out io.Writer) error {
		return sim.WritePercentileSVG(out, []*sim.Report{rep})
	})
}

// write writes the table (unless -q) and the -json, -plot and -svg files
// that were asked for; plot may be nil where there is none.
func (c *command) write(table, json, plot, percentiles func(io.Writer) error) int {
	if !*c.quiet {
		if err := table(c.stdout); err != nil {
			return c.fail(err)
		}
	}
	for _, f := range []struct {
		name  string
		write func(io.Writer) error
	}{{*c.jsonFile, json}, {*c.plotFile, plot}, {*c.svgFile, percentiles}} {
		if f.name == "" || f.write == nil {
			continue
		}
		if err := writeFile(f.name, c.stdout, f.write); err != nil {
			return c.fail(err)
		}
	}
	return 0
}

// evalShifts are the -eval flags that select the grid's cases and move
// its generated ones (trace slices unchanged): seeds, durations, arrival
// jitter.
type evalShifts struct {
	// only keeps the cases whose "family/case" contains it ("": all).
	only       string
	seeds      uint64
	stretch    float64
	jitter     float64
	jitterSeed uint64
	// draws > 0 runs that many draws of the jitter, from jitterSeed on,
	// and judges each cell by its median (sim.JudgeDraws).
	draws int
	// timing, when not nil, is the iteration time model every case's
	// engine takes (sim.WithIterationTime).
	timing *sim.EngineConfig
	// maxActive, when not nil, is every case's request slots per rank
	// (sim.WithMaxActive).
	maxActive *int
	// traceDir, when not "", holds the trace slices replayed instead of
	// the bundled ones, and traceScales are the scales they are replayed
	// at (sim.EvalGridScaled).
	traceDir    string
	traceScales []sim.TraceScale
	// shapes seeds the draws of the random grid's shapes (sim.RandomGrid).
	shapes uint64
}

// evaluate runs the evaluation grid, moved by shift, with the variant named
// by policies (default: the recommended preset) and writes it, compared
// with the evaluation in the file baseline when one is named; it returns 3
// when a goal is missed.
func evaluate(grid string, shift evalShifts, policies string, setPolicies bool, modes []string, setReuse bool, worst, parallel int,
	jsonFile, baseline, requestsFile string, explain, quiet bool, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "adprouter-sim: %v\n", err)
		return 1
	}
	if requestsFile == "-" && (!quiet || jsonFile == "-") {
		return fail(errors.New("-eval-requests -: stdout carries the report; add -q and write -json to a file"))
	}
	if requestsFile != "" && shift.draws > 0 {
		return fail(errors.New("-eval-requests records one run; -eval-draws runs several"))
	}
	if explain && requestsFile == "" {
		return fail(errors.New("-eval-explain adds receipts to -eval-requests' lines; give -eval-requests FILE"))
	}
	// The baseline is read first: a bad file fails before the grid runs.
	var base *sim.Judged
	if baseline != "" {
		j, err := readJudged(baseline)
		if err != nil {
			return fail(fmt.Errorf("-eval-baseline %s: %w", baseline, err))
		}
		base = &j
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
	label := grid
	if shift.traceDir != "" {
		if _, err := os.Stat(shift.traceDir); err != nil {
			return fail(fmt.Errorf("-eval-traces: %w", err))
		}
		if traces, err = sim.LoadEvalTraces(os.DirFS(shift.traceDir), "."); err != nil {
			return fail(fmt.Errorf("-eval-traces %s: %w", shift.traceDir, err))
		}
		if len(traces) == 0 {
			return fail(fmt.Errorf("-eval-traces %s: no *.jsonl trace slice in it", shift.traceDir))
		}
		label += fmt.Sprintf(" (trace slices of %s)", shift.traceDir)
	}
	if !slices.Equal(shift.traceScales, sim.EvalTraceScales()) {
		label += fmt.Sprintf(" (trace slices at time:length %s)", formatTraceScales(shift.traceScales))
	}
	var cases []sim.EvalCase
	if grid == sim.EvalRandom && shift.shapes != sim.EvalRandomShapes {
		cases, err = sim.RandomGrid(shift.shapes)
		label += fmt.Sprintf(" (shapes drawn from seed %d)", shift.shapes)
	} else {
		cases, err = sim.EvalGridScaled(grid, traces, shift.traceScales)
	}
	if err != nil {
		return fail(err)
	}
	cellsOnly := sim.CellGoalsOnly(grid)
	if shift.only != "" {
		cases = slices.DeleteFunc(cases, func(c sim.EvalCase) bool { return !strings.Contains(c.Family+"/"+c.Name, shift.only) })
		if len(cases) == 0 {
			return fail(fmt.Errorf("-eval-case %q: no case of grid %s has it in its family/case name", shift.only, grid))
		}
		label += fmt.Sprintf(" (cases matching %q)", shift.only)
		cellsOnly = true
	}
	if shift.seeds > 0 {
		cases = sim.ShiftSeeds(cases, shift.seeds)
		label += fmt.Sprintf(" (seeds +%d)", shift.seeds)
	}
	if shift.stretch != 1 {
		if cases, err = sim.StretchDurations(cases, shift.stretch); err != nil {
			return fail(fmt.Errorf("-eval-duration-scale: %w", err))
		}
		label += fmt.Sprintf(" (steady arrivals x%g)", shift.stretch)
	}
	if t := shift.timing; t != nil {
		if cases, err = sim.WithIterationTime(cases, *t); err != nil {
			return fail(fmt.Errorf("-iter-base-ms, -prefill-us, -decode-us: %w", err))
		}
		label += fmt.Sprintf(" (iterations of %g ms + %g µs per prefill token + %g µs per decoding request)",
			t.IterBaseMs, t.PrefillUsPerToken, t.DecodeUsPerSeq)
	}
	if n := shift.maxActive; n != nil {
		if cases, err = sim.WithMaxActive(cases, *n); err != nil {
			return fail(fmt.Errorf("-max-active: %w", err))
		}
		label += fmt.Sprintf(" (max_active %d per rank)", *n)
	}
	if shift.draws < 0 || shift.draws == 1 {
		return fail(fmt.Errorf("-eval-draws %d, want 0 (one run) or 2 or more", shift.draws))
	}
	if base != nil {
		if err := sim.JudgedAlike(base.Draws, shift.draws); err != nil {
			return fail(fmt.Errorf("-eval-baseline %s: %w", baseline, err))
		}
	}
	// The report: one run's evaluation, or the judgement over draws.
	var text, js func(io.Writer) error
	var pass bool
	var judged sim.Judged
	if shift.draws > 0 {
		d, err := evaluateDraws(label, cases, shift, vs[0], modes, parallel, cellsOnly)
		if err != nil {
			return fail(err)
		}
		text, js, pass = func(w io.Writer) error { return d.WriteDraws(w, worst) }, d.WriteJSON, d.Misses() == 0
		judged = d.Judged()
	} else {
		if shift.jitter != 0 {
			if cases, err = sim.JitterArrivals(cases, shift.jitter, shift.jitterSeed); err != nil {
				return fail(fmt.Errorf("-eval-jitter: %w", err))
			}
			label += fmt.Sprintf(" (arrivals jittered up to %g ms, draw %d)", shift.jitter, shift.jitterSeed)
		}
		o := sim.EvalOptions{Grid: label, Cases: cases, Variant: vs[0], Reuse: modes, Parallel: parallel, CellGoalsOnly: cellsOnly}
		var reqs *requestsOut
		if requestsFile != "" {
			if reqs, err = createRequestsOut(requestsFile, stdout); err != nil {
				return fail(fmt.Errorf("-eval-requests: %w", err))
			}
			o.Requests, o.Explain = reqs.write, explain
		}
		ev, err := sim.RunEval(o)
		if reqs != nil {
			if cerr := reqs.close(); err == nil && cerr != nil {
				err = fmt.Errorf("-eval-requests: %w", cerr)
			}
		}
		if err != nil {
			return fail(err)
		}
		text, js, pass = func(w io.Writer) error { return ev.WriteEval(w, worst) }, ev.WriteJSON, ev.Pass()
		judged = ev.Judged()
	}
	if !quiet {
		if err := text(stdout); err != nil {
			return fail(err)
		}
	}
	if jsonFile != "" {
		if err := writeFile(jsonFile, stdout, js); err != nil {
			return fail(err)
		}
	}
	if base != nil {
		c, err := sim.CompareEvals(*base, judged)
		if err != nil {
			return fail(fmt.Errorf("-eval-baseline %s: %w", baseline, err))
		}
		out := stdout
		if jsonFile == "-" {
			out = stderr // stdout holds the JSON
		}
		if !quiet {
			fmt.Fprintln(out)
		}
		if err := c.Write(out, worst); err != nil {
			return fail(err)
		}
	}
	if !pass {
		return 3
	}
	return 0
}

// evaluateDraws runs the grid's cases once per draw of the arrival jitter
// (shift.jitter, 2 ms when 0; draws shift.jitterSeed onwards) and judges
// every cell by its median over them.
func evaluateDraws(label string, cases []sim.EvalCase, shift evalShifts, v sim.Variant, modes []string, parallel int, cellsOnly bool) (*sim.EvalDraws, error) {
	jitter := shift.jitter
	if jitter == 0 {
		jitter = 2
	}
	var evs []*sim.Evaluation
	for k := range uint64(shift.draws) {
		draw := shift.jitterSeed + k
		jittered, err := sim.JitterArrivals(cases, jitter, draw)
		if err != nil {
			return nil, fmt.Errorf("-eval-jitter: %w", err)
		}
		ev, err := sim.RunEval(sim.EvalOptions{Grid: label + fmt.Sprintf(" (arrivals jittered up to %g ms, draw %d)", jitter, draw),
			Cases: jittered, Variant: v, Reuse: modes, Parallel: parallel, CellGoalsOnly: cellsOnly})
		if err != nil {
			return nil, err
		}
		evs = append(evs, ev)
	}
	d, err := sim.JudgeDraws(evs)
	if err != nil {
		return nil, err
	}
	d.Grid = label
	return d, nil
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

// readJudged reads the evaluation saved in the file name (sim.ReadJudged).
func readJudged(name string) (sim.Judged, error) {
	f, err := os.Open(name)
	if err != nil {
		return sim.Judged{}, err
	}
	defer f.Close()
	return sim.ReadJudged(f)
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

// requestsOut is where -eval-requests writes: a file or stdout, buffered.
type requestsOut struct {
	f *os.File // nil for stdout
	w *bufio.Writer
}

func createRequestsOut(name string, stdout io.Writer) (*requestsOut, error) {
	if name == "-" {
		return &requestsOut{w: bufio.NewWriter(stdout)}, nil
	}
	f, err := os.Create(name)
	if err != nil {
		return nil, err
	}
	return &requestsOut{f: f, w: bufio.NewWriter(f)}, nil
}

func (o *requestsOut) write(r sim.EvalRequests) error { return sim.WriteEvalRequests(o.w, r) }

// close flushes and closes the file; the first error wins.
func (o *requestsOut) close() error {
	err := o.w.Flush()
	if o.f != nil {
		if cerr := o.f.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// parseTraceScales parses -eval-trace-scales: time:length pairs,
// comma-separated (sim.EvalGridScaled judges their values).
func parseTraceScales(v string) ([]sim.TraceScale, error) {
	var out []sim.TraceScale
	for i, f := range strings.Split(v, ",") {
		t, l, ok := strings.Cut(strings.TrimSpace(f), ":")
		ts, err1 := strconv.ParseFloat(t, 64)
		ls, err2 := strconv.ParseFloat(l, 64)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("scale %d %q, want time:length (two numbers, as 0.5:1)", i+1, f)
		}
		out = append(out, sim.TraceScale{Time: ts, Length: ls})
	}
	return out, nil
}

// formatTraceScales writes scales as -eval-trace-scales takes them.
func formatTraceScales(scales []sim.TraceScale) string {
	fs := make([]string, len(scales))
	for i, sc := range scales {
		fs[i] = fmt.Sprintf("%g:%g", sc.Time, sc.Length)
	}
	return strings.Join(fs, ",")
}
