// Tests of include/adprouter.hpp, the header-only C++17 wrapper: the RAII
// handle and its moves, typed options reaching the library, errors carrying
// the status and the library's message, size checks on every span, and
// results equal to the C API's for the same batch. Built with -Werror and
// linked with -ladprouter by abi_safety_test.go; prints "N passed, M failed".
#include "adprouter.hpp"

#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

static int passed, failed;

static void check(bool ok, const std::string &what) {
    std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
    (ok ? passed : failed)++;
}

// Runs f, which must throw adprouter::error with status and a message
// containing needle.
template <class F>
static void expect_error(const char *what, adpr_status status, const char *needle, F f) {
    try {
        f();
        check(false, std::string(what) + ": did not throw");
    } catch (const adprouter::error &e) {
        check(e.status() == status && std::strstr(e.what(), needle) != nullptr,
              std::string(what) + ": status " + std::to_string(e.status()) + " \"" + e.what() + "\"");
    }
}

int main() {
    adprouter::check_abi();
    check(std::strcmp(adprouter::version(), ADPR_VERSION) == 0, "version() equals the header's ADPR_VERSION");

    adprouter::options o;
    o.dp_size = 4;
    o.policy = adprouter::policy::kv_cache_aware;
    o.load_balance_weight = 0.30000000000000004;  // exact round trip through to_chars
    o.warmup = adprouter::warmup::once;
    adprouter::router r(o);
    check(r.handle() != 0, "a router has a handle");

    // Moves transfer the handle; a moved-from router is empty and harmless.
    adprouter::router moved(std::move(r));
    check(r.handle() == 0 && moved.handle() != 0, "move construction transfers the handle");
    adprouter::router other(o);
    uint64_t before = other.state_digest();
    other = std::move(moved);
    check(moved.handle() == 0 && other.handle() != 0, "move assignment transfers the handle");
    check(other.state_digest() == before, "same options, same digest (typed options reach the library)");
    expect_error("a moved-from router", ADPR_ERR_INVALID_HANDLE, "handle", [&] { r.state_digest(); });

    // A preset is the options it names: the same state digest as setting
    // them one by one, and not the reference's; a field set beside it wins.
    adprouter::options rec, spelled, ref;
    rec.dp_size = spelled.dp_size = ref.dp_size = 4;
    rec.preset = adprouter::preset::recommended;
    spelled.prefix_source = adprouter::prefix_source::probe_and_index;
    spelled.score = adprouter::score::ttft;
    spelled.warmup = adprouter::warmup::quiet;
    uint64_t recd = adprouter::router(rec).state_digest();
    check(recd == adprouter::router(spelled).state_digest(), "preset recommended = its options spelled out");
    check(recd != adprouter::router(ref).state_digest(), "preset recommended differs from the reference");
    rec.engine_reuse = adprouter::engine_reuse::on_schedule;
    spelled.engine_reuse = adprouter::engine_reuse::on_schedule;
    spelled.ttft_drain_tokens = rec.ttft_drain_tokens = 4096;
    check(adprouter::router(rec).state_digest() == adprouter::router(spelled).state_digest(),
          "fields beside a preset override it");
    check(adprouter::router(rec).state_digest() != recd, "engine_reuse and ttft_drain_tokens reach the library");

    adprouter::options bad;
    bad.dp_size = 0;
    expect_error("dp_size 0", ADPR_ERR_CONFIG, "dp_size", [&] { adprouter::router x(bad); });
    bad.dp_size = 2;
    bad.fair_share_multiplier = 0.5;
    expect_error("fair_share_multiplier 0.5", ADPR_ERR_CONFIG, "fair_share_multiplier",
                 [&] { adprouter::router x(bad); });

    // A batch through the wrapper and through the C API give the same result.
    std::vector<adpr_rank_state> states(4);
    for (int i = 0; i < 4; i++) states[i] = adpr_rank_state{i, i % 2, 100 * i, 0, 0, 0, 0, 0, 0};
    std::vector<int32_t> tokens;
    std::vector<adpr_request> reqs;
    for (int i = 0; i < 6; i++) {
        adpr_request q{};
        q.id = 100 + static_cast<uint64_t>(i);
        q.token_offset = static_cast<int64_t>(tokens.size());
        for (int t = 0; t < 10 + i; t++) tokens.push_back(t);
        q.token_count = 10 + i;
        q.target_rank = ADPR_NO_TARGET;
        q.relax = 1;
        reqs.push_back(q);
    }
    std::vector<int32_t> matches(reqs.size() * states.size(), 0);
    matches[1 * 4 + 2] = 8;
    adprouter::batch b{states, reqs, 8, tokens, {}, matches};
    std::vector<int32_t> rank_of(reqs.size());
    std::vector<uint64_t> order(reqs.size());
    std::vector<int32_t> offsets(states.size() + 1);
    adprouter::summary s = other.route(b, adprouter::outputs{rank_of, order, offsets});

    adpr_option copts[] = {{"dp_size", "4"}, {"policy", "kv_cache_aware"},
                           {"load_balance_weight", "0.30000000000000004"}, {"warmup", "once"}};
    adpr_router c = 0;
    char err[256];
    adpr_router_create(copts, 4, &c, err, sizeof err);
    adpr_batch cb{states.data(), 4, 6, reqs.data(), tokens.data(), static_cast<int64_t>(tokens.size()),
                  nullptr, 0, matches.data(), 8};
    std::vector<int32_t> c_rank_of(reqs.size());
    std::vector<uint64_t> c_order(reqs.size());
    std::vector<int32_t> c_offsets(states.size() + 1);
    adpr_route_result cr{c_rank_of.data(), c_order.data(), c_offsets.data(), 0, 0};
    adpr_status cs = adpr_route(c, &cb, &cr, err, sizeof err);
    check(cs == ADPR_OK && rank_of == c_rank_of && order == c_order && offsets == c_offsets &&
              s.expected == cr.expected && s.num_unassigned == cr.num_unassigned,
          "route() equals adpr_route on the same batch  -- expected " + std::to_string(s.expected));
    check(other.state_digest() == [&] { uint64_t d; adpr_router_state_digest(c, &d); return d; }(),
          "and leaves the same state");
    adpr_router_destroy(c);

    // Every output span is size-checked before the library is called.
    std::vector<int32_t> short_ranks(reqs.size() - 1);
    expect_error("request_rank too short", ADPR_ERR_INVALID_ARGUMENT, "request_rank",
                 [&] { other.route(b, adprouter::outputs{short_ranks, {}, {}}); });
    std::vector<int32_t> short_offsets(states.size());
    expect_error("rank_offsets too short", ADPR_ERR_INVALID_ARGUMENT, "rank_offsets",
                 [&] { other.route(b, adprouter::outputs{{}, {}, short_offsets}); });
    adprouter::batch bad_matches{states, reqs, 8, tokens, {}, adprouter::span<const int32_t>(matches.data(), 3)};
    expect_error("match_lens of the wrong size", ADPR_ERR_INVALID_ARGUMENT, "match_lens",
                 [&] { other.route(bad_matches, adprouter::outputs{}); });
    // The library's own errors come through with their message.
    adprouter::batch zero{states, reqs, 0, tokens, {}, {}};
    expect_error("max_num_active_requests 0", ADPR_ERR_INVALID_ARGUMENT, "max", [&] { other.route(zero, {}); });
    check(other.state_digest() == [&] {
        adprouter::router fresh(o);
        fresh.route(b, adprouter::outputs{});
        return fresh.state_digest();
    }(), "failed calls changed nothing");

    // Receipts: the same batch on an explaining router, read back whole.
    adprouter::options eo = o;
    eo.explain = true;
    adprouter::router ex(eo);
    ex.route(b, adprouter::outputs{rank_of, order, offsets});
    adprouter::receipts rcs = ex.receipts();
    bool same = rcs.items.size() == reqs.size() && rcs.text.size() == reqs.size();
    int warm = 0, scored = 0;
    for (std::size_t i = 0; same && i < rcs.items.size(); i++) {
        const adpr_receipt &rc = rcs.items[i];
        same = rc.id == reqs[i].id && rc.rank == rank_of[i] &&
               rcs.text[i].find("request " + std::to_string(rc.id) + " (") == 0;
        warm += rc.reason == ADPR_REASON_COLD_START_WARMUP;
        if (rc.reason == ADPR_REASON_SCORED) {
            scored++;
            auto cands = rcs.candidates_of(rc);
            same = same && cands.size() == 4 && cands[static_cast<std::size_t>(rc.rank)].excluded == ADPR_EXCLUDED_NONE;
        }
    }
    check(same && warm == 4 && scored == 2,
          "receipts(): one per request with its rank and text; 4 warmup placements, 2 scored with 4 candidates");
    expect_error("receipts() without explain", ADPR_ERR_INVALID_ARGUMENT, "explain", [&] { other.receipts(); });

    // Host state: the pending warmup ranks and the conversation map.
    adprouter::options wo;
    wo.dp_size = 4;
    wo.warmup = adprouter::warmup::once;
    adprouter::router w(wo);
    check(w.pending_warmup() == std::vector<int32_t>({0, 1, 2, 3}), "pending_warmup() of a fresh warmup router: 0 1 2 3");
    const int32_t only[] = {2};
    w.set_pending_warmup(only);
    check(w.pending_warmup() == std::vector<int32_t>({2}), "set_pending_warmup({2}) reads back 2");
    w.set_pending_warmup({});
    check(w.pending_warmup().empty(), "set_pending_warmup({}) ends the warmup");
    const int32_t past[] = {9};
    expect_error("set_pending_warmup({9}) on 4 ranks", ADPR_ERR_INVALID_ARGUMENT, "0..3", [&] { w.set_pending_warmup(past); });
    adprouter::options co;
    co.dp_size = 2;
    co.policy = adprouter::policy::conversation;
    adprouter::router chat(co);
    std::vector<adpr_request> turns(2);
    std::string ids = "chat-1chat-2";
    for (std::size_t i = 0; i < 2; i++) {
        turns[i].id = 100 + i;
        turns[i].num_tokens = 8;
        turns[i].target_rank = ADPR_NO_TARGET;
        turns[i].relax = 1;
        turns[i].conversation_offset = static_cast<int64_t>(6 * i);
        turns[i].conversation_len = 6;
    }
    std::vector<adpr_rank_state> two(2);
    for (int32_t k = 0; k < 2; k++) two[static_cast<std::size_t>(k)].rank = k;
    adprouter::batch turn_batch;
    turn_batch.states = two;
    turn_batch.requests = turns;
    turn_batch.text = {ids.data(), ids.size()};
    turn_batch.max_num_active_requests = 8;
    chat.route(turn_batch, adprouter::outputs{});
    auto bound = chat.conversations();
    check(bound.size() == 2 && bound[0] == std::make_pair(std::string("chat-1"), int32_t{0}) &&
              bound[1] == std::make_pair(std::string("chat-2"), int32_t{1}),
          "conversations(): chat-1 on 0, chat-2 on 1, least recently used first");

    // The buffer rule through the wrappers: each sizes its buffer from the
    // library's total and gets the whole result.
    std::string eff = chat.effective_options();
    check(eff.find("policy=conversation\n") != std::string::npos && eff.find("dp_size=2\n") != std::string::npos &&
              eff.find("max_sessions=65536\n") != std::string::npos,
          "effective_options(): every option, defaults included: " + eff.substr(0, 60));
    adprouter::options rec2;
    rec2.dp_size = 2;
    rec2.preset = adprouter::preset::recommended;
    check(adprouter::router(rec2).effective_options().find("score=ttft\n") != std::string::npos,
          "effective_options() expands the preset");
    check(adprouter::preset_options(adprouter::preset::recommended, adprouter::policy::kv_cache_aware) ==
              "prefix_source=probe+index\nscore=ttft\nwarmup=quiet\n",
          "preset_options(recommended, kv_cache_aware)");
    std::string schema = adprouter::option_schema();
    check(schema.size() > 2000 && schema.front() == '{' && schema.back() == '}' &&
              schema.find("\"name\":\"cold_start_warmup\"") != std::string::npos,
          "option_schema(): the whole JSON");
    std::vector<int32_t> toks(100);
    for (int i = 0; i < 100; i++) toks[i] = i;
    auto hashes = adprouter::block_hashes(toks, 32);
    check(hashes.size() == 3 && hashes[0] != hashes[1], "block_hashes(): 3 full blocks of 100 tokens");
    check(chat.hot_groups().empty(), "hot_groups(): none without demand warmup");

    std::printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
