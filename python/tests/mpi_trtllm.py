"""adprouter.trtllm on MPI ranks, the way TensorRT-LLM's PyExecutor runs it.

    mpirun --oversubscribe --allow-run-as-root -np 4 /usr/bin/python3 python/tests/mpi_trtllm.py

(PYTHONPATH=python, ADPROUTER_LIBRARY=build/libadprouter.so; mpi4py is
Debian's python3-mpi4py, for Debian's /usr/bin/python3.) Run by
TestMPITrtllm in mpi_test.go.

Each MPI rank runs fake_executor.FakeExecutor, the same fake of the
executor's per-iteration routing that test_trtllm_executor.py runs on
threads (fake_executor's docstring has the steps and every invariant it
checks): its own fake KV cache and active requests (retiring ones left one
iteration, as the overlap scheduler does), the identical waiting queue
popped within TensorRT-LLM's admission capacity, gather_all_rank_states
every iteration (a real allgather), gather_prefix_matches only when
something was popped (a second one), route_requests every iteration, the
dummy-padding check. Every configuration of fake_executor.CONFIGS runs:
every policy and option with TensorRT-LLM's admission capacity, each
policy overcommitted so that the router carries requests over (with
TensorRT-LLM's capacity it never has to), and each overcommitted policy
again with the router given the executor (executor=, the "+requeue"
twins), which puts those requests back at the head of the executor's
waiting queue instead. Iteration stats ride on the rank
states unless --no-iter-stats. Checked, for every configuration, besides
fake_executor's per-iteration invariants:

* all ranks agree each iteration: a digest of the popped requests, the
  decision, the expected count, the carried requests and the router's
  state_digest() is allgathered and must be equal;
* no rank exceeds max_num_active_requests, and expected covers every rank;
* no request is placed twice, and after draining the waiting queue and the
  carry-over every request issued was admitted by exactly one rank (the
  ranks' own admitted sets, allgathered at the end, are disjoint and cover
  the workload).

Rank 0 prints one line per configuration, "[name] OK iterations=... requests=...
routed=... carried=... requeued=... digest=...", then "ALL OK: <n>
configurations, <ranks> ranks", or "FAIL [name]: ..." lines and exits 1.

With --check-ranks it checks the check_ranks option instead (TestMPICheckRanks):
every rank creates a KV-aware router with check_ranks, rank 1 with another
option than the rest. Every rank must raise adprouter.ConfigError at its
first gather_all_rank_states, after the one allgather of fingerprints (no
rank hangs in a collective the others skipped), naming both fingerprints.
Then with the same options everywhere the ranks route 3 iterations alike,
the fingerprint allgather made once. Rank 0 prints "[check_ranks mismatch]
rank <r> ConfigError allgathers=<n> fingerprint=<fp>: <message>" for every
rank, "[check_ranks match] OK iterations=3 routed=<n> allgathers=<list>
fingerprint=<fp>" and "CHECK_RANKS OK: <ranks> ranks", or "FAIL
[check_ranks ...]: ..." lines and exits 1.
"""

import argparse
import os
import sys

from mpi4py import MPI

for _k in [k for k in os.environ if (k.startswith(("ADPROUTER_", "TRTLLM_ADPROUTER_")) and k != "ADPROUTER_LIBRARY")
           or k == "TRTLLM_ADP_ROUTE_TRACE"]:
    del os.environ[_k]  # the configurations say every option themselves

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_executor as X  # noqa: E402
import trtllm_fakes as F  # noqa: E402

from adprouter import ConfigError  # noqa: E402
from adprouter import trtllm as T  # noqa: E402


class Dist(F.Dist):
    def __init__(self, comm):
        super().__init__(comm.Get_rank(), comm.Get_size(), comm.allgather)


