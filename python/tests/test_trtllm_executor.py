"""adprouter.trtllm driven the way TensorRT-LLM's executor drives its ADP
routers: fake_executor.FakeExecutor (its docstring has the per-iteration
steps and invariants) on 4 ranks as threads (trtllm_fakes.ThreadGroup, a
real in-process allgather).

ExecutorTest runs the default router, the KV-cache-aware router (plain,
with cold_start_warmup, with prefix_source "index") and the conversation
router (round robin and least_queued), each with iteration stats on and off,
with TensorRT-LLM's admission capacity, then each policy overcommitted:
every invariant holds, every request is admitted by exactly one rank,
retiring requests, dummy padding and idle iterations occur, the probe runs
exactly on the iterations that popped something (and some popped nothing),
iteration stats change no decision, and the overcommitted runs carry
requests over. CheckTest shows the invariants are live: a router returning
a too small expected, one misreporting retiring requests, one making an
extra collective and a rank routing with perturbed states are each caught.
The same executor runs under MPI in mpi_trtllm.py (mpi_test.go).
"""

import os
import sys
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_executor as X  # noqa: E402
import trtllm_fakes as F  # noqa: E402

RANKS = 4
ITERS = 40

NAMES = ["default", "kv_cache_aware", "kv_cache_aware+warmup", "kv_cache_aware+index", "conversation",
         "conversation+least_queued", "default+overcommit", "kv_cache_aware+overcommit",
         "conversation+overcommit"]


def clean_env():
    """No ADPROUTER_* option variables from the caller's environment."""
    return mock.patch.dict(os.environ, {k: v for k, v in os.environ.items()
                                        if not (k.startswith("ADPROUTER_") and k != "ADPROUTER_LIBRARY")},
                           clear=True)


def run(name, iter_stats, setup=None, iters=ITERS):
    fields, options, executor = X.CONFIG[name]

    def rank(dist):
        return X.run(dist, F.attention_dp_config(**fields), options, iters=iters, iter_stats=iter_stats,
                     setup=setup, **executor)
    out = F.ThreadGroup(RANKS).run(rank)
    for errors, stats in out[1:]:  # the errors of every rank; without them, the same decisions
        assert errors == out[0][0] and (errors or stats["digest"] == out[0][1]["digest"])
    return out[0]


class ExecutorTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with clean_env():
            cls.results = {(name, stats): run(name, stats) for name in NAMES for stats in (False, True)}

    def test_invariants(self):
        for (name, stats), (errors, st) in self.results.items():
            with self.subTest(name, iter_stats=stats):
                self.assertEqual(errors, [])
                self.assertGreater(st["requests"], 0)
                self.assertEqual(st["routed"], st["requests"])
                self.assertGreater(st["retiring"], 0, "no retiring request was ever held")

    def test_probe_only_when_popped(self):
        for (name, stats), (_, st) in self.results.items():
            with self.subTest(name, iter_stats=stats):
                self.assertLess(st["popped_iters"], st["iterations"], "every iteration popped something")
                probing = name.startswith("kv_cache_aware") and name != "kv_cache_aware+index"
                self.assertEqual(st["probes"], st["popped_iters"] if probing else 0)

    def test_padding_and_idle_occur(self):
        for key in ("dummies", "idle", "held_back"):
            self.assertGreater(sum(st[key] for _, st in self.results.values()), 0, key)

    def test_iteration_stats_change_no_decision(self):
        for name in NAMES:
            with self.subTest(name):
                self.assertEqual(self.results[name, False][1]["digest"], self.results[name, True][1]["digest"])

    def test_carry_over(self):
        for (name, stats), (_, st) in self.results.items():
            with self.subTest(name, iter_stats=stats):
                if name.endswith("+overcommit"):
                    self.assertGreater(st["carried"], 0)


class CheckTest(unittest.TestCase):
    """The fake executor's checks catch a misbehaving router."""

    def setUp(self):
        env = clean_env()
        env.start()
        self.addCleanup(env.stop)

    def caught(self, name, setup, want):
        errors, _ = run(name, True, setup=setup, iters=12)
        self.assertTrue(any(want in e for e in errors), "%r not among %r" % (want, errors[:5]))

    def test_expected_too_small(self):
        def setup(ex):
            route = ex.router.route_requests

            def low(states, new, maxn):
                out, expected = route(states, new, maxn)
                return out, max(expected - 1, 0)
            ex.router.route_requests = low
        self.caught("default", setup, "exceeds expected_num_active_requests")

    def test_retiring_misreported(self):
        def setup(ex):
            gather = ex.router.gather_all_rank_states

            def forget(active, **kw):
                states = gather(active, **kw)
                for s in states:
                    s.num_retiring_requests = 0
                return states
            ex.router.gather_all_rank_states = forget
        self.caught("kv_cache_aware", setup, "num_retiring_requests=0, it left 1 retiring")

    def test_extra_collective(self):
        def setup(ex):
            route = ex.router.route_requests

            def chatty(states, new, maxn):
                ex.dist.tp_allgather(0)
                return route(states, new, maxn)
            ex.router.route_requests = chatty
        self.caught("conversation", setup, "the router made 2 allgathers, want 1")

    def test_divergence(self):
        def setup(ex):
            if ex.dist.tp_rank != 2:
                return
            route = ex.router.route_requests

            def local(states, new, maxn):
                if ex.iteration >= 3:
                    states = states[2:] + states[:2]
                    for r, s in enumerate(states):
                        s.rank = r
                return route(states, new, maxn)
            ex.router.route_requests = local
        self.caught("kv_cache_aware+index", setup, "DIVERGENCE")


if __name__ == "__main__":
    unittest.main()
