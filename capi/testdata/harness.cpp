// harness.cpp - checks libadprouter.so through its public C ABI.
//
// The library is loaded only with dlopen(path, RTLD_NOW) and every adpr_*
// function is resolved with dlsym: there is no link-time dependency, exactly
// like a C++ executor that loads the router as a plug-in. adprouter.h is
// included for the types and constants only.
//
//   g++ -std=c++17 -O2 -Wall -Wextra -Iinclude -o build/harness capi/testdata/harness.cpp -ldl -lpthread
//   build/harness build/libadprouter.so            # checks; exit 1 on failure
//                                                  # (run from the repository root: the routing
//                                                  # fixtures are read from testdata/routing, or
//                                                  # from $ADPROUTER_FIXTURES)
//   LD_BIND_NOW=1 build/harness build/libadprouter.so
//   build/harness build/libadprouter.so --bench [calls]   # adpr_route latency
//   build/harness build/libadprouter.so --idle [calls]    # the same, called once in a while
//
// Every check prints one line ("PASS ..." or "FAIL ..."); the last line is
// "N passed, M failed".

#include <dirent.h>
#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "adprouter.h"

#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

// ---------------------------------------------------------------------------
// The library, resolved by name.

struct Api {
    decltype(&adpr_abi_version) abi_version = nullptr;
    decltype(&adpr_version) version = nullptr;
    decltype(&adpr_strerror) strerror = nullptr;
    decltype(&adpr_router_create) create = nullptr;
    decltype(&adpr_router_destroy) destroy = nullptr;
    decltype(&adpr_route) route = nullptr;
    decltype(&adpr_router_state_digest) digest = nullptr;
    decltype(&adpr_router_stats) stats = nullptr;
    decltype(&adpr_router_tokens_read) tokens_read = nullptr;
    decltype(&adpr_block_hashes) block_hashes = nullptr;
    decltype(&adpr_preset_options) preset_options = nullptr;
    decltype(&adpr_router_receipts) receipts = nullptr;
    decltype(&adpr_router_receipt_text) receipt_text = nullptr;
    decltype(&adpr_router_pending_warmup) pending_warmup = nullptr;
    decltype(&adpr_router_set_pending_warmup) set_pending_warmup = nullptr;
    decltype(&adpr_router_conversations) conversations = nullptr;
};
Api A;

template <class F>
bool resolve(void *lib, const char *name, F &fn) {
    void *p = dlsym(lib, name);
    fn = reinterpret_cast<F>(p);
    return p != nullptr;
}

// ---------------------------------------------------------------------------
// Reporting.

int g_pass = 0, g_fail = 0;
std::mutex g_print_mu;

std::string fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char *f, ...) {
    char buf[4096];
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    return buf;
}

bool check(bool ok, const std::string &what, const std::string &detail = {}) {
    std::lock_guard<std::mutex> lock(g_print_mu);
    std::printf("%s %s%s%s\n", ok ? "PASS" : "FAIL", what.c_str(), detail.empty() ? "" : "  -- ",
                detail.c_str());
    std::fflush(stdout);
    (ok ? g_pass : g_fail)++;
    return ok;
}

void note(const std::string &what) {
    std::lock_guard<std::mutex> lock(g_print_mu);
    std::printf("NOTE %s\n", what.c_str());
}

std::string lower(std::string s) {
    for (auto &c : s) c = (char)std::tolower((unsigned char)c);
    return s;
}

// Every item of words must occur in msg (case-insensitive); an item may list
// alternatives separated by '|'.
bool mentions(const std::string &msg, const std::vector<const char *> &words) {
    std::string m = lower(msg);
    for (const char *w : words) {
        std::string alts = lower(w);
        bool any = false;
        size_t start = 0;
        while (start <= alts.size()) {
            size_t bar = alts.find('|', start);
            std::string alt = alts.substr(start, bar == std::string::npos ? std::string::npos : bar - start);
            if (!alt.empty() && m.find(alt) != std::string::npos) any = true;
            if (bar == std::string::npos) break;
            start = bar + 1;
        }
        if (!any) return false;
    }
    return true;
}

// ---------------------------------------------------------------------------
// Options and routers.

using Opts = std::vector<std::pair<std::string, std::string>>;

adpr_status create(const Opts &opts, adpr_router *h, std::string *msg = nullptr) {
    std::vector<adpr_option> v;
    for (auto &kv : opts) v.push_back({kv.first.c_str(), kv.second.c_str()});
    char err[512] = "";
    adpr_status s = A.create(v.empty() ? nullptr : v.data(), (int32_t)v.size(), h, err, sizeof err);
    if (msg) *msg = err;
    return s;
}

adpr_router must_create(const Opts &opts) {
    adpr_router h = 0;
    std::string msg;
    adpr_status s = create(opts, &h, &msg);
    if (s != ADPR_OK || h == 0) {
        std::string o;
        for (auto &kv : opts) o += kv.first + "=" + kv.second + " ";
        check(false, "create router " + o, fmt("status %d: %s", s, msg.c_str()));
        return 0;
    }
    return h;
}

uint64_t digest(adpr_router h) {
    uint64_t d = 0;
    if (A.digest(h, &d) != ADPR_OK) return 0;
    return d;
}

// ---------------------------------------------------------------------------
// Batches.

struct Req {
    uint64_t id = 0;
    std::vector<int32_t> tokens;  // what goes into the token buffer
    int64_t num_tokens = 0;       // 0: tokens.size()
    int32_t target = ADPR_NO_TARGET;
    int32_t relax = 1;
    std::string conv;
    uint64_t lora = 0, salt = 0;
};

std::vector<int32_t> iota_tokens(int n, int32_t first = 0) {
    std::vector<int32_t> t(n);
    for (int i = 0; i < n; i++) t[i] = first + i;
    return t;
}

Req plain(uint64_t id, int n) {
    Req q;
    q.id = id;
    q.tokens = iota_tokens(n);
    return q;
}

Req targeted(uint64_t id, int n, int32_t target, bool strict) {
    Req q = plain(id, n);
    q.target = target;
    q.relax = strict ? 0 : 1;
    return q;
}

Req conv(uint64_t id, const std::string &c, int n = 10) {
    Req q = plain(id, n);
    q.conv = c;
    return q;
}

// A rank state with the KV fields zeroed ("capacity unknown"), as the header
// asks.
adpr_rank_state rank_state(int32_t rank, int32_t active, int64_t tokens) {
    adpr_rank_state s;
    std::memset(&s, 0, sizeof s);
    s.rank = rank;
    s.num_active_requests = active;
    s.num_active_tokens = tokens;
    return s;
}

std::vector<adpr_rank_state> states_of(std::initializer_list<std::pair<int32_t, int64_t>> pairs) {
    std::vector<adpr_rank_state> s;
    for (auto &p : pairs) s.push_back(rank_state((int32_t)s.size(), p.first, p.second));
    return s;
}

std::vector<adpr_rank_state> idle(int n) {
    std::vector<adpr_rank_state> s;
    for (int i = 0; i < n; i++) s.push_back(rank_state(i, 0, 0));
    return s;
}

struct Batch {
    std::vector<adpr_rank_state> states;
    std::vector<adpr_request> reqs;
    std::vector<int32_t> tokens;
    std::string text;
    std::vector<int32_t> match;  // [request * num_states + rank]
    bool has_match = false;
    int32_t maxn = 8;

    Batch() = default;
    Batch(std::vector<adpr_rank_state> s, std::vector<Req> rs, int32_t max_active)
        : states(std::move(s)), maxn(max_active) {
        for (auto &q : rs) add(q);
    }

    void add(const Req &q) {
        adpr_request r{};
        r.id = q.id;
        r.token_offset = (int64_t)tokens.size();
        r.token_count = (int64_t)q.tokens.size();
        r.num_tokens = q.num_tokens;
        r.conversation_offset = (int64_t)text.size();
        r.conversation_len = (int64_t)q.conv.size();
        r.target_rank = q.target;
        r.relax = q.relax;
        r.lora_id = q.lora;
        r.cache_salt = q.salt;
        tokens.insert(tokens.end(), q.tokens.begin(), q.tokens.end());
        text += q.conv;
        reqs.push_back(r);
    }

    void set_match(size_t req, size_t rank, int32_t m) {
        has_match = true;
        match.resize(reqs.size() * states.size(), 0);
        match[req * states.size() + rank] = m;
    }

    adpr_batch view() const {
        adpr_batch b{};
        b.states = states.empty() ? nullptr : states.data();
        b.num_states = (int32_t)states.size();
        b.num_requests = (int32_t)reqs.size();
        b.requests = reqs.empty() ? nullptr : reqs.data();
        b.tokens = tokens.empty() ? nullptr : tokens.data();
        b.tokens_len = (int64_t)tokens.size();
        b.text = text.empty() ? nullptr : text.data();
        b.text_len = (int64_t)text.size();
        b.match_lens = has_match ? match.data() : nullptr;
        b.max_num_active_requests = maxn;
        return b;
    }
};

using Assign = std::vector<std::vector<uint64_t>>;

std::string str(const std::vector<uint64_t> &ids) {
    std::string s = "[";
    for (size_t i = 0; i < ids.size(); i++) s += (i ? "," : "") + std::to_string(ids[i]);
    return s + "]";
}

std::string str(const Assign &a) {
    std::string s;
    for (size_t r = 0; r < a.size(); r++) s += (r ? " " : "") + str(a[r]);
    return s;
}

// Sentinels the library must not overwrite on failure.
constexpr int32_t kFill32 = 0x5A5A5A5A;
constexpr uint64_t kFill64 = 0x5A5A5A5A5A5A5A5AULL;
constexpr int32_t kFillExpected = -777;
constexpr int32_t kFillUnassigned = -888;

struct Out {
    std::vector<int32_t> ranks;
    std::vector<uint64_t> order;
    std::vector<int32_t> offsets;
    int32_t expected = kFillExpected;
    int32_t num_unassigned = kFillUnassigned;

    void reset(size_t nr, size_t ns) {
        ranks.assign(nr + 1, kFill32);  // +1: never a zero-sized buffer
        order.assign(nr + 1, kFill64);
        offsets.assign(ns + 1, kFill32);
        expected = kFillExpected;
        num_unassigned = kFillUnassigned;
    }
    adpr_route_result view() {
        adpr_route_result r{};
        r.request_rank = ranks.data();
        r.order = order.data();
        r.rank_offsets = offsets.data();
        r.expected = expected;
        r.num_unassigned = num_unassigned;
        return r;
    }
    bool untouched() const {
        return std::all_of(ranks.begin(), ranks.end(), [](int32_t v) { return v == kFill32; }) &&
               std::all_of(order.begin(), order.end(), [](uint64_t v) { return v == kFill64; }) &&
               std::all_of(offsets.begin(), offsets.end(), [](int32_t v) { return v == kFill32; }) &&
               expected == kFillExpected && num_unassigned == kFillUnassigned;
    }
    size_t ns() const { return offsets.size() - 1; }
    Assign assignment() const {
        Assign a(ns());
        for (size_t r = 0; r < ns(); r++)
            for (int32_t k = offsets[r]; k < offsets[r + 1]; k++) a[r].push_back(order[k]);
        return a;
    }
    std::vector<uint64_t> unassigned() const {
        size_t nr = ranks.size() - 1;
        return std::vector<uint64_t>(order.begin() + offsets[ns()], order.begin() + nr);
    }
    bool operator==(const Out &o) const {
        return ranks == o.ranks && order == o.order && offsets == o.offsets && expected == o.expected &&
               num_unassigned == o.num_unassigned;
    }
    bool operator!=(const Out &o) const { return !(*this == o); }
    std::string describe() const { return str(assignment()) + fmt(" expected %d unassigned ", expected) + str(unassigned()); }
};

adpr_status route(adpr_router h, const Batch &b, Out &o, std::string *msg = nullptr) {
    o.reset(b.reqs.size(), b.states.size());
    adpr_batch bv = b.view();
    adpr_route_result rv = o.view();
    char err[512] = "";
    adpr_status s = A.route(h, &bv, &rv, err, sizeof err);
    o.expected = rv.expected;
    o.num_unassigned = rv.num_unassigned;
    if (msg) *msg = err;
    return s;
}

// Checks that a successful result is self-consistent: every request appears
// exactly once, on the rank request_rank names, unassigned ones last and in
// input order. Returns "" or what is wrong.
std::string consistency(const Batch &b, const Out &o) {
    size_t nr = b.reqs.size(), ns = b.states.size();
    if (o.offsets[0] != 0) return "rank_offsets[0] != 0";
    for (size_t r = 0; r < ns; r++)
        if (o.offsets[r] > o.offsets[r + 1]) return fmt("rank_offsets not ascending at %zu", r);
    if ((size_t)o.offsets[ns] + (size_t)o.num_unassigned != nr)
        return fmt("rank_offsets[%zu] = %d plus num_unassigned %d != %zu requests", ns, o.offsets[ns],
                   o.num_unassigned, nr);
    std::map<uint64_t, size_t> index;
    for (size_t i = 0; i < nr; i++) index[b.reqs[i].id] = i;
    std::vector<int> seen(nr, 0);
    for (size_t r = 0; r < ns; r++)
        for (int32_t k = o.offsets[r]; k < o.offsets[r + 1]; k++) {
            auto it = index.find(o.order[k]);
            if (it == index.end()) return fmt("order[%d] = %llu is no request id", k, (unsigned long long)o.order[k]);
            if (o.ranks[it->second] != (int32_t)r)
                return fmt("id %llu listed on rank %zu but request_rank says %d", (unsigned long long)o.order[k], r,
                           o.ranks[it->second]);
            seen[it->second]++;
        }
    size_t k = o.offsets[ns];
    for (size_t i = 0; i < nr; i++) {
        if (o.ranks[i] == ADPR_UNPLACED) {
            if (k >= nr || o.order[k] != b.reqs[i].id) return fmt("unassigned id %llu missing from the order tail", (unsigned long long)b.reqs[i].id);
            k++;
            seen[i]++;
        } else if (o.ranks[i] < 0 || o.ranks[i] >= (int32_t)ns) {
            return fmt("request_rank[%zu] = %d out of range", i, o.ranks[i]);
        }
    }
    for (size_t i = 0; i < nr; i++)
        if (seen[i] != 1) return fmt("request %zu appears %d times", i, seen[i]);
    int32_t busiest = 0;
    std::vector<int32_t> count(ns);
    for (size_t r = 0; r < ns; r++) count[r] = b.states[r].num_active_requests + (o.offsets[r + 1] - o.offsets[r]);
    for (auto c : count) busiest = std::max(busiest, c);
    for (size_t r = 0; r < ns; r++)
        if (count[r] > b.maxn && o.offsets[r + 1] > o.offsets[r]) return fmt("rank %zu placed beyond max_num_active_requests", r);
    if (nr > 0 && o.expected < std::min(busiest, b.maxn)) return fmt("expected %d below a rank's load", o.expected);
    return "";
}

