"""Tests of adprouter.trtllm, the drop-in for TensorRT-LLM's ADP routers, with
the duck-typed fakes of trtllm_fakes.py: the factory's choice, rank state
units, the allgathers' wire formats, decisions against the pure-Python
oracle, the carry-over of unplaceable requests, and install(); then what
newer TensorRT-LLM releases add (ADPRouter.create's has_seq_slot_headroom,
the sub-agent affinity key, new_conv_placement "least_tokens", route
traces) and adprouter's own additions (option variables, engine-derived
defaults, fingerprints and check_ranks, the hand-back of left-over requests
to the executor's waiting queue)."""

import os
import random
import sys
import types
import unittest
import warnings
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trtllm_fakes as F  # noqa: E402
from fake_executor import WaitingQueue  # noqa: E402

import adprouter  # noqa: E402
from adprouter import trtllm as T  # noqa: E402


def ids(assignment):
    return {r: [it.id for it in items] for r, items in assignment.items()}


def clean_env():
    """No ADPROUTER_* option variables from the caller's environment."""
    return mock.patch.dict(os.environ, {k: v for k, v in os.environ.items()
                                        if not (k.startswith("ADPROUTER_") and k != "ADPROUTER_LIBRARY")},
                           clear=True)


class CreateTest(unittest.TestCase):
    def setUp(self):
        env = clean_env()
        env.start()
        self.addCleanup(env.stop)

    def test_choice(self):
        reuse, no_reuse = F.KVCacheManager(), F.KVCacheManager(enable_block_reuse=False)
        cfg = F.attention_dp_config
        for name, kv, config, want in [
            ("no config", reuse, None, T.DefaultADPRouter),
            ("nothing asked", reuse, cfg(), T.DefaultADPRouter),
            ("kv-aware", reuse, cfg(enable_kv_cache_aware_routing=True), T.KVCacheAwareADPRouter),
            ("kv-aware, reuse off", no_reuse, cfg(enable_kv_cache_aware_routing=True), T.DefaultADPRouter),
            ("kv-aware, no manager", None, cfg(enable_kv_cache_aware_routing=True), T.DefaultADPRouter),
            ("conversation first", reuse, cfg(enable_kv_cache_aware_routing=True,
                                              kv_cache_routing_conversation_affinity=True),
             T.ConversationAwareADPRouter),
            ("conversation without reuse", None, cfg(kv_cache_routing_conversation_affinity=True),
             T.ConversationAwareADPRouter),
        ]:
            with self.subTest(name):
                r = T.ADPRouter.create(F.Dist(0, 4), kv, config)
                self.assertIs(type(r), want)
                self.assertEqual(r.router.dp_size, 4)
                self.assertEqual(r.needs_prefix_matches, want is T.KVCacheAwareADPRouter)

    def test_config_fields_reach_the_router(self):
        kv = F.KVCacheManager()
        tr = F.AsyncTransferManager()
        r = T.ADPRouter.create(F.Dist(1, 2), kv, F.attention_dp_config(
            enable_kv_cache_aware_routing=True, kv_cache_routing_load_balance_weight=0.5,
            kv_cache_routing_match_rate_threshold=0.25, kv_cache_routing_fair_share_multiplier=3.0,
            kv_cache_routing_account_for_in_transfer=True), tr)
        self.assertEqual((r.load_balance_weight, r.match_rate_threshold, r.fair_share_multiplier),
                         (0.5, 0.25, 3.0))
        self.assertIs(r.kv_cache_manager, kv)
        self.assertIs(r.async_transfer_manager, tr)
        self.assertTrue(r.account_for_in_transfer)
        c = T.ADPRouter.create(F.Dist(0, 2), None, F.attention_dp_config(
            kv_cache_routing_conversation_affinity=True, kv_cache_routing_max_sessions=0,
            kv_cache_routing_fair_share_multiplier=0.5))
        self.assertEqual((c._max_sessions, c._fair_share_multiplier), (1, 1.0))  # clamped like TensorRT-LLM

    def test_warmup_from_config(self):
        g = F.ThreadGroup(1)
        r = T.ADPRouter.create(g.dist(0), F.KVCacheManager(), F.attention_dp_config(
            enable_kv_cache_aware_routing=True, kv_cache_routing_cold_start_warmup=True))
        self.assertEqual(r.router.stats()["pending_warmup"], 1)

    def test_options_and_environment(self):
        kv_cfg = F.attention_dp_config(enable_kv_cache_aware_routing=True)
        kv = F.KVCacheManager()
        self.assertFalse(T.ADPRouter.create(F.Dist(), kv, kv_cfg, options={"preset": "index"})
                         .needs_prefix_matches)
        with mock.patch.dict(os.environ, {"ADPROUTER_PREFIX_SOURCE": "index"}):
            r = T.ADPRouter.create(F.Dist(), kv, kv_cfg)
            self.assertFalse(r.needs_prefix_matches)
            self.assertEqual(r.options, {"prefix_source": "index"})
            # The mapping wins over the environment.
            r = T.ADPRouter.create(F.Dist(), kv, kv_cfg, options={"prefix_source": "probe+index"})
            self.assertTrue(r.needs_prefix_matches)
            # KV-only options are ignored by the router create falls back to.
            self.assertIs(type(T.ADPRouter.create(F.Dist(), None, kv_cfg)), T.DefaultADPRouter)
        with mock.patch.dict(os.environ, {"ADPROUTER_PRESET": "full"}):
            r = T.ADPRouter.create(F.Dist(), kv, kv_cfg)
            self.assertEqual(r.options, {"prefix_source": "index", "warmup": "demand",
                                         "capacity_aware": "true"})
        # The preset table is the library's; explicit options win over it.
        r = T.ADPRouter.create(F.Dist(), kv, kv_cfg, options={"preset": "recommended"})
        self.assertEqual(r.options, {"prefix_source": "probe+index", "score": "ttft", "warmup": "quiet"})
        self.assertTrue(r.needs_prefix_matches)
        r = T.ADPRouter.create(F.Dist(), kv, kv_cfg,
                               options={"preset": "recommended", "engine_reuse": "on_schedule"})
        self.assertEqual(r.options["engine_reuse"], "on_schedule")
        # As in the library: kv_cache_routing_cold_start_warmup=True replaces
        # the preset's warmup (the reference's once-warmup, same digest as
        # the library's own reading of the two), False keeps it.
        warm_cfg = F.attention_dp_config(enable_kv_cache_aware_routing=True,
                                         kv_cache_routing_cold_start_warmup=True)
        r = T.ADPRouter.create(F.Dist(), kv, warm_cfg, options={"preset": "recommended"})
        self.assertEqual(r.options["warmup"], "once")
        with adprouter.Router(dp_size=r.router.dp_size, preset="recommended", cold_start_warmup=True) as lib:
            self.assertEqual(r.router.state_digest(), lib.state_digest())
        r = T.ADPRouter.create(F.Dist(), kv, kv_cfg, options={"preset": "recommended"})
        with adprouter.Router(dp_size=r.router.dp_size, preset="recommended", cold_start_warmup=False) as lib:
            self.assertEqual(r.router.state_digest(), lib.state_digest())
        self.assertEqual(T.preset_options("recommended", "default"), {})
        self.assertEqual(T.preset_options("full", "default"), {"capacity_aware": "true"})

    def test_bad_options(self):
        for opts, want in [({"prefix_sauce": "index"}, "prefix_sauce"),
                           ({"preset": "fastest"}, "fastest"),
                           ({"prefix_source": "radix"}, "radix")]:
            with self.subTest(opts):
                with self.assertRaisesRegex(adprouter.ConfigError, want):
                    T.ADPRouter.create(F.Dist(), F.KVCacheManager(),
                                       F.attention_dp_config(enable_kv_cache_aware_routing=True),
                                       options=opts)
        with self.assertRaisesRegex(adprouter.ConfigError, "kv_cache_manager"):
            T.DefaultADPRouter(F.Dist(), options={"capacity_aware": True})


