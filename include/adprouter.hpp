// adprouter.hpp - header-only C++17 wrapper of the adprouter C API
// (adprouter.h; link with -ladprouter, or find_package(adprouter) /
// pkg-config adprouter).
//
// Copyright 2026 The adprouter Authors. SPDX-License-Identifier: Apache-2.0
//
//   adprouter::options o;
//   o.dp_size = 4;
//   o.policy = adprouter::policy::kv_cache_aware;
//   adprouter::router r(o);                       // throws adprouter::error
//   auto s = r.route(batch, outputs);             // no allocation, no copy
//
// What it adds to the C API and nothing more:
//  - router: an RAII owner of one adpr_router handle (move-only; the
//    destructor destroys it).
//  - options: typed fields instead of key/value text. A field left unset is
//    not passed, so the library's defaults (documented in adprouter.h) stay
//    their one home.
//  - error: an exception carrying the adpr_status and the library's message.
//    Only failures allocate (the message); the routing path allocates
//    nothing: route() takes views of the caller's buffers and writes the
//    results into caller buffers, checking every size against the batch.
//  - span<T>: a pointer and a size (C++17 has no std::span), made from a
//    pointer and count, a C array, or any container with data() and size().
//
// The input and output structs are the C ones (adpr_rank_state,
// adpr_request, ...): their layout is the ABI, and adprouter.h documents
// every field. Zero them before filling them ({} does).
#ifndef ADPROUTER_HPP
#define ADPROUTER_HPP

