// nvml_budget.cpp - read a GPU's memory through adprouter and size a KV budget.
//
//   g++ -std=c++17 -O2 -Wall -Wextra -Iinclude -o build/nvml_budget examples/cpp/nvml_budget.cpp -ldl
//   build/nvml_budget build/libadprouter.so [--device SEL] [--model NAME]
//                     [--fraction F] [--reserve-gib G] [--guard-gib G] [--csv]
//
//   --device SEL      the GPU: a UUID (GPU-...; preferred), a PCI bus id, an
//                     NVML index, or one of those after uuid:/pci:/index:
//                     (default 0)
//   --model NAME      llama-3.1-8b (default), llama-3.1-70b or deepseek-v3,
//                     all with a bf16 KV cache
//   --fraction F      share of free memory (after the reserve) given to the
//                     KV cache, in (0, 1] (default 0.9)
//   --reserve-gib G   memory kept back before the fraction (default 0)
//   --guard-gib G     guard band: free device memory below it puts the rank
//                     under memory pressure (default 1)
//   --csv             also print a header and one line of every figure
//
// What it does, in the order a rank of an engine would:
//   1. adpr_nvml_init, adpr_nvml_device_count;
//   2. adpr_nvml_memory of the device: total, free, used, reserved;
//   3. adpr_kv_bytes_per_token of the model and adpr_size_kv: the start-up KV
//      budget from free memory, with every figure behind it and the reason
//      when it is zero or capped;
//   4. adpr_rank_state_fill_kv from a pretend engine pool (capacity = the
//      budget, half of it free) with the guard band: the KV capacity and free
//      tokens this rank would report to routing, and the memory-pressure flag.
//
// Exit status:
//   0  success
//   1  the library could not be loaded, or an unexpected library error
//   2  bad command line (also a device selector or fraction the library
//      rejects)
//   3  NVML unavailable: no NVIDIA driver (routing still works without it)
//   4  a GPU error: no such device, GPU lost, query not supported, or no
//      permission
//
// --csv columns: device,total_bytes,free_bytes,used_bytes,reserved_bytes,
// has_reserved,model,bytes_per_token,reserve_bytes,fraction,available_bytes,
// usable_bytes,fit_tokens,kv_tokens,kv_blocks,capped,guard_band_bytes,
// engine_capacity_tokens,engine_free_tokens,kv_capacity_tokens,free_kv_tokens,
// memory_pressure

#include <dlfcn.h>

#include "adprouter.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

enum ExitCode { kOK = 0, kLibraryError = 1, kUsage = 2, kNVMLUnavailable = 3, kGPUError = 4 };

// The library's functions, resolved with dlsym.
static decltype(&adpr_strerror) strerror_fn;
static decltype(&adpr_nvml_init) nvml_init;
static decltype(&adpr_nvml_shutdown) nvml_shutdown;
static decltype(&adpr_nvml_device_count) nvml_device_count;
static decltype(&adpr_nvml_memory) nvml_memory;
static decltype(&adpr_kv_bytes_per_token) kv_bytes_per_token;
static decltype(&adpr_size_kv) size_kv;
static decltype(&adpr_rank_state_fill_kv) rank_state_fill_kv;

struct Model {
    const char *name;
    adpr_kv_shape shape;
};

// Published shapes (config.json of each model), bf16 KV cache, attention DP.
static const Model kModels[] = {
    {"llama-3.1-8b", {ADPR_ATTENTION_GQA, ADPR_DTYPE_BF16, 32, 8, 128, 1, 0, 0}},
    {"llama-3.1-70b", {ADPR_ATTENTION_GQA, ADPR_DTYPE_BF16, 80, 8, 128, 1, 0, 0}},
    {"deepseek-v3", {ADPR_ATTENTION_MLA, ADPR_DTYPE_BF16, 61, 0, 0, 0, 512, 64}},
};

struct Args {
    std::string device = "0";
    const Model *model = &kModels[0];
    double fraction = 0.9;
    uint64_t reserve_bytes = 0;
    uint64_t guard_bytes = 1ull << 30;
    bool csv = false;
};

static double gib(uint64_t bytes) { return (double)bytes / (double)(1ull << 30); }

static void usage(const char *prog) {
    std::fprintf(stderr,
                 "usage: %s LIB [--device SEL] [--model llama-3.1-8b|llama-3.1-70b|deepseek-v3]\n"
                 "       [--fraction F] [--reserve-gib G] [--guard-gib G] [--csv]\n",
                 prog);
}

// parse_gib turns a non-negative number of GiB into bytes.
static bool parse_gib(const char *s, uint64_t *out) {
    char *end = nullptr;
    double g = std::strtod(s, &end);
    if (end == s || *end != '\0' || !(g >= 0) || g > 1e9) return false;
    *out = (uint64_t)std::llround(g * (double)(1ull << 30));
    return true;
}