class RankStateTest(unittest.TestCase):
    def active(self):
        return [F.LlmRequest([1] * 100, cached_tokens=30, total_input_len_cp=40),
                F.LlmRequest([1] * 20, cached_tokens=50, total_input_len_cp=10)]

    def test_units(self):
        kv = F.KVCacheManager()
        moving = F.AsyncTransferManager({9: F.LlmRequest([1] * 7)})
        for name, make, helix, want in [
            ("default: prompt lengths", lambda d: T.DefaultADPRouter(d), False, (2, 120)),
            ("default, helix", lambda d: T.DefaultADPRouter(d), True, (2, 50)),
            ("conversation", lambda d: T.ConversationAwareADPRouter(d), False, (2, 120)),
            ("kv: uncached, floored at 0", lambda d: T.KVCacheAwareADPRouter(d, kv), False, (2, 70)),
            ("kv, helix", lambda d: T.KVCacheAwareADPRouter(d, kv), True, (2, 10)),
            ("kv, transfers not counted", lambda d: T.KVCacheAwareADPRouter(
                d, kv, async_transfer_manager=moving), False, (2, 70)),
            ("kv, transfers counted", lambda d: T.KVCacheAwareADPRouter(
                d, kv, async_transfer_manager=moving, account_for_in_transfer=True), False, (3, 77)),
        ]:
            with self.subTest(name):
                s = make(F.Dist(3, 4, has_cp_helix=helix)).create_rank_state(self.active(), [])
                self.assertEqual((s.rank, s.num_active_requests, s.num_active_tokens), (3,) + want)
                self.assertEqual((s.kv_capacity_tokens, s.free_kv_tokens), (0, 0))

    def test_capacity_from_the_kv_cache_manager(self):
        kv = F.KVCacheManager(tokens_per_block=32, max_num_blocks=100)
        kv.add(list(range(320)))
        r = T.DefaultADPRouter(F.Dist(), options={"capacity_aware": True}, kv_cache_manager=kv)
        s = r.create_rank_state([], [])
        self.assertEqual((s.kv_capacity_tokens, s.free_kv_tokens), (3200, 2880))

    def test_pending_kv_from_the_active_requests(self):
        """Where the ranks report their KV pool, each also reports the KV its
        active requests will still take, as TensorRT-LLM allocates it: a
        request not started holds nothing and will take its prompt and
        output; a started one holds its prompt and its tokens so far."""
        gen = F.LlmRequestState.GENERATION_IN_PROGRESS
        rows = [
            ("not started: prompt and output", [F.LlmRequest([1] * 100, max_tokens=50)], 150),
            ("not started, no output given", [F.LlmRequest([1] * 40)], 40),
            ("a later context chunk: the output", [F.LlmRequest([1] * 100, max_tokens=50, context_position=64)], 50),
            ("generating: the rest of the output", [F.LlmRequest([1] * 100, max_tokens=50, state=gen, generated=20)],
             30),
            ("past its output: nothing", [F.LlmRequest([1] * 100, max_tokens=50, state=gen, generated=60)], 0),
            ("none active", [], 0),
        ]
        rows.append(("all of them", [r for _, reqs, _ in rows for r in reqs], 270))
        kv = F.KVCacheManager(tokens_per_block=32, max_num_blocks=100)
        for name, active, want in rows:
            for make in (lambda d: T.DefaultADPRouter(d, options={"capacity_aware": True}, kv_cache_manager=kv),
                         lambda d: T.KVCacheAwareADPRouter(d, kv, options={"preset": "recommended"})):
                with self.subTest(name):
                    s = make(F.Dist()).create_rank_state(active, [])
                    self.assertEqual((s.kv_capacity_tokens, s.pending_kv_tokens, s.evictable_kv_tokens),
                                     (3200, want, None))
        active = rows[-1][1]
        for name, router in [
            ("no KV report", T.DefaultADPRouter(F.Dist(), kv_cache_manager=kv)),
            ("helix: a rank holds part of a request", T.DefaultADPRouter(
                F.Dist(has_cp_helix=True), options={"capacity_aware": True}, kv_cache_manager=kv)),
        ]:
            with self.subTest(name):
                self.assertIsNone(router.create_rank_state(active, []).pending_kv_tokens)

    def test_pending_kv_unreported_for_requests_without_the_fields(self):
        """An active request without the fields it is read from leaves the
        pending KV unreported (None), with one warning."""
        r = T.DefaultADPRouter(F.Dist(), options={"capacity_aware": True}, kv_cache_manager=F.KVCacheManager())
        bare = F.LlmRequest([1] * 10)
        del bare.py_max_new_tokens
        with self.assertLogs("adprouter.trtllm", "WARNING") as cm:
            for _ in range(3):
                s = r.create_rank_state([F.LlmRequest([1] * 10), bare], [])
                self.assertIsNone(s.pending_kv_tokens)
        self.assertEqual(len(cm.records), 1)
        self.assertIn("py_max_new_tokens", cm.output[0])
        self.assertEqual(r.create_rank_state([F.LlmRequest([1] * 10)], []).pending_kv_tokens, 10)

    def test_pending_kv_and_outputs_steer_capacity(self):
        """The pending KV and each new request's max_tokens reach the
        decision through the allgather, on the C path and the Python path
        alike. The default router prefers rank 0 (fewer tokens); rank 0's
        KV is taken by a request not started yet (pending), or the new
        request's output does not fit its free KV: capacity_aware sends it
        to rank 1."""
        from adprouter import _accel
        gen = F.LlmRequestState.GENERATION_IN_PROGRESS
        decoding = [F.LlmRequest([1] * 32, state=gen, generated=1)]
        short = [F.LlmRequest([1] * 10, state=gen, generated=1)]

        def run(dist, rank0, used0, max_tokens):
            kv = F.KVCacheManager(tokens_per_block=32, max_num_blocks=100)
            kv.used_blocks = used0 if dist.tp_rank == 0 else 60
            r = T.DefaultADPRouter(dist, options={"capacity_aware": True}, kv_cache_manager=kv)
            states = r.gather_all_rank_states(rank0 if dist.tp_rank == 0 else decoding)
            out, _ = r.route_requests(states, [F.item(1, [5] * 100, max_tokens=max_tokens)], 8)
            return [s.pending_kv_tokens for s in states], ids(out)

        for mod in (_accel.speedups, None):
            self.addCleanup(_accel.use, _accel.speedups)
            _accel.use(mod)
            for name, rank0, used0, max_tokens, pending, placed in [
                ("room on rank 0", [F.LlmRequest([1] * 10, max_tokens=1000)], 60, None, [1010, 0], 0),
                ("rank 0's room pending", [F.LlmRequest([1] * 10, max_tokens=1200)], 60, None, [1210, 0], 1),
                ("the output fits rank 0", short, 90, 200, [0, 0], 0),
                ("the output does not fit rank 0", short, 90, 300, [0, 0], 1),
            ]:
                with self.subTest(name, c=mod is not None):
                    got = F.ThreadGroup(2).run(lambda d: run(d, rank0, used0, max_tokens))
                    self.assertEqual(got, [(pending, {placed: [1], 1 - placed: []})] * 2)

    def test_gather_wire_format(self):
        """TensorRT-LLM's wire format: [rank, requests, tokens, retiring] and
        the nine payload fields; retiring requests counted apart; the
        payload piggybacked as the executor passes it."""
        sent = []

        def run(dist):
            r = T.DefaultADPRouter(dist)
            orig = dist._allgather
            dist._allgather = lambda obj: (sent.append(obj), orig(obj))[1]
            active = [F.LlmRequest([0] * (10 * (dist.tp_rank + 1)))]
            active += [F.LlmRequest([0] * 7, state=F.LlmRequestState.GENERATION_TO_COMPLETE)] * dist.tp_rank
            payload = T.RankIterStatsPayload(has_iter_stats=1, iter_stats_iter=5, num_gen_requests=dist.tp_rank)
            return r.gather_all_rank_states(active, iter_stats_payload=payload if dist.tp_rank != 1 else None)

        out = F.ThreadGroup(3).run(run)
        for states in out:
            self.assertEqual([(s.rank, s.num_active_requests, s.num_active_tokens, s.num_retiring_requests)
                              for s in states], [(0, 1, 10, 0), (1, 1, 20, 1), (2, 1, 30, 2)])
            self.assertEqual([(s.iter_stats.has_iter_stats, s.iter_stats.num_gen_requests) for s in states],
                             [(1, 0), (0, 0), (1, 2)])
        self.assertIn([1, 1, 20, 1, 0, -1, 0, 0, 0, 0, 0, 0, 0], sent)
        self.assertIn([2, 1, 30, 2, 1, 5, 0, 0, 0, 2, 0, 0, 0], sent)

    def test_wire_format_round_trip(self):
        for name, state, wire in [
            ("defaults", T.RankState(3), [3, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0]),
            ("retiring", T.RankState(1, 10, 200, 3), [1, 10, 200, 3, 0, -1, 0, 0, 0, 0, 0, 0, 0]),
            ("payload", T.RankState(0, iter_stats=T.RankIterStatsPayload(1, 7, 2, 128, 16, 3, 1024, 1, 256)),
             [0, 0, 0, 0, 1, 7, 2, 128, 16, 3, 1024, 1, 256]),
            ("KV fields follow", T.RankState(2, 1, 5, kv_capacity_tokens=3200, free_kv_tokens=2880),
             [2, 1, 5, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0, 3200, 2880, 0]),
            ("under pressure", T.RankState(2, kv_capacity_tokens=3200, memory_pressure=True),
             [2, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0, 3200, 0, 1]),
            ("pending and evictable follow", T.RankState(2, 1, 5, kv_capacity_tokens=3200, free_kv_tokens=2880,
                                                         pending_kv_tokens=270, evictable_kv_tokens=64),
             [2, 1, 5, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0, 3200, 2880, 6, 270, 64]),
            ("pending 0, no evictable", T.RankState(2, kv_capacity_tokens=3200, memory_pressure=True,
                                                    pending_kv_tokens=0),
             [2, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0, 3200, 0, 3, 0, 0]),
        ]:
            with self.subTest(name):
                self.assertEqual(state.serialize(), wire)
                self.assertEqual(T.RankState.deserialize(wire), state)
        short = T.RankState.deserialize(data=[2, 3, 50])
        self.assertEqual((short.rank, short.num_active_requests, short.num_active_tokens,
                          short.num_retiring_requests, short.iter_stats), (2, 3, 50, 0, T.RankIterStatsPayload()))
        for bad in ([], list(range(14)), list(range(17)), list(range(19))):
            with self.subTest(len(bad)), self.assertRaisesRegex(ValueError, "%d values" % len(bad)):
                T.RankState.deserialize(bad)
        head = [2, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0, 3200, 0]
        for name, tail, msg in [
            ("a pending flag without the values", [2], "flags are 2, want a combination of 1$"),
            ("an unknown flag", [8, 0, 0], "flags are 8, want a combination of 1 | 2 | 4"),
            ("pending without its flag", [4, 5, 0], "pending KV is 5 without its flag"),
            ("evictable without its flag", [2, 5, 7], "evictable KV is 7 without its flag"),
        ]:
            with self.subTest(name), self.assertRaisesRegex(ValueError, msg):
                T.RankState.deserialize(head + tail)

    def test_copy_iter_stats_from_copies(self):
        s = T.RankState(0)
        payload = T.RankIterStatsPayload(has_iter_stats=1, iter_stats_iter=7)
        s.copy_iter_stats_from(payload)
        self.assertEqual(s.iter_stats, payload)
        self.assertIsNot(s.iter_stats, payload)
        s.copy_iter_stats_from(None)
        self.assertEqual(s.iter_stats.iter_stats_iter, 7)


class PrefixMatchTest(unittest.TestCase):
    def test_probe_and_allgather(self):
        prompt = list(range(100))
        batch = [F.item(7, prompt, lora=3, cache_salt="tenant"), F.RequestQueueItem(8, None),
                 F.item(9, [5])]

        def run(dist):
            kv = F.KVCacheManager()
            kv.add(prompt[:64 if dist.tp_rank else 32], lora=3, salt="tenant")
            r = T.KVCacheAwareADPRouter(dist, kv)
            r.gather_prefix_matches(batch)
            return kv.probes, r._all_ranks_prefix_matches, dist.allgathers

        (probes, matches, n), _ = F.ThreadGroup(2).run(run)
        self.assertEqual(probes, [(99, 3, "tenant"), (0, None, None)])  # prompt minus its last token
        self.assertEqual(matches, [{7: 32, 8: 0, 9: 0}, {7: 64, 8: 0, 9: 0}])
        self.assertEqual(n, 1)

    def test_recommended_reports_the_kv_pool(self):
        """The ttft score of the recommended preset reads each rank's KV
        pool, so its ranks report it as capacity_aware's do: rank 0 holds
        the whole prompt cached but its pool is full, so the preset sends
        the request to rank 1, where it fits; the reference sends it to the
        cache. A KV cache manager without get_kv_cache_stats, or whose
        stats are None (TensorRT-LLM has such managers), reports nothing,
        and the preset routes as if every pool had room. (Each
        rank has two requests decoding, so that no warmup rule applies.)"""
        prompt = list(range(320))
        cfg = F.attention_dp_config(enable_kv_cache_aware_routing=True)
        decoding = [F.LlmRequest([1] * 32, cached_tokens=32, state=F.LlmRequestState.GENERATION_IN_PROGRESS)
                    for _ in range(2)]

        def run(dist, options, stats):
            kv = F.KVCacheManager(tokens_per_block=32, max_num_blocks=10)
            if dist.tp_rank == 0:
                kv.add(prompt)  # 10 blocks: the pool is full
            if stats != "reported":
                kv.get_kv_cache_stats = None if stats == "no method" else (lambda: None)
            r = T.ADPRouter.create(dist, kv, cfg, options=options)
            states = r.gather_all_rank_states(decoding)
            r.gather_prefix_matches([F.item(1, prompt)])
            out, _ = r.route_requests(states, [F.item(1, prompt)], 8)
            return [(s.kv_capacity_tokens, s.free_kv_tokens) for s in states], ids(out)

        for name, options, stats, pools, placed in [
            ("recommended", {"preset": "recommended"}, "reported", [(320, 0), (320, 320)], {0: [], 1: [1]}),
            ("reference", {}, "reported", [(0, 0), (0, 0)], {0: [1], 1: []}),
            ("recommended, no stats", {"preset": "recommended"}, "no method", [(0, 0), (0, 0)], {0: [1], 1: []}),
            ("recommended, stats None", {"preset": "recommended"}, "None", [(0, 0), (0, 0)], {0: [1], 1: []}),
        ]:
            with self.subTest(name):
                got = F.ThreadGroup(2).run(lambda d: run(d, options, stats))
                self.assertEqual(got, [(pools, placed)] * 2)

    def test_index_needs_no_probe(self):
        def run(dist):
            kv = F.KVCacheManager()
            r = T.ADPRouter.create(dist, kv, F.attention_dp_config(enable_kv_cache_aware_routing=True),
                                   options={"prefix_source": "index"})
            placed = []
            for it in range(3):
                states = r.gather_all_rank_states([])
                if r.needs_prefix_matches:
                    r.gather_prefix_matches([])
                out, _ = r.route_requests(states, [F.item(10 * it + k, list(range(300)))
                                                   for k in range(1 if it == 0 else 2)], 8)
                placed.append(ids(out))
            return placed, kv.probes, dist.allgathers

        results = F.ThreadGroup(2).run(run)
        self.assertEqual(results[0], results[1])
        placed, probes, allgathers = results[0]
        self.assertEqual((probes, allgathers), ([], 3))  # one allgather per iteration
        homes = {r for p in placed for r, v in p.items() if v}
        self.assertEqual(len(homes), 1, placed)  # the index keeps the shared prompt at home

    def test_ids_outside_the_batch_are_ignored(self):
        r = T.KVCacheAwareADPRouter(F.Dist(0, 2), F.KVCacheManager(), match_rate_threshold=0.0)
        states = [T.RankState(0), T.RankState(1)]
        r._all_ranks_prefix_matches = [{1: 0, 99: 5000}, {1: 60, 98: 1}]
        out, _ = r.route_requests(states, [F.item(1, list(range(100)))], 4)
        self.assertEqual(ids(out), {0: [], 1: [1]})


def random_batch(rng, next_id, dp, n, prompts, conversations):
    """n RequestQueueItems: shared and unique prompts of varied lengths, a
    few without a request, targets (some out of reach: full), relax None,
    True and False with and without a target, conversation ids of several
    types."""
    batch = []
    for _ in range(n):
        rid = next_id()
        if rng.random() < 0.05:
            batch.append(F.RequestQueueItem(rid, None))
            continue
        fam = rng.choice(prompts)
        toks = fam[:rng.randrange(1, len(fam) + 1)] if rng.random() < 0.5 else fam + [rid]
        target = rng.randrange(dp) if rng.random() < 0.2 else None
        relax = rng.choice([None, None, True, False])
        conv = rng.choice(conversations) if rng.random() < 0.7 else None
        batch.append(F.item(rid, toks, target=target, relax=relax, conversation=conv))
    return batch


