"""adprouter.trtllm driven the way TensorRT-LLM's executor drives its ADP
routers: fake_executor.FakeExecutor (its docstring has the per-iteration
steps and invariants) on 4 ranks as threads (trtllm_fakes.ThreadGroup, a
real in-process allgather).

ExecutorTest runs the default router, the KV-cache-aware router (plain,
with cold_start_warmup, with prefix_source "index") and the conversation
router (round robin and least_queued), each with iteration stats on and off,
with TensorRT-LLM's admission capacity, then each policy overcommitted:
and each overcommitted policy again with the router handing what it cannot
place back to the executor's waiting queue (executor=, the "+requeue"
twins): every invariant holds, every request is admitted by exactly one
rank, retiring requests, dummy padding and idle iterations occur, the probe
runs exactly on the iterations that popped something (and some popped
nothing), iteration stats change no decision, the overcommitted runs carry
requests over and their twins carry none but put them back. HandBackTest
drives the executor's other readers of the waiting queue with the hand-back:
cancellation (a canceled request that was handed back is never admitted,
where a carried one escapes its cancel), shutdown (the executor stops with
nothing lost) and the throwaway executor TensorRT-LLM builds for KV-cache
sizing (its router holds nothing afterwards). CheckTest shows the invariants are live: a router returning
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

NAMES = ["default", "default+capacity", "kv_cache_aware", "kv_cache_aware+warmup", "kv_cache_aware+index",
         "kv_cache_aware+preset=recommended", "conversation",
         "conversation+least_queued", "default+overcommit", "kv_cache_aware+overcommit",
         "conversation+overcommit", "default+overcommit+requeue", "kv_cache_aware+overcommit+requeue",
         "conversation+overcommit+requeue"]
POLICIES = ["default", "kv_cache_aware", "conversation"]


def clean_env():
    """No ADPROUTER_* option variables from the caller's environment."""
    return mock.patch.dict(os.environ, {k: v for k, v in os.environ.items()
                                        if not (k.startswith("ADPROUTER_") and k != "ADPROUTER_LIBRARY")},
                           clear=True)


def run(name, iter_stats, setup=None, iters=ITERS, **kw):
    fields, options, executor = X.CONFIG[name]

    def rank(dist):
        return X.run(dist, F.attention_dp_config(**fields), options, iters=iters, iter_stats=iter_stats,
                     setup=setup, **dict(executor, **kw))
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

    def test_pending_kv_where_the_ranks_report_kv(self):
        """Under capacity_aware and the recommended preset the ranks report
        the KV their requests not yet started will take; under the
        reference they report none."""
        for (name, stats), (_, st) in self.results.items():
            with self.subTest(name, iter_stats=stats):
                if name.endswith(("preset=recommended", "+capacity")):
                    self.assertGreater(st["pending_kv"], 0)
                else:
                    self.assertEqual(st["pending_kv"], 0)

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
                    self.assertEqual(st["requeued"], 0)
                elif name.endswith("+requeue"):
                    self.assertEqual(st["carried"], 0)
                    self.assertGreater(st["requeued"], 0)
                elif not name.endswith("preset=recommended"):
                    # TensorRT-LLM's admission capacity: under the reference's rules nothing
                    # is ever left over (the recommended preset's score="ttft" may leave a
                    # request for a full rank holding its prompt when every slot is taken,
                    # docs/ROUTING.md "Past the request slots"; test_invariants checks
                    # that every request is routed).
                    self.assertEqual((st["carried"], st["requeued"]), (0, 0))

    def test_requeue_twins_see_the_same_requests(self):
        for name in NAMES:
            if name.endswith("+requeue"):
                with self.subTest(name):
                    twin = name[:-len("+requeue")]
                    self.assertEqual(self.results[name, True][1]["requests"], self.results[twin, True][1]["requests"])
                    # Every left-over request was offered again, from the queue or the carry.
                    self.assertGreaterEqual(self.results[name, True][1]["popped"],
                                            self.results[name, True][1]["requests"]
                                            + self.results[name, True][1]["requeued"])