static bool parse_args(int argc, char **argv, Args *a) {
    for (int i = 2; i < argc; i++) {
        std::string opt = argv[i];
        if (opt == "--csv") {
            a->csv = true;
            continue;
        }
        if (i + 1 >= argc) return false;
        const char *val = argv[++i];
        if (opt == "--device") {
            a->device = val;
        } else if (opt == "--model") {
            a->model = nullptr;
            for (const Model &m : kModels)
                if (std::strcmp(m.name, val) == 0) a->model = &m;
            if (a->model == nullptr) return false;
        } else if (opt == "--fraction") {
            char *end = nullptr;
            a->fraction = std::strtod(val, &end);
            if (end == val || *end != '\0') return false;  // the library checks the range
        } else if (opt == "--reserve-gib") {
            if (!parse_gib(val, &a->reserve_bytes)) return false;
        } else if (opt == "--guard-gib") {
            if (!parse_gib(val, &a->guard_bytes)) return false;
        } else {
            return false;
        }
    }
    return true;
}

// status_name names a status; the NVML ones are spelled out here as well, so
// the output reads the same with a library whose adpr_strerror lacks them.
static const char *status_name(adpr_status st) {
    switch (st) {
    case ADPR_ERR_NVML_UNAVAILABLE: return "NVML unavailable";
    case ADPR_ERR_GPU_LOST: return "GPU lost";
    case ADPR_ERR_NOT_SUPPORTED: return "not supported";
    case ADPR_ERR_NO_PERMISSION: return "no permission";
    case ADPR_ERR_NOT_FOUND: return "no such GPU";
    default: return strerror_fn(st);
    }
}

// fail reports a failed call and returns the exit status it maps to.
static int fail(const char *what, adpr_status st, const char *err) {
    std::printf("error: %s: %s (status %d): %s\n", what, status_name(st), (int)st, err);
    switch (st) {
    case ADPR_ERR_NVML_UNAVAILABLE:
        std::printf("NVML unavailable: no NVIDIA driver on this machine; routing works without KV budgets\n");
        return kNVMLUnavailable;
    case ADPR_ERR_GPU_LOST:
    case ADPR_ERR_NOT_SUPPORTED:
    case ADPR_ERR_NO_PERMISSION:
    case ADPR_ERR_NOT_FOUND:
        return kGPUError;
    case ADPR_ERR_INVALID_ARGUMENT:
        return kUsage;
    default:
        return kLibraryError;
    }
}

template <typename F>
static bool resolve(void *lib, F *fn, const char *name) {
    *fn = reinterpret_cast<F>(dlsym(lib, name));
    if (*fn == nullptr) std::fprintf(stderr, "error: %s not found in the library: %s\n", name, dlerror());
    return *fn != nullptr;
}

