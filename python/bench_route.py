"""Route latency: the ctypes binding (end to end, and the C call alone) against the
pure-Python reference router on the same batch.

    PYTHONPATH=python python3 python/bench_route.py            # full run
    PYTHONPATH=python python3 python/bench_route.py --quick    # a few seconds
    PYTHONPATH=python python3 python/bench_route.py --profile  # cProfile of the binding
    PYTHONPATH=python python3 python/bench_route.py --phases   # where one call's time goes
    PYTHONPATH=python python3 python/bench_route.py --instructions   # the same, counted (valgrind)
    ... --cpu-time: time with time.thread_time_ns (this thread's CPU time; the Go code
    runs on the calling thread) instead of time.perf_counter_ns: steadier on a busy host.

Workload: 64 x 8, 256 x 16, 1024 x 16 and 1024 x 64 requests x ranks;
prompts of 2048 tokens +-10% held as Python lists of ints, 7 in 8 starting with one of 4
shared system prompts (so KV-aware grouping by the first 64 tokens matters), the eighth
unique; ranks carrying uneven load. Match lengths are dense, the way an allgather of
per-rank probes builds them: one dict {request id: matched tokens} per rank naming every
request. The timed region of both routers starts from those lists: it builds the Request
objects, routes, and reads the assignment. Two extra rows repeat 256 x 16 +match:
"=len", every prompt exactly 2048 tokens (the shape older benchmarks used), and
"=ties", the tie-break's worst case (idle ranks, one prompt for all). Warmup is off, so the
KV-aware and default routers hold no state between calls and one router serves all runs
(as in an engine); the conversation routers (both) are created afresh, outside the timed
region, for every run so that every run routes new conversations.

Index mode (policy "kv_cache_aware+index", 256 x 16 and 1024 x 64): the router's own
prefix index instead of match dicts, fresh prompts every call, timed once the index is
full (tests/index_fill.py), against the reference's route alone with dense match dicts
on the same batch; a second line compares those calls with early ones on a filling
index.

Columns (microseconds, time.perf_counter_ns): "route" is the binding end to end;
"reference" is the same with ReferenceRouter; speed-up = reference median / route
median. The breakdown comes from a second call in each run, made through the binding's
ctypes path by wrapping its library object (with adprouter._speedups, route() packs and
calls adpr_route in C, out of the wrapper's sight): "C call" is the adpr_route call
(ctypes overhead included), "py pack"/"py unpack" the work before and after it
(building the Request objects counts as packing).
"""

import argparse
import cProfile
import gc
import os
import platform
import pstats
import random
import statistics
import sys
import time

# The binding timed is the one on PYTHONPATH, so that this script can time
# another checkout (PYTHONPATH=OTHER/python python3 python/bench_route.py);
# Python would otherwise import the one beside the script first.
if os.environ.get("PYTHONPATH") and sys.path and sys.path[0] == os.path.dirname(os.path.abspath(__file__)):
    sys.path.append(sys.path.pop(0))

import adprouter  # noqa: E402

# The pure-Python reference rules, the baseline, live with the tests.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests"))
import index_fill  # noqa: E402
import reference as ref  # noqa: E402

_now = time.perf_counter_ns
SYSTEM_PROMPTS = 4
PROMPT_LEN = 2048


class _TimedLib:
    """Stands in for the binding's CDLL: times adpr_route, forwards everything."""

    def __init__(self, lib):
        self._lib = lib
        self.t0 = self.t1 = 0

    def adpr_route(self, *args):
        t0 = _now()
        status = self._lib.adpr_route(*args)
        self.t1 = _now()
        self.t0 = t0
        return status

    def __getattr__(self, name):
        return getattr(self._lib, name)


