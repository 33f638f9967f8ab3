/*
 * adp_sim.c - an attention-data-parallel (ADP) engine's routing loop under
 * MPI, as the reference for integrating libadprouter.so (see README.md here).
 *
 * Every MPI rank plays one ADP rank. Each iteration, every rank
 *   1. advances its own simulated active requests (one decode token each;
 *      finished ones leave),
 *   2. builds its local adpr_rank_state and MPI_Allgather's it,
 *   3. takes the same batch from the same waiting queue (the queue is
 *      replicated: new arrivals come from a PRNG seeded identically on every
 *      rank, and unassigned requests are requeued identically),
 *   4. (kv_cache_aware) probes its own local prefix cache for every request of
 *      the batch and MPI_Allgather's the match lengths into the
 *      [request][rank] table,
 *   5. calls adpr_route locally and keeps only its own slice,
 *   6. compares a digest of the full decision and adpr_router_state_digest
 *      with every other rank (one MPI_Allreduce of MIN over {d, s, ~d, ~s},
 *      which yields min and max of both digests at once).
 * A disagreement is reported with the configuration, the iteration and the
 * ranks on each side, and the run exits with status 3.
 *
 * --diverge[=state|order|match] makes one rank (--diverge-rank, default 2)
 * perturb its own copy of the inputs from --diverge-iter on (default 40):
 *   state  routes with its local, un-gathered view of the rank states (its
 *          own state is right, every other rank's is all zeros: the buffer the
 *          allgather should have filled),
 *   order  routes the same requests in a different batch order (rotated),
 *   match  uses only its own column of the match table (prefix_source probe),
 *   config creates its router with a different fair_share_multiplier (from
 *          iteration 0: the router state digest, which covers the options,
 *          catches it even where no decision differs yet).
 * The digest check must detect it: exit status 3 when every configuration run
 * caught it, 4 when one did not.
 *
 * Exit status: 0 all configurations OK; 2 usage, setup or library error;
 * 3 divergence detected; 4 --diverge given but a divergence went unnoticed;
 * 5 a request was lost or placed twice although the digests agreed.
 *
 * Build (links the library directly; rpath makes it found at run time):
 *   mpicc -std=c11 -O2 -Wall -Wextra -Iinclude -o build/mpi/adp_sim \
 *     examples/mpi/adp_sim.c -Lbuild -ladprouter -Wl,-rpath,$PWD/build
 * Run: examples/mpi/run.sh, or
 *   mpirun --allow-run-as-root --oversubscribe -np 4 build/mpi/adp_sim
 */
#include <inttypes.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adprouter.h"

enum {
    EXIT_OK = 0,
    EXIT_SETUP = 2,
    EXIT_DIVERGED = 3,
    EXIT_UNDETECTED = 4,
    EXIT_LOST = 5,
};

#define MAX_BATCH 48        /* requests popped from the waiting queue per iteration */
#define MAX_WAIT 4096       /* replicated waiting queue capacity */
#define PREFIX_TOKENS 64    /* the KV-aware policy reads only the first 64 tokens */
#define MAX_PROMPT 300      /* longest prompt: 160 system + 120 user tokens */
#define NUM_SYS 4           /* shared system prompts */
#define NUM_CONV 24         /* conversation ids that recur across iterations */
#define CACHE_SLOTS 2       /* system prompts one rank's local cache holds (LRU) */
#define MAX_OPTIONS 8

static const int32_t sys_len[NUM_SYS] = {16, 48, 96, 160};

/* ---- deterministic PRNG (splitmix64), identical on every rank ---- */

typedef struct {
    uint64_t s;
} rng_t;