def random_states(rng, dp, maxn):
    """Every rank's state: often all idle (the KV-aware router's ties), else
    random loads up to maxn."""
    if rng.random() < 0.3:
        return [T.RankState(r) for r in range(dp)]
    return [T.RankState(r, rng.randrange(0, maxn + 1), rng.randrange(0, 3000)) for r in range(dp)]


class OracleTest(unittest.TestCase):
    """Our routers against the oracle of the pinned commit's rules on random
    traffic: the same items, on the same ranks, in the same order, the same
    expected and the same carry-over, call after call. The oracle is
    trtllm_fakes.ReferenceADPRouter; with ADPR_TRTLLM_SRC naming a folder
    that holds TensorRT-LLM's adp_router.py it is TensorRT-LLM's own router
    (trtllm_fakes.TrtllmADPRouter), compared wherever it neither raises nor
    loses nor overfills (both routers start afresh after such a call)."""

    def check(self, policy, make, dp=4, calls=60, seed=0, **config):
        rng = random.Random(seed)
        counter = iter(range(10 ** 9))
        prompts = [[f * 1000 + i for i in range(rng.randrange(40, 130))] for f in range(4)]
        convs = ["a", "b", "c", 7, "7", "", "d"] if policy == "conversation" else [None]
        ours = make(F.Dist(0, dp))
        oracle = F.oracle(policy, dp, **config)
        carried = compared = 0
        for call in range(calls):
            maxn = rng.choice([2, 3, 8])
            states = random_states(rng, dp, maxn)
            batch = random_batch(rng, lambda: next(counter), dp, rng.randrange(0, 14), prompts, convs)
            if policy == "kv_cache_aware":
                everyone = oracle.carry + batch
                flat = []
                for r in range(dp):
                    row = []
                    for it in everyone:
                        row += [it.id, rng.choice([0, 0, 32, 64]) if it.request else 0]
                    if rng.random() < 0.3:
                        row += [10 ** 9 + r, 5]  # an id that is not in the batch
                    flat.append(row)
                oracle.gather(flat)
                ours._gathered = None
                ours._all_ranks_prefix_matches = [dict(zip(f[0::2], f[1::2])) for f in flat]
            want, want_expected = oracle.route(states, batch, maxn)
            if oracle.lossy == "dropped":
                # TensorRT-LLM lost what it could not place; we carry exactly that.
                got, got_expected = ours.route_requests(states, batch, maxn)
                self.assertEqual((ids(got), got_expected), (ids(want), want_expected), "call %d" % call)
                placed = {i for v in ids(want).values() for i in v}
                self.assertEqual(sorted(it.id for it in ours.carried),
                                 sorted(it.id for it in batch if it.id not in placed), "call %d" % call)
            if oracle.lossy:  # TensorRT-LLM raised, dropped or overfilled: start both afresh
                ours, oracle = make(F.Dist(0, dp)), F.oracle(policy, dp, **config)
                continue
            got, got_expected = ours.route_requests(states, batch, maxn)
            self.assertEqual(ids(got), ids(want), "call %d" % call)
            self.assertEqual(got_expected, want_expected, "call %d" % call)
            self.assertEqual([it.id for it in ours.carried], [it.id for it in oracle.carry])
            for r in got:
                for a, b in zip(got[r], want[r]):
                    self.assertIs(a, b)  # the engine's own objects come back
            carried += len(ours.carried)
            compared += 1
        self.assertGreater(compared, 0, "no call compared")
        if not F.TRTLLM_SRC:
            self.assertEqual(compared, calls)
            self.assertGreater(carried, 0, "the carry-over went untested")

    def test_default(self):
        for seed in range(4):
            self.check("default", lambda d: T.DefaultADPRouter(d), seed=seed)

    def test_kv_cache_aware(self):
        for seed in range(4):
            self.check("kv_cache_aware", lambda d: T.KVCacheAwareADPRouter(
                d, F.KVCacheManager(), match_rate_threshold=0.05, fair_share_multiplier=1.5),
                seed=seed, match_rate_threshold=0.05, fair_share_multiplier=1.5)

    def test_kv_cache_aware_defaults(self):
        for seed in range(4):
            self.check("kv_cache_aware", lambda d: T.KVCacheAwareADPRouter(d, F.KVCacheManager()), seed=seed)

    def test_kv_cache_aware_warmup(self):
        for seed in range(4):
            self.check("kv_cache_aware", lambda d: T.KVCacheAwareADPRouter(
                d, F.KVCacheManager(), cold_start_warmup=True), seed=seed, cold_start_warmup=True)

    def test_conversation(self):
        for placement in ("round_robin", "least_queued"):
            for seed in range(3):
                self.check("conversation", lambda d: T.ConversationAwareADPRouter(
                    d, max_sessions=3, new_conv_placement=placement), seed=seed,
                    max_sessions=3, new_conv_placement=placement)

    def test_rank_states(self):
        """gather_all_rank_states against the oracle's rank state on random
        active lists: retiring requests, cached tokens, helix lengths,
        requests in KV transfer."""
        rng = random.Random(3)
        retiring = F.LlmRequestState.GENERATION_TO_COMPLETE
        for case in range(200):
            policy = rng.choice(["default", "kv_cache_aware", "conversation"])
            helix = rng.random() < 0.3
            active = [F.LlmRequest([1] * rng.randrange(1, 300), cached_tokens=rng.randrange(0, 400),
                                   total_input_len_cp=rng.randrange(1, 200),
                                   state=rng.choice([retiring, F.LlmRequestState.GENERATION_IN_PROGRESS,
                                                     F.LlmRequestState.DISAGG_GENERATION_TRANS_IN_PROGRESS]))
                      for _ in range(rng.randrange(0, 8))]
            moving = {i: F.LlmRequest([2] * rng.randrange(1, 50)) for i in range(rng.randrange(0, 3))}
            dist = F.Dist(rng.randrange(4), 4, allgather=lambda obj: [obj], has_cp_helix=helix)
            if policy == "kv_cache_aware":
                r = T.KVCacheAwareADPRouter(dist, F.KVCacheManager(), account_for_in_transfer=bool(moving),
                                            async_transfer_manager=F.AsyncTransferManager(moving))
            else:
                r = T.DefaultADPRouter(dist) if policy == "default" else T.ConversationAwareADPRouter(dist)
            (got,) = r.gather_all_rank_states(active)
            want = F.reference_rank_state(policy, dist.tp_rank, active, helix, moving.values())
            self.assertEqual((got.num_active_requests, got.num_active_tokens, got.num_retiring_requests), want,
                             "case %d (%s)" % (case, policy))
            self.assertEqual(got.rank, dist.tp_rank)

    def test_gathered_lists_equal_dicts(self):
        """The fast path (slices of the gathered lists) decides as the dict path."""
        rng = random.Random(5)
        batch = random_batch(rng, iter(range(100)).__next__, 4, 40, [list(range(200))], [None])
        flat = [sum(([it.id, rng.choice([0, 64, 128])] for it in batch), []) for _ in range(4)]
        fast = T.KVCacheAwareADPRouter(F.Dist(0, 4, allgather=lambda _: flat), F.KVCacheManager(),
                                       match_rate_threshold=0.0)
        fast.gather_prefix_matches(batch)
        slow = T.KVCacheAwareADPRouter(F.Dist(0, 4), F.KVCacheManager(), match_rate_threshold=0.0)
        slow._all_ranks_prefix_matches = [dict(zip(f[0::2], f[1::2])) for f in flat]
        states = [T.RankState(r, 0, 100 * r) for r in range(4)]
        self.assertEqual(ids(fast.route_requests(states, batch, 64)[0]),
                         ids(slow.route_requests(states, batch, 64)[0]))


class MatchTableTest(unittest.TestCase):
    def test_binding_takes_a_request_major_array(self):
        from array import array
        reqs = [adprouter.Request(id=i, tokens=list(range(100))) for i in range(3)]
        states = [adprouter.RankState(r) for r in range(2)]
        rows = [[0, 96, 0], [64, 0, 32]]
        flat = array("i", [v for col in zip(*rows) for v in col])
        with adprouter.Router(policy="kv_cache_aware", dp_size=2, match_rate_threshold=0.0) as r:
            want = r.route(states, reqs, 8, rows).assignment
            self.assertEqual(r.route(states, reqs, 8, flat).assignment, want)
            with self.assertRaisesRegex(adprouter.InvalidArgumentError, "requests x ranks"):
                r.route(states, reqs, 8, flat[:-1])


class SemanticsTest(unittest.TestCase):
    def test_relax_sort_keys(self):
        """At the pinned commit the default and KV-aware routers sort first
        only a request with a target and attention_dp_relax=False; the
        conversation router sorts by attention_dp_relax alone (None relaxed
        everywhere)."""
        def batch():
            return [F.item(0, [0] * 10), F.item(1, [0] * 10, relax=False), F.item(2, [0] * 10),
                    F.item(3, [0] * 10)]
        idle = [T.RankState(0), T.RankState(1)]
        for name, r, want in [
            ("default: untargeted strict keeps its place", T.DefaultADPRouter(F.Dist(0, 2)),
             {0: [0, 2], 1: [1, 3]}),
            ("conversation: relax alone", T.ConversationAwareADPRouter(F.Dist(0, 2)),
             {0: [1, 2], 1: [0, 3]}),
        ]:
            with self.subTest(name):
                self.assertEqual(ids(r.route_requests(idle, batch(), 8)[0]), want)
        targeted = [F.item(0, [0] * 10, target=1), F.item(1, [0] * 10, target=1, relax=False)]
        out, _ = T.DefaultADPRouter(F.Dist(0, 2)).route_requests(idle, targeted, 1)
        self.assertEqual(ids(out), {0: [0], 1: [1]})  # the strict target first: 0 finds rank 1 full

    def test_carry_over_never_loses_a_request(self):
        for name, make in [("default", lambda d: T.DefaultADPRouter(d)),
                           ("kv", lambda d: T.KVCacheAwareADPRouter(d, F.KVCacheManager())),
                           ("conversation", lambda d: T.ConversationAwareADPRouter(d))]:
            with self.subTest(name):
                def run(dist):
                    r = make(dist)
                    full = [T.RankState(k, 1, 0) for k in range(2)]
                    first, _ = r.route_requests(full, [F.item(i, [i] * 8) for i in range(5)], 2)
                    after_first = [it.id for it in r.carried]
                    empty = [T.RankState(k, 0, 0) for k in range(2)]
                    second, _ = r.route_requests(empty, [F.item(9, [9] * 8)], 8)
                    return ids(first), after_first, ids(second), r.carried

                a, b = F.ThreadGroup(2).run(run)
                self.assertEqual(a, b)  # every rank carries the same requests
                first, carried, second, left = a
                placed = [i for v in first.values() for i in v]
                self.assertEqual(len(placed), 2)
                self.assertEqual(sorted(placed + carried), [0, 1, 2, 3, 4])
                again = [i for v in second.values() for i in v]
                self.assertEqual(sorted(again), sorted(carried + [9]))
                self.assertEqual(left, ())

    def test_carried_requests_are_probed_and_drained(self):
        kv = F.KVCacheManager()
        r = T.KVCacheAwareADPRouter(F.Dist(0, 1), kv)
        r.route_requests([T.RankState(0, 1, 0)], [F.item(1, [1] * 40), F.item(2, [2] * 40)], 1)
        self.assertEqual([it.id for it in r.carried], [1, 2])
        r.gather_prefix_matches([F.item(3, [3] * 40)])
        self.assertEqual(list(r._all_ranks_prefix_matches[0]), [1, 2, 3])
        self.assertEqual([it.id for it in r.drain_carried()], [1, 2])
        self.assertEqual(r.carried, ())

    def test_conversation_ids_of_any_type(self):
        kv = F.KVCacheManager()
        for name, r in [("default", T.DefaultADPRouter(F.Dist(0, 4))),
                        ("kv", T.KVCacheAwareADPRouter(F.Dist(0, 4), kv))]:
            with self.subTest(name):  # never read, never rejected
                out, _ = r.route_requests([T.RankState(k) for k in range(4)],
                                          [F.item(1, [1], conversation=7)], 4)
                self.assertEqual(sum(map(len, out.values())), 1)
        r = T.ConversationAwareADPRouter(F.Dist(0, 4))
        idle = [T.RankState(k) for k in range(4)]
        first, _ = r.route_requests(idle, [F.item(1, [1], conversation=7),
                                           F.item(2, [1], conversation="7")], 8)
        home = {it.id: k for k, v in first.items() for it in v}
        self.assertNotEqual(home[1], home[2])  # 7 and "7" are different conversations
        again, _ = r.route_requests(idle, [F.item(3, [1], conversation=7)], 8)
        self.assertEqual(ids(again)[home[1]], [3])


