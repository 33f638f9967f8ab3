"""Tests of the ctypes binding (python/adprouter/__init__.py) against build/libadprouter.so.

Run from the repository root, after ./build.sh:
    PYTHONPATH=python python3 -m unittest discover -s python/tests -v

Every binding feature and every error path: construction with every policy and
option, the result shape, every accepted token representation, every rejected
input, conversation ids, closing, threads, and how the library is found and
loaded. The pure-Python reference router (python/tests/reference.py) is the oracle
wherever a decision is checked beyond the routing fixtures (testdata/routing:
the worked examples of docs/ROUTING.md and the cases every suite shares).
"""

import array
import ctypes
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest

import adprouter
import reference as ref
from adprouter import (
    ConfigError,
    Error,
    InvalidArgumentError,
    InvalidHandleError,
    RankState,
    Request,
    Router,
)

import routing_fixtures

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(adprouter.__file__)))
LIB = adprouter.library_path()

STATUS_INVALID_ARGUMENT, STATUS_INVALID_HANDLE, STATUS_CONFIG = 1, 2, 3

POLICIES = ("default", "kv_cache_aware", "conversation")


def setUpModule():
    if not os.path.exists(LIB):
        raise RuntimeError("%s does not exist: build it with ./build.sh (or set ADPROUTER_LIBRARY)" % LIB)


# --- helpers --------------------------------------------------------------------------


def idle(n):
    return [RankState(i, 0, 0) for i in range(n)]


def states(*loads):
    """states((reqs, tokens), ...) in rank order."""
    return [RankState(i, a, t) for i, (a, t) in enumerate(loads)]


def prompt(n, start=0):
    return list(range(start, start + n))


def lists(res, size):
    return [res.assignment[r] for r in range(size)]


def outcome(res):
    """A comparable summary of a binding RouteResult."""
    return (res.assignment, res.expected, res.unassigned)


def idle_ref(n):
    return [ref.RankState(i, 0, 0) for i in range(n)]


def to_ref_states(sts):
    return [ref.RankState(s.rank, s.num_active_requests, s.num_active_tokens) for s in sts]


def to_ref_requests(reqs):
    out = []
    for q in reqs:
        toks = q.tokens
        if toks is not None and not isinstance(toks, list):
            toks = list(memoryview(toks).cast("B").cast("i")) if not isinstance(toks, (list, tuple)) else list(toks)
        cid = q.conversation_id
        if isinstance(cid, (bytes, bytearray)):
            cid = bytes(cid).decode()
        out.append(ref.Request(q.id, toks, q.num_tokens, q.target_rank, q.relax, cid))
    return out


def to_ref_matches(match_lens, reqs):
    if match_lens is None:
        return None
    out = []
    for m in match_lens:
        if isinstance(m, dict):
            out.append(dict(m))
        else:
            out.append({q.id: v for q, v in zip(reqs, m)})
    return out


def ref_outcome(rres):
    return (rres.assignment, rres.expected, rres.unassigned)


class Pair:
    """A binding router and a reference router fed the same calls."""

    def __init__(self, **cfg):
        self.cfg = cfg
        self.router = Router(**cfg)
        self.ref = ref.ReferenceRouter(**cfg)

    def route(self, tc, sts, reqs, maxn, match_lens=None):
        got = self.router.route(sts, reqs, maxn, match_lens)
        want = self.ref.route(to_ref_states(sts), to_ref_requests(reqs), maxn, to_ref_matches(match_lens, reqs))
        tc.assertEqual(outcome(got), ref_outcome(want), "config %r" % (self.cfg,))
        return got

    def close(self):
        self.router.close()


# --- construction ---------------------------------------------------------------------


class ConstructionTest(unittest.TestCase):
    def test_each_policy_with_defaults(self):
        for policy in POLICIES:
            for dp in (1, 2, 16):
                with self.subTest(policy=policy, dp=dp):
                    with Router(policy=policy, dp_size=dp) as r:
                        self.assertEqual(r.policy, policy)
                        self.assertEqual(r.dp_size, dp)
                        res = r.route(idle(dp), [Request(1, tokens=prompt(5))], 4)
                        self.assertEqual(sorted(res.assignment), list(range(dp)))

    def test_default_policy_is_kv_cache_aware(self):
        with Router(dp_size=4) as r:
            self.assertEqual(r.policy, "kv_cache_aware")
            # Worked example 7 is kv_cache_aware with default options.
            res = r.route(idle(4), [Request(i, tokens=prompt(10)) for i in range(8)], 100)
            self.assertEqual(lists(res, 4), [[3, 5], [2, 7], [0, 4], [1, 6]])

    def test_all_options_every_policy(self):
        for policy in POLICIES:
            with self.subTest(policy=policy):
                cfg = dict(policy=policy, dp_size=4, load_balance_weight=0.25, match_rate_threshold=0.3,
                           fair_share_multiplier=1.5, cold_start_warmup=True, max_sessions=3,
                           new_conv_placement="least_queued")
                p = Pair(**cfg)
                reqs = [Request(i, tokens=prompt(10 + i), conversation_id="c%d" % (i % 5)) for i in range(9)]
                for call in range(3):
                    p.route(self, states((1, 10), (0, 0), (2, 30), (0, 5)), reqs, 6,
                            [[i % 7 for i in range(9)], [0] * 9, [3] * 9, [9] * 9])
                p.close()

    def test_option_values_as_text_and_ints(self):
        # Integers for float options, "1"/"0" style booleans go through as text.
        with Router(policy="kv_cache_aware", dp_size=2, load_balance_weight=1, match_rate_threshold=0,
                    fair_share_multiplier=3, cold_start_warmup=False) as r:
            r.route(idle(2), [Request(1, tokens=[1])], 2)
        with Router(policy="kv_cache_aware", dp_size=4, cold_start_warmup=True) as r:
            res = r.route(idle(4), [Request(i, tokens=[i]) for i in range(4)], 8)
            self.assertEqual(lists(res, 4), [[0], [1], [2], [3]])  # warmup: one per rank, in order

    def test_floats_are_passed_exactly_threshold(self):
        # n=100, match 50 on rank 0 only, beta 0: the gate compares 0.5 > threshold.
        # threshold 0.5 -> off (tie 100/100, shuffle decides); nextafter(0.5, 0) -> on.
        below = math.nextafter(0.5, 0.0)
        self.assertNotEqual(repr(below), "0.5")
        # Pick an id for which the shuffled tie-break prefers rank 1 over rank 0.
        rid = next(i for i in range(100) if self._shuffled(i, 2)[0] == 1)
        for thr, want in ((0.5, [[], [rid]]), (below, [[rid], []])):
            with self.subTest(threshold=thr):
                with Router(policy="kv_cache_aware", dp_size=2, load_balance_weight=0.0,
                            match_rate_threshold=thr) as r:
                    res = r.route(idle(2), [Request(rid, tokens=prompt(100))], 8, [{rid: 50}, {}])
                    self.assertEqual(lists(res, 2), want)

    @staticmethod
    def _shuffled(seed, n):
        x = list(range(n))
        random.Random(seed).shuffle(x)
        return x

    def test_floats_are_passed_exactly_multiplier(self):
        # fair = 2 over 2 idle ranks with 4 requests; ceil(m * 2) is 2 for m = 1.0 but 3
        # for the next double above 1.0 (kv) -> a rank may take three requests.
        above = math.nextafter(1.0, 2.0)
        for policy in ("kv_cache_aware", "conversation"):
            for m, want_expected in ((1.0, 2), (above, 3)):
                with self.subTest(policy=policy, multiplier=m):
                    p = Pair(policy=policy, dp_size=2, fair_share_multiplier=m)
                    res = p.route(self, idle(2), [Request(i, tokens=prompt(8)) for i in range(4)], 100)
                    if policy == "kv_cache_aware":
                        self.assertEqual(res.expected, want_expected)
                    p.close()

    def test_awkward_float_values(self):
        for v in (0.1, 1 / 3, 0.1 + 0.2, 1e-300, 5e-324, 123456789.123456789, 2.0 ** 60):
            with self.subTest(v=v):
                p = Pair(policy="kv_cache_aware", dp_size=3, load_balance_weight=v, match_rate_threshold=v % 1)
                reqs = [Request(i, tokens=prompt(50 + 7 * i)) for i in range(6)]
                p.route(self, states((1, 100), (0, 0), (2, 7)), reqs, 5,
                        [[10 * i for i in range(6)], [0] * 6, [49] * 6])
                p.close()

    def assertConfigError(self, *args, **kwargs):
        with self.assertRaises(ConfigError) as cm:
            Router(*args, **kwargs)
        e = cm.exception
        self.assertIsInstance(e, ValueError)
        self.assertIsInstance(e, Error)
        self.assertEqual(e.status, STATUS_CONFIG)
        self.assertTrue(str(e))
        return str(e)

    def test_unknown_option(self):
        msg = self.assertConfigError(policy="default", dp_size=2, load_balance_wieght=1.0)
        self.assertIn("load_balance_wieght", msg)
        self.assertConfigError(policy="kv_cache_aware", dp_size=2, kv_cache_routing_enabled=True)

    def test_bad_policy(self):
        for policy in ("", "Default", "kv-cache-aware", "round_robin", None, 3):
            with self.subTest(policy=policy):
                self.assertConfigError(policy=policy, dp_size=2)

    def test_missing_or_bad_dp_size(self):
        for policy in POLICIES:
            with self.subTest(policy=policy):
                self.assertIn("dp_size", self.assertConfigError(policy=policy))
                for dp in (0, -1, 1.5, "four", True, 2 ** 40):
                    self.assertConfigError(policy=policy, dp_size=dp)

    def test_negative_nan_inf_weights(self):
        bad = (-1.0, -1e-300, float("nan"), float("inf"), float("-inf"), "x", "")
        for policy in POLICIES:
            for name in ("load_balance_weight", "match_rate_threshold"):
                for v in bad:
                    with self.subTest(policy=policy, name=name, v=v):
                        msg = self.assertConfigError(policy=policy, dp_size=2, **{name: v})
                        self.assertIn(name, msg)
            for v in (float("nan"), float("inf"), "x"):
                with self.subTest(policy=policy, fair_share_multiplier=v):
                    self.assertConfigError(policy=policy, dp_size=2, fair_share_multiplier=v)

    def test_fair_share_multiplier_below_one(self):
        for v in (0.0, 0.5, math.nextafter(1.0, 0.0), -2.0):
            with self.subTest(v=v):
                msg = self.assertConfigError(policy="kv_cache_aware", dp_size=2, fair_share_multiplier=v)
                self.assertIn("fair_share_multiplier", msg)
        # Clamped by the conversation policy, unused by the default one: accepted.
        for policy in ("conversation", "default"):
            p = Pair(policy=policy, dp_size=2, fair_share_multiplier=0.5)
            p.route(self, idle(2), [Request(i, tokens=prompt(3), conversation_id="c%d" % i) for i in range(5)], 8)
            p.close()

    def test_other_bad_options(self):
        self.assertConfigError(policy="conversation", dp_size=2, max_sessions=0)
        self.assertConfigError(policy="conversation", dp_size=2, max_sessions=-3)
        self.assertConfigError(policy="conversation", dp_size=2, new_conv_placement="random")
        self.assertConfigError(policy="kv_cache_aware", dp_size=2, cold_start_warmup="maybe")

    def test_version(self):
        self.assertEqual(adprouter.abi_version(), adprouter.ABI_VERSION)
        v = adprouter.version()
        self.assertIsInstance(v, str)
        self.assertRegex(v, r"^\d+\.\d+\.\d+")


