// The public functions of include/adprouter.h, defined in C with the
// header's own prototypes, so that the compiler checks the header against the
// implementation: a parameter that changes on one side and not the other
// fails the build. Each forwards to its Go export adprgo_* (declared in
// cgo's _cgo_export.h from the Go signatures, which the compiler checks
// here too), after refusing to run in a child after fork().
//
// Why the fork check lives here: the Go runtime does not survive fork()
// without exec (its other threads are gone, and the child hangs as soon as
// the garbage collector needs them). A pthread_atfork child handler marks the
// child, and every call returns ADPR_ERR_FORKED before it enters Go.
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "adprouter.h"
#include "_cgo_export.h"

// capi.c: static text.
const char *capi_version(void);
const char *capi_status_text(int32_t status);

static volatile int forked;

static void mark_forked(void) { forked = 1; }

__attribute__((constructor)) static void adpr_register_atfork(void) {
    pthread_atfork(NULL, NULL, mark_forked);
}

static const char forked_message[] =
    "adprouter: called in a child process after fork() without exec; the Go "
    "runtime inside the library does not survive fork. Create workers with "
    "exec (Python multiprocessing: the \"spawn\" or \"forkserver\" start "
    "method) and load the library there";

static adpr_status refuse_forked(char *err, size_t err_len) {
    if (err != NULL && err_len > 0) {
        size_t n = sizeof forked_message - 1;
        if (n > err_len - 1) n = err_len - 1;
        memcpy(err, forked_message, n);
        err[n] = 0;
    }
    return ADPR_ERR_FORKED;
}

#define FORK_GUARD(err, err_len) \
    if (forked) return refuse_forked(err, err_len)

// Near-NULL pointers (1..4095: a field of a NULL struct pointer) never enter
// Go, where a fault on one could abort the host (why: capi/guard.go,
// minPointer). An argument that is one is refused with ADPR_ERR_INTERNAL,
// the status of a fault on a wild pointer; a near-NULL err buffer is passed
// on as NULL, so the call reports its status without a message.
#define NEAR_NULL(p) ((uintptr_t)(const void *)(p) - 1u < (uintptr_t)4095u)

#define ENTER(err, err_len)            \
    FORK_GUARD(err, err_len);          \
    if (NEAR_NULL(err)) err = NULL, err_len = 0