class HandBackTest(unittest.TestCase):
    """The router handing left-over requests back to the executor's waiting
    queue (executor=), seen by the executor's other readers of that queue."""

    def setUp(self):
        env = clean_env()
        env.start()
        self.addCleanup(env.stop)

    def cancel_run(self, name, pick):
        """name run with a cancel hook: pick(executor, handed_back) names
        the requests to cancel; every 7th iteration the newest placed
        request too (active or already gone). Returns (errors, stats, the
        handed-back ids canceled, the active ones canceled)."""
        named, newest = {}, {}

        def cancel(ex, handed):
            ids = list(pick(ex, handed))
            named.setdefault(ex.dist.tp_rank, []).extend(ids)
            if ex.iteration % 7 == 3 and ex.placed:
                newest.setdefault(ex.dist.tp_rank, []).append(max(ex.placed))
                ids.append(max(ex.placed))
            return ids
        errors, st = run(name, False, cancel=cancel)
        self.assertEqual(len({tuple(v) for v in named.values()}), 1, "the ranks canceled differently")
        return errors, st, named[0], newest[0]

    def test_canceled_hand_backs_are_never_admitted(self):
        for policy in POLICIES:
            with self.subTest(policy):
                errors, st, canceled, _ = self.cancel_run(policy + "+overcommit+requeue",
                                                         lambda ex, handed: handed[::2])
                # run() checks that no request canceled while waiting was
                # admitted and that every other request was admitted once.
                self.assertEqual(errors, [])
                self.assertGreater(len(canceled), 10)
                self.assertEqual(len(set(canceled)), len(canceled))
                self.assertEqual(st["canceled_waiting"], len(canceled))  # all found in the waiting queue
                self.assertEqual(st["canceled_missed"], 0)
                self.assertEqual(st["routed"], st["requests"] - len(canceled))
                self.assertGreater(st["canceled_active"], 0)
                self.assertEqual(st["carried"], 0)

    def test_carried_requests_escape_their_cancel(self):
        """Without the hand-back the same cancels miss: the requests sit in
        the router's carry-over, out of remove_by_ids' reach, and are
        admitted after all."""
        for policy in POLICIES:
            with self.subTest(policy):
                errors, st, canceled, _ = self.cancel_run(
                    policy + "+overcommit", lambda ex, handed: [x.id for x in ex.router.carried][::2])
                self.assertEqual(errors, [])
                self.assertGreater(len(canceled), 10)
                self.assertEqual(st["canceled_missed"], len(set(canceled)))
                self.assertEqual(st["canceled_waiting"], 0)
                self.assertEqual(st["routed"], st["requests"])

    def test_shutdown_loses_nothing(self):
        # The shutdown item follows the requests of iteration 22, in a
        # burst: the executor still hands requests back after it.
        for policy in POLICIES:
            with self.subTest(policy):
                errors, st = run(policy + "+overcommit+requeue", False, shutdown_at=22)
                self.assertEqual(errors, [])  # stopped with an empty queue and carry-over, all admitted
                self.assertTrue(st["stopped"])
                self.assertGreater(st["requests"], 80)
                self.assertEqual(st["routed"], st["requests"])
                self.assertGreater(st["requeued_after_shutdown"], 0)
                self.assertEqual(st["carried"], 0)

    def test_discarded_executor(self):
        """TensorRT-LLM builds a throwaway PyExecutor (KV-cache sizing)
        before the real one: its router must hold no request afterwards;
        what it could not place lies in its own waiting queue, discarded
        with it. 30 requests, 4 ranks of 4 slots, 2 overcommitted: the pop
        takes 24, 16 fit, 8 go back to the head of the queue (6 never
        popped behind them)."""
        import gc
        import weakref

        for policy in POLICIES:
            for requeue in (True, False):
                with self.subTest(policy, requeue=requeue):
                    fields = X.CONFIG[policy][0]

                    def rank(dist):
                        ex = X.FakeExecutor(dist, F.attention_dp_config(**fields), overcommit=2, requeue=requeue)
                        batch = [F.item(i, [i] * (20 + i)) for i in range(1, 31)]
                        ex.enqueue(batch)
                        ex.step()
                        router = ex.router
                        out = dict(errors=list(ex.errors), admitted=sorted(ex.admitted),
                                   queue=[x.id for x in ex.waiting_queue], handed=list(ex.handed_back),
                                   carried=[x.id for x in router.carried], stats=router.stats())
                        ref = weakref.ref(ex)
                        del ex
                        gc.collect()
                        out["executor_freed"] = ref() is None  # the router does not keep it alive
                        out["carried_after"] = [x.id for x in router.carried]
                        return out

                    out = F.ThreadGroup(4).run(rank)
                    for o in out:
                        self.assertEqual(o["errors"], [])
                        self.assertTrue(o["executor_freed"])
                    admitted = sorted(i for o in out for i in o["admitted"])
                    self.assertEqual(len(admitted), 16)
                    o = out[0]
                    if requeue:
                        self.assertEqual(len(o["handed"]), 8)
                        self.assertEqual(o["queue"][:8], o["handed"])
                        self.assertEqual(o["queue"][8:], list(range(25, 31)))
                        self.assertEqual(sorted(admitted + o["queue"]), list(range(1, 31)))
                        self.assertEqual((o["carried"], o["carried_after"]), ([], []))
                        self.assertEqual((o["stats"]["requeued"], o["stats"]["carried"]), (8, 0))
                    else:  # the router itself holds them: gone with the throwaway, or worse
                        self.assertEqual(len(o["carried"]), 8)
                        self.assertEqual(o["queue"], list(range(25, 31)))
                        self.assertEqual((o["stats"]["requeued"], o["stats"]["carried"]), (0, 8))


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

    def test_hand_back_out_of_order(self):
        def setup(ex):
            queue = ex.waiting_queue
            prepend = queue.prepend_requests
            queue.prepend_requests = lambda items: prepend(list(items)[::-1])
        self.caught("default+overcommit+requeue", setup, "in the order offered")

    def test_hand_back_lost(self):
        def setup(ex):
            ex.waiting_queue.prepend_requests = lambda items: None
        self.caught("kv_cache_aware+overcommit+requeue", setup, "requests never admitted")

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
