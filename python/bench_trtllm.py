"""adprouter.trtllm end to end against a pure-Python router of the same rules.

    PYTHONPATH=python python3 python/bench_trtllm.py            # full run
    PYTHONPATH=python python3 python/bench_trtllm.py --quick    # a few seconds

What one rank of an ADP engine does per iteration with the KV-aware router,
on RequestQueueItems whose prompts are ~2k-token Python lists (4 shared system
prompts plus a suffix) and dense allgathered matches (every rank reports a
block-aligned match for every request):

* "gather": gather_prefix_matches: the probe loop (the prompt minus its last
  token to a probe that returns at once, as TensorRT-LLM does) and parsing
  the allgathered [id, match, ...] lists (the allgather itself returns
  prepared lists);
* "route": route_requests: building the batch, the decision, mapping ids
  back to the engine's items.

"pure Python" is trtllm_fakes.ReferenceADPRouter: TensorRT-LLM's parse into
per-rank dicts and relax sort, then adprouter's pure-Python reference router
(python/tests/reference.py, CPython's own seeded shuffle), i.e. what
TensorRT-LLM's own KVCacheAwareADPRouter computes. Runs alternate between the
two; medians in microseconds (time.perf_counter_ns); the machine is shared, so
read ratios, not absolutes.
"""

import argparse
import gc
import os
import platform
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests"))
import trtllm_fakes as F  # noqa: E402

import adprouter  # noqa: E402
from adprouter import trtllm as T  # noqa: E402

PROMPT_LEN = 2048
SYSTEM_PROMPTS = 4
BLOCK = 32


def workload(nreq, dp, seed=1):
    rng = random.Random(seed)
    systems = [[s * 1_000_000 + i for i in range(1500)] for s in range(SYSTEM_PROMPTS)]
    items = []
    for rid in range(1000, 1000 + nreq):
        head = systems[rng.randrange(SYSTEM_PROMPTS)]
        n = rng.randrange(PROMPT_LEN - 256, PROMPT_LEN + 256)
        items.append(F.item(rid, head + [rid * 10_000 + i for i in range(n - len(head))]))
    flat = []
    for _ in range(dp):
        row = []
        for it in items:
            row += [it.id, rng.randrange(0, 1500 // BLOCK) * BLOCK]
        flat.append(row)
    states = [T.RankState(r, rng.randrange(0, 8), rng.randrange(0, 40_000)) for r in range(dp)]
    return items, flat, states


class _ProbeFree:
    enable_block_reuse = True

    @staticmethod
    def probe_prefix_match_length(tokens, lora_task_id=None, cache_salt=None):
        return 0


def _pure_gather(items, kv, allgather):
    """TensorRT-LLM's gather_prefix_matches, written out (the oracle only parses)."""
    local = []
    for it in items:
        toks = it.request.input_token_ids
        local += [it.id, kv.probe_prefix_match_length(toks[:-1] if len(toks) > 1 else [], None)]
    return allgather(local)


def bench(nreq, dp, runs, maxn=512):
    items, flat, states = workload(nreq, dp)
    dist = F.Dist(0, dp, allgather=lambda _: flat)
    kv = _ProbeFree()
    ours = T.KVCacheAwareADPRouter(dist, kv)
    pure = F.ReferenceADPRouter("kv_cache_aware", dp)
    times = {k: [] for k in ("ours gather", "ours route", "pure gather", "pure route")}
    check = None
    gc.disable()
    try:
        for i in range(runs):
            for who in (("ours", "pure") if i % 2 == 0 else ("pure", "ours")):
                t0 = time.perf_counter_ns()
                if who == "ours":
                    ours.gather_prefix_matches(items)
                    t1 = time.perf_counter_ns()
                    out, _ = ours.route_requests(states, items, maxn)
                    assert not ours.drain_carried()
                else:
                    pure.gather(_pure_gather(items, kv, dist.tp_allgather))
                    t1 = time.perf_counter_ns()
                    out, _ = pure.route(states, items, maxn)
                    assert not pure.carry
                t2 = time.perf_counter_ns()
                times[who + " gather"].append((t1 - t0) / 1000)
                times[who + " route"].append((t2 - t1) / 1000)
                got = {r: [x.id for x in v] for r, v in out.items()}
                if check is None:
                    check = got
                elif got != check:
                    raise SystemExit("decisions differ between runs or implementations (%d x %d)" % (nreq, dp))
            gc.collect()
    finally:
        gc.enable()
    return {k: statistics.median(v) for k, v in times.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="few runs")
    args = ap.parse_args()
    print("adprouter %s, Python %s, %s" % (adprouter.version(), platform.python_version(),
                                           platform.machine()))
    print("KV-aware router, one rank's iteration, ~2k-token prompts as lists, dense matches; "
          "median us")
    print("%-12s %10s %10s %10s | %10s %10s %10s | %8s %8s" % (
        "reqs x ranks", "gather", "route", "total", "pure gath", "pure route", "pure tot",
        "route x", "total x"))
    for nreq, dp, runs in ((256, 16, 41), (1024, 64, 11)):
        if args.quick:
            runs = 5
        m = bench(nreq, dp, runs)
        ours = m["ours gather"] + m["ours route"]
        pure = m["pure gather"] + m["pure route"]
        print("%-12s %10.0f %10.0f %10.0f | %10.0f %10.0f %10.0f | %7.1fx %7.1fx" % (
            "%d x %d" % (nreq, dp), m["ours gather"], m["ours route"], ours, m["pure gather"],
            m["pure route"], pure, m["pure route"] / m["ours route"], pure / ours))


if __name__ == "__main__":
    main()