# --- results ----------------------------------------------------------------------------


class BindingAdapter:
    """Runs the routing fixtures (testdata/routing) through the library, with every
    option of the library (given as text, as the C ABI takes them). The C ABI has
    no random generator: shuffle vectors are checked through routing only."""

    check_generator = False

    def __init__(self, tc):
        self.tc = tc

    def new(self, options):
        return Router(**options)

    def route(self, router, call):
        reqs = [Request(q.id, tokens=q.tokens, num_tokens=q.num_tokens, target_rank=q.target_rank,
                        relax=q.relax, conversation_id=q.conversation_id, lora_id=q.lora_id,
                        cache_salt=q.cache_salt) for q in call.requests]
        sts = [RankState(k, a, t, kv_capacity_tokens=cap, free_kv_tokens=free)
               for k, (a, t, free, cap) in enumerate(call.states)]
        res = router.route(sts, reqs, call.maxn, call.matches)
        where = {i: k for k, ids in res.assignment.items() for i in ids}
        self.tc.assertEqual(res.ranks, [where.get(q.id, -1) for q in reqs], "ranks disagree with assignment")
        return lists(res, router.dp_size), res.expected, res.unassigned

    def stats(self, router):
        st = router.stats(0)
        return st["pending_warmup"], st["conversations"]

    def state(self, router):
        return router.pending_warmup(), router.conversations()

    def receipts(self, router):
        rcs = router.receipts()
        for rc in rcs:
            # The C struct's flags say what the library's text says.
            text = str(rc)
            self.tc.assertEqual(rc.replica_wanted, "its family wants another rank" in text, text)
            self.tc.assertEqual(rc.capacity_fallback, "no rank had KV room" in text, text)
        return [(rc.id, str(rc)) for rc in rcs]


class FixturesTest(unittest.TestCase):
    """The worked examples and vectors of docs/ROUTING.md and the shared cases."""

    def test_routing_fixtures(self):
        self.assertGreater(routing_fixtures.run_fixtures(self, BindingAdapter(self), "the ctypes binding"), 0)


class ResultShapeTest(unittest.TestCase):
    def test_every_rank_present_and_lists(self):
        for policy in POLICIES:
            with self.subTest(policy=policy), Router(policy=policy, dp_size=8) as r:
                res = r.route(idle(8), [Request(5, tokens=prompt(4), target_rank=6)], 4)
                self.assertEqual(list(res.assignment), list(range(8)))
                for rank, ids in res.assignment.items():
                    self.assertIsInstance(ids, list)
                self.assertEqual(res.assignment[6], [5])
                self.assertEqual(res.ranks, [6])
                self.assertIsInstance(res.expected, int)
                self.assertEqual(res.unassigned, [])
                self.assertIn("RouteResult(", repr(res))

    def test_empty_batch(self):
        for policy in POLICIES:
            with self.subTest(policy=policy), Router(policy=policy, dp_size=3) as r:
                res = r.route(states((1, 5), (0, 0), (2, 9)), [], 4)
                self.assertEqual(res.assignment, {0: [], 1: [], 2: []})
                self.assertEqual((res.unassigned, res.ranks), ([], []))
                self.assertEqual(res.expected, 2)  # max(active)

    def test_unassigned_forced_by_small_maxn(self):
        for policy in POLICIES:
            with self.subTest(policy=policy):
                p = Pair(policy=policy, dp_size=2)
                reqs = [Request(100 + i, tokens=prompt(5 + i), conversation_id="u%d" % i) for i in range(7)]
                res = p.route(self, states((1, 10), (2, 20)), reqs, 3)
                self.assertTrue(res.unassigned)
                placed = [i for ids in res.assignment.values() for i in ids]
                self.assertEqual(sorted(placed + res.unassigned), sorted(q.id for q in reqs))
                # ranks: -1 exactly for the unassigned, in input order.
                self.assertEqual([q.id for q, k in zip(reqs, res.ranks) if k == -1], res.unassigned)
                for q, k in zip(reqs, res.ranks):
                    if k >= 0:
                        self.assertIn(q.id, res.assignment[k])
                p.close()

    def test_all_unassigned_when_full(self):
        for policy in POLICIES:
            with self.subTest(policy=policy), Router(policy=policy, dp_size=2) as r:
                res = r.route(states((2, 1), (2, 1)), [Request(3, tokens=[1]), Request(1, tokens=[2])], 2)
                self.assertEqual(res.assignment, {0: [], 1: []})
                self.assertEqual(res.unassigned, [3, 1])
                self.assertEqual(res.ranks, [-1, -1])
                self.assertEqual(res.expected, 2)

    def test_ids_full_uint64_range(self):
        ids = [0, 1, 2 ** 32, 2 ** 63, 2 ** 64 - 2, 2 ** 64 - 1]
        for policy in POLICIES:
            with self.subTest(policy=policy):
                p = Pair(policy=policy, dp_size=3)
                res = p.route(self, idle(3), [Request(i, tokens=prompt(6)) for i in ids], 10)
                self.assertEqual(sorted(i for v in res.assignment.values() for i in v), ids)
                p.close()

    def test_state_objects_duck_typed(self):
        class S:
            def __init__(self, rank, a, t):
                self.rank, self.num_active_requests, self.num_active_tokens = rank, a, t

        with Router(policy="default", dp_size=2) as r:
            a = r.route([S(0, 1, 100), S(1, 0, 0)], [Request(1, num_tokens=5)], 4)
            b = r.route(states((1, 100), (0, 0)), [Request(1, num_tokens=5)], 4)
            self.assertEqual(outcome(a), outcome(b))
            self.assertEqual(lists(a, 2), [[], [1]])
            # Tuples of states and requests are fine too.
            c = r.route(tuple(states((1, 100), (0, 0))), (Request(1, num_tokens=5),), 4)
            self.assertEqual(outcome(c), outcome(b))

    def test_reprs(self):
        self.assertIn("rank=1", repr(RankState(1, 2, 3)))
        self.assertIn("n=3", repr(Request(1, tokens=[1, 2, 3])))
        self.assertIn("n=9", repr(Request(1, num_tokens=9)))