// ---------------------------------------------------------------------------
// Checks.

void check_basics(void *lib) {
    check(A.abi_version() == ADPR_ABI_VERSION, "adpr_abi_version() == ADPR_ABI_VERSION",
          fmt("library %u, header %d", A.abi_version(), ADPR_ABI_VERSION));
    const char *v = A.version();
    check(v != nullptr && v[0] != 0, "adpr_version() is non-empty", v ? v : "(null)");

    std::vector<std::string> texts;
    for (adpr_status s : {ADPR_OK, ADPR_ERR_INVALID_ARGUMENT, ADPR_ERR_INVALID_HANDLE, ADPR_ERR_CONFIG, ADPR_ERR_INTERNAL,
                          ADPR_ERR_NVML_UNAVAILABLE, ADPR_ERR_GPU_LOST, ADPR_ERR_NOT_SUPPORTED,
                          ADPR_ERR_NO_PERMISSION, ADPR_ERR_NOT_FOUND, ADPR_ERR_NVML, ADPR_ERR_FORKED, ADPR_ERR_SHORT_BUFFER}) {
        const char *t = A.strerror(s);
        check(t != nullptr && t[0] != 0 && std::strcmp(t, "unknown status") != 0, fmt("adpr_strerror(%d)", s),
              t ? fmt("\"%s\"", t) : "(null)");
        texts.push_back(t ? t : "");
    }
    std::vector<std::string> sorted = texts;
    std::sort(sorted.begin(), sorted.end());
    check(std::unique(sorted.begin(), sorted.end()) == sorted.end(), "adpr_strerror texts are distinct");
    for (adpr_status s : {13, -1, 1000}) {
        const char *t = A.strerror(s);
        check(t != nullptr && std::strcmp(t, "unknown status") == 0, fmt("adpr_strerror(%d) is \"unknown status\"", s),
              t ? t : "(null)");
    }

    // Only adpr_* symbols are exported (version script): Go/cgo internals stay local.
    for (const char *name : {"crosscall2", "_cgo_panic", "_cgo_topofstack", "capi_status_text", "adprgo_route", "main"}) {
        check(dlsym(lib, name) == nullptr, fmt("symbol %s is not exported", name));
    }
}

void check_create_policies() {
    std::vector<adpr_router> hs;
    const Opts cases[] = {
        {{"policy", "default"}, {"dp_size", "4"}},
        {{"policy", "kv_cache_aware"}, {"dp_size", "4"}},
        {{"policy", "conversation"}, {"dp_size", "4"}},
        {{"policy", "conversation"}, {"dp_size", "4"}, {"new_conv_placement", "least_queued"}, {"max_sessions", "10"}},
        {{"policy", "kv_cache_aware"}, {"dp_size", "8"}, {"load_balance_weight", "0.5"}, {"match_rate_threshold", "0.25"},
         {"fair_share_multiplier", "1.5"}, {"cold_start_warmup", "true"}},
        {{"policy", "default"}, {"dp_size", "4"}, {"capacity_aware", "true"}},
        {{"policy", "kv_cache_aware"}, {"dp_size", "4"}, {"prefix_source", "probe+index"}, {"warmup", "demand"},
         {"tokens_per_block", "16"}, {"index_capacity_blocks", "4096"}, {"warmup_factor", "1.5"}, {"warmup_window", "256"},
         {"warmup_min_requests", "2"}},
        {{"policy", "kv_cache_aware"}, {"dp_size", "4"}, {"prefix_source", "index"}, {"warmup", "once"}},
        {{"dp_size", "2"}},  // policy defaults to kv_cache_aware
        {{"policy", "conversation"}, {"dp_size", "4"}, {"fair_share_multiplier", "0.5"}},  // clamped, allowed
        {{"policy", "default"}, {"dp_size", "1"}, {"fair_share_multiplier", "0.5"}},       // unused, allowed
    };
    for (auto &opts : cases) {
        std::string desc;
        for (auto &kv : opts) desc += kv.first + "=" + kv.second + " ";
        adpr_router h = 0;
        std::string msg;
        adpr_status s = create(opts, &h, &msg);
        check(s == ADPR_OK && h != 0, "create " + desc, fmt("status %d handle %llu %s", s, (unsigned long long)h, msg.c_str()));
        if (h) hs.push_back(h);
    }
    std::vector<adpr_router> u = hs;
    std::sort(u.begin(), u.end());
    check(std::unique(u.begin(), u.end()) == u.end(), "handles are distinct and non-zero");
    for (auto h : hs) A.destroy(h);
}

// --- routing fixtures --------------------------------------------------------
//
// testdata/routing/*.txt (format: testdata/routing/README.md) hold the worked
// examples and vectors of docs/ROUTING.md and the cases every suite shares;
// the Go and Python suites read the same files. Each directive runs through
// the C ABI and its output, rendered in the fixtures' canonical text, must
// equal the expected text. "new" takes any option of the library (passed to
// adpr_router_create as is), "receipts" reads adpr_router_receipt_text and
// "state" adpr_router_pending_warmup and adpr_router_conversations. The C
// ABI has no random generator: "shuffle" is checked through routing (a lone
// request with id = seed on n tied ranks goes to the permutation's first
// element) and "genrand" is skipped.

struct Arg {
    std::string key, value;
    bool has_value = false;
};

struct Directive {
    std::string pos, cmd;
    std::vector<Arg> args;
    std::vector<std::string> input;
    std::string want;  // expected lines joined by '\n'
};

std::vector<std::string> fields_of(const std::string &line) {
    std::vector<std::string> f;
    std::istringstream in(line);
    for (std::string w; in >> w;) f.push_back(w);
    return f;
}

std::vector<Arg> args_of(const std::vector<std::string> &fields, size_t from) {
    std::vector<Arg> args;
    for (size_t i = from; i < fields.size(); i++) {
        Arg a;
        size_t eq = fields[i].find('=');
        a.key = fields[i].substr(0, eq);
        if (eq != std::string::npos) a.value = fields[i].substr(eq + 1), a.has_value = true;
        args.push_back(a);
    }
    return args;
}

// Parses one fixture file; on a malformed file returns false with *err set.
bool parse_fixture(const std::string &path, const std::string &name, std::vector<Directive> *out, std::string *err) {
    std::ifstream f(path);
    if (!f) {
        *err = "cannot open " + path;
        return false;
    }
    std::vector<std::string> lines;
    for (std::string s; std::getline(f, s);) {
        while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.pop_back();
        lines.push_back(s);
    }
    for (size_t i = 0; i < lines.size();) {
        const std::string &s = lines[i++];
        if (s.empty() || s[0] == '#') continue;
        Directive d;
        d.pos = name + ":" + std::to_string(i);
        std::vector<std::string> fields = fields_of(s);
        d.cmd = fields[0];
        d.args = args_of(fields, 1);
        while (i < lines.size() && !lines[i].empty() && lines[i] != "----") d.input.push_back(lines[i++]);
        if (i >= lines.size() || lines[i] != "----") {
            *err = d.pos + ": \"" + d.cmd + "\" has no \"----\" line before a blank line or the end of the file";
            return false;
        }
        i++;
        for (bool first = true; i < lines.size() && !lines[i].empty(); first = false) d.want += (first ? "" : "\n") + lines[i++];
        out->push_back(d);
    }
    return true;
}

const std::string &arg(const Directive &d, const std::string &key) {
    for (auto &a : d.args)
        if (a.key == key) return a.value;
    throw std::invalid_argument("missing argument " + key + "=");
}

// A comma-separated list of values v, runs lo..hi (lo, lo+1, ..., hi) and
// repetitions v*k (k copies of v).
std::vector<int32_t> int_list(const std::string &s) {
    constexpr long kMaxList = 1L << 20;
    std::vector<int32_t> v;
    std::istringstream in(s);
    for (std::string x; std::getline(in, x, ',');) {
        size_t run = x.find(".."), rep = x.find('*');
        if (run != std::string::npos) {
            long lo = std::stol(x.substr(0, run)), hi = std::stol(x.substr(run + 2));
            if (hi < lo || hi - lo >= kMaxList) throw std::invalid_argument("run " + x + ", want lo..hi with lo <= hi");
            for (long t = lo; t <= hi; t++) v.push_back((int32_t)t);
        } else if (rep != std::string::npos) {
            long val = std::stol(x.substr(0, rep)), k = std::stol(x.substr(rep + 1));
            if (k < 0 || k > kMaxList) throw std::invalid_argument("repetition " + x + ", want value*count");
            v.insert(v.end(), (size_t)k, (int32_t)val);
        } else {
            v.push_back((int32_t)std::stol(x));
        }
        if ((long)v.size() > kMaxList) throw std::invalid_argument("list too long: " + s);
    }
    return v;
}

std::string render(const Out &o) {
    std::string s = "assignment";
    for (auto &ids : o.assignment()) {
        s += " [";
        for (size_t i = 0; i < ids.size(); i++) s += (i ? "," : "") + std::to_string(ids[i]);
        s += "]";
    }
    s += fmt("\nexpected %d", o.expected);
    std::vector<uint64_t> u = o.unassigned();
    if (!u.empty()) {
        s += "\nunassigned [";
        for (size_t i = 0; i < u.size(); i++) s += (i ? "," : "") + std::to_string(u[i]);
        s += "]";
    }
    return s;
}

// Builds the batch of a "route" directive over size ranks.
Batch fixture_batch(const Directive &d, int32_t size) {
    for (auto &a : d.args)
        if (a.key != "maxn") throw std::invalid_argument("unknown argument " + a.key);
    Batch b(idle(size), {}, (int32_t)std::stol(arg(d, "maxn")));
    std::vector<std::vector<int32_t>> rows;
    for (auto &line : d.input) {
        std::vector<std::string> f = fields_of(line);
        if (f[0] == "states") {
            if (f.size() != (size_t)size + 1) throw std::invalid_argument(fmt("want %d rank states: ", size) + line);
            for (int32_t k = 0; k < size; k++) {
                // requests/tokens or requests/tokens/free_kv_tokens/kv_capacity_tokens
                std::vector<int64_t> v;
                std::istringstream in(f[k + 1]);
                for (std::string x; std::getline(in, x, '/');) v.push_back(std::stoll(x));
                if (v.size() != 2 && v.size() != 4)
                    throw std::invalid_argument("rank state " + f[k + 1] + ", want requests/tokens or requests/tokens/free/capacity");
                b.states[k] = rank_state(k, (int32_t)v[0], v[1]);
                if (v.size() == 4) b.states[k].free_kv_tokens = v[2], b.states[k].kv_capacity_tokens = v[3];
            }
            continue;
        }
        Req q;
        q.id = std::stoull(f[0]);
        int64_t n = 0;
        bool has_prompt = false;
        std::vector<int32_t> row;
        for (auto &a : args_of(f, 1)) {
            if (a.key == "n") n = std::stoll(a.value);
            else if (a.key == "prompt") q.tokens = int_list(a.value), has_prompt = true;
            else if (a.key == "target") q.target = (int32_t)std::stol(a.value);
            else if (a.key == "strict" && !a.has_value) q.relax = 0;
            else if (a.key == "relaxed" && !a.has_value) q.relax = 1;
            else if (a.key == "conv") q.conv = a.value;
            else if (a.key == "lora") q.lora = std::stoull(a.value);
            else if (a.key == "salt") q.salt = std::stoull(a.value);
            else if (a.key == "match") row = int_list(a.value);
            else throw std::invalid_argument("unknown request field " + a.key + ": " + line);
        }
        if (!row.empty() && row.size() != (size_t)size) throw std::invalid_argument(fmt("want %d match lengths: ", size) + line);
        if (has_prompt) q.num_tokens = n;
        else q.tokens = iota_tokens((int)n);
        b.add(q);
        rows.push_back(row);
    }
    for (size_t i = 0; i < rows.size(); i++)
        for (size_t k = 0; k < rows[i].size(); k++) b.set_match(i, k, rows[i][k]);
    return b;
}

// Runs the directives of one file in order on the router of the latest "new".
struct FixtureRunner {
    adpr_router h = 0;
    int32_t size = 0;
    bool routed = false;  // a route directive ran on h
    ~FixtureRunner() { reset(); }
    void reset() {
        if (h) A.destroy(h);
        h = 0;
        routed = false;
    }