#define REFUSE_NEAR_NULL(arg, err, err_len) \
    if (NEAR_NULL(arg))                     \
    return adprgo_refuse_pointer((char *)__func__, (char *)#arg, (uintptr_t)(const void *)(arg), err, err_len)

uint32_t adpr_abi_version(void) { return ADPR_ABI_VERSION; }

const char *adpr_version(void) { return capi_version(); }

const char *adpr_strerror(adpr_status status) { return capi_status_text(status); }

adpr_status adpr_router_create(const adpr_option *options, int32_t num_options,
                               adpr_router *out, char *err, size_t err_len) {
    ENTER(err, err_len);
    REFUSE_NEAR_NULL(options, err, err_len);
    REFUSE_NEAR_NULL(out, err, err_len);
    return adprgo_router_create((adpr_option *)options, num_options, out, err, err_len);
}

adpr_status adpr_preset_options(const char *preset, const char *policy, char *out, int64_t capacity,
                                int64_t *total, char *err, size_t err_len) {
    ENTER(err, err_len);
    REFUSE_NEAR_NULL(preset, err, err_len);
    REFUSE_NEAR_NULL(policy, err, err_len);
    REFUSE_NEAR_NULL(out, err, err_len);
    REFUSE_NEAR_NULL(total, err, err_len);
    return adprgo_preset_options((char *)preset, (char *)policy, out, capacity, total, err, err_len);
}

adpr_status adpr_option_schema(char *out, int64_t capacity, int64_t *total, char *err, size_t err_len) {
    ENTER(err, err_len);
    REFUSE_NEAR_NULL(out, err, err_len);
    REFUSE_NEAR_NULL(total, err, err_len);
    return adprgo_option_schema(out, capacity, total, err, err_len);
}

adpr_status adpr_router_options(adpr_router router, char *out, int64_t capacity, int64_t *total,
                                char *err, size_t err_len) {
    ENTER(err, err_len);
    REFUSE_NEAR_NULL(out, err, err_len);
    REFUSE_NEAR_NULL(total, err, err_len);
    return adprgo_router_options(router, out, capacity, total, err, err_len);
}

adpr_status adpr_router_destroy(adpr_router router) {
    FORK_GUARD(NULL, 0);
    return adprgo_router_destroy(router);
}

adpr_status adpr_route(adpr_router router, const adpr_batch *batch,
                       adpr_route_result *result, char *err, size_t err_len) {
    ENTER(err, err_len);
    REFUSE_NEAR_NULL(batch, err, err_len);
    REFUSE_NEAR_NULL(result, err, err_len);
    return adprgo_route(router, (adpr_batch *)batch, result, err, err_len);
}

adpr_status adpr_router_state_digest(adpr_router router, uint64_t *out) {
    FORK_GUARD(NULL, 0);
    REFUSE_NEAR_NULL(out, NULL, 0);
    return adprgo_router_state_digest(router, out);
}

adpr_status adpr_router_tokens_read(adpr_router router, int32_t *out) {
    FORK_GUARD(NULL, 0);
    REFUSE_NEAR_NULL(out, NULL, 0);
    return adprgo_router_tokens_read(router, out);
}

adpr_status adpr_router_stats(adpr_router router, adpr_stats *stats,
                              adpr_rank_stats *ranks, int32_t num_ranks,
                              adpr_hot_group *groups, int64_t groups_capacity,
                              int64_t *total_groups, char *err, size_t err_len) {
    ENTER(err, err_len);
    REFUSE_NEAR_NULL(stats, err, err_len);
    REFUSE_NEAR_NULL(ranks, err, err_len);
    REFUSE_NEAR_NULL(groups, err, err_len);
    REFUSE_NEAR_NULL(total_groups, err, err_len);
    return adprgo_router_stats(router, stats, ranks, num_ranks, groups, groups_capacity, total_groups,
                               err, err_len);
}

adpr_status adpr_router_receipts(adpr_router router, adpr_receipt *receipts, int64_t receipts_capacity,
                                 adpr_candidate *candidates, int64_t candidates_capacity,
                                 int64_t *total_receipts, int64_t *total_candidates,
                                 char *err, size_t err_len) {
    ENTER(err, err_len);
    REFUSE_NEAR_NULL(receipts, err, err_len);
    REFUSE_NEAR_NULL(candidates, err, err_len);
    REFUSE_NEAR_NULL(total_receipts, err, err_len);
    REFUSE_NEAR_NULL(total_candidates, err, err_len);
    return adprgo_router_receipts(router, receipts, receipts_capacity, candidates, candidates_capacity,
                                  total_receipts, total_candidates, err, err_len);
}

adpr_status adpr_router_receipt_text(adpr_router router, int64_t index, char *buf, int64_t capacity,
                                     int64_t *total, char *err, size_t err_len) {
    ENTER(err, err_len);
    REFUSE_NEAR_NULL(buf, err, err_len);
    REFUSE_NEAR_NULL(total, err, err_len);
    return adprgo_router_receipt_text(router, index, buf, capacity, total, err, err_len);
}

adpr_status adpr_router_pending_warmup(adpr_router router, int32_t *ranks, int64_t capacity,
                                       int64_t *total, char *err, size_t err_len) {
    ENTER(err, err_len);
    REFUSE_NEAR_NULL(ranks, err, err_len);
    REFUSE_NEAR_NULL(total, err, err_len);
    return adprgo_router_pending_warmup(router, ranks, capacity, total, err, err_len);
}

adpr_status adpr_router_set_pending_warmup(adpr_router router, const int32_t *ranks,
                                           int64_t num_ranks, char *err, size_t err_len) {
    ENTER(err, err_len);
    REFUSE_NEAR_NULL(ranks, err, err_len);
    return adprgo_router_set_pending_warmup(router, (int32_t *)ranks, num_ranks, err, err_len);
}

adpr_status adpr_router_conversations(adpr_router router, adpr_binding *bindings,
                                      int64_t bindings_capacity, char *ids,
                                      int64_t ids_capacity, int64_t *total_bindings,
                                      int64_t *total_id_bytes, char *err, size_t err_len) {
    ENTER(err, err_len);
    REFUSE_NEAR_NULL(bindings, err, err_len);
    REFUSE_NEAR_NULL(ids, err, err_len);
    REFUSE_NEAR_NULL(total_bindings, err, err_len);
    REFUSE_NEAR_NULL(total_id_bytes, err, err_len);
    return adprgo_router_conversations(router, bindings, bindings_capacity, ids, ids_capacity,
                                       total_bindings, total_id_bytes, err, err_len);
}

adpr_status adpr_block_hashes(const int32_t *tokens, int64_t num_tokens,
                              int32_t tokens_per_block, uint64_t lora_id,
                              uint64_t cache_salt, uint64_t *out, int64_t capacity,
                              int64_t *total, char *err, size_t err_len) {
    ENTER(err, err_len);
    REFUSE_NEAR_NULL(tokens, err, err_len);
    REFUSE_NEAR_NULL(out, err, err_len);
    REFUSE_NEAR_NULL(total, err, err_len);
    return adprgo_block_hashes((int32_t *)tokens, num_tokens, tokens_per_block, lora_id,
                               cache_salt, out, capacity, total, err, err_len);
}

adpr_status adpr_nvml_init(char *err, size_t err_len) {
    ENTER(err, err_len);
    return adprgo_nvml_init(err, err_len);
}

adpr_status adpr_nvml_shutdown(char *err, size_t err_len) {
    ENTER(err, err_len);
    return adprgo_nvml_shutdown(err, err_len);
}

adpr_status adpr_nvml_device_count(int32_t *out, char *err, size_t err_len) {
    ENTER(err, err_len);
    REFUSE_NEAR_NULL(out, err, err_len);
    return adprgo_nvml_device_count(out, err, err_len);
}

adpr_status adpr_nvml_memory(const char *device, adpr_memory_info *out,
                             char *err, size_t err_len) {
    ENTER(err, err_len);
    REFUSE_NEAR_NULL(device, err, err_len);
    REFUSE_NEAR_NULL(out, err, err_len);
    return adprgo_nvml_memory((char *)device, out, err, err_len);
}

adpr_status adpr_kv_bytes_per_token(const adpr_kv_shape *shape, uint64_t *out,
                                    char *err, size_t err_len) {
    ENTER(err, err_len);
    REFUSE_NEAR_NULL(shape, err, err_len);
    REFUSE_NEAR_NULL(out, err, err_len);
    return adprgo_kv_bytes_per_token((adpr_kv_shape *)shape, out, err, err_len);
}

adpr_status adpr_size_kv(adpr_kv_budget *budget, char *reason, size_t reason_len,
                         char *err, size_t err_len) {
    ENTER(err, err_len);
    REFUSE_NEAR_NULL(budget, err, err_len);
    REFUSE_NEAR_NULL(reason, err, err_len);
    return adprgo_size_kv(budget, reason, reason_len, err, err_len);
}

adpr_status adpr_rank_state_fill_kv(adpr_rank_state *state, int64_t capacity_tokens,
                                    int64_t free_tokens, const char *device,
                                    uint64_t guard_band_bytes, uint64_t bytes_per_token,
                                    int32_t min_interval_ms, char *err, size_t err_len) {
    ENTER(err, err_len);
    REFUSE_NEAR_NULL(state, err, err_len);
    REFUSE_NEAR_NULL(device, err, err_len);
    return adprgo_rank_state_fill_kv(state, capacity_tokens, free_tokens, (char *)device,
                                     guard_band_bytes, bytes_per_token, min_interval_ms,
                                     err, err_len);
}
