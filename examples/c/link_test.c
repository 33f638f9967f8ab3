/* link_test.c - plain C11 program linked with -ladprouter (no dlopen).
 *
 *   gcc -std=c11 -Wall -Wextra -Iinclude -o build/link_test examples/c/link_test.c \
 *       -Lbuild -ladprouter -Wl,-rpath,$PWD/build
 *   build/link_test
 *
 * Routes one small batch with the default policy over 2 idle ranks: request 1
 * asks for rank 1 and gets it; request 2 then goes to rank 0, the only rank
 * under the fair share ceil(2 / 2) = 1, which is also expected. Exit status 0
 * on success. (The routing contract's worked examples are checked by the
 * fixtures in testdata/routing, through the C ABI by capi/testdata/harness.cpp.)
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

    adpr_option opts[] = {{"policy", "default"}, {"dp_size", "2"}};
    adpr_router router = 0;
    char err[256];
    adpr_status s = adpr_router_create(opts, 2, &router, err, sizeof err);
    if (s != ADPR_OK) {
        fprintf(stderr, "adpr_router_create: %s (%s)\n", err, adpr_strerror(s));
        return 1;
    }

    adpr_rank_state states[2];
    memset(states, 0, sizeof states); /* KV fields zero: capacity unknown */
    for (int r = 0; r < 2; r++) states[r].rank = r;

    adpr_request reqs[2];
    memset(reqs, 0, sizeof reqs);
    for (int i = 0; i < 2; i++) {
        reqs[i].id = (uint64_t)(i + 1);
        reqs[i].num_tokens = 100; /* the default policy reads no tokens */
        reqs[i].target_rank = ADPR_NO_TARGET;
        reqs[i].relax = 1;
    }
    reqs[0].target_rank = 1;

    adpr_batch batch;
    memset(&batch, 0, sizeof batch);
    batch.states = states;
    batch.num_states = 2;
    batch.requests = reqs;
    batch.num_requests = 2;
    batch.max_num_active_requests = 8;

    int32_t rank[2], offsets[3];
    uint64_t order[2];
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

    /* rank 0: [2], rank 1: [1] */
    int ok = res.expected == 1 && res.num_unassigned == 0 && offsets[0] == 0 && offsets[1] == 1 && offsets[2] == 2 &&
             order[0] == 2 && order[1] == 1 && rank[0] == 1 && rank[1] == 0;
    printf("libadprouter %s linked with -ladprouter: rank 0 [%llu] rank 1 [%llu] expected %d: %s\n", adpr_version(),
           (unsigned long long)order[0], (unsigned long long)order[1], res.expected,
           ok ? "ok" : "WRONG (want rank 0 [2] rank 1 [1] expected 1)");

    if (adpr_router_destroy(router) != ADPR_OK || adpr_router_destroy(router) != ADPR_ERR_INVALID_HANDLE) {
        fprintf(stderr, "destroy did not behave as documented\n");
        return 1;
    }
    return ok ? 0 : 1;
}