# --- tokens ----------------------------------------------------------------------------


def shared_prefix_batch(n_req=24, length=200, seed=1):
    """Requests over four shared 'system prompts' that differ within the first 64 tokens."""
    rng = random.Random(seed)
    # Prompts of one system share 40..62 tokens, so grouping reads up to token 63.
    systems = [[s * 1000 + k for k in range(40 + 7 * s)] for s in range(4)]
    reqs = []
    for i in range(n_req):
        sysp = systems[rng.randrange(4)]
        toks = sysp + [rng.randrange(50000) for _ in range(length + rng.randrange(60) - len(sysp))]
        reqs.append((rng.randrange(2 ** 64), toks))
    return reqs


class TokensTest(unittest.TestCase):
    DP = 4
    STATES = states((1, 500), (0, 0), (3, 1200), (0, 80))

    def route_as(self, convert, length=200, match=True, policy="kv_cache_aware"):
        batch = shared_prefix_batch(length=length)
        reqs = [Request(i, tokens=convert(t)) for i, t in batch]
        matches = None
        if match:
            rng = random.Random(5)
            matches = [[rng.choice((0, 0, 32, 64, 128)) for _ in reqs] for _ in range(self.DP)]
        with Router(policy=policy, dp_size=self.DP, load_balance_weight=0.5) as r:
            got = r.route(self.STATES, reqs, 16, matches)
        rr = ref.ReferenceRouter(policy=policy, dp_size=self.DP, load_balance_weight=0.5)
        want = rr.route(to_ref_states(self.STATES), [ref.Request(i, t) for i, t in batch], 16,
                        to_ref_matches(matches, reqs))
        self.assertEqual(outcome(got), ref_outcome(want))
        return got

    def test_list(self):
        self.route_as(list)
        self.route_as(list, match=False)

    def test_long_prompts_2048(self):
        a = self.route_as(list, length=2048)
        b = self.route_as(lambda t: array.array("i", t), length=2048)
        self.assertEqual(outcome(a), outcome(b))

    def test_array_i(self):
        self.assertEqual(outcome(self.route_as(lambda t: array.array("i", t))), outcome(self.route_as(list)))

    def test_memoryview(self):
        self.assertEqual(outcome(self.route_as(lambda t: memoryview(array.array("i", t)))),
                         outcome(self.route_as(list)))

    def test_tuple(self):
        self.assertEqual(outcome(self.route_as(tuple)), outcome(self.route_as(list)))

    def test_memoryview_cast_from_bytes(self):
        conv = lambda t: memoryview(array.array("i", t).tobytes()).cast("i")  # noqa: E731
        self.assertEqual(outcome(self.route_as(conv)), outcome(self.route_as(list)))

    def test_ctypes_int32_array(self):
        conv = lambda t: (ctypes.c_int32 * len(t))(*t)  # noqa: E731
        self.assertEqual(outcome(self.route_as(conv)), outcome(self.route_as(list)))

    def test_buffers_of_any_length(self):
        with Router(policy="kv_cache_aware", dp_size=2) as r:
            for n in (0, 1, 63, 64, 65, 2048, 5000):
                with self.subTest(n=n):
                    a = r.route(idle(2), [Request(1, tokens=array.array("i", range(n))), Request(2, tokens=[7] * 3)], 8)
                    b = r.route(idle(2), [Request(1, tokens=list(range(n))), Request(2, tokens=[7] * 3)], 8)
                    self.assertEqual(outcome(a), outcome(b))

    def test_only_first_64_tokens_read_but_full_length_counts(self):
        # Junk (even non-ints) after token 64 is never looked at by the KV policy ...
        base = shared_prefix_batch(length=300)
        junk = [Request(i, tokens=t[:64] + ["x", 1.5, None] + t[67:]) for i, t in base]
        clean = [Request(i, tokens=t) for i, t in base]
        with Router(policy="kv_cache_aware", dp_size=4) as r1, Router(policy="kv_cache_aware", dp_size=4) as r2:
            self.assertEqual(outcome(r1.route(self.STATES, junk, 16)), outcome(r2.route(self.STATES, clean, 16)))
        # ... but the length does: the same 64-token prefix with different lengths gives
        # the decision of the full prompts (num_tokens = len(tokens)).
        reqs = [Request(i, tokens=prompt(64) + [0] * (10 * i * i)) for i in range(8)]
        p = Pair(policy="kv_cache_aware", dp_size=4)
        p.route(self, states((0, 3000), (1, 0), (0, 10), (2, 7)), reqs, 8)
        p.close()

    def test_sends_only_what_the_policy_reads(self):
        # Looks at the batch handed to adpr_route: the KV-aware policy gets the first 64
        # tokens of each prompt (whatever its representation), the others none.
        lens = [0, 1, 63, 64, 65, 2048, 300]
        reps = (("list", list), ("tuple", tuple), ("array('i')", lambda t: array.array("i", t)),
                ("memoryview", lambda t: memoryview(array.array("i", t))))
        for policy, per_request in (("kv_cache_aware", lambda n: min(n, 64)), ("default", lambda n: 0),
                                    ("conversation", lambda n: 0)):
            for name, conv in reps:
                with self.subTest(policy=policy, tokens=name), Router(policy=policy, dp_size=2) as r:
                    seen = []

                    class Spy:
                        def __init__(self, lib):
                            self.lib = lib

                        def adpr_route(self, handle, batch, *rest):
                            b = batch._obj
                            seen.append((b.tokens_len, b.num_requests))
                            return self.lib.adpr_route(handle, batch, *rest)

                        def __getattr__(self, name):
                            return getattr(self.lib, name)

                    r._lib = Spy(r._lib)
                    reqs = [Request(i, tokens=conv(prompt(n))) for i, n in enumerate(lens)]
                    res = r.route(idle(2), reqs, 8)
                    self.assertEqual(seen, [(sum(per_request(n) for n in lens), len(lens))])
                    rr = ref.ReferenceRouter(policy=policy, dp_size=2)
                    want = rr.route(idle_ref(2), [ref.Request(i, prompt(n)) for i, n in enumerate(lens)], 8)
                    self.assertEqual(outcome(res), ref_outcome(want))

    def test_num_tokens_only(self):
        for policy in ("default", "conversation", "kv_cache_aware"):
            with self.subTest(policy=policy):
                p = Pair(policy=policy, dp_size=3)
                reqs = [Request(i, num_tokens=(i * 37) % 101) for i in range(12)]
                p.route(self, states((0, 500), (1, 0), (0, 100)), reqs, 8)
                p.close()

    def test_num_tokens_with_prefix(self):
        # A 64-token prefix plus the full length equals the full prompt.
        batch = shared_prefix_batch(length=500)
        with Router(policy="kv_cache_aware", dp_size=4) as r1, Router(policy="kv_cache_aware", dp_size=4) as r2:
            a = r1.route(self.STATES, [Request(i, tokens=t[:64], num_tokens=len(t)) for i, t in batch], 16)
            b = r2.route(self.STATES, [Request(i, tokens=t) for i, t in batch], 16)
            self.assertEqual(outcome(a), outcome(b))

    def test_tokens_and_num_tokens_for_other_policies(self):
        # default/conversation only need n: tokens given as a list count by length.
        for policy in ("default", "conversation"):
            with Router(policy=policy, dp_size=3) as r1, Router(policy=policy, dp_size=3) as r2:
                a = r1.route(idle(3), [Request(i, tokens=prompt(10 * i + 1)) for i in range(7)], 5)
                b = r2.route(idle(3), [Request(i, num_tokens=10 * i + 1) for i in range(7)], 5)
                self.assertEqual(outcome(a), outcome(b))

    def assertInvalid(self, reqs, policy="kv_cache_aware"):
        with Router(policy=policy, dp_size=2) as r:
            with self.assertRaises(InvalidArgumentError) as cm:
                r.route(idle(2), reqs, 4)
            self.assertIsInstance(cm.exception, ValueError)
            self.assertEqual(cm.exception.status, STATUS_INVALID_ARGUMENT)
            # Still routes afterwards.
            self.assertEqual(r.route(idle(2), [Request(1, tokens=[1])], 4).unassigned, [])
            return str(cm.exception)

    def test_non_int_tokens(self):
        for bad in (1.5, "7", None, [1], 2 ** 31, -2 ** 31 - 1, 2 ** 64):
            for pos in (0, 10, 63):
                with self.subTest(bad=bad, pos=pos):
                    toks = prompt(100)
                    toks[pos] = bad
                    msg = self.assertInvalid([Request(1, tokens=[1, 2]), Request(2, tokens=toks)])
                    self.assertIn("requests[1]", msg)

    def test_int32_extremes_accepted(self):
        p = Pair(policy="kv_cache_aware", dp_size=2)
        p.route(self, idle(2), [Request(1, tokens=[2 ** 31 - 1, -2 ** 31, 0]), Request(2, tokens=[-1, 5])], 4)
        p.close()

    def test_wrong_buffer_formats(self):
        for typecode in ("d", "q", "h", "b", "B", "I", "f", "L"):
            with self.subTest(typecode=typecode):
                msg = self.assertInvalid([Request(1, tokens=array.array(typecode, [1, 2, 3]))])
                self.assertIn("requests[0]", msg)
        for obj in (b"\x01\x00\x00\x00", bytearray(8), memoryview(b"abcdefgh"), "abcd", 12, object()):
            with self.subTest(obj=type(obj).__name__):
                self.assertInvalid([Request(1, tokens=obj)])

    def test_non_contiguous_or_2d_buffer(self):
        self.assertInvalid([Request(1, tokens=memoryview(array.array("i", range(100)))[::2])])
        two_d = memoryview(array.array("i", range(100))).cast("B").cast("i", [50, 2])
        self.assertInvalid([Request(1, tokens=two_d)])

    def test_num_tokens_smaller_than_tokens(self):
        for nt in (0, 50, 80, 99):
            with self.subTest(num_tokens=nt):
                self.assertInvalid([Request(1, tokens=prompt(100), num_tokens=nt)])

    def test_negative_num_tokens(self):
        for policy in POLICIES:
            with self.subTest(policy=policy):
                self.assertInvalid([Request(1, num_tokens=-1)], policy=policy)


