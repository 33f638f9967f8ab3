// quickstart.cpp - route a small shared-system-prompt workload with adprouter.
//
//   ./build.sh run                      (builds the library and runs this)
//   g++ -std=c++17 -O2 -Wall -Wextra -Iinclude -o build/quickstart examples/cpp/quickstart.cpp -ldl
//   build/quickstart build/libadprouter.so
//
// Four attention-DP ranks, the kv_cache_aware policy with cold-start warmup,
// two routing iterations:
//   1. cold start: nothing is cached; warmup sends one request to every rank.
//   2. the ranks report what they cache (match_lens): system prompt A is on
//      every rank that served it, system prompt B only on the rank that did.
// For every request the program prints the rank the library chose and an
// explanation of why, recomputed here from the formula in ROUTING.md.

#include <dlfcn.h>

#include "adprouter.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

// The library is loaded at run time; these pointers are its functions.
static decltype(&adpr_router_create) router_create;
static decltype(&adpr_router_destroy) router_destroy;
static decltype(&adpr_route) route;

constexpr int kRanks = 4;
constexpr int kMaxActive = 3;      // max_num_active_requests per rank
constexpr int kSystemLen = 512;    // both system prompts are 512 tokens
constexpr double kBeta = 1.0;      // load_balance_weight (default)
constexpr double kThreshold = 0.1; // match_rate_threshold (default)
constexpr double kMultiplier = 2.0;// fair_share_multiplier (default)

struct Request {
    uint64_t id;
    char prompt;   // 'A' or 'B': which system prompt it starts with
    int user_len;  // tokens after the system prompt
    std::vector<int32_t> tokens;
};

static Request make_request(uint64_t id, char prompt, int user_len) {
    Request q{id, prompt, user_len, {}};
    for (int k = 0; k < kSystemLen; k++) q.tokens.push_back((prompt == 'A' ? 1000 : 2000) + k);
    for (int k = 0; k < user_len; k++) q.tokens.push_back(50000 + (int32_t)id * 1000 + k);
    return q;
}

// What the ranks look like before a decision.
struct Cluster {
    std::vector<int> active = std::vector<int>(kRanks, 0);
    std::vector<int64_t> tokens = std::vector<int64_t>(kRanks, 0);
    std::vector<std::set<char>> cached = std::vector<std::set<char>>(kRanks);  // system prompts in each rank's KV cache
};

// --- The explanation ---------------------------------------------------------
// Not the library: a replay of ROUTING.md's kv_cache_aware steps, used only to
// say WHY the library placed each request where it did.

static std::set<int> g_pending_warmup = {0, 1, 2, 3};  // cold_start_warmup: ranks not yet warmed

