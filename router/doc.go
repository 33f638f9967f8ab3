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
// length, and its queries are linear in a request's blocks plus ranks.
// Reproducing the Python tie-break requires seeding MT19937 with the request
// id (a chain of about 1,250 dependent multiplies). Only requests whose best
// score is actually tied need it, and those are seeded four at a time on
// interleaved chains, generating just the outputs a shuffle of the eligible
// ranks consumes instead of twisting the whole 624-word state.
//
// Measured with go test ./router/ -run '^$' -bench . -benchtime 1000x on the
// project's shared 2-core machine (ns/op of one decision, 2k-token prompts,
// 0 allocs/op in every case once a Result is reused through RouteInto):
//
//	requests x ranks          64x8    64x16   64x64   256x8   256x16   256x64
//	kv_cache_aware, matches   13,700  15,900  35,200  60,700  92,800  125,600
//	kv_cache_aware, none      21,400  23,500  26,700  81,200  73,400  135,300
//	default                    2,400   2,200  13,500  11,300  16,600   43,000
//	conversation               3,000   4,700   3,300  16,500  16,000   19,900
//
// The worst case, every request tied (idle ranks, identical prompts), is
// 294,000 ns for 256x16 (BenchmarkRouteTies); seeding costs ~750 ns per
// request four at a time (BenchmarkSeed4), against ~11 µs in CPython.
package router
