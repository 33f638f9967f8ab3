/*
 * adprouter.h - KV-cache-aware request routing for attention-data-parallel
 * (ADP) LLM engines, as a C library (libadprouter.so).
 *
 * Copyright 2026 The adprouter Authors. SPDX-License-Identifier: Apache-2.0
 *
 * Every rank of an ADP engine loads this library, builds one router from the
 * same options, allgathers its rank state, and routes each iteration's new
 * requests locally with adpr_route. Routing is a pure function of the gathered
 * inputs and of router state that evolves identically on every rank, so all
 * ranks reach the same decision without broadcasting it. The decisions equal
 * TensorRT-LLM's ADP routers (DefaultADPRouter, KVCacheAwareADPRouter and the
 * conversation-affinity router) request by request, except that a request that
 * fits nowhere is reported as unassigned instead of being lost.
 *
 * Conventions
 *  - Every function that can fail returns an adpr_status; ADPR_OK is 0.
 *    adpr_strerror turns a status into static text. Functions that take
 *    (char *err, size_t err_len) also write a NUL-terminated message saying
 *    exactly what was wrong into that caller-owned buffer (err may be NULL
 *    when err_len is 0). A message, like adpr_size_kv's reason, is at most
 *    ADPR_MESSAGE_MAX bytes with its NUL: a smaller buffer gets it
 *    truncated. There is no global "last error".
 *  - A call that fails changes nothing: not the router, not the outputs
 *    beyond the error message (and the totals of ADPR_ERR_SHORT_BUFFER).
 *  - Memory: the library never keeps a pointer the caller passed after the
 *    call returns, and never hands out pointers to its own memory except the
 *    static strings of adpr_version and adpr_strerror. Nothing needs freeing.
 *  - Routers are integer handles (0 is never valid). A destroyed, stale or
 *    forged handle returns ADPR_ERR_INVALID_HANDLE; it never crashes.
 *  - Thread safety: any function may be called from any thread. Calls on
 *    different routers run in parallel; calls on one router are serialised.
 *  - Units: token counts are tokens (not blocks, not bytes).
 *  - Buffers: every function that copies a variable amount of data into
 *    caller memory (adpr_preset_options, adpr_option_schema,
 *    adpr_router_options, adpr_router_stats' hot groups,
 *    adpr_router_receipts, adpr_router_receipt_text,
 *    adpr_router_pending_warmup, adpr_router_conversations,
 *    adpr_block_hashes) takes each buffer's capacity (int64_t, in items;
 *    text in bytes) and always stores the total the result needs (text: its
 *    bytes and the NUL) in that buffer's total argument. When every buffer
 *    holds its total it fills them all and returns ADPR_OK; otherwise it
 *    writes none of them and returns ADPR_ERR_SHORT_BUFFER. NULL buffers
 *    with capacity 0 ask for the totals; call again with buffers of the
 *    totals' size. Arrays whose length the inputs fix (adpr_route_result's,
 *    one entry per request or per rank; adpr_router_stats' ranks, one per
 *    rank) are documented with that length instead.
 *  - Internal errors (a bug) return ADPR_ERR_INTERNAL instead of aborting the
 *    host; the router concerned then refuses further routing (its state may be
 *    half-updated) and must be destroyed.
 *
 *  - Internal errors include faults on wild caller pointers that the library
 *    could detect: they are recovered too. A near-NULL pointer (1..4095, such
 *    as a field of a NULL struct pointer), as an argument or inside a struct,
 *    is refused before it is used, with ADPR_ERR_INTERNAL and a message
 *    naming it, and a near-NULL err buffer is treated as NULL.
 *  - Bounds: the ADPR_MAX_* limits below; beyond them a call fails with
 *    ADPR_ERR_INVALID_ARGUMENT or ADPR_ERR_CONFIG instead of taking the
 *    host's memory.
 * Host caveats (Go runtime): in a child after fork() without exec every
 * call returns ADPR_ERR_FORKED (the Go runtime would hang there; Python
 * multiprocessing must use "spawn" or "forkserver"); dlclose never unloads
 * the library; do not load two Go c-shared libraries into one process.
 */
#ifndef ADPROUTER_H
#define ADPROUTER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ABI version: bumped on any incompatible change of a struct or function
 * once released, together with the library's soname (libadprouter.so.3 for
 * ABI 3). 3 is the ABI of release 0.3.0: the engine's KV state beside the
 * pool (adpr_rank_state.pending_kv_tokens and evictable_kv_tokens,
 * adpr_request.max_new_tokens). 2 (release 0.2.0) lacked them. */
#define ADPR_ABI_VERSION 3

/* Release version, the project's one home for it: adpr_version returns it,
 * and the Python wheel, pkg-config file and CMake package are stamped with
 * it (build.sh and python/build_backend read it from this line). The Go
 * module's release tag is "v" followed by it. */
#define ADPR_VERSION "0.3.0"

/* Status codes. */
typedef int32_t adpr_status;
#define ADPR_OK 0
#define ADPR_ERR_INVALID_ARGUMENT 1 /* a bad argument; the message names it */
#define ADPR_ERR_INVALID_HANDLE 2   /* no such router (never created, destroyed) */
#define ADPR_ERR_CONFIG 3           /* a bad option key or value */
#define ADPR_ERR_INTERNAL 4         /* a bug inside the library (recovered) */
/* NVML (GPU memory) statuses; routing never needs NVML. */
#define ADPR_ERR_NVML_UNAVAILABLE 5 /* no NVIDIA driver, or adpr_nvml_init not
                                       called (or failed) */