    // The receipts of the last decision: all, in request order, or those of
    // the ids of id=a,b,... in that order.
    std::string receipts(const Directive &d, std::string *got) {
        if (!d.input.empty()) return "unexpected input " + d.input[0];
        std::vector<uint64_t> want;
        for (auto &a : d.args) {
            if (a.key != "id") return "unknown argument " + a.key;
            std::istringstream in(a.value);
            for (std::string x; std::getline(in, x, ',');) want.push_back(std::stoull(x));
        }
        if (!routed) return "no decision: \"route\" must come first";
        char err[512] = "";
        int64_t n = 0, nc = 0;
        adpr_status s = A.receipts(h, nullptr, 0, nullptr, 0, &n, &nc, err, sizeof err);
        if (s != ADPR_OK && s != ADPR_ERR_SHORT_BUFFER) return fmt("adpr_router_receipts: status %d: %s", s, err);
        std::vector<adpr_receipt> rc((size_t)n + 1);
        std::vector<adpr_candidate> cand((size_t)nc + 1);
        s = A.receipts(h, rc.data(), n, cand.data(), nc, &n, &nc, err, sizeof err);
        if (s != ADPR_OK) return fmt("adpr_router_receipts: status %d: %s", s, err);
        std::vector<int64_t> which;
        if (d.args.empty()) {
            for (int64_t i = 0; i < n; i++) which.push_back(i);
        }
        for (uint64_t id : want) {
            int64_t i = 0;
            while (i < n && rc[(size_t)i].id != id) i++;
            if (i == n) return fmt("no request %llu in the last decision", (unsigned long long)id);
            which.push_back(i);
        }
        for (size_t j = 0; j < which.size(); j++) {
            int64_t need = 0;
            s = A.receipt_text(h, which[j], nullptr, 0, &need, err, sizeof err);
            if (s != ADPR_ERR_SHORT_BUFFER && s != ADPR_OK) return fmt("adpr_router_receipt_text: status %d: %s", s, err);
            std::vector<char> buf((size_t)need);
            s = A.receipt_text(h, which[j], buf.data(), need, &need, err, sizeof err);
            if (s != ADPR_OK) return fmt("adpr_router_receipt_text: status %d: %s", s, err);
            *got += (j ? "\n" : "") + std::string(buf.data());
        }
        return "";
    }

    // The pending warmup ranks and the conversation bindings, least
    // recently used first.
    std::string state(const Directive &d, std::string *got) {
        if (!d.input.empty() || !d.args.empty()) return "state takes no arguments or input";
        char err[512] = "";
        int64_t total = 0;
        adpr_status s = A.pending_warmup(h, nullptr, 0, &total, err, sizeof err);
        std::vector<int32_t> ranks((size_t)total + 1);
        if (s == ADPR_ERR_SHORT_BUFFER) s = A.pending_warmup(h, ranks.data(), total, &total, err, sizeof err);
        if (s != ADPR_OK) return fmt("adpr_router_pending_warmup: status %d: %s", s, err);
        *got = "pending_warmup [";
        for (int64_t i = 0; i < total; i++) *got += (i ? "," : "") + std::to_string(ranks[(size_t)i]);
        int64_t nb = 0, nbytes = 0;
        s = A.conversations(h, nullptr, 0, nullptr, 0, &nb, &nbytes, err, sizeof err);
        std::vector<adpr_binding> bs((size_t)nb + 1);
        std::vector<char> ids((size_t)nbytes + 1);
        if (s == ADPR_ERR_SHORT_BUFFER) s = A.conversations(h, bs.data(), nb, ids.data(), nbytes, &nb, &nbytes, err, sizeof err);
        if (s != ADPR_OK) return fmt("adpr_router_conversations: status %d: %s", s, err);
        *got += "]\nconversations [";
        for (int64_t i = 0; i < nb; i++) {
            const adpr_binding &b = bs[(size_t)i];
            *got += (i ? " " : "") + std::string(ids.data() + b.id_offset, (size_t)b.id_length) + "=" + std::to_string(b.rank);
        }
        *got += "]";
        return "";
    }

    // Runs d; returns "" or what went wrong. *got is the output, compared
    // with the expected text unless *compare is false.
    std::string run(const Directive &d, std::string *got, bool *compare) {
        *compare = true;
        got->clear();
        if (d.cmd == "new") {
            reset();
            Opts opts;
            for (auto &a : d.args) {
                if (!a.has_value) return "option " + a.key + " has no value";
                opts.push_back({a.key, a.value});
                if (a.key == "dp_size") size = (int32_t)std::stol(a.value);
            }
            std::string msg;
            adpr_status s = create(opts, &h, &msg);
            return s == ADPR_OK && d.input.empty() ? "" : fmt("status %d: %s", s, msg.c_str());
        }
        if ((d.cmd == "route" || d.cmd == "stats" || d.cmd == "state" || d.cmd == "receipts") && !h)
            return "no router: \"new\" must come first";
        if (d.cmd == "route") {
            Batch b = fixture_batch(d, size);
            Out o;
            std::string msg;
            adpr_status s = route(h, b, o, &msg);
            if (s != ADPR_OK) return fmt("status %d: %s", s, msg.c_str());
            std::string bad = consistency(b, o);
            if (!bad.empty()) return bad;
            routed = true;
            *got = render(o);
            return "";
        }
        if (d.cmd == "receipts") return receipts(d, got);
        if (d.cmd == "state") return state(d, got);
        if (d.cmd == "stats") {
            adpr_stats st;
            char err[256] = "";
            int64_t groups = 0;
            adpr_status s = A.stats(h, &st, nullptr, 0, nullptr, 0, &groups, err, sizeof err);
            if (s != ADPR_OK) return fmt("status %d: %s", s, err);
            *got = fmt("pending_warmup %lld\nconversations %lld", (long long)st.pending_warmup, (long long)st.conversations);
            return "";
        }
        if (d.cmd == "shuffle") {
            uint64_t seed = std::stoull(arg(d, "seed"));
            int32_t n = (int32_t)std::stol(arg(d, "n"));
            std::vector<std::string> want = fields_of(d.want);
            if (want.empty()) return "expected output is not a permutation";
            int32_t first = (int32_t)std::stol(want[0]);
            adpr_router r = must_create({{"policy", "kv_cache_aware"}, {"dp_size", std::to_string(n)}});
            if (!r) return "cannot create a router";
            Batch b(idle(n), {plain(seed, 10)}, 1);
            Out o;
            adpr_status s = route(r, b, o);
            A.destroy(r);
            *compare = false;
            if (s != ADPR_OK || o.ranks[0] != first)
                return fmt("a lone request with id %llu on %d tied ranks went to rank %d (status %d), want %d (the first element)",
                           (unsigned long long)seed, n, o.ranks[0], s, first);
            return "";
        }
        if (d.cmd == "genrand") {
            *compare = false;  // the C ABI exposes no generator
            return "";
        }
        return "unknown command (want new, route, stats, state, receipts, shuffle or genrand)";
    }
};

void check_fixtures() {
    const char *env = std::getenv("ADPROUTER_FIXTURES");
    std::string dir = env && *env ? env : "testdata/routing";
    std::vector<std::string> names;
    if (DIR *dp = opendir(dir.c_str())) {
        while (dirent *e = readdir(dp)) {
            std::string n = e->d_name;
            if (n.size() > 4 && n.compare(n.size() - 4, 4, ".txt") == 0) names.push_back(n);
        }
        closedir(dp);
    }
    std::sort(names.begin(), names.end());
    if (!check(!names.empty(), "routing fixtures found in " + dir, "run from the repository root or set ADPROUTER_FIXTURES"))
        return;
    size_t directives = 0;
    for (auto &name : names) {
        std::vector<Directive> ds;
        std::string err;
        if (!check(parse_fixture(dir + "/" + name, name, &ds, &err), "parse fixture " + name, err)) continue;
        directives += ds.size();
        FixtureRunner runner;
        for (auto &d : ds) {
            std::string got;
            bool compare = true;
            std::string bad;
            try {
                bad = runner.run(d, &got, &compare);
            } catch (const std::exception &e) {
                bad = std::string("bad fixture: ") + e.what();
            }
            if (bad.empty() && compare && got != d.want) bad = "got\n" + got + "\nwant\n" + d.want;
            check(bad.empty(), "fixture " + d.pos + " " + d.cmd, bad);
        }
    }
    note(fmt("routing fixtures: %zu files, %zu directives run from %s", names.size(), directives, dir.c_str()));
}

void check_unassigned() {
    // Default: only rank 1 has room for one request; the largest goes there.
    {
        adpr_router h = must_create({{"policy", "default"}, {"dp_size", "2"}});
        Batch b(states_of({{1, 0}, {0, 0}}), {plain(10, 5), plain(11, 7), plain(12, 3)}, 1);
        Out o;
        std::string msg;
        adpr_status s = route(h, b, o, &msg);
        bool ok = s == ADPR_OK && o.ranks[0] == ADPR_UNPLACED && o.ranks[1] == 1 && o.ranks[2] == ADPR_UNPLACED &&
                  o.num_unassigned == 2 && o.offsets == std::vector<int32_t>{0, 0, 1} &&
                  std::vector<uint64_t>(o.order.begin(), o.order.begin() + 3) == std::vector<uint64_t>{11, 10, 12} &&
                  o.expected == 1 && consistency(b, o).empty();
        check(ok, "unassigned (default): order tail [10,12] after rank_offsets[2] = 1, request_rank UNPLACED, num_unassigned 2",
              fmt("status %d ranks [%d,%d,%d] offsets [%d,%d,%d] %s", s, o.ranks[0], o.ranks[1], o.ranks[2], o.offsets[0],
                  o.offsets[1], o.offsets[2], o.describe().c_str()));
        A.destroy(h);
    }
    // KV-aware: both idle ranks take one (soft cap = maxn = 1); the third is reported.
    {
        adpr_router h = must_create({{"policy", "kv_cache_aware"}, {"dp_size", "2"}});
        Batch b(idle(2), {plain(1, 10), plain(2, 10), plain(3, 10)}, 1);
        Out o;
        adpr_status s = route(h, b, o);
        std::string bad = consistency(b, o);
        check(s == ADPR_OK && o.num_unassigned == 1 && o.unassigned() == std::vector<uint64_t>{3} && o.ranks[2] == ADPR_UNPLACED &&
                  bad.empty(),
              "unassigned (kv_cache_aware): 2 placed, id 3 reported", fmt("status %d %s %s", s, o.describe().c_str(), bad.c_str()));
        A.destroy(h);
    }
    // Conversation: every rank at the hard cap; all reported, input order.
    {
        adpr_router h = must_create({{"policy", "conversation"}, {"dp_size", "2"}});
        Batch b(states_of({{1, 5}, {1, 5}}), {conv(7, "x"), conv(5, "y")}, 1);
        Out o;
        adpr_status s = route(h, b, o);
        check(s == ADPR_OK && o.num_unassigned == 2 && o.offsets == std::vector<int32_t>{0, 0, 0} &&
                  o.unassigned() == std::vector<uint64_t>{7, 5} && o.ranks[0] == ADPR_UNPLACED && o.ranks[1] == ADPR_UNPLACED &&
                  consistency(b, o).empty(),
              "unassigned (conversation): all ranks full, both reported in input order", fmt("status %d %s", s, o.describe().c_str()));
        A.destroy(h);
    }
    // Outputs are optional: all NULL still routes and reports expected / num_unassigned.
    {
        adpr_router h = must_create({{"policy", "default"}, {"dp_size", "2"}});
        Batch b(states_of({{1, 0}, {0, 0}}), {plain(10, 5), plain(11, 7), plain(12, 3)}, 1);
        adpr_batch bv = b.view();
        adpr_route_result r{};
        r.expected = -5;
        r.num_unassigned = -5;
        adpr_status s = A.route(h, &bv, &r, nullptr, 0);
        check(s == ADPR_OK && r.expected == 1 && r.num_unassigned == 2, "route with every output pointer NULL",
              fmt("status %d expected %d num_unassigned %d", s, r.expected, r.num_unassigned));
        // rank_offsets alone (no order): the header does not say whether it is filled.
        std::vector<int32_t> off(3, kFill32);
        adpr_route_result r2{};
        r2.rank_offsets = off.data();
        s = A.route(h, &bv, &r2, nullptr, 0);
        check(s == ADPR_OK, "route with only rank_offsets set succeeds", fmt("status %d", s));
        if (off[0] == kFill32)
            note("rank_offsets without order is left unwritten (per-rank counts are not reported unless order is given too)");
        else
            note(fmt("rank_offsets without order is written: [%d,%d,%d]", off[0], off[1], off[2]));
        // Zero requests.
        Batch empty(idle(2), {}, 4);
        Out o;
        s = route(h, empty, o);
        check(s == ADPR_OK && o.num_unassigned == 0 && o.offsets == std::vector<int32_t>{0, 0, 0},
              "route of an empty batch", fmt("status %d expected %d", s, o.expected));
        A.destroy(h);
    }
    // A 0-token request on an idle system (the reference divides by zero).
    {
        adpr_router h = must_create({{"policy", "kv_cache_aware"}, {"dp_size", "4"}});
        Batch b(idle(4), {plain(1, 0), plain(2, 0)}, 4);
        Out o;
        adpr_status s = route(h, b, o);
        check(s == ADPR_OK && o.num_unassigned == 0 && consistency(b, o).empty(), "kv: 0-token requests on idle ranks are placed",
              fmt("status %d %s", s, o.describe().c_str()));
        A.destroy(h);
    }
}

// --- error paths -----------------------------------------------------------

struct Config {
    const char *name;
    Opts opts;
};

const std::vector<Config> &error_configs() {
    static const std::vector<Config> c = {
        {"kv+warmup", {{"policy", "kv_cache_aware"}, {"dp_size", "4"}, {"cold_start_warmup", "true"}}},
        {"conversation", {{"policy", "conversation"}, {"dp_size", "4"}}},
        {"default", {{"policy", "default"}, {"dp_size", "4"}}},
    };
    return c;
}

// A good batch whose routing changes every policy's state (warmup slots,
// round-robin cursor, conversation bindings).
Batch good_batch() {
    Batch b(states_of({{1, 100}, {0, 0}, {2, 300}, {0, 50}}), {}, 8);
    for (uint64_t i = 0; i < 6; i++) {
        Req q = plain(100 + i, 20 + (int)i);
        q.conv = "conv-" + std::to_string(i);
        b.add(q);
    }
    for (size_t i = 0; i < 6; i++) b.set_match(i, i % 4, 16);
    return b;
}

struct ErrorCase {
    const char *name;
    adpr_status want;
    std::vector<const char *> words;
    bool kv_only;
    // Turns the good batch into a bad one (the defect is placed last where
    // possible, so a half-applied call would have changed state).
    void (*spoil)(Batch &b, adpr_batch &bv, adpr_route_result &rv, bool &null_batch, bool &null_result);
};