static void explain(const Cluster &c, const std::vector<Request> &reqs, const std::vector<int32_t> &match,
                    const std::vector<int32_t> &lib_rank, int *disagreements) {
    std::vector<int> count = c.active;
    std::vector<double> tokens(c.tokens.begin(), c.tokens.end());
    auto m = [&](size_t i, int r) { return match.empty() ? 0 : match[i * kRanks + r]; };

    // 1. Warmup: each request without a target goes to the lowest rank that
    //    has not been warmed yet, while there is one.
    std::vector<size_t> rest;
    for (size_t i = 0; i < reqs.size(); i++) {
        if (!g_pending_warmup.empty() && count[*g_pending_warmup.begin()] < kMaxActive) {
            int r = *g_pending_warmup.begin();
            g_pending_warmup.erase(r);
            count[r]++;
            tokens[r] += std::max((int)reqs[i].tokens.size() - m(i, r), 0);
            std::printf("  request %2llu (%zu tokens, prompt %c) -> rank %d   why: cold-start warmup, rank %d had not "
                        "been warmed yet%s\n",
                        (unsigned long long)reqs[i].id, reqs[i].tokens.size(), reqs[i].prompt, lib_rank[i], r,
                        lib_rank[i] == r ? "" : "   ** the library disagrees **");
            *disagreements += lib_rank[i] != r;
        } else {
            rest.push_back(i);
        }
    }
    if (rest.empty()) return;
    if (g_pending_warmup.empty() && rest.size() == reqs.size())
        std::printf("  warmup: every rank is already warmed, so every request is scored\n");

    // 2. Group requests that share their first 64 tokens; longer prompts first.
    std::stable_sort(rest.begin(), rest.end(), [&](size_t x, size_t y) {
        const auto &a = reqs[x].tokens, &b = reqs[y].tokens;
        size_t na = std::min<size_t>(a.size(), 64), nb = std::min<size_t>(b.size(), 64);
        if (!std::equal(a.begin(), a.begin() + na, b.begin(), b.begin() + nb))
            return std::lexicographical_compare(a.begin(), a.begin() + na, b.begin(), b.begin() + nb);
        return a.size() > b.size();
    });

    // 3. Soft cap: expected = min(max(ceil(multiplier * fair share), busiest), max active).
    int sum = (int)rest.size(), busiest = 0;
    for (int r = 0; r < kRanks; r++) sum += count[r], busiest = std::max(busiest, count[r]);
    int fair = (sum + kRanks - 1) / kRanks;
    int expected = std::min(std::max((int)std::ceil(kMultiplier * fair), busiest), kMaxActive);
    std::printf("  soft cap for the rest: fair share %d x %.1f, capped at max_num_active_requests -> %d per rank\n", fair,
                kMultiplier, expected);

    // 4. Each request: the eligible rank with the lowest
    //    score = (n - match) + beta * tokens[r] / sum(tokens) * n.
    for (size_t i : rest) {
        const Request &q = reqs[i];
        int n = (int)q.tokens.size(), best_match = 0;
        double denom = 0;
        for (int r = 0; r < kRanks; r++)
            if (count[r] < expected) denom += tokens[r], best_match = std::max(best_match, m(i, r));
        denom = std::max(std::max(denom, (double)n), 1.0);
        bool gate = (double)best_match / std::max(n, 1) > kThreshold;
        std::printf("  request %2llu (%d tokens, prompt %c) -> rank %d   why: cache affinity %s (best match %d/%d = %.2f %s %.1f)\n",
                    (unsigned long long)q.id, n, q.prompt, lib_rank[i], gate ? "ON" : "off", best_match, n,
                    (double)best_match / n, gate ? ">" : "<=", kThreshold);
        std::printf("        rank  match    load term   score = (n - match) + load term\n");
        double best_score = 0, best_tokens = 0;
        std::vector<int> winners;
        std::vector<double> score(kRanks);
        for (int r = 0; r < kRanks; r++) {
            if (count[r] >= expected) {
                std::printf("        %4d   full (%d of %d requests)\n", r, count[r], expected);
                continue;
            }
            double load = kBeta * (tokens[r] / denom * n);
            score[r] = (n - (gate ? m(i, r) : 0)) + load;
            std::printf("        %4d  %5d  %11.1f  %14.1f%s\n", r, m(i, r), load, score[r], r == lib_rank[i] ? "   <- chosen" : "");
            if (winners.empty() || score[r] < best_score || (score[r] == best_score && tokens[r] < best_tokens)) {
                winners = {r};
                best_score = score[r];
                best_tokens = tokens[r];
            } else if (score[r] == best_score && tokens[r] == best_tokens) {
                winners.push_back(r);
            }
        }
        bool agrees = std::find(winners.begin(), winners.end(), lib_rank[i]) != winners.end();
        if (winners.size() > 1 && agrees)
            std::printf("        tie on the lowest score: the seeded shuffle (random.Random(%llu)) picked rank %d\n",
                        (unsigned long long)q.id, lib_rank[i]);
        if (!agrees) std::printf("        ** the explanation expected rank %d; the library disagrees **\n", winners[0]);
        *disagreements += !agrees;
        int r = lib_rank[i];
        if (r < 0) continue;
        count[r]++;
        tokens[r] += std::max(n - m(i, r), 0);
    }
}

// --- Routing through the library ---------------------------------------------