#define ADPR_ERR_GPU_LOST 6         /* the GPU fell off the bus / needs a reset */
#define ADPR_ERR_NOT_SUPPORTED 7    /* the GPU or driver lacks the query */
#define ADPR_ERR_NO_PERMISSION 8    /* the caller may not make the query */
#define ADPR_ERR_NOT_FOUND 9        /* no GPU matches the device selector */
#define ADPR_ERR_NVML 10            /* any other NVML failure; the message
                                       carries NVML's own code and text */
/* The process is a child that fork()ed after loading the library and did
 * not exec: the Go runtime inside does not survive fork, so every call
 * (but adpr_abi_version, adpr_version and adpr_strerror) returns this before
 * entering it. Start workers with exec (Python multiprocessing "spawn" or
 * "forkserver"); the parent is unaffected. */
#define ADPR_ERR_FORKED 11
/* An output buffer was smaller than the result: nothing was written to the
 * buffers, the totals were (see "Buffers" under Conventions). */
#define ADPR_ERR_SHORT_BUFFER 12

/* Bounds on the library's inputs (beyond them a call fails with
 * ADPR_ERR_INVALID_ARGUMENT or ADPR_ERR_CONFIG instead of taking the host's
 * memory), and the size of a buffer that holds any message. */
/* BEGIN limits (generated from the Go constants by go generate; do not edit) */
#define ADPR_MAX_OPTIONS                256      /* options per adpr_router_create */
#define ADPR_MAX_OPTION_BYTES           4096     /* bytes of one option key or value */
#define ADPR_MAX_DP_SIZE                4096     /* ranks (option dp_size) */
#define ADPR_MAX_REQUESTS               4194304  /* requests per adpr_route batch */
#define ADPR_MAX_CONVERSATION_ID_BYTES  1024     /* bytes of a conversation id */
#define ADPR_PREFIX_TOKENS              64       /* leading tokens the KV-aware policy groups by */
#define ADPR_MAX_TOKENS_PER_BLOCK       65536    /* option tokens_per_block */
#define ADPR_MAX_DEVICE_BYTES           256      /* bytes of an NVML device selector */
#define ADPR_MESSAGE_MAX                512      /* bytes of the longest error message or reason, NUL included */
/* END limits */

/* A router handle. 0 is never a valid handle. */
typedef uint64_t adpr_router;

/* target_rank of a request without a target. */
#define ADPR_NO_TARGET (-1)
/* request_rank of a request that could not be placed. */
#define ADPR_UNPLACED (-1)