// The engine's KV state beside the pool reaches the router: rank 0 holds
// all but 32 tokens of a 4096-token prompt with 3000 tokens free; reported
// as none evictable, the prefix is held by running requests and the prompt
// (512 tokens of output) fits there, else it goes to rank 1, whose queued
// requests are reported to take 8000 of its 40000 free (router/examples_test.go
// has the same case in Go).
void check_kv_state() {
    for (bool report : {true, false}) {
        adpr_router h = must_create({{"preset", "recommended"}, {"dp_size", "2"}});
        if (!h) return;
        std::vector<adpr_rank_state> st = states_of({{4, 6000}, {4, 6000}});
        for (auto &s : st) {
            s.kv_capacity_tokens = 65536;
            s.flags = ADPR_RANK_PENDING_KV | (report ? ADPR_RANK_EVICTABLE_KV : 0);
        }
        st[0].free_kv_tokens = 3000;
        st[1].free_kv_tokens = 40000;
        st[1].pending_kv_tokens = 8000;
        Req q;
        q.id = 1;
        q.num_tokens = 4096;
        Batch b(st, {q}, 8);
        b.reqs[0].max_new_tokens = 512;
        b.set_match(0, 0, 4064);
        Out o;
        std::string msg;
        adpr_status s = route(h, b, o, &msg);
        int want = report ? 0 : 1;
        check(s == ADPR_OK && o.ranks[0] == want,
              fmt("KV state: evictable KV %s, the held prefix's request goes to rank %d", report ? "reported" : "not reported", want),
              fmt("status %d (%s) rank %d", s, msg.c_str(), o.ranks[0]));
        A.destroy(h);
    }
}

void check_route_errors() {
    const ErrorCase cases[] = {
        {"NULL batch", ADPR_ERR_INVALID_ARGUMENT, {"batch"}, false,
         [](Batch &, adpr_batch &, adpr_route_result &, bool &nb, bool &) { nb = true; }},
        {"NULL result", ADPR_ERR_INVALID_ARGUMENT, {"result"}, false,
         [](Batch &, adpr_batch &, adpr_route_result &, bool &, bool &nr) { nr = true; }},
        {"states out of rank order", ADPR_ERR_INVALID_ARGUMENT, {"states", "rank"}, false,
         [](Batch &b, adpr_batch &, adpr_route_result &, bool &, bool &) { std::swap(b.states[2].rank, b.states[3].rank); }},
        {"wrong number of states (3 for dp_size 4)", ADPR_ERR_INVALID_ARGUMENT, {"states", "dp_size|4"}, false,
         [](Batch &, adpr_batch &bv, adpr_route_result &, bool &, bool &) { bv.num_states = 3; }},
        {"negative num_states", ADPR_ERR_INVALID_ARGUMENT, {"num_states"}, false,
         [](Batch &, adpr_batch &bv, adpr_route_result &, bool &, bool &) { bv.num_states = -1; }},
        {"target_rank 4 out of range", ADPR_ERR_INVALID_ARGUMENT, {"target_rank", "4"}, false,
         [](Batch &b, adpr_batch &, adpr_route_result &, bool &, bool &) { b.reqs.back().target_rank = 4; }},
        {"target_rank -2", ADPR_ERR_INVALID_ARGUMENT, {"target_rank", "-2"}, false,
         [](Batch &b, adpr_batch &, adpr_route_result &, bool &, bool &) { b.reqs.back().target_rank = -2; }},
        {"relax = 2", ADPR_ERR_INVALID_ARGUMENT, {"relax", "2"}, false,
         [](Batch &b, adpr_batch &, adpr_route_result &, bool &, bool &) { b.reqs.back().relax = 2; }},
        {"duplicate request ids", ADPR_ERR_INVALID_ARGUMENT, {"id", "more than once|duplicate"}, false,
         [](Batch &b, adpr_batch &, adpr_route_result &, bool &, bool &) { b.reqs.back().id = b.reqs.front().id; }},
        {"token range outside the buffer", ADPR_ERR_INVALID_ARGUMENT, {"token", "outside|out of range|beyond"}, false,
         [](Batch &b, adpr_batch &, adpr_route_result &, bool &, bool &) { b.reqs.back().token_count += 1; }},
        {"negative token_offset", ADPR_ERR_INVALID_ARGUMENT, {"token"}, false,
         [](Batch &b, adpr_batch &, adpr_route_result &, bool &, bool &) { b.reqs.back().token_offset = -1; }},
        {"tokens NULL with tokens_len > 0", ADPR_ERR_INVALID_ARGUMENT, {"tokens"}, false,
         [](Batch &, adpr_batch &bv, adpr_route_result &, bool &, bool &) { bv.tokens = nullptr; }},
        {"conversation range outside the text", ADPR_ERR_INVALID_ARGUMENT, {"conversation", "outside|out of range|beyond"}, false,
         [](Batch &b, adpr_batch &, adpr_route_result &, bool &, bool &) { b.reqs.back().conversation_len += 1; }},
        {"negative num_tokens", ADPR_ERR_INVALID_ARGUMENT, {"num_tokens"}, false,
         [](Batch &b, adpr_batch &, adpr_route_result &, bool &, bool &) { b.reqs.back().num_tokens = -3; }},
        {"num_tokens smaller than the tokens given", ADPR_ERR_INVALID_ARGUMENT, {"num_tokens"}, false,
         [](Batch &b, adpr_batch &, adpr_route_result &, bool &, bool &) { b.reqs.back().num_tokens = 2; }},
        {"negative num_active_requests", ADPR_ERR_INVALID_ARGUMENT, {"num_active_requests"}, false,
         [](Batch &b, adpr_batch &, adpr_route_result &, bool &, bool &) { b.states[3].num_active_requests = -1; }},
        {"negative num_active_tokens", ADPR_ERR_INVALID_ARGUMENT, {"num_active_tokens"}, false,
         [](Batch &b, adpr_batch &, adpr_route_result &, bool &, bool &) { b.states[3].num_active_tokens = -1; }},
        {"unknown rank state flag", ADPR_ERR_INVALID_ARGUMENT, {"flags"}, false,
         [](Batch &b, adpr_batch &, adpr_route_result &, bool &, bool &) { b.states[3].flags = 8; }},
        {"pending_kv_tokens without ADPR_RANK_PENDING_KV", ADPR_ERR_INVALID_ARGUMENT, {"pending_kv_tokens"}, false,
         [](Batch &b, adpr_batch &, adpr_route_result &, bool &, bool &) { b.states[3].pending_kv_tokens = 64; }},
        {"evictable_kv_tokens above free_kv_tokens", ADPR_ERR_INVALID_ARGUMENT, {"evictable_kv_tokens"}, false,
         [](Batch &b, adpr_batch &, adpr_route_result &, bool &, bool &) {
             b.states[3].kv_capacity_tokens = 1000;
             b.states[3].free_kv_tokens = 100;
             b.states[3].flags = ADPR_RANK_EVICTABLE_KV;
             b.states[3].evictable_kv_tokens = 101;
         }},
        {"negative max_new_tokens", ADPR_ERR_INVALID_ARGUMENT, {"max_new_tokens", "-7"}, false,
         [](Batch &b, adpr_batch &, adpr_route_result &, bool &, bool &) { b.reqs.back().max_new_tokens = -7; }},
        {"rank state reserved != 0", ADPR_ERR_INVALID_ARGUMENT, {"reserved"}, false,
         [](Batch &b, adpr_batch &, adpr_route_result &, bool &, bool &) { b.states[3].reserved = 1; }},
        {"negative kv_capacity_tokens", ADPR_ERR_INVALID_ARGUMENT, {"kv_capacity_tokens"}, false,
         [](Batch &b, adpr_batch &, adpr_route_result &, bool &, bool &) { b.states[3].kv_capacity_tokens = -1; }},
        {"free_kv_tokens above kv_capacity_tokens", ADPR_ERR_INVALID_ARGUMENT, {"free_kv_tokens"}, false,
         [](Batch &b, adpr_batch &, adpr_route_result &, bool &, bool &) {
             b.states[3].kv_capacity_tokens = 1000;
             b.states[3].free_kv_tokens = 1001;
         }},
        {"requests NULL with num_requests > 0", ADPR_ERR_INVALID_ARGUMENT, {"requests"}, false,
         [](Batch &, adpr_batch &bv, adpr_route_result &, bool &, bool &) { bv.requests = nullptr; }},
        {"negative match length", ADPR_ERR_INVALID_ARGUMENT, {"match", "-5"}, true,
         [](Batch &b, adpr_batch &, adpr_route_result &, bool &, bool &) { b.match.back() = -5; }},
        {"order without rank_offsets", ADPR_ERR_INVALID_ARGUMENT, {"rank_offsets"}, false,
         [](Batch &, adpr_batch &, adpr_route_result &rv, bool &, bool &) { rv.rank_offsets = nullptr; }},
        {"max_num_active_requests 0", ADPR_ERR_INVALID_ARGUMENT, {"max_num_active_requests", "0"}, false,
         [](Batch &, adpr_batch &bv, adpr_route_result &, bool &, bool &) { bv.max_num_active_requests = 0; }},
        {"max_num_active_requests -1", ADPR_ERR_INVALID_ARGUMENT, {"max_num_active_requests"}, false,
         [](Batch &, adpr_batch &bv, adpr_route_result &, bool &, bool &) { bv.max_num_active_requests = -1; }},
    };

    const Batch good = good_batch();
    for (auto &cfg : error_configs()) {
        bool kv = cfg.opts[0].second == "kv_cache_aware";
        for (auto &c : cases) {
            if (c.kv_only && !kv) continue;
            adpr_router r = must_create(cfg.opts), twin = must_create(cfg.opts);
            if (!r || !twin) continue;
            // The same short history on both first: one warmup slot used,
            // one conversation bound, the cursor moved; three slots stay
            // pending, so a half-applied bad call would show.
            Batch history(idle(4), {conv(1, "history")}, 8);
            Out h1, h2;
            route(r, history, h1);
            route(twin, history, h2);

            Batch bad = good;
            Out o;
            o.reset(bad.reqs.size(), bad.states.size());
            adpr_batch bv;
            adpr_route_result rv = o.view();
            bool null_batch = false, null_result = false;
            // Spoil the C views after they are built, except for edits to the
            // vectors themselves (views point into them, so order is free).
            bv = bad.view();
            c.spoil(bad, bv, rv, null_batch, null_result);
            char err[512];
            std::memset(err, 'X', sizeof err);
            adpr_status s = A.route(r, null_batch ? nullptr : &bv, null_result ? nullptr : &rv, err, sizeof err);
            std::string msg(err, strnlen(err, sizeof err));
            bool terminated = std::memchr(err, 0, sizeof err) != nullptr;
            // Outputs: the caller's buffers and the result struct's counters.
            o.expected = rv.expected;
            o.num_unassigned = rv.num_unassigned;
            bool untouched = o.untouched();

            bool same_digest = digest(r) == digest(twin) && digest(r) != 0;
            Out a, b;
            adpr_status sa = route(r, good, a), sb = route(twin, good, b);
            bool same = sa == ADPR_OK && sb == ADPR_OK && a == b && same_digest;
            bool ok = s == c.want && terminated && mentions(msg, c.words) && untouched && same;
            check(ok, fmt("route error: %s [%s]", c.name, cfg.name),
                  fmt("status %d (want %d) \"%s\"%s%s%s", s, c.want, msg.c_str(), untouched ? "" : "; OUTPUTS CHANGED",
                      same ? "" : "; ROUTER DIFFERS FROM ITS TWIN", terminated ? "" : "; message not NUL-terminated"));
            A.destroy(r);
            A.destroy(twin);
        }
    }
}