# --- routing errors -----------------------------------------------------------------------


def good_batch(call, dp, n=6, convs=True):
    """A valid batch for call number `call`: untargeted requests (they consume warmup),
    new and returning conversations, a strict target, shared prefixes."""
    base = 1000 * call
    reqs = []
    for k in range(n):
        rid = base + k
        cid = ("conv-%d" % ((call + k) % 5)) if convs and k % 3 != 2 else None
        target = (call + k) % dp if k == 1 else None
        reqs.append(Request(rid, tokens=prompt(20 + 7 * k, start=k % 2), target_rank=target,
                            relax=(k != 1), conversation_id=cid))
    sts = [RankState(r, (call + r) % 3, 100 * ((call * r) % 5)) for r in range(dp)]
    matches = [[(10 * (r + k)) % 30 for k in range(n)] for r in range(dp)]
    return sts, reqs, matches


def bad_calls(dp):
    """(name, function(router, call) raising InvalidArgumentError). Each bad batch puts
    requests that would change router state (warmup, new conversations) BEFORE the
    defect, so a half-applied call would show."""

    def mk(mutate, maxn=8, matches=True):
        def run(router, call):
            sts, reqs, m = good_batch(call, dp)
            reqs = [Request(5000 + 10 * call + k, tokens=prompt(30), conversation_id="bad-%d-%d" % (call, k))
                    for k in range(3)] + reqs
            m = [[0, 0, 0] + row for row in m] if matches else None
            out = mutate(sts, reqs, m)
            if out is not None:
                sts, reqs, m, maxn2 = out
            else:
                maxn2 = maxn
            router.route(sts, reqs, maxn2, m)
        return run

    def req_attr(**kw):
        def mutate(sts, reqs, m):
            q = reqs[-1]
            for k, v in kw.items():
                setattr(q, k, v)
        return mutate

    def dup(sts, reqs, m):
        reqs[-1].id = reqs[0].id

    def few_states(sts, reqs, m):
        return sts[:-1], reqs, m, 8

    def many_states(sts, reqs, m):
        return sts + [RankState(dp, 0, 0)], reqs, m, 8

    def swapped(sts, reqs, m):
        sts[0], sts[1] = sts[1], sts[0]

    def state_attr(i, **kw):
        def mutate(sts, reqs, m):
            for k, v in kw.items():
                setattr(sts[i], k, v)
        return mutate

    def maxn(v):
        def mutate(sts, reqs, m):
            return sts, reqs, m, v
        return mutate

    def set_matches(f):
        def mutate(sts, reqs, m):
            return sts, reqs, f(m, reqs), 8
        return mutate

    def set_state(i, v):
        def mutate(sts, reqs, m):
            sts[i] = v
        return mutate

    def set_req(i, v):
        def mutate(sts, reqs, m):
            reqs[i] = v
        return mutate

    def bad_token(v):
        def mutate(sts, reqs, m):
            reqs[-1].tokens = [1, 2, v, 4]
        return mutate

    return [
        ("target == dp_size", mk(req_attr(target_rank=dp))),
        ("target 2**31", mk(req_attr(target_rank=2 ** 31))),
        ("target -5", mk(req_attr(target_rank=-5))),
        ("target -1", mk(req_attr(target_rank=-1))),
        ("target float", mk(req_attr(target_rank=1.0))),
        ("duplicate id", mk(dup)),
        ("id -1", mk(req_attr(id=-1))),
        ("id 2**64", mk(req_attr(id=2 ** 64))),
        ("id None", mk(req_attr(id=None))),
        ("id str", mk(req_attr(id="7"))),
        ("too few states", mk(few_states)),
        ("too many states", mk(many_states)),
        ("states swapped", mk(swapped)),
        ("state rank wrong", mk(state_attr(dp - 1, rank=dp))),
        ("negative num_active_requests", mk(state_attr(dp - 1, num_active_requests=-1))),
        ("negative num_active_tokens", mk(state_attr(dp - 1, num_active_tokens=-1))),
        ("float num_active_tokens", mk(state_attr(0, num_active_tokens=1.5))),
        ("negative kv_capacity_tokens", mk(state_attr(0, kv_capacity_tokens=-1))),
        ("free_kv_tokens > kv_capacity_tokens", mk(state_attr(dp - 1, kv_capacity_tokens=100, free_kv_tokens=101))),
        ("negative free_kv_tokens", mk(state_attr(dp - 1, kv_capacity_tokens=100, free_kv_tokens=-1))),
        ("state None", mk(set_state(dp - 1, None))),
        ("request None", mk(set_req(-1, None))),
        ("request without attributes", mk(set_req(-1, object()))),
        ("maxn 0", mk(maxn(0))),
        ("maxn -1", mk(maxn(-1))),
        ("maxn float", mk(maxn(8.0))),
        ("maxn None", mk(maxn(None))),
        ("maxn 2**32+8", mk(maxn(2 ** 32 + 8))),
        ("match_lens too short", mk(set_matches(lambda m, reqs: m[:-1]))),
        ("match_lens too long", mk(set_matches(lambda m, reqs: m + [m[0]]))),
        ("match_lens row too short", mk(set_matches(lambda m, reqs: [m[0][:-1]] + m[1:]))),
        ("match_lens row too long", mk(set_matches(lambda m, reqs: m[:-1] + [m[-1] + [0]]))),
        ("match_lens negative (list)", mk(set_matches(lambda m, reqs: m[:-1] + [m[-1][:-1] + [-1]]))),
        ("match_lens negative (dict)",
         mk(set_matches(lambda m, reqs: [{q.id: 3 for q in reqs}] * (dp - 1) + [{reqs[-1].id: -4}]))),
        ("match_lens unknown id", mk(set_matches(lambda m, reqs: [{}] * (dp - 1) + [{reqs[0].id: 1, 424242: 2}]))),
        ("match_lens float", mk(set_matches(lambda m, reqs: [{}] * (dp - 1) + [{reqs[-1].id: 2.5}]))),
        ("match_lens >= 2**31", mk(set_matches(lambda m, reqs: [{}] * (dp - 1) + [{reqs[-1].id: 2 ** 31}]))),
        ("match_lens row None", mk(set_matches(lambda m, reqs: m[:-1] + [None]))),
        ("non-int token", mk(bad_token(1.5))),
        ("str token", mk(bad_token("a"))),
        ("token too big", mk(bad_token(2 ** 40))),
        ("array('d') tokens", mk(req_attr(tokens=array.array("d", [1.0, 2.0])))),
        ("array('q') tokens", mk(req_attr(tokens=array.array("q", [1, 2])))),
        ("num_tokens < len(tokens)", mk(req_attr(num_tokens=3))),
        ("num_tokens -1", mk(req_attr(num_tokens=-1))),
        ("num_tokens float", mk(req_attr(num_tokens=2.5))),
        ("conversation_id int", mk(req_attr(conversation_id=5))),
        ("conversation_id surrogate", mk(req_attr(conversation_id="\ud800"))),
    ]


