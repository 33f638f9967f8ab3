// faults: the library never takes its host down.
//
//   faults LIBRARY inject   LIBRARY built with -tags adpr_faultinject: a panic
//                           injected into every export, outside and inside a
//                           router's lock, comes back as ADPR_ERR_INTERNAL; a
//                           router poisoned by one refuses every call but
//                           destroy; the library keeps working.
//   faults LIBRARY pointers the release library: wild and near-NULL pointers
//                           in every pointer argument come back as a status.
//   faults LIBRARY fork     calls in a child after fork() return
//                           ADPR_ERR_FORKED at once; the parent is unaffected.
//   faults LIBRARY soak N   N rounds of good and bad calls on every export
//                           (routers created, used and destroyed, invalid
//                           batches, NVML errors); resident memory must stay
//                           flat after warm-up. Not in CI (./build.sh soak).
//
// Prints one line per check and "N passed, M failed"; exits 1 on a failure.
// Built and run by capi_test.go at the repository root.
#include <dlfcn.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "adprouter.h"

static int passed, failed;

static void check(int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("%s ", ok ? "PASS" : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok) passed++; else failed++;
}

// The library's functions, resolved with dlsym so that one binary serves
// both builds.
static struct {
    __typeof__(&adpr_router_create) create;
    __typeof__(&adpr_router_destroy) destroy;
    __typeof__(&adpr_route) route;
    __typeof__(&adpr_router_state_digest) digest;
    __typeof__(&adpr_router_stats) stats;
    __typeof__(&adpr_router_tokens_read) tokens_read;
    __typeof__(&adpr_router_receipts) receipts;
    __typeof__(&adpr_router_receipt_text) receipt_text;
    __typeof__(&adpr_router_pending_warmup) pending;
    __typeof__(&adpr_router_set_pending_warmup) set_pending;
    __typeof__(&adpr_router_conversations) conversations;
    __typeof__(&adpr_block_hashes) hashes;
    __typeof__(&adpr_preset_options) preset;
    __typeof__(&adpr_option_schema) schema;
    __typeof__(&adpr_router_options) router_options;
    __typeof__(&adpr_nvml_init) nvml_init;
    __typeof__(&adpr_nvml_shutdown) nvml_shutdown;
    __typeof__(&adpr_nvml_device_count) nvml_count;
    __typeof__(&adpr_nvml_memory) nvml_memory;
    __typeof__(&adpr_kv_bytes_per_token) kv_bpt;
    __typeof__(&adpr_size_kv) size_kv;
    __typeof__(&adpr_rank_state_fill_kv) fill_kv;
    void (*inject)(const char *point);
} L;

static void *sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (p == NULL) {
        fprintf(stderr, "dlsym %s: %s\n", name, dlerror());
        exit(2);
    }
    return p;
}

static adpr_router make_router(void) {
    adpr_option opts[] = {{"policy", "kv_cache_aware"}, {"dp_size", "2"}, {"explain", "true"}};
    adpr_router r = 0;
    char err[256];
    if (L.create(opts, 3, &r, err, sizeof err) != ADPR_OK) {
        fprintf(stderr, "create: %s\n", err);
        exit(2);
    }
    return r;
}

// A valid one-request batch for a dp_size 2 router.
static int32_t tokens[4] = {1, 2, 3, 4};
static adpr_rank_state states[2] = {{0, 0, 0, 0, 0, 0, 0, 0, 0}, {1, 0, 0, 0, 0, 0, 0, 0, 0}};
static adpr_request request = {7, 0, 4, 4, 0, 0, ADPR_NO_TARGET, 1, 0, 0, 0};

static adpr_status route_once(adpr_router r, char *err, size_t n) {
    adpr_batch b = {states, 2, 1, &request, tokens, 4, NULL, 0, NULL, 8};
    int32_t rank_of[1];
    adpr_route_result out = {rank_of, NULL, NULL, 0, 0};
    return L.route(r, &b, &out, err, n);
}

