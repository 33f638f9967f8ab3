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
 *    exactly what was wrong into that caller-owned buffer (truncated to fit;
 *    err may be NULL when err_len is 0). There is no global "last error".
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
 *  - Buffers: a function that copies a variable number of items into caller
 *    memory (adpr_router_pending_warmup, adpr_router_conversations) takes
 *    each buffer's capacity (int64_t, in items) and always stores the total
 *    the result needs in its total argument. When every buffer holds its
 *    total it fills them and returns ADPR_OK; otherwise it writes none of
 *    them and returns ADPR_ERR_SHORT_BUFFER (NULL buffers with capacity 0 ask
 *    for the totals). Call again with buffers of the totals' size.
 *  - Internal errors (a bug) return ADPR_ERR_INTERNAL instead of aborting the
 *    host; the router concerned then refuses further routing (its state may be
 *    half-updated) and must be destroyed.
 *
 *  - Internal errors include faults on wild caller pointers that the library
 *    could detect (e.g. a near-NULL struct pointer): they are recovered too.
 *  - Bounds: at most 256 options of at most 4096 bytes each; dp_size and
 *    conversation ids as the router documents; at most 2^22 requests per
 *    batch; device selectors of at most 256 bytes. Beyond them a call fails
 *    with ADPR_ERR_INVALID_ARGUMENT or ADPR_ERR_CONFIG instead of taking the
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
 * once released. 1 is the first stable ABI, the one of release 0.1.0 (the
 * layouts of development commits before it are not covered). */
#define ADPR_ABI_VERSION 1

/* Release version, the project's one home for it: adpr_version returns it,
 * and the Python wheel, pkg-config file and CMake package are stamped with
 * it (build.sh and python/build_backend read it from this line). The Go
 * module's release tag is "v" followed by it. */
#define ADPR_VERSION "0.1.0"

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

/* A router handle. 0 is never a valid handle. */
typedef uint64_t adpr_router;

/* target_rank of a request without a target. */
#define ADPR_NO_TARGET (-1)
/* request_rank of a request that could not be placed. */
#define ADPR_UNPLACED (-1)

