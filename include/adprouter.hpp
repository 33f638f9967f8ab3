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

// The message buffer of one call; 512 bytes hold every message the library
// writes (longer ones are truncated, never overrun).
struct errbuf {
    char text[512];
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

}  // namespace detail

// The library's version ("0.1.0") and ABI version.
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

enum class policy { default_policy, kv_cache_aware, conversation };
enum class prefix_source { probe, index, probe_and_index };
enum class warmup { off, once, demand, quiet };
enum class score { reference, ttft };
enum class engine_reuse { after_iteration, on_schedule };
enum class preset { reference, recommended, index, full };
enum class placement { round_robin, least_queued, least_tokens };

// Router options. dp_size is required; every optional left empty keeps the
// library's default (adprouter.h lists them).
struct options {
    int32_t dp_size = 0;
    std::optional<adprouter::policy> policy;
    std::optional<double> load_balance_weight;
    std::optional<double> match_rate_threshold;
    std::optional<double> fair_share_multiplier;
    std::optional<int64_t> max_sessions;
    std::optional<placement> new_conv_placement;
    std::optional<int32_t> tokens_per_block;
    std::optional<adprouter::prefix_source> prefix_source;
    std::optional<int64_t> index_capacity_blocks;
    std::optional<int64_t> index_max_bytes;
    std::optional<adprouter::warmup> warmup;
    std::optional<double> warmup_factor;
    std::optional<int64_t> warmup_window;
    std::optional<int64_t> warmup_min_requests;
    std::optional<bool> capacity_aware;
    std::optional<adprouter::score> score;
    std::optional<adprouter::engine_reuse> engine_reuse;
    std::optional<int32_t> ttft_drain_tokens;
    std::optional<bool> explain;  // keep receipts: router::receipts()
    // A bundle of the options above, applied first by the library: the
    // fields set here override it.
    std::optional<adprouter::preset> preset;