// Each export called with valid arguments (on router r where it takes one).
enum { NEEDS_NOTHING, NEEDS_ROUTER };
static adpr_status call(const char *name, adpr_router r, char *err, size_t n) {
    static adpr_stats st;
    static adpr_rank_stats rs[2];
    static uint64_t hashes[4], digest;
    static int64_t nh;
    static int32_t count;
    static adpr_memory_info mem;
    static adpr_receipt rcs[1];
    static adpr_candidate cands[2];
    static int64_t nrcs, ncands;
    static char text[4096];
    static int64_t needed, ngroups;
    adpr_kv_shape shape = {ADPR_ATTENTION_GQA, ADPR_DTYPE_BF16, 32, 8, 128, 1, 0, 0};
    adpr_kv_budget budget = {.free_bytes = 1 << 30, .bytes_per_token = 1024};
    adpr_rank_state state = {0};
    adpr_option opts[] = {{"dp_size", "2"}};
    adpr_router made = 0;
    if (!strcmp(name, "adpr_router_create")) {
        adpr_status s = L.create(opts, 1, &made, err, n);
        if (s == ADPR_OK) L.destroy(made);
        return s;
    }
    if (!strcmp(name, "adpr_router_destroy")) return L.destroy(r);
    if (!strcmp(name, "adpr_route")) return route_once(r, err, n);
    if (!strcmp(name, "adpr_router_state_digest")) return L.digest(r, &digest);
    if (!strcmp(name, "adpr_router_stats")) return L.stats(r, &st, rs, 2, NULL, 0, &ngroups, err, n);
    if (!strcmp(name, "adpr_router_tokens_read")) return L.tokens_read(r, &count);
    if (!strcmp(name, "adpr_preset_options")) {
        static char preset_text[256];
        int64_t total;
        return L.preset("recommended", "kv_cache_aware", preset_text, sizeof preset_text, &total, err, n);
    }
    // The receipts of a one-request decision over 2 ranks: 1 receipt, 2 candidates.
    if (!strcmp(name, "adpr_router_receipts")) {
        route_once(r, NULL, 0);
        return L.receipts(r, rcs, 1, cands, 2, &nrcs, &ncands, err, n);
    }
    if (!strcmp(name, "adpr_router_receipt_text")) {
        route_once(r, NULL, 0);
        return L.receipt_text(r, 0, text, sizeof text, &needed, err, n);
    }
    if (!strcmp(name, "adpr_router_pending_warmup")) {
        static int32_t ranks[2];
        return L.pending(r, ranks, 2, &nh, err, n);
    }
    if (!strcmp(name, "adpr_router_set_pending_warmup")) {
        static const int32_t ranks[2] = {1, 0};
        return L.set_pending(r, ranks, 2, err, n);
    }
    if (!strcmp(name, "adpr_router_conversations")) {
        static adpr_binding bindings[1];
        static char ids[8];
        static int64_t nb, nbytes;
        return L.conversations(r, bindings, 1, ids, sizeof ids, &nb, &nbytes, err, n);
    }
    if (!strcmp(name, "adpr_block_hashes")) return L.hashes(tokens, 4, 2, 0, 0, hashes, 4, &nh, err, n);
    if (!strcmp(name, "adpr_option_schema")) {
        static char schema[1 << 16];
        return L.schema(schema, sizeof schema, &nh, err, n);
    }
    if (!strcmp(name, "adpr_router_options")) return L.router_options(r, text, sizeof text, &nh, err, n);
    if (!strcmp(name, "adpr_nvml_init")) return L.nvml_init(err, n);
    if (!strcmp(name, "adpr_nvml_shutdown")) return L.nvml_shutdown(err, n);
    if (!strcmp(name, "adpr_nvml_device_count")) return L.nvml_count(&count, err, n);
    if (!strcmp(name, "adpr_nvml_memory")) return L.nvml_memory("index:0", &mem, err, n);
    if (!strcmp(name, "adpr_kv_bytes_per_token")) return L.kv_bpt(&shape, &digest, err, n);
    if (!strcmp(name, "adpr_size_kv")) return L.size_kv(&budget, NULL, 0, err, n);
    if (!strcmp(name, "adpr_rank_state_fill_kv"))
        return L.fill_kv(&state, 100, 50, NULL, 0, 0, 0, err, n);
    fprintf(stderr, "unknown export %s\n", name);
    exit(2);
}