#include "adprouter.h"

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace adprouter {

// A view of size() contiguous T; it never owns them.
template <class T>
class span {
public:
    constexpr span() noexcept = default;
    constexpr span(T *data, std::size_t size) noexcept : data_(data), size_(size) {}
    template <std::size_t N>
    constexpr span(T (&array)[N]) noexcept : data_(array), size_(N) {}
    // Any contiguous container (std::vector, std::array, std::string, a span
    // of non-const T) whose data() converts to T*.
    template <class C, class = std::enable_if_t<
                           std::is_convertible_v<decltype(std::declval<C &>().data()), T *> &&
                           !std::is_array_v<std::remove_reference_t<C>>>>
    constexpr span(C &&c) noexcept : data_(c.data()), size_(c.size()) {}

    constexpr T *data() const noexcept { return data_; }
    constexpr std::size_t size() const noexcept { return size_; }
    constexpr bool empty() const noexcept { return size_ == 0; }
    constexpr T &operator[](std::size_t i) const noexcept { return data_[i]; }
    constexpr T *begin() const noexcept { return data_; }
    constexpr T *end() const noexcept { return data_ + size_; }
    constexpr span subspan(std::size_t offset, std::size_t count) const noexcept {
        return span(data_ + offset, count);
    }

private:
    T *data_ = nullptr;
    std::size_t size_ = 0;
};

// A failed call: status() is the adpr_status (ADPR_ERR_*), what() the
// library's message naming what was wrong.
class error : public std::runtime_error {
public:
    error(adpr_status status, const std::string &message)
        : std::runtime_error(message), status_(status) {}
    adpr_status status() const noexcept { return status_; }

private:
    adpr_status status_;
};

namespace detail {

// The message buffer of one call: ADPR_MESSAGE_MAX bytes hold every message
// the library writes.
struct errbuf {
    char text[ADPR_MESSAGE_MAX];
    errbuf() noexcept { text[0] = 0; }
};

[[noreturn]] inline void fail(adpr_status status, const char *message) {
    throw error(status, std::string(message && *message ? message : adpr_strerror(status)));
}

inline void check(adpr_status status, const errbuf &err) {
    if (status != ADPR_OK) fail(status, err.text);
}

inline void check(adpr_status status) {
    if (status != ADPR_OK) fail(status, nullptr);
}

// A wrapper-side size check; reported like the library's own.
inline void require(bool ok, const char *message) {
    if (!ok) fail(ADPR_ERR_INVALID_ARGUMENT, message);
}

template <class T>
inline T *ptr(span<T> s) noexcept {
    return s.empty() ? nullptr : s.data();
}

inline bool fits_i32(std::size_t n) noexcept {
    return n <= static_cast<std::size_t>(std::numeric_limits<int32_t>::max());
}

// The buffer rule of adprouter.h ("Buffers" under Conventions): call(data,
// capacity, &total) with the buffer as it is; on ADPR_ERR_SHORT_BUFFER size
// it to the total and call again. Returns the total.
template <class V, class Call>
inline int64_t fill(V &buf, Call call) {
    errbuf err;
    for (;;) {
        int64_t total = 0;
        adpr_status s = call(buf.empty() ? nullptr : buf.data(), static_cast<int64_t>(buf.size()), &total, err);
        if (s == ADPR_ERR_SHORT_BUFFER && total >= 0) {
            buf.resize(static_cast<std::size_t>(total));
            continue;
        }
        check(s, err);
        buf.resize(static_cast<std::size_t>(total));
        return total;
    }
}

// fill for NUL-terminated text: the text without its NUL.
template <class Call>
inline std::string text(Call call) {
    std::vector<char> buf;
    int64_t n = fill(buf, call);
    return n > 0 ? std::string(buf.data(), static_cast<std::size_t>(n - 1)) : std::string();
}

}  // namespace detail

// The library's version ("0.3.0") and ABI version.
inline const char *version() noexcept { return adpr_version(); }
inline uint32_t abi_version() noexcept { return adpr_abi_version(); }

// Throws unless the loaded library has this header's ABI (call once at
// start-up; a mismatched library would read the structs wrongly).
inline void check_abi() {
    if (adpr_abi_version() != ADPR_ABI_VERSION)
        detail::fail(ADPR_ERR_INVALID_ARGUMENT,
                     ("libadprouter has ABI version " + std::to_string(adpr_abi_version()) +
                      ", adprouter.h is for " + std::to_string(ADPR_ABI_VERSION))
                         .c_str());
}

// BEGIN options (generated from router/schema.go by go generate; do not edit)
enum class policy { default_policy, kv_cache_aware, conversation };
inline const char *to_text(policy v) noexcept {
    switch (v) {
    case policy::default_policy: return "default";
    case policy::kv_cache_aware: return "kv_cache_aware";
    case policy::conversation: return "conversation";
    }
    return "";
}
enum class placement { round_robin, least_queued, least_tokens };
inline const char *to_text(placement v) noexcept {
    switch (v) {
    case placement::round_robin: return "round_robin";
    case placement::least_queued: return "least_queued";
    case placement::least_tokens: return "least_tokens";
    }
    return "";
}
enum class prefix_source { probe, index, probe_and_index };
inline const char *to_text(prefix_source v) noexcept {
    switch (v) {
    case prefix_source::probe: return "probe";
    case prefix_source::index: return "index";
    case prefix_source::probe_and_index: return "probe+index";
    }
    return "";
}
enum class warmup { off, once, quiet, demand };
inline const char *to_text(warmup v) noexcept {
    switch (v) {
    case warmup::off: return "off";
    case warmup::once: return "once";
    case warmup::quiet: return "quiet";
    case warmup::demand: return "demand";
    }
    return "";
}
enum class score { reference, ttft };
inline const char *to_text(score v) noexcept {
    switch (v) {
    case score::reference: return "reference";
    case score::ttft: return "ttft";
    }
    return "";
}
enum class engine_reuse { after_iteration, on_schedule };
inline const char *to_text(engine_reuse v) noexcept {
    switch (v) {
    case engine_reuse::after_iteration: return "after_iteration";
    case engine_reuse::on_schedule: return "on_schedule";
    }
    return "";
}
enum class preset { full, index, recommended, reference };
inline const char *to_text(preset v) noexcept {
    switch (v) {
    case preset::full: return "full";
    case preset::index: return "index";
    case preset::recommended: return "recommended";
    case preset::reference: return "reference";
    }
    return "";
}

// Router options: one field per option of the library (adprouter.h lists
// them with their defaults and ranges). dp_size is required; every optional
// left empty is not passed, so the library's default applies.
struct options {
    // The routing policy: TensorRT-LLM's DefaultADPRouter (balance token
    // load), KVCacheAwareADPRouter (cached prefix and load) or the
    // conversation-affinity router (every turn of a conversation on one
    // rank).
    std::optional<adprouter::policy> policy;
    // Number of attention-DP ranks (required).
    int32_t dp_size = 0;
    // Beta of the KV-aware score: how many tokens of prefill one token of
    // relative load is worth.
    std::optional<double> load_balance_weight;
    // Cache affinity counts for a request only when its best match divided
    // by its length is strictly greater.
    std::optional<double> match_rate_threshold;
    // Soft per-rank cap = multiplier x fair share of the batch (the default
    // policy always uses 1); the conversation policy clamps it to >= 1.
    std::optional<double> fair_share_multiplier;
    // Send the first untargeted requests to every rank once, smallest rank
    // first (warmup "once"); true with warmup "off", "quiet" or "demand" is
    // an error.
    std::optional<bool> cold_start_warmup;
    // Bound of the conversation -> rank map, least recently used evicted
    // first (the conversation policy, and the kv_cache_aware score "ttft").
    std::optional<int32_t> max_sessions;
    // Where a new conversation goes: round robin, the rank with the fewest
    // requests, or the rank with the fewest prompt tokens (then requests,
    // then round robin).
    std::optional<adprouter::placement> new_conv_placement;
    // Avoid, for each balanced request, ranks whose free_kv_tokens (minus
    // what the batch already placed there) cannot hold its uncached tokens,
    // when some rank can; else the most headroom wins.
    std::optional<bool> capacity_aware;
    // KV block size: the prefix index hashes prompts in blocks of this many
    // tokens and turns KV capacity into index bounds.
    std::optional<int32_t> tokens_per_block;
    // Where the KV-aware match lengths come from: "probe" (the caller's
    // match_lens, the reference), "index" (the router's own prefix index: no
    // probe, no second allgather; needs whole prompts) or "probe+index" (the
    // larger of the two).
    std::optional<adprouter::prefix_source> prefix_source;
    // Prefix-index bound of a rank that reports no KV capacity (0: 65536
    // blocks); ranks reporting kv_capacity_tokens are bounded by it.
    std::optional<int32_t> index_capacity_blocks;
    // Memory bound of the prefix index, all ranks together: beyond it the
    // least recently used (block, rank) entries of any rank are evicted, so
    // memory does not grow with dp_size.
    std::optional<int64_t> index_max_bytes;
    // "once" (= cold_start_warmup), "quiet" ("once", only while no rank has
    // an active request (once some decision has seen dp_size active
    // requests, or a request arriving while a rank warms, with two requests
    // or more; with the prefix index, a burst of held prompt families warms
    // only a new conversation's), or while load starts on a cold engine;
    // under score "ttft", a lone idle request of a prompt family some rank
    // holds warms only once the family's share of the traffic asks for
    // another rank: see docs/ROUTING.md) or "demand" (keep each hot prompt
    // family on about ceil(share x dp_size x warmup_factor) ranks,
    // replicating only while the engine is quiet).
    std::optional<adprouter::warmup> warmup;
    // Scales demand warmup's replica target, and quiet warmup's for a held
    // prompt family.
    std::optional<double> warmup_factor;
    // Routed requests that demand warmup and score "ttft" (its quiet warmup
    // too) count prompt families over.
    std::optional<int32_t> warmup_window;
    // Requests of a family the window must hold before demand warmup
    // replicates it, or score "ttft" counts it as demand (one-off prompts
    // never are).
    std::optional<int32_t> warmup_min_requests;
    // How the KV-aware policy ranks ranks: "reference" (TensorRT-LLM's
    // score) or "ttft" (predicted time to first token in lock-step
    // iterations: the uncached prefill queued on the rank and the request's
    // own, in-flight prefixes counted as engine_reuse allows, recomputing a
    // prefix counted as its cost, and the KV room ranks report heeded);
    // "ttft" needs prefix_source "index" or "probe+index" (docs/ROUTING.md).
    std::optional<adprouter::score> score;
    // When a block being computed becomes reusable: "after_iteration"
    // (TensorRT-LLM) or "on_schedule" (vLLM); read by score "ttft".
    std::optional<adprouter::engine_reuse> engine_reuse;
    // Prefill tokens a rank computes per iteration (the engine's
    // max_num_tokens); read by score "ttft".
    std::optional<int32_t> ttft_drain_tokens;
    // A bundle of the options above (docs/configuration.md lists each
    // preset's options), applied first: explicit options override it, in any
    // order.
    std::optional<adprouter::preset> preset;
    // Record a receipt per request of every decision: why it went where it
    // did.
    std::optional<bool> explain;

    // The options as adpr_option key/value text. Numbers are written in the
    // shortest form that parses back to the same value (std::to_chars), so a
    // double reaches the library exactly.
    std::vector<std::pair<std::string, std::string>> to_text() const {
        std::vector<std::pair<std::string, std::string>> kv;
        kv.emplace_back("dp_size", num(dp_size));
        if (policy) kv.emplace_back("policy", adprouter::to_text(*policy));
        if (load_balance_weight) kv.emplace_back("load_balance_weight", num(*load_balance_weight));
        if (match_rate_threshold) kv.emplace_back("match_rate_threshold", num(*match_rate_threshold));
        if (fair_share_multiplier) kv.emplace_back("fair_share_multiplier", num(*fair_share_multiplier));
        if (cold_start_warmup) kv.emplace_back("cold_start_warmup", *cold_start_warmup ? "true" : "false");
        if (max_sessions) kv.emplace_back("max_sessions", num(*max_sessions));
        if (new_conv_placement) kv.emplace_back("new_conv_placement", adprouter::to_text(*new_conv_placement));
        if (capacity_aware) kv.emplace_back("capacity_aware", *capacity_aware ? "true" : "false");
        if (tokens_per_block) kv.emplace_back("tokens_per_block", num(*tokens_per_block));
        if (prefix_source) kv.emplace_back("prefix_source", adprouter::to_text(*prefix_source));
        if (index_capacity_blocks) kv.emplace_back("index_capacity_blocks", num(*index_capacity_blocks));
        if (index_max_bytes) kv.emplace_back("index_max_bytes", num(*index_max_bytes));
        if (warmup) kv.emplace_back("warmup", adprouter::to_text(*warmup));
        if (warmup_factor) kv.emplace_back("warmup_factor", num(*warmup_factor));
        if (warmup_window) kv.emplace_back("warmup_window", num(*warmup_window));
        if (warmup_min_requests) kv.emplace_back("warmup_min_requests", num(*warmup_min_requests));
        if (score) kv.emplace_back("score", adprouter::to_text(*score));
        if (engine_reuse) kv.emplace_back("engine_reuse", adprouter::to_text(*engine_reuse));
        if (ttft_drain_tokens) kv.emplace_back("ttft_drain_tokens", num(*ttft_drain_tokens));
        if (preset) kv.emplace_back("preset", adprouter::to_text(*preset));
        if (explain) kv.emplace_back("explain", *explain ? "true" : "false");
        return kv;
    }

private:
    template <class N>
    static std::string num(N v) {
        char buf[64];
        auto r = std::to_chars(buf, buf + sizeof buf, v);
        return std::string(buf, r.ptr);
    }
};
// END options

// One decision's inputs: views of the caller's buffers (adprouter.h's
// adpr_batch). match_lens is empty (nothing cached) or requests x states,
// row-major by request.
struct batch {
    span<const adpr_rank_state> states;
    span<const adpr_request> requests;
    int32_t max_num_active_requests = 0;
    span<const int32_t> tokens;
    span<const char> text;
    span<const int32_t> match_lens;
};

// Where route() writes a decision: each view empty (not wanted) or sized as
// adpr_route_result says: request_rank and order one per request,
// rank_offsets one per rank plus one (order needs rank_offsets).
struct outputs {
    span<int32_t> request_rank;
    span<uint64_t> order;
    span<int32_t> rank_offsets;
};

// The scalar results of a decision.
struct summary {
    int32_t expected = 0;        // expected_num_active_requests
    int32_t num_unassigned = 0;  // requests to requeue
};

// The receipts of one decision (router::receipts): one per request, in
// request order, and the candidates they point into.
struct receipts {
    std::vector<adpr_receipt> items;
    std::vector<adpr_candidate> candidates;
    // The library's explanation of each receipt (adpr_router_receipt_text).
    std::vector<std::string> text;

    // The candidates of r, one per rank in rank order, or none.
    span<const adpr_candidate> candidates_of(const adpr_receipt &r) const noexcept {
        if (r.num_candidates <= 0) return {};
        return {candidates.data() + r.candidate_offset, static_cast<std::size_t>(r.num_candidates)};
    }
};

// One router: an owned adpr_router handle.
class router {
public:
    explicit router(const options &o) {
        auto kv = o.to_text();
        std::vector<adpr_option> opts;
        opts.reserve(kv.size());
        for (const auto &p : kv) opts.push_back(adpr_option{p.first.c_str(), p.second.c_str()});
        detail::errbuf err;
        detail::check(adpr_router_create(opts.data(), static_cast<int32_t>(opts.size()), &handle_,
                                         err.text, sizeof err.text),
                      err);
    }
    router(const router &) = delete;
    router &operator=(const router &) = delete;
    router(router &&other) noexcept : handle_(std::exchange(other.handle_, 0)) {}
    router &operator=(router &&other) noexcept {
        if (this != &other) {
            reset();
            handle_ = std::exchange(other.handle_, 0);
        }
        return *this;
    }
    ~router() { reset(); }

    // The C handle, for calls the wrapper does not cover.
    adpr_router handle() const noexcept { return handle_; }

    // Routes one batch (adpr_route). Allocates nothing unless it throws; on
    // error nothing changed.
    summary route(const batch &in, const outputs &out) {
        using detail::require;
        const std::size_t n = in.requests.size(), ranks = in.states.size();
        require(detail::fits_i32(n) && detail::fits_i32(ranks), "adprouter::router::route: too many requests or states");
        require(out.request_rank.empty() || out.request_rank.size() == n,
                "adprouter::router::route: outputs.request_rank must be empty or hold one entry per request");
        require(out.order.empty() || out.order.size() == n,
                "adprouter::router::route: outputs.order must be empty or hold one entry per request");
        require(out.rank_offsets.empty() || out.rank_offsets.size() == ranks + 1,
                "adprouter::router::route: outputs.rank_offsets must be empty or hold states + 1 entries");
        require(in.match_lens.empty() || in.match_lens.size() == n * ranks,
                "adprouter::router::route: batch.match_lens must be empty or hold requests x states entries");
        adpr_batch b{};
        b.states = detail::ptr(in.states);
        b.num_states = static_cast<int32_t>(ranks);
        b.num_requests = static_cast<int32_t>(n);
        b.requests = detail::ptr(in.requests);
        b.tokens = detail::ptr(in.tokens);
        b.tokens_len = static_cast<int64_t>(in.tokens.size());
        b.text = detail::ptr(in.text);
        b.text_len = static_cast<int64_t>(in.text.size());
        b.match_lens = detail::ptr(in.match_lens);
        b.max_num_active_requests = in.max_num_active_requests;
        adpr_route_result r{};
        r.request_rank = detail::ptr(out.request_rank);
        r.order = detail::ptr(out.order);
        r.rank_offsets = detail::ptr(out.rank_offsets);
        detail::errbuf err;
        detail::check(adpr_route(handle_, &b, &r, err.text, sizeof err.text), err);
        return summary{r.expected, r.num_unassigned};
    }

    // adpr_router_state_digest: equal on every rank that saw the same calls.
    uint64_t state_digest() const {
        uint64_t d = 0;
        detail::check(adpr_router_state_digest(handle_, &d));
        return d;
    }

    // adpr_router_stats: router-wide counters, and per-rank counters into
    // ranks (empty, or one per rank).
    adpr_stats stats(span<adpr_rank_stats> ranks = {}) const {
        detail::require(detail::fits_i32(ranks.size()), "adprouter::router::stats: span too large");
        adpr_stats s{};
        detail::errbuf err;
        int64_t groups = 0;
        detail::check(adpr_router_stats(handle_, &s, detail::ptr(ranks), static_cast<int32_t>(ranks.size()),
                                        nullptr, 0, &groups, err.text, sizeof err.text),
                      err);
        return s;
    }

    // The hot prompt families demand warmup tracks, most requested first
    // (adpr_router_stats' groups).
    std::vector<adpr_hot_group> hot_groups() const {
        std::vector<adpr_hot_group> out;
        adpr_stats s{};
        detail::fill(out, [&](adpr_hot_group *p, int64_t cap, int64_t *total, detail::errbuf &err) {
            return adpr_router_stats(handle_, &s, nullptr, 0, p, cap, total, err.text, sizeof err.text);
        });
        return out;
    }

    // adpr_router_options: the router's effective configuration, one
    // "key=value" line per option, presets expanded.
    std::string effective_options() const {
        return detail::text([&](char *p, int64_t cap, int64_t *total, detail::errbuf &err) {
            return adpr_router_options(handle_, p, cap, total, err.text, sizeof err.text);
        });
    }

    // adpr_router_receipts and adpr_router_receipt_text: why each request
    // of the last decision went where it did (options::explain must be
    // set). Copies everything into out, reusing its memory.
    void receipts(adprouter::receipts &out) const {
        detail::errbuf err;
        for (;;) {
            int64_t n = 0, nc = 0;
            adpr_status s = adpr_router_receipts(
                handle_, out.items.empty() ? nullptr : out.items.data(), static_cast<int64_t>(out.items.size()),
                out.candidates.empty() ? nullptr : out.candidates.data(), static_cast<int64_t>(out.candidates.size()),
                &n, &nc, err.text, sizeof err.text);
            if (s == ADPR_ERR_SHORT_BUFFER) {
                out.items.resize(static_cast<std::size_t>(n));
                out.candidates.resize(static_cast<std::size_t>(nc));
                continue;
            }
            detail::check(s, err);
            out.items.resize(static_cast<std::size_t>(n));
            out.candidates.resize(static_cast<std::size_t>(nc));
            break;
        }
        out.text.resize(out.items.size());
        for (std::size_t i = 0; i < out.items.size(); i++)
            out.text[i] = detail::text([&](char *p, int64_t cap, int64_t *total, detail::errbuf &e) {
                return adpr_router_receipt_text(handle_, static_cast<int64_t>(i), p, cap, total, e.text, sizeof e.text);
            });
    }
    adprouter::receipts receipts() const {
        adprouter::receipts out;
        receipts(out);
        return out;
    }

    // adpr_router_pending_warmup: the kv_cache_aware cold-start warmup's
    // pending ranks, ascending (TensorRT-LLM's _pending_warmup_ranks).
    std::vector<int32_t> pending_warmup() const {
        std::vector<int32_t> out;
        detail::fill(out, [&](int32_t *p, int64_t cap, int64_t *total, detail::errbuf &err) {
            return adpr_router_pending_warmup(handle_, p, cap, total, err.text, sizeof err.text);
        });
        return out;
    }

    // adpr_router_set_pending_warmup: replaces the pending ranks (an empty
    // span ends the warmup). Every rank must make the same change.
    void set_pending_warmup(span<const int32_t> ranks) {
        detail::errbuf err;
        detail::check(adpr_router_set_pending_warmup(handle_, detail::ptr(ranks), static_cast<int64_t>(ranks.size()),
                                                     err.text, sizeof err.text),
                      err);
    }

    // adpr_router_conversations: the conversation map, least recently used
    // first, as (conversation id, rank) pairs.
    std::vector<std::pair<std::string, int32_t>> conversations() const {
        std::vector<adpr_binding> bindings;
        std::vector<char> ids;
        detail::errbuf err;
        int64_t total = 0, bytes = 0;
        for (;;) {
            adpr_status s = adpr_router_conversations(handle_, bindings.data(), static_cast<int64_t>(bindings.size()),
                                                      ids.data(), static_cast<int64_t>(ids.size()), &total, &bytes,
                                                      err.text, sizeof err.text);
            if (s == ADPR_ERR_SHORT_BUFFER) {
                bindings.resize(static_cast<std::size_t>(total));
                ids.resize(static_cast<std::size_t>(bytes));
                continue;
            }
            detail::check(s, err);
            break;
        }
        std::vector<std::pair<std::string, int32_t>> out;
        out.reserve(static_cast<std::size_t>(total));
        for (int64_t i = 0; i < total; i++) {
            const adpr_binding &b = bindings[static_cast<std::size_t>(i)];
            out.emplace_back(std::string(ids.data() + b.id_offset, static_cast<std::size_t>(b.id_length)), b.rank);
        }
        return out;
    }

private:
    void reset() noexcept {
        if (handle_ != 0) adpr_router_destroy(handle_);
        handle_ = 0;
    }

    adpr_router handle_ = 0;
};

// adpr_block_hashes: the block hashes of tokens, one per full block.
inline std::vector<uint64_t> block_hashes(span<const int32_t> tokens, int32_t tokens_per_block,
                                          uint64_t lora_id = 0, uint64_t cache_salt = 0) {
    std::vector<uint64_t> out;
    detail::fill(out, [&](uint64_t *p, int64_t cap, int64_t *total, detail::errbuf &err) {
        return adpr_block_hashes(detail::ptr(tokens), static_cast<int64_t>(tokens.size()), tokens_per_block, lora_id,
                                 cache_salt, p, cap, total, err.text, sizeof err.text);
    });
    return out;
}

// adpr_preset_options: the options preset sets for policy, one "key=value"
// line each.
inline std::string preset_options(adprouter::preset preset, adprouter::policy policy) {
    return detail::text([&](char *p, int64_t cap, int64_t *total, detail::errbuf &err) {
        return adpr_preset_options(to_text(preset), to_text(policy), p, cap, total, err.text, sizeof err.text);
    });
}

// adpr_option_schema: the option schema as JSON (docs/configuration.md).
inline std::string option_schema() {
    return detail::text([&](char *p, int64_t cap, int64_t *total, detail::errbuf &err) {
        return adpr_option_schema(p, cap, total, err.text, sizeof err.text);
    });
}

}  // namespace adprouter

#endif  // ADPROUTER_HPP