# Errors the binding can only detect where it reads tokens (kv_cache_aware).
TOKEN_ERRORS = {"non-int token", "str token", "token too big", "array('d') tokens", "array('q') tokens"}


class NothingHalfAppliedTest(unittest.TestCase):
    """After every error the router routes exactly like a twin that never saw the bad call."""

    CONFIGS = [
        dict(policy="kv_cache_aware", dp_size=4, cold_start_warmup=True, load_balance_weight=0.5),
        dict(policy="kv_cache_aware", dp_size=8, cold_start_warmup=True),
        dict(policy="conversation", dp_size=4, new_conv_placement="round_robin", max_sessions=4),
        dict(policy="conversation", dp_size=3, new_conv_placement="least_queued"),
        dict(policy="default", dp_size=4),
    ]

    def test_every_error_leaves_router_unchanged(self):
        for cfg in self.CONFIGS:
            dp = cfg["dp_size"]
            kv = cfg["policy"] == "kv_cache_aware"
            for name, bad in bad_calls(dp):
                if not kv and name in TOKEN_ERRORS:
                    continue
                with self.subTest(policy=cfg["policy"], dp=dp, error=name):
                    r, twin, oracle = Router(**cfg), Router(**cfg), ref.ReferenceRouter(**cfg)
                    try:
                        for call in range(4):
                            sts, reqs, m = good_batch(call, dp, n=2)  # small: warmup lasts
                            m = m if kv else None
                            a = r.route(sts, reqs, 8, m)
                            b = twin.route(sts, reqs, 8, m)
                            c = oracle.route(to_ref_states(sts), to_ref_requests(reqs), 8, to_ref_matches(m, reqs))
                            self.assertEqual(outcome(a), outcome(b))
                            self.assertEqual(outcome(a), ref_outcome(c))
                            self.assertEqual(r.state_digest(), twin.state_digest())
                            with self.assertRaises(InvalidArgumentError) as cm:
                                bad(r, call)
                            self.assertIsInstance(cm.exception, ValueError)
                            self.assertEqual(cm.exception.status, STATUS_INVALID_ARGUMENT)
                            self.assertTrue(str(cm.exception))
                            self.assertEqual(r.state_digest(), twin.state_digest())
                    finally:
                        r.close()
                        twin.close()

    def test_error_messages_name_the_problem(self):
        with Router(policy="kv_cache_aware", dp_size=4) as r:
            def msg(sts, reqs, maxn=8, m=None):
                with self.assertRaises(InvalidArgumentError) as cm:
                    r.route(sts, reqs, maxn, m)
                return str(cm.exception)

            self.assertIn("target_rank", msg(idle(4), [Request(1, tokens=[1], target_rank=4)]))
            self.assertIn("target_rank", msg(idle(4), [Request(1, tokens=[1], target_rank=-5)]))
            self.assertIn("7", msg(idle(4), [Request(7, tokens=[1]), Request(7, tokens=[2])]))
            self.assertIn("dp_size", msg(idle(3), [Request(1, tokens=[1])]))
            self.assertIn("rank order", msg(list(reversed(idle(4))), [Request(1, tokens=[1])]))
            self.assertIn("num_active_requests", msg(states((0, 0), (-1, 0), (0, 0), (0, 0)), []))
            self.assertIn("num_active_tokens", msg(states((0, 0), (0, -1), (0, 0), (0, 0)), []))
            self.assertIn("max_num_active_requests", msg(idle(4), [], maxn=0))
            self.assertIn("match_lens", msg(idle(4), [Request(1, tokens=[1])], m=[{}] * 3))
            self.assertIn("match", msg(idle(4), [Request(1, tokens=[1])], m=[[0], [0], [-1], [0]]))

    def test_ok_after_error_in_kv_warmup_sequence(self):
        # Explicit: a failing call whose first requests would consume warmup slots.
        with Router(policy="kv_cache_aware", dp_size=4, cold_start_warmup=True) as r:
            with self.assertRaises(InvalidArgumentError):
                r.route(idle(4), [Request(1, tokens=[1]), Request(2, tokens=[2]), Request(3, tokens=[3], target_rank=9)], 8)
            res = r.route(idle(4), [Request(i, tokens=[i]) for i in range(4)], 8)
            self.assertEqual(lists(res, 4), [[0], [1], [2], [3]])  # warmup still fully pending


# --- conversations -------------------------------------------------------------------------


class ConversationTest(unittest.TestCase):
    def test_stickiness_across_calls(self):
        for placement in ("round_robin", "least_queued"):
            with self.subTest(placement=placement):
                p = Pair(policy="conversation", dp_size=4, new_conv_placement=placement)
                first = p.route(self, idle(4), [Request(i, num_tokens=5, conversation_id="c%d" % i) for i in range(4)], 100)
                home = {"c%d" % i: k for i, k in enumerate(first.ranks)}
                for call in range(1, 6):
                    reqs = [Request(100 * call + i, num_tokens=5, conversation_id="c%d" % i) for i in range(4)]
                    res = p.route(self, states((5, 0), (0, 0), (9, 0), (1, 0)), reqs, 100)
                    self.assertEqual(res.ranks, [home["c%d" % i] for i in range(4)])
                p.close()

    def test_str_bytes_and_unicode_ids(self):
        ids = ["café", "日本語の会話", "emoji-\U0001F600", "a" * 256, "x\x00y"]
        with Router(policy="conversation", dp_size=5, new_conv_placement="round_robin") as r:
            first = r.route(idle(5), [Request(i, num_tokens=1, conversation_id=c) for i, c in enumerate(ids)], 100)
            self.assertEqual(first.ranks, [0, 1, 2, 3, 4])
            # The same conversations given as UTF-8 bytes / bytearray land on the same ranks.
            byt = [c.encode() if i % 2 else bytearray(c.encode()) for i, c in enumerate(ids)]
            again = r.route(states((9, 0), (0, 0), (0, 0), (0, 0), (0, 0)),
                            [Request(10 + i, num_tokens=1, conversation_id=b) for i, b in enumerate(byt)], 100)
            self.assertEqual(again.ranks, first.ranks)
        p = Pair(policy="conversation", dp_size=3)
        for call in range(3):
            p.route(self, idle(3), [Request(10 * call + i, num_tokens=1, conversation_id=c) for i, c in enumerate(ids)], 100)
        p.close()

    def test_empty_id_means_no_conversation(self):
        for cid in ("", b"", None):
            with self.subTest(cid=cid):
                p = Pair(policy="conversation", dp_size=3)
                for call in range(3):
                    p.route(self, idle(3), [Request(call * 10 + i, num_tokens=1, conversation_id=cid) for i in range(4)], 100)
                p.close()

    def test_lru_eviction_matches_reference(self):
        p = Pair(policy="conversation", dp_size=3, max_sessions=2, new_conv_placement="least_queued")
        rng = random.Random(3)
        for call in range(30):
            reqs = [Request(call * 10 + k, num_tokens=rng.randrange(9), conversation_id="c%d" % rng.randrange(5))
                    for k in range(3)]
            p.route(self, states(*[(rng.randrange(3), 0) for _ in range(3)]), reqs, 4)
        p.close()

    def test_other_policies_ignore_conversation_ids(self):
        for policy in ("default", "kv_cache_aware"):
            with Router(policy=policy, dp_size=3) as r1, Router(policy=policy, dp_size=3) as r2:
                a = r1.route(idle(3), [Request(i, tokens=[i], conversation_id="c") for i in range(5)], 8)
                b = r2.route(idle(3), [Request(i, tokens=[i]) for i in range(5)], 8)
                self.assertEqual(outcome(a), outcome(b))


