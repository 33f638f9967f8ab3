// Package router is the deterministic core of adprouter: it decides, for one
// iteration of an attention-data-parallel (ADP) LLM engine, which rank takes
// each new request.
//
// # Policies
//
// Three policies reproduce TensorRT-LLM's ADP routers decision for decision
// (the contract, with worked examples, is docs/ROUTING.md; its examples and
// vectors run as the fixtures in testdata/routing):
//
//   - PolicyDefault: requests with a target rank go there while it has room;
//     the rest, largest prompt first, go to the open rank with the fewest
//     active tokens (then requests, then lowest index), each rank open until
//     it reaches the per-rank soft cap expected_num_active_requests.
//   - PolicyKVCacheAware: targets and the optional cold-start warmup (the
//     first untargeted requests go to each rank once, smallest rank first)
//     come first; the rest are grouped by their first 64 tokens and each goes
//     to the eligible rank with the lowest score
//     (n - match) + β · (rank tokens / eligible tokens · n), where match counts
//     only when the best match exceeds match_rate_threshold of the prompt.
//     Full ties are broken exactly like CPython's
//     random.Random(request_id).shuffle of the eligible ranks.
//   - PolicyConversation: every turn of a conversation returns to the rank of
//     its first turn while that rank is under the hard cap; new conversations
//     go round-robin or to the least queued rank; the conversation map is an
//     LRU bounded by max_sessions.
//
// Where the reference drops or crashes on a request that fits nowhere,
// Route reports it in Result.Unassigned; invalid arguments are rejected
// before any state changes.
//
// # Receipts
//
// With Config.Explain set, a Router explains its last decision: Receipts
// returns a Receipt per request with the reason (explicit target, warmup,
// scored, least loaded, conversation bound or new, unplaced), the soft cap,
// the cache-affinity gate, every rank's match, load and score as the
// decision computed them, and a tie with the shuffle that broke it.
// Recording only reads the decision's state: decisions are identical with
// and without it.
//
// # Determinism
//
// Every rank of an ADP engine runs Route on the same allgathered states and
// the same batch, keeps its own slice, and broadcasts nothing; a single
// disagreement loses or duplicates a request and deadlocks the collectives. So
// a Router is a pure state machine: its output depends only on its Config,
// the calls it has seen and their arguments. It never reads a clock, iterates
// a map, starts a goroutine or measures anything locally; floating-point
// scores are evaluated in the reference's order with fused multiply-adds
// forbidden. Local measurements (GPU memory, the engine's free blocks) may
// enter only through the local RankState, which the executor allgathers.
//
// # Cost
//
// A decision is linear in requests × ranks. With the reference's probe
// source it reads at most 64 tokens per request, so its allocations and time
// do not grow with prompt length; the prefix index (PrefixSource index or
// probe+index, or WarmupDemand) hashes each prompt once, linear in its
// length, and its queries are linear in ranks plus the holders of the
// request's matched blocks. StateDigest is O(1).
//
// Memory is bounded by the configuration, not by the inputs: O(DPSize)
// per-rank state with DPSize <= MaxDPSize, the conversation map by
// MaxSessions bindings of at most MaxConversationIDBytes each, and the
// prefix index by IndexMaxBytes whatever DPSize.
//
// Reproducing the Python tie-break requires seeding MT19937 with the request
// id (a chain of about 1,250 dependent multiplies). Only requests whose best
// score is actually tied need it, and those are seeded many at a time (up
// to 96 as 8-lane AVX2 vectors on amd64, four interleaved chains elsewhere
// and with -tags purego), generating just the outputs a shuffle of the
// eligible ranks consumes instead of twisting the whole 624-word state.
//
// Grouping by prefix hashes each request's first 64 tokens once and sorts
// only the distinct prefixes, so it is linear in requests for realistic
// batches. BenchmarkRoute, BenchmarkRouteScaling, BenchmarkRouteShape and
// BenchmarkRouteTies measure a decision on batches shaped like an engine's
// (varied prompt lengths, shared system prompts, dense match tables);
// docs/performance.md keeps the figures and the commands. Up to
// 64 ranks a decision makes 0 allocations once a Result is reused through
// RouteInto; beyond 227 eligible ranks a tied request's shuffle outgrows
// the precomputed outputs and allocates a full generator.
package router