void check_create_errors() {
    struct Case {
        const char *name;
        Opts opts;
        adpr_status want;
        std::vector<const char *> words;
    };
    const Case cases[] = {
        {"unknown option key", {{"policy", "kv_cache_aware"}, {"dp_size", "4"}, {"load_balance_wieght", "1"}}, ADPR_ERR_CONFIG,
         {"load_balance_wieght"}},
        {"NaN load_balance_weight", {{"dp_size", "4"}, {"load_balance_weight", "nan"}}, ADPR_ERR_CONFIG, {"load_balance_weight"}},
        {"infinite load_balance_weight", {{"dp_size", "4"}, {"load_balance_weight", "inf"}}, ADPR_ERR_CONFIG, {"load_balance_weight"}},
        {"negative load_balance_weight", {{"dp_size", "4"}, {"load_balance_weight", "-1"}}, ADPR_ERR_CONFIG, {"load_balance_weight"}},
        {"non-numeric load_balance_weight", {{"dp_size", "4"}, {"load_balance_weight", "heavy"}}, ADPR_ERR_CONFIG,
         {"load_balance_weight", "heavy"}},
        {"negative match_rate_threshold", {{"dp_size", "4"}, {"match_rate_threshold", "-0.5"}}, ADPR_ERR_CONFIG,
         {"match_rate_threshold"}},
        {"NaN match_rate_threshold", {{"dp_size", "4"}, {"match_rate_threshold", "NaN"}}, ADPR_ERR_CONFIG, {"match_rate_threshold"}},
        {"bad policy", {{"policy", "kv_aware"}, {"dp_size", "4"}}, ADPR_ERR_CONFIG, {"policy", "kv_aware"}},
        {"fair_share_multiplier 0.5 for kv_cache_aware", {{"policy", "kv_cache_aware"}, {"dp_size", "4"}, {"fair_share_multiplier", "0.5"}},
         ADPR_ERR_CONFIG, {"fair_share_multiplier"}},
        {"duplicate key", {{"dp_size", "4"}, {"policy", "default"}, {"dp_size", "4"}}, ADPR_ERR_CONFIG,
         {"dp_size", "more than once|repeated|duplicate|twice"}},
        {"missing dp_size", {{"policy", "default"}}, ADPR_ERR_CONFIG, {"dp_size"}},
        {"no options at all", {}, ADPR_ERR_CONFIG, {"dp_size"}},
        {"dp_size 0", {{"dp_size", "0"}}, ADPR_ERR_CONFIG, {"dp_size"}},
        {"dp_size not a number", {{"dp_size", "four"}}, ADPR_ERR_CONFIG, {"dp_size", "four"}},
        {"max_sessions 0", {{"policy", "conversation"}, {"dp_size", "4"}, {"max_sessions", "0"}}, ADPR_ERR_CONFIG, {"max_sessions"}},
        {"bad new_conv_placement", {{"policy", "conversation"}, {"dp_size", "4"}, {"new_conv_placement", "random"}}, ADPR_ERR_CONFIG,
         {"new_conv_placement", "random"}},
        {"bad cold_start_warmup", {{"dp_size", "4"}, {"cold_start_warmup", "yes"}}, ADPR_ERR_CONFIG, {"cold_start_warmup"}},
        {"bad capacity_aware", {{"dp_size", "4"}, {"capacity_aware", "maybe"}}, ADPR_ERR_CONFIG, {"capacity_aware"}},
        {"bad prefix_source", {{"dp_size", "4"}, {"prefix_source", "radix"}}, ADPR_ERR_CONFIG, {"prefix_source", "radix"}},
        {"prefix_source index for the default policy", {{"policy", "default"}, {"dp_size", "4"}, {"prefix_source", "index"}},
         ADPR_ERR_CONFIG, {"prefix_source"}},
        {"bad warmup", {{"dp_size", "4"}, {"warmup", "always"}}, ADPR_ERR_CONFIG, {"warmup", "always"}},
        {"warmup demand with cold_start_warmup", {{"dp_size", "4"}, {"warmup", "demand"}, {"cold_start_warmup", "true"}},
         ADPR_ERR_CONFIG, {"warmup"}},
        {"tokens_per_block 0", {{"dp_size", "4"}, {"tokens_per_block", "0"}}, ADPR_ERR_CONFIG, {"tokens_per_block"}},
        {"warmup_factor 0", {{"dp_size", "4"}, {"warmup_factor", "0"}}, ADPR_ERR_CONFIG, {"warmup_factor"}},
        {"negative index_capacity_blocks", {{"dp_size", "4"}, {"index_capacity_blocks", "-1"}}, ADPR_ERR_CONFIG,
         {"index_capacity_blocks"}},
    };
    for (auto &c : cases) {
        adpr_router h = 0xDEADBEEF;
        std::string msg;
        adpr_status s = create(c.opts, &h, &msg);
        bool ok = s == c.want && mentions(msg, c.words) && h == 0xDEADBEEF;
        check(ok, fmt("create error: %s", c.name),
              fmt("status %d (want %d) \"%s\"%s", s, c.want, msg.c_str(), h == 0xDEADBEEF ? "" : "; *out CHANGED"));
        if (s == ADPR_OK) A.destroy(h);
    }

    // NULL pointers: invalid arguments rather than bad options.
    char err[256];
    adpr_router h = 0xDEADBEEF;
    adpr_option null_key[] = {{"dp_size", "4"}, {nullptr, "x"}};
    adpr_status s = A.create(null_key, 2, &h, err, sizeof err);
    check((s == ADPR_ERR_INVALID_ARGUMENT || s == ADPR_ERR_CONFIG) && mentions(err, {"null"}) && mentions(err, {"key|options[1]"}) &&
              h == 0xDEADBEEF,
          "create error: NULL key", fmt("status %d \"%s\"", s, err));
    adpr_option null_value[] = {{"dp_size", "4"}, {"policy", nullptr}};
    s = A.create(null_value, 2, &h, err, sizeof err);
    check((s == ADPR_ERR_INVALID_ARGUMENT || s == ADPR_ERR_CONFIG) && mentions(err, {"null"}) && h == 0xDEADBEEF,
          "create error: NULL value", fmt("status %d \"%s\"", s, err));
    adpr_option ok_opts[] = {{"dp_size", "4"}};
    s = A.create(ok_opts, 1, nullptr, err, sizeof err);
    check(s == ADPR_ERR_INVALID_ARGUMENT && mentions(err, {"out"}), "create error: out NULL", fmt("status %d \"%s\"", s, err));
    s = A.create(nullptr, 2, &h, err, sizeof err);
    check(s == ADPR_ERR_INVALID_ARGUMENT && mentions(err, {"option"}) && h == 0xDEADBEEF,
          "create error: options NULL with num_options 2", fmt("status %d \"%s\"", s, err));
    s = A.create(ok_opts, -1, &h, err, sizeof err);
    check(s == ADPR_ERR_INVALID_ARGUMENT && mentions(err, {"option"}) && h == 0xDEADBEEF, "create error: num_options -1",
          fmt("status %d \"%s\"", s, err));
}

void check_error_buffer() {
    adpr_router h = must_create({{"policy", "default"}, {"dp_size", "2"}});
    adpr_route_result rv{};
    char full[512];
    adpr_status s0 = A.route(h, nullptr, &rv, full, sizeof full);
    std::string msg = full;
    check(s0 == ADPR_ERR_INVALID_ARGUMENT && msg.size() > 8, "error message of a route error", "\"" + msg + "\"");

    for (size_t len : {size_t(8), size_t(1)}) {
        char buf[64];
        std::memset(buf, 'X', sizeof buf);
        adpr_status s = A.route(h, nullptr, &rv, buf, len);
        bool ok = s == s0 && buf[len - 1] == 0 && std::strncmp(buf, msg.c_str(), len - 1) == 0 &&
                  std::all_of(buf + len, buf + sizeof buf, [](char c) { return c == 'X'; });
        check(ok, fmt("err_len %zu: NUL-terminated prefix, nothing written past err_len", len),
              fmt("\"%s\"", std::string(buf, strnlen(buf, len)).c_str()));
    }
    {
        char buf[16];
        std::memset(buf, 'X', sizeof buf);
        adpr_status s = A.route(h, nullptr, &rv, buf, 0);
        check(s == s0 && std::all_of(buf, buf + sizeof buf, [](char c) { return c == 'X'; }), "err_len 0: buffer untouched");
    }
    check(A.route(h, nullptr, &rv, nullptr, 0) == s0, "route error with err NULL, err_len 0");
    adpr_router h2 = 0;
    adpr_option bad[] = {{"dp_size", "0"}};
    check(A.create(bad, 1, &h2, nullptr, 0) == ADPR_ERR_CONFIG, "create error with err NULL, err_len 0");
    {
        char buf[12];
        std::memset(buf, 'X', sizeof buf);
        adpr_status s = A.create(bad, 1, &h2, buf, 6);
        check(s == ADPR_ERR_CONFIG && buf[5] == 0 && std::strlen(buf) == 5 && buf[6] == 'X',
              "create error with err_len 6: 5 characters and a NUL", fmt("\"%s\"", buf));
    }
    A.destroy(h);
}

void check_handles() {
    adpr_router h = must_create({{"policy", "kv_cache_aware"}, {"dp_size", "2"}});
    Batch b(idle(2), {plain(1, 10)}, 4);
    Out o;
    std::string msg;
    check(route(h, b, o, &msg) == ADPR_OK, "route on a live router");
    uint64_t d = 0;
    adpr_status ds = A.digest(h, &d);
    check(ds == ADPR_OK && d != 0, "state digest of a live router", fmt("status %d digest %016llx", ds, (unsigned long long)d));
    check(A.digest(h, nullptr) == ADPR_ERR_INVALID_ARGUMENT, "state digest with out NULL -> ADPR_ERR_INVALID_ARGUMENT");
    check(A.tokens_read(h, nullptr) == ADPR_ERR_INVALID_ARGUMENT, "tokens_read with out NULL -> ADPR_ERR_INVALID_ARGUMENT");
    for (auto [opts, want] : std::vector<std::pair<Opts, int32_t>>{
             {{{"policy", "default"}, {"dp_size", "2"}}, 0},
             {{{"policy", "conversation"}, {"dp_size", "2"}}, 0},
             {{{"policy", "kv_cache_aware"}, {"dp_size", "2"}}, 64},
             {{{"policy", "kv_cache_aware"}, {"dp_size", "2"}, {"prefix_source", "index"}}, -1},
             {{{"policy", "kv_cache_aware"}, {"dp_size", "2"}, {"warmup", "demand"}}, -1}}) {
        adpr_router t = must_create(opts);
        int32_t n = 99;
        adpr_status ts = A.tokens_read(t, &n);
        check(ts == ADPR_OK && n == want, fmt("tokens_read with %s = %d", opts.back().second.c_str(), want),
              fmt("status %d got %d", ts, n));
        A.destroy(t);
    }
    // The option "preset": its options, explicit options over them.
    char text[256], err[256];
    int64_t total = -1;
    const std::string want_rec = "prefix_source=probe+index\nscore=ttft\nwarmup=quiet\n";
    adpr_status ps = A.preset_options("recommended", "kv_cache_aware", text, sizeof text, &total, err, sizeof err);
    check(ps == ADPR_OK && std::string(text) == want_rec && total == (int64_t)want_rec.size() + 1,
          "preset_options(recommended, kv_cache_aware)", fmt("status %d total %lld text \"%s\"", ps, (long long)total, text));
    ps = A.preset_options("recommended", "default", text, sizeof text, &total, err, sizeof err);
    check(ps == ADPR_OK && text[0] == 0 && total == 1, "preset_options(recommended, default) is empty", fmt("status %d", ps));
    ps = A.preset_options("fastest", "default", text, sizeof text, &total, err, sizeof err);
    check(ps == ADPR_ERR_CONFIG && mentions(err, {"fastest", "recommended"}), "preset_options(fastest) -> ADPR_ERR_CONFIG",
          fmt("status %d \"%s\"", ps, err));
    std::memset(text, 'x', sizeof text);
    ps = A.preset_options("recommended", "kv_cache_aware", text, 8, &total, err, sizeof err);
    check(ps == ADPR_ERR_SHORT_BUFFER && total == (int64_t)want_rec.size() + 1 && text[0] == 'x',
          "preset_options with a short buffer: ADPR_ERR_SHORT_BUFFER, the total, nothing written",
          fmt("status %d total %lld \"%s\"", ps, (long long)total, err));
    ps = A.preset_options("recommended", "kv_cache_aware", nullptr, 0, &total, err, sizeof err);
    check(ps == ADPR_ERR_SHORT_BUFFER && total == (int64_t)want_rec.size() + 1, "preset_options with no buffer asks the total");
    ps = A.preset_options("recommended", "kv_cache_aware", text, sizeof text, nullptr, err, sizeof err);
    check(ps == ADPR_ERR_INVALID_ARGUMENT && mentions(err, {"total"}), "preset_options error: total NULL",
          fmt("status %d \"%s\"", ps, err));
    {
        adpr_router t = must_create({{"preset", "recommended"}, {"dp_size", "2"}});
        int32_t n = 0;
        check(A.tokens_read(t, &n) == ADPR_OK && n == -1, "a recommended router reads the whole prompt (its index)");
        A.destroy(t);
        t = must_create({{"prefix_source", "probe"}, {"score", "reference"}, {"warmup", "off"},
                         {"preset", "recommended"}, {"dp_size", "2"}});
        check(A.tokens_read(t, &n) == ADPR_OK && n == 64, "explicit options override the preset, given before it");
        A.destroy(t);
    }
    check(A.destroy(h) == ADPR_OK, "destroy");
    check(A.destroy(h) == ADPR_ERR_INVALID_HANDLE, "destroy twice -> ADPR_ERR_INVALID_HANDLE");
    adpr_status s = route(h, b, o, &msg);
    check(s == ADPR_ERR_INVALID_HANDLE && mentions(msg, {"handle"}) && o.untouched(), "route on a destroyed router -> ADPR_ERR_INVALID_HANDLE",
          fmt("status %d \"%s\"", s, msg.c_str()));
    check(A.digest(h, &d) == ADPR_ERR_INVALID_HANDLE, "state digest of a destroyed router -> ADPR_ERR_INVALID_HANDLE");
    for (adpr_router forged : {adpr_router(123456789), adpr_router(0), ~adpr_router(0), h + 1000}) {
        s = route(forged, b, o, &msg);
        check(s == ADPR_ERR_INVALID_HANDLE && mentions(msg, {"handle"}) && o.untouched(),
              fmt("route on forged handle %llu -> ADPR_ERR_INVALID_HANDLE", (unsigned long long)forged), fmt("\"%s\"", msg.c_str()));
        check(A.destroy(forged) == ADPR_ERR_INVALID_HANDLE, fmt("destroy forged handle %llu", (unsigned long long)forged));
    }
    adpr_router h2 = must_create({{"policy", "kv_cache_aware"}, {"dp_size", "2"}});
    check(h2 != h && route(h, b, o) == ADPR_ERR_INVALID_HANDLE, "a new router does not revive the destroyed handle",
          fmt("old %llu new %llu", (unsigned long long)h, (unsigned long long)h2));
    A.destroy(h2);
}

void check_digest() {
    const Opts opts = {{"policy", "conversation"}, {"dp_size", "4"}};
    adpr_router a = must_create(opts), b = must_create(opts), c = must_create({{"policy", "conversation"}, {"dp_size", "5"}});
    check(digest(a) == digest(b) && digest(a) != digest(c), "digest: equal for equal options, differs for other options");
    Batch x(idle(4), {conv(1, "alpha"), conv(2, "beta")}, 8);
    Out o;
    route(a, x, o);
    check(digest(a) != digest(b), "digest: changes when a conversation is bound");
    route(b, x, o);
    check(digest(a) == digest(b), "digest: equal again after the same call");
    A.destroy(a);
    A.destroy(b);
    A.destroy(c);
}