/* One configuration option: key and value as NUL-terminated text.
 *
 * Keys (defaults in brackets; names equal TensorRT-LLM's and the Python
 * binding's keyword arguments; docs/configuration.md has the same table and
 * adpr_option_schema hands it out as JSON):
 * BEGIN options (generated from router/schema.go by go generate; do not edit)
 *   policy                ["kv_cache_aware"] "default" | "kv_cache_aware" |
 *                         "conversation". The routing policy: TensorRT-LLM's
 *                         DefaultADPRouter (balance token load),
 *                         KVCacheAwareADPRouter (cached prefix and load) or
 *                         the conversation-affinity router (every turn of a
 *                         conversation on one rank).
 *   dp_size               (required) 1..4096 ranks. Number of attention-DP
 *                         ranks (required).
 *   load_balance_weight   [1.0] >= 0, finite. Beta of the KV-aware score: how
 *                         many tokens of prefill one token of relative load
 *                         is worth. Read by kv_cache_aware.
 *   match_rate_threshold  [0.1] >= 0, finite. Cache affinity counts for a
 *                         request only when its best match divided by its
 *                         length is strictly greater. Read by kv_cache_aware.
 *   fair_share_multiplier [2.0] >= 1 for kv_cache_aware, finite. Soft
 *                         per-rank cap = multiplier x fair share of the batch
 *                         (the default policy always uses 1); the
 *                         conversation policy clamps it to >= 1. Read by
 *                         kv_cache_aware, conversation.
 *   cold_start_warmup     [false] "true" | "false" (or "True"/"False",
 *                         "1"/"0"). Send the first untargeted requests to
 *                         every rank once, smallest rank first (warmup
 *                         "once"); true with warmup "off", "quiet" or
 *                         "demand" is an error. Read by kv_cache_aware.
 *   max_sessions          [65536] >= 1 conversations. Bound of the
 *                         conversation -> rank map, least recently used
 *                         evicted first (the conversation policy, and the
 *                         kv_cache_aware score "ttft"). Read by
 *                         kv_cache_aware, conversation.
 *   new_conv_placement    ["round_robin"] "round_robin" | "least_queued" |
 *                         "least_tokens". Where a new conversation goes:
 *                         round robin, the rank with the fewest requests, or
 *                         the rank with the fewest prompt tokens (then
 *                         requests, then round robin). Read by conversation.
 *   capacity_aware        [false] "true" | "false" (or "True"/"False",
 *                         "1"/"0"). Avoid, for each balanced request, ranks
 *                         whose free_kv_tokens (minus what the batch already
 *                         placed there) cannot hold its uncached tokens, when
 *                         some rank can; else the most headroom wins.
 *                         Explicit targets and warmup are honoured anyway.
 *   tokens_per_block      [32] 1..65536 tokens. KV block size: the prefix
 *                         index hashes prompts in blocks of this many tokens
 *                         and turns KV capacity into index bounds. Read by
 *                         kv_cache_aware.
 *   prefix_source         ["probe"] "probe" | "index" | "probe+index". Where
 *                         the KV-aware match lengths come from: "probe" (the
 *                         caller's match_lens, the reference), "index" (the
 *                         router's own prefix index: no probe, no second
 *                         allgather; needs whole prompts) or "probe+index"
 *                         (the larger of the two). Read by kv_cache_aware.
 *   index_capacity_blocks [0] 0..1073741824 blocks. Prefix-index bound of a
 *                         rank that reports no KV capacity (0: 65536 blocks);
 *                         ranks reporting kv_capacity_tokens are bounded by
 *                         it. Read by kv_cache_aware.
 *   index_max_bytes       [335544320] 80..137438953472 bytes. Memory bound of
 *                         the prefix index, all ranks together: beyond it the
 *                         least recently used (block, rank) entries of any
 *                         rank are evicted, so memory does not grow with
 *                         dp_size. Read by kv_cache_aware.
 *   warmup                ["off"] "off" | "once" | "quiet" | "demand". "once"
 *                         (= cold_start_warmup), "quiet" ("once", only while
 *                         no rank has an active request (once some decision
 *                         has seen dp_size active requests, or a request
 *                         arriving while a rank warms, with two requests or
 *                         more; with the prefix index, a burst of held prompt
 *                         families warms only a new conversation's), or while
 *                         load starts on a cold engine; under score "ttft", a
 *                         lone idle request of a prompt family some rank
 *                         holds warms only once the family's share of the
 *                         traffic asks for another rank: see docs/ROUTING.md)
 *                         or "demand" (keep each hot prompt family on about
 *                         ceil(share x dp_size x warmup_factor) ranks,
 *                         replicating only while the engine is quiet). Read
 *                         by kv_cache_aware.
 *   warmup_factor         [1.0] > 0, finite. Scales demand warmup's replica
 *                         target, and quiet warmup's for a held prompt
 *                         family. Read by kv_cache_aware.
 *   warmup_window         [1024] 1..1048576 requests. Routed requests that
 *                         demand warmup and score "ttft" (its quiet warmup
 *                         too) count prompt families over. Read by
 *                         kv_cache_aware.
 *   warmup_min_requests   [2] >= 1 requests. Requests of a family the window
 *                         must hold before demand warmup replicates it, or
 *                         score "ttft" counts it as demand (one-off prompts
 *                         never are). Read by kv_cache_aware.
 *   score                 ["reference"] "reference" | "ttft". How the
 *                         KV-aware policy ranks ranks: "reference"
 *                         (TensorRT-LLM's score) or "ttft" (predicted time to
 *                         first token in lock-step iterations: the uncached
 *                         prefill queued on the rank and the request's own,
 *                         in-flight prefixes counted as engine_reuse allows,
 *                         recomputing a prefix counted as its cost, and the
 *                         KV room ranks report heeded); "ttft" needs
 *                         prefix_source "index" or "probe+index"
 *                         (docs/ROUTING.md). Read by kv_cache_aware.
 *   engine_reuse          ["after_iteration"] "after_iteration" |
 *                         "on_schedule". When a block being computed becomes
 *                         reusable: "after_iteration" (TensorRT-LLM) or
 *                         "on_schedule" (vLLM); read by score "ttft". Read by
 *                         kv_cache_aware.
 *   ttft_drain_tokens     [8192] 1..1073741824 tokens. Prefill tokens a rank
 *                         computes per iteration (the engine's
 *                         max_num_tokens); read by score "ttft". Read by
 *                         kv_cache_aware.
 *   preset                ["reference"] "full" | "index" | "recommended" |
 *                         "reference". A bundle of the options above
 *                         (docs/configuration.md lists each preset's
 *                         options), applied first: explicit options override
 *                         it, in any order. Presets: "full": kv_cache_aware:
 *                         prefix_source=index, warmup=demand,
 *                         capacity_aware=true; default: capacity_aware=true;
 *                         conversation: capacity_aware=true; "index":
 *                         kv_cache_aware: prefix_source=index; "recommended":
 *                         kv_cache_aware: prefix_source=probe+index,
 *                         score=ttft, warmup=quiet; "reference": nothing.
 *   explain               [false] "true" | "false" (or "True"/"False",
 *                         "1"/"0"). Record a receipt per request of every
 *                         decision: why it went where it did. Decisions are
 *                         identical either way and the state digest ignores
 *                         it.
 * END options
 * Numbers are decimal text; floats are parsed exactly (repr() of a Python
 * float round-trips). An unknown key or a repeated key is an error. */
typedef struct adpr_option {
    const char *key;
    const char *value;
} adpr_option;

/* adpr_rank_state.flags: the rank's GPU has less free memory than its guard
 * band (its kv_capacity_tokens/free_kv_tokens are already shrunk for it). */
#define ADPR_RANK_MEMORY_PRESSURE 1u
/* adpr_rank_state.flags: pending_kv_tokens is filled. */
#define ADPR_RANK_PENDING_KV 2u
/* adpr_rank_state.flags: evictable_kv_tokens is filled. */
#define ADPR_RANK_EVICTABLE_KV 4u

/* What one rank reports about itself before a decision; allgathered. Zero
 * the struct before filling it: zeroed KV fields mean "capacity unknown". */