def check_ranks(comm):
    """The --check-ranks mode (module docstring); returns the exit status."""
    rank = comm.Get_rank()
    cfg = F.attention_dp_config(enable_kv_cache_aware_routing=True)
    failures = []

    def router(dist, source):
        return T.ADPRouter.create(dist, F.KVCacheManager(), cfg,
                                  options={"check_ranks": True, "prefix_source": source})

    # Rank 1 with another option: every rank refuses at the first gather.
    dist = Dist(comm)
    r = router(dist, "probe+index" if rank == 1 else "index")
    try:
        r.gather_all_rank_states([])
        mine = ("routed", "", dist.allgathers, r.fingerprint)
    except ConfigError as e:
        mine = ("ConfigError", str(e), dist.allgathers, r.fingerprint)
    results = comm.allgather(mine)  # outside the router's Dist: not counted
    if rank == 0:
        prints = [fp for _, _, _, fp in results]
        for k, (kind, msg, n, fp) in enumerate(results):
            print("[check_ranks mismatch] rank %d %s allgathers=%d fingerprint=%s: %s" % (k, kind, n, fp, msg),
                  flush=True)
            if kind != "ConfigError" or n != 1:
                failures.append("[check_ranks mismatch]: rank %d: %s after %d allgathers, want ConfigError after 1"
                                % (k, kind, n))
            for fp_, who in ((prints[1], "[1]"), (prints[0], "[0, 2, 3]")):
                if "%s: ranks %s" % (fp_, who) not in msg:
                    failures.append("[check_ranks mismatch]: rank %d's error does not name %s: ranks %s"
                                    % (k, fp_, who))
        if len(set(prints)) != 2 or prints[0] != prints[2] or prints[0] != prints[3]:
            failures.append("[check_ranks mismatch]: fingerprints %r, want rank 1's alone different" % prints)

    # The same options everywhere: the ranks route alike, the check made once.
    dist = Dist(comm)
    r = router(dist, "index")
    counts, decisions = [], []
    try:
        for it in range(3):
            states = r.gather_all_rank_states([])
            counts.append(dist.allgathers)
            batch = [F.item(10 * it + k, [k] * (40 + k)) for k in range(5)]
            if r.needs_prefix_matches:
                r.gather_prefix_matches(batch)
            out, expected = r.route_requests(states, batch, 8)
            decisions.append(({k: [x.id for x in v] for k, v in out.items()}, expected))
        mine = ("routed", decisions, counts, r.fingerprint)
    except ConfigError as e:
        mine = ("ConfigError", str(e), dist.allgathers, r.fingerprint)
    results = comm.allgather(mine)
    if rank == 0:
        kinds = [x[0] for x in results]
        if kinds != ["routed"] * comm.Get_size():
            failures.append("[check_ranks match]: %r, want every rank routing" % kinds)
        elif len({repr(x) for x in results}) != 1:
            failures.append("[check_ranks match]: the ranks' decisions, allgathers or fingerprints differ: %r"
                            % results)
        elif counts != [2, 3, 4]:
            failures.append("[check_ranks match]: allgathers %r after each gather, want [2, 3, 4]" % counts)
        else:
            routed = sum(len(v) for d, _ in decisions for v in d.values())
            print("[check_ranks match] OK iterations=3 routed=%d allgathers=%s fingerprint=%s"
                  % (routed, ",".join(map(str, counts)), r.fingerprint), flush=True)
        for f in failures:
            print("FAIL " + f, flush=True)
        if not failures:
            print("CHECK_RANKS OK: %d ranks" % comm.Get_size(), flush=True)
    return 1 if comm.bcast(bool(failures), root=0) else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=40, help="iterations with arrivals per configuration")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-iter-stats", action="store_true", help="run without iteration stats payloads")
    ap.add_argument("--check-ranks", action="store_true", help="check the check_ranks option instead")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    if args.check_ranks:
        return check_ranks(comm)
    failed = 0
    for name, cfg_fields, options, executor in X.CONFIGS:
        errors, st = X.run(Dist(comm), F.attention_dp_config(**cfg_fields), options, iters=args.iters,
                           seed=args.seed, iter_stats=not args.no_iter_stats, **executor)
        if comm.Get_rank() == 0:
            if errors:
                failed += 1
                for e in errors[:20]:
                    print("FAIL [%s]: %s" % (name, e), flush=True)
            else:
                print("[%s] OK iterations=%d requests=%d routed=%d carried=%d requeued=%d digest=0x%s"
                      % (name, st["iterations"], st["requests"], st["routed"], st["carried"], st["requeued"],
                         st["digest"]), flush=True)
    if comm.Get_rank() == 0 and not failed:
        print("ALL OK: %d configurations, %d ranks" % (len(X.CONFIGS), comm.Get_size()), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