// Conversation ids are read from the caller's text buffer in place; the
// binding must survive the caller overwriting (and freeing) that buffer.
void check_conversation_copy() {
    adpr_router h = must_create({{"policy", "conversation"}, {"dp_size", "4"}});
    std::vector<adpr_rank_state> st = idle(4);
    auto route_one = [&](uint64_t id, const std::string &cid, std::vector<char> &text) -> int32_t {
        std::memcpy(text.data(), cid.data(), cid.size());
        adpr_request q{};
        q.id = id;
        q.num_tokens = 10;
        q.conversation_offset = 0;
        q.conversation_len = (int64_t)cid.size();
        q.target_rank = ADPR_NO_TARGET;
        q.relax = 1;
        adpr_batch b{};
        b.states = st.data();
        b.num_states = 4;
        b.num_requests = 1;
        b.requests = &q;
        b.text = text.data();
        b.text_len = (int64_t)cid.size();
        b.max_num_active_requests = 100;
        int32_t rank = -9;
        adpr_route_result r{};
        r.request_rank = &rank;
        if (A.route(h, &b, &r, nullptr, 0) != ADPR_OK) return -9;
        return rank;
    };
    auto *heap = new std::vector<char>(64, 0);
    int32_t home = route_one(1, "session-alpha", *heap);
    std::memset(heap->data(), 'Z', heap->size());  // the caller reuses its buffer
    delete heap;                                   // ... and frees it
    std::vector<char> t2(64, 0);
    // New conversations advance the round-robin cursor past home.
    int32_t other1 = route_one(2, "ZZZZZZZZZZZZZ", t2);
    int32_t other2 = route_one(3, "session-beta", t2);
    int32_t again = route_one(4, "session-alpha", t2);
    int32_t again2 = route_one(5, "session-alpha", t2);
    check(home >= 0 && again == home && again2 == home && other1 != home && other2 != home,
          "conversation ids are copied: after the caller overwrites and frees its text buffer, the next turn sticks to the bound rank",
          fmt("first turn rank %d, later turns %d %d; overwritten-bytes id went to %d, new id to %d", home, again, again2, other1, other2));
    A.destroy(h);
}

void check_stats() {
    adpr_router h = must_create({{"policy", "kv_cache_aware"}, {"dp_size", "4"}, {"cold_start_warmup", "true"}});
    adpr_stats st;
    std::vector<adpr_rank_stats> rs(4);
    std::vector<adpr_hot_group> groups(4);
    char err[256] = "";
    int64_t ngroups = -1;
    adpr_status s = A.stats(h, &st, rs.data(), 4, groups.data(), 4, &ngroups, err, sizeof err);
    check(s == ADPR_OK && st.decisions == 0 && st.pending_warmup == 4 && st.unassigned == 0, "stats of a fresh warmup router",
          fmt("status %d decisions %llu pending_warmup %lld %s", s, (unsigned long long)st.decisions, (long long)st.pending_warmup, err));
    Out o;
    Batch b(idle(4), {targeted(0, 10, 2, true), plain(1, 10)}, 8);  // worked example 5
    route(h, b, o);
    Batch full(states_of({{1, 0}, {1, 0}, {1, 0}, {1, 0}}), {plain(7, 10)}, 1);  // nowhere to go
    route(h, full, o);
    s = A.stats(h, &st, rs.data(), 4, groups.data(), 4, &ngroups, err, sizeof err);
    check(s == ADPR_OK && st.decisions == 2 && st.pending_warmup == 2 && st.unassigned == 1 && rs[0].placed == 1 &&
              rs[1].placed == 0 && rs[2].placed == 1 && rs[3].placed == 0,
          "stats after example 5 and a batch with no room: 2 decisions, 2 ranks pending warmup, 1 unassigned, placed 1 0 1 0",
          fmt("status %d decisions %llu pending %lld unassigned %llu placed %llu %llu %llu %llu", s, (unsigned long long)st.decisions,
              (long long)st.pending_warmup, (unsigned long long)st.unassigned, (unsigned long long)rs[0].placed,
              (unsigned long long)rs[1].placed, (unsigned long long)rs[2].placed, (unsigned long long)rs[3].placed));
    check(A.stats(h, &st, nullptr, 0, nullptr, 0, &ngroups, nullptr, 0) == ADPR_OK && ngroups == 0,
          "stats with ranks and groups NULL");

    adpr_stats sentinel;
    std::memset(&sentinel, 0x5A, sizeof sentinel);
    adpr_stats st2 = sentinel;
    s = A.stats(h, &st2, rs.data(), 3, nullptr, 0, &ngroups, err, sizeof err);
    check(s == ADPR_ERR_INVALID_ARGUMENT && mentions(err, {"num_ranks"}) && std::memcmp(&st2, &sentinel, sizeof st2) == 0,
          "stats error: num_ranks 3 for dp_size 4, *stats untouched", fmt("status %d \"%s\"", s, err));
    s = A.stats(h, nullptr, nullptr, 0, nullptr, 0, &ngroups, err, sizeof err);
    check(s == ADPR_ERR_INVALID_ARGUMENT && mentions(err, {"stats"}), "stats error: stats NULL", fmt("status %d \"%s\"", s, err));
    s = A.stats(h, &st2, nullptr, 0, nullptr, 2, &ngroups, err, sizeof err);
    check(s == ADPR_ERR_INVALID_ARGUMENT && mentions(err, {"groups"}), "stats error: groups NULL with capacity 2",
          fmt("status %d \"%s\"", s, err));
    s = A.stats(h, &st2, nullptr, 0, nullptr, 0, nullptr, err, sizeof err);
    check(s == ADPR_ERR_INVALID_ARGUMENT && mentions(err, {"total_groups"}), "stats error: total_groups NULL",
          fmt("status %d \"%s\"", s, err));
    A.destroy(h);
    s = A.stats(h, &st2, nullptr, 0, nullptr, 0, &ngroups, err, sizeof err);
    check(s == ADPR_ERR_INVALID_HANDLE, "stats of a destroyed router -> ADPR_ERR_INVALID_HANDLE", fmt("status %d \"%s\"", s, err));

    adpr_router c = must_create({{"policy", "conversation"}, {"dp_size", "4"}, {"max_sessions", "2"}});
    route(c, Batch(idle(4), {conv(1, "a"), conv(2, "b"), conv(3, "c")}, 8), o);
    s = A.stats(c, &st, nullptr, 0, nullptr, 0, &ngroups, err, sizeof err);
    check(s == ADPR_OK && st.conversations == 2, "stats: conversation bindings bounded by max_sessions 2",
          fmt("conversations %lld", (long long)st.conversations));
    A.destroy(c);
}

void check_receipts() {
    // An explicit target, then a three-way tie: rank 2 took the target, and
    // random.Random(7).shuffle([0, 1, 2, 3]) is [3, 1, 0, 2] in Python.
    adpr_router h = must_create({{"policy", "kv_cache_aware"}, {"dp_size", "4"}, {"explain", "true"}});
    char err[256] = "";
    int64_t n = -1, nc = -1;
    adpr_status s = A.receipts(h, nullptr, 0, nullptr, 0, &n, &nc, err, sizeof err);
    check(s == ADPR_OK && n == 0 && nc == 0, "receipts before any decision: none", fmt("status %d n %lld %s", s, (long long)n, err));
    Out o;
    Batch b(idle(4), {targeted(0, 10, 2, true), plain(7, 10)}, 8);
    route(h, b, o);
    s = A.receipts(h, nullptr, 0, nullptr, 0, &n, &nc, err, sizeof err);
    check(s == ADPR_ERR_SHORT_BUFFER && n == 2 && nc == 4, "receipts: totals asked with 0 capacities: 2 receipts, 4 candidates",
          fmt("status %d n %lld nc %lld %s", s, (long long)n, (long long)nc, err));
    std::vector<adpr_receipt> rc(2);
    std::vector<adpr_candidate> cand(4);
    s = A.receipts(h, rc.data(), 2, cand.data(), 4, &n, &nc, err, sizeof err);
    const adpr_receipt &t = rc[0], &r = rc[1];
    check(s == ADPR_OK && t.id == 0 && t.rank == 2 && t.reason == ADPR_REASON_EXPLICIT && t.num_candidates == 0 &&
              r.id == 7 && r.rank == 3 && r.reason == ADPR_REASON_SCORED && r.ties == 3 && r.eligible == 4 &&
              r.affinity == 0 && r.num_candidates == 4 && r.candidate_offset == 0 && r.num_tokens == 10,
          "receipts: the target is explicit, the tie is scored with 3 ranks tied",
          fmt("status %d reasons %d %d ranks %d %d ties %d", s, t.reason, r.reason, t.rank, r.rank, r.ties));
    check(cand[2].tokens == 10 && cand[2].score > cand[3].score && cand[3].shuffle_pos == 0 && cand[1].shuffle_pos == 1 &&
              cand[0].shuffle_pos == 2 && cand[2].shuffle_pos == 3 && cand[3].excluded == ADPR_EXCLUDED_NONE,
          "receipts: candidates carry loads, scores and the shuffle [3, 1, 0, 2]",
          fmt("pos %d %d %d %d", cand[0].shuffle_pos, cand[1].shuffle_pos, cand[2].shuffle_pos, cand[3].shuffle_pos));

    char text[1024], tiny[10] = "unwritten";
    int64_t need = 0, need2 = 0;
    s = A.receipt_text(h, 1, text, sizeof text, &need, err, sizeof err);
    std::string txt = text;
    check(s == ADPR_OK && need == (int64_t)txt.size() + 1 && txt.find("request 7 (10 tokens) -> rank 3: scored") == 0 &&
              txt.find("3 ranks tied; random.Random(7).shuffle gave [3 1 0 2]") != std::string::npos,
          "receipt_text: the scored receipt explains the tie", txt);
    s = A.receipt_text(h, 1, tiny, sizeof tiny, &need2, err, sizeof err);
    check(s == ADPR_ERR_SHORT_BUFFER && need2 == need && std::string(tiny) == "unwritten",
          "receipt_text: a short buffer is left unwritten, total says the full size",
          fmt("status %d total %lld \"%s\"", s, (long long)need2, tiny));
    s = A.receipt_text(h, 2, text, sizeof text, &need2, err, sizeof err);
    check(s == ADPR_ERR_INVALID_ARGUMENT && mentions(err, {"index"}), "receipt_text error: index 2 of 2 receipts",
          fmt("status %d \"%s\"", s, err));

    std::vector<adpr_receipt> small(1);
    small[0].id = 12345;
    int64_t n2 = -1, nc2 = -1;
    s = A.receipts(h, small.data(), 1, cand.data(), 4, &n2, &nc2, err, sizeof err);
    check(s == ADPR_ERR_SHORT_BUFFER && mentions(err, {"receipts", "2"}) && n2 == 2 && nc2 == 4 && small[0].id == 12345,
          "receipts: capacity 1 for 2 receipts: ADPR_ERR_SHORT_BUFFER, the totals, nothing written",
          fmt("status %d \"%s\"", s, err));
    s = A.receipts(h, rc.data(), 2, nullptr, 0, nullptr, &nc2, err, sizeof err);
    check(s == ADPR_ERR_INVALID_ARGUMENT && mentions(err, {"total_receipts"}), "receipts error: total_receipts NULL",
          fmt("status %d \"%s\"", s, err));
    s = A.receipts(h, nullptr, 2, nullptr, 0, &n2, &nc2, err, sizeof err);
    check(s == ADPR_ERR_INVALID_ARGUMENT && mentions(err, {"receipts"}), "receipts error: receipts NULL with capacity 2",
          fmt("status %d \"%s\"", s, err));
    Batch bad(idle(4), {plain(1, 10), plain(1, 10)}, 8);  // duplicate ids: rejected
    route(h, bad, o);
    s = A.receipts(h, rc.data(), 2, cand.data(), 4, &n2, &nc2, err, sizeof err);
    check(s == ADPR_OK && n2 == 2 && rc[1].id == 7, "receipts: a rejected route keeps the last decision's receipts",
          fmt("status %d n %lld", s, (long long)n2));
    A.destroy(h);

    adpr_router off = must_create({{"policy", "default"}, {"dp_size", "2"}});
    s = A.receipts(off, nullptr, 0, nullptr, 0, &n2, &nc2, err, sizeof err);
    check(s == ADPR_ERR_INVALID_ARGUMENT && mentions(err, {"explain"}), "receipts error: a router without explain",
          fmt("status %d \"%s\"", s, err));
    A.destroy(off);
}