class HostStateTest(unittest.TestCase):
    """The state a host reads and writes between decisions: the pending
    warmup ranks and the conversation map."""

    def test_pending_warmup_read_and_replaced(self):
        with Router(policy="kv_cache_aware", dp_size=4, cold_start_warmup=True) as r, \
                Router(policy="kv_cache_aware", dp_size=4, cold_start_warmup=True) as twin:
            self.assertEqual(r.pending_warmup(), [0, 1, 2, 3])
            r.set_pending_warmup({3, 1})
            self.assertEqual(r.pending_warmup(), [1, 3])
            res = r.route(idle(4), [Request(i, tokens=[i]) for i in range(3)], 8)
            self.assertEqual(res.ranks[:2], [1, 3])  # the smallest pending rank first
            self.assertEqual(r.pending_warmup(), [])
            twin.set_pending_warmup([1, 3, 3])
            twin.route(idle(4), [Request(i, tokens=[i]) for i in range(3)], 8)
            self.assertEqual(twin.state_digest(), r.state_digest())  # ranks that assign alike agree

    def test_pending_warmup_errors_change_nothing(self):
        with Router(policy="kv_cache_aware", dp_size=2) as r:
            d = r.state_digest()
            for bad, want in (([2], "0..1"), ([-1], "0..1"), (["0"], "ranks\\[0\\]"), ([1 << 40], "ranks\\[0\\]")):
                with self.subTest(bad=bad), self.assertRaisesRegex(InvalidArgumentError, want):
                    r.set_pending_warmup(bad)
            self.assertEqual((r.pending_warmup(), r.state_digest()), ([], d))
        with Router(policy="default", dp_size=2) as r:
            self.assertEqual(r.pending_warmup(), [])
            with self.assertRaisesRegex(InvalidArgumentError, "kv_cache_aware"):
                r.set_pending_warmup([0])

    def test_conversations_least_recent_first(self):
        with Router(policy="conversation", dp_size=2, max_sessions=3) as r:
            self.assertEqual(r.conversations(), [])
            r.route(idle(2), [Request(i, num_tokens=1, conversation_id=c) for i, c in enumerate(["a", "é", "c"])], 8)
            r.route(idle(2), [Request(10, num_tokens=1, conversation_id="a"),
                              Request(11, num_tokens=1, conversation_id="x" * 1024)], 8)
            self.assertEqual(r.conversations(), [("c", 0), ("a", 0), ("x" * 1024, 1)])
        r.close()
        with self.assertRaises(InvalidHandleError):
            r.conversations()


# --- state digest, KV capacity -------------------------------------------------------------


class StateDigestTest(unittest.TestCase):
    def test_twins_agree_and_state_changes_show(self):
        for cfg in (dict(policy="kv_cache_aware", dp_size=4, cold_start_warmup=True),
                    dict(policy="conversation", dp_size=4),
                    dict(policy="conversation", dp_size=4, new_conv_placement="least_queued")):
            with self.subTest(cfg=cfg), Router(**cfg) as a, Router(**cfg) as b:
                d0 = a.state_digest()
                self.assertIsInstance(d0, int)
                self.assertTrue(0 <= d0 < 2 ** 64)
                self.assertEqual(d0, b.state_digest())
                reqs = [Request(1, tokens=[1, 2], conversation_id="x")]
                a.route(idle(4), reqs, 8)
                self.assertNotEqual(a.state_digest(), d0)  # warmup slot used / conversation bound
                b.route(idle(4), reqs, 8)
                self.assertEqual(a.state_digest(), b.state_digest())

    def test_stateless_calls_keep_digest(self):
        with Router(policy="default", dp_size=3) as r:
            d0 = r.state_digest()
            r.route(idle(3), [Request(i, num_tokens=i) for i in range(9)], 8)
            self.assertEqual(r.state_digest(), d0)

    def test_digest_covers_exact_options(self):
        digests = set()
        for v in (0.5, math.nextafter(0.5, 0.0), math.nextafter(0.5, 1.0)):
            with Router(policy="kv_cache_aware", dp_size=2, match_rate_threshold=v) as r:
                digests.add(r.state_digest())
        self.assertEqual(len(digests), 3)
        with Router(policy="kv_cache_aware", dp_size=2) as r1, \
                Router(policy="kv_cache_aware", dp_size=2, load_balance_weight=1.0, match_rate_threshold=0.1,
                       fair_share_multiplier=2.0, cold_start_warmup=False) as r2:
            self.assertEqual(r1.state_digest(), r2.state_digest())  # explicit defaults == defaults

    def test_digest_after_close(self):
        r = Router(policy="default", dp_size=1)
        r.close()
        with self.assertRaises(InvalidHandleError):
            r.state_digest()


