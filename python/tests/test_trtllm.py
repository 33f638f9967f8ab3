"""Tests of adprouter.trtllm, the drop-in for TensorRT-LLM's ADP routers, with
the duck-typed fakes of trtllm_fakes.py: the factory's choice, rank state
units, the allgathers' wire formats, decisions against the pure-Python
oracle, the carry-over of unplaceable requests, and install()."""

import os
import random
import sys
import types
import unittest
import warnings
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trtllm_fakes as F  # noqa: E402

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
        self.assertNotIn("warmup", r.options)
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
        ]:
            with self.subTest(name):
                self.assertEqual(state.serialize(), wire)
                self.assertEqual(T.RankState.deserialize(wire), state)
        short = T.RankState.deserialize(data=[2, 3, 50])
        self.assertEqual((short.rank, short.num_active_requests, short.num_active_tokens,
                          short.num_retiring_requests, short.iter_stats), (2, 3, 50, 0, T.RankIterStatsPayload()))
        for bad in ([], list(range(14)), list(range(17))):
            with self.subTest(len(bad)), self.assertRaisesRegex(ValueError, "%d values" % len(bad)):
                T.RankState.deserialize(bad)

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


if __name__ == "__main__":
    unittest.main()


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