/* One configuration option: key and value as NUL-terminated text.
 *
 * Keys (defaults in brackets; names equal TensorRT-LLM's and the Python
 * binding's keyword arguments):
 *   policy                 ["kv_cache_aware"] "default" | "kv_cache_aware" |
 *                          "conversation"
 *   dp_size                (required) number of attention-DP ranks,
 *                          1..4096
 *   load_balance_weight    [1.0] beta of the KV-aware score, finite, >= 0
 *   match_rate_threshold   [0.1] cache affinity only when best match /
 *                          prompt length is strictly greater; finite, >= 0
 *   fair_share_multiplier  [2.0] soft per-rank cap = multiplier x fair share;
 *                          >= 1 for kv_cache_aware, clamped to >= 1 for
 *                          conversation, unused by default (always 1)
 *   cold_start_warmup      [false] "true"/"false"/"1"/"0": send the first
 *                          untargeted requests to every rank once (the
 *                          same as warmup "once"; true with warmup "off"
 *                          or "demand" is an error)
 *   max_sessions           [65536] conversation -> rank LRU bound, >= 1
 *   new_conv_placement     ["round_robin"], "least_queued" (fewest
 *                          requests) or "least_tokens" (fewest prompt
 *                          tokens, then requests, then round robin)
 *   tokens_per_block       [32] KV block size in tokens (1..65536): block
 *                          hashes of the prefix index, index bounds
 *   prefix_source          ["probe"] kv_cache_aware match lengths: "probe"
 *                          (match_lens, the reference), "index" (the
 *                          router's own prefix index: no probe, no second
 *                          allgather; needs full prompt tokens), or
 *                          "probe+index" (the larger of the two)
 *   index_max_bytes        [335544320 = 320 MiB] bound on the prefix
 *                          index's memory, all ranks together, in bytes
 *                          (decimal, up to 2^37): beyond it the least
 *                          recently used (block, rank) entries of any rank
 *                          are evicted, so memory does not grow with dp_size
 *   index_capacity_blocks  [0] index bound per rank reporting no KV
 *                          capacity (0 = 65536 blocks); ranks reporting
 *                          kv_capacity_tokens are bounded by it
 *   warmup                 ["off"] "once" (= cold_start_warmup), "quiet"
 *                          ("once", only while no rank has an active
 *                          request) or "demand": keep each hot prompt
 *                          family on about
 *                          ceil(share x dp_size x warmup_factor) ranks,
 *                          replicating only while the engine is quiet (at
 *                          most one active or new request per rank)
 *   warmup_factor          [1.0] > 0
 *   warmup_window          [1024] routed requests demand warmup (and the
 *                          ttft score's replica target) counts over
 *   warmup_min_requests    [2] requests of a family in the window before it
 *                          is replicated (one-off prompts never are)
 *   capacity_aware         [false] avoid, for each balanced request, ranks
 *                          whose free_kv_tokens (minus what the batch already
 *                          placed there) cannot hold its uncached tokens,
 *                          when some rank can; else most headroom wins.
 *                          Explicit targets and warmup are honoured anyway.
 *   score                  ["reference"] kv_cache_aware: or "ttft", rank by
 *                          predicted time to first token (uncached prefill
 *                          queued on the rank + the request's uncached
 *                          tokens), in-flight prefixes counted as
 *                          engine_reuse allows, conversations kept on their
 *                          rank up to the hard cap (leaving it counts the
 *                          recomputed context twice), a family's rank kept
 *                          past the soft cap while the family has the
 *                          replicas its traffic share wants, predictions
 *                          within a block tied; needs prefix_source
 *                          "index" or "probe+index" (docs/ROUTING.md)
 *   engine_reuse           ["after_iteration"] (TensorRT-LLM: a block is
 *                          reusable once the iteration computing it ended) or
 *                          "on_schedule" (vLLM: as soon as it is scheduled);
 *                          read by score "ttft"
 *   ttft_drain_tokens      [8192] prefill tokens a rank computes per iteration
 *                          (max_num_tokens), 1..2^30; read by score "ttft"
 *   preset                 ["reference"] a bundle of the options above:
 *                          "recommended" (kv_cache_aware: prefix_source
 *                          "probe+index", score "ttft", warmup "quiet"),
 *                          "index", "full"; see adpr_preset_options. Applied
 *                          first: explicit options override it, in any order.
 *   explain                [false] record a receipt per request of every
 *                          decision (adpr_router_receipts): why it went
 *                          where it did. Decisions are identical either way
 *                          and the state digest ignores it.
 * Numbers are decimal text; floats are parsed exactly (repr() of a Python
 * float round-trips). An unknown key or a repeated key is an error. */
typedef struct adpr_option {
    const char *key;
    const char *value;
} adpr_option;

/* adpr_rank_state.flags: the rank's GPU has less free memory than its guard
 * band (its kv_capacity_tokens/free_kv_tokens are already shrunk for it). */
#define ADPR_RANK_MEMORY_PRESSURE 1u

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
    /* [num_requests]: request ids grouped by rank in placement order (rank 0
     * first), followed by the unassigned ids in input order. Requires
     * rank_offsets. */
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
    uint64_t demand_placements; /* demand warmup only */
    int64_t pending_warmup;     /* ranks the cold-start warmup has yet to reach */
    int64_t conversations;      /* conversation bindings held */
    int64_t index_entries;      /* (block, rank) pairs in the prefix index */
    int64_t index_bytes;        /* memory the index holds (its arrays'
                                   capacity), in bytes; <= index_max_bytes */
    int32_t num_hot_groups;     /* out: entries written to groups */
    int32_t reserved;
} adpr_stats;

/* adpr_receipt.reason: why a request went where it did. */
#define ADPR_REASON_UNPLACED 0            /* every rank at its cap: requeue it */
#define ADPR_REASON_EXPLICIT 1            /* its target_rank */
#define ADPR_REASON_COLD_START_WARMUP 2   /* the smallest rank not warmed yet */
#define ADPR_REASON_DEMAND_WARMUP 3       /* a replica of a hot prompt family */
#define ADPR_REASON_SCORED 4              /* kv_cache_aware: the lowest score */
#define ADPR_REASON_LEAST_LOADED 5        /* default: fewest tokens, then requests */
#define ADPR_REASON_CONVERSATION_BOUND 6  /* the rank its conversation is bound to */
#define ADPR_REASON_NEW_CONVERSATION 7    /* conversation: a new placement */
#define ADPR_REASON_PREDICTED_TTFT 8      /* score "ttft": the lowest predicted
                                             TTFT (candidates: match = prefix
                                             reused, load_term = prefill queued
                                             there, score = queued + uncached) */