class CapacityTest(unittest.TestCase):
    def test_option_values(self):
        for v in (True, False, 1, 0, "true", "false"):
            with self.subTest(v=v):
                Router(policy="default", dp_size=2, capacity_aware=v).close()
        with self.assertRaises(ConfigError):
            Router(policy="default", dp_size=2, capacity_aware="sometimes")

    def test_capacity_fields_ignored_when_off(self):
        for policy in POLICIES:
            with self.subTest(policy=policy):
                p = Pair(policy=policy, dp_size=3)
                sts = [RankState(0, 0, 0, kv_capacity_tokens=100, free_kv_tokens=0, memory_pressure=True),
                       RankState(1, 1, 50, kv_capacity_tokens=10 ** 6, free_kv_tokens=10 ** 6),
                       RankState(2, 0, 10)]
                p.route(self, sts, [Request(i, tokens=prompt(40 + i), conversation_id="k%d" % i) for i in range(7)], 8)
                p.close()

    def test_unknown_capacity_changes_nothing_when_on(self):
        for policy in POLICIES:
            with self.subTest(policy=policy):
                with Router(policy=policy, dp_size=3, capacity_aware=True) as r:
                    rr = ref.ReferenceRouter(policy=policy, dp_size=3)
                    sts = states((0, 0), (1, 50), (0, 10))
                    reqs = [Request(i, tokens=prompt(40 + i), conversation_id="k%d" % i) for i in range(7)]
                    got = r.route(sts, reqs, 8)
                    want = rr.route(to_ref_states(sts), to_ref_requests(reqs), 8)
                    self.assertEqual(outcome(got), ref_outcome(want))

    def test_full_rank_avoided_when_on(self):
        # Default policy, two idle ranks: a 100-token request goes to rank 0 ...
        sts = [RankState(0, 0, 0, kv_capacity_tokens=1000, free_kv_tokens=10), RankState(1, 0, 0)]
        with Router(policy="default", dp_size=2) as r:
            self.assertEqual(r.route(sts, [Request(1, num_tokens=100)], 4).ranks, [0])
        # ... unless capacity awareness sees that rank 0 has room for only 10 tokens.
        with Router(policy="default", dp_size=2, capacity_aware=True) as r:
            self.assertEqual(r.route(sts, [Request(1, num_tokens=100)], 4).ranks, [1])

    def test_engine_kv_state(self):
        # router/examples_test.go's case: rank 0 holds all but 32 tokens of a
        # 4096-token prompt with 3000 tokens free. Reported as none
        # evictable, its prefix is held by running requests and the prompt
        # (512 tokens of output) fits there; unreported, rank 1 takes it.
        # Through both packers (the C one where it is built).
        from adprouter import _accel
        packers = [_accel.speedups, None] if _accel.speedups is not None else [None]
        for packer in packers:
            for evictable, want in ((0, 0), (None, 1)):
                with self.subTest(speedups=packer is not None, evictable=evictable):
                    saved = _accel.speedups
                    _accel.use(packer)
                    try:
                        sts = [RankState(0, 4, 6000, kv_capacity_tokens=65536, free_kv_tokens=3000,
                                         pending_kv_tokens=0, evictable_kv_tokens=evictable),
                               RankState(1, 4, 6000, kv_capacity_tokens=65536, free_kv_tokens=40000,
                                         pending_kv_tokens=8000, evictable_kv_tokens=evictable)]
                        with Router(preset="recommended", dp_size=2) as r:
                            got = r.route(sts, [Request(1, num_tokens=4096, max_new_tokens=512)], 8,
                                          match_lens=[[4064], [0]])
                        self.assertEqual(got.ranks, [want])
                    finally:
                        _accel.use(saved)

    def test_engine_kv_state_errors(self):
        with Router(preset="recommended", dp_size=2) as r:
            for sts, reqs, word in (
                    ([RankState(0, kv_capacity_tokens=100, free_kv_tokens=50, evictable_kv_tokens=51), RankState(1)],
                     [Request(1, num_tokens=10)], "evictable_kv_tokens"),
                    ([RankState(0, pending_kv_tokens=-1), RankState(1)], [Request(1, num_tokens=10)],
                     "pending_kv_tokens"),
                    ([RankState(0), RankState(1)], [Request(1, num_tokens=10, max_new_tokens=-3)], "max_new_tokens")):
                with self.subTest(word=word):
                    with self.assertRaisesRegex(InvalidArgumentError, word):
                        r.route(sts, reqs, 8)

    def test_values_past_their_c_type_name_the_field(self):
        """An int past its ABI field's C type is refused, with either packer,
        by a message naming the record, the field, the value and the type,
        and nothing changes."""
        from adprouter import _accel
        self.addCleanup(_accel.use, _accel.speedups)
        ok = [Request(1, num_tokens=10)]
        for sts, reqs, want in (
                (idle(2), [Request(1, num_tokens=10, max_new_tokens=2 ** 63)],
                 "requests[0]: max_new_tokens = 9223372036854775808 is out of the int64 range"),
                (idle(2), [Request(1, num_tokens=1), Request(2 ** 64, num_tokens=10)],
                 "requests[1]: id = 18446744073709551616 is out of the uint64 range"),
                (idle(2), [Request(1, num_tokens=10, target_rank=2 ** 31)],
                 "requests[0]: target_rank = 2147483648 is out of the int32 range"),
                (idle(2), [Request(1, num_tokens=10, lora_id=-1)],
                 "requests[0]: lora_id = -1 is out of the uint64 range"),
                ([RankState(0), RankState(1, kv_capacity_tokens=100, pending_kv_tokens=2 ** 63)], ok,
                 "states[1]: pending_kv_tokens = 9223372036854775808 is out of the int64 range"),
                ([RankState(2 ** 31), RankState(1)], ok, "states[0]: rank = 2147483648 is out of the int32 range")):
            for mod in (_accel.speedups, None):
                with self.subTest(want, c=mod is not None):
                    _accel.use(mod)
                    with Router(preset="recommended", dp_size=2) as r:
                        before = r.state_digest()
                        with self.assertRaises(InvalidArgumentError) as cm:
                            r.route(sts, reqs, 8)
                        self.assertEqual(str(cm.exception), want)
                        self.assertEqual(r.state_digest(), before)

    def test_memory_pressure_flag_accepted(self):
        with Router(policy="kv_cache_aware", dp_size=2, capacity_aware=True) as r:
            sts = [RankState(0, 0, 0, 1000, 500, memory_pressure=True), RankState(1, 0, 0, 1000, 1000, False)]
            self.assertEqual(len(r.route(sts, [Request(1, tokens=[1])], 4).ranks), 1)


# --- closing ----------------------------------------------------------------------------------


class CloseTest(unittest.TestCase):
    def test_route_after_close(self):
        r = Router(policy="default", dp_size=2)
        r.route(idle(2), [Request(1, num_tokens=1)], 2)
        r.close()
        with self.assertRaises(InvalidHandleError) as cm:
            r.route(idle(2), [Request(1, num_tokens=1)], 2)
        self.assertIsInstance(cm.exception, ValueError)
        self.assertIsInstance(cm.exception, Error)
        self.assertEqual(cm.exception.status, STATUS_INVALID_HANDLE)

    def test_close_twice(self):
        r = Router(policy="kv_cache_aware", dp_size=2)
        r.close()
        r.close()
        with self.assertRaises(InvalidHandleError):
            r.route(idle(2), [], 2)

    def test_context_manager_closes(self):
        with Router(policy="conversation", dp_size=2) as r:
            self.assertIs(r.__enter__(), r)
            r.route(idle(2), [Request(1, num_tokens=1, conversation_id="a")], 2)
        with self.assertRaises(InvalidHandleError):
            r.route(idle(2), [], 2)

    def test_context_manager_closes_on_exception(self):
        with self.assertRaises(KeyError):
            with Router(policy="default", dp_size=2) as r:
                raise KeyError("boom")
        with self.assertRaises(InvalidHandleError):
            r.route(idle(2), [], 2)

    def test_closing_one_router_leaves_others(self):
        a, b = Router(policy="default", dp_size=2), Router(policy="default", dp_size=2)
        a.close()
        self.assertEqual(lists(b.route(idle(2), [Request(1, num_tokens=1)], 2), 2), [[1], []])
        b.close()

    def test_many_routers_created_and_destroyed(self):
        for i in range(300):
            r = Router(policy=POLICIES[i % 3], dp_size=1 + i % 7)
            r.route(idle(1 + i % 7), [Request(1, tokens=[1])], 1)
            if i % 2:
                r.close()
            del r  # __del__ closes the rest

    def test_failed_construction_then_gc(self):
        for _ in range(10):
            with self.assertRaises(ConfigError):
                Router(policy="nope", dp_size=2)


# --- threads ----------------------------------------------------------------------------------


