// quickstart.cpp - route a small shared-system-prompt workload with the C++
// wrapper (include/adprouter.hpp) of libadprouter.
//
//   ./build.sh run        (builds the library and this, runs it and the Python quickstart)
//   installed: g++ -std=c++17 quickstart.cpp $(pkg-config --cflags --libs adprouter)
//              or examples/cpp/CMakeLists.txt (find_package(adprouter))
//
// Four attention-DP ranks, the kv_cache_aware policy with cold-start warmup,
// two routing iterations:
//   1. cold start: nothing is cached; warmup sends one request to every rank.
//   2. the ranks report what they cache (match_lens): system prompt A is on
//      every rank that served it, system prompt B only on the rank that did.
// It prints where each request went; examples/python/quickstart.py routes the
// same workload, explains every placement, and checks that this program's
// "summary:" line equals its own.
#include "adprouter.hpp"

#include <cstdio>
#include <set>
#include <string>
#include <vector>

constexpr int kRanks = 4;
constexpr int kMaxActive = 3;    // max_num_active_requests per rank
constexpr int kSystemLen = 512;  // both system prompts are 512 tokens
constexpr int kPrefix = 64;      // kv_cache_aware reads only a prompt's first 64 tokens

struct Prompt {
    uint64_t id;
    char system;  // 'A' or 'B': which system prompt it starts with
    int user_len; // tokens after the system prompt
};

// The ranks as the router sees them: load, and which system prompts they cache.
struct Cluster {
    std::vector<adpr_rank_state> states = std::vector<adpr_rank_state>(kRanks);  // zeroed: KV capacity unknown
    std::vector<std::set<char>> cached = std::vector<std::set<char>>(kRanks);
    Cluster() {
        for (int r = 0; r < kRanks; r++) states[r].rank = r;
    }
};

// Routes one iteration, prints it, appends it to summary, and updates the
// cluster as if every request were still running.
static void iteration(adprouter::router &router, Cluster &c, const std::vector<Prompt> &prompts, bool matches,
                      std::string &summary) {
    // The buffers a real executor would reuse every iteration; route() itself allocates nothing.
    std::vector<adpr_request> reqs(prompts.size());
    std::vector<int32_t> tokens;  // the first 64 tokens of each prompt, back to back
    std::vector<int32_t> match;   // what each rank's radix-tree probe would report
    for (size_t i = 0; i < prompts.size(); i++) {
        const Prompt &p = prompts[i];
        reqs[i].id = p.id;
        reqs[i].token_offset = (int64_t)tokens.size();
        reqs[i].token_count = kPrefix;
        reqs[i].num_tokens = kSystemLen + p.user_len;
        reqs[i].target_rank = ADPR_NO_TARGET;
        reqs[i].relax = 1;
        for (int k = 0; k < kPrefix; k++) tokens.push_back((p.system == 'A' ? 1000 : 2000) + k);
        for (int r = 0; matches && r < kRanks; r++) match.push_back(c.cached[r].count(p.system) ? kSystemLen : 0);
    }
    std::vector<int32_t> rank(prompts.size()), offsets(kRanks + 1);
    std::vector<uint64_t> order(prompts.size());
    adprouter::summary s =
        router.route({c.states, reqs, kMaxActive, tokens, {}, match}, {rank, order, offsets});

    std::printf("  placement (rank: ids in order):");
    for (int r = 0; r < kRanks; r++) {
        std::string ids;
        for (int32_t k = offsets[r]; k < offsets[r + 1]; k++) ids += (k > offsets[r] ? "," : "") + std::to_string(order[k]);
        std::printf("  %d:[%s]", r, ids.c_str());
        summary += " r" + std::to_string(r) + "[" + ids + "]";
    }
    std::printf("   expected_num_active_requests %d, unassigned %d\n", s.expected, s.num_unassigned);
    for (size_t i = 0; i < prompts.size(); i++) {
        if (rank[i] < 0) continue;
        c.states[rank[i]].num_active_requests++;
        c.states[rank[i]].num_active_tokens += kSystemLen + prompts[i].user_len;
        c.cached[rank[i]].insert(prompts[i].system);
    }
}

int main() {
    try {
        adprouter::check_abi();
        std::printf("adprouter %s (header %s)\n", adprouter::version(), ADPR_VERSION);
        // The same options on every rank: every rank reaches the same decision.
        adprouter::options o;
        o.dp_size = kRanks;
        o.policy = adprouter::policy::kv_cache_aware;
        o.warmup = adprouter::warmup::once;
        adprouter::router router(o);

        Cluster cluster;
        std::string summary = "summary:it1";
        std::printf("iteration 1: cold start, nothing cached, warmup on (4 ranks, max %d active requests each)\n",
                    kMaxActive);
        iteration(router, cluster, {{1, 'A', 88}, {2, 'A', 128}, {3, 'B', 300}, {4, 'A', 188}, {5, 'A', 68}, {6, 'A', 108}},
                  false, summary);
        std::printf("iteration 2: the ranks report cached system prompts (prompt B only where it was served)\n");
        summary += " | it2";
        iteration(router, cluster, {{7, 'A', 100}, {8, 'B', 40}, {9, 'A', 150}, {10, 'B', 90}, {11, 'A', 60}, {12, 'B', 200}},
                  true, summary);
        std::printf("\n%s\n", summary.c_str());

        // Errors are exceptions with the library's status and message.
        try {
            adprouter::options bad;
            bad.dp_size = 0;
            adprouter::router r(bad);
        } catch (const adprouter::error &e) {
            std::printf("dp_size 0 is refused: status %d (%s): %s\n", e.status(), adpr_strerror(e.status()), e.what());
        }
        return 0;
    } catch (const adprouter::error &e) {
        std::fprintf(stderr, "adprouter: %s (status %d)\n", e.what(), e.status());
        return 1;
    }
}