class InstallTest(unittest.TestCase):
    """install() against a fake tensorrt_llm package in sys.modules."""

    def fake(self, module="tensorrt_llm._torch.pyexecutor.scheduler.adp_router"):
        class TrtADPRouter:
            @classmethod
            def create(cls, dist, kv_cache_manager=None, attention_dp_config=None,
                       async_transfer_manager=None, **kw):
                return ("theirs", kw)

        mods = {"tensorrt_llm": types.ModuleType("tensorrt_llm")}
        mods["tensorrt_llm"].__version__ = "9.9.9"
        parts = module.split(".")
        for i in range(2, len(parts) + 1):
            mods[".".join(parts[:i])] = types.ModuleType(".".join(parts[:i]))
        mods[module].ADPRouter = TrtADPRouter
        patch = mock.patch.dict(sys.modules, mods)
        patch.start()
        self.addCleanup(patch.stop)
        self.addCleanup(T.uninstall)
        return TrtADPRouter

    def test_install_uninstall(self):
        cls = self.fake()
        cfg = F.attention_dp_config(enable_kv_cache_aware_routing=True)
        T.install()
        T.install()  # idempotent
        self.assertTrue(T.installed())
        r = cls.create(F.Dist(0, 2), F.KVCacheManager(), cfg)
        self.assertIsInstance(r, T.KVCacheAwareADPRouter)
        T.uninstall()
        self.assertFalse(T.installed())
        self.assertEqual(cls.create(F.Dist(0, 2), F.KVCacheManager(), cfg), ("theirs", {}))

    def test_older_module_path_and_options(self):
        cls = self.fake("tensorrt_llm._torch.pyexecutor.adp_router")
        T.install(options={"prefix_source": "index"})
        r = cls.create(F.Dist(0, 2), F.KVCacheManager(),
                       F.attention_dp_config(enable_kv_cache_aware_routing=True))
        self.assertFalse(r.needs_prefix_matches)

    def test_unknown_parameters_keep_theirs(self):
        cls = self.fake()
        T.install()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            self.assertEqual(cls.create(F.Dist(), dkv_enabled=True), ("theirs", {"dkv_enabled": True}))
        self.assertIn("dkv_enabled", str(w[0].message))

    def test_router_module_missing(self):
        self.fake("tensorrt_llm.somewhere_else")
        with self.assertRaisesRegex(ImportError, "9.9.9.*scheduler.adp_router"):
            T.install()



class ConversationKeyTest(unittest.TestCase):
    def test_long_and_typed_ids(self):
        key = T._conversation_key
        self.assertEqual(key("abc"), "abc")
        self.assertIsNone(key(None))
        self.assertNotEqual(key(""), None)  # TensorRT-LLM binds "" like any id
        self.assertNotEqual(key("\x00int:7"), key(7))
        self.assertNotEqual(key(7), key("7"))
        long_a, long_b = "a" * 5000, "a" * 4999 + "b"
        self.assertLessEqual(len(key(long_a).encode()), T._MAX_CONVERSATION_BYTES)
        self.assertEqual(key(long_a), key("a" * 5000))  # deterministic: every rank agrees
        self.assertNotEqual(key(long_a), key(long_b))
        self.assertEqual(key("x" * 1024), "x" * 1024)  # at the bound: kept as is


# ---- newer TensorRT-LLM releases, route traces, fingerprints, the hand-back ------------

def bare_env(**extra):
    """No adprouter option variable (ADPROUTER_*, TRTLLM_ADPROUTER*) and no
    TRTLLM_ADP_ROUTE_TRACE from the caller's environment; extra set."""
    keep = {k: v for k, v in os.environ.items()
            if k == "ADPROUTER_LIBRARY" or not (k.startswith(("ADPROUTER_", "TRTLLM_ADPROUTER"))
                                                or k == "TRTLLM_ADP_ROUTE_TRACE")}
    keep.update(extra)
    return mock.patch.dict(os.environ, keep, clear=True)


class BareEnvCase(unittest.TestCase):
    def setUp(self):
        env = bare_env()
        env.start()
        self.addCleanup(env.stop)


KV_CFG = dict(enable_kv_cache_aware_routing=True)
CONV_CFG = dict(kv_cache_routing_conversation_affinity=True)


def retiring_mix():
    """Two live requests (10 and 20 prompt tokens) and a retiring one (7)."""
    return [F.LlmRequest([0] * 10), F.LlmRequest([0] * 20, state=F.LlmRequestState.GENERATION_IN_PROGRESS),
            F.LlmRequest([0] * 7, state=F.LlmRequestState.GENERATION_TO_COMPLETE)]


class NewerFactoryTest(BareEnvCase):
    """ADPRouter.create in both of TensorRT-LLM's orders, and
    has_seq_slot_headroom / exclude_retiring_requests."""

    def test_both_orders(self):
        kv, tr = F.KVCacheManager(), F.AsyncTransferManager()
        cfg = F.attention_dp_config(**KV_CFG)
        d = F.Dist(0, 2)
        for name, call, headroom in [
            ("pinned, positional", lambda: T.ADPRouter.create(d, kv, cfg, tr), True),
            ("pinned, keywords", lambda: T.ADPRouter.create(dist=d, kv_cache_manager=kv, attention_dp_config=cfg,
                                                            async_transfer_manager=tr), True),
            ("newer, positional", lambda: T.ADPRouter.create(d, False, kv, cfg, tr), False),
            ("newer, positional true", lambda: T.ADPRouter.create(d, True, kv, cfg, tr), True),
            ("newer, keywords", lambda: T.ADPRouter.create(dist=d, has_seq_slot_headroom=False, kv_cache_manager=kv,
                                                           attention_dp_config=cfg, async_transfer_manager=tr),
             False),
            ("newer, mixed", lambda: T.ADPRouter.create(d, False, kv, attention_dp_config=cfg,
                                                        async_transfer_manager=tr), False),
            ("pinned with the flag by keyword", lambda: T.ADPRouter.create(d, kv, cfg, tr,
                                                                           has_seq_slot_headroom=False), False),
        ]:
            with self.subTest(name):
                r = call()
                self.assertIs(type(r), T.KVCacheAwareADPRouter)
                self.assertIs(r.kv_cache_manager, kv)
                self.assertIs(r.async_transfer_manager, tr)
                self.assertIs(r.exclude_retiring_requests, headroom)
        for name, cfg, want in [("default", F.attention_dp_config(), T.DefaultADPRouter),
                                ("conversation", F.attention_dp_config(**CONV_CFG), T.ConversationAwareADPRouter)]:
            with self.subTest(name):
                r = T.ADPRouter.create(d, False, kv, cfg)
                self.assertIs(type(r), want)
                self.assertIs(r.exclude_retiring_requests, False)
                self.assertIs(T.ADPRouter.create(d, kv, cfg).exclude_retiring_requests, True)

    def test_wrong_arguments(self):
        kv, tr, cfg, d = F.KVCacheManager(), F.AsyncTransferManager(), F.attention_dp_config(), F.Dist()
        for name, call, want in [
            ("pinned, one too many", lambda: T.ADPRouter.create(d, kv, cfg, tr, None), "at most 3 .*4 given"),
            ("newer, one too many", lambda: T.ADPRouter.create(d, True, kv, cfg, tr, None), "at most 4 .*5 given"),
            ("kv_cache_manager twice", lambda: T.ADPRouter.create(d, kv, kv_cache_manager=kv),
             "kv_cache_manager twice"),
            ("kv_cache_manager twice, once None", lambda: T.ADPRouter.create(d, kv, kv_cache_manager=None),
             "kv_cache_manager twice"),
            ("config twice", lambda: T.ADPRouter.create(d, True, kv, cfg, attention_dp_config=cfg),
             "attention_dp_config twice"),
            ("flag twice", lambda: T.ADPRouter.create(d, True, has_seq_slot_headroom=True),
             "has_seq_slot_headroom twice"),
        ]:
            with self.subTest(name), self.assertRaisesRegex(TypeError, want):
                call()

    def test_retiring_requests_with_and_without_headroom(self):
        kv = F.KVCacheManager()
        for policy, make in [("default", lambda d, h: T.DefaultADPRouter(d, has_seq_slot_headroom=h)),
                             ("kv_cache_aware", lambda d, h: T.KVCacheAwareADPRouter(d, kv, has_seq_slot_headroom=h)),
                             ("conversation", lambda d, h: T.ConversationAwareADPRouter(d, has_seq_slot_headroom=h))]:
            for headroom, want in [(None, (2, 30, 1)), (True, (2, 30, 1)), (False, (3, 37, 0))]:
                with self.subTest(policy, has_seq_slot_headroom=headroom):
                    r = make(F.Dist(1, 4), headroom)
                    self.assertIs(r.exclude_retiring_requests, headroom is not False)
                    (s,) = r.gather_all_rank_states(retiring_mix())
                    self.assertEqual((s.rank, s.num_active_requests, s.num_active_tokens, s.num_retiring_requests),
                                     (1,) + want)
                    self.assertEqual(s.serialize()[:4], [1, *want])
        # The attribute is read live, as the executor's padding check reads it.
        r = T.DefaultADPRouter(F.Dist())
        r.exclude_retiring_requests = False
        self.assertEqual(r.gather_all_rank_states(retiring_mix())[0].num_active_requests, 3)