static const struct {
    const char *name;
    int takes_router;
} exports[] = {
    {"adpr_router_create", NEEDS_NOTHING},   {"adpr_router_destroy", NEEDS_ROUTER},
    {"adpr_route", NEEDS_ROUTER},            {"adpr_router_state_digest", NEEDS_ROUTER},
    {"adpr_router_stats", NEEDS_ROUTER},     {"adpr_block_hashes", NEEDS_NOTHING},
    {"adpr_router_tokens_read", NEEDS_ROUTER}, {"adpr_preset_options", NEEDS_NOTHING},
    {"adpr_router_receipts", NEEDS_ROUTER},  {"adpr_router_receipt_text", NEEDS_ROUTER},
    {"adpr_router_pending_warmup", NEEDS_ROUTER}, {"adpr_router_set_pending_warmup", NEEDS_ROUTER},
    {"adpr_router_conversations", NEEDS_ROUTER}, {"adpr_option_schema", NEEDS_NOTHING},
    {"adpr_router_options", NEEDS_ROUTER},
    {"adpr_nvml_init", NEEDS_NOTHING},       {"adpr_nvml_shutdown", NEEDS_NOTHING},
    {"adpr_nvml_device_count", NEEDS_NOTHING}, {"adpr_nvml_memory", NEEDS_NOTHING},
    {"adpr_kv_bytes_per_token", NEEDS_NOTHING}, {"adpr_size_kv", NEEDS_NOTHING},
    {"adpr_rank_state_fill_kv", NEEDS_NOTHING},
};
#define NEXPORTS (sizeof exports / sizeof exports[0])

static void test_inject(void) {
    char err[512], point[128];
    for (size_t i = 0; i < NEXPORTS; i++) {
        const char *name = exports[i].name;
        adpr_router r = make_router();
        err[0] = 0;
        L.inject(name);
        adpr_status s = call(name, r, err, sizeof err);
        L.inject(NULL);
        // adpr_router_state_digest has no message buffer: the status is all.
        int has_msg = strcmp(name, "adpr_router_destroy") && strcmp(name, "adpr_router_state_digest") &&
                      strcmp(name, "adpr_router_tokens_read");
        check(s == ADPR_ERR_INTERNAL && (!has_msg || strstr(err, "injected panic") != NULL),
              "%s: injected panic -> ADPR_ERR_INTERNAL  -- status %d \"%s\"", name, s, err);
        check(call("adpr_route", r, err, sizeof err) == ADPR_OK,
              "%s: a panic before the router's lock leaves it usable", name);
        if (exports[i].takes_router && strcmp(name, "adpr_router_destroy") != 0) {
            snprintf(point, sizeof point, "%s/locked", name);
            L.inject(point);
            s = call(name, r, err, sizeof err);
            L.inject(NULL);
            check(s == ADPR_ERR_INTERNAL, "%s: injected panic inside the lock -> ADPR_ERR_INTERNAL  -- status %d", name, s);
            err[0] = 0;
            s = route_once(r, err, sizeof err);
            check(s == ADPR_ERR_INTERNAL && strstr(err, "destroy it") != NULL,
                  "%s: the poisoned router refuses adpr_route  -- status %d \"%s\"", name, s, err);
            uint64_t d;
            check(L.digest(r, &d) == ADPR_ERR_INTERNAL, "%s: the poisoned router refuses adpr_router_state_digest", name);
            adpr_stats st;
            int64_t ngroups;
            check(L.stats(r, &st, NULL, 0, NULL, 0, &ngroups, err, sizeof err) == ADPR_ERR_INTERNAL,
                  "%s: the poisoned router refuses adpr_router_stats", name);
        }
        s = L.destroy(r);
        check(s == ADPR_OK, "%s: destroy afterwards  -- status %d", name, s);
    }
    adpr_router r = make_router();
    check(route_once(r, err, sizeof err) == ADPR_OK, "after %zu injected panics a new router routes", NEXPORTS);
    L.destroy(r);
}

