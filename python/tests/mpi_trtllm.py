"""adprouter.trtllm on MPI ranks, the way TensorRT-LLM's PyExecutor runs it.

    mpirun --oversubscribe --allow-run-as-root -np 4 /usr/bin/python3 python/tests/mpi_trtllm.py

(PYTHONPATH=python, ADPROUTER_LIBRARY=build/libadprouter.so; mpi4py is
Debian's python3-mpi4py, for Debian's /usr/bin/python3.) Run by
TestMPITrtllm in mpi_test.go.

Every rank has its own fake KV cache (trtllm_fakes.KVCacheManager: it caches
the prompts this rank admitted) and its own active requests (each finishes
after a few iterations). Every iteration each rank pops the same new requests
(an identical seeded queue), then, as the executor does,
gather_all_rank_states (a real allgather), gather_prefix_matches when
needs_prefix_matches (a second one), route_requests, and admits its own
slice. Checked, for every configuration (every policy and option):

* all ranks agree each iteration: a digest of the decision, the expected
  count, the carried requests and the router's state_digest() is
  allgathered and must be equal;
* no rank exceeds max_num_active_requests, and expected covers every rank;
* no request is placed twice, and after draining the carry-over every
  request issued was admitted by exactly one rank (the ranks' own admitted
  sets, allgathered at the end, are disjoint and cover the queue).

Rank 0 prints one line per configuration, "[name] OK iterations=... routed=...
carried=... digest=...", then "ALL OK: <n> configurations, <ranks> ranks", or
"FAIL [name]: ..." lines and exits 1.
"""

import argparse
import hashlib
import os
import random
import sys

from mpi4py import MPI

for _k in [k for k in os.environ if k.startswith("ADPROUTER_") and k != "ADPROUTER_LIBRARY"]:
    del os.environ[_k]  # the configurations below say every option themselves

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trtllm_fakes as F  # noqa: E402

from adprouter import trtllm as T  # noqa: E402

KV = dict(enable_kv_cache_aware_routing=True)
CONV = dict(kv_cache_routing_conversation_affinity=True)

# name, AttentionDpConfig fields, adprouter options
CONFIGS = [
    ("default", {}, {}),
    ("default+capacity", {}, {"capacity_aware": True}),
    ("kv_cache_aware", KV, {}),
    ("kv_cache_aware+warmup", dict(KV, kv_cache_routing_cold_start_warmup=True), {}),
    ("kv_cache_aware+index", KV, {"prefix_source": "index"}),
    ("kv_cache_aware+probe+index", KV, {"prefix_source": "probe+index"}),
    ("kv_cache_aware+demand", KV, {"warmup": "demand", "warmup_min_requests": 1}),
    ("kv_cache_aware+capacity", KV, {"capacity_aware": True}),
    ("kv_cache_aware+preset=full", KV, {"preset": "full"}),
    ("conversation", CONV, {}),
    ("conversation+least_queued", dict(CONV, kv_cache_routing_new_conv_placement="least_queued"), {}),
]

MAXN = 4  # max_num_active_requests per rank: small, so that requests get carried


class Dist(F.Dist):
    def __init__(self, comm):
        super().__init__(comm.Get_rank(), comm.Get_size(), comm.allgather)


def workload(seed, it, next_id):
    """The iteration's new requests: identical on every rank."""
    rng = random.Random(seed * 1_000_003 + it)
    batch = []
    for _ in range(rng.randrange(0, 9)):
        rid = next_id()
        fam = rng.randrange(6)
        n = rng.randrange(40, 300)
        tokens = [fam * 100_000 + i for i in range(n)] + [rid] * rng.randrange(0, 3)
        target = rng.randrange(4) if rng.random() < 0.1 else None
        relax = rng.choice([None, None, True, False])
        conv = rng.choice(["c%d" % rng.randrange(12), rng.randrange(12), None])
        lora = 1 if rng.random() < 0.2 else None
        salt = "tenant" if rng.random() < 0.2 else None
        batch.append(F.item(rid, tokens, target=target, relax=relax, conversation=conv,
                            lora=lora, cache_salt=salt))
    return batch


