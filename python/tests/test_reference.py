"""Tests of the pure-Python reference router (python/tests/reference.py).

Run from the repository root:
    python3 -m unittest discover -s python/tests -p 'test_reference.py'

The module is loaded by file path so these tests neither need nor exercise
python/adprouter/__init__.py. The worked examples and test vectors of
docs/ROUTING.md are fixtures (testdata/routing, read by routing_fixtures.py);
the tests here check the reference's details beyond them.
"""

import importlib.util
import json
import math
import os
import random
import subprocess
import sys
import unittest

import routing_fixtures

_HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE_PATH = os.path.join(_HERE, "reference.py")


def _load_reference():
    spec = importlib.util.spec_from_file_location("adprouter_reference_under_test", REFERENCE_PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


ref = _load_reference()
RankState = ref.RankState
Request = ref.Request
ReferenceRouter = ref.ReferenceRouter


def states(*loads):
    """states((reqs, tokens), ...) -> [RankState(rank, reqs, tokens), ...] in rank order."""
    return [RankState(i, a, t) for i, (a, t) in enumerate(loads)]


def idle(dp_size):
    return states(*[(0, 0)] * dp_size)


def prompt(n):
    """The spec's default prompt of n tokens: 0..n-1."""
    return list(range(n))


def lists(result, dp_size):
    """Assignment as a list of per-rank lists (and check every rank is present)."""
    assert sorted(result.assignment) == list(range(dp_size)), result.assignment
    return [result.assignment[r] for r in range(dp_size)]


# ======================================================================================
# The routing fixtures (testdata/routing): the worked examples and test vectors of
# docs/ROUTING.md and the cases shared with the Go and C++ suites.
# ======================================================================================


class ReferenceAdapter:
    """Runs the fixtures through the reference; shuffle and genrand vectors are also
    checked against CPython's random module, which the reference uses. The reference
    implements only the reference's options: router blocks that use more (options
    beyond them, KV capacity in rank states, scoped requests) and receipts are
    skipped, each as a skipped subTest that says why."""

    check_generator = True
    options = frozenset(routing_fixtures.REFERENCE_OPTIONS)
    receipts = False
    kv_states = False
    scoped_requests = False

    def new(self, options):
        return ReferenceRouter(**routing_fixtures.reference_options(options))

    def route(self, router, call):
        reqs = [Request(q.id, q.tokens, q.num_tokens, q.target_rank, q.relax, q.conversation_id)
                for q in call.requests]
        res = router.route(states(*[s[:2] for s in call.states]), reqs, call.maxn, call.matches)
        return lists(res, router.dp_size), res.expected, res.unassigned

    def stats(self, router):
        snap = router.snapshot()
        return len(snap["pending_warmup"]), len(snap["sessions"])

    def state(self, router):
        snap = router.snapshot()
        return snap["pending_warmup"], snap["sessions"]


class FixturesTest(unittest.TestCase):
    def test_routing_fixtures(self):
        self.assertGreater(routing_fixtures.run_fixtures(self, ReferenceAdapter(), "the reference"), 0)


# ======================================================================================
# Default policy details.
# ======================================================================================


class DefaultPolicyTest(unittest.TestCase):
    def test_explicit_placements_come_first(self):
        router = ReferenceRouter("default", 1)
        res = router.route(idle(1), [Request(1, prompt(5)), Request(2, prompt(5), target_rank=0)], 10)
        self.assertEqual(lists(res, 1), [[2, 1]])
        self.assertEqual(res.expected, 2)

    def test_strict_sorts_before_relaxed(self):
        # Rank 0 has one slot left; the strict request (later in input) gets it, the
        # relaxed one falls through to balancing and lands on rank 1.
        router = ReferenceRouter("default", 2)
        reqs = [Request(1, prompt(5), target_rank=0, relax=True), Request(2, prompt(5), target_rank=0, relax=False)]
        res = router.route(states((1, 0), (0, 0)), reqs, 2)
        self.assertEqual(lists(res, 2), [[2], [1]])

    def test_largest_prompt_first_and_heap_order(self):
        # Balanced requests go largest first to the lowest (tokens, count, rank).
        router = ReferenceRouter("default", 2)
        reqs = [Request(1, prompt(2)), Request(2, prompt(50)), Request(3, prompt(10))]
        res = router.route(states((0, 0), (0, 0)), reqs, 10)
        # 2 (50) -> rank 0; 3 (10) -> rank 1; 1 (2) -> rank 1 (10 < 50).
        self.assertEqual(lists(res, 2), [[2], [3, 1]])
        self.assertEqual(res.expected, 2)

    def test_num_tokens_overrides_prefix_length(self):
        router = ReferenceRouter("default", 2)
        reqs = [Request(1, prompt(64), num_tokens=1000), Request(2, prompt(100))]
        res = router.route(idle(2), reqs, 10)
        self.assertEqual(lists(res, 2), [[1], [2]])

    def test_hard_cap_with_overfull_state(self):
        # A rank reported above maxn never receives anything; expected is clamped to maxn.
        router = ReferenceRouter("default", 2)
        res = router.route(states((7, 0), (0, 0)), [Request(i, prompt(1)) for i in range(3)], 5)
        self.assertEqual(lists(res, 2), [[], [0, 1, 2]])
        self.assertEqual(res.expected, 5)


# ======================================================================================
# KV-cache-aware policy details.
# ======================================================================================


class KvPolicyTest(unittest.TestCase):
    def test_prefix_grouping_longer_prompt_first(self):
        # Same first 64 tokens: the longer prompt comes first; an empty prompt sorts
        # before everything.
        router = ReferenceRouter("kv_cache_aware", 2)
        reqs = [Request(1, prompt(64), num_tokens=70), Request(2, prompt(64), num_tokens=90), Request(3, None)]
        res = router.route(states((2, 0), (1, 0)), reqs, 2)
        self.assertEqual(lists(res, 2), [[], [3]])
        res = router.route(states((2, 0), (1, 0)), reqs[:2], 2)
        self.assertEqual(lists(res, 2), [[], [2]])
        self.assertEqual(res.unassigned, [1])

    def test_zero_token_requests_on_idle_system(self):
        # The reference divides by zero here; the denominator is floored at 1.
        router = ReferenceRouter("kv_cache_aware", 4)
        res = router.route(idle(4), [Request(i, None) for i in range(8)], 100)
        self.assertEqual(sorted(sum(lists(res, 4), [])), list(range(8)))
        self.assertEqual(res.unassigned, [])

    def test_gate_off_still_uses_raw_match_for_tokens(self):
        # Threshold 0.9: 80/100 does not open the gate, so scores ignore the match,
        # but the chosen rank's token load still grows by n - match = 20 (not 100).
        router = ReferenceRouter("kv_cache_aware", 2, match_rate_threshold=0.9)
        reqs = [Request(1, prompt(100)), Request(2, prompt(100))]
        res = router.route(states((0, 0), (0, 50)), reqs, 10, [{1: 80}, {}])
        # Request 1: rank 0 scores 100, rank 1 scores 100 + 50/100*100 = 150 -> rank 0.
        # Request 2: rank 0 scores 100 + 20/100*100 = 120, rank 1 150 -> rank 0 again
        # (had the load grown by 100, rank 0 would score 200 and lose).
        self.assertEqual(lists(res, 2), [[1, 2], []])
        self.assertEqual(res.expected, 2)

    def test_gate_is_strictly_greater(self):
        # match / n == threshold exactly: the gate stays off and the pure tie between
        # two idle ranks is broken by random.Random(id).shuffle([0, 1]).
        router = ReferenceRouter("kv_cache_aware", 2, match_rate_threshold=0.5)
        res = router.route(idle(2), [Request(7, prompt(100))], 10, [{}, {7: 50}])
        order = [0, 1]
        random.Random(7).shuffle(order)
        self.assertEqual(res.assignment[order[0]], [7])
        # Just above the threshold the match on rank 1 decides.
        router = ReferenceRouter("kv_cache_aware", 2, match_rate_threshold=0.49)
        res = router.route(idle(2), [Request(7, prompt(100))], 10, [{}, {7: 50}])
        self.assertEqual(lists(res, 2), [[], [7]])

    def test_hard_cap_in_explicit_pass(self):
        router = ReferenceRouter("kv_cache_aware", 2)
        res = router.route(states((3, 0), (0, 0)), [Request(1, prompt(4), target_rank=0, relax=False)], 3)
        self.assertEqual(lists(res, 2), [[], [1]])


# ======================================================================================
# Conversation-affinity policy.
# ======================================================================================


class ConversationPolicyTest(unittest.TestCase):
    def test_stickiness_and_binding_beats_target(self):
        router = ReferenceRouter("conversation", 3)
        res = router.route(idle(3), [Request(1, conversation_id="A"), Request(2, conversation_id="B")], 10)
        self.assertEqual(lists(res, 3), [[1], [2], []])
        self.assertEqual(res.expected, 2)
        self.assertEqual(router.snapshot(), {"pending_warmup": [], "sessions": [("A", 0), ("B", 1)], "cursor": 2})

        # A returns home to rank 0 although it is the busiest rank and above the soft
        # cap; a target hint does not beat the binding.
        reqs = [Request(3, conversation_id="A"), Request(4, conversation_id="C"), Request(5, conversation_id="A", target_rank=2)]
        res = router.route(states((5, 0), (0, 0), (0, 0)), reqs, 10)
        self.assertEqual(lists(res, 3), [[3, 5], [], [4]])
        self.assertEqual(res.expected, 7)  # soft cap 6, raised to the max count 7
        self.assertEqual(router.snapshot()["sessions"], [("B", 1), ("C", 2), ("A", 0)])
        self.assertEqual(router.snapshot()["cursor"], 0)

    def test_explicit_pass_binds_new_conversation(self):
        router = ReferenceRouter("conversation", 3)
        reqs = [Request(1, conversation_id="A"), Request(2, conversation_id="A", target_rank=2)]
        res = router.route(idle(3), reqs, 10)
        # Request 2 binds A to rank 2 in the explicit pass; request 1 (no target, A
        # unbound at the time) then finds A bound and follows it.
        self.assertEqual(lists(res, 3), [[], [], [2, 1]])
        self.assertEqual(router.snapshot()["sessions"], [("A", 2)])
        self.assertEqual(router.snapshot()["cursor"], 0)

    def test_relax_false_without_target_sorts_first(self):
        router = ReferenceRouter("conversation", 2)
        reqs = [Request(1), Request(2, relax=False)]
        res = router.route(idle(2), reqs, 10)
        self.assertEqual(lists(res, 2), [[2], [1]])

    def test_empty_conversation_id_is_no_conversation(self):
        router = ReferenceRouter("conversation", 2)
        res = router.route(idle(2), [Request(1, conversation_id=""), Request(2, conversation_id="", target_rank=1)], 10)
        self.assertEqual(lists(res, 2), [[1], [2]])
        self.assertEqual(router.snapshot()["sessions"], [])

    def test_overflow_keeps_binding_without_refresh(self):
        router = ReferenceRouter("conversation", 2, new_conv_placement="least_queued", max_sessions=2)
        res = router.route(idle(2), [Request(1, conversation_id="A", target_rank=1, relax=False)], 2)
        self.assertEqual(lists(res, 2), [[], [1]])
        # Rank 1 (A's home) is at the hard cap: A overflows to rank 0, keeps home 1.
        res = router.route(states((0, 0), (2, 0)), [Request(2, conversation_id="A"), Request(3, conversation_id="B")], 2)
        self.assertEqual(lists(res, 2), [[2, 3], []])
        self.assertEqual(res.expected, 2)
        self.assertEqual(router.snapshot()["sessions"], [("A", 1), ("B", 0)])
        # A was not refreshed, so the next new conversation evicts it.
        router.route(idle(2), [Request(4, conversation_id="C")], 2)
        self.assertEqual(router.snapshot()["sessions"], [("B", 0), ("C", 0)])
        # A is new again: least_queued puts it on rank 0, not its old home 1.
        res = router.route(states((0, 0), (1, 0)), [Request(5, conversation_id="A")], 2)
        self.assertEqual(lists(res, 2), [[5], []])

    def test_lru_eviction_and_refresh(self):
        router = ReferenceRouter("conversation", 2, new_conv_placement="least_queued", max_sessions=2)
        res = router.route(idle(2), [Request(1, conversation_id="A"), Request(2, conversation_id="B")], 10)
        self.assertEqual(lists(res, 2), [[1], [2]])
        # A's sticky return refreshes it; binding C then evicts B (least recent).
        res = router.route(idle(2), [Request(3, conversation_id="A"), Request(4, conversation_id="C")], 10)
        self.assertEqual(lists(res, 2), [[3], [4]])
        self.assertEqual(router.snapshot()["sessions"], [("A", 0), ("C", 1)])
        # B is new: it goes to the least queued rank 0 (not its old home 1) and evicts A.
        res = router.route(states((0, 0), (5, 0)), [Request(5, conversation_id="B")], 10)
        self.assertEqual(lists(res, 2), [[5], []])
        self.assertEqual(router.snapshot()["sessions"], [("C", 1), ("B", 0)])

    def test_eviction_within_one_batch(self):
        router = ReferenceRouter("conversation", 2, max_sessions=1)
        reqs = [Request(1, conversation_id="A"), Request(2, conversation_id="B"), Request(3, conversation_id="A")]
        res = router.route(idle(2), reqs, 10)
        # A -> rank 0 (bound), B -> rank 1 (evicts A), A again is new -> rank 0.
        self.assertEqual(lists(res, 2), [[1, 3], [2]])
        self.assertEqual(router.snapshot()["sessions"], [("A", 0)])

    def test_multiplier_clamped_to_one(self):
        router = ReferenceRouter("conversation", 2, fair_share_multiplier=0.25, new_conv_placement="least_queued")
        res = router.route(idle(2), [Request(i) for i in range(4)], 10)
        self.assertEqual(lists(res, 2), [[0, 2], [1, 3]])
        self.assertEqual(res.expected, 2)  # ceil(max(1.0, 0.25) * 2)



# ======================================================================================
# Validation: every error is raised before any state changes.
# ======================================================================================


class ValidationTest(unittest.TestCase):
    def test_config_errors(self):
        bad_configs = [
            dict(policy="nope", dp_size=2),
            dict(policy="default", dp_size=0),
            dict(policy="default"),
            dict(policy="kv_cache_aware", dp_size=2.0),
            dict(policy="kv_cache_aware", dp_size=True),
            dict(policy="kv_cache_aware", dp_size=2, load_balance_weight=-1.0),
            dict(policy="kv_cache_aware", dp_size=2, load_balance_weight=math.inf),
            dict(policy="kv_cache_aware", dp_size=2, load_balance_weight=math.nan),
            dict(policy="kv_cache_aware", dp_size=2, match_rate_threshold=-0.1),
            dict(policy="kv_cache_aware", dp_size=2, match_rate_threshold=math.nan),
            dict(policy="kv_cache_aware", dp_size=2, fair_share_multiplier=0.5),
            dict(policy="kv_cache_aware", dp_size=2, fair_share_multiplier=math.inf),
            dict(policy="kv_cache_aware", dp_size=2, fair_share_multiplier=math.nan),
            dict(policy="conversation", dp_size=2, fair_share_multiplier=math.inf),
            dict(policy="conversation", dp_size=2, max_sessions=0),
            dict(policy="conversation", dp_size=2, new_conv_placement="random"),
            dict(policy="kv_cache_aware", dp_size=2, cold_start_warmup=1),
        ]
        for cfg in bad_configs:
            with self.subTest(cfg=cfg):
                with self.assertRaises(ValueError) as ctx:
                    ReferenceRouter(**cfg)
                self.assertTrue(str(ctx.exception))

    def test_accepted_configs(self):
        # Conversation clamps a small multiplier; default ignores it entirely.
        ReferenceRouter("conversation", 2, fair_share_multiplier=0.5)
        ReferenceRouter("default", 2, fair_share_multiplier=0.5)
        ReferenceRouter("default", 2, fair_share_multiplier=math.nan)
        ReferenceRouter("kv_cache_aware", 2, fair_share_multiplier=1, load_balance_weight=0, match_rate_threshold=0)

    def _bad_calls(self, dp):
        ok = idle(dp)
        good = [Request(100, prompt(4), conversation_id="X"), Request(101, prompt(4), conversation_id="Y")]
        return [
            ("maxn 0", ok, good, 0, None),
            ("maxn bool", ok, good, True, None),
            ("too few states", ok[:-1], good, 10, None),
            ("too many states", ok + [RankState(dp, 0, 0)], good, 10, None),
            ("rank order", [RankState(dp - 1 - i, 0, 0) for i in range(dp)], good, 10, None),
            ("negative requests", states(*[(0, 0)] * (dp - 1), (-1, 0)), good, 10, None),
            ("negative tokens", states(*[(0, 0)] * (dp - 1), (0, -5)), good, 10, None),
            ("target too big", ok, good + [Request(102, target_rank=dp)], 10, None),
            ("target negative", ok, good + [Request(102, target_rank=-1)], 10, None),
            ("duplicate id", ok, good + [Request(100)], 10, None),
            ("negative id", ok, good + [Request(-1)], 10, None),
            ("id too big", ok, good + [Request(2**64)], 10, None),
            ("num_tokens < len(tokens)", ok, good + [Request(102, prompt(10), num_tokens=5)], 10, None),
            ("negative num_tokens", ok, good + [Request(102, num_tokens=-1)], 10, None),
            ("relax not bool", ok, good + [Request(102, relax=None)], 10, None),
            ("conversation not str", ok, good + [Request(102, conversation_id=7)], 10, None),
            ("negative match", ok, good, 10, [{100: 2}] + [{101: -1}] * (dp - 1)),
            ("match_lens length", ok, good, 10, [{}] * (dp + 1)),
        ]

    def _check_state_unchanged(self, make_router, warm_up_calls, dp):
        router = make_router()
        twin = make_router()
        for st, reqs, maxn in warm_up_calls:
            router.route(st, reqs, maxn)
            twin.route(st, reqs, maxn)
        before = router.snapshot()
        for name, st, reqs, maxn, matches in self._bad_calls(dp):
            with self.subTest(bad=name):
                with self.assertRaises(ValueError):
                    router.route(st, reqs, maxn, matches)
                self.assertEqual(router.snapshot(), before)
        # And the router still behaves exactly like one that never saw the bad calls.
        follow = [Request(200 + i, prompt(4), conversation_id=c) for i, c in enumerate("XAYZ")]
        self.assertEqual(router.route(idle(dp), follow, 10), twin.route(idle(dp), follow, 10))
        self.assertEqual(router.snapshot(), twin.snapshot())

    def test_errors_leave_kv_warmup_state_unchanged(self):
        dp = 3
        self._check_state_unchanged(
            lambda: ReferenceRouter("kv_cache_aware", dp, cold_start_warmup=True),
            [(idle(dp), [Request(1, prompt(4))], 10)],
            dp,
        )

    def test_errors_leave_conversation_state_unchanged(self):
        dp = 3
        for placement in ("round_robin", "least_queued"):
            with self.subTest(placement=placement):
                self._check_state_unchanged(
                    lambda: ReferenceRouter("conversation", dp, max_sessions=3, new_conv_placement=placement),
                    [(idle(dp), [Request(1, conversation_id="A"), Request(2, conversation_id="B")], 10)],
                    dp,
                )

    def test_errors_in_default_policy(self):
        dp = 2
        self._check_state_unchanged(lambda: ReferenceRouter("default", dp), [], dp)

    def test_error_message_names_field(self):
        router = ReferenceRouter("default", 2)
        with self.assertRaisesRegex(ValueError, "target_rank"):
            router.route(idle(2), [Request(1, target_rank=2)], 4)
        with self.assertRaisesRegex(ValueError, "duplicate"):
            router.route(idle(2), [Request(1), Request(1)], 4)
        with self.assertRaisesRegex(ValueError, r"states\[1\]\.rank"):
            router.route([RankState(0, 0, 0), RankState(0, 0, 0)], [], 4)
        with self.assertRaisesRegex(ValueError, "max_num_active_requests"):
            router.route(idle(2), [], 0)


# ======================================================================================
# JSON command line.
# ======================================================================================


def _jreq(i, n=None, **kw):
    d = {"id": i, "tokens": prompt(n) if n is not None else None, "num_tokens": None, "target_rank": None,
         "relax": True, "conversation_id": None}
    d.update(kw)
    return d


class JsonCliTest(unittest.TestCase):
    DOC = {
        "cases": [
            {  # KV-aware, match_lens as a per-rank table
                "config": {"policy": "kv_cache_aware", "dp_size": 2, "load_balance_weight": 10},
                "calls": [
                    {"states": [[0, 5, 5000], [1, 0, 0]], "requests": [_jreq(1, 100)], "max_num_active_requests": 8,
                     "match_lens": [[80], [0]]},
                ],
            },
            {  # eight tied requests with the largest ids
                "config": {"policy": "kv_cache_aware", "dp_size": 4},
                "calls": [
                    {"states": [[r, 0, 0] for r in range(4)],
                     "requests": [_jreq(2**64 - 1 - i, 10) for i in range(8)],
                     "max_num_active_requests": 100, "match_lens": None},
                ],
            },
            {  # conversation: bind, a failing call, then a sticky return
                "config": {"policy": "conversation", "dp_size": 3, "new_conv_placement": "round_robin"},
                "calls": [
                    {"states": [[r, 0, 0] for r in range(3)],
                     "requests": [_jreq(1, 4, conversation_id="A"), _jreq(2, 4, conversation_id="B")],
                     "max_num_active_requests": 10},
                    {"states": [[r, 0, 0] for r in range(3)],
                     "requests": [_jreq(3, 4, conversation_id="C"), _jreq(3, 4)],
                     "max_num_active_requests": 10},
                    {"states": [[0, 5, 0], [1, 0, 0], [2, 0, 0]],
                     "requests": [_jreq(4, 4, conversation_id="A"), _jreq(5, 4, conversation_id="C")],
                     "max_num_active_requests": 10},
                ],
            },
            {  # default policy, overflow into unassigned
                "config": {"policy": "default", "dp_size": 2},
                "calls": [
                    {"states": [[0, 1, 0], [1, 2, 0]],
                     "requests": [_jreq(10, 5), _jreq(11, 9), _jreq(12, 1)],
                     "max_num_active_requests": 2},
                ],
            },
            {  # invalid config: every call reports it
                "config": {"policy": "kv_cache_aware", "dp_size": 2, "fair_share_multiplier": 0.5},
                "calls": [{"states": [], "requests": [], "max_num_active_requests": 1}] * 2,
            },
        ]
    }

    def _check(self, out):
        results = out["results"]
        self.assertEqual(len(results), 5)
        # The command line must agree with the Python API (the decisions themselves are
        # checked by the fixtures).
        api = ReferenceRouter("kv_cache_aware", 2, load_balance_weight=10).route(
            states((5, 5000), (0, 0)), [Request(1, prompt(100))], 8, [{1: 80}, {1: 0}])
        self.assertEqual(results[0], [{"assignment": lists(api, 2), "expected": api.expected, "unassigned": []}])

        ids = [2**64 - 1 - i for i in range(8)]
        api = ReferenceRouter("kv_cache_aware", 4).route(idle(4), [Request(i, prompt(10)) for i in ids], 100)
        self.assertEqual(results[1], [{"assignment": lists(api, 4), "expected": 4, "unassigned": []}])

        conv = results[2]
        self.assertEqual(conv[0], {"assignment": [[1], [2], []], "expected": 2, "unassigned": []})
        self.assertIn("error", conv[1])
        self.assertIn("duplicate", conv[1]["error"])
        # C was not bound by the failed call; the cursor is still at 2.
        self.assertEqual(conv[2], {"assignment": [[4], [], [5]], "expected": 6, "unassigned": []})

        self.assertEqual(results[3], [{"assignment": [[11], []], "expected": 2, "unassigned": [10, 12]}])
        self.assertEqual(len(results[4]), 2)
        for r in results[4]:
            self.assertIn("fair_share_multiplier", r["error"])

    def test_run_cases_in_process(self):
        self._check(ref.run_cases(json.loads(json.dumps(self.DOC))))

    def test_cli_round_trip(self):
        proc = subprocess.run(
            [sys.executable, REFERENCE_PATH],
            input=json.dumps(self.DOC),
            capture_output=True,
            text=True,
            timeout=60,
        )
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self._check(json.loads(proc.stdout))

    def test_cli_malformed_call_is_an_error_entry(self):
        doc = {"cases": [{"config": {"policy": "default", "dp_size": 1},
                          "calls": [{"states": [[0, 0, 0]], "requests": [{"id": 1, "bogus": 2}],
                                     "max_num_active_requests": 1},
                                    {"states": [[0, 0, 0]], "requests": [], "max_num_active_requests": 1,
                                     "match_lens": [[1]]},
                                    {"states": [[0, 0, 0]], "requests": [{"id": 1}]}]}]}
        out = ref.run_cases(doc)
        self.assertEqual(len(out["results"][0]), 3)
        for r in out["results"][0]:
            self.assertIn("error", r)

    def test_cli_bad_input_exit_code(self):
        proc = subprocess.run([sys.executable, REFERENCE_PATH], input="not json", capture_output=True, text=True,
                              timeout=60)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("bad input", proc.stderr)


if __name__ == "__main__":
    unittest.main()