typedef struct adpr_rank_state {
    int32_t rank;                /* must equal the state's index */
    int32_t num_active_requests; /* requests the rank is serving, >= 0 */
    int64_t num_active_tokens;   /* their token load, >= 0, in TensorRT-LLM's
                                    units: for kv_cache_aware the sum of their
                                    uncached prompt tokens (prompt - cached),
                                    otherwise the sum of prompt lengths */
    int64_t kv_capacity_tokens;  /* admissible KV pool in tokens; 0 = unknown
                                    (unlimited for capacity_aware routing) */
    int64_t free_kv_tokens;      /* tokens the pool can still take,
                                    0..kv_capacity_tokens */
    uint32_t flags;              /* ADPR_RANK_* bits; others must be 0 */
    uint32_t reserved;           /* must be 0 */
    /* The engine's KV state beside the pool, each read only with its flag
     * and kv_capacity_tokens > 0 (docs/ROUTING.md, "Capacity awareness"):
     * without them the KV room is estimated. */
    int64_t pending_kv_tokens;   /* ADPR_RANK_PENDING_KV: KV the rank's active
                                    requests will still take beyond what
                                    free_kv_tokens shows taken (TensorRT-LLM's
                                    GUARANTEED_NO_EVICT: the prompt and
                                    max_tokens of each request not admitted
                                    yet), >= 0; 0 without the flag */
    int64_t evictable_kv_tokens; /* ADPR_RANK_EVICTABLE_KV: how many of
                                    free_kv_tokens are cached blocks no
                                    request holds, 0..free_kv_tokens; 0
                                    without the flag */
} adpr_rank_state;

/* One new request. Token ids live in the batch's flat token buffer and the
 * conversation id in its flat text buffer; both are read in place during the
 * call and never kept. */
typedef struct adpr_request {
    uint64_t id;           /* unique within the batch; seeds the tie-break */
    int64_t token_offset;  /* first token in adpr_batch.tokens */
    int64_t token_count;   /* tokens given there; may be 0 */
    int64_t num_tokens;    /* prompt length in tokens; 0 means token_count.
                              What to put in the token buffer: the default
                              and conversation policies read no tokens; the
                              KV-aware policy with prefix_source "probe" and
                              no demand warmup reads the first 64 (give only
                              those and the full length here); with
                              prefix_source "index"/"probe+index" or warmup
                              "demand" the router hashes the tokens given, so
                              give the whole prompt (a shorter prefix is
                              accepted and hashed as given). */
    int64_t conversation_offset; /* first byte of the id in adpr_batch.text */
    int64_t conversation_len;    /* id length in bytes, at most 1024 (longer:
                                    ADPR_ERR_INVALID_ARGUMENT; hash longer ids
                                    first); 0 = no conversation */
    int32_t target_rank;   /* ADPR_NO_TARGET or 0..dp_size-1 */
    int32_t relax;         /* 1: relaxed (TensorRT-LLM default); 0: strict */
    uint64_t lora_id;      /* scope of the prefix index: blocks of different */
    uint64_t cache_salt;   /* adapters or salts never match (0: none) */
    int64_t max_new_tokens; /* output the engine reserves KV for at admission
                               (TensorRT-LLM: max_tokens), >= 0; 0 = unknown.
                               The KV room counts it. */
} adpr_request;

/* One routing decision's inputs. */
typedef struct adpr_batch {
    const adpr_rank_state *states; /* [num_states], in rank order */
    int32_t num_states;            /* must equal dp_size */
    int32_t num_requests;
    const adpr_request *requests;  /* [num_requests] (NULL if 0) */
    const int32_t *tokens;         /* flat token buffer (may be NULL if 0) */
    int64_t tokens_len;            /* number of int32 values in tokens */
    const char *text;              /* flat conversation-id bytes (may be NULL) */
    int64_t text_len;              /* bytes in text */
    /* KV-aware policy: NULL (nothing cached) or [num_requests * num_states]
     * match lengths, row-major by request: match_lens[i * num_states + r] is
     * how many prompt tokens of request i rank r already caches (what the
     * rank's radix tree probe returned; >= 0). Validated, but not used, by
     * the other policies. */
    const int32_t *match_lens;
    int32_t max_num_active_requests; /* hard per-rank cap, >= 1 */
} adpr_batch;

/* One routing decision's outputs, in caller-owned buffers. Each pointer may
 * be NULL if the caller does not want that output. */
typedef struct adpr_route_result {
    /* [num_requests]: the rank of requests[i], or ADPR_UNPLACED. */
    int32_t *request_rank;
    /* [num_requests]: request ids grouped by rank (rank 0 first), each
     * rank's in the order it should queue them (placement order, except
     * under score "ttft": docs/ROUTING.md, "Hand-over order"), followed by
     * the unassigned ids in input order. Requires rank_offsets. */
    uint64_t *order;
    /* [num_states + 1]: rank r's ids are order[rank_offsets[r] ..
     * rank_offsets[r+1]); rank_offsets[num_states] is where the unassigned
     * ids start (so it is also the number of placed requests). Written
     * whenever non-NULL, with or without order. */
    int32_t *rank_offsets;
    /* Out: expected_num_active_requests, the per-rank target the executor
     * pads idle ranks up to. */
    int32_t expected;
    /* Out: requests that could not be placed because every rank was full.
     * The caller must requeue them. */
    int32_t num_unassigned;
} adpr_route_result;

/* Cumulative counters of one rank (adpr_router_stats). */
typedef struct adpr_rank_stats {
    uint64_t placed;               /* requests routed to the rank */
    uint64_t predicted_hit_tokens; /* prompt tokens the router expected cached
                                      there, summed over those requests */
    int64_t index_blocks;          /* the rank's share of the prefix index */
    int64_t index_limit_blocks;    /* and its bound, in blocks */
    uint64_t index_evicted_blocks;
    uint32_t flags;                /* ADPR_RANK_MEMORY_PRESSURE as last seen */
    uint32_t reserved;
} adpr_rank_stats;

/* A prompt family demand warmup tracks (adpr_router_stats). */
typedef struct adpr_hot_group {
    uint64_t family;   /* hash of the family's first KV block */
    int64_t requests;  /* requests of the family in the warmup window */
    double share;      /* requests / requests in the window */
    int32_t replicas;  /* ranks the index expects to hold it */
    int32_t target;    /* ranks demand warmup wants to hold it */
} adpr_hot_group;