/* adpr_candidate.excluded: why a rank did not compete for the request. */
#define ADPR_EXCLUDED_NONE 0    /* it competed */
#define ADPR_EXCLUDED_AT_CAP 1  /* it held the soft cap (adpr_receipt.expected) */
#define ADPR_EXCLUDED_NO_ROOM 2 /* capacity_aware: its KV room was too small */

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
    int32_t reserved;
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
    int32_t num_candidates;    /* 0, or dp_size (scored and least-loaded
                                  placements): candidates[candidate_offset
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
                            ADPR_REASON_PREDICTED_TTFT: load_term + n - match,
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

/* Writes into out (out_len bytes, NUL-terminated) the options that preset
 * (the option "preset": "reference", "recommended", "index" or "full") sets
 * for policy, one "key=value\n" line each, in the order adpr_router_create
 * applies them; "" for none. adpr_router_create applies them itself; this
 * is for hosts that need to know (e.g. whether to probe match lengths).
 * Every preset's text fits in ADPR_PRESET_OPTIONS_MAX bytes.
 * ADPR_ERR_CONFIG names an unknown preset or policy; ADPR_ERR_INVALID_ARGUMENT
 * a NULL string or an out buffer too small (the message says how large). */
#define ADPR_PRESET_OPTIONS_MAX 1024
adpr_status adpr_preset_options(const char *preset, const char *policy, char *out, size_t out_len,
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

/* Copies the router's counters: *stats, ranks[0..num_ranks) (num_ranks must
 * equal dp_size when ranks is not NULL), and up to max_groups hot prompt
 * families into groups (most requested first; stats->num_hot_groups says
 * how many). Cheap enough to call every iteration; export them as metrics. */
adpr_status adpr_router_stats(adpr_router router, adpr_stats *stats,
                              adpr_rank_stats *ranks, int32_t num_ranks,
                              adpr_hot_group *groups, int32_t max_groups,
                              char *err, size_t err_len);

/* Copies the receipts of the router's last successful adpr_route (router
 * option explain = true): one per request, in request order, and the
 * candidates they point into. *num_receipts and *num_candidates receive how
 * many there are (0 before the first decision). Each buffer is written when
 * its capacity is not 0, and must then hold them all; pass 0 capacities (and
 * NULL buffers) to ask for the sizes first. A failed adpr_route keeps the
 * previous receipts. ADPR_ERR_INVALID_ARGUMENT: explain is off, a buffer is
 * too small or NULL with a capacity, or a count pointer is NULL; the counts
 * are then left untouched (ask again with 0 capacities). With explain
 * on the router keeps the last decision's receipts: one candidate per rank
 * for each scored or least-loaded request, about 14 times the memory of the
 * batch's match_lens, reused by the next decision. */
adpr_status adpr_router_receipts(adpr_router router, adpr_receipt *receipts, int64_t max_receipts,
                                 adpr_candidate *candidates, int64_t max_candidates,
                                 int64_t *num_receipts, int64_t *num_candidates,
                                 char *err, size_t err_len);

/* Writes the text explaining receipt index (0..num_receipts-1) of the last
 * decision into buf: "request ID (N tokens) -> rank R: reason; ..." and, for
 * scored and least-loaded placements, one line per rank and the tie.
 * NUL-terminated, truncated to len bytes; *needed receives the full size
 * with the NUL. buf may be NULL with len 0 to ask for the size.
 * ADPR_ERR_INVALID_ARGUMENT: explain is off, index is not a receipt of the
 * last decision, needed is NULL, or buf is NULL with len > 0. */
adpr_status adpr_router_receipt_text(adpr_router router, int64_t index, char *buf, size_t len,
                                     size_t *needed, char *err, size_t err_len);

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
 * router uses for it. Writes min(blocks, out_cap) hashes to out and the
 * number of full blocks to *num_out. */
adpr_status adpr_block_hashes(const int32_t *tokens, int64_t num_tokens,
                              int32_t tokens_per_block, uint64_t lora_id,
                              uint64_t cache_salt, uint64_t *out, int64_t out_cap,
                              int64_t *num_out, char *err, size_t err_len);

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