// Pointers that are neither NULL nor the caller's: near-NULL (a field of a
// NULL struct pointer), unmapped, and a read-only page for outputs.
static void test_pointers(void) {
    void *wild[] = {(void *)8, (void *)0x40, (void *)0xdead0000, (void *)0x1000};
    const char *rodata = "read-only";
    char err[256];
    adpr_router r = make_router();
    for (size_t i = 0; i < sizeof wild / sizeof wild[0]; i++) {
        void *p = wild[i];
        adpr_route_result out = {0};
        adpr_batch b = {states, 2, 1, &request, tokens, 4, NULL, 0, NULL, 8};
        adpr_batch bad_states = b, bad_reqs = b, bad_tokens = b;
        bad_states.states = p;
        bad_reqs.requests = p;
        bad_tokens.tokens = p;
        adpr_status s;
        s = L.route(r, (const adpr_batch *)p, &out, err, sizeof err);
        check(s == ADPR_ERR_INTERNAL, "adpr_route(batch = %p) -> ADPR_ERR_INTERNAL  -- %d \"%s\"", p, s, err);
        L.destroy(r);
        r = make_router();
        s = L.route(r, &b, (adpr_route_result *)p, err, sizeof err);
        check(s == ADPR_ERR_INTERNAL, "adpr_route(result = %p) -> status  -- %d", p, s);
        L.destroy(r);
        r = make_router();
        adpr_batch *bs[] = {&bad_states, &bad_reqs, &bad_tokens};
        for (int k = 0; k < 3; k++) {
            s = L.route(r, bs[k], &out, err, sizeof err);
            // One request's tokens are never read (nothing to compare), so
            // a wild token buffer may route; what matters is a status.
            check(s == ADPR_ERR_INTERNAL || (k == 2 && s == ADPR_OK),
                  "adpr_route(batch field %d = %p) -> status  -- %d", k, p, s);
            L.destroy(r);
            r = make_router();
        }
        adpr_option bad_opt[] = {{"dp_size", (const char *)p}};
        adpr_router made;
        check(L.create(bad_opt, 1, &made, err, sizeof err) == ADPR_ERR_INTERNAL, "create(option value %p) -> status", p);
        check(L.create((const adpr_option *)p, 1, &made, err, sizeof err) == ADPR_ERR_INTERNAL, "create(options %p) -> status", p);
        int64_t nh, ngroups, ptotal;
        check(L.hashes((const int32_t *)p, 64, 32, 0, 0, NULL, 0, &nh, err, sizeof err) != ADPR_OK ||
                  nh == 2, "adpr_block_hashes(tokens %p) -> status", p);
        uint64_t out4[4];
        check(L.hashes((const int32_t *)p, 64, 32, 0, 0, out4, 4, &nh, err, sizeof err) == ADPR_ERR_INTERNAL,
              "adpr_block_hashes(tokens %p, hashing) -> ADPR_ERR_INTERNAL", p);
        char text[64];
        check(L.preset((const char *)p, "default", text, sizeof text, &ptotal, err, sizeof err) == ADPR_ERR_INTERNAL,
              "adpr_preset_options(preset %p) -> status", p);
        check(L.preset("full", "kv_cache_aware", (char *)p, sizeof text, &ptotal, err, sizeof err) == ADPR_ERR_INTERNAL,
              "adpr_preset_options(out %p) -> status", p);
        check(L.schema((char *)p, 1 << 16, &ptotal, err, sizeof err) == ADPR_ERR_INTERNAL,
              "adpr_option_schema(out %p) -> ADPR_ERR_INTERNAL", p);
        check(L.schema(text, sizeof text, (int64_t *)p, err, sizeof err) == ADPR_ERR_INTERNAL,
              "adpr_option_schema(total %p) -> ADPR_ERR_INTERNAL", p);
        adpr_memory_info mem;
        s = L.nvml_memory((const char *)p, &mem, err, sizeof err);
        check(s == ADPR_ERR_INTERNAL, "adpr_nvml_memory(device %p) -> status  -- %d", p, s);
        check(L.kv_bpt((const adpr_kv_shape *)p, (uint64_t *)p, err, sizeof err) == ADPR_ERR_INTERNAL,
              "adpr_kv_bytes_per_token(%p, %p) -> status", p, p);
        check(L.size_kv((adpr_kv_budget *)p, NULL, 0, err, sizeof err) == ADPR_ERR_INTERNAL, "adpr_size_kv(%p) -> status", p);
        check(L.fill_kv((adpr_rank_state *)p, 10, 5, NULL, 0, 0, 0, err, sizeof err) == ADPR_ERR_INTERNAL,
              "adpr_rank_state_fill_kv(state %p) -> status", p);
        adpr_stats st;
        check(L.stats(r, (adpr_stats *)p, NULL, 0, NULL, 0, &ngroups, err, sizeof err) == ADPR_ERR_INTERNAL,
              "adpr_router_stats(stats %p) -> status", p);
        L.destroy(r);
        r = make_router();
        check(L.stats(r, &st, NULL, 0, NULL, 0, &ngroups, (char *)p, 64) == ADPR_OK, "adpr_router_stats(err %p) ok", p);
        // Receipts of a one-request decision over 2 ranks: 1 receipt, 2 candidates.
        int64_t nrc = 0, nc = 0;
        adpr_receipt rc[1];
        adpr_candidate cand[2];
        check(route_once(r, err, sizeof err) == ADPR_OK, "route before reading receipts");
        check(L.receipts(r, (adpr_receipt *)p, 1, cand, 2, &nrc, &nc, err, sizeof err) == ADPR_ERR_INTERNAL,
              "adpr_router_receipts(receipts %p) -> ADPR_ERR_INTERNAL", p);
        L.destroy(r);
        r = make_router();
        route_once(r, err, sizeof err);
        check(L.receipts(r, rc, 1, (adpr_candidate *)p, 2, &nrc, &nc, err, sizeof err) == ADPR_ERR_INTERNAL,
              "adpr_router_receipts(candidates %p) -> ADPR_ERR_INTERNAL", p);
        L.destroy(r);
        r = make_router();
        route_once(r, err, sizeof err);
        check(L.receipts(r, rc, 1, cand, 2, (int64_t *)p, &nc, err, sizeof err) == ADPR_ERR_INTERNAL,
              "adpr_router_receipts(total_receipts %p) -> ADPR_ERR_INTERNAL", p);
        L.destroy(r);
        r = make_router();
        route_once(r, err, sizeof err);
        int64_t need = 0;
        check(L.receipt_text(r, 0, (char *)p, 4096, &need, err, sizeof err) == ADPR_ERR_INTERNAL,
              "adpr_router_receipt_text(buf %p) -> ADPR_ERR_INTERNAL", p);
        L.destroy(r);
        r = make_router();
        route_once(r, err, sizeof err);
        check(L.receipt_text(r, 0, text, sizeof text, (int64_t *)p, err, sizeof err) == ADPR_ERR_INTERNAL,
              "adpr_router_receipt_text(total %p) -> ADPR_ERR_INTERNAL", p);
        L.destroy(r);
        r = make_router();
        int64_t total = 0, bytes = 0;
        int32_t ranks[2];
        adpr_binding bindings[1];
        char ids[8];
        ranks[0] = 0, ranks[1] = 1;
        check(L.set_pending(r, ranks, 2, err, sizeof err) == ADPR_OK, "two pending ranks to read");
        check(L.pending(r, (int32_t *)p, 2, &total, err, sizeof err) == ADPR_ERR_INTERNAL,
              "adpr_router_pending_warmup(ranks %p) -> ADPR_ERR_INTERNAL", p);
        L.destroy(r);
        r = make_router();
        check(L.pending(r, ranks, 2, (int64_t *)p, err, sizeof err) == ADPR_ERR_INTERNAL,
              "adpr_router_pending_warmup(total %p) -> ADPR_ERR_INTERNAL", p);
        L.destroy(r);
        r = make_router();
        check(L.set_pending(r, (const int32_t *)p, 2, err, sizeof err) == ADPR_ERR_INTERNAL,
              "adpr_router_set_pending_warmup(ranks %p) -> ADPR_ERR_INTERNAL", p);
        L.destroy(r);
        r = make_router();
        check(L.conversations(r, bindings, 1, ids, sizeof ids, (int64_t *)p, &bytes, err, sizeof err) == ADPR_ERR_INTERNAL,
              "adpr_router_conversations(total_bindings %p) -> ADPR_ERR_INTERNAL", p);
        L.destroy(r);
        r = make_router();
        check(L.route(r, NULL, &out, (char *)p, 64) == ADPR_ERR_INVALID_ARGUMENT,
              "a failing call with err buffer %p reports its status without writing", p);
        if ((uintptr_t)p < 4096) {
            // Near-NULL pointers are refused by name before Go holds them
            // (a fault on one could abort the host: see capi/abi.c), the
            // arguments in C and the pointers inside structs as read.
            struct {
                const char *what;
                adpr_status s;
            } refused[4];
            int64_t n4 = 0;
            err[0] = 0;
            refused[0].s = L.receipt_text(r, 0, (char *)p, 4096, &n4, err, sizeof err);
            refused[0].what = strstr(err, "buf = ") && strstr(err, "near NULL") ? "ok" : err;
            err[0] = 0;
            refused[1].s = L.route(r, &bad_states, &out, err, sizeof err);
            refused[1].what = strstr(err, "batch.states = ") && strstr(err, "near NULL") ? "ok" : err;
            err[0] = 0;
            refused[2].s = L.create(bad_opt, 1, &made, err, sizeof err);
            refused[2].what = strstr(err, "options[0].value = ") && strstr(err, "near NULL") ? "ok" : err;
            err[0] = 0;
            refused[3].s = L.digest(r, (uint64_t *)p);
            refused[3].what = "ok";
            for (int k = 0; k < 4; k++)
                check(refused[k].s == ADPR_ERR_INTERNAL && !strcmp(refused[k].what, "ok"),
                      "near-NULL %p refused by name (case %d)  -- %d \"%s\"", p, k, refused[k].s, refused[k].what);
        }
    }
    int64_t ngroups;
    check(L.stats(r, (adpr_stats *)rodata, NULL, 0, NULL, 0, &ngroups, err, sizeof err) == ADPR_ERR_INTERNAL,
          "adpr_router_stats(stats in read-only memory) -> status");
    L.destroy(r);
    r = make_router();
    check(route_once(r, err, sizeof err) == ADPR_OK, "after all that a new router routes");
    L.destroy(r);
}

