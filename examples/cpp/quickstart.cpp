// quickstart.cpp - route a small shared-system-prompt workload with the C++
// wrapper (include/adprouter.hpp) and print why each request went where it
// did, in the router's own words (its receipts).
//
//   ./build.sh run        (builds the library and this, runs it and the Python quickstart)
//   installed: g++ -std=c++17 quickstart.cpp $(pkg-config --cflags --libs adprouter)
//              or examples/cpp/CMakeLists.txt (find_package(adprouter))
//
// Four attention-DP ranks, kv_cache_aware with cold-start warmup, two
// iterations: first nothing is cached, so warmup sends one request to every
// rank; then the ranks report which system prompt (A or B) they cache.
// examples/python/quickstart.py prints the same.
#include "adprouter.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <set>
#include <vector>

struct Prompt {
    uint64_t id;
    char system;   // 'A' or 'B': which 512-token system prompt it starts with
    int user_len;  // tokens after it
};

int main() try {
    constexpr int kRanks = 4, kMaxActive = 3, kSystem = 512, kPrefix = 64;  // the policy reads 64 tokens
    const std::vector<std::vector<Prompt>> iterations = {
        {{1, 'A', 88}, {2, 'A', 128}, {3, 'B', 300}, {4, 'A', 188}, {5, 'A', 68}, {6, 'A', 108}},
        {{7, 'A', 100}, {8, 'B', 40}, {9, 'A', 150}, {10, 'B', 90}, {11, 'A', 60}, {12, 'B', 200}}};
    adprouter::check_abi();
    std::printf("adprouter %s (header %s)\n", adprouter::version(), ADPR_VERSION);
    adprouter::options o;  // the same options on every rank: every rank reaches the same decision
    o.dp_size = kRanks;
    o.policy = adprouter::policy::kv_cache_aware;
    o.warmup = adprouter::warmup::once;
    o.explain = true;
    adprouter::router router(o);

    std::vector<adpr_rank_state> states(kRanks);  // zeroed: KV capacity unknown
    std::vector<std::set<char>> cached(kRanks);
    for (int r = 0; r < kRanks; r++) states[r].rank = r;
    for (size_t it = 0; it < iterations.size(); it++) {
        std::printf("iteration %zu\n", it + 1);
        const auto &prompts = iterations[it];
        std::vector<adpr_request> reqs(prompts.size());
        std::vector<int32_t> tokens, match;  // each prompt's first 64 tokens; what each rank's probe reports
        for (size_t i = 0; i < prompts.size(); i++) {
            const Prompt &p = prompts[i];
            reqs[i] = {p.id, (int64_t)tokens.size(), kPrefix, kSystem + p.user_len, 0, 0, ADPR_NO_TARGET, 1, 0, 0, 0};
            for (int k = 0; k < kPrefix; k++) tokens.push_back((p.system == 'A' ? 1000 : 2000) + k);
            for (int r = 0; r < kRanks; r++) match.push_back(cached[r].count(p.system) ? kSystem : 0);
        }
        std::vector<int32_t> rank(prompts.size());
        router.route({states, reqs, kMaxActive, tokens, {}, match}, {rank, {}, {}});

        // In the order the router placed them: each receipt's loads include the earlier ones.
        adprouter::receipts why = router.receipts();
        std::vector<size_t> order(why.items.size());
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
            return (uint32_t)why.items[a].step < (uint32_t)why.items[b].step;  // unplaced (-1) last
        });
        for (size_t i : order) std::printf("%s\n", why.text[i].c_str());

        for (size_t i = 0; i < prompts.size(); i++) {  // the requests keep running
            if (rank[i] < 0) continue;
            states[rank[i]].num_active_requests++;
            states[rank[i]].num_active_tokens += kSystem + prompts[i].user_len - match[i * kRanks + rank[i]];
            cached[rank[i]].insert(prompts[i].system);
        }
    }
    return 0;
} catch (const adprouter::error &e) {
    std::fprintf(stderr, "adprouter: %s (status %d)\n", e.what(), e.status());
    return 1;
}