    // The options as adpr_option key/value text. Numbers are written in the
    // shortest form that parses back to the same value (std::to_chars), so a
    // double reaches the library exactly.
    std::vector<std::pair<std::string, std::string>> to_text() const {
        std::vector<std::pair<std::string, std::string>> kv;
        kv.emplace_back("dp_size", num(dp_size));
        if (policy)
            kv.emplace_back("policy", *policy == policy::default_policy ? "default"
                                      : *policy == policy::kv_cache_aware ? "kv_cache_aware"
                                                                          : "conversation");
        if (load_balance_weight) kv.emplace_back("load_balance_weight", num(*load_balance_weight));
        if (match_rate_threshold) kv.emplace_back("match_rate_threshold", num(*match_rate_threshold));
        if (fair_share_multiplier) kv.emplace_back("fair_share_multiplier", num(*fair_share_multiplier));
        if (max_sessions) kv.emplace_back("max_sessions", num(*max_sessions));
        if (new_conv_placement)
            kv.emplace_back("new_conv_placement",
                            *new_conv_placement == placement::round_robin    ? "round_robin"
                            : *new_conv_placement == placement::least_queued ? "least_queued"
                                                                             : "least_tokens");
        if (tokens_per_block) kv.emplace_back("tokens_per_block", num(*tokens_per_block));
        if (prefix_source)
            kv.emplace_back("prefix_source", *prefix_source == prefix_source::probe   ? "probe"
                                             : *prefix_source == prefix_source::index ? "index"
                                                                                      : "probe+index");
        if (index_capacity_blocks) kv.emplace_back("index_capacity_blocks", num(*index_capacity_blocks));
        if (index_max_bytes) kv.emplace_back("index_max_bytes", num(*index_max_bytes));
        if (warmup)
            kv.emplace_back("warmup", *warmup == warmup::off      ? "off"
                                      : *warmup == warmup::once   ? "once"
                                      : *warmup == warmup::demand ? "demand"
                                                                  : "quiet");
        if (warmup_factor) kv.emplace_back("warmup_factor", num(*warmup_factor));
        if (warmup_window) kv.emplace_back("warmup_window", num(*warmup_window));
        if (warmup_min_requests) kv.emplace_back("warmup_min_requests", num(*warmup_min_requests));
        if (capacity_aware) kv.emplace_back("capacity_aware", *capacity_aware ? "true" : "false");
        if (score) kv.emplace_back("score", *score == score::reference ? "reference" : "ttft");
        if (engine_reuse)
            kv.emplace_back("engine_reuse",
                            *engine_reuse == engine_reuse::after_iteration ? "after_iteration" : "on_schedule");
        if (ttft_drain_tokens) kv.emplace_back("ttft_drain_tokens", num(*ttft_drain_tokens));
        if (explain) kv.emplace_back("explain", *explain ? "true" : "false");
        if (preset)
            kv.emplace_back("preset", *preset == preset::reference     ? "reference"
                                      : *preset == preset::recommended ? "recommended"
                                      : *preset == preset::index       ? "index"
                                                                       : "full");
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

    // adpr_router_stats: router-wide counters, and per-rank counters and hot
    // prompt families into ranks (empty or one per rank) and groups.
    adpr_stats stats(span<adpr_rank_stats> ranks = {}, span<adpr_hot_group> groups = {}) const {
        detail::require(detail::fits_i32(ranks.size()) && detail::fits_i32(groups.size()),
                        "adprouter::router::stats: spans too large");
        adpr_stats s{};
        detail::errbuf err;
        detail::check(adpr_router_stats(handle_, &s, detail::ptr(ranks), static_cast<int32_t>(ranks.size()),
                                        detail::ptr(groups), static_cast<int32_t>(groups.size()), err.text,
                                        sizeof err.text),
                      err);
        return s;
    }

    // adpr_router_receipts and adpr_router_receipt_text: why each request
    // of the last decision went where it did (options::explain must be
    // set). Copies everything into out, reusing its memory.
    void receipts(adprouter::receipts &out) const {
        int64_t n = 0, nc = 0;
        detail::errbuf err;
        detail::check(adpr_router_receipts(handle_, nullptr, 0, nullptr, 0, &n, &nc, err.text, sizeof err.text), err);
        out.items.resize(static_cast<std::size_t>(n));
        out.candidates.resize(static_cast<std::size_t>(nc));
        if (n > 0)
            detail::check(adpr_router_receipts(handle_, out.items.data(), n, nc > 0 ? out.candidates.data() : nullptr, nc,
                                               &n, &nc, err.text, sizeof err.text),
                          err);
        out.text.resize(static_cast<std::size_t>(n));
        for (int64_t i = 0; i < n; i++) {
            std::string &t = out.text[static_cast<std::size_t>(i)];
            std::size_t need = 0;
            detail::check(adpr_router_receipt_text(handle_, i, nullptr, 0, &need, err.text, sizeof err.text), err);
            t.assign(need, '\0');
            detail::check(adpr_router_receipt_text(handle_, i, &t[0], need, &need, err.text, sizeof err.text), err);
            t.resize(need - 1);
        }
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
        detail::errbuf err;
        int64_t total = 0;
        for (;;) {
            adpr_status s = adpr_router_pending_warmup(handle_, out.data(), static_cast<int64_t>(out.size()), &total,
                                                       err.text, sizeof err.text);
            if (s == ADPR_ERR_SHORT_BUFFER) {
                out.resize(static_cast<std::size_t>(total));
                continue;
            }
            detail::check(s, err);
            out.resize(static_cast<std::size_t>(total));
            return out;
        }
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

// adpr_block_hashes: writes up to out.size() block hashes of tokens and
// returns the number of full blocks (which may exceed out.size()).
inline int64_t block_hashes(span<const int32_t> tokens, int32_t tokens_per_block, span<uint64_t> out,
                            uint64_t lora_id = 0, uint64_t cache_salt = 0) {
    int64_t n = 0;
    detail::errbuf err;
    detail::check(adpr_block_hashes(detail::ptr(tokens), static_cast<int64_t>(tokens.size()), tokens_per_block,
                                    lora_id, cache_salt, detail::ptr(out), static_cast<int64_t>(out.size()), &n,
                                    err.text, sizeof err.text),
                  err);
    return n;
}

}  // namespace adprouter

#endif  // ADPROUTER_HPP