def workload(n_req, dp, seed=1, shape=""):
    """The batch of one cell. shape "=len": every prompt exactly PROMPT_LEN tokens;
    "=ties": the tie-break's worst case, idle ranks and one prompt for all (each
    request its own copy of the list), so nearly every request ties on every rank
    with room and needs its random.Random(id) shuffle; the match dicts then report 0
    everywhere (nothing is cached on an idle rank)."""
    equal_len = shape == "=len"
    rng = random.Random(seed * 1000 + n_req * 10 + dp)
    systems = [[rng.randrange(32000) for _ in range(rng.choice((256, 512, 1024, 1500)))]
               for _ in range(SYSTEM_PROMPTS)]
    prompts, sys_of = [], []
    for i in range(n_req):
        n = PROMPT_LEN if equal_len else PROMPT_LEN + rng.randrange(-PROMPT_LEN // 10, PROMPT_LEN // 10 + 1)
        sysp = systems[rng.randrange(SYSTEM_PROMPTS)] if rng.randrange(8) else []
        prompts.append(sysp + [rng.randrange(32000) for _ in range(n - len(sysp))])
        sys_of.append(sysp)
    ids = [rng.randrange(2 ** 63) for _ in range(n_req)]
    maxn = 2 * n_req // dp + 16
    loads = [rng.randrange(0, maxn // 2) for _ in range(dp)]
    loads = [(a, a * rng.randrange(500, 3000)) for a in loads]
    # Dense match lengths: every rank reports every request; the rank that served a
    # system prompt caches it (block-aligned), the others hold short hits or nothing.
    owner = {id(s): rng.randrange(dp) for s in systems}
    matches = [[(len(s) // 32 * 32 if s and owner[id(s)] == r else rng.choice((0, 0, 32, 64)))
                for s in sys_of] for r in range(dp)]
    convs = ["conv-%d" % rng.randrange(n_req // 2) for _ in range(n_req)]
    if shape == "=ties":
        prompts = [list(prompts[0]) for _ in prompts]
        sys_of = [sys_of[0]] * n_req
        loads = [(0, 0)] * dp
        matches = [[0] * n_req for _ in range(dp)]
    return dict(prompts=prompts, ids=ids, maxn=maxn, loads=loads, matches=matches, convs=convs,
                sys=sys_of)


def match_dicts(w):
    """One dict per rank naming every request, as gathered probes produce them."""
    return [dict(zip(w["ids"], row)) for row in w["matches"]]


def binding_route(router, w, policy, states, matches):
    """The binding's timed region: Request objects from the lists, route, read."""
    Request = adprouter.Request
    if policy == "conversation":
        reqs = [Request(i, tokens=p, conversation_id=c) for i, p, c in zip(w["ids"], w["prompts"], w["convs"])]
    else:
        reqs = [Request(i, tokens=p) for i, p in zip(w["ids"], w["prompts"])]
    res = router.route(states, reqs, w["maxn"], matches)
    return res.assignment, res.expected, res.unassigned


def reference_route(oracle, w, policy, states, matches):
    """The same for the pure-Python reference."""
    Request = ref.Request
    if policy == "conversation":
        reqs = [Request(i, p, conversation_id=c) for i, p, c in zip(w["ids"], w["prompts"], w["convs"])]
    else:
        reqs = [Request(i, p) for i, p in zip(w["ids"], w["prompts"])]
    res = oracle.route(states, reqs, w["maxn"], matches)
    return res.assignment, res.expected, res.unassigned


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def bench_one(policy, with_matches, n_req, dp, runs, shape=""):
    w = workload(n_req, dp, shape=shape)
    b_states = [adprouter.RankState(r, a, t) for r, (a, t) in enumerate(w["loads"])]
    r_states = [ref.RankState(r, a, t) for r, (a, t) in enumerate(w["loads"])]
    b_matches = match_dicts(w) if with_matches else None
    r_matches = match_dicts(w) if with_matches else None
    cfg = dict(policy=policy, dp_size=dp)

    # Same decision from both, or the comparison is meaningless.
    with adprouter.Router(**cfg) as r:
        got = binding_route(r, w, policy, b_states, b_matches)
    want = reference_route(ref.ReferenceRouter(**cfg), w, policy, r_states, r_matches)
    if got != want:
        raise SystemExit("binding and reference disagree on %s %d x %d" % (policy, n_req, dp))

    fresh = policy == "conversation"
    router = adprouter.Router(**cfg)
    oracle = ref.ReferenceRouter(**cfg)
    e2e, ccall, pack, unpack, refs = [], [], [], [], []
    gc.collect()
    for k in range(runs + 3):
        if fresh:
            router.close()
            router = adprouter.Router(**cfg)
            oracle = ref.ReferenceRouter(**cfg)
        # The breakdown, from a call through the ctypes path with adpr_route
        # wrapped (the C path calls it by address, unwrapped). Then, as
        # before every timed call, the reference runs in between: each
        # router starts from caches the other one used.
        timed = _TimedLib(router._lib)
        router._lib = timed
        t4 = _now()
        binding_route(router, w, policy, b_states, b_matches)
        t5 = _now()
        router._lib = timed._lib
        if fresh:
            router.close()
            router = adprouter.Router(**cfg)

        t2 = _now()
        reference_route(oracle, w, policy, r_states, r_matches)
        t3 = _now()

        t0 = _now()
        binding_route(router, w, policy, b_states, b_matches)
        t1 = _now()
        if k < 3:
            continue  # warm-up
        e2e.append(t1 - t0)
        ccall.append(timed.t1 - timed.t0)
        pack.append(timed.t0 - t4)
        unpack.append(t5 - timed.t1)
        refs.append(t3 - t2)
    router.close()
    us = lambda ns: ns / 1000.0  # noqa: E731
    return dict(
        policy=policy + (" +match" if with_matches else "") + (" " + shape if shape else ""),
        n_req=n_req, dp=dp,
        route=us(statistics.median(e2e)), route_p90=us(pct(e2e, 0.9)),
        ccall=us(statistics.median(ccall)), pack=us(statistics.median(pack)), unpack=us(statistics.median(unpack)),
        ref=us(statistics.median(refs)), ref_p90=us(pct(refs, 0.9)),
    )


def fresh_prompts(w, call):
    """w's prompts made new for call number call: the first token after the system
    prompt (the first token of a unique prompt) is unique to (call, request), so every
    block after the shared system prompts is one the prefix index has never seen."""
    out = []
    for i, p in enumerate(w["prompts"]):
        p = list(p)
        p[len(w["sys"][i])] = 32000 + call * len(w["prompts"]) + i
        out.append(p)
    return dict(w, prompts=out)


def bench_index(n_req, dp, runs, capacity, early=5):
    """Index mode at steady state: the router's own prefix index supplies the match
    lengths (prefix_source="index", no probes, no match table) while every call brings
    fresh prompts. Calls start on an empty index; calls 1 to `early` while it fills are
    the early figure, the `runs` timed ones come once the index is full
    (tests/index_fill.py; index_capacity_blocks per rank, tokens_per_block 32). The
    reference routes the same batch with dense match dicts: what an engine without the
    index pays for the routing alone (the probes and the second allgather that build
    those dicts come on top)."""
    w = workload(n_req, dp)
    states = [adprouter.RankState(r, a, t) for r, (a, t) in enumerate(w["loads"])]
    r_states = [ref.RankState(r, a, t) for r, (a, t) in enumerate(w["loads"])]
    oracle = ref.ReferenceRouter(policy="kv_cache_aware", dp_size=dp)
    router = adprouter.Router(policy="kv_cache_aware", dp_size=dp, prefix_source="index",
                              index_capacity_blocks=capacity)
    early_t, late_t, refs = [], [], []
    call, filling = 0, index_fill.Filling()
    gc.collect()
    full = False
    while len(late_t) < runs:
        fw = fresh_prompts(w, call)
        full = full or filling.full(router.stats(0))
        if full:
            r_matches = match_dicts(fw)
            t2 = _now()
            reference_route(oracle, fw, "kv_cache_aware", r_states, r_matches)
            t3 = _now()
        t0 = _now()
        binding_route(router, fw, "kv_cache_aware", states, None)
        t1 = _now()
        if 1 <= call <= early and not full:
            early_t.append(t1 - t0)  # call 0 allocates the index: a one-time cost
        if full:
            late_t.append(t1 - t0)
            refs.append(t3 - t2)
        call += 1
        if call > max(100000 // max(n_req, 1), 4 * index_fill.SETTLE) + 10 * runs and not full:
            raise SystemExit("the index never filled: lower --index-capacity")
    st = router.stats(0)
    router.close()
    us = lambda ns: ns / 1000.0  # noqa: E731
    return dict(route=us(statistics.median(late_t)), route_p90=us(pct(late_t, 0.9)),
                early=us(statistics.median(early_t)), ref=us(statistics.median(refs)),
                ref_p90=us(pct(refs, 0.9)), calls=call, entries=st["index_entries"],
                evicted=index_fill.evicted(st))




CASES = [("kv_cache_aware", False), ("kv_cache_aware", True), ("default", False), ("conversation", False)]
SIZES = [(64, 8), (256, 16), (1024, 16), (1024, 64)]


def run_profile(n_req=256, dp=16, calls=300):
    w = workload(n_req, dp)
    states = [adprouter.RankState(r, a, t) for r, (a, t) in enumerate(w["loads"])]
    matches = match_dicts(w)
    with adprouter.Router(policy="kv_cache_aware", dp_size=dp) as r:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            binding_route(r, w, "kv_cache_aware", states, matches)
        prof.disable()
    print("cProfile: %d x Router.route, kv_cache_aware + dense match dicts, %d requests x %d ranks"
          % (calls, n_req, dp))
    pstats.Stats(prof).sort_stats("tottime").print_stats(12)


def kv_match_setup(n_req, dp):
    """The kv_cache_aware+match cell's workload, states, match dicts and
    routers, for both the binding and the reference:
    (w, states, r_states, matches, r_matches, oracle, router)."""
    w = workload(n_req, dp)
    states = [adprouter.RankState(r, a, t) for r, (a, t) in enumerate(w["loads"])]
    r_states = [ref.RankState(r, a, t) for r, (a, t) in enumerate(w["loads"])]
    matches, r_matches = match_dicts(w), match_dicts(w)
    oracle = ref.ReferenceRouter(policy="kv_cache_aware", dp_size=dp)
    router = adprouter.Router(policy="kv_cache_aware", dp_size=dp)
    return w, states, r_states, matches, r_matches, oracle, router


def run_phases(n_req, dp, runs):
    """Where one end-to-end call's time goes, phase by phase, on caches as an
    engine leaves them: the reference runs before every timed phase (what the
    end-to-end figure sees too, the reference running between binding
    calls). With adprouter._speedups, route() packs and calls adpr_route in
    one C call, so the packing phases are timed through the module's own
    functions (pack_requests copies its buffers into bytes, which route()
    does not) and the decision is what is left of the C call."""
    from adprouter import _accel, _pack
    w, states, r_states, matches, r_matches, oracle, router = kv_match_setup(n_req, dp)
    sp = _accel.speedups
    send = router._send_tokens
    Request = adprouter.Request
    names = ["Request objects from lists", "pack states + requests", "match table from dicts",
             "route(): pack, table, adpr_route, decode", "read assignment, expected, unassigned",
             "end to end"]
    times = {k: [] for k in names}

    def cold():
        reference_route(oracle, w, "kv_cache_aware", r_states, r_matches)

    def build():
        return [Request(i, tokens=p) for i, p in zip(w["ids"], w["prompts"])]

    gc.collect()
    for k in range(runs + 3):
        cold()
        t0 = _now()
        reqs = build()
        t1 = _now()
        if sp:
            sp.pack_states(states), sp.pack_requests(reqs, send)
        else:
            _pack.pack_states(states), _pack.pack_requests(reqs, send)
        t2 = _now()
        if sp:
            sp.match_table(matches, reqs, False)
        else:
            _pack.match_table(matches, reqs, dp, n_req, False)
        t3 = _now()
        cold()
        reqs = build()
        t4 = _now()
        res = router.route(states, reqs, w["maxn"], matches)
        t5 = _now()
        res.assignment, res.expected, res.unassigned
        t6 = _now()
        cold()
        t7 = _now()
        binding_route(router, w, "kv_cache_aware", states, matches)
        t8 = _now()
        if k >= 3:
            for name, dt in zip(names, (t1 - t0, t2 - t1, t3 - t2, t5 - t4, t6 - t5, t8 - t7)):
                times[name].append(dt)
    router.close()
    med = {k: statistics.median(v) / 1000.0 for k, v in times.items()}
    print("phases of one kv_cache_aware call with dense match dicts, %d requests x %d ranks, %s; "
          "medians of %d runs (us), the reference run before each phase" % (
              n_req, dp, "adprouter._speedups" if sp else "pure Python", runs))
    for name in names:
        print("  %-42s %8.1f" % (name, med[name]))
    rest = med[names[3]] - med[names[1]] - med[names[2]]
    print("  %-42s %8.1f" % ("(adpr_route and decoding: route() - packing)", rest))


def run_instructions(n_req, dp, calls):
    """Instructions and simulated cache misses of one end-to-end call, under
    valgrind's cachegrind: deterministic where timings on a shared host are
    not. The script runs itself twice under cachegrind, calls times the
    reference alone and calls times the reference then the binding, and
    reports the difference per call (the reference runs between binding
    calls, as in the timed harness). The last level simulated is a 1 MiB
    cache (this host's L2): its misses are what cold caches cost."""
    import re
    import shutil
    import subprocess
    if not shutil.which("valgrind"):
        sys.exit("--instructions needs valgrind (apt-get install valgrind)")
    totals = {}
    for with_binding in (0, 1):
        cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=yes", "--D1=32768,8,64", "--LL=1048576,16,64",
               "--cachegrind-out-file=/dev/null", sys.executable, os.path.abspath(__file__),
               "--_loop", "%d,%d,%d,%d" % (n_req, dp, calls, with_binding)]
        # The Go runtime reads the clock with RDTSCP where the CPU has it,
        # which this valgrind cannot decode (SIGILL, now and then).
        godebug = ",".join(v for v in (os.environ.get("GODEBUG"), "cpu.rdtscp=off") if v)
        err = subprocess.run(cmd, capture_output=True, text=True, check=True,
                             env=dict(os.environ, GODEBUG=godebug)).stderr
        got = {}
        for key, pat in (("instructions", r"I\s+refs:\s+([\d,]+)"), ("D1 misses", r"D1\s+misses:\s+([\d,]+)"),
                         ("LL misses", r"LL misses:\s+([\d,]+)")):
            got[key] = int(re.search(pat, err).group(1).replace(",", ""))
        totals[with_binding] = got
    print("one kv_cache_aware call with dense match dicts, %d requests x %d ranks, end to end, under "
          "cachegrind (%d calls, the reference run between them); binding %s; per call:"
          % (n_req, dp, calls, os.path.dirname(adprouter.__file__)))
    for key in ("instructions", "D1 misses", "LL misses"):
        print("  %-14s %12.0f" % (key, (totals[1][key] - totals[0][key]) / calls))


def _loop(spec):
    """--instructions' workload: calls x (reference, then the binding if asked)."""
    n_req, dp, calls, with_binding = (int(x) for x in spec.split(","))
    w, states, r_states, matches, r_matches, oracle, router = kv_match_setup(n_req, dp)
    binding_route(router, w, "kv_cache_aware", states, matches)  # loaded and sized either way
    for _ in range(calls):
        reference_route(oracle, w, "kv_cache_aware", r_states, r_matches)
        if with_binding:
            binding_route(router, w, "kv_cache_aware", states, matches)
    router.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="few runs (a few seconds in all)")
    ap.add_argument("--runs", type=int, help="timed runs per cell (default 200, --quick 15)")
    ap.add_argument("--profile", action="store_true", help="cProfile the binding and exit")
    ap.add_argument("--phases", action="store_true",
                    help="time the phases of one kv_cache_aware+match call (cold caches) and exit; "
                    "--size picks the cell (default 256x16)")
    ap.add_argument("--instructions", action="store_true",
                    help="count instructions and simulated cache misses of one kv_cache_aware+match call "
                    "under valgrind (deterministic, for comparing trees on a noisy host) and exit; "
                    "--size picks the cell (default 256x16), --runs the calls (default 30)")
    ap.add_argument("--_loop", help=argparse.SUPPRESS)
    ap.add_argument("--cpu-time", action="store_true", help="time.thread_time_ns instead of perf_counter_ns")
    ap.add_argument("--size", action="append", metavar="NxR",
                    help="only this requests x ranks cell (repeatable), e.g. 256x16")
    ap.add_argument("--policy", action="append", metavar="NAME",
                    help="only this policy (repeatable): kv_cache_aware, kv_cache_aware+match, default, "
                    "conversation, kv_cache_aware+index")
    ap.add_argument("--index-capacity", type=int, default=8192, metavar="BLOCKS",
                    help="kv_cache_aware+index: index_capacity_blocks per rank (default 8192)")
    args = ap.parse_args()
    global _now
    if args.cpu_time:
        _now = time.thread_time_ns
    if args.profile:
        run_profile()
        return
    if args._loop:
        _loop(args._loop)
        return
    if args.instructions:
        for size in args.size or ["256x16"]:
            n_req, dp = (int(x) for x in size.split("x"))
            run_instructions(n_req, dp, args.runs or 30)
        return
    runs = args.runs or (15 if args.quick else 200)
    if args.phases:
        for size in args.size or ["256x16"]:
            n_req, dp = (int(x) for x in size.split("x"))
            run_phases(n_req, dp, max(5, runs * 256 // max(n_req * dp // 16, 256)))
        return

    print("command: %s" % " ".join(["PYTHONPATH=python", "python3"] + sys.argv))
    print("python %s on %s (%s), %d CPUs; library %s (adprouter %s)" % (
        platform.python_version(), platform.machine(), platform.processor() or platform.system(),
        os.cpu_count() or 0, adprouter.library_path(), adprouter.version()))
    print("prompts: %d +-10%% tokens as Python lists, 7 in 8 from %d shared system prompts; dense match "
          "dicts; %d timed runs per cell (fewer for big cells); "
          "times in microseconds (median, p90) of %s\n" % (
              PROMPT_LEN, SYSTEM_PROMPTS, runs, "thread CPU time" if args.cpu_time else "wall time"))
    head = ("policy", "reqs", "ranks", "route med", "route p90", "C call", "py pack", "py unpack",
            "reference med", "ref p90", "speed-up")
    fmt = "%-28s %5s %5s %10s %10s %9s %9s %9s %14s %10s %9s"
    print(fmt % head)
    print("-" * 130)
    cells = [(policy, m, n_req, dp, "") for policy, m in CASES for n_req, dp in SIZES]
    cells.append(("kv_cache_aware", True, 256, 16, "=len"))
    cells.append(("kv_cache_aware", True, 256, 16, "=ties"))
    if args.size:
        cells = [c for c in cells if "%dx%d" % (c[2], c[3]) in args.size]
    if args.policy:
        cells = [c for c in cells if c[0] + ("+match" if c[1] else "") in args.policy]
    for policy, with_matches, n_req, dp, shape in cells:
        # The reference takes ~0.1 s per 1024 x 64 decision: fewer runs for big cells.
        n_runs = max(5, runs * 256 // max(n_req * dp // 16, 256))
        row = bench_one(policy, with_matches, n_req, dp, n_runs, shape)
        print(fmt % (row["policy"], n_req, dp, "%.1f" % row["route"], "%.1f" % row["route_p90"],
                     "%.1f" % row["ccall"], "%.1f" % row["pack"], "%.1f" % row["unpack"],
                     "%.1f" % row["ref"], "%.1f" % row["ref_p90"], "%.1fx" % (row["ref"] / row["route"])))
        sys.stdout.flush()
    index_sizes = [(n, r) for n, r in ((256, 16), (1024, 64)) if not args.size or "%dx%d" % (n, r) in args.size]
    if args.policy and "kv_cache_aware+index" not in args.policy:
        index_sizes = []
    for n_req, dp in index_sizes:
        n_runs = max(5, runs * 256 // max(n_req * dp // 16, 256))
        row = bench_index(n_req, dp, n_runs, args.index_capacity)
        print(fmt % ("kv_cache_aware +index", n_req, dp, "%.1f" % row["route"], "%.1f" % row["route_p90"],
                     "", "", "", "%.1f" % row["ref"], "%.1f" % row["ref_p90"], "%.1fx" % (row["ref"] / row["route"])))
        print("    index mode: early calls (empty index) %.1f, late calls (full, evicting) %.1f: late/early "
              "%.2f; %d calls, %d index entries, %d blocks evicted; reference with dense match dicts"
              % (row["early"], row["route"], row["route"] / row["early"], row["calls"], row["entries"],
                 row["evicted"]))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