/* Router-wide counters (adpr_router_stats). */
typedef struct adpr_stats {
    uint64_t decisions;
    uint64_t unassigned;        /* requests returned unassigned, in total */
    uint64_t warmup_placements; /* cold-start and demand warmup */
    uint64_t demand_placements; /* replicas of hot prompt families: demand
                                   warmup, score "ttft" ramping under load
                                   and replicas for room */
    int64_t pending_warmup;     /* ranks the cold-start warmup has yet to reach */
    int64_t conversations;      /* conversation bindings held */
    int64_t index_entries;      /* (block, rank) pairs in the prefix index */
    int64_t index_bytes;        /* memory the index holds (its arrays'
                                   capacity, all written), in bytes; <=
                                   index_max_bytes. The process grows by
                                   this much: what growth leaves behind is
                                   returned to the operating system. */
} adpr_stats;

/* adpr_receipt.reason: why a request went where it did. */
#define ADPR_REASON_UNPLACED 0            /* every rank at its cap: requeue it */
#define ADPR_REASON_EXPLICIT 1            /* its target_rank */
#define ADPR_REASON_COLD_START_WARMUP 2   /* the smallest rank not warmed yet */
#define ADPR_REASON_DEMAND_WARMUP 3       /* a replica of a hot prompt family */
#define ADPR_REASON_SCORED 4              /* kv_cache_aware: the lowest score */
#define ADPR_REASON_LEAST_LOADED 5        /* default: fewest tokens, then requests */
#define ADPR_REASON_CONVERSATION_BOUND 6  /* the rank its conversation is bound to */
#define ADPR_REASON_NEW_CONVERSATION 7    /* conversation: a new placement;
                                             score "ttft": a conversation's
                                             turn not yet bound, placed by
                                             the fewest requests (after
                                             ranks where it ends sooner)
                                             among the ranks where it waits
                                             no longer than on an idle one
                                             (candidates as for
                                             PREDICTED_TTFT) */
#define ADPR_REASON_PREDICTED_TTFT 8      /* score "ttft": the lowest predicted
                                             TTFT (candidates: match = prefix
                                             reused, load_term = prefill queued
                                             there, score = predicted cost,
                                             docs/ROUTING.md) */
#define ADPR_REASON_HELD 9                /* score "ttft", every request slot
                                             taken: every rank holding its
                                             prompt was full, so it is left
                                             unplaced: requeue it (candidates
                                             as for PREDICTED_TTFT) */
#define ADPR_REASON_HELD_IN_FLIGHT 10     /* score "ttft", engine_reuse
                                             "after_iteration": the rank
                                             chosen was computing its prompt
                                             for another request, ready by
                                             the next iteration, so it is
                                             left unplaced: requeue it
                                             (candidates as for
                                             PREDICTED_TTFT) */

/* adpr_candidate.excluded: why a rank did not compete for the request. */
#define ADPR_EXCLUDED_NONE 0          /* it competed */
#define ADPR_EXCLUDED_AT_CAP 1        /* it held the soft cap (adpr_receipt.expected) */
#define ADPR_EXCLUDED_NO_ROOM 2       /* capacity_aware: its KV room was too small */
#define ADPR_EXCLUDED_STACKED_TAILS 3 /* score "ttft": samples of the request's
                                         prompt placed there in this call
                                         already stack over a block of their
                                         last tokens on the rank that sets the
                                         lock step; another rank waits no
                                         longer */

/* Why one request of the last decision went where it did
 * (adpr_router_receipts; router option explain = true). */
typedef struct adpr_receipt {
    uint64_t id;
    int32_t rank;              /* or ADPR_UNPLACED */
    int32_t reason;            /* ADPR_REASON_* */
    int64_t num_tokens;        /* prompt length n, in tokens */
    int32_t step;              /* when the decision placed it: 0 first, -1
                                  unplaced (targets and warmup go first, then
                                  the rest in the policy's order; candidates
                                  show the loads the earlier steps left) */
    int32_t replica_wanted;    /* 1 (ADPR_REASON_PREDICTED_TTFT): the
                                  request's prompt family wants another rank,
                                  or its prefix is still being computed, so
                                  a rank whose queue with it ends within
                                  the busiest rank's share of the next
                                  iteration (its queued prefill, at most
                                  ttft_drain_tokens) was not charged for
                                  computing the prefix again (its score is
                                  its wait alone); 0 otherwise
                                  (always 0, as a reserved field, in builds
                                  before it was named) */
    /* The cache-affinity gate (ADPR_REASON_SCORED; 0 otherwise): the match
     * term counts only when max_match / n > threshold. */
    int64_t max_match;         /* longest cached prefix among eligible ranks */
    double match_rate;         /* max_match / n */
    double threshold;          /* match_rate_threshold */
    int32_t expected;          /* the decision's soft cap per rank */
    int32_t eligible;          /* ranks under it when this request was placed
                                  (scored, least-loaded and demand-warmup
                                  placements; 0 otherwise) */
    int32_t affinity;          /* 1: the gate was on (the match counted) */
    int32_t ties;              /* ranks sharing the lowest (score, tokens);
                                  > 1: the shuffle seeded with id broke the
                                  tie (adpr_candidate.shuffle_pos) */
    int32_t capacity_fallback; /* 1: capacity_aware found no rank with room,
                                  so the most headroom won */
    int32_t num_candidates;    /* 0, or dp_size (scored, least-loaded and
                                  score "ttft" placements):
                                  candidates[candidate_offset
                                  .. + num_candidates), in rank order */
    int64_t candidate_offset;
} adpr_receipt;