class NewerConversationTest(BareEnvCase):
    """The sub-agent affinity key and new_conv_placement "least_tokens"."""

    def req(self, rid, conv=None, sp=None, n=10):
        it = F.item(rid, [rid] * n, conversation=conv)
        if sp is not None:
            it.request.py_scheduling_params = sp
        return it

    def test_subagent_affinity_id_wins(self):
        idle = [T.RankState(k) for k in range(4)]
        r = T.ConversationAwareADPRouter(F.Dist(0, 4))
        out, _ = r.route_requests(idle, [self.req(1, "parent"), self.req(2, "x")], 8)
        home = {it.id: k for k, v in out.items() for it in v}
        self.assertEqual(home, {1: 0, 2: 1})  # round robin from rank 0
        magic = mock.MagicMock()  # the pinned commit's tests: any attribute exists
        magic.attention_dp_rank, magic.attention_dp_relax = None, True
        batch = [
            self.req(3, "child", F.NewerSchedulingParams(subagent_affinity_id="parent")),  # the affinity id wins
            self.req(4, "parent", F.NewerSchedulingParams(subagent_affinity_id="")),       # empty: ignored
            self.req(5, "parent", F.NewerSchedulingParams(subagent_affinity_id=7)),        # not a str: ignored
            self.req(6, "parent", magic),                                                  # a MagicMock: ignored
            self.req(7, "parent", F.SchedulingParams()),                                   # the pinned commit's
            self.req(8, None, F.NewerSchedulingParams(subagent_affinity_id="x")),          # no conversation id
        ]
        out, _ = r.route_requests(idle, batch, 8)
        self.assertEqual(ids(out), {0: [3, 4, 5, 6, 7], 1: [8], 2: [], 3: []})
        self.assertEqual(dict(r._conv_to_rank), {"parent": 0, "x": 1})  # "child" never became a conversation
        # A new affinity key is a new conversation, bound where it lands.
        out, _ = r.route_requests(idle, [self.req(9, "parent", F.NewerSchedulingParams(subagent_affinity_id="new"))], 8)
        self.assertEqual(ids(out), {0: [], 1: [], 2: [9], 3: []})
        self.assertEqual(r._conv_to_rank["new"], 2)

    def test_placement_names(self):
        d = F.Dist(0, 2)
        for name, make, want in [
            ("constructor", lambda: T.ConversationAwareADPRouter(d, new_conv_placement="least_tokens"), "least_tokens"),
            ("unknown", lambda: T.ConversationAwareADPRouter(d, new_conv_placement="fewest_tokens"), "round_robin"),
            ("None", lambda: T.ConversationAwareADPRouter(d, new_conv_placement=None), "round_robin"),
            ("factory", lambda: T.ADPRouter.create(d, None, F.attention_dp_config(
                kv_cache_routing_new_conv_placement="least_tokens", **CONV_CFG)), "least_tokens"),
            ("factory, newer order", lambda: T.ADPRouter.create(d, True, None, F.attention_dp_config(
                kv_cache_routing_new_conv_placement="least_tokens", **CONV_CFG)), "least_tokens"),
            ("factory, unknown", lambda: T.ADPRouter.create(d, None, F.attention_dp_config(
                kv_cache_routing_new_conv_placement="bogus", **CONV_CFG)), "round_robin"),
            ("the option wins", lambda: T.ConversationAwareADPRouter(
                d, new_conv_placement="least_tokens", options={"new_conv_placement": "least_queued"}), "least_queued"),
        ]:
            with self.subTest(name):
                self.assertEqual(make()._new_conv_placement, want)

    def test_least_tokens_by_hand(self):
        """States (requests, tokens): rank 0 (1, 100), rank 1 (0, 30), rank 2
        (2, 10); max 4, multiplier 2. Request 2 (20 tokens, strict on rank
        2) goes first: rank 2 (3, 30). Soft cap: fair ceil((4 + 3) / 3) = 3,
        min(max(ceil(2 * 3), 3), 4) = 4. Cursor 0. Request 1 (50, new
        conversation "a"): (tokens, requests, distance from the cursor)
        (100, 1, 0), (30, 0, 1), (30, 3, 2): rank 1, now (1, 80); cursor 2.
        Request 3 (70, no conversation): (100, 1, 1), (80, 1, 2), (30, 3, 0):
        rank 2, now (4, 100), at the soft cap; cursor 0. Request 4 (40,
        conversation "c"): ranks 0 and 1 remain: (100, 1, 0), (80, 1, 1):
        rank 1; cursor 2."""
        r = T.ConversationAwareADPRouter(F.Dist(0, 3), new_conv_placement="least_tokens",
                                         options={"route_trace": True})
        states = [T.RankState(0, 1, 100), T.RankState(1, 0, 30), T.RankState(2, 2, 10)]
        batch = [F.item(1, [1] * 50, conversation="a"), F.item(2, [2] * 20, target=2, relax=False, conversation="b"),
                 F.item(3, [3] * 70), F.item(4, [4] * 40, conversation="c")]
        out, expected = r.route_requests(states, batch, 4)
        self.assertEqual((ids(out), expected), ({0: [], 1: [1, 4], 2: [2, 3]}, 4))
        self.assertEqual(dict(r._conv_to_rank), {"b": 2, "a": 1, "c": 1})
        self.assertEqual([(d["req_id"], d["phase"], d["best_rank"]) for d in r._last_route_trace["decisions"]],
                         [(2, "strict", 2), (1, "new_conversation", 1), (3, "new_conversation", 2),
                          (4, "new_conversation", 1)])
        # Idle ranks tie on tokens and requests: the first at or after the
        # cursor (2) wins and the cursor moves past it; "c" sticks to rank 1.
        idle = [T.RankState(k) for k in range(3)]
        out, _ = r.route_requests(idle, [F.item(5, [5] * 10, conversation="d"), F.item(6, [6] * 10, conversation="e"),
                                         F.item(7, [7] * 10, conversation="c")], 4)
        self.assertEqual(ids(out), {0: [6], 1: [7], 2: [5]})
        # round_robin, for contrast, from the same start: ranks 0, 1, 2 in turn.
        rr = T.ConversationAwareADPRouter(F.Dist(0, 3))
        out, _ = rr.route_requests(states, batch, 4)
        self.assertEqual(ids(out), {0: [1], 1: [3], 2: [2, 4]})


class EnvironmentOptionsTest(BareEnvCase):
    def setUp(self):
        super().setUp()
        saved = set(T._warned_variables)
        T._warned_variables.clear()
        self.addCleanup(lambda: (T._warned_variables.clear(), T._warned_variables.update(saved)))

    def kv(self, **kw):
        return T.ADPRouter.create(F.Dist(), F.KVCacheManager(), F.attention_dp_config(**KV_CFG), **kw)

    def test_precedence(self):
        with bare_env(ADPROUTER_PREFIX_SOURCE="probe+index"):
            self.assertEqual(self.kv().options, {"prefix_source": "probe+index"})
        with bare_env(TRTLLM_ADPROUTER_PREFIX_SOURCE="index"):
            self.assertEqual(self.kv().options, {"prefix_source": "index"})
        with bare_env(ADPROUTER_PREFIX_SOURCE="probe+index", TRTLLM_ADPROUTER_PREFIX_SOURCE="index",
                      ADPROUTER_WARMUP="once"):
            r = self.kv()
            self.assertEqual(r.options, {"prefix_source": "index", "warmup": "once"})
            self.assertFalse(r.needs_prefix_matches)
            r = self.kv(options={"prefix_source": "probe"})
            self.assertEqual(r.options, {"prefix_source": "probe", "warmup": "once"})
            self.assertTrue(r.needs_prefix_matches)
        # A preset from the TRTLLM_ variable, one of its options overridden by ADPROUTER_.
        with bare_env(TRTLLM_ADPROUTER_PRESET="recommended", ADPROUTER_WARMUP="off"):
            self.assertEqual(self.kv().options, {"prefix_source": "probe+index", "score": "ttft", "warmup": "off"})

    def test_unknown_variable_warned_once(self):
        with bare_env(TRTLLM_ADPROUTER_PREFIX_SAUCE="index", TRTLLM_ADPROUTER="1", ADPROUTER_NO_SUCH="1"):
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                self.kv()
                self.kv()
                T.DefaultADPRouter(F.Dist())
        msgs = [str(x.message) for x in w]
        self.assertEqual(len(msgs), 1, msgs)
        self.assertIn("ignoring TRTLLM_ADPROUTER_PREFIX_SAUCE", msgs[0])
        self.assertIn("TRTLLM_ADPROUTER_PREFIX_SOURCE", msgs[0])  # the known names are listed
        self.assertNotIn("ADPROUTER_NO_SUCH", msgs[0])
        self.assertEqual(T._warned_variables, {"TRTLLM_ADPROUTER_PREFIX_SAUCE"})
        # Another unknown name is warned about in turn.
        with bare_env(TRTLLM_ADPROUTER_PREFIX_SAUCE="index", TRTLLM_ADPROUTER_WARMPU="once"):
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                self.kv()
        self.assertEqual([str(x.message).split(":")[1].strip() for x in w], ["ignoring TRTLLM_ADPROUTER_WARMPU"])

    def test_boolean_adapter_options(self):
        for value, want in [("true", True), ("True", True), ("1", True), (True, True), (1, True),
                            ("false", False), ("False", False), ("0", False), (False, False), (0, False)]:
            with self.subTest(value=value):
                self.assertIs(T.DefaultADPRouter(F.Dist(), options={"route_trace": value}).route_trace_enabled, want)
                self.assertIs(T.DefaultADPRouter(F.Dist(), options={"check_ranks": value})._check_ranks, want)
                if isinstance(value, str):
                    with bare_env(TRTLLM_ADPROUTER_CHECK_RANKS=value, ADPROUTER_ROUTE_TRACE=value):
                        r = T.DefaultADPRouter(F.Dist())
                        self.assertEqual((r._check_ranks, r.route_trace_enabled), (want, want))
        for value in ("yes", "on", "TRUE", "2", "maybe", 2):
            with self.subTest(value=value):
                with self.assertRaisesRegex(adprouter.ConfigError, "route_trace"):
                    T.DefaultADPRouter(F.Dist(), options={"route_trace": value})
                with bare_env(TRTLLM_ADPROUTER_CHECK_RANKS=str(value)):
                    with self.assertRaisesRegex(adprouter.ConfigError, "check_ranks"):
                        T.DefaultADPRouter(F.Dist())


class Engine:
    """What the routers read of TensorRT-LLM's PyExecutor: llm_args.max_num_tokens
    and the waiting queue (prepend_requests, as its FCFS queue has)."""

    def __init__(self, max_num_tokens=None, waiting_queue=None):
        self.llm_args = types.SimpleNamespace(max_num_tokens=max_num_tokens)
        self.waiting_queue = waiting_queue