// The pending warmup ranks and the conversation map, read and written
// between decisions, under the header's buffer convention.
void check_host_state() {
    char err[256] = "";
    adpr_router h = must_create({{"policy", "kv_cache_aware"}, {"dp_size", "4"}, {"cold_start_warmup", "true"}});
    int64_t total = -1;
    adpr_status s = A.pending_warmup(h, nullptr, 0, &total, err, sizeof err);
    check(s == ADPR_ERR_SHORT_BUFFER && total == 4, "pending warmup: capacity 0 asks for the total (4 ranks)",
          fmt("status %d total %lld \"%s\"", s, (long long)total, err));
    std::vector<int32_t> ranks(4, -7);
    s = A.pending_warmup(h, ranks.data(), 3, &total, err, sizeof err);
    check(s == ADPR_ERR_SHORT_BUFFER && total == 4 && ranks[0] == -7, "pending warmup: a short buffer is not written",
          fmt("status %d total %lld ranks[0] %d", s, (long long)total, ranks[0]));
    s = A.pending_warmup(h, ranks.data(), 4, &total, err, sizeof err);
    check(s == ADPR_OK && total == 4 && ranks == std::vector<int32_t>({0, 1, 2, 3}), "pending warmup of a fresh router: 0 1 2 3",
          fmt("status %d total %lld", s, (long long)total));
    const int32_t set[] = {3, 1, 3};
    s = A.set_pending_warmup(h, set, 3, err, sizeof err);
    s = s == ADPR_OK ? A.pending_warmup(h, ranks.data(), 4, &total, err, sizeof err) : s;
    check(s == ADPR_OK && total == 2 && ranks[0] == 1 && ranks[1] == 3, "set pending warmup {3, 1, 3} reads back 1 3",
          fmt("status %d total %lld \"%s\"", s, (long long)total, err));
    Out o;
    route(h, Batch(idle(4), {plain(1, 10)}, 8), o);
    check(o.ranks[0] == 1, "the smallest pending rank takes the next request", fmt("rank %d", o.ranks[0]));
    const int32_t bad[] = {4};
    uint64_t before = digest(h);
    s = A.set_pending_warmup(h, bad, 1, err, sizeof err);
    check(s == ADPR_ERR_INVALID_ARGUMENT && mentions(err, {"4", "0..3"}) && digest(h) == before,
          "set pending warmup error: rank 4 of 4, nothing changed", fmt("status %d \"%s\"", s, err));
    s = A.set_pending_warmup(h, nullptr, 2, err, sizeof err);
    check(s == ADPR_ERR_INVALID_ARGUMENT && mentions(err, {"ranks"}), "set pending warmup error: ranks NULL with 2",
          fmt("status %d \"%s\"", s, err));
    A.destroy(h);

    adpr_router c = must_create({{"policy", "conversation"}, {"dp_size", "2"}, {"max_sessions", "3"}});
    route(c, Batch(idle(2), {conv(1, "alpha"), conv(2, "b"), conv(3, "gamma")}, 100), o);
    route(c, Batch(idle(2), {conv(4, "alpha"), conv(5, "delta")}, 100), o);
    int64_t nb = -1, nbytes = -1;
    s = A.conversations(c, nullptr, 0, nullptr, 0, &nb, &nbytes, err, sizeof err);
    check(s == ADPR_ERR_SHORT_BUFFER && nb == 3 && nbytes == 15, "conversations: capacity 0 asks for 3 bindings, 15 id bytes",
          fmt("status %d %lld %lld", s, (long long)nb, (long long)nbytes));
    std::vector<adpr_binding> bs(3);
    std::vector<char> ids(15);
    s = A.conversations(c, bs.data(), 3, ids.data(), 14, &nb, &nbytes, err, sizeof err);
    check(s == ADPR_ERR_SHORT_BUFFER && bs[0].id_length == 0, "conversations: one byte short writes nothing",
          fmt("status %d", s));
    s = A.conversations(c, bs.data(), 3, ids.data(), 15, &nb, &nbytes, err, sizeof err);
    std::string got;
    for (auto &b : bs) got += std::string(ids.data() + b.id_offset, (size_t)b.id_length) + "=" + std::to_string(b.rank) + " ";
    check(s == ADPR_OK && got == "gamma=0 alpha=0 delta=1 ", "conversations, least recently used first: gamma alpha delta",
          fmt("status %d \"%s\"", s, got.c_str()));
    s = A.set_pending_warmup(c, nullptr, 0, err, sizeof err);
    check(s == ADPR_ERR_INVALID_ARGUMENT && mentions(err, {"kv_cache_aware"}), "set pending warmup error: conversation policy",
          fmt("status %d \"%s\"", s, err));
    A.destroy(c);
}

void check_block_hashes() {
    std::vector<int32_t> t = iota_tokens(100, 7);
    std::vector<uint64_t> h(8, kFill64), h2(8, kFill64), hl(8, kFill64), hp(8, kFill64);
    int64_t n = -1, n2 = -1, nl = -1, np = -1;
    char err[256] = "";
    adpr_status s = A.block_hashes(t.data(), 100, 32, 0, 0, h.data(), 8, &n, err, sizeof err);
    A.block_hashes(t.data(), 100, 32, 0, 0, h2.data(), 8, &n2, nullptr, 0);
    check(s == ADPR_OK && n == 3 && h == h2 && h[3] == kFill64 && h[0] != h[1], "block_hashes: 100 tokens, 32 per block -> 3 chained hashes, deterministic",
          fmt("status %d num_out %lld %s", s, (long long)n, err));
    A.block_hashes(t.data(), 64, 32, 0, 0, hp.data(), 8, &np, nullptr, 0);
    check(np == 2 && hp[0] == h[0] && hp[1] == h[1], "block_hashes: a prefix has the same leading hashes");
    A.block_hashes(t.data(), 100, 32, 1, 0, hl.data(), 8, &nl, nullptr, 0);
    std::vector<uint64_t> hs(8, kFill64);
    int64_t ns = -1;
    A.block_hashes(t.data(), 100, 32, 0, 9, hs.data(), 8, &ns, nullptr, 0);
    check(nl == 3 && ns == 3 && hl[0] != h[0] && hs[0] != h[0] && hl[0] != hs[0], "block_hashes: lora_id and cache_salt scope the hashes");
    std::vector<uint64_t> one(3, kFill64);
    int64_t n1 = -1;
    s = A.block_hashes(t.data(), 100, 32, 0, 0, one.data(), 1, &n1, nullptr, 0);
    check(s == ADPR_ERR_SHORT_BUFFER && n1 == 3 && one[0] == kFill64,
          "block_hashes: capacity 1 for 3 blocks: ADPR_ERR_SHORT_BUFFER, total 3, nothing written");
    s = A.block_hashes(t.data(), 100, 32, 0, 0, nullptr, 0, &n1, nullptr, 0);
    check(s == ADPR_ERR_SHORT_BUFFER && n1 == 3, "block_hashes: out NULL with capacity 0 asks the total");
    s = A.block_hashes(t.data(), 31, 32, 0, 0, nullptr, 0, &n1, nullptr, 0);
    check(s == ADPR_OK && n1 == 0, "block_hashes: no full block: ADPR_OK with total 0 and no buffer");
    s = A.block_hashes(t.data(), 100, 0, 0, 0, h.data(), 8, &n, err, sizeof err);
    check(s == ADPR_ERR_INVALID_ARGUMENT && mentions(err, {"tokens_per_block"}), "block_hashes error: tokens_per_block 0", fmt("\"%s\"", err));
    s = A.block_hashes(nullptr, 100, 32, 0, 0, h.data(), 8, &n, err, sizeof err);
    check(s == ADPR_ERR_INVALID_ARGUMENT && mentions(err, {"tokens"}), "block_hashes error: tokens NULL", fmt("\"%s\"", err));
    s = A.block_hashes(t.data(), 100, 32, 0, 0, h.data(), 8, nullptr, err, sizeof err);
    check(s == ADPR_ERR_INVALID_ARGUMENT && mentions(err, {"total"}), "block_hashes error: total NULL", fmt("\"%s\"", err));
}

// --- concurrency -----------------------------------------------------------

Batch random_batch(std::mt19937_64 &g, int ns, uint64_t id_base, const std::string &conv_prefix, bool big_maxn = false) {
    auto U = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); };
    Batch b;
    b.maxn = big_maxn ? 1000 : U(3, 12);
    for (int r = 0; r < ns; r++) {
        b.states.push_back(rank_state(r, U(0, std::min(b.maxn, 10)), (int64_t)U(0, 20000)));
        if (U(0, 1)) {  // a known KV pool (used by capacity_aware routers)
            b.states.back().kv_capacity_tokens = U(500, 4000);
            b.states.back().free_kv_tokens = U(0, (int)b.states.back().kv_capacity_tokens);
            b.states.back().flags = U(0, 3) == 0 ? ADPR_RANK_MEMORY_PRESSURE : 0;
        }
    }
    int nr = U(0, 24);
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < nr; i++) {
        Req q;
        q.id = id_base + (uint64_t)i * 7919;
        int family = U(0, 4), n = U(1, 300);
        std::vector<int32_t> t(n);
        for (int k = 0; k < n; k++) t[k] = (family < 4 && k < 64) ? family * 1000 + k : U(0, 50000);
        if (U(0, 1)) {
            q.tokens.assign(t.begin(), t.begin() + std::min(n, 64));
            q.num_tokens = n;
        } else {
            q.tokens = t;
        }
        if (U(0, 9) == 0) {
            q.target = U(0, ns - 1);
            q.relax = U(0, 1);
        }
        if (U(0, 4) != 0) q.conv = conv_prefix + std::to_string(U(0, 29));
        b.add(q);
        prompts.push_back(t);
    }
    if (nr > 0 && U(0, 3) != 0) {
        for (int i = 0; i < nr; i++)
            for (int r = 0; r < ns; r++) {
                int n = (int)prompts[i].size();
                b.set_match(i, r, U(0, 2) == 0 ? std::min(n - 1, U(0, n / 16) * 16) : 0);
            }
    }
    return b;
}

std::vector<Out> run_sequence(adpr_router h, const std::vector<Batch> &batches, int *failures) {
    std::vector<Out> outs(batches.size());
    for (size_t i = 0; i < batches.size(); i++)
        if (route(h, batches[i], outs[i]) != ADPR_OK) (*failures)++;
    return outs;
}

void check_concurrency() {
    const int kThreads = 8, kBatches = 300;
    const Opts configs[kThreads] = {
        {{"policy", "kv_cache_aware"}, {"dp_size", "8"}, {"cold_start_warmup", "true"}},
        {{"policy", "conversation"}, {"dp_size", "8"}},
        {{"policy", "conversation"}, {"dp_size", "8"}, {"new_conv_placement", "least_queued"}, {"max_sessions", "16"}},
        {{"policy", "default"}, {"dp_size", "8"}},
        {{"policy", "kv_cache_aware"}, {"dp_size", "8"}, {"prefix_source", "probe+index"}, {"warmup", "demand"},
         {"warmup_min_requests", "2"}, {"tokens_per_block", "16"}},
        {{"policy", "kv_cache_aware"}, {"dp_size", "8"}, {"prefix_source", "index"}, {"capacity_aware", "true"},
         {"index_capacity_blocks", "64"}},
        {{"policy", "default"}, {"dp_size", "8"}, {"capacity_aware", "true"}},
        {{"policy", "conversation"}, {"dp_size", "8"}, {"capacity_aware", "true"}, {"max_sessions", "8"}},
    };

    // 1. Each thread has its own router.
    {
        std::vector<std::vector<Batch>> work(kThreads);
        for (int t = 0; t < kThreads; t++) {
            std::mt19937_64 g(1000 + t);
            for (int i = 0; i < kBatches; i++) work[t].push_back(random_batch(g, 8, (uint64_t)i * 100000, "t" + std::to_string(t) + "-"));
        }
        std::vector<std::vector<Out>> par(kThreads);
        std::vector<uint64_t> par_digest(kThreads);
        std::atomic<int> failures{0};
        std::vector<std::thread> th;
        for (int t = 0; t < kThreads; t++)
            th.emplace_back([&, t] {
                adpr_router h = must_create(configs[t]);
                int f = 0;
                par[t] = run_sequence(h, work[t], &f);
                par_digest[t] = digest(h);
                failures += f;
                A.destroy(h);
            });
        for (auto &x : th) x.join();
        int mismatches = 0, unassigned = 0, seq_failures = 0;
        for (int t = 0; t < kThreads; t++) {
            adpr_router h = must_create(configs[t]);
            std::vector<Out> seq = run_sequence(h, work[t], &seq_failures);
            for (int i = 0; i < kBatches; i++) {
                if (seq[i] != par[t][i]) mismatches++;
                if (!consistency(work[t][i], seq[i]).empty()) mismatches++;
                unassigned += seq[i].num_unassigned;
            }
            if (digest(h) != par_digest[t]) mismatches++;
            A.destroy(h);
        }
        check(failures == 0 && seq_failures == 0 && mismatches == 0,
              fmt("concurrency: %d threads x own router x %d batches equal a sequential replay", kThreads, kBatches),
              fmt("%d failed calls, %d mismatches, %d requests unassigned in all", failures.load() + seq_failures, mismatches, unassigned));
    }

    // 2. Eight threads share one router (the library serialises the calls).
    //    The KV-aware policy without warmup keeps no state between calls, so
    //    every result must equal that of a sequential replay, whatever the
    //    interleaving.
    {
        const Opts opts = {{"policy", "kv_cache_aware"}, {"dp_size", "8"}};
        std::vector<std::vector<Batch>> work(kThreads);
        for (int t = 0; t < kThreads; t++) {
            std::mt19937_64 g(2000 + t);
            for (int i = 0; i < kBatches; i++) work[t].push_back(random_batch(g, 8, (uint64_t)t * 1000000000 + (uint64_t)i, ""));
        }
        adpr_router seq_router = must_create(opts);
        int seq_failures = 0;
        std::vector<std::vector<Out>> seq(kThreads);
        for (int t = 0; t < kThreads; t++) seq[t] = run_sequence(seq_router, work[t], &seq_failures);
        A.destroy(seq_router);

        adpr_router shared = must_create(opts);
        std::vector<std::vector<Out>> par(kThreads);
        std::atomic<int> failures{0};
        std::vector<std::thread> th;
        for (int t = 0; t < kThreads; t++)
            th.emplace_back([&, t] {
                int f = 0;
                par[t] = run_sequence(shared, work[t], &f);
                failures += f;
            });
        for (auto &x : th) x.join();
        int mismatches = 0;
        for (int t = 0; t < kThreads; t++)
            for (int i = 0; i < kBatches; i++)
                if (par[t][i] != seq[t][i]) mismatches++;
        check(failures == 0 && seq_failures == 0 && mismatches == 0,
              fmt("concurrency: %d threads share one kv_cache_aware router, %d batches each: results equal a sequential replay", kThreads,
                  kBatches),
              fmt("%d failed calls, %d mismatches", failures.load() + seq_failures, mismatches));
        A.destroy(shared);
    }

    // 3. A shared conversation router: the interleaving decides where new
    //    conversations go, but each conversation must stay on its first rank
    //    (the hard cap is never reached).
    {
        const Opts opts = {{"policy", "conversation"}, {"dp_size", "8"}};
        adpr_router shared = must_create(opts);
        std::vector<std::vector<Batch>> work(kThreads);
        for (int t = 0; t < kThreads; t++) {
            std::mt19937_64 g(3000 + t);
            for (int i = 0; i < 100; i++) work[t].push_back(random_batch(g, 8, (uint64_t)i * 1000, "s" + std::to_string(t) + "-", true));
        }
        std::atomic<int> failures{0};
        std::vector<std::map<std::string, int32_t>> homes(kThreads);
        std::atomic<int> moved{0};
        std::vector<std::thread> th;
        for (int t = 0; t < kThreads; t++)
            th.emplace_back([&, t] {
                for (auto &b : work[t]) {
                    Out o;
                    if (route(shared, b, o) != ADPR_OK) {
                        failures++;
                        continue;
                    }
                    for (size_t i = 0; i < b.reqs.size(); i++) {
                        const adpr_request &q = b.reqs[i];
                        if (q.conversation_len == 0 || o.ranks[i] < 0) continue;
                        std::string cid = b.text.substr((size_t)q.conversation_offset, (size_t)q.conversation_len);
                        auto it = homes[t].find(cid);
                        if (it == homes[t].end())
                            homes[t][cid] = o.ranks[i];
                        else if (it->second != o.ranks[i])
                            moved++;
                    }
                }
            });
        for (auto &x : th) x.join();
        check(failures == 0 && moved == 0,
              fmt("concurrency: %d threads share one conversation router: every conversation stays on its rank", kThreads),
              fmt("%d failed calls, %d turns moved", failures.load(), moved.load()));
        A.destroy(shared);
    }

    // 4. Destroy while other threads route on the same handle: every call
    //    returns OK or ADPR_ERR_INVALID_HANDLE, never crashes.
    {
        adpr_router h = must_create({{"policy", "kv_cache_aware"}, {"dp_size", "8"}});
        std::mt19937_64 g(4000);
        Batch b = random_batch(g, 8, 1, "");
        std::atomic<int> ok{0}, gone{0}, other{0};
        std::atomic<bool> started{false};
        std::vector<std::thread> th;
        for (int t = 0; t < 4; t++)
            th.emplace_back([&] {
                for (;;) {
                    Out o;
                    adpr_status s = route(h, b, o);
                    if (s == ADPR_OK) {
                        ok++;
                        started = true;
                    } else if (s == ADPR_ERR_INVALID_HANDLE) {
                        gone++;
                        break;
                    } else {
                        other++;
                        break;
                    }
                }
            });
        while (!started) std::this_thread::yield();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        adpr_status ds = A.destroy(h);
        for (auto &x : th) x.join();
        check(ds == ADPR_OK && ok > 0 && gone == 4 && other == 0, "concurrency: destroy while 4 threads route on the handle",
              fmt("destroy %d, %d calls ok, %d saw INVALID_HANDLE, %d other", ds, ok.load(), gone.load(), other.load()));
    }
}