def run_config(comm, name, cfg_fields, options, iters, seed):
    dist = Dist(comm)
    rank = dist.tp_rank
    kv = F.KVCacheManager(max_num_blocks=48)
    router = T.ADPRouter.create(dist, kv, F.attention_dp_config(**cfg_fields), options=options)
    counter = iter(range(1, 10 ** 9))
    issued, placed_anywhere, mine = [], set(), set()
    active = []  # (finish iteration, LlmRequest)
    routed = carried = 0
    digest = hashlib.sha256()
    errors = []
    it = 0
    while True:
        draining = it >= iters
        if draining and not router.carried:
            break
        if it >= iters + 50:
            errors.append("carry-over not drained 50 iterations after the last arrival: %r"
                          % [x.id for x in router.carried])
            break
        batch = [] if draining else workload(seed, it, lambda: next(counter))
        issued += [x.id for x in batch]
        active = [(end, r) for end, r in active if end > it]
        reqs = [r for _, r in active]
        states = router.gather_all_rank_states(reqs, batch)
        if router.needs_prefix_matches:
            router.gather_prefix_matches(batch)
        out, expected = router.route_requests(states, batch, MAXN)

        decision = [[x.id for x in out[r]] for r in range(dist.tp_size)]
        for r, ids in enumerate(decision):
            count = states[r].num_active_requests + len(ids)
            if count > MAXN:
                errors.append("iteration %d: rank %d has %d active requests, max %d" % (it, r, count, MAXN))
            if count > expected:
                errors.append("iteration %d: rank %d has %d active requests, expected %d" % (it, r, count, expected))
            for rid in ids:
                if rid in placed_anywhere:
                    errors.append("iteration %d: request %d placed twice" % (it, rid))
                placed_anywhere.add(rid)
        routed += sum(map(len, decision))
        carried += len(router.carried)

        for x in out[rank]:  # admit our own slice
            req = x.request
            if req is not None:
                lora = req.lora_config.task_id if req.lora_config is not None else None
                req.cached_tokens = kv.probe_prefix_match_length(req.input_token_ids[:-1], lora,
                                                                 cache_salt=req.cache_salt)
                kv.add(req.input_token_ids, lora, req.cache_salt)
                active.append((it + 1 + x.id % 5, req))
            mine.add(x.id)

        d = hashlib.sha256(repr((it, decision, expected, [x.id for x in router.carried],
                                 router.router.state_digest())).encode()).hexdigest()
        digest.update(d.encode())
        if len(set(comm.allgather(d))) != 1:
            errors.append("DIVERGENCE at iteration %d: the ranks' decisions differ" % it)
            break
        it += 1

    owners = comm.allgather(sorted(mine))
    seen = {}
    for r, ids in enumerate(owners):
        for rid in ids:
            if rid in seen:
                errors.append("request %d admitted by ranks %d and %d" % (rid, seen[rid], r))
            seen[rid] = r
    lost = sorted(set(issued) - set(seen))
    if lost:
        errors.append("%d requests never admitted: %r" % (len(lost), lost[:10]))
    extra = sorted(set(seen) - set(issued))
    if extra:
        errors.append("admitted requests never issued: %r" % extra[:10])
    errors = sorted(set(e for errs in comm.allgather(errors) for e in errs))
    return errors, dict(iterations=it, requests=len(issued), routed=routed, carried=carried,
                        digest=digest.hexdigest()[:16])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=40, help="iterations with arrivals per configuration")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    failed = 0
    for name, cfg_fields, options in CONFIGS:
        errors, st = run_config(comm, name, cfg_fields, options, args.iters, args.seed)
        if comm.Get_rank() == 0:
            if errors:
                failed += 1
                for e in errors[:20]:
                    print("FAIL [%s]: %s" % (name, e), flush=True)
            else:
                print("[%s] OK iterations=%d requests=%d routed=%d carried=%d digest=0x%s"
                      % (name, st["iterations"], st["requests"], st["routed"], st["carried"], st["digest"]),
                      flush=True)
    if comm.Get_rank() == 0 and not failed:
        print("ALL OK: %d configurations, %d ranks" % (len(CONFIGS), comm.Get_size()), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