static uint64_t rng_next(rng_t *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint32_t rng_below(rng_t *r, uint32_t n) { return (uint32_t)(rng_next(r) % n); }

/* ---- FNV-1a over 64-bit words ---- */

static uint64_t fnv_u64(uint64_t h, uint64_t v) {
    for (int i = 0; i < 8; i++) {
        h ^= (v >> (8 * i)) & 0xff;
        h *= 0x100000001b3ull;
    }
    return h;
}
#define FNV_INIT 0xcbf29ce484222325ull

/* ---- the simulated workload ---- */

/* A request in the replicated waiting queue: everything about it is derived
 * from the shared PRNG, so every rank holds the same copy. */
typedef struct {
    uint64_t id;
    int32_t sys;        /* system prompt index, -1 for none */
    int32_t user_len;   /* tokens after the system prompt */
    uint64_t user_seed; /* seeds the user tokens */
    int32_t decode_len; /* iterations until it finishes once placed */
    int32_t target;     /* ADPR_NO_TARGET or a rank */
    int32_t relax;      /* 1 relaxed, 0 strict */
    int32_t conv;       /* conversation index, -1 for none */
    uint64_t lora_id;   /* 0 or an adapter: scopes the router's prefix index */
} sim_req;

/* A request this rank serves. */
typedef struct {
    uint64_t id;
    int64_t tokens;    /* prompt + decoded so far */
    int32_t remaining; /* decode iterations left */
} active_req;

static int32_t prompt_len(const sim_req *q) {
    return (q->sys >= 0 ? sys_len[q->sys] : 0) + q->user_len;
}

static int32_t prompt_token(const sim_req *q, int32_t j) {
    int32_t s = q->sys >= 0 ? sys_len[q->sys] : 0;
    if (j < s) return 1000 * (q->sys + 1) + j;
    uint64_t h = fnv_u64(fnv_u64(FNV_INIT, q->user_seed), (uint64_t)j);
    return 5000 + (int32_t)(h % 30000);
}

/* ---- configurations: every policy and the options that change decisions ---- */

typedef struct {
    const char *name;
    int probe; /* gather match lengths: 1 prefix_source probe, 2 probe+index */
    int full;  /* the router's prefix index needs the full prompt tokens, not the first 64 */
    adpr_option opts[MAX_OPTIONS];
} sim_config;

static const sim_config configs[] = {
    {"default", 0, 0, {{"policy", "default"}}},
    {"kv", 1, 0, {{"policy", "kv_cache_aware"}}},
    {"kv_warmup", 1, 0, {{"policy", "kv_cache_aware"}, {"cold_start_warmup", "true"}}},
    {"kv_b0.5_t0.3_warmup", 1, 0,
     {{"policy", "kv_cache_aware"}, {"load_balance_weight", "0.5"},
      {"match_rate_threshold", "0.3"}, {"cold_start_warmup", "true"}}},
    {"kv_b2_t0_fs1.5", 1, 0,
     {{"policy", "kv_cache_aware"}, {"load_balance_weight", "2.0"},
      {"match_rate_threshold", "0"}, {"fair_share_multiplier", "1.5"}}},
    {"kv_b0_t0.5", 1, 0,
     {{"policy", "kv_cache_aware"}, {"load_balance_weight", "0"},
      {"match_rate_threshold", "0.5"}}},
    {"default_capacity", 0, 0, {{"policy", "default"}, {"capacity_aware", "true"}}},
    {"kv_capacity_warmup", 1, 0,
     {{"policy", "kv_cache_aware"}, {"capacity_aware", "true"}, {"cold_start_warmup", "true"}}},
    /* The router's own prefix index: no probe, no second allgather. */
    {"kv_index", 0, 1,
     {{"policy", "kv_cache_aware"}, {"prefix_source", "index"}, {"tokens_per_block", "16"}}},
    {"kv_probe+index_demand", 2, 1,
     {{"policy", "kv_cache_aware"}, {"prefix_source", "probe+index"}, {"tokens_per_block", "16"},
      {"warmup", "demand"}, {"warmup_factor", "2"}, {"warmup_window", "64"},
      {"warmup_min_requests", "4"}}},
    {"kv_index_demand_capacity", 0, 1,
     {{"policy", "kv_cache_aware"}, {"prefix_source", "index"}, {"tokens_per_block", "16"},
      {"warmup", "demand"}, {"warmup_factor", "1.5"}, {"warmup_window", "128"},
      {"capacity_aware", "true"}}},
    /* The recommended preset (predicted-TTFT score, probe+index, quiet
     * warmup), under both engine reuse semantics. */
    {"kv_recommended", 2, 1,
     {{"policy", "kv_cache_aware"}, {"preset", "recommended"}, {"tokens_per_block", "16"}}},
    {"kv_recommended_on_schedule_capacity", 2, 1,
     {{"policy", "kv_cache_aware"}, {"preset", "recommended"}, {"tokens_per_block", "16"},
      {"engine_reuse", "on_schedule"}, {"ttft_drain_tokens", "2048"}, {"capacity_aware", "true"}}},
    {"conv_round_robin", 0, 0,
     {{"policy", "conversation"}, {"new_conv_placement", "round_robin"}, {"max_sessions", "8"}}},
    {"conv_least_queued", 0, 0,
     {{"policy", "conversation"}, {"new_conv_placement", "least_queued"}, {"max_sessions", "8"},
      {"fair_share_multiplier", "1.0"}}},
    {"conv_round_robin_capacity", 0, 0,
     {{"policy", "conversation"}, {"new_conv_placement", "round_robin"}, {"max_sessions", "8"},
      {"capacity_aware", "true"}}},
};
#define NUM_CONFIGS ((int)(sizeof configs / sizeof configs[0]))

/* ---- run parameters ---- */

typedef enum { DIV_NONE, DIV_STATE, DIV_ORDER, DIV_MATCH, DIV_CONFIG } diverge_kind;

static struct {
    int iters;
    uint64_t seed;
    int32_t maxn;
    const char *only; /* run one configuration */
    diverge_kind diverge;
    int diverge_iter;
    int diverge_rank;
} P = {300, 20260101, 8, NULL, DIV_NONE, 40, -1};

static int me, size;

#define ROOT_PRINTF(...)               \
    do {                               \
        if (me == 0) {                 \
            printf(__VA_ARGS__);       \
            fflush(stdout);            \
        }                              \
    } while (0)

static void die(const char *what, int code) {
    fprintf(stderr, "adp_sim rank %d: %s\n", me, what);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

static const char *kind_name(diverge_kind k) {
    switch (k) {
    case DIV_STATE: return "state";
    case DIV_ORDER: return "order";
    case DIV_MATCH: return "match";
    case DIV_CONFIG: return "config";
    default: return "none";
    }
}

/* Appends "a,b,c" for the ranks r with val[r] == v to buf. */
static void list_ranks(char *buf, size_t len, const uint64_t *val, int stride, uint64_t v) {
    size_t n = strlen(buf);
    int first = 1;
    for (int r = 0; r < size && n + 8 < len; r++) {
        if (val[r * stride] != v) continue;
        n += (size_t)snprintf(buf + n, len - n, first ? "%d" : ",%d", r);
        first = 0;
    }
}

/* Describes how the ranks split on one digest ("ranks 0,1,3 = 0x..; ranks 2
 * = 0x.."); returns the number of distinct values. */
static int describe_split(char *buf, size_t len, const uint64_t *val, int stride) {
    int groups = 0;
    buf[0] = 0;
    for (int r = 0; r < size; r++) {
        int seen = 0;
        for (int k = 0; k < r; k++)
            if (val[k * stride] == val[r * stride]) seen = 1;
        if (seen) continue;
        int members = 0;
        for (int k = 0; k < size; k++) members += val[k * stride] == val[r * stride];
        size_t n = strlen(buf);
        snprintf(buf + n, len - n, "%s%s ", groups ? "; " : "", members > 1 ? "ranks" : "rank");
        list_ranks(buf, len, val, stride, val[r * stride]);
        n = strlen(buf);
        snprintf(buf + n, len - n, " = 0x%016" PRIx64, val[r * stride]);
        groups++;
    }
    return groups;
}

/* Collective: called by every rank when the allreduce showed a mismatch.
 * Gathers each rank's digests and prints (rank 0) who disagrees with whom. */
static void report_divergence(const char *cfg, int it, uint64_t dd, uint64_t sd) {
    uint64_t mine[2] = {dd, sd};
    uint64_t *all = malloc(sizeof(uint64_t) * 2 * (size_t)size);
    if (!all) die("out of memory", EXIT_SETUP);
    MPI_Allgather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, MPI_COMM_WORLD);
    if (me == 0) {
        /* The minority: ranks whose digest pair differs from the most common pair. */
        int best = 0, best_count = 0;
        for (int r = 0; r < size; r++) {
            int c = 0;
            for (int k = 0; k < size; k++)
                if (all[2 * k] == all[2 * r] && all[2 * k + 1] == all[2 * r + 1]) c++;
            if (c > best_count) best = r, best_count = c;
        }
        char minority[256] = "";
        int nmin = 0;
        for (int r = 0; r < size; r++) {
            if (all[2 * r] == all[2 * best] && all[2 * r + 1] == all[2 * best + 1]) continue;
            size_t n = strlen(minority);
            if (n + 12 < sizeof minority) snprintf(minority + n, sizeof minority - n, n ? ",%d" : "%d", r);
            nmin++;
        }
        char dsplit[1024], ssplit[1024];
        int dg = describe_split(dsplit, sizeof dsplit, all, 2);
        int sg = describe_split(ssplit, sizeof ssplit, all + 1, 2);
        printf("[%s] DIVERGENCE at iteration %d: %s %s %s with the majority\n", cfg, it,
               nmin > 1 ? "ranks" : "rank", minority, nmin > 1 ? "disagree" : "disagrees");
        printf("[%s]   decision digest %s: %s\n", cfg, dg > 1 ? "DIFFERS" : "agrees", dsplit);
        printf("[%s]   router state digest %s: %s\n", cfg, sg > 1 ? "DIFFERS" : "agrees", ssplit);
        fflush(stdout);
    }
    free(all);
}

typedef struct {
    int iterations;
    long requests, routed, unassigned_total, max_wait;
    int32_t max_expected;
    uint64_t decision_chain, state_digest;
    int diverged_at; /* -1: never */
} run_stats;

/* Local prefix cache model: the system prompts this rank has served, LRU. */
typedef struct {
    int32_t sys[CACHE_SLOTS];
    int32_t last_use[CACHE_SLOTS];
} local_cache;

static int32_t cache_match(const local_cache *c, const sim_req *q) {
    if (q->sys < 0 || q->lora_id) return 0; /* adapter KV never matches the base model's */
    for (int k = 0; k < CACHE_SLOTS; k++)
        if (c->sys[k] == q->sys) {
            int32_t m = sys_len[q->sys], n = prompt_len(q);
            return m < n ? m : n - 1; /* the reference probes tokens[:-1] */
        }
    return 0;
}

static void cache_touch(local_cache *c, int32_t sys, int32_t it) {
    if (sys < 0) return;
    int victim = 0;
    for (int k = 0; k < CACHE_SLOTS; k++) {
        if (c->sys[k] == sys) {
            c->last_use[k] = it;
            return;
        }
        if (c->last_use[k] < c->last_use[victim]) victim = k;
    }
    c->sys[victim] = sys;
    c->last_use[victim] = it;
}

/* Runs one configuration; returns its statistics. Collective. */
static run_stats run_config(const sim_config *cfg) {
    run_stats st = {0};
    st.diverged_at = -1;
    char err[512];

    /* The same router on every rank: same options, dp_size = world size. */
    adpr_option opts[MAX_OPTIONS + 1];
    int nopt = 0;
    char dp[16];
    snprintf(dp, sizeof dp, "%d", size);
    opts[nopt++] = (adpr_option){"dp_size", dp};
    for (int k = 0; k < MAX_OPTIONS && cfg->opts[k].key; k++) opts[nopt++] = cfg->opts[k];
    if (P.diverge == DIV_CONFIG && me == P.diverge_rank) {
        /* The bug: this rank was started with a different configuration. */
        int k = 0;
        while (k < nopt && strcmp(opts[k].key, "fair_share_multiplier")) k++;
        opts[k] = (adpr_option){"fair_share_multiplier", "3"};
        if (k == nopt) nopt++;
    }
    adpr_router router = 0;
    adpr_status s = adpr_router_create(opts, nopt, &router, err, sizeof err);
    if (s != ADPR_OK) {
        char msg[700];
        snprintf(msg, sizeof msg, "[%s] adpr_router_create: %s: %s", cfg->name, adpr_strerror(s), err);
        die(msg, EXIT_SETUP);
    }

    rng_t rng = {P.seed}; /* shared: identical on every rank */
    sim_req *wait = calloc(MAX_WAIT, sizeof *wait);
    int nwait = 0;
    active_req *act = calloc((size_t)P.maxn + 1, sizeof *act);
    int nact = 0;
    local_cache cache;
    for (int k = 0; k < CACHE_SLOTS; k++) cache.sys[k] = -1, cache.last_use[k] = -1;
    uint64_t next_id = 1;

    adpr_rank_state *states = calloc((size_t)size, sizeof *states);
    sim_req batch_q[MAX_BATCH];
    adpr_request reqs[MAX_BATCH];
    static int32_t tokens[MAX_BATCH * MAX_PROMPT];
    char text[MAX_BATCH * 16];
    int32_t local_match[MAX_BATCH];
    int32_t *gathered = calloc((size_t)size * MAX_BATCH, sizeof *gathered);
    int32_t *match = calloc((size_t)size * MAX_BATCH, sizeof *match);
    int32_t request_rank[MAX_BATCH], rank_offsets_buf[65];
    int32_t *rank_offsets = size + 1 <= 65 ? rank_offsets_buf : calloc((size_t)size + 1, sizeof(int32_t));
    uint64_t order[MAX_BATCH];
    sim_req requeue[MAX_BATCH];
    if (!wait || !act || !states || !gathered || !match || !rank_offsets) die("out of memory", EXIT_SETUP);

    st.decision_chain = FNV_INIT;
    for (int it = 0; it < P.iters; it++) {
        const int perturb = P.diverge != DIV_NONE && me == P.diverge_rank && it >= P.diverge_iter;

        /* Decode: every active request grows by one token; finished ones leave. */
        int keep = 0;
        for (int k = 0; k < nact; k++) {
            act[k].tokens++;
            if (--act[k].remaining > 0) act[keep++] = act[k];
        }
        nact = keep;

        /* Arrivals (shared PRNG): a trickle, and a burst every 60 iterations
         * that drives every rank to its cap so requests come back unassigned. */
        int arrivals = (int)rng_below(&rng, 4) + (it % 60 == 45 ? 24 : 0);
        for (int a = 0; a < arrivals; a++) {
            if (nwait == MAX_WAIT) die("waiting queue overflow", EXIT_SETUP); /* identical on all ranks */
            sim_req *q = &wait[nwait++];
            q->id = next_id++;
            q->sys = (int32_t)rng_below(&rng, NUM_SYS + 1) - 1; /* 1 in 5 without a system prompt */
            q->user_len = 1 + (int32_t)rng_below(&rng, 120);
            q->user_seed = rng_next(&rng);
            q->decode_len = 2 + (int32_t)rng_below(&rng, 20);
            uint32_t t = rng_below(&rng, 100);
            q->target = t < 8 ? (int32_t)rng_below(&rng, (uint32_t)size) : ADPR_NO_TARGET;
            q->relax = t < 4 ? 0 : 1; /* half of the targeted ones are strict */
            q->conv = rng_below(&rng, 2) ? (int32_t)rng_below(&rng, NUM_CONV) : -1;
            q->lora_id = rng_below(&rng, 10) == 0 ? 7 : 0; /* an adapter: its blocks never match the base model's */
        }
        if (nwait > st.max_wait) st.max_wait = nwait;

        /* The batch: the head of the replicated waiting queue. */
        int nb = nwait < MAX_BATCH ? nwait : MAX_BATCH;
        memcpy(batch_q, wait, sizeof(sim_req) * (size_t)nb);
        if (perturb && P.diverge == DIV_ORDER && nb > 1) { /* rotate left by one */
            sim_req first = batch_q[0];
            memmove(batch_q, batch_q + 1, sizeof(sim_req) * (size_t)(nb - 1));
            batch_q[nb - 1] = first;
        }

        /* Local state, allgathered. Zeroed first (zero KV fields mean
         * "capacity unknown"; flags and reserved must be 0). The KV budget is
         * a local measurement: heterogeneous pools, and rank 1 under GPU
         * memory pressure for a while (its pool shrunk, the flag set). It
         * reaches the other ranks only through this gathered state. */
        adpr_rank_state local;
        memset(&local, 0, sizeof local);
        local.rank = me;
        local.num_active_requests = nact;
        for (int k = 0; k < nact; k++) local.num_active_tokens += act[k].tokens;
        local.kv_capacity_tokens = 900 + 300 * (me % 4);
        if (me == 1 && (it / 50) % 3 == 1) {
            local.kv_capacity_tokens = local.kv_capacity_tokens * 6 / 10;
            local.flags |= ADPR_RANK_MEMORY_PRESSURE;
        }
        local.free_kv_tokens = local.kv_capacity_tokens - local.num_active_tokens;
        if (local.free_kv_tokens < 0) local.free_kv_tokens = 0;
        MPI_Allgather(&local, (int)sizeof local, MPI_BYTE, states, (int)sizeof local, MPI_BYTE,
                      MPI_COMM_WORLD);
        if (perturb && P.diverge == DIV_STATE) {
            /* The bug: routing with the local view instead of the gathered one. */
            for (int r = 0; r < size; r++)
                if (r != me) {
                    memset(&states[r], 0, sizeof states[r]);
                    states[r].rank = r;
                }
        }

        /* The requests: the first 64 tokens in the flat buffer (all of them
         * for the router's prefix index), the full length in num_tokens,
         * conversation ids in the flat text buffer. */
        int64_t ntok = 0, ntext = 0;
        for (int i = 0; i < nb; i++) {
            const sim_req *q = &batch_q[i];
            int32_t n = prompt_len(q), give = cfg->full || n < PREFIX_TOKENS ? n : PREFIX_TOKENS;
            adpr_request *r = &reqs[i];
            memset(r, 0, sizeof *r);
            r->id = q->id;
            r->token_offset = ntok;
            r->token_count = give;
            r->num_tokens = n;
            for (int32_t j = 0; j < give; j++) tokens[ntok++] = prompt_token(q, j);
            if (q->conv >= 0) {
                int len = snprintf(text + ntext, sizeof text - (size_t)ntext, "conv-%02d", q->conv);
                r->conversation_offset = ntext;
                r->conversation_len = len;
                ntext += len;
            }
            r->target_rank = q->target;
            r->relax = q->relax;
            r->lora_id = q->lora_id;
        }

        /* KV-aware: every rank probes its own cache; the match lengths are
         * allgathered (rank-major) and transposed to [request][rank]. */
        if (cfg->probe && nb > 0) {
            for (int i = 0; i < nb; i++) local_match[i] = cache_match(&cache, &batch_q[i]);
            MPI_Allgather(local_match, nb, MPI_INT32_T, gathered, nb, MPI_INT32_T, MPI_COMM_WORLD);
            for (int r = 0; r < size; r++)
                for (int i = 0; i < nb; i++) {
                    int32_t m = gathered[r * nb + i];
                    if (perturb && P.diverge == DIV_MATCH && r != me) m = 0;
                    match[i * size + r] = m;
                }
        }

        adpr_batch b = {
            .states = states,
            .num_states = size,
            .num_requests = nb,
            .requests = nb ? reqs : NULL,
            .tokens = ntok ? tokens : NULL,
            .tokens_len = ntok,
            .text = ntext ? text : NULL,
            .text_len = ntext,
            .match_lens = cfg->probe && nb ? match : NULL,
            .max_num_active_requests = P.maxn,
        };
        adpr_route_result res = {
            .request_rank = request_rank, .order = order, .rank_offsets = rank_offsets};
        s = adpr_route(router, &b, &res, err, sizeof err);
        if (s != ADPR_OK) {
            char msg[800];
            snprintf(msg, sizeof msg, "[%s] iteration %d: adpr_route: %s: %s", cfg->name, it,
                     adpr_strerror(s), err);
            die(msg, EXIT_SETUP);
        }

        /* The outputs must agree with each other (a local ABI check). */
        if (rank_offsets[0] != 0 || rank_offsets[size] != nb - res.num_unassigned)
            die("rank_offsets inconsistent with num_unassigned", EXIT_SETUP);
        for (int r = 0; r < size; r++)
            for (int32_t k = rank_offsets[r]; k < rank_offsets[r + 1]; k++) {
                int found = 0;
                for (int i = 0; i < nb; i++)
                    if (reqs[i].id == order[k]) found = request_rank[i] == r;
                if (!found) die("order/rank_offsets inconsistent with request_rank", EXIT_SETUP);
            }

        /* Digest of the full decision: the batch as routed (ids in input
         * order) with each request's rank, the placement order, expected and
         * the unassigned count. */
        uint64_t dd = fnv_u64(FNV_INIT, (uint64_t)it);
        dd = fnv_u64(dd, (uint64_t)nb);
        for (int i = 0; i < nb; i++) {
            dd = fnv_u64(dd, reqs[i].id);
            dd = fnv_u64(dd, (uint64_t)(int64_t)request_rank[i]);
        }
        for (int r = 0; r <= size; r++) dd = fnv_u64(dd, (uint64_t)rank_offsets[r]);
        for (int i = 0; i < nb; i++) dd = fnv_u64(dd, order[i]);
        dd = fnv_u64(dd, (uint64_t)(int64_t)res.expected);
        dd = fnv_u64(dd, (uint64_t)(int64_t)res.num_unassigned);
        uint64_t sd = 0;
        if ((s = adpr_router_state_digest(router, &sd)) != ADPR_OK) die("adpr_router_state_digest failed", EXIT_SETUP);

        /* All ranks compare: MIN over {d, s, ~d, ~s} gives min and ~max of both. */
        uint64_t v[4] = {dd, sd, ~dd, ~sd}, red[4];
        MPI_Allreduce(v, red, 4, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
        if (red[0] != ~red[2] || red[1] != ~red[3]) {
            report_divergence(cfg->name, it, dd, sd); /* every rank takes this branch */
            st.diverged_at = it;
            st.iterations = it + 1;
            break;
        }

        /* Keep only this rank's slice, in placement order. */
        int kept = 0;
        for (int32_t k = rank_offsets[me]; k < rank_offsets[me + 1]; k++) {
            const sim_req *q = NULL;
            for (int i = 0; i < nb; i++)
                if (batch_q[i].id == order[k]) q = &batch_q[i];
            if (!q) die("order[] holds an id that is not in the batch", EXIT_SETUP);
            if (nact >= P.maxn) die("the router placed more than max_num_active_requests on this rank", EXIT_SETUP);
            act[nact++] = (active_req){q->id, prompt_len(q), q->decode_len};
            if (!q->lora_id) cache_touch(&cache, q->sys, it);
            kept++;
        }
        /* Nothing lost, nothing placed twice. */
        int placed = 0;
        MPI_Allreduce(&kept, &placed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        if (placed != nb - res.num_unassigned) {
            ROOT_PRINTF("[%s] LOST OR DUPLICATED at iteration %d: ranks kept %d requests, the decision placed %d\n",
                        cfg->name, it, placed, nb - res.num_unassigned);
            MPI_Finalize();
            exit(EXIT_LOST);
        }

        /* Requeue the unassigned at the head of the queue, in input order,
         * identically on every rank; drop the rest of the batch. */
        int nu = 0;
        for (int32_t k = rank_offsets[size]; k < nb; k++)
            for (int i = 0; i < nb; i++)
                if (batch_q[i].id == order[k]) requeue[nu++] = batch_q[i];
        memmove(wait + nu, wait + nb, sizeof(sim_req) * (size_t)(nwait - nb));
        memcpy(wait, requeue, sizeof(sim_req) * (size_t)nu);
        nwait = nwait - nb + nu;

        st.iterations = it + 1;
        st.requests = (long)(next_id - 1);
        st.routed += nb - res.num_unassigned;
        st.unassigned_total += res.num_unassigned;
        if (res.expected > st.max_expected) st.max_expected = res.expected;
        st.decision_chain = fnv_u64(st.decision_chain, dd);
        st.state_digest = sd;
    }

    if (adpr_router_destroy(router) != ADPR_OK) die("adpr_router_destroy failed", EXIT_SETUP);
    if (rank_offsets != rank_offsets_buf) free(rank_offsets);
    free(wait), free(act), free(states), free(gathered), free(match);
    return st;
}

static void usage(void) {
    if (me == 0)
        fprintf(stderr,
                "usage: adp_sim [--iters N] [--seed S] [--maxn M] [--config NAME]\n"
                "               [--diverge[=state|order|match|config]] [--diverge-iter K] [--diverge-rank R]\n"
                "       adp_sim --list\n");
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a];
        const char *val = a + 1 < argc ? argv[a + 1] : NULL;
        if (!strcmp(arg, "--iters") && val) P.iters = atoi(val), a++;
        else if (!strcmp(arg, "--seed") && val) P.seed = strtoull(val, NULL, 0), a++;
        else if (!strcmp(arg, "--maxn") && val) P.maxn = atoi(val), a++;
        else if (!strcmp(arg, "--config") && val) P.only = val, a++;
        else if (!strcmp(arg, "--diverge-iter") && val) P.diverge_iter = atoi(val), a++;
        else if (!strcmp(arg, "--diverge-rank") && val) P.diverge_rank = atoi(val), a++;
        else if (!strcmp(arg, "--diverge") || !strcmp(arg, "--diverge=state")) P.diverge = DIV_STATE;
        else if (!strcmp(arg, "--diverge=order")) P.diverge = DIV_ORDER;
        else if (!strcmp(arg, "--diverge=match")) P.diverge = DIV_MATCH;
        else if (!strcmp(arg, "--diverge=config")) P.diverge = DIV_CONFIG;
        else if (!strcmp(arg, "--list")) {
            for (int c = 0; c < NUM_CONFIGS; c++) ROOT_PRINTF("%s\n", configs[c].name);
            MPI_Finalize();
            return EXIT_OK;
        } else {
            usage();
            MPI_Finalize();
            return EXIT_SETUP;
        }
    }
    if (P.diverge_rank < 0) P.diverge_rank = size > 2 ? 2 : size - 1;
    if (P.diverge == DIV_CONFIG) P.diverge_iter = 0; /* the router differs from creation on */
    if (P.iters < 1 || P.maxn < 1 ||
        (P.diverge != DIV_NONE && (size < 2 || P.diverge_rank >= size || P.diverge_iter >= P.iters))) {
        if (me == 0)
            fprintf(stderr, "adp_sim: bad parameters (--diverge needs >= 2 ranks, a valid --diverge-rank "
                            "and --diverge-iter < --iters)\n");
        MPI_Finalize();
        return EXIT_SETUP;
    }
    if (adpr_abi_version() != ADPR_ABI_VERSION) {
        char msg[128];
        snprintf(msg, sizeof msg, "library ABI %u, header ABI %d", adpr_abi_version(), ADPR_ABI_VERSION);
        die(msg, EXIT_SETUP);
    }

    ROOT_PRINTF("adp_sim: libadprouter %s (ABI %u), %d ranks, %d iterations, max_num_active_requests %d, seed %" PRIu64 "\n",
                adpr_version(), adpr_abi_version(), size, P.iters, P.maxn, P.seed);
    if (P.diverge != DIV_NONE)
        ROOT_PRINTF("adp_sim: --diverge=%s: rank %d perturbs its own inputs from iteration %d on\n",
                    kind_name(P.diverge), P.diverge_rank, P.diverge_iter);

    int ran = 0, diverged = 0, undetected = 0, unexpected = 0;
    for (int c = 0; c < NUM_CONFIGS; c++) {
        const sim_config *cfg = &configs[c];
        if (P.only && strcmp(P.only, cfg->name)) continue;
        /* --diverge=match needs the probes to decide: with probe+index the
         * router's own index may already know more than the zeroed probes,
         * which makes that perturbation harmless there. */
        if (P.diverge == DIV_MATCH && cfg->probe != 1) continue;
        double t0 = MPI_Wtime();
        run_stats st = run_config(cfg);
        double dt = MPI_Wtime() - t0;
        ran++;
        if (st.diverged_at >= 0) {
            diverged++;
            if (P.diverge == DIV_NONE || st.diverged_at < P.diverge_iter) unexpected++;
            ROOT_PRINTF("[%s] %s iterations=%d (stopped at the divergence)\n", cfg->name,
                        P.diverge != DIV_NONE && st.diverged_at >= P.diverge_iter ? "DETECTED" : "FAILED",
                        st.iterations);
            continue;
        }
        if (P.diverge != DIV_NONE) undetected++;
        ROOT_PRINTF("[%s] %s iterations=%d requests=%ld routed=%ld unassigned=%ld max_expected=%d "
                    "max_waiting=%ld decision_digest=0x%016" PRIx64 " state_digest=0x%016" PRIx64 " (%.2fs)\n",
                    cfg->name, P.diverge != DIV_NONE ? "UNDETECTED" : "OK", st.iterations, st.requests,
                    st.routed, st.unassigned_total, st.max_expected, st.max_wait, st.decision_chain,
                    st.state_digest, dt);
    }
    if (ran == 0) {
        if (me == 0) fprintf(stderr, "adp_sim: no configuration named %s (see --list)\n", P.only ? P.only : "");
        MPI_Finalize();
        return EXIT_SETUP;
    }

    int code = EXIT_OK;
    if (P.diverge == DIV_NONE) {
        if (diverged) {
            ROOT_PRINTF("FAIL: ranks diverged in %d of %d configurations\n", diverged, ran);
            code = EXIT_DIVERGED;
        } else {
            ROOT_PRINTF("ALL OK: %d configurations, %d ranks agreed on every decision and router state\n", ran, size);
        }
    } else if (unexpected) {
        ROOT_PRINTF("FAIL: divergence before the perturbation in %d configurations\n", unexpected);
        code = EXIT_DIVERGED;
    } else if (undetected) {
        ROOT_PRINTF("FAIL: divergence NOT detected in %d of %d configurations\n", undetected, ran);
        code = EXIT_UNDETECTED;
    } else {
        ROOT_PRINTF("DIVERGENCE DETECTED in all %d configurations (rank %d, --diverge=%s from iteration %d): exit %d\n",
                    ran, P.diverge_rank, kind_name(P.diverge), P.diverge_iter, EXIT_DIVERGED);
        code = EXIT_DIVERGED;
    }
    MPI_Finalize();
    return code;
}