// run does steps 2-4 with NVML initialised.
static int run(const Args &a) {
    char err[512] = "";
    adpr_status st;

    int32_t count = 0;
    if ((st = nvml_device_count(&count, err, sizeof err)) != ADPR_OK) return fail("adpr_nvml_device_count", st, err);
    std::printf("devices: %d\n", (int)count);

    adpr_memory_info mem{};
    if ((st = nvml_memory(a.device.c_str(), &mem, err, sizeof err)) != ADPR_OK)
        return fail("adpr_nvml_memory", st, err);
    std::printf("device %s memory%s:\n", a.device.c_str(),
                mem.has_reserved ? "" : " (driver without the v2 query: reserved counts as used)");
    std::printf("  total     %16" PRIu64 " bytes (%8.2f GiB)\n", mem.total_bytes, gib(mem.total_bytes));
    std::printf("  free      %16" PRIu64 " bytes (%8.2f GiB)\n", mem.free_bytes, gib(mem.free_bytes));
    std::printf("  used      %16" PRIu64 " bytes (%8.2f GiB)\n", mem.used_bytes, gib(mem.used_bytes));
    std::printf("  reserved  %16" PRIu64 " bytes (%8.2f GiB)\n", mem.reserved_bytes, gib(mem.reserved_bytes));

    uint64_t bpt = 0;
    if ((st = kv_bytes_per_token(&a.model->shape, &bpt, err, sizeof err)) != ADPR_OK)
        return fail("adpr_kv_bytes_per_token", st, err);

    adpr_kv_budget b{};
    b.free_bytes = mem.free_bytes;
    b.reserve_bytes = a.reserve_bytes;
    b.fraction = a.fraction;
    b.bytes_per_token = bpt;
    char reason[256] = "";
    if ((st = size_kv(&b, reason, sizeof reason, err, sizeof err)) != ADPR_OK) return fail("adpr_size_kv", st, err);
    std::printf("KV budget for %s (%" PRIu64 " bytes/token):\n", a.model->name, bpt);
    std::printf("  free      %16" PRIu64 " bytes\n", b.free_bytes);
    std::printf("  reserve   %16" PRIu64 " bytes\n", b.reserve_bytes);
    std::printf("  available %16" PRIu64 " bytes (free - reserve)\n", b.available_bytes);
    std::printf("  usable    %16" PRIu64 " bytes (fraction %g of available)\n", b.usable_bytes, b.fraction);
    std::printf("  fit       %16" PRIu64 " tokens (usable / bytes per token)\n", b.fit_tokens);
    std::printf("  budget    %16" PRIu64 " tokens = %" PRIu64 " blocks of %" PRIu64 " tokens (%8.2f GiB)%s\n",
                b.tokens, b.blocks, b.tokens_per_block, gib(b.tokens * bpt), b.capped ? " capped" : "");
    if (reason[0] != '\0') std::printf("  reason: %s\n", reason);

    // A pretend engine pool: the budget was allocated and half of it is in use.
    int64_t capacity = (int64_t)b.tokens;
    int64_t free_tokens = (int64_t)(b.blocks / 2 * b.tokens_per_block);
    adpr_rank_state state{};
    if ((st = rank_state_fill_kv(&state, capacity, free_tokens, a.device.c_str(), a.guard_bytes, bpt, 0, err,
                                 sizeof err)) != ADPR_OK)
        return fail("adpr_rank_state_fill_kv", st, err);
    bool pressure = (state.flags & ADPR_RANK_MEMORY_PRESSURE) != 0;
    std::printf("rank state (engine pool %" PRId64 " tokens, %" PRId64 " free; guard band %" PRIu64 " bytes):\n",
                capacity, free_tokens, a.guard_bytes);
    std::printf("  kv_capacity_tokens %" PRId64 "\n", state.kv_capacity_tokens);
    std::printf("  free_kv_tokens     %" PRId64 "\n", state.free_kv_tokens);
    std::printf("  memory_pressure    %s\n", pressure ? "yes" : "no");

    if (a.csv) {
        std::printf("device,total_bytes,free_bytes,used_bytes,reserved_bytes,has_reserved,model,bytes_per_token,"
                    "reserve_bytes,fraction,available_bytes,usable_bytes,fit_tokens,kv_tokens,kv_blocks,capped,"
                    "guard_band_bytes,engine_capacity_tokens,engine_free_tokens,kv_capacity_tokens,free_kv_tokens,"
                    "memory_pressure\n");
        std::printf("%s,%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%d,%s,%" PRIu64 ",%" PRIu64 ",%.17g,%" PRIu64
                    ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%d,%" PRIu64 ",%" PRId64 ",%" PRId64 ",%" PRId64
                    ",%" PRId64 ",%d\n",
                    a.device.c_str(), mem.total_bytes, mem.free_bytes, mem.used_bytes, mem.reserved_bytes,
                    (int)mem.has_reserved, a.model->name, bpt, b.reserve_bytes, b.fraction, b.available_bytes,
                    b.usable_bytes, b.fit_tokens, b.tokens, b.blocks, (int)b.capped, a.guard_bytes, capacity,
                    free_tokens, state.kv_capacity_tokens, state.free_kv_tokens, pressure ? 1 : 0);
    }
    return kOK;
}

int main(int argc, char **argv) {
    Args a;
    if (argc < 2 || !parse_args(argc, argv, &a)) {
        usage(argv[0]);
        return kUsage;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
        std::fprintf(stderr, "error: cannot load %s: %s\n", argv[1], dlerror());
        return kLibraryError;
    }
    if (!resolve(lib, &strerror_fn, "adpr_strerror") || !resolve(lib, &nvml_init, "adpr_nvml_init") ||
        !resolve(lib, &nvml_shutdown, "adpr_nvml_shutdown") ||
        !resolve(lib, &nvml_device_count, "adpr_nvml_device_count") ||
        !resolve(lib, &nvml_memory, "adpr_nvml_memory") ||
        !resolve(lib, &kv_bytes_per_token, "adpr_kv_bytes_per_token") || !resolve(lib, &size_kv, "adpr_size_kv") ||
        !resolve(lib, &rank_state_fill_kv, "adpr_rank_state_fill_kv"))
        return kLibraryError;

    char err[512] = "";
    adpr_status st = nvml_init(err, sizeof err);
    if (st != ADPR_OK) return fail("adpr_nvml_init", st, err);
    int code = run(a);
    if ((st = nvml_shutdown(err, sizeof err)) != ADPR_OK) {
        int c = fail("adpr_nvml_shutdown", st, err);
        if (code == kOK) code = c;
    }
    std::printf("exit %d\n", code);
    return code;
}