/* One rank as a scored or least-loaded placement saw it, just before it. */
typedef struct adpr_candidate {
    int32_t rank;
    int32_t excluded;    /* ADPR_EXCLUDED_* */
    int64_t match;       /* prompt tokens the rank caches (per prefix_source) */
    double tokens;       /* its token load then (this batch's earlier
                            placements included) */
    double load_term;    /* beta * tokens / max(eligible ranks' tokens, n) * n;
                            ADPR_REASON_PREDICTED_TTFT: prefill tokens
                            queued on the rank */
    double score;        /* (n - match if affinity) + load_term; the default
                            policy ranks by tokens (score = tokens);
                            ADPR_REASON_PREDICTED_TTFT: the predicted cost in
                            prefill tokens (the lock-step wait for load_term +
                            n - match, plus the charges of docs/ROUTING.md),
                            match being the prefix the rank would reuse */
    int32_t requests;    /* its active requests then */
    int32_t shuffle_pos; /* position in random.Random(id).shuffle(eligible
                            ranks) when ties > 1, else -1; the chosen rank is
                            the tied one with the smallest position */
} adpr_candidate;

/* GPU memory as NVML reports it, in bytes. With has_reserved (the driver has
 * nvmlDeviceGetMemoryInfo_v2) total = reserved + used + free; otherwise
 * reserved is 0 and used includes the driver's reservation. */
typedef struct adpr_memory_info {
    uint64_t total_bytes;
    uint64_t free_bytes;
    uint64_t used_bytes;
    uint64_t reserved_bytes;
    int32_t has_reserved;
    int32_t reserved;
} adpr_memory_info;

/* adpr_kv_shape.attention */
#define ADPR_ATTENTION_GQA 1 /* multi-head / grouped-query attention */
#define ADPR_ATTENTION_MLA 2 /* multi-head latent attention (DeepSeek) */
/* adpr_kv_shape.dtype */
#define ADPR_DTYPE_BF16 1  /* 2 bytes per element */
#define ADPR_DTYPE_FP16 2  /* 2 bytes per element */
#define ADPR_DTYPE_FP8 3   /* 1 byte per element */
#define ADPR_DTYPE_NVFP4 4 /* GQA only: 9 bytes per 16 elements (4-bit values
                              plus one fp8 scale); head_dim % 16 == 0 */

/* The part of a model's configuration that sizes one token's KV cache on one
 * rank (adpr_kv_bytes_per_token):
 *   GQA: 2 * layers * max(1, kv_heads / attention_tp) * head_dim * dtype bytes
 *   MLA: layers * (kv_lora_rank + qk_rope_head_dim) * dtype bytes
 * e.g. bf16 Llama-3.1-8B (32, 8, 128) 131072 B/token, Llama-3.1-70B (80, 8,
 * 128) 327680, DeepSeek-V3 MLA (61, 512 + 64) 70272. Fields of the other
 * architecture must be 0. */
typedef struct adpr_kv_shape {
    int32_t attention;        /* ADPR_ATTENTION_* */
    int32_t dtype;            /* ADPR_DTYPE_* */
    int32_t layers;           /* num_hidden_layers */
    int32_t kv_heads;         /* GQA: num_key_value_heads */
    int32_t head_dim;         /* GQA: head_dim */
    int32_t attention_tp;     /* GQA: attention tensor parallelism; 0 = 1
                                 (attention DP means 1) */
    int32_t kv_lora_rank;     /* MLA: kv_lora_rank (512 in DeepSeek-V3) */
    int32_t qk_rope_head_dim; /* MLA: qk_rope_head_dim (64) */
} adpr_kv_shape;

/* A rank's start-up KV budget (adpr_size_kv): the caller sets the inputs,
 * the library fills the rest, so every figure behind the result is visible:
 *   available = free - reserve (0 if the reserve is larger)
 *   usable    = floor(fraction * available)
 *   fit       = floor(usable / bytes_per_token)
 *   tokens    = min(fit, max_tokens if set) rounded down to whole blocks */
typedef struct adpr_kv_budget {
    /* inputs */
    uint64_t free_bytes;       /* free GPU memory after weights and warm-up */
    uint64_t reserve_bytes;    /* kept back before the fraction */
    double fraction;           /* share given to the KV cache, (0, 1]; 0 = 0.9 */
    uint64_t bytes_per_token;  /* > 0, e.g. from adpr_kv_bytes_per_token */
    uint64_t tokens_per_block; /* 0 = 32 */
    uint64_t max_tokens;       /* cap; 0 = none */
    /* outputs */
    uint64_t available_bytes;
    uint64_t usable_bytes;
    uint64_t fit_tokens;
    uint64_t tokens;           /* the budget: blocks * tokens_per_block */
    uint64_t blocks;
    int32_t capped;            /* 1 when max_tokens, not memory, decided */
    int32_t reserved;
} adpr_kv_budget;

/* ADPR_ABI_VERSION of the loaded library: compare with the header's. */
uint32_t adpr_abi_version(void);

/* Library version, e.g. "0.1.0"; static storage. Compare with the header's
 * ADPR_VERSION to detect a header/library mismatch. */
const char *adpr_version(void);

/* Static text for a status code ("unknown status" for others). */
const char *adpr_strerror(adpr_status status);

/* Creates a router from num_options options and stores its handle in *out.
 * ADPR_ERR_CONFIG names a bad, unknown, repeated or contradictory option;
 * ADPR_ERR_INVALID_ARGUMENT reports a NULL out, a NULL options array with
 * num_options > 0, or a NULL key or value. */
adpr_status adpr_router_create(const adpr_option *options, int32_t num_options,
                               adpr_router *out, char *err, size_t err_len);