// ---------------------------------------------------------------------------
// Benchmark.

Batch bench_batch(int nr, int ns, bool with_match) {
    std::mt19937_64 g(7);
    auto U = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(g); };
    const int kPrompt = 2048, kSystem = 1024, kFamilies = 4;
    Batch b;
    b.maxn = 256;
    for (int r = 0; r < ns; r++) {
        int active = U(0, 16);
        b.states.push_back(rank_state(r, active, (int64_t)active * kPrompt - U(0, 1000) * (active > 0)));
    }
    std::vector<int> family(nr);
    for (int i = 0; i < nr; i++) {
        Req q;
        q.id = 1000 + (uint64_t)i;
        family[i] = U(0, 7) == 0 ? -1 : U(0, kFamilies - 1);  // 1 in 8 has no shared system prompt
        for (int k = 0; k < 64; k++) q.tokens.push_back(family[i] >= 0 ? 100000 * (family[i] + 1) + k : U(0, 32000));
        q.num_tokens = kPrompt;  // only the first 64 tokens travel, like the Python binding
        b.add(q);
    }
    if (with_match) {
        for (int i = 0; i < nr; i++)
            for (int r = 0; r < ns; r++) {
                int f = family[i];
                bool cached = f >= 0 && (r == f % ns || r == (f + ns / 2) % ns);
                b.set_match(i, r, cached ? kSystem : 0);
            }
    }
    return b;
}

int bench(int calls, const std::string &command) {
    std::printf("adpr_route latency: kv_cache_aware, 2048-token prompts (first 64 tokens + num_tokens passed),\n");
    std::printf("4 shared 1024-token system prompts (1 request in 8 unique), max_num_active_requests 256, %d calls each\n", calls);
    std::printf("command: %s\n\n", command.c_str());
    std::printf("%8s %6s %11s %12s %12s %14s\n", "requests", "ranks", "match_lens", "median_ns", "p99_ns", "median_ns/req");
    int rc = 0;
    for (int nr : {64, 256})
        for (int ns : {8, 16})
            for (bool m : {false, true}) {
                Batch b = bench_batch(nr, ns, m);
                adpr_router h = must_create({{"policy", "kv_cache_aware"}, {"dp_size", std::to_string(ns)}});
                Out o;
                o.reset(b.reqs.size(), b.states.size());
                adpr_batch bv = b.view();
                adpr_route_result rv = o.view();
                char err[256];
                for (int i = 0; i < std::max(50, calls / 10); i++)
                    if (A.route(h, &bv, &rv, err, sizeof err) != ADPR_OK) {
                        std::printf("route failed: %s\n", err);
                        rc = 1;
                        break;
                    }
                std::vector<int64_t> ns_per(calls);
                for (int i = 0; i < calls; i++) {
                    auto t0 = std::chrono::steady_clock::now();
                    A.route(h, &bv, &rv, err, sizeof err);
                    auto t1 = std::chrono::steady_clock::now();
                    ns_per[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
                }
                std::sort(ns_per.begin(), ns_per.end());
                int64_t med = ns_per[calls / 2], p99 = ns_per[std::min(calls - 1, (calls * 99) / 100)];
                std::printf("%8d %6d %11s %12lld %12lld %14.0f\n", nr, ns, m ? "yes" : "no", (long long)med, (long long)p99,
                            (double)med / nr);
                A.destroy(h);
            }
    return rc;
}

// sleeps returns how many times the calling thread has given up its CPU
// (voluntary context switches), or -1 where the system does not say.
long sleeps() {
#ifdef RUSAGE_THREAD
    struct rusage u;
    if (getrusage(RUSAGE_THREAD, &u) == 0)
        return u.ru_nvcsw;
#endif
    return -1;
}

// thread_id is the calling thread's kernel id, or -1 where the system has none.
long thread_id() {
#ifdef SYS_gettid
    return syscall(SYS_gettid);
#else
    return -1;
#endif
}

// others_cpu_ns returns the CPU time, in ns, that this process's threads
// other than those in skip have used (/proc/self/task/*/schedstat), or -1
// where the system does not say.
int64_t others_cpu_ns(const std::vector<long> &skip) {
    DIR *d = opendir("/proc/self/task");
    if (d == nullptr) return -1;
    int64_t total = 0;
    bool any = false;
    while (dirent *e = readdir(d)) {
        if (e->d_name[0] == '.' || std::find(skip.begin(), skip.end(), std::strtol(e->d_name, nullptr, 10)) != skip.end())
            continue;
        std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/schedstat");
        long long ns = 0;
        if (f >> ns) {
            total += ns;
            any = true;
        }
    }
    closedir(d);
    return any ? total : -1;
}

// idle measures what an engine that routes once per iteration pays: each
// call comes after the calling thread spent gap ms elsewhere, asleep or busy
// in its own code. Beside adpr_route (as in bench) and the smallest call into
// the library (adpr_router_state_digest), the same thread waking another
// thread that sleeps on a condition variable: the futex wake that a call into
// an idle Go runtime makes when its monitor thread sleeps (GODEBUG=schedtrace=0;
// the library as built keeps it polling). "slept"
// is the share of adpr_route calls during which the calling thread gave up
// its CPU: the Go runtime preempted the call and handed it to another thread
// and back (see docs/performance.md). "runtime cpu" is the CPU the library's
// own threads used over the row, in % of one core: its Go runtime's monitor
// thread, and calls handed to another thread; the calling thread's time is
// not in it.
int idle(int calls, const std::string &command) {
    std::printf("calls after the calling thread was elsewhere for a gap: median (p90) us of %d calls each\n", calls);
    std::printf("route: adpr_route, kv_cache_aware with match_lens, as --bench\n");
    std::printf("command: %s\n", command.c_str());
    std::mutex mu;
    std::condition_variable cv;
    bool flag = false, stop = false;
    std::atomic<long> sleeper_id{-1};
    std::thread sleeper([&] {
        sleeper_id = thread_id();
        std::unique_lock<std::mutex> lk(mu);
        while (!stop) {
            cv.wait(lk, [&] { return flag || stop; });
            flag = false;
        }
    });
    while (sleeper_id < 0) std::this_thread::yield();  // its id, for "runtime cpu" to leave out
    using clock = std::chrono::steady_clock;
    auto us = [](clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); };
    int rc = 0;
    for (auto size : {std::make_pair(256, 16), std::make_pair(1024, 64)}) {
        Batch b = bench_batch(size.first, size.second, true);
        adpr_router h = must_create({{"policy", "kv_cache_aware"}, {"dp_size", std::to_string(size.second)}});
        Out o;
        o.reset(b.reqs.size(), b.states.size());
        adpr_batch bv = b.view();
        adpr_route_result rv = o.view();
        char err[256];
        std::printf("\n%d requests x %d ranks\n", size.first, size.second);
        std::printf("%6s %6s %16s %7s %16s %16s %12s\n", "gap_ms", "gap", "route", "slept", "state_digest", "wake a thread",
                    "runtime cpu");
        for (int gap : {0, 1, 5, 20})
            for (bool busy : {false, true}) {
                if (gap == 0 && busy) continue;
                std::vector<double> route, digest, wake;
                int slept = 0;
                bool counted = sleeps() >= 0;
                const std::vector<long> skip = {thread_id(), sleeper_id};
                int64_t cpu0 = others_cpu_ns(skip);
                auto wall0 = clock::now();
                auto away = [&] {
                    auto until = clock::now() + std::chrono::milliseconds(gap);
                    if (!busy) std::this_thread::sleep_until(until);
                    while (clock::now() < until) {
                    }
                };
                for (int i = 0; i < calls && rc == 0; i++) {
                    away();
                    long s0 = sleeps();
                    auto t0 = clock::now();
                    if (A.route(h, &bv, &rv, err, sizeof err) != ADPR_OK) {
                        std::printf("route failed: %s\n", err);
                        rc = 1;
                        break;
                    }
                    route.push_back(us(clock::now() - t0));
                    slept += sleeps() > s0;
                    away();
                    uint64_t d;
                    t0 = clock::now();
                    A.digest(h, &d);
                    digest.push_back(us(clock::now() - t0));
                    away();
                    t0 = clock::now();
                    {
                        std::lock_guard<std::mutex> lk(mu);
                        flag = true;
                    }
                    cv.notify_one();
                    wake.push_back(us(clock::now() - t0));
                }
                if (rc != 0) break;
                auto cell = [&](std::vector<double> &v) {
                    std::sort(v.begin(), v.end());
                    return fmt("%.1f (%.1f)", v[v.size() / 2], v[v.size() * 9 / 10]);
                };
                std::string share = counted ? fmt("%d%%", 100 * slept / calls) : "-";
                int64_t cpu1 = others_cpu_ns(skip);
                double wall_ns = std::chrono::duration<double, std::nano>(clock::now() - wall0).count();
                std::string cpu = cpu0 >= 0 && cpu1 >= 0 ? fmt("%.1f%%", 100.0 * (double)(cpu1 - cpu0) / wall_ns) : "-";
                std::printf("%6d %6s %16s %7s %16s %16s %12s\n", gap, gap == 0 ? "-" : busy ? "busy" : "asleep",
                            cell(route).c_str(), share.c_str(), cell(digest).c_str(), cell(wake).c_str(), cpu.c_str());
            }
        A.destroy(h);
        if (rc != 0) break;
    }
    {
        std::lock_guard<std::mutex> lk(mu);
        stop = true;
    }
    cv.notify_one();
    sleeper.join();
    return rc;
}

}  // namespace

int main(int argc, char **argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s path/to/libadprouter.so [--bench [calls] | --idle [calls]]\n", argv[0]);
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        std::fprintf(stderr, "dlopen(%s, RTLD_NOW): %s\n", argv[1], dlerror());
        return 1;
    }
    bool resolved = resolve(lib, "adpr_abi_version", A.abi_version) & resolve(lib, "adpr_version", A.version) &
                    resolve(lib, "adpr_strerror", A.strerror) & resolve(lib, "adpr_router_create", A.create) &
                    resolve(lib, "adpr_router_destroy", A.destroy) & resolve(lib, "adpr_route", A.route) &
                    resolve(lib, "adpr_router_state_digest", A.digest) & resolve(lib, "adpr_router_stats", A.stats) &
                    resolve(lib, "adpr_block_hashes", A.block_hashes) &
                    resolve(lib, "adpr_router_tokens_read", A.tokens_read) &
                    resolve(lib, "adpr_preset_options", A.preset_options) &
                    resolve(lib, "adpr_router_receipts", A.receipts) &
                    resolve(lib, "adpr_router_receipt_text", A.receipt_text) &
                    resolve(lib, "adpr_router_pending_warmup", A.pending_warmup) &
                    resolve(lib, "adpr_router_set_pending_warmup", A.set_pending_warmup) &
                    resolve(lib, "adpr_router_conversations", A.conversations);
    if (!resolved) {
        std::fprintf(stderr, "%s lacks an adpr_* function of adprouter.h\n", argv[1]);
        return 1;
    }

    const std::string mode = argc >= 3 ? argv[2] : "";
    if (mode == "--bench" || mode == "--idle") {
        const int fallback = mode == "--bench" ? 2000 : 200;
        int calls = argc >= 4 ? std::atoi(argv[3]) : fallback;
        if (calls < 1) calls = fallback;
        std::string command;
        for (int i = 0; i < argc; i++) command += (i ? " " : "") + std::string(argv[i]);
        return mode == "--bench" ? bench(calls, command) : idle(calls, command);
    }

    check(true, fmt("dlopen(%s, RTLD_NOW) and dlsym of every adpr_* function", argv[1]));
    check_basics(lib);
    check_create_policies();
    check_fixtures();
    check_unassigned();
    check_kv_state();
    check_route_errors();
    check_create_errors();
    check_error_buffer();
    check_handles();
    check_digest();
    check_conversation_copy();
    check_stats();
    check_receipts();
    check_host_state();
    check_block_hashes();
    check_concurrency();

    std::printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail == 0 ? 0 : 1;
}