class ThreadTest(unittest.TestCase):
    def run_threads(self, n, target):
        errors = []

        def wrapped(k):
            try:
                target(k)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        ts = [threading.Thread(target=wrapped, args=(k,)) for k in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        self.assertFalse(errors, errors[:3])

    def test_one_router_many_threads(self):
        # A stateless configuration: every call has one right answer whatever the order.
        batches = [shared_prefix_batch(n_req=32, length=128, seed=s) for s in range(6)]
        sts = states((1, 100), (0, 0), (2, 300), (0, 50))
        with Router(policy="kv_cache_aware", dp_size=4) as r:
            want = [outcome(r.route(sts, [Request(i, tokens=t) for i, t in b], 16)) for b in batches]

            def work(k):
                for it in range(40):
                    j = (k + it) % len(batches)
                    res = r.route(sts, [Request(i, tokens=t) for i, t in batches[j]], 16)
                    if outcome(res) != want[j]:
                        raise AssertionError("thread %d iteration %d: wrong result" % (k, it))
                    if it % 7 == 0:
                        try:
                            r.route(sts, [Request(1, tokens=[1], target_rank=99)], 16)
                        except InvalidArgumentError as e:
                            if "target_rank" not in str(e):
                                raise AssertionError("message of another call: %s" % e)

            self.run_threads(6, work)

    def test_separate_routers_many_threads(self):
        def sequence(router):
            out = []
            for call in range(25):
                sts, reqs, m = good_batch(call, 4, n=5)
                out.append(outcome(router.route(sts, reqs, 6, m if router.policy == "kv_cache_aware" else None)))
            return out

        cfgs = [dict(policy="conversation", dp_size=4), dict(policy="kv_cache_aware", dp_size=4, cold_start_warmup=True),
                dict(policy="default", dp_size=4)]
        want = []
        for cfg in cfgs:
            with Router(**cfg) as r:
                want.append(sequence(r))

        def work(k):
            cfg = cfgs[k % len(cfgs)]
            for _ in range(3):
                with Router(**cfg) as r:
                    if sequence(r) != want[k % len(cfgs)]:
                        raise AssertionError("thread %d: sequence differs" % k)

        self.run_threads(6, work)

    def test_close_while_routing(self):
        for _ in range(5):
            r = Router(policy="default", dp_size=4)
            stop = threading.Event()
            seen = []

            def work(k):
                while not stop.is_set():
                    try:
                        r.route(idle(4), [Request(i, num_tokens=i) for i in range(64)], 32)
                    except InvalidHandleError:
                        seen.append(k)
                        return

            ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
            for t in ts:
                t.start()
            r.close()
            stop.set()
            for t in ts:
                t.join(30)
            with self.assertRaises(InvalidHandleError):
                r.route(idle(4), [], 4)


# --- loading ----------------------------------------------------------------------------------


def run_python(code, env_extra=None, env_remove=()):
    env = dict(os.environ)
    for k in env_remove:
        env.pop(k, None)
    env["PYTHONPATH"] = PYTHON_DIR + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


ROUTE_SNIPPET = r"""
import json, adprouter
from adprouter import Router, RankState, Request
r = Router(policy="kv_cache_aware", dp_size=4)
res = r.route([RankState(i) for i in range(4)], [Request(i, tokens=list(range(10))) for i in range(8)], 100)
print(json.dumps({"path": adprouter.library_path(), "assignment": [res.assignment[k] for k in range(4)],
                  "maps": [l.split()[-1] for l in open("/proc/self/maps") if "adprouter" in l]}))
"""
EXAMPLE_7 = [[3, 5], [2, 7], [0, 4], [1, 6]]


class LoadingTest(unittest.TestCase):
    def test_plain_ctypes_cdll(self):
        lib = ctypes.CDLL(LIB)
        lib.adpr_abi_version.restype = ctypes.c_uint32
        self.assertEqual(lib.adpr_abi_version(), adprouter.ABI_VERSION)
        lib.adpr_version.restype = ctypes.c_char_p
        self.assertEqual(lib.adpr_version().decode(), adprouter.version())
        lib.adpr_strerror.restype = ctypes.c_char_p
        lib.adpr_strerror.argtypes = [ctypes.c_int32]
        for status in range(5):
            self.assertTrue(lib.adpr_strerror(status))
        lib.adpr_router_destroy.argtypes = [ctypes.c_uint64]
        self.assertEqual(lib.adpr_router_destroy(0), STATUS_INVALID_HANDLE)
        self.assertEqual(lib.adpr_router_destroy(2 ** 64 - 1), STATUS_INVALID_HANDLE)

    def test_dlopen_rtld_now(self):
        lib = ctypes.CDLL(LIB, mode=os.RTLD_NOW | os.RTLD_LOCAL)
        lib.adpr_abi_version.restype = ctypes.c_uint32
        self.assertEqual(lib.adpr_abi_version(), adprouter.ABI_VERSION)

    def test_ld_bind_now_subprocess(self):
        p = run_python(ROUTE_SNIPPET, {"LD_BIND_NOW": "1"}, env_remove=("ADPROUTER_LIBRARY",))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["assignment"], EXAMPLE_7)

    def test_default_path(self):
        # An installed package carries its library; a source tree's package
        # has none and uses the tree's build/.
        p = run_python(ROUTE_SNIPPET, env_remove=("ADPROUTER_LIBRARY",))
        self.assertEqual(p.returncode, 0, p.stderr)
        out = json.loads(p.stdout)
        bundled = os.path.join(PYTHON_DIR, "adprouter", "libadprouter.so")
        if os.path.exists(bundled):
            want = bundled
        else:
            want = os.path.join(os.path.dirname(PYTHON_DIR), "build", "libadprouter.so")
        self.assertEqual(os.path.realpath(out["path"]), os.path.realpath(want))
        self.assertIn(os.path.realpath(want), [os.path.realpath(m) for m in out["maps"]])

    def test_bundled_library_is_preferred(self):
        # A copy of the package with a library inside, next to a build/ that
        # has none: the bundled one loads, and ADPROUTER_LIBRARY still wins.
        with tempfile.TemporaryDirectory() as d:
            pkg = os.path.join(d, "python", "adprouter")
            shutil.copytree(os.path.join(PYTHON_DIR, "adprouter"), pkg,
                            ignore=shutil.ignore_patterns("__pycache__", "*.so"))
            bundled = os.path.join(pkg, "libadprouter.so")
            shutil.copyfile(os.path.realpath(LIB), bundled)
            other = os.path.join(d, "other-adprouter.so")
            shutil.copyfile(os.path.realpath(LIB), other)
            for override, want in ((None, bundled), (other, other)):
                env = {k: v for k, v in os.environ.items() if k != "ADPROUTER_LIBRARY"}
                env["PYTHONPATH"] = os.path.dirname(pkg)
                if override:
                    env["ADPROUTER_LIBRARY"] = override
                p = subprocess.run([sys.executable, "-c", ROUTE_SNIPPET], capture_output=True,
                                   text=True, timeout=120, env=env, cwd=d)
                self.assertEqual(p.returncode, 0, p.stderr)
                out = json.loads(p.stdout)
                self.assertEqual(out["path"], want)
                self.assertEqual(set(out["maps"]), {want})  # that file alone was mapped
                self.assertEqual(out["assignment"], EXAMPLE_7)

    def test_env_var_path_is_honoured(self):
        with tempfile.TemporaryDirectory() as d:
            copy = os.path.join(d, "my-adprouter-copy.so")
            shutil.copyfile(os.path.realpath(LIB), copy)
            p = run_python(ROUTE_SNIPPET, {"ADPROUTER_LIBRARY": copy})
            self.assertEqual(p.returncode, 0, p.stderr)
            out = json.loads(p.stdout)
            self.assertEqual(out["path"], copy)
            self.assertIn(copy, out["maps"])  # that file, not build/, was mapped
            self.assertEqual(out["assignment"], EXAMPLE_7)

    def test_env_var_bad_path(self):
        code = r"""
import adprouter  # importing never loads the library
try:
    adprouter.Router(policy="default", dp_size=2)
except adprouter.Error as e:
    print("ERROR:", e)
else:
    print("NO ERROR")
"""
        with tempfile.TemporaryDirectory() as d:
            notlib = os.path.join(d, "not-a-library.so")
            with open(notlib, "w") as f:
                f.write("hello")
            for path in (os.path.join(d, "missing", "libadprouter.so"), notlib, d):
                with self.subTest(path=path):
                    p = run_python(code, {"ADPROUTER_LIBRARY": path})
                    self.assertEqual(p.returncode, 0, p.stderr)
                    self.assertTrue(p.stdout.startswith("ERROR:"), p.stdout + p.stderr)
                    self.assertIn(path, p.stdout)
                    self.assertIn("ADPROUTER_LIBRARY", p.stdout)

    @unittest.skipUnless(shutil.which("nm"), "nm not installed")
    def test_only_adpr_symbols_exported(self):
        out = subprocess.run(["nm", "-D", "--defined-only", LIB], capture_output=True, text=True, check=True).stdout
        names = [line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()]
        exported = [n for n in names if not n.startswith("ADPROUTER_")]  # the version node
        self.assertTrue(exported)
        self.assertEqual([n for n in exported if not n.startswith("adpr_")], [])

    @unittest.skipUnless(shutil.which("readelf"), "readelf not installed")
    def test_no_gpu_library_needed_at_load_time(self):
        # Loading must work on a machine without an NVIDIA driver: nothing GPU-related
        # may be a DT_NEEDED dependency (NVML, if used, is looked up at run time).
        out = subprocess.run(["readelf", "-d", os.path.realpath(LIB)], capture_output=True, text=True,
                             check=True).stdout
        needed = [line.split("[")[-1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]
        self.assertTrue(needed)
        for name in needed:
            self.assertNotRegex(name.lower(), "nvidia|cuda|nvml", needed)
        self.assertIn("(SONAME)", out)


if __name__ == "__main__":
    unittest.main()