/* Copies into out the options that preset (the option "preset":
 * "reference", "recommended", "index" or "full") sets for policy, one
 * "key=value\n" line each, in the order adpr_router_create applies them, as
 * NUL-terminated text ("" for none); *total receives its size with the NUL
 * ("Buffers" under Conventions). adpr_router_create applies them itself;
 * this is for hosts that need to know (e.g. whether to probe match
 * lengths). ADPR_ERR_CONFIG names an unknown preset or policy. */
adpr_status adpr_preset_options(const char *preset, const char *policy, char *out, int64_t capacity,
                                int64_t *total, char *err, size_t err_len);

/* Copies into out the option schema as NUL-terminated JSON: {"options":
 * [{"name", "kind" ("enum", "int", "int64", "float" or "bool"), "values"
 * (enums), "default" ("" when required), "range", "unit", "policies" (the
 * policies that read it; absent for all), "doc"}, ...], "bool_true",
 * "bool_false" (the texts a boolean option accepts), "presets": {preset:
 * {policy: [[key, value], ...]}}}; *total receives its size with the NUL
 * ("Buffers" under Conventions). The same table as the option list above. */
adpr_status adpr_option_schema(char *out, int64_t capacity, int64_t *total, char *err, size_t err_len);

/* Copies into out the router's effective configuration: every option of
 * the schema as a "key=value\n" line, presets expanded and unset options as
 * the values they mean, as NUL-terminated text; *total receives its size
 * with the NUL ("Buffers" under Conventions). Creating a router from these
 * options gives the same configuration. */
adpr_status adpr_router_options(adpr_router router, char *out, int64_t capacity, int64_t *total,
                                char *err, size_t err_len);

/* Destroys a router. A second destroy returns ADPR_ERR_INVALID_HANDLE. */
adpr_status adpr_router_destroy(adpr_router router);

/* Routes one batch: every request is either placed (request_rank >= 0) or
 * reported unassigned. ADPR_ERR_INVALID_ARGUMENT names what was wrong (states
 * out of rank order, a target out of range, a duplicate id, a token range
 * outside the buffer, ...) and changes nothing. */
adpr_status adpr_route(adpr_router router, const adpr_batch *batch,
                       adpr_route_result *result, char *err, size_t err_len);

/* Stores in *out a 64-bit digest of the router's history: its options and
 * every change of the state that determines its future decisions (warmup
 * ranks reached, conversation bindings and their recency, the round-robin
 * cursor, prefix-index placements and bounds, the demand-warmup window),
 * chained as they happen. Routers on different ranks that saw the same calls
 * have equal digests, and routers whose histories differ almost surely do:
 * compare them across ranks (e.g. MPI_Allreduce of min and max) to detect
 * diverged inputs early. O(1): cheap enough for every iteration. */
adpr_status adpr_router_state_digest(adpr_router router, uint64_t *out);

/* Stores in *out how many leading prompt tokens of each request the router's
 * decisions read, so a host sends only those in adpr_batch.tokens: 0 (the
 * default and conversation policies: num_tokens is enough), 64 (KV-aware
 * with probed matches: its grouping key), or -1 (the whole prompt: the
 * prefix index or demand warmup hashes it). */
adpr_status adpr_router_tokens_read(adpr_router router, int32_t *out);

/* Copies the router's counters: *stats, ranks[0..num_ranks) when ranks is
 * not NULL (num_ranks must then equal dp_size), and the hot prompt families
 * into groups, most requested first; *total_groups receives how many there
 * are ("Buffers" under Conventions: when groups_capacity is short, stats
 * and ranks are still written and ADPR_ERR_SHORT_BUFFER is returned; pass
 * NULL groups with capacity 0 to skip them). Cheap enough to call every
 * iteration; export them as metrics (docs/operations.md). */
adpr_status adpr_router_stats(adpr_router router, adpr_stats *stats,
                              adpr_rank_stats *ranks, int32_t num_ranks,
                              adpr_hot_group *groups, int64_t groups_capacity,
                              int64_t *total_groups, char *err, size_t err_len);

/* Copies the receipts of the router's last successful adpr_route (router
 * option explain = true): one per request, in request order, and the
 * candidates they point into; *total_receipts and *total_candidates receive
 * how many there are, 0 before the first decision ("Buffers" under
 * Conventions). A failed adpr_route keeps the previous receipts.
 * ADPR_ERR_INVALID_ARGUMENT: explain is off. With explain on the router keeps
 * the last decision's receipts: one candidate per rank for each scored or
 * least-loaded request, about 14 times the memory of the batch's match_lens,
 * reused by the next decision. */
adpr_status adpr_router_receipts(adpr_router router, adpr_receipt *receipts, int64_t receipts_capacity,
                                 adpr_candidate *candidates, int64_t candidates_capacity,
                                 int64_t *total_receipts, int64_t *total_candidates,
                                 char *err, size_t err_len);

/* Copies into buf the text explaining receipt index (0..total_receipts-1)
 * of the last decision: "request ID (N tokens) -> rank R: reason; ..." and,
 * for scored and least-loaded placements, one line per rank and the tie; as
 * NUL-terminated text, *total receiving its size with the NUL ("Buffers"
 * under Conventions). ADPR_ERR_INVALID_ARGUMENT: explain is off, or index is
 * not a receipt of the last decision. */
adpr_status adpr_router_receipt_text(adpr_router router, int64_t index, char *buf, int64_t capacity,
                                     int64_t *total, char *err, size_t err_len);

/* Copies the kv_cache_aware cold-start warmup's pending ranks (those it
 * has not sent a request to yet; the smallest goes first), ascending, into
 * ranks, and their number into *total ("Buffers" under Conventions). Empty
 * when warmup is off or complete, and for the other policies. */