static void test_fork(void) {
    char err[512];
    adpr_router r = make_router();
    check(route_once(r, err, sizeof err) == ADPR_OK, "parent routes before fork");
    pid_t pid = fork();
    if (pid == 0) {
        // The child: every call must come back at once with ADPR_ERR_FORKED.
        int bad = 0;
        for (size_t i = 0; i < NEXPORTS; i++) {
            err[0] = 0;
            adpr_status s = call(exports[i].name, r, err, sizeof err);
            if (s != ADPR_ERR_FORKED) {
                fprintf(stderr, "child: %s returned %d\n", exports[i].name, s);
                bad = 1;
            }
        }
        err[0] = 0;
        route_once(r, err, sizeof err);
        if (strstr(err, "spawn") == NULL) {
            fprintf(stderr, "child: message %s does not name spawn\n", err);
            bad = 1;
        }
        _exit(bad ? 3 : 0);
    }
    int status = 0;
    // The child makes only library calls that return before entering Go; if
    // one entered the runtime it could hang, so wait with a deadline.
    int waited = 0;
    for (int i = 0; i < 100 && !waited; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid) waited = 1;
        else usleep(100000);
    }
    if (!waited) kill(pid, SIGKILL), waitpid(pid, &status, 0);
    check(waited && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "child after fork: every export returns ADPR_ERR_FORKED naming spawn  -- waited %d status %d", waited, status);
    for (int i = 0; i < 1000; i++) route_once(r, err, sizeof err);
    check(route_once(r, err, sizeof err) == ADPR_OK, "parent still routes after the fork");
    L.destroy(r);
}

