/* link_test.c - plain C11 program linked with -ladprouter (no dlopen).
 *
 *   gcc -std=c11 -Wall -Wextra -Iinclude -o build/link_test examples/c/link_test.c \
 *       -Lbuild -ladprouter -Wl,-rpath,$PWD/build
 *   build/link_test
 *
 * Routes ROUTING.md's worked example 7 (kv_cache_aware defaults, 4 idle
 * ranks, max 100 active requests, eight 10-token requests with ids 0..7) and
 * checks [3,5] [2,7] [0,4] [1,6], expected 4. Exit status 0 on success.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "adprouter.h"

int main(void) {
    if (adpr_abi_version() != ADPR_ABI_VERSION) {
        fprintf(stderr, "ABI version %u, header %d\n", (unsigned)adpr_abi_version(), ADPR_ABI_VERSION);
        return 1;
    }

    adpr_option opts[] = {{"policy", "kv_cache_aware"}, {"dp_size", "4"}};
    adpr_router router = 0;
    char err[256];
    adpr_status s = adpr_router_create(opts, 2, &router, err, sizeof err);
    if (s != ADPR_OK) {
        fprintf(stderr, "adpr_router_create: %s (%s)\n", err, adpr_strerror(s));
        return 1;
    }

    adpr_rank_state states[4];
    memset(states, 0, sizeof states); /* KV fields zero: capacity unknown */
    for (int r = 0; r < 4; r++) states[r].rank = r;

    int32_t tokens[8 * 10];
    adpr_request reqs[8];
    memset(reqs, 0, sizeof reqs);
    for (int i = 0; i < 8; i++) {
        for (int k = 0; k < 10; k++) tokens[i * 10 + k] = k; /* prompt 0..9 */
        reqs[i].id = (uint64_t)i;
        reqs[i].token_offset = i * 10;
        reqs[i].token_count = 10;
        reqs[i].target_rank = ADPR_NO_TARGET;
        reqs[i].relax = 1;
    }

    adpr_batch batch;
    memset(&batch, 0, sizeof batch);
    batch.states = states;
    batch.num_states = 4;
    batch.requests = reqs;
    batch.num_requests = 8;
    batch.tokens = tokens;
    batch.tokens_len = 8 * 10;
    batch.max_num_active_requests = 100;

    int32_t rank[8], offsets[5];
    uint64_t order[8];
    adpr_route_result res;
    memset(&res, 0, sizeof res);
    res.request_rank = rank;
    res.order = order;
    res.rank_offsets = offsets;
    s = adpr_route(router, &batch, &res, err, sizeof err);
    if (s != ADPR_OK) {
        fprintf(stderr, "adpr_route: %s (%s)\n", err, adpr_strerror(s));
        return 1;
    }

    static const uint64_t want[4][2] = {{3, 5}, {2, 7}, {0, 4}, {1, 6}};
    int ok = res.expected == 4 && res.num_unassigned == 0 && offsets[4] == 8;
    for (int r = 0; r < 4 && ok; r++) {
        ok = offsets[r + 1] - offsets[r] == 2 && order[offsets[r]] == want[r][0] && order[offsets[r] + 1] == want[r][1];
        for (int j = 0; j < 2 && ok; j++) ok = rank[want[r][j]] == r;
    }
    printf("libadprouter %s linked with -ladprouter: example 7 ->", adpr_version());
    for (int r = 0; r < 4; r++) {
        printf(" [");
        for (int k = offsets[r]; k < offsets[r + 1]; k++) printf("%s%llu", k > offsets[r] ? "," : "", (unsigned long long)order[k]);
        printf("]");
    }
    printf(" expected %d: %s\n", res.expected, ok ? "ok" : "WRONG (want [3,5] [2,7] [0,4] [1,6] expected 4)");

    if (adpr_router_destroy(router) != ADPR_OK || adpr_router_destroy(router) != ADPR_ERR_INVALID_HANDLE) {
        fprintf(stderr, "destroy did not behave as documented\n");
        return 1;
    }
    return ok ? 0 : 1;
}