// Routes one iteration, prints it, and updates the cluster as if every request
// were still running.
static bool run_iteration(adpr_router router, Cluster &c, const std::vector<Request> &reqs, bool with_matches,
                          std::string &summary, int *disagreements) {
    std::vector<adpr_rank_state> states(kRanks);
    std::memset(states.data(), 0, states.size() * sizeof states[0]);  // zeroed KV fields = capacity unknown
    for (int r = 0; r < kRanks; r++) {
        states[r].rank = r;
        states[r].num_active_requests = c.active[r];
        states[r].num_active_tokens = c.tokens[r];
    }
    // The kv_cache_aware policy reads only the first 64 tokens of a prompt:
    // pass those plus the full length in num_tokens.
    std::vector<adpr_request> rs;
    std::vector<int32_t> token_buf;
    for (const Request &q : reqs) {
        adpr_request r{};
        r.id = q.id;
        r.token_offset = (int64_t)token_buf.size();
        r.token_count = 64;
        r.num_tokens = (int64_t)q.tokens.size();
        r.target_rank = ADPR_NO_TARGET;
        r.relax = 1;
        token_buf.insert(token_buf.end(), q.tokens.begin(), q.tokens.begin() + 64);
        rs.push_back(r);
    }
    // What each rank's radix-tree probe would report: the system prompt it caches.
    std::vector<int32_t> match;
    if (with_matches)
        for (const Request &q : reqs)
            for (int r = 0; r < kRanks; r++) match.push_back(c.cached[r].count(q.prompt) ? kSystemLen : 0);

    adpr_batch batch{};
    batch.states = states.data();
    batch.num_states = kRanks;
    batch.requests = rs.data();
    batch.num_requests = (int32_t)rs.size();
    batch.tokens = token_buf.data();
    batch.tokens_len = (int64_t)token_buf.size();
    batch.match_lens = with_matches ? match.data() : nullptr;
    batch.max_num_active_requests = kMaxActive;

    std::vector<int32_t> rank(reqs.size()), offsets(kRanks + 1);
    std::vector<uint64_t> order(reqs.size());
    adpr_route_result result{};
    result.request_rank = rank.data();
    result.order = order.data();
    result.rank_offsets = offsets.data();
    char err[256];
    if (route(router, &batch, &result, err, sizeof err) != ADPR_OK) {
        std::fprintf(stderr, "adpr_route: %s\n", err);
        return false;
    }

    std::printf("  ranks before:");
    for (int r = 0; r < kRanks; r++) {
        std::string cached;
        for (char p : c.cached[r]) cached += p;
        std::printf("  [%d] %d req %lld tok cache{%s}", r, c.active[r], (long long)c.tokens[r], cached.c_str());
    }
    std::printf("\n  library placement (rank: ids in order):");
    for (int r = 0; r < kRanks; r++) {
        std::string ids;
        for (int32_t k = offsets[r]; k < offsets[r + 1]; k++) ids += (k > offsets[r] ? "," : "") + std::to_string(order[k]);
        std::printf("  %d:[%s]", r, ids.c_str());
        summary += " r" + std::to_string(r) + "[" + ids + "]";
    }
    std::printf("   expected_num_active_requests %d, unassigned %d\n", result.expected, result.num_unassigned);
    std::printf("  explanation (recomputed from ROUTING.md, not by the library):\n");
    explain(c, reqs, match, rank, disagreements);

    for (size_t i = 0; i < reqs.size(); i++) {
        if (rank[i] < 0) continue;
        c.active[rank[i]]++;
        c.tokens[rank[i]] += (int64_t)reqs[i].tokens.size();
        c.cached[rank[i]].insert(reqs[i].prompt);
    }
    return true;
}

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "build/libadprouter.so";
    void *lib = dlopen(path, RTLD_NOW);
    if (!lib) {
        std::fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    router_create = reinterpret_cast<decltype(router_create)>(dlsym(lib, "adpr_router_create"));
    router_destroy = reinterpret_cast<decltype(router_destroy)>(dlsym(lib, "adpr_router_destroy"));
    route = reinterpret_cast<decltype(route)>(dlsym(lib, "adpr_route"));
    if (!router_create || !router_destroy || !route) {
        std::fprintf(stderr, "%s is not libadprouter\n", path);
        return 1;
    }

    // The same options on every rank: every rank reaches the same decision.
    adpr_option opts[] = {
        {"policy", "kv_cache_aware"}, {"dp_size", "4"}, {"cold_start_warmup", "true"},
        {"load_balance_weight", "1.0"}, {"match_rate_threshold", "0.1"}, {"fair_share_multiplier", "2.0"},
    };
    adpr_router router = 0;
    char err[256];
    if (router_create(opts, sizeof opts / sizeof opts[0], &router, err, sizeof err) != ADPR_OK) {
        std::fprintf(stderr, "adpr_router_create: %s\n", err);
        return 1;
    }

    Cluster cluster;
    std::string summary;
    int disagreements = 0;
    std::printf("iteration 1: cold start, nothing cached, warmup on (4 ranks, max %d active requests each)\n", kMaxActive);
    std::vector<Request> it1 = {make_request(1, 'A', 88), make_request(2, 'A', 128), make_request(3, 'B', 300),
                                make_request(4, 'A', 188), make_request(5, 'A', 68), make_request(6, 'A', 108)};
    summary += "it1";
    if (!run_iteration(router, cluster, it1, false, summary, &disagreements)) return 1;

    std::printf("\niteration 2: the ranks report cached system prompts through match_lens "
                "(prompt B only on the rank that served it)\n");
    std::vector<Request> it2 = {make_request(7, 'A', 100), make_request(8, 'B', 40), make_request(9, 'A', 150),
                                make_request(10, 'B', 90), make_request(11, 'A', 60), make_request(12, 'B', 200)};
    summary += " | it2";
    if (!run_iteration(router, cluster, it2, true, summary, &disagreements)) return 1;

    router_destroy(router);
    std::printf("\nsummary:%s\n", summary.c_str());
    std::printf("explanation agrees with the library: %s\n", disagreements == 0 ? "yes" : "NO");
    return disagreements == 0 ? 0 : 1;
}