class EngineDefaultsTest(BareEnvCase):
    def kv_router(self, engine_block=16, executor=None, **options):
        return T.ADPRouter.create(F.Dist(0, 2), F.KVCacheManager(tokens_per_block=engine_block),
                                  F.attention_dp_config(**KV_CFG), options=options, executor=executor)

    def index_blocks(self, r):
        """Blocks the router's index holds after placing one 100-token
        prompt (it indexes the prompt less its last token)."""
        if r.needs_prefix_matches:
            r._all_ranks_prefix_matches = [{}, {}]
        r.route_requests([T.RankState(0), T.RankState(1)], [F.item(1, list(range(100)))], 4)
        return sum(x["index_blocks"] for x in r.router.stats()["ranks"])

    def test_tokens_per_block(self):
        for name, options, tpb, want, blocks in [
            ("index", dict(prefix_source="index"), 16, 16, 99 // 16),
            ("probe+index", dict(prefix_source="probe+index"), 16, 16, 99 // 16),
            ("index, 50", dict(prefix_source="index"), 50, 50, 99 // 50),
            ("demand warmup", dict(warmup="demand"), 16, 16, None),
            ("probe: no index", dict(prefix_source="probe"), 16, None, 0),
            ("nothing set", {}, 16, None, 0),
            ("the option wins", dict(prefix_source="index", tokens_per_block=64), 16, 64, 99 // 64),
        ]:
            with self.subTest(name):
                r = self.kv_router(tpb, **options)
                self.assertEqual(r._config.get("tokens_per_block"), want)
                if blocks is not None:
                    self.assertEqual(self.index_blocks(r), blocks)
        with bare_env(TRTLLM_ADPROUTER_TOKENS_PER_BLOCK="32"):
            self.assertEqual(self.kv_router(16, prefix_source="index")._config["tokens_per_block"], "32")
        # The other routers take no KV options.
        r = T.ADPRouter.create(F.Dist(0, 2), F.KVCacheManager(tokens_per_block=16), F.attention_dp_config(),
                               options={"prefix_source": "index"})
        self.assertNotIn("tokens_per_block", r._config)
        # Different engine block sizes: different fingerprints.
        self.assertNotEqual(self.kv_router(16, prefix_source="index").fingerprint,
                            self.kv_router(32, prefix_source="index").fingerprint)

    def test_ttft_drain_tokens_from_the_executor(self):
        ttft = dict(score="ttft", prefix_source="index")
        for name, executor, options, want in [
            ("max_num_tokens", Engine(8192), ttft, 8192),
            ("the option wins", Engine(8192), dict(ttft, ttft_drain_tokens=1000), 1000),
            ("no executor", None, ttft, None),
            ("max_num_tokens unset", Engine(None), ttft, None),
            ("not an int", Engine("8192"), ttft, None),
            ("reference score", Engine(8192), dict(prefix_source="index"), None),
        ]:
            with self.subTest(name):
                self.assertEqual(self.kv_router(executor=executor, **options)._config.get("ttft_drain_tokens"), want)
        r = T.ADPRouter.create(F.Dist(0, 2), None, F.attention_dp_config(), options=ttft, executor=Engine(8192))
        self.assertNotIn("ttft_drain_tokens", r._config)


def trace_of(r):
    """The router's last trace after a JSON round trip (its keys become text)."""
    import json
    return json.loads(json.dumps(r._last_route_trace))


class RouteTraceTest(BareEnvCase):
    def kv_case(self, maxn, **options):
        """Three ranks, β 0.5: states (requests, tokens) (1, 120), (2, 40),
        (0, 0); request 1 (50 tokens) strict on rank 2, request 2 (100)
        and request 3 (60), each with its own prompt; matches by rank
        {1: 0, 2: 80, 3: 0}, {all 0}, {1: 16, 2: 32, 3: 0}."""
        r = T.KVCacheAwareADPRouter(F.Dist(0, 3), F.KVCacheManager(), load_balance_weight=0.5,
                                    options=dict({"route_trace": True}, **options))
        states = [T.RankState(0, 1, 120), T.RankState(1, 2, 40), T.RankState(2, 0, 0)]
        batch = [F.item(1, [3000 + i for i in range(50)], target=2, relax=False),
                 F.item(2, [1000 + i for i in range(100)]), F.item(3, [2000 + i for i in range(60)])]
        batch[1].request.client_id = "client-2"
        batch[2].request.disagg_request_id = 77
        r._all_ranks_prefix_matches = [{1: 0, 2: 80, 3: 0}, {1: 0, 2: 0, 3: 0}, {1: 16, 2: 32, 3: 0}]
        out, expected = r.route_requests(states, batch, maxn)
        return r, ids(out), expected

    def assertDecision(self, got, want):
        scores = want.pop("scores", None)
        got = dict(got)
        got_scores = got.pop("scores", None)
        self.assertEqual(got, want)
        if scores is None:
            self.assertIsNone(got_scores)
            return
        self.assertEqual(sorted(got_scores), sorted(scores))
        for k in scores:
            self.assertAlmostEqual(got_scores[k], scores[k], places=9, msg="rank %s" % k)

    def test_kv_cache_aware_by_hand(self):
        """Request 1 goes to rank 2 (strict), adding 50 - 16 = 34 tokens: (1,
        34). Soft cap: fair ceil((1 + 2 + 1 + 2) / 3) = 2, min(max(ceil(2 *
        2), 2), 8) = 4; all ranks eligible. Request 2 (n 100): best match
        80 of 100 > 0.1, affinity on; loads 120 + 40 + 34 = 194; score (n -
        match) + 0.5 * (tokens / 194 * n): rank 0 wins (20 + 30.9), adding
        20 (now 140). Request 3 (n 60): no match, affinity off; loads 214:
        rank 2 (60 + 4.8) beats rank 1 (60 + 5.6) and rank 0 (60 + 19.6)."""
        r, out, expected = self.kv_case(8)
        self.assertEqual((out, expected), ({0: [2], 1: [], 2: [1, 3]}, 4))
        t = trace_of(r)
        self.assertEqual(sorted(t), ["decisions", "load_before"])  # nothing left over: no num_unrouted
        self.assertEqual(t["load_before"], {"num_active_requests": [1, 2, 0], "num_active_tokens": [120.0, 40.0, 0.0]})
        self.assertEqual(len(t["decisions"]), 3)
        self.assertDecision(t["decisions"][0], dict(req_id=1, client_id=None, disagg_request_id=None, phase="strict",
                                                    req_tokens=50, best_rank=2, effective_added=34))
        self.assertDecision(t["decisions"][1], dict(
            req_id=2, client_id="client-2", disagg_request_id=None, phase="scored", req_tokens=100, best_rank=0,
            effective_added=20, match_lens={"0": 80, "1": 0, "2": 32}, cache_affinity_active=True,
            scores={"0": 20 + 0.5 * (120 / 194 * 100), "1": 100 + 0.5 * (40 / 194 * 100),
                    "2": 68 + 0.5 * (34 / 194 * 100)}))
        self.assertDecision(t["decisions"][2], dict(
            req_id=3, client_id=None, disagg_request_id=77, phase="scored", req_tokens=60, best_rank=2,
            effective_added=60, match_lens={"0": 0, "1": 0, "2": 0}, cache_affinity_active=False,
            scores={"0": 60 + 0.5 * (140 / 214 * 60), "1": 60 + 0.5 * (40 / 214 * 60),
                    "2": 60 + 0.5 * (34 / 214 * 60)}))

    def test_kv_cache_aware_eligible_ranks_only(self):
        """The same with max 2: the soft cap is 2, so rank 1 (2 requests)
        never competes and rank 0 leaves after request 2. Request 2: loads
        120 + 34 = 154. Request 3: rank 2 alone, loads max(34, 60) = 60."""
        r, out, expected = self.kv_case(2)
        self.assertEqual((out, expected), ({0: [2], 1: [], 2: [1, 3]}, 2))
        d = trace_of(r)["decisions"]
        self.assertEqual([x["req_id"] for x in d], [1, 2, 3])
        self.assertDecision(d[1], dict(
            req_id=2, client_id="client-2", disagg_request_id=None, phase="scored", req_tokens=100, best_rank=0,
            effective_added=20, match_lens={"0": 80, "2": 32}, cache_affinity_active=True,
            scores={"0": 20 + 0.5 * (120 / 154 * 100), "2": 68 + 0.5 * (34 / 154 * 100)}))
        self.assertDecision(d[2], dict(
            req_id=3, client_id=None, disagg_request_id=77, phase="scored", req_tokens=60, best_rank=2,
            effective_added=60, match_lens={"2": 0}, cache_affinity_active=False,
            scores={"2": 60 + 0.5 * (34 / 60 * 60)}))

    def test_tracing_changes_no_decision(self):
        for maxn in (8, 2):
            with self.subTest(maxn=maxn):
                r1, out1, e1 = self.kv_case(maxn)
                r2, out2, e2 = self.kv_case(maxn, route_trace=False)
                self.assertEqual((out1, e1), (out2, e2))
                self.assertEqual(r1.router.state_digest(), r2.router.state_digest())
                self.assertIsNone(r2._last_route_trace)

    def test_one_decision_per_policy(self):
        states = [T.RankState(0, 1, 100), T.RankState(1, 0, 30), T.RankState(2, 2, 10)]
        # Default: request 2 strict on rank 2 (3 requests); soft cap
        # min(max(ceil((1 + 0 + 3 + 2) / 3), 3), 4) = 3: ranks 0 (100 tokens)
        # and 1 (30) compete, largest prompt first: 3 (70) to rank 1
        # (then 100 tokens, 1 request), 1 (50) to rank 0 on the tie (rank order).
        r = T.DefaultADPRouter(F.Dist(0, 3), options={"route_trace": True})
        out, _ = r.route_requests(states, [F.item(1, [1] * 50), F.item(2, [2] * 20, target=2, relax=False),
                                           F.item(3, [3] * 70)], 4)
        self.assertEqual(ids(out), {0: [1], 1: [3], 2: [2]})
        t = trace_of(r)
        self.assertEqual(t["load_before"], {"num_active_requests": [1, 0, 2], "num_active_tokens": [100, 30, 10]})
        none = dict(client_id=None, disagg_request_id=None)
        self.assertEqual(t["decisions"], [
            dict(none, req_id=2, phase="strict", req_tokens=20, best_rank=2, effective_added=20),
            dict(none, req_id=3, phase="least_loaded", req_tokens=70, best_rank=1, effective_added=70,
                 match_lens={"0": 0, "1": 0}, scores={"0": 100.0, "1": 30.0}, cache_affinity_active=False),
            dict(none, req_id=1, phase="least_loaded", req_tokens=50, best_rank=0, effective_added=50,
                 match_lens={"0": 0, "1": 0}, scores={"0": 100.0, "1": 100.0}, cache_affinity_active=False)])
        # Conversation (round robin from rank 0 under the soft cap 4).
        r = T.ConversationAwareADPRouter(F.Dist(0, 3), options={"route_trace": True})
        r.route_requests(states, [F.item(1, [1] * 50, conversation="a"), F.item(2, [2] * 20, target=2, relax=False),
                                  F.item(3, [3] * 70)], 4)
        self.assertEqual(trace_of(r)["decisions"], [
            dict(none, req_id=2, phase="strict", req_tokens=20, best_rank=2, effective_added=20),
            dict(none, req_id=1, phase="new_conversation", req_tokens=50, best_rank=0, effective_added=50),
            dict(none, req_id=3, phase="new_conversation", req_tokens=70, best_rank=1, effective_added=70)])
        r.route_requests(states, [F.item(4, [4] * 30, conversation="a")], 4)
        self.assertEqual(trace_of(r)["decisions"], [
            dict(none, req_id=4, phase="conversation_bound", req_tokens=30, best_rank=0, effective_added=30)])
        # KV-aware cold-start warmup: the smallest pending rank first; the
        # effective load is n less the warmed rank's match.
        r = T.KVCacheAwareADPRouter(F.Dist(0, 3), F.KVCacheManager(), cold_start_warmup=True,
                                    options={"route_trace": True})
        r._all_ranks_prefix_matches = [{1: 32}, {}, {}]
        r.route_requests(states, [F.item(1, [1] * 50), F.item(3, [3] * 70)], 4)
        t = trace_of(r)
        self.assertEqual(t["load_before"]["num_active_tokens"], [100.0, 30.0, 10.0])
        self.assertEqual(t["decisions"], [
            dict(none, req_id=1, phase="warmup", req_tokens=50, best_rank=0, effective_added=18),
            dict(none, req_id=3, phase="warmup", req_tokens=70, best_rank=1, effective_added=70)])
        # KV-aware with the ttft score: our reason name.
        r = T.KVCacheAwareADPRouter(F.Dist(0, 3), F.KVCacheManager(),
                                    options={"route_trace": True, "score": "ttft", "prefix_source": "index"})
        r.route_requests(states, [F.item(1, [1] * 50)], 4)
        (d,) = trace_of(r)["decisions"]
        self.assertEqual((d["phase"], d["req_tokens"], d["effective_added"]), ("predicted_ttft", 50, 50))
        self.assertEqual(sorted(d["match_lens"]), ["0", "1", "2"])

    def test_left_over_and_idle_calls(self):
        full = [T.RankState(k, 2, 5 * k) for k in range(3)]
        for requeue in (False, True):
            with self.subTest(requeue=requeue):
                queue = WaitingQueue() if requeue else None
                engine = Engine(waiting_queue=queue)
                r = T.DefaultADPRouter(F.Dist(0, 3), options={"route_trace": True}, executor=engine)
                out, _ = r.route_requests(full, [F.item(1, [1] * 5), F.item(2, [2] * 6)], 2)
                self.assertEqual(trace_of(r), {"load_before": {"num_active_requests": [2, 2, 2],
                                                               "num_active_tokens": [0, 5, 10]},
                                               "num_unrouted": 2, "decisions": []})
                self.assertEqual(len(r.carried), 0 if requeue else 2)
                if requeue:
                    self.assertEqual([x.id for x in queue], [1, 2])
                    queue.clear()
                # Partly placed (one free slot; the largest prompt first):
                # only the placement is a decision.
                one_free = [T.RankState(0, 1, 0)] + full[1:]
                r.route_requests(one_free, [F.item(3, [3] * 7), F.item(4, [4] * 4)], 2)
                t = trace_of(r)
                self.assertEqual([(d["req_id"], d["best_rank"]) for d in t["decisions"]], [(3, 0)])
                self.assertEqual(t["num_unrouted"], 1 if requeue else 3)  # with 1 and 2 carried
                self.assertEqual(t["load_before"]["num_active_requests"], [1, 2, 2])
                r.drain_carried()
                before = r._last_route_trace
                # Nothing offered (nothing carried either): the trace stays.
                r.route_requests([T.RankState(k) for k in range(3)], [], 2)
                self.assertIs(r._last_route_trace, before)

    def test_executor_sink_switch(self):
        """TensorRT-LLM's executor sets route_trace_enabled on the rank that
        writes when TRTLLM_ADP_ROUTE_TRACE names a file; the router keeps
        receipts from construction when the variable is set."""
        states, batch = [T.RankState(0), T.RankState(1)], lambda: [F.item(1, [1] * 9)]
        with bare_env(TRTLLM_ADP_ROUTE_TRACE="/tmp/adp_trace.jsonl"):
            r = T.DefaultADPRouter(F.Dist(0, 2))
        self.assertFalse(r.route_trace_enabled)
        self.assertIsNone(r._last_route_trace)
        r.route_requests(states, batch(), 4)
        self.assertIsNone(r._last_route_trace)  # not asked for yet
        r.route_trace_enabled = True
        r.route_requests(states, batch(), 4)
        self.assertEqual([d["req_id"] for d in trace_of(r)["decisions"]], [1])
        # Without the variable or the option the router keeps no receipts:
        # it says so (once) and leaves the trace empty.
        r = T.DefaultADPRouter(F.Dist(0, 2))
        r.route_trace_enabled = True
        with self.assertLogs("adprouter.trtllm", "WARNING") as cm:
            r.route_requests(states, batch(), 4)
            r.route_requests(states, batch(), 4)
        self.assertEqual(len(cm.records), 1)
        self.assertIn("keeps no receipts", cm.output[0])
        self.assertIsNone(r._last_route_trace)


class FingerprintTest(BareEnvCase):
    def test_fingerprint_and_log(self):
        import re
        kv = F.KVCacheManager()
        with self.assertLogs("adprouter.trtllm", "INFO") as cm:
            r = T.KVCacheAwareADPRouter(F.Dist(2, 4), kv, options={"prefix_source": "index"})
        self.assertEqual(len(cm.records), 1)
        self.assertEqual(cm.records[0].levelname, "INFO")
        msg = cm.records[0].getMessage()
        for part in ("rank 2", "KVCacheAwareADPRouter", "adprouter %s" % adprouter.version(), "prefix_source=index",
                     "load_balance_weight=1.0", "tokens_per_block=32", r.fingerprint):
            self.assertIn(part, msg)
        self.assertRegex(r.fingerprint, r"^[0-9a-f]{16}$")
        same = T.KVCacheAwareADPRouter(F.Dist(0, 4), kv, options={"prefix_source": "index"})
        self.assertEqual(same.fingerprint, r.fingerprint)  # the rank is not part of it
        for name, other in [
            ("another option", T.KVCacheAwareADPRouter(F.Dist(2, 4), kv, options={"prefix_source": "probe+index"})),
            ("another parameter", T.KVCacheAwareADPRouter(F.Dist(2, 4), kv, load_balance_weight=0.5,
                                                          options={"prefix_source": "index"})),
            ("no option", T.KVCacheAwareADPRouter(F.Dist(2, 4), kv)),
        ]:
            with self.subTest(name):
                self.assertRegex(other.fingerprint, r"^[0-9a-f]{16}$")
                self.assertNotEqual(other.fingerprint, r.fingerprint)
        prints = {cls.__name__: cls(F.Dist()).fingerprint for cls in (T.DefaultADPRouter, T.ConversationAwareADPRouter)}
        self.assertEqual(len(set(prints.values())), 2)
        self.assertEqual(T.DefaultADPRouter(F.Dist()).fingerprint, prints["DefaultADPRouter"])
        self.assertTrue(all(re.fullmatch(r"[0-9a-f]{16}", p) for p in prints.values()))

    def check_group(self, options_of_rank, calls=3):
        """4 thread ranks with check_ranks, each routing calls batches; per
        rank: the decisions (or the ConfigError), allgathers after each
        gather, its fingerprint."""
        def rank(dist):
            r = T.ADPRouter.create(dist, F.KVCacheManager(), F.attention_dp_config(**KV_CFG),
                                   options=dict(check_ranks=True, **options_of_rank(dist.tp_rank)))
            decisions, counts = [], []
            for call in range(calls):
                try:
                    states = r.gather_all_rank_states([])
                except adprouter.ConfigError as e:
                    return "ConfigError", str(e), dist.allgathers, r.fingerprint
                counts.append(dist.allgathers)
                batch = [F.item(10 * call + k, [k] * 40) for k in range(3)]
                if r.needs_prefix_matches:
                    r.gather_prefix_matches(batch)
                out, _ = r.route_requests(states, batch, 8)
                decisions.append(ids(out))
                counts.append(dist.allgathers)
            return decisions, counts, r.fingerprint
        return F.ThreadGroup(4).run(rank)

    def test_check_ranks_agree(self):
        out = self.check_group(lambda rank: {"prefix_source": "index"})
        self.assertEqual(len({repr(o) for o in out}), 1)  # the same decisions and fingerprint on every rank
        decisions, counts, _ = out[0]
        self.assertEqual(counts, [2, 2, 3, 3, 4, 4])  # one extra allgather, at the first gather only
        self.assertEqual(sum(len(v) for d in decisions for v in d.values()), 9)

    def test_check_ranks_disagree(self):
        out = self.check_group(lambda rank: {"prefix_source": "probe+index" if rank == 1 else "index"})
        prints = [o[3] for o in out]
        self.assertEqual(len(set(prints)), 2)
        self.assertEqual(prints[0], prints[2])
        for rank, (kind, msg, allgathers, fp) in enumerate(out):
            with self.subTest(rank=rank):
                self.assertEqual(kind, "ConfigError")
                self.assertEqual(allgathers, 1)  # refused before the states were gathered
                self.assertIn("%s: ranks [1]" % prints[1], msg)
                self.assertIn("%s: ranks [0, 2, 3]" % prints[0], msg)

    def test_check_ranks_refuses_again(self):
        """A rank that catches the error and gathers again is refused again
        (every rank alike: the check is one allgather each time)."""
        def rank(dist):
            opts = {"check_ranks": True, "warmup": "once" if dist.tp_rank == 3 else "off"}
            r = T.KVCacheAwareADPRouter(dist, F.KVCacheManager(), options=opts)
            raised = 0
            for _ in range(2):
                try:
                    r.gather_all_rank_states([])
                except adprouter.ConfigError:
                    raised += 1
            return raised, dist.allgathers
        self.assertEqual(F.ThreadGroup(4).run(rank), [(2, 2)] * 4)

    def test_check_ranks_on_some_ranks_only(self):
        """Ranks that disagree on check_ranks itself make different
        collective calls: every rank raises a clear error, none routes on
        a fingerprint read as a rank state."""
        def rank(dist):
            opts = {"check_ranks": dist.tp_rank != 2}
            r = T.DefaultADPRouter(dist, options=opts)
            try:
                r.gather_all_rank_states([])
            except (adprouter.ConfigError, ValueError) as e:
                return type(e).__name__, str(e)
            return "routed", ""
        out = F.ThreadGroup(4).run(rank)
        for k, (kind, msg) in enumerate(out):
            with self.subTest(rank=k):
                if k == 2:
                    self.assertEqual(kind, "ValueError")
                    self.assertIn("check_ranks", msg)
                else:
                    self.assertEqual(kind, "ConfigError")
                    self.assertIn("some ranks only", msg)

    def test_receipts_are_not_part_of_it(self):
        """explain and route_trace change no decision: ranks that differ in
        them route alike and pass the check."""
        plain = T.DefaultADPRouter(F.Dist()).fingerprint
        self.assertEqual(T.DefaultADPRouter(F.Dist(), options={"explain": True}).fingerprint, plain)
        self.assertEqual(T.DefaultADPRouter(F.Dist(), options={"route_trace": "true"}).fingerprint, plain)
        with self.assertRaisesRegex(adprouter.ConfigError, "check_ranks"):
            T.DefaultADPRouter(F.Dist(), options={"check_ranks": ""})



def overflow(r):
    """Two ranks with one request each, max 3: 8 offered (prompt lengths
    17, 24, 31, 38, 15, 22, 29, 36), 4 fit."""
    if r.needs_prefix_matches:
        r._all_ranks_prefix_matches = [{}, {}]
    batch = [F.item(i, [i] * (10 + i * 7 % 30)) for i in range(1, 9)]
    return r.route_requests([T.RankState(0, 1, 0), T.RankState(1, 1, 0)], batch, 3)


class HandBackTest(BareEnvCase):
    """executor=: what no rank can take goes back to the front of the
    executor's waiting queue, in the order offered."""

    def test_requeue(self):
        for name, make, placed in [
            ("default", lambda e: T.DefaultADPRouter(F.Dist(0, 2), executor=e), {0: [4, 7], 1: [8, 3]}),
            ("kv", lambda e: T.KVCacheAwareADPRouter(F.Dist(0, 2), F.KVCacheManager(), executor=e),
             {0: [2, 4], 1: [1, 3]}),
            ("conversation", lambda e: T.ConversationAwareADPRouter(F.Dist(0, 2), executor=e),
             {0: [1, 3], 1: [2, 4]}),
        ]:
            with self.subTest(name):
                engine = Engine(waiting_queue=WaitingQueue([F.item(99, [9])]))
                r = make(engine)
                out, _ = overflow(r)
                self.assertEqual(ids(out), placed)
                left = [i for i in range(1, 9) if i not in sum(placed.values(), [])]
                self.assertEqual([x.id for x in engine.waiting_queue], left + [99])
                self.assertEqual(r.carried, ())
                st = r.stats()
                self.assertEqual((st["requeued"], st["carried"]), (4, 0))
                # The same without the executor: carried.
                plain = make(None)
                overflow(plain)
                self.assertEqual([x.id for x in plain.carried], left)
                self.assertEqual((plain.stats()["requeued"], plain.stats()["carried"]), (0, 4))

    def test_no_queue_to_take_them(self):
        for name, engine in [("no waiting queue", Engine()),
                             ("a queue without prepend_requests", Engine(waiting_queue=[]))]:
            with self.subTest(name):
                r = T.DefaultADPRouter(F.Dist(0, 2), executor=engine)
                overflow(r)
                self.assertEqual(len(r.carried), 4)
                self.assertEqual(r.stats()["requeued"], 0)
        # The router holds the executor weakly: once it is gone, it carries.
        import gc
        engine = Engine(waiting_queue=WaitingQueue())
        r = T.DefaultADPRouter(F.Dist(0, 2), executor=engine)
        del engine
        gc.collect()
        overflow(r)
        self.assertEqual(len(r.carried), 4)


class InstallExecutorTest(BareEnvCase):
    """install() against a fake tensorrt_llm whose ADPRouter.create has the
    newer signature, called from a PyExecutor's __init__ as TensorRT-LLM's is."""

    def fake(self):
        class TrtADPRouter:
            @classmethod
            def create(cls, dist, has_seq_slot_headroom, kv_cache_manager=None, attention_dp_config=None,
                       async_transfer_manager=None):
                return "theirs"

        name = "tensorrt_llm._torch.pyexecutor.scheduler.adp_router"
        mods = {"tensorrt_llm": types.ModuleType("tensorrt_llm")}
        parts = name.split(".")
        for i in range(2, len(parts) + 1):
            mods[".".join(parts[:i])] = types.ModuleType(".".join(parts[:i]))
        mods[name].ADPRouter = TrtADPRouter
        patch = mock.patch.dict(sys.modules, mods)
        patch.start()
        self.addCleanup(patch.stop)
        self.addCleanup(T.uninstall)
        return TrtADPRouter

    def test_the_calling_executor_is_found(self):
        cls = self.fake()
        T.install()
        cfg = F.attention_dp_config(**KV_CFG)

        class PyExecutor:
            def __init__(self):
                self.waiting_queue = WaitingQueue()
                self.adp_router = cls.create(dist=F.Dist(0, 2), has_seq_slot_headroom=False,
                                             kv_cache_manager=F.KVCacheManager(), attention_dp_config=cfg,
                                             async_transfer_manager=None)

        class TracingPyExecutor(PyExecutor):
            pass

        class Engine2:
            def __init__(self):
                self.waiting_queue = WaitingQueue()
                self.adp_router = cls.create(F.Dist(0, 2), True, F.KVCacheManager(), cfg)

        for name, make, found in [("PyExecutor", PyExecutor, True), ("a subclass", TracingPyExecutor, True),
                                  ("another class", Engine2, False)]:
            with self.subTest(name):
                ex = make()
                r = ex.adp_router
                self.assertIsInstance(r, T.KVCacheAwareADPRouter)
                self.assertIs(r.exclude_retiring_requests, not found)  # False passed by PyExecutor, True by Engine2
                self.assertIs(r._executor() if r._executor else None, ex if found else None)
                overflow(r)
                self.assertEqual(len(ex.waiting_queue), 4 if found else 0)
                self.assertEqual(len(r.carried), 0 if found else 4)
        # Called from elsewhere (no executor in the calling frame).
        r = cls.create(F.Dist(0, 2), False, F.KVCacheManager(), cfg)
        self.assertIsNone(r._executor)



# ---- the C path of route_requests against the Python path --------------------------------

class CPathTest(BareEnvCase):
    """route_requests through adprouter._speedups.trtllm_route (one C call:
    reading the items, packing, the decision, the dict of items) equals the
    Python path on the same calls, call after call: the same items on the
    same ranks in the same order, the same expected, the same carry-over and
    the same library state; and the C path is taken for plain batches,
    the Python path for what it leaves there (conversation ids that need
    the Python key, digested salts, odd token lists)."""

    def setUp(self):
        super().setUp()
        from adprouter import _accel
        self.accel = _accel
        self.sp = _accel.speedups
        if self.sp is None or not hasattr(self.sp, "trtllm_route"):
            self.skipTest("adprouter._speedups is not built")
        self.addCleanup(_accel.use, self.sp)
        real = self.sp.trtllm_route
        self.taken = [0, 0]  # C decisions, fallbacks

        def counted(*args):
            got = real(*args)
            self.taken[got is None] += 1
            return got
        self.sp.trtllm_route = counted
        self.addCleanup(setattr, self.sp, "trtllm_route", real)

    def batches(self, seed, dp, calls, odd=False):
        rng = random.Random(seed)
        counter = iter(range(1, 10 ** 9))
        prompts = [[f * 1000 + i for i in range(rng.randrange(40, 200))] for f in range(4)]
        convs = ["a", "b", "c", "d", None] + ([7, "", "\x00x", "z" * 300] if odd else [])
        for _ in range(calls):
            maxn = rng.choice([2, 3, 8])
            batch = random_batch(rng, lambda: next(counter), dp, rng.randrange(0, 14), prompts, convs)
            for it in batch:
                if it.request is not None and rng.random() < 0.3:
                    it.request.lora_config = F.LoraConfig(rng.choice([None, 3, -1, True]))
                    it.request.cache_salt = rng.choice([None, 5, -7] + (["tenant", True] if odd else []))
                if odd and it.request is not None and rng.random() < 0.1:
                    it.request.input_token_ids = tuple(it.request.input_token_ids)
                if it.request is not None and rng.random() < 0.6:
                    it.request.max_tokens = rng.choice([None, 0, 16, 300, 4000] + ([True] if odd else []))
            flat = [[x for it in batch for x in (it.id, rng.choice([0, 0, 32, 64]))] +
                    ([10 ** 9, 7] if rng.random() < 0.3 else []) for _ in range(dp)]
            states = random_states(rng, dp, maxn)
            if rng.random() < 0.5:  # the KV pools, pending and evictable KV the ttft score reads
                for st in states:
                    st.kv_capacity_tokens = cap = rng.choice([0, 4000, 20000])
                    st.free_kv_tokens = free = rng.randrange(cap + 1)
                    st.memory_pressure = rng.random() < 0.1
                    st.pending_kv_tokens = rng.choice([None, 0, rng.randrange(8000)])
                    st.evictable_kv_tokens = rng.choice([None, rng.randrange(free + 1)])
            yield states, batch, maxn, flat

    def run_both(self, make, seed, dp=4, calls=40, odd=False):
        c, py = make(F.Dist(0, dp)), make(F.Dist(0, dp))
        for call, (states, batch, maxn, flat) in enumerate(self.batches(seed, dp, calls, odd)):
            outs = []
            for router, mod in ((c, self.sp), (py, None)):
                self.accel.use(mod)
                if router.needs_prefix_matches:
                    if call % 3:  # the C path reads the lists themselves, or (1) its index of them
                        index = self.sp.match_index(flat) if mod is not None and call % 3 == 1 else None
                        router._gathered = ([it.id for it in router.carried + tuple(batch)], flat, index)
                        router._dicts = None
                    else:
                        router._all_ranks_prefix_matches = [dict(zip(f[0::2], f[1::2])) for f in flat]
                out, expected = router.route_requests(states, batch, maxn)
                outs.append((ids(out), expected, [it.id for it in router.carried],
                             router.router.state_digest()))
            self.accel.use(self.sp)
            self.assertEqual(outs[0], outs[1], "call %d" % call)

    def configurations(self):
        kv = F.KVCacheManager()
        return [
            ("default", lambda d: T.DefaultADPRouter(d)),
            ("kv", lambda d: T.KVCacheAwareADPRouter(d, kv, match_rate_threshold=0.05)),
            ("kv warmup", lambda d: T.KVCacheAwareADPRouter(d, kv, cold_start_warmup=True)),
            ("kv index", lambda d: T.KVCacheAwareADPRouter(d, kv, options={"prefix_source": "index"})),
            ("kv ttft", lambda d: T.KVCacheAwareADPRouter(d, kv, options={"preset": "recommended"})),
            ("conversation", lambda d: T.ConversationAwareADPRouter(d, max_sessions=3)),
            ("conversation least_tokens", lambda d: T.ConversationAwareADPRouter(
                d, new_conv_placement="least_tokens")),
        ]

    def test_plain_batches_take_the_c_path(self):
        for name, make in self.configurations():
            for seed in range(3):
                with self.subTest(name, seed=seed):
                    self.taken[:] = [0, 0]
                    self.run_both(make, seed)
                    self.assertGreater(self.taken[0], 30)
                    self.assertEqual(self.taken[1], 0, "plain batches left to the Python path")

    def test_odd_batches_equal_either_way(self):
        for name, make in self.configurations():
            with self.subTest(name):
                self.taken[:] = [0, 0]
                self.run_both(make, 11, odd=True)
                self.assertGreater(self.taken[0] + self.taken[1], 30)

    def test_match_index_equals_the_lists(self):
        """The index gather_prefix_matches builds (match_index) gives the
        decision the allgathered lists give: repeated ids (the last wins),
        ids outside the batch, odd-length lists, fewer or more lists than
        ranks, the largest ids, bools; and it declines (None) what
        trtllm_route would not read from the lists, which then go as they
        are."""
        rng = random.Random(5)
        for trial in range(60):
            dp = rng.choice([2, 3, 5])
            batch = [F.item(1000 + i, [rng.randrange(50)] * rng.randrange(8, 90)) for i in range(rng.randrange(1, 12))]
            pool = [it.id for it in batch] + [2 ** 64 - 1, 0, 10 ** 12]
            flat = []
            for _ in range(dp + rng.choice([-1, 0, 0, 1])):
                pairs = [(rng.choice(pool), rng.choice([0, 8, 16, 64, 2 ** 31 - 1])) for _ in range(rng.randrange(0, 20))]
                row = [x for p in pairs for x in p] + ([7] if rng.random() < 0.2 else [])
                flat.append(tuple(row) if rng.random() < 0.2 else row)
            index = self.sp.match_index(flat)
            self.assertIsNotNone(index, "trial %d" % trial)
            got = []
            states = [T.RankState(k, rng.randrange(3), 100 * k) for k in range(dp)]
            for source in (index, flat):
                r = T.KVCacheAwareADPRouter(F.Dist(0, dp), F.KVCacheManager(), match_rate_threshold=0.0)
                r._gathered = ([it.id for it in batch], flat, source if source is index else None)
                out, expected = r.route_requests(states, batch, 64)
                got.append((ids(out), expected, r.router.state_digest()))
            self.assertEqual(got[0], got[1], "trial %d" % trial)
        self.assertEqual(self.taken[1], 0, "the index or the lists left to the Python path")
        declined = [
            ("a dict row", [{1: 2}]),
            ("an id that is a float", [[1.0, 2]]),
            ("a negative id", [[-1, 2]]),
            ("an id past 2^64", [[2 ** 64, 2]]),
            ("a match past int32", [[1, 2 ** 31]]),
            ("a match that is a str", [[1, "2"]]),
            ("rows not a list", ([1, 2] for _ in range(1))),
        ]
        for name, rows in declined:
            with self.subTest(name):
                self.assertIsNone(self.sp.match_index(rows))
        self.assertIsNotNone(self.sp.match_index([[True, 1], [1, 2, 3], []]))

    def test_same_errors(self):
        """What the library or the Python path refuses is refused either way,
        with the same exception type, and nothing changes."""
        states = [T.RankState(0), T.RankState(1)]
        bad = [
            ("target out of range", [F.item(1, [1] * 8, target=5)]),
            ("duplicate id", [F.item(1, [1] * 8), F.item(1, [2] * 8)]),
            ("negative target", [F.item(1, [1] * 8, target=-1)]),
            ("no id", [object()]),
            ("None tokens without a count", [F.RequestQueueItem(3, types.SimpleNamespace(input_token_ids=None))]),
        ]
        for name, batch in bad:
            for mod in (self.sp, None):
                with self.subTest(name, c=mod is not None):
                    self.accel.use(mod)
                    r = T.DefaultADPRouter(F.Dist(0, 2))
                    before = r.router.state_digest()
                    with self.assertRaises((adprouter.InvalidArgumentError, TypeError)) as cm:
                        r.route_requests(states, batch, 8)
                    self.assertEqual(r.router.state_digest(), before)
                    kind = type(cm.exception)
                    if mod is not None:
                        c_kind = kind
                    else:
                        self.assertIs(kind, c_kind)
            self.accel.use(self.sp)

    def test_same_errors_for_outputs(self):
        """Where the ranks report KV, a new request's max_tokens is read: one
        that is not an int or None, negative or past int64 is refused
        either way, with a message that names it, and nothing changes."""
        states = [T.RankState(k, kv_capacity_tokens=3200, free_kv_tokens=3200) for k in range(2)]
        for name, value, msg in [
            ("a float", 1.5, r"new_requests\[0\]\.request\.max_tokens = 1\.5, want an int or None"),
            ("a str", "8", r"max_tokens = '8'"),
            ("negative", -1, "max_new_tokens"),
            ("past int64", 2 ** 63, r"requests\[0\]: max_new_tokens = 9223372036854775808 is out of the int64 range"),
        ]:
            for mod in (self.sp, None):
                with self.subTest(name, c=mod is not None):
                    self.accel.use(mod)
                    r = T.DefaultADPRouter(F.Dist(0, 2), options={"capacity_aware": True},
                                           kv_cache_manager=F.KVCacheManager())
                    before = r.router.state_digest()
                    with self.assertRaisesRegex(adprouter.InvalidArgumentError, msg):
                        r.route_requests(states, [F.item(1, [1] * 8, max_tokens=value)], 8)
                    self.assertEqual(r.router.state_digest(), before)
            self.accel.use(self.sp)

    def test_probe_loop_equal(self):
        """gather_prefix_matches probes through adprouter._speedups.probe_items
        exactly as its Python loop does: the same probe calls (prompt[:-1],
        the LoRA task, the cache salt) in the same order, the same gathered
        lists, and the same exception where an item is malformed."""
        rng = random.Random(5)
        odd = [
            F.RequestQueueItem(fresh_id(), None),
            F.RequestQueueItem(fresh_id(), types.SimpleNamespace()),  # no fields: probes []
            F.RequestQueueItem(fresh_id(), types.SimpleNamespace(input_token_ids=(4, 5, 6))),
            F.RequestQueueItem(fresh_id(), types.SimpleNamespace(input_token_ids=[9])),
            F.item(fresh_id(), [1, 2, 3], lora=-2, cache_salt="tenant"),
            F.item(fresh_id(), [], lora=0, cache_salt=True),
        ]
        prompts = [[f * 1000 + i for i in range(rng.randrange(2, 90))] for f in range(4)]
        for trial in range(30):
            n = rng.randrange(0, 40)
            batch = random_batch(rng, fresh_id, 4, n, prompts, ["a", None])
            batch += rng.sample(odd, rng.randrange(0, len(odd) + 1))
            rng.shuffle(batch)
            got = []
            for mod in (self.sp, None):
                self.accel.use(mod)
                kv = F.KVCacheManager(tokens_per_block=4)
                for p in prompts[:2]:
                    kv.add(p, lora=None)
                r = T.KVCacheAwareADPRouter(F.Dist(0, 4, lambda flat: [flat] * 4), kv)
                r.gather_prefix_matches(batch)
                got.append((kv.probes, r._gathered[:2]))
            self.accel.use(self.sp)
            self.assertEqual(got[0], got[1], "trial %d" % trial)
        bad = [
            ("no request attribute", [F.item(1, [1, 2]), types.SimpleNamespace(id=2)], AttributeError),
            ("no id", [types.SimpleNamespace(request=None)], AttributeError),
            ("lora without task_id", [F.RequestQueueItem(1, types.SimpleNamespace(
                input_token_ids=[1, 2], lora_config=object()))], AttributeError),
            ("tokens without len", [F.RequestQueueItem(1, types.SimpleNamespace(input_token_ids=5))], TypeError),
        ]
        for name, batch, kind in bad:
            for mod in (self.sp, None):
                with self.subTest(name, c=mod is not None):
                    self.accel.use(mod)
                    kv = F.KVCacheManager()
                    r = T.KVCacheAwareADPRouter(F.Dist(0, 2), kv)
                    with self.assertRaises(kind):
                        r.gather_prefix_matches(batch)
                    self.assertIsNone(r._gathered)
            self.accel.use(self.sp)


_ids = iter(range(10 ** 7, 10 ** 9))


def fresh_id():
    return next(_ids)


if __name__ == "__main__":
    unittest.main()
