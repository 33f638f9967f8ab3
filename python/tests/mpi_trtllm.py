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
every policy and option with TensorRT-LLM's admission capacity, and each
policy overcommitted so that the router carries requests over (with
TensorRT-LLM's capacity it never has to). Iteration stats ride on the rank
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
routed=... carried=... digest=...", then "ALL OK: <n> configurations, <ranks>
ranks", or "FAIL [name]: ..." lines and exits 1.
"""

import argparse
import os
import sys

from mpi4py import MPI

for _k in [k for k in os.environ if k.startswith("ADPROUTER_") and k != "ADPROUTER_LIBRARY"]:
    del os.environ[_k]  # the configurations say every option themselves

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_executor as X  # noqa: E402
import trtllm_fakes as F  # noqa: E402


class Dist(F.Dist):
    def __init__(self, comm):
        super().__init__(comm.Get_rank(), comm.Get_size(), comm.allgather)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=40, help="iterations with arrivals per configuration")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-iter-stats", action="store_true", help="run without iteration stats payloads")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
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
                print("[%s] OK iterations=%d requests=%d routed=%d carried=%d digest=0x%s"
                      % (name, st["iterations"], st["requests"], st["routed"], st["carried"], st["digest"]),
                      flush=True)
    if comm.Get_rank() == 0 and not failed:
        print("ALL OK: %d configurations, %d ranks" % (len(X.CONFIGS), comm.Get_size()), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
