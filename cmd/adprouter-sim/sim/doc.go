// Package sim is a deterministic, GPU-free simulator of one
// attention-data-parallel (ADP) engine, used to compare adprouter's routing
// policies on the same workload: how much prefill each computes, how often
// it finds prompts cached, the time to first token (TTFT) it yields, how
// evenly it loads the ranks, and how fast it decides.
//
// # The engine model
//
// The engine has DPSize ranks. Each rank has a KV pool of a fixed number of
// blocks of TokensPerBlock tokens (a Cache): cached blocks are keyed by the
// chained hash of a full block of tokens (AppendBlockHashes) and reference
// counted; unreferenced blocks stay cached until evicted, least recently
// released first and, among blocks released together, deepest first (a
// request's blocks go tail first). Referenced blocks are never evicted and
// the pool is never over-committed.
//
// The engine advances in iterations. Each iteration:
//
//  1. Requests whose arrival time has come join the engine's waiting queue
//     (first come, first served).
//  2. The head of the queue is handed to the router under test, through
//     router.Router.RouteInto, exactly as an executor would, every
//     iteration (with no request when none waits, as TensorRT-LLM's
//     executor routes every iteration under attention DP): one gathered
//     router.RankState per rank (num_active_requests = requests routed to
//     the rank and not finished; num_active_tokens as TensorRT-LLM's
//     executor computes it for the policy: their prompt tokens for the
//     default and conversation policies, their prompt tokens not found
//     cached for the KV-aware one, see EngineConfig.ActiveTokens; the KV
//     pool's capacity and free tokens, free counting evictable blocks) and,
//     for the KV-aware policy, the match lengths each
//     rank probes in its own cache (the prompt minus its last token, whole
//     blocks only). By default as many requests are handed over as there
//     are free request slots, DPSize*MaxActive - sum(active), as
//     TensorRT-LLM's executor fetches (EngineConfig.RouteLimit changes
//     that). Placed requests join their rank's queue in the order the router
//     lists them (Result.Assignment); unassigned ones go back to the front
//     of the waiting queue, counted in Result.Unplaced.
//  3. Each rank schedules like TensorRT-LLM's GUARANTEED_NO_EVICT capacity
//     scheduler with chunked prefill: every decoding request generates one
//     token; the rest of the MaxNumTokens budget goes to prefill chunks of
//     started requests, then to queued requests in order. A queued request
//     starts only when its whole sequence (prompt + output) fits in the pool
//     beside what is referenced, its cached prefix reused (looked up when it
//     starts) and unreferenced blocks evicted as needed; otherwise it and
//     the requests behind it wait on that rank. Nothing is ever preempted. A
//     request bigger than its rank's whole pool is rejected (counted in
//     Result.Rejected). Prefill computes only the uncached tokens.
//  4. Each rank's iteration takes IterBaseMs + PrefillUsPerToken * prefill
//     tokens + DecodeUsPerSeq * decoding requests; ADP ranks step in
//     lockstep, so the engine's iteration takes the slowest rank's time
//     (idle ranks run dummy requests in IterBaseMs).
//  5. Time advances. Computed prompt blocks enter the cache, usable by
//     requests that start later (EngineConfig.Reuse: ReuseAfterIteration,
//     TensorRT-LLM's semantics and the default; with ReuseOnSchedule, the
//     vLLM-like semantics, a block is cached as soon as the chunk that
//     computes it is scheduled, so requests that start later in the same
//     iteration on the same rank reuse it already). A request whose
//     prefill completed emits its first token (its TTFT is measured from
//     its arrival), then one token per iteration; after Output tokens it
//     finishes, the full blocks of its answer are cached too, and its
//     blocks are released. A conversation's next turn arrives a think time
//     later; an in-flight follow-up arrives a delay after the turn it
//     follows arrived, answered or not.
//
// When nothing is running or waiting, time jumps to the next arrival.
//
// # Workloads
//
// Generate builds a Workload from a WorkloadConfig (DefaultWorkload gives
// each kind's defaults). Token ids are int32 in [0, Vocab); request ids are
// unique uint64s, fixed by the workload and so the same for every policy.
// Arrivals are Poisson, or bursty (Poisson bursts of a geometric number of
// simultaneous arrivals, same mean rate).
//
//	kind          what arrives                                    defaults
//	coldstart     QuietS of one request every QuietIntervalS,      60 s, 3 s, then 10 s at 150x
//	              then SpikeS at SpikeFactor times that rate;      (50 req/s); 4096-token system
//	              all share one system prompt + unique suffix      prompt + 32-256 tokens
//	tenantspike   coldstart with Groups system prompts of          as coldstart, 4 system prompts,
//	              Zipf(ZipfS) popularity (multi-tenant spike)      s = 1.1
//	shared        one system prompt + unique suffix                2048 + 32-256 tokens, 20 req/s, 60 s
//	multitenant   Groups system prompts, Zipf(ZipfS) popularity    16 x 2048, s = 1.1, 20 req/s, 60 s
//	conversation  conversations of TurnsMin-TurnsMax turns; each   2-8 turns, 512-token system prompt,
//	              turn = previous prompt + answer + a new user     32-256-token messages, think 5 s,
//	              message, after an exponential think time         4 new conversations/s, 60 s
//	followup      conversations whose turns may get an in-flight   2-6 turns, 1024-token system prompt,
//	              follow-up (FollowUpP): FollowUpS after the turn  256-2048-token messages, think 3 s,
//	              arrived, its whole prompt + a new message        p 0.5, delay 50 ms, 2 new/s, 60 s
//	noreuse       unique random prompts                            256-2048 tokens, 20 req/s, 60 s
//	siblings      Siblings samples of one new prompt, together     8 x 256-2048 tokens, 2.5 bursts/s, 60 s
//
// Every kind draws output lengths in OutputMin-OutputMax (32-256). The
// coldstart and tenantspike spike is the workload's Window, whose requests
// are also reported apart (Result.Window).
//
// # Traces
//
// KindTrace replays a trace in the common JSONL format (ParseTrace,
// ReadTraceFile): one request per line with its arrival time in ms, input
// and output lengths, and the hash ids of its 512-token prompt blocks,
// prefix-chained. Hash id h becomes the same tokens (drawn from h and the
// seed) wherever it appears, so shared leading ids are shared token
// prefixes; lengths and the block size scale by TraceLengthScale, times by
// TraceTimeScale. ToTrace writes generated workloads in that format, the
// generator of test traces.
//
// # Mixes
//
// KindMix (MixWorkload) serves several workloads together on one engine, as
// traffic of many kinds reaches one server: every part is generated from a
// seed of its own (drawn from the mix's seed and the part's index), its
// conversation ids and prompt groups renamed apart from the other parts',
// and the sessions merged in order of arrival. Unlike a trace written by
// ToTrace, a mix keeps its conversations: their ids reach the router and a
// later turn arrives a think time after the previous answer.
//
// # Sweeps
//
// RunSweep runs every workload with the References (default,
// kv_cache_aware, kv_cache_aware+warmup, conversation) and extra variants
// (the command's default: SweepVariants)
// under each reuse semantics, and compares every variant with the best
// reference on each workload (Compare): the one with the lowest TTFT p99.
// WritePercentileSVG plots the TTFT percentiles of the spike workloads.
//
// # Evaluation
//
// RunEval judges one variant (the recommended preset) on a grid of cases
// (EvalGrid: EvalFull, EvalQuick for the tests, EvalMixed, mixes held
// out of the preset's tuning, EvalHeavy, steady traffic under heavy
// load, or EvalMixedTrace, mixes replayed as traces, held out too):
// workload families ×
// parameters × seeds × engine shapes, Mooncake trace slices among them
// (LoadEvalTraces), each simulated with the References and the variant under
// both reuse semantics. Each cell is the variant relative to the best
// reference there (EvalCell); the goals are matrix.go's: prefill at most
// GoalPrefill and TTFT p99 at most GoalP99 times the best reference's on
// every cell, and a p99 geometric mean at most GoalWin on EvalWinFamilies
// families per semantics, a trace family among them. WriteEval prints the
// families, the worst cells and the verdict. Simulator.Observe reports every
// request's rank and first token, to trace a cell's decisions (with
// Simulator.Explain, the router's receipt for each: Decision), and
// EvalOptions.Requests passes on an evaluation's (EvalOptions.Explain adds
// the receipts; WriteEvalRequests writes them as JSON Lines).
//
// # Policies
//
// A Variant names a router configuration: a policy and a mutation of the
// reference defaults. The builtin variants are default, kv_cache_aware,
// kv_cache_aware+warmup, conversation and conversation+least_queued, and
// kv_cache_aware with the options beyond the reference (+capacity, +index,
// +probe+index, +demand, +probe+index+demand), and recommended (the
// router's preset, which sweeps compare by default: SweepVariants, and the
// evaluation judges), recommended+no_kv_report (the preset on ranks that
// report no KV pool), recommended+full_kv_report (the preset on ranks
// that also report what their queued requests will reserve and their
// evictable KV, for requests that give their output) and
// recommended+pending_kv_report (the same without the evictable KV, as
// adprouter.trtllm reports); Register adds more (one line per option). A
// variant can also withhold the probed match lengths (NoProbe) or the KV
// pools (NoKVReport), report all the KV state the Go API takes
// (FullKVReport) or all but the evictable KV (PendingKVReport) or more rank
// state (Gather), or tell the router the engine's reuse semantics
// (KnowsReuse).
//
// # Determinism
//
// All randomness comes from seeded PCG streams (never the global source or
// the clock), maps are never iterated, and each simulation is sequential,
// so a Report without timing is a pure function of its Options: the same
// seed gives the same JSON, table and SVG, byte for byte, however many
// simulations run in parallel. The only measured quantity, the wall time of
// each routing call, is kept out unless Options.Timing is set.
//
// # Assumptions and limits
//
//   - Time is simulated, from the linear iteration model above: it captures
//     that prefill dominates long prompts and that an ADP engine waits for
//     its slowest rank, not kernel-level effects (attention cost growing
//     with context, MoE communication, CUDA graphs).
//   - Dummy requests padding idle ranks up to Result.Expected cost nothing.
//   - Only whole blocks are reused (no partial-block reuse), and a request
//     always computes at least its last prompt token.
//   - A request reserves KV for its whole output up front (no eviction or
//     preemption), as GUARANTEED_NO_EVICT does; engines that over-commit
//     and preempt instead would show more evictions under pressure.
//   - Hash collisions are ignored (64-bit chained hashes).
//   - No tokenizer: prompts are random ids, so two unrelated prompts share
//     no prefix.
package sim