adpr_status adpr_router_pending_warmup(adpr_router router, int32_t *ranks, int64_t capacity,
                                       int64_t *total, char *err, size_t err_len);

/* Replaces the kv_cache_aware cold-start warmup's pending ranks with
 * ranks[0..num_ranks) (any order; repeats count once; 0 ranks ends the
 * warmup; a set on a router created without warmup starts it). This is
 * TensorRT-LLM's assignment of KVCacheAwareADPRouter._pending_warmup_ranks;
 * like any routing input it must be the same on every rank. The state
 * digest records it. ADPR_ERR_INVALID_ARGUMENT: another policy, a rank
 * outside 0..dp_size-1, or ranks NULL with num_ranks > 0. */
adpr_status adpr_router_set_pending_warmup(adpr_router router, const int32_t *ranks,
                                           int64_t num_ranks, char *err, size_t err_len);

/* One binding of the conversation map (adpr_router_conversations): the
 * conversation id is ids[id_offset .. id_offset + id_length), not
 * NUL-terminated (ids may hold any bytes). */
typedef struct adpr_binding {
    int64_t id_offset;
    int32_t id_length;
    int32_t rank;
} adpr_binding;

/* Copies the conversation map (conversation policy, and the kv_cache_aware
 * score "ttft"), least recently used first, the order of eviction: the
 * bindings into bindings and their ids, back to back, into ids.
 * *total_bindings and *total_id_bytes receive the totals ("Buffers" under
 * Conventions). The map holds at most max_sessions bindings of at most 1024
 * bytes each. */
adpr_status adpr_router_conversations(adpr_router router, adpr_binding *bindings,
                                      int64_t bindings_capacity, char *ids,
                                      int64_t ids_capacity, int64_t *total_bindings,
                                      int64_t *total_id_bytes, char *err, size_t err_len);

/* Computes the prefix index's block hashes (adprouter block hash v1) of
 * tokens[0..num_tokens): one per full block of tokens_per_block tokens,
 * chained from a root scoped by lora_id and cache_salt; a partial last block
 * is not hashed. Pass a prompt without its last token to get the keys the
 * router uses for it. *total receives the number of full blocks ("Buffers"
 * under Conventions). */
adpr_status adpr_block_hashes(const int32_t *tokens, int64_t num_tokens,
                              int32_t tokens_per_block, uint64_t lora_id,
                              uint64_t cache_salt, uint64_t *out, int64_t capacity,
                              int64_t *total, char *err, size_t err_len);

/* --- GPU memory and KV budgets (NVML) -------------------------------------
 *
 * Device selectors are text: a UUID ("GPU-..." or "MIG-..."; preferred), a
 * PCI bus id ("00000000:3B:00.0"), a decimal NVML index, or one of those
 * after "uuid:", "pci:" or "index:". NVML enumerates every GPU whatever
 * CUDA_VISIBLE_DEVICES says: map a rank to its GPU by UUID, not by CUDA
 * ordinal. Without an NVIDIA driver every NVML function returns
 * ADPR_ERR_NVML_UNAVAILABLE; routing keeps working (capacity unknown). The
 * library carries its own resolution of NVML's symbols, so it loads and never
 * crashes on machines without a driver or with an old one. Never read NVML
 * inside a routing decision: fill the local rank state before the allgather. */

/* Initialises NVML (reference counted: each successful init needs one
 * shutdown). ADPR_ERR_NVML_UNAVAILABLE without a driver. */
adpr_status adpr_nvml_init(char *err, size_t err_len);

/* Undoes one successful adpr_nvml_init. */
adpr_status adpr_nvml_shutdown(char *err, size_t err_len);

/* Stores the number of GPUs NVML sees in *out. */
adpr_status adpr_nvml_device_count(int32_t *out, char *err, size_t err_len);

/* Reads a GPU's memory now (about 10 us and a driver lock: never per
 * request). */
adpr_status adpr_nvml_memory(const char *device, adpr_memory_info *out,
                             char *err, size_t err_len);

/* Stores the KV bytes one token takes on one rank in *out (pure arithmetic,
 * no NVML). ADPR_ERR_INVALID_ARGUMENT names an incomplete or inconsistent
 * shape. */
adpr_status adpr_kv_bytes_per_token(const adpr_kv_shape *shape, uint64_t *out,
                                    char *err, size_t err_len);

/* Sizes a start-up KV budget from budget's inputs and fills its outputs
 * (pure arithmetic). A zero or capped budget gets an explanation in reason
 * (NUL-terminated, may be NULL with reason_len 0; empty otherwise). */
adpr_status adpr_size_kv(adpr_kv_budget *budget, char *reason, size_t reason_len,
                           char *err, size_t err_len);

/* Fills state's KV fields for this rank before the allgather: the engine's
 * own pool (capacity_tokens, free_tokens: its block counts times
 * tokens_per_block) is the truth for occupancy; when device is not NULL, the
 * GPU's free memory (read through a per-device rate limiter: at most once
 * per min_interval_ms, 0 = 250 ms, < 0 = every call) is the guard: if it is
 * under guard_band_bytes, capacity and free shrink by the deficit in tokens
 * (bytes_per_token) and ADPR_RANK_MEMORY_PRESSURE is set. With device NULL
 * the engine's figures are copied and the flag cleared. Only the KV fields
 * and that flag are written; on error nothing is. */
adpr_status adpr_rank_state_fill_kv(adpr_rank_state *state, int64_t capacity_tokens,
                                    int64_t free_tokens, const char *device,
                                    uint64_t guard_band_bytes, uint64_t bytes_per_token,
                                    int32_t min_interval_ms, char *err, size_t err_len);

#ifdef __cplusplus
}
#endif

#endif /* ADPROUTER_H */