// Resident set size in KiB (Linux /proc/self/statm).
static long rss_kib(void) {
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL) return -1;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
    fclose(f);
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

static void test_soak(long rounds) {
    char err[256];
    long calls = 0, warm = 0, peak = 0;
    adpr_router r = make_router();
    for (long i = 0; i < rounds; i++) {
        for (size_t k = 0; k < NEXPORTS; k++) {
            if (strcmp(exports[k].name, "adpr_router_destroy") != 0) call(exports[k].name, r, err, sizeof err);
            calls++;
        }
        adpr_batch bad = {states, 2, 1, &request, tokens, 4, NULL, 0, NULL, 0}; // max active 0
        adpr_route_result out = {0};
        if (L.route(r, &bad, &out, err, sizeof err) != ADPR_ERR_INVALID_ARGUMENT) {
            check(0, "soak round %ld: an invalid batch was accepted", i);
            return;
        }
        calls++;
        if (i % 64 == 63) { // churn routers
            L.destroy(r);
            r = make_router();
            calls += 2;
        }
        long rss = rss_kib();
        if (i == rounds / 10) warm = rss;
        if (rss > peak) peak = rss;
        if (i % (rounds / 10 + 1) == 0) printf("round %ld: %ld calls, rss %ld KiB\n", i, calls, rss);
    }
    L.destroy(r);
    long end = rss_kib();
    printf("%ld calls; rss after warm-up %ld KiB, peak %ld KiB, end %ld KiB\n", calls, warm, peak, end);
    check(peak <= warm + warm / 5 + 4096, "resident memory flat after warm-up (peak within 20%% + 4 MiB)");
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[2], "soak")) {
        argc = 3;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: %s LIBRARY inject|pointers|fork|soak N\n", argv[0]);
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (lib == NULL) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
    L.create = sym(lib, "adpr_router_create");
    L.destroy = sym(lib, "adpr_router_destroy");
    L.route = sym(lib, "adpr_route");
    L.digest = sym(lib, "adpr_router_state_digest");
    L.stats = sym(lib, "adpr_router_stats");
    L.tokens_read = sym(lib, "adpr_router_tokens_read");
    L.receipts = sym(lib, "adpr_router_receipts");
    L.receipt_text = sym(lib, "adpr_router_receipt_text");
    L.hashes = sym(lib, "adpr_block_hashes");
    L.pending = sym(lib, "adpr_router_pending_warmup");
    L.set_pending = sym(lib, "adpr_router_set_pending_warmup");
    L.conversations = sym(lib, "adpr_router_conversations");
    L.preset = sym(lib, "adpr_preset_options");
    L.schema = sym(lib, "adpr_option_schema");
    L.router_options = sym(lib, "adpr_router_options");
    L.nvml_init = sym(lib, "adpr_nvml_init");
    L.nvml_shutdown = sym(lib, "adpr_nvml_shutdown");
    L.nvml_count = sym(lib, "adpr_nvml_device_count");
    L.nvml_memory = sym(lib, "adpr_nvml_memory");
    L.kv_bpt = sym(lib, "adpr_kv_bytes_per_token");
    L.size_kv = sym(lib, "adpr_size_kv");
    L.fill_kv = sym(lib, "adpr_rank_state_fill_kv");
    if (!strcmp(argv[2], "inject")) {
        L.inject = sym(lib, "adpr_test_inject_panic");
        test_inject();
    } else if (!strcmp(argv[2], "pointers")) {
        check(dlsym(lib, "adpr_test_inject_panic") == NULL, "the release library has no fault injection");
        test_pointers();
    } else if (!strcmp(argv[2], "fork")) {
        test_fork();
    } else if (!strcmp(argv[2], "soak")) {
        test_soak(argv[3] ? atol(argv[3]) : 100000);
    } else {
        fprintf(stderr, "unknown mode %s\n", argv[2]);
        return 2;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
