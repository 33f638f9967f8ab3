"""The executor contract of adprouter.trtllm at TRTLLM_COMMIT, pinned with
this project's fakes (trtllm_fakes.py): the retiring-request helpers, the
RankState / RankIterStatsPayload wire format, gather_all_rank_states of each
router (units, retiring requests counted apart, helix, the KV router's
uncached and in-transfer load, the exact list sent to tp_allgather), the
factory, and each router's placement rules, expected_num_active_requests and
the live attributes the executor reads (_pending_warmup_ranks,
_conv_to_rank, _new_conv_placement, _all_ranks_prefix_matches).

Every expectation was worked out by hand from the rules at the pinned
commit; none relies on the carry-over adprouter adds where TensorRT-LLM
would drop a request or raise.
"""

import collections
import enum
import os
import sys
import unittest
from types import SimpleNamespace
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trtllm_fakes as F  # noqa: E402

from adprouter import trtllm as T  # noqa: E402

_env = mock.patch.dict(os.environ, {k: v for k, v in os.environ.items()
                                    if not (k.startswith("ADPROUTER_") and k != "ADPROUTER_LIBRARY")},
                       clear=True)


def setUpModule():
    _env.start()  # no ADPROUTER_* option from the caller may change a decision


def tearDownModule():
    _env.stop()


Stage = F.LlmRequestState


class Lingering(enum.Enum):
    """States a request can linger in that are not retirement (names as in
    TensorRT-LLM's enum; the helpers go by name)."""

    DISAGG_CONTEXT_WAIT_SCHEDULER = 1
    DISAGG_GENERATION_INIT = 2
    DISAGG_CONTEXT_TRANS_IN_PROGRESS = 3
    DISAGG_TRANS_ERROR = 4


def ids(assignment):
    return {r: [it.id for it in items] for r, items in assignment.items()}


def states(*loads):
    """RankStates from (requests, tokens) per rank."""
    return [T.RankState(r, n, t) for r, (n, t) in enumerate(loads)]


def idle(ranks):
    return states(*[(0, 0)] * ranks)


def req(rid, n=16, **kw):
    return F.item(rid, list(range(n)), **kw)


def unset(rid, n=16):
    """A request whose SchedulingParams exist with neither field set (what
    an OpenAI-style server sends)."""
    it = req(rid, n)
    it.request.py_scheduling_params = F.SchedulingParams()
    return it


def active(n, state=Stage.GENERATION_IN_PROGRESS, **kw):
    return F.LlmRequest([7] * n, state=state, **kw)


def retiring(n):
    return active(n, Stage.GENERATION_TO_COMPLETE)


def recording_dist(rank, peers):
    """A Dist at rank whose allgather records what it is sent and returns it
    between the peers' lists ({rank: list})."""
    sent = []

    def allgather(obj):
        sent.append(list(obj))
        return [list(obj) if r == rank else peers[r] for r in range(len(peers) + 1)]
    return F.Dist(rank, len(peers) + 1, allgather), sent


ROUTERS = {
    "default": lambda d: T.DefaultADPRouter(d),
    "conversation": lambda d: T.ConversationAwareADPRouter(d),
    "kv": lambda d: T.KVCacheAwareADPRouter(d, F.KVCacheManager()),
}


class RetiringHelpersTest(unittest.TestCase):
    """Only GENERATION_TO_COMPLETE is retiring: it has produced its last
    token and holds nothing a scheduler can use. Every other lingering state
    still holds a slot and KV, so it must stay load."""

    def test_each_state(self):
        for st in list(Stage) + list(Lingering):
            with self.subTest(st.name):
                r = SimpleNamespace(state=st)
                gone = st is Stage.GENERATION_TO_COMPLETE
                self.assertIs(T.is_retiring_request(r), gone)
                self.assertEqual(T.build_active_requests_for_overlap([r]), [] if gone else [r])
                self.assertEqual(T.count_retiring_requests([r]), int(gone))

    def test_survivors_keep_their_order_in_a_new_list(self):
        a, b, c = active(5), SimpleNamespace(state=Lingering.DISAGG_GENERATION_INIT), active(9)
        mixed = [retiring(3), a, retiring(4), b, c, retiring(1)]
        kept = T.build_active_requests_for_overlap(mixed)
        self.assertEqual(kept, [a, b, c])
        self.assertEqual(T.count_retiring_requests(mixed), 3)
        kept.clear()  # the router's view only: the executor's list is untouched
        self.assertEqual(len(mixed), 6)
        whole = [a, b]
        self.assertIsNot(T.build_active_requests_for_overlap(whole), whole)
        self.assertEqual((T.build_active_requests_for_overlap([]), T.count_retiring_requests([])), ([], 0))

    def test_requests_without_a_state_enum_stay_routable(self):
        # TensorRT-LLM reads request.state unguarded (it would raise on the
        # first case); adprouter keeps such a request routable.
        for name, r in [("no state attribute", SimpleNamespace(py_orig_prompt_len=4)),
                        ("state not an enum", SimpleNamespace(state=object())),
                        ("state None", SimpleNamespace(state=None))]:
            with self.subTest(name):
                self.assertFalse(T.is_retiring_request(r))
                self.assertEqual(T.build_active_requests_for_overlap([r]), [r])
                self.assertEqual(T.count_retiring_requests([r]), 0)


class RankStateWireTest(unittest.TestCase):
    """Ranks exchange 13 ints: rank, routable requests, routable tokens,
    retiring requests, then the nine iteration-stats fields. A rank on
    TensorRT-LLM's own RankState must read ours and the other way round."""

    @property
    def FULL(self):
        return T.RankIterStatsPayload(1, 42, 3, 640, 96, 11, 5120, 2, 384)

    def test_serialize(self):
        for name, s, wire in [
            ("defaults", T.RankState(rank=6), [6, 0, 0, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0]),
            ("counts", T.RankState(2, 4, 900), [2, 4, 900, 0, 0, -1, 0, 0, 0, 0, 0, 0, 0]),
            ("retiring", T.RankState(3, 1, 17, num_retiring_requests=5), [3, 1, 17, 5, 0, -1] + [0] * 7),
            ("payload", T.RankState(0, 2, 30, 1, iter_stats=self.FULL),
             [0, 2, 30, 1, 1, 42, 3, 640, 96, 11, 5120, 2, 384]),
        ]:
            with self.subTest(name):
                self.assertEqual(s.serialize(), wire)
                self.assertEqual(len(wire), 13)
                back = T.RankState.deserialize(wire)
                self.assertEqual(back, s)
                self.assertEqual(back.num_retiring_requests, s.num_retiring_requests)
        self.assertEqual(T.RankIterStatsPayload.deserialize(self.FULL.serialize()), self.FULL)

    def test_short_input_takes_defaults(self):
        for data, want in [
            ([8], (8, 0, 0, 0, 0, -1)),
            ([8, 3, 75], (8, 3, 75, 0, 0, -1)),
            ([8, 3, 75, 2, 1, 9], (8, 3, 75, 2, 1, 9)),
        ]:
            with self.subTest(data):
                s = T.RankState.deserialize(data)
                self.assertEqual((s.rank, s.num_active_requests, s.num_active_tokens, s.num_retiring_requests,
                                  s.iter_stats.has_iter_stats, s.iter_stats.iter_stats_iter), want)
                self.assertEqual(s.iter_stats.num_paused_kv_tokens, 0)

    def test_copy_iter_stats_from_copies(self):
        s = T.RankState(1)
        src = T.RankIterStatsPayload(has_iter_stats=1, iter_stats_iter=19, num_gen_requests=4)
        s.copy_iter_stats_from(src)
        self.assertEqual(s.iter_stats, src)
        self.assertIsNot(s.iter_stats, src)
        src.num_gen_requests = 99  # the executor reuses its payload object
        self.assertEqual(s.iter_stats.num_gen_requests, 4)
        s.copy_iter_stats_from(None)
        self.assertEqual(s.iter_stats.iter_stats_iter, 19)

    def test_equality(self):
        self.assertEqual(T.RankState(1, 2, 3), T.RankState(1, 2, 3))
        for other in (T.RankState(1, 2, 3, 1), T.RankState(1, 2, 4), T.RankState(0, 2, 3),
                      T.RankState(1, 2, 3, iter_stats=self.FULL)):
            with self.subTest(other.serialize()):
                self.assertNotEqual(T.RankState(1, 2, 3), other)


class GatherRankStatesTest(unittest.TestCase):
    """A rank's load is its routable requests; retiring ones leave load and
    tokens but are reported apart, so an all-retiring rank is not idle."""

    def gather(self, make, active_requests, **kw):
        dist, sent = recording_dist(0, {})
        out = make(dist).gather_all_rank_states(active_requests, **kw)
        self.assertEqual(len(sent), 1)
        return out[0], sent[0]

    def test_retiring_left_out_of_load(self):
        for name, make in ROUTERS.items():
            with self.subTest(name):
                s, _ = self.gather(make, [active(60), retiring(250), active(40), retiring(90)])
                self.assertEqual((s.num_active_requests, s.num_active_tokens, s.num_retiring_requests), (2, 100, 2))
                s, _ = self.gather(make, [retiring(12), retiring(30), retiring(8)])
                self.assertEqual((s.num_active_requests, s.num_active_tokens, s.num_retiring_requests), (0, 0, 3))

    def test_create_rank_state(self):
        """It counts what it is given (the filter is gather's); helix counts
        total_input_len_cp."""
        for name, make in ROUTERS.items():
            with self.subTest(name):
                s = make(F.Dist(2, 4)).create_rank_state([active(60), retiring(250)], [])
                self.assertEqual((s.rank, s.num_active_requests, s.num_active_tokens), (2, 2, 310))
                s = make(F.Dist(1, 2, has_cp_helix=True)).create_rank_state(
                    [active(500, total_input_len_cp=120), active(9, total_input_len_cp=35)], [])
                self.assertEqual((s.rank, s.num_active_requests, s.num_active_tokens), (1, 2, 155))

    def test_kv_router_counts_uncached_and_in_transfer(self):
        live = [active(120, cached_tokens=20), active(30, cached_tokens=64), retiring(300)]
        moving = F.AsyncTransferManager({5: active(55, cached_tokens=5), 6: active(10)})
        for name, kw, want in [
            ("uncached only", {}, (2, 100, 1)),
            ("transfers ignored unless asked", {"async_transfer_manager": moving}, (2, 100, 1)),
            ("transfers counted", {"async_transfer_manager": moving, "account_for_in_transfer": True}, (4, 160, 1)),
            ("asked without a manager", {"account_for_in_transfer": True}, (2, 100, 1)),
        ]:
            with self.subTest(name):
                s, _ = self.gather(lambda d: T.KVCacheAwareADPRouter(d, F.KVCacheManager(), **kw), live)
                self.assertEqual((s.num_active_requests, s.num_active_tokens, s.num_retiring_requests), want)

    def test_wire_sent_and_states_returned(self):
        payload = T.RankIterStatsPayload(1, 12, 3, 512, 64, 5, 2048)
        peer0 = [0, 3, 333, 1, 1, 11, 0, 0, 0, 2, 80, 0, 0]
        dist, sent = recording_dist(1, {0: peer0, 2: [2, 4, 95]})  # a short list pads
        got = T.DefaultADPRouter(dist).gather_all_rank_states([active(60), retiring(7)], iter_stats_payload=payload)
        self.assertEqual(sent, [[1, 1, 60, 1, 1, 12, 3, 512, 64, 5, 2048, 0, 0]])
        self.assertEqual(got, [T.RankState.deserialize(peer0), T.RankState(1, 1, 60, 1, iter_stats=payload),
                               T.RankState(2, 4, 95)])
        self.assertEqual(dist.allgathers, 1)


class OpaquePrompt:
    """A request that knows its length but must not build its token list."""

    def __init__(self, n):
        self.num_input_tokens = n
        self.py_scheduling_params = None
        self.py_conversation_params = None

    @property
    def input_token_ids(self):
        raise AssertionError("input_token_ids read although num_input_tokens was given")


class NumInputTokensTest(unittest.TestCase):
    def test_num_input_tokens_is_used_without_reading_the_prompt(self):
        batch = [F.RequestQueueItem(k, OpaquePrompt(n)) for k, n in [(41, 500), (42, 20), (43, 300)]]
        out, expected = T.DefaultADPRouter(F.Dist(0, 2)).route_requests(idle(2), batch, 8)
        # Largest first: 500 -> rank 0, 300 -> rank 1, then 20 to rank 1's 300 < 500.
        self.assertEqual((ids(out), expected), ({0: [41], 1: [43, 42]}, 2))

    def test_accessor(self):
        self.assertEqual(T._num_input_tokens(None), 0)
        self.assertEqual(T._num_input_tokens(OpaquePrompt(1234)), 1234)
        self.assertEqual(T._num_input_tokens(SimpleNamespace(num_input_tokens=None, input_token_ids=[1] * 6)), 6)


class DefaultRouterTest(unittest.TestCase):
    """Targets first (strict ones before relaxed ones), then the fewest
    (tokens, requests) rank under the fair-share target, largest prompts
    first."""

    def route(self, st, batch, maxn=10):
        out, expected = T.DefaultADPRouter(F.Dist(0, len(st))).route_requests(st, batch, maxn)
        return ids(out), expected

    def test_placement(self):
        for name, st, batch, maxn, want in [
            ("balanced, arrival order on ties", idle(2), [req(k, 25) for k in range(6)], 10,
             {0: [0, 2, 4], 1: [1, 3, 5]}),
            ("four ranks", idle(4), [req(k, 12) for k in range(8)], 10, {0: [0, 4], 1: [1, 5], 2: [2, 6], 3: [3, 7]}),
            ("strict target", idle(2), [req(51, target=1, relax=False)], 10, {0: [], 1: [51]}),
            ("full strict target falls through", states((0, 0), (3, 90)), [req(52, target=1, relax=False)], 3,
             {0: [52], 1: []}),
            ("strict sorts before relax=None", idle(2), [req(31, target=0), req(32, target=0, relax=False)], 1,
             {0: [32], 1: [31]}),
            ("strict sorts before relax=True", idle(2), [req(33, target=1, relax=True),
                                                        req(34, target=1, relax=False)], 1, {0: [33], 1: [34]}),
            ("less-loaded rank (tokens) takes all", states((4, 800), (1, 50)), [req(k, 60) for k in range(4)], 10,
             {0: [], 1: [0, 1, 2, 3]}),
            ("single rank", idle(1), [req(k) for k in range(6)], 10, {0: [0, 1, 2, 3, 4, 5]}),
            ("scheduling params with nothing set", idle(2), [unset(k) for k in range(4)], 10,
             {0: [0, 2], 1: [1, 3]}),
        ]:
            with self.subTest(name):
                self.assertEqual(self.route(st, batch, maxn)[0], want)

    def test_expected(self):
        for name, st, batch, want in [
            ("floored at the busiest rank", states((4, 0), (2, 0), (5, 0), (1, 0)), [req(k) for k in range(3)], 5),
            ("fair share", states(*[(1, 0)] * 4), [req(k) for k in range(9)], 4),
            ("strict placements count first", idle(2), [req(1, target=0, relax=False), req(2, target=0, relax=False),
                                                       req(3)], 2),
            ("single rank", idle(1), [req(k) for k in range(6)], 6),
            ("empty batch", states((3, 0), (7, 0)), [], 7),
        ]:
            with self.subTest(name):
                self.assertEqual(self.route(st, batch, 8)[1], want)

    def test_number_of_ranks_comes_from_the_states(self):
        for ranks in (2, 4):
            with self.subTest(ranks):
                r = T.DefaultADPRouter(F.Dist(0, 1))
                out, _ = r.route_requests(idle(ranks), [req(k) for k in range(ranks)], 4)
                self.assertEqual(ids(out), {k: [k] for k in range(ranks)})

    def balance(self, counts, tokens, expected, sizes):
        batch = [req(100 + k, n) for k, n in enumerate(sizes)]
        pre = {r: [] for r in range(len(counts))}
        out = T.DefaultADPRouter(F.Dist(0, len(counts)))._balance_requests_across_ranks(
            batch, pre, list(counts), list(tokens), expected)
        return {r: [it.id - 100 for it in v] for r, v in out.items()}

    def test_balance_requests_across_ranks(self):
        for name, args, want in [
            ("empty", ([1, 0, 2, 2], [15, 0, 45, 60], 2, []), {0: [], 1: [], 2: [], 3: []}),
            ("tokens before counts, counts break ties", ([2, 1, 0, 3], [30, 30, 50, 90], 4, [10, 10, 10]),
             {0: [1], 1: [0, 2], 2: [], 3: []}),
            ("one slot each", ([2, 2, 2, 2], [50] * 4, 3, [9, 4, 6, 1]), {0: [0], 1: [2], 2: [1], 3: [3]}),
            ("largest first", ([0, 0, 0, 0], [8] * 4, 1, [2, 11, 5]), {0: [1], 1: [2], 2: [0], 3: []}),
            ("ranks at or over expected skipped", ([3, 1, 4, 0], [0, 100, 0, 200], 3, [5, 5]),
             {0: [], 1: [0, 1], 2: [], 3: []}),
        ]:
            with self.subTest(name):
                self.assertEqual(self.balance(*args), want)


def admit(queue, budget, maxn, counts):
    """The executor's side of admission: pops up to budget items in order; a
    strict target whose rank is full stays queued (order kept), and an
    admitted strict target takes its rank's slot."""
    counts = list(counts)
    taken, held = [], []
    while queue and len(taken) < budget:
        it = queue.popleft()
        sp = it.request.py_scheduling_params
        if sp is not None and sp.attention_dp_rank is not None and not sp.attention_dp_relax:
            if counts[sp.attention_dp_rank] >= maxn:
                held.append(it)
                continue
            counts[sp.attention_dp_rank] += 1
        taken.append(it)
    queue.extendleft(reversed(held))
    return taken


class WaitingQueueSchedulingTest(unittest.TestCase):
    """What the executor admits from its waiting queue, then where the
    default router puts it (4 ranks, 4 slots each, token loads 40/10/30/20)."""

    MAXN = 4
    TOKENS = (40, 10, 30, 20)

    def schedule(self, counts, spec):
        queue = collections.deque(req(k, 5, target=t, relax=x) for k, (t, x) in enumerate(spec))
        batch = admit(queue, self.MAXN * 4 - sum(counts), self.MAXN, counts)
        st = [T.RankState(r, counts[r], self.TOKENS[r]) for r in range(4)]
        out, expected = T.DefaultADPRouter(F.Dist(0, 4)).route_requests(st, batch, self.MAXN)
        return ids(out), expected, [it.id for it in queue]

    def test_cases(self):
        free, strict, relaxed = (None, None), (lambda r: (r, False)), (lambda r: (r, True))
        for name, counts, spec, want, expected, left in [
            ("idle ranks, untargeted", [0, 0, 0, 0], [free] * 6, {0: [], 1: [0, 1], 2: [4, 5], 3: [2, 3]}, 2, []),
            ("strict to a full rank stays queued", [4, 4, 2, 4], [strict(0), relaxed(0), strict(2), free],
             {0: [], 1: [], 2: [2, 1], 3: []}, 4, [0, 3]),
            ("relaxed targets: full ones balanced", [3, 4, 4, 1], [relaxed(1), relaxed(2), relaxed(0)],
             {0: [2], 1: [], 2: [], 3: [0, 1]}, 4, []),
            ("strict placed, relaxed balanced", [4, 2, 4, 3], [strict(0), strict(1), strict(3), relaxed(2)],
             {0: [], 1: [1, 3], 2: [], 3: [2]}, 4, [0]),
            ("nothing admitted when all full", [4, 4, 4, 4], [strict(2)], {0: [], 1: [], 2: [], 3: []}, 4, [0]),
        ]:
            with self.subTest(name):
                self.assertEqual(self.schedule(counts, spec), (want, expected, left))

    def test_full_admission_fills_every_rank(self):
        """With strict and relaxed targets on every rank, admission and
        routing together use every free slot, no more."""
        counts, maxn = [2, 5, 0, 4], 6
        spec = [(r, x) for r in range(4) for _ in range(4) for x in (False, True)]
        queue = collections.deque(req(k, 8, target=t, relax=x) for k, (t, x) in enumerate(spec))
        room = maxn * 4 - sum(counts)
        batch = admit(queue, room, maxn, counts)
        self.assertEqual(len(batch), room)
        out, expected = T.DefaultADPRouter(F.Dist(0, 4)).route_requests(
            [T.RankState(r, counts[r], 10 * r) for r in range(4)], batch, maxn)
        self.assertEqual([counts[r] + len(out[r]) for r in range(4)], [maxn] * 4)
        self.assertEqual(expected, maxn)


class RecordingKV:
    """A KV cache manager that answers probes from a table keyed by
    (prompt, lora task, salt) and records every call as made."""

    enable_block_reuse = True

    def __init__(self, table=None):
        self.table = table or {}
        self.calls = []

    def probe_prefix_match_length(self, *args, **kwargs):
        self.calls.append((list(args[0]),) + args[1:] + (kwargs,))
        tokens, lora = args
        return self.table.get((tuple(tokens), lora, kwargs.get("cache_salt")), 0)


class KVPrefixGatherTest(unittest.TestCase):
    """Each rank probes prompt[:-1] (the last token is never reused) with the
    LoRA task and cache salt, then allgathers [id, match, id, match, ...]."""

    A, B = list(range(80)), list(range(300, 330))

    def test_probe_and_allgather(self):
        for name, batch, table, peers, calls, sent, matches in [
            ("single rank", [req(21, 80), F.item(22, self.B)], {(tuple(self.A[:-1]), None, None): 48}, {},
             [(self.A[:-1], None, {"cache_salt": None}), (self.B[:-1], None, {"cache_salt": None})],
             [21, 48, 22, 0], [{21: 48, 22: 0}]),
            ("two ranks", [req(21, 80), F.item(22, self.B)], {(tuple(self.A[:-1]), None, None): 48},
             {1: [21, 16, 22, 32]}, None, [21, 48, 22, 0], [{21: 48, 22: 0}, {21: 16, 22: 32}]),
            ("lora scoped", [req(23, 80, lora=9), req(24, 80)], {(tuple(self.A[:-1]), 9, None): 64}, {},
             [(self.A[:-1], 9, {"cache_salt": None}), (self.A[:-1], None, {"cache_salt": None})],
             [23, 64, 24, 0], [{23: 64, 24: 0}]),
            ("salt scoped", [req(25, 80, cache_salt="acme"), req(26, 80, cache_salt="zeta")],
             {(tuple(self.A[:-1]), None, "acme"): 32}, {},
             [(self.A[:-1], None, {"cache_salt": "acme"}), (self.A[:-1], None, {"cache_salt": "zeta"})],
             [25, 32, 26, 0], [{25: 32, 26: 0}]),
            ("one token, no request", [F.item(27, [5]), F.RequestQueueItem(28, None)], {}, {},
             [([], None, {"cache_salt": None})], [27, 0, 28, 0], [{27: 0, 28: 0}]),
            ("empty", [], {}, {}, [], [], [{}]),
        ]:
            with self.subTest(name):
                dist, got = recording_dist(0, peers)
                kv = RecordingKV(table)
                r = T.KVCacheAwareADPRouter(dist, kv)
                r.gather_prefix_matches(batch)
                if calls is not None:
                    self.assertEqual(kv.calls, calls)
                self.assertEqual(got, [sent])
                self.assertEqual(r._all_ranks_prefix_matches, matches)


class KVRoutingTest(unittest.TestCase):
    """Score = uncached tokens + load_balance_weight * the rank's share of
    the load (scaled to the prompt); the cache counts only above
    match_rate_threshold; a rank leaves the batch at the fair-share cap."""

    def route(self, st, batch, matches, maxn=16, **kw):
        r = T.KVCacheAwareADPRouter(F.Dist(0, len(st)), F.KVCacheManager(), **kw)
        r._all_ranks_prefix_matches = matches
        out, expected = r.route_requests(st, batch, maxn)
        return ids(out), expected

    def test_placement(self):
        for name, st, batch, matches, kw, want in [
            ("cached rank", idle(2), [req(61, 120)], [{61: 0}, {61: 96}], {}, {0: [], 1: [61]}),
            ("no cache: fewest tokens, not fewest requests", states((2, 300), (6, 90)), [req(62, 50)],
             [{}, {}], {}, {0: [], 1: [62]}),
            ("heavy weight: load beats cache", states((3, 1200), (0, 0)), [req(63, 200)], [{63: 150}, {}],
             {"load_balance_weight": 4.0}, {0: [], 1: [63]}),
            ("light weight: cache beats load", states((3, 1200), (0, 0)), [req(63, 200)], [{63: 150}, {}],
             {"load_balance_weight": 0.1}, {0: [63], 1: []}),
            ("strict target beats cache", idle(2), [req(64, 120, target=0, relax=False)], [{}, {64: 96}], {},
             {0: [64], 1: []}),
            ("relaxed target with room beats cache", idle(2), [req(65, 120, target=0, relax=True)], [{}, {65: 96}],
             {}, {0: [65], 1: []}),
            ("uncached tokens booked, not the prompt", idle(2), [req(k, 150) for k in (70, 71, 72, 73)],
             [{}, {70: 120, 71: 120}], {"fair_share_multiplier": 1.0}, {0: [72, 73], 1: [70, 71]}),
            ("cached then uncached", idle(2), [req(80, 120), F.item(81, list(range(500, 620)))],
             [{80: 96, 81: 0}, {80: 0, 81: 0}], {}, {0: [80], 1: [81]}),
        ]:
            with self.subTest(name):
                self.assertEqual(self.route(st, batch, matches, **kw)[0], want)

    def test_relax_none_is_relaxed(self):
        got = self.route(idle(2), [req(90, target=0), req(91, target=0, relax=False)], [{}, {}], maxn=1)
        self.assertEqual(got, ({0: [91], 1: [90]}, 1))
        got, _ = self.route(idle(2), [unset(92), unset(93)], [{}, {}])
        self.assertEqual(sorted(map(len, got.values())), [1, 1])

    def test_match_rate_threshold(self):
        st = states((1, 150), (0, 0))
        for threshold, home in [(0.0, 0), (0.55, 0), (0.6, 1), (0.9, 1)]:  # 90 of 150 cached: a rate of 0.6
            with self.subTest(threshold):
                got, _ = self.route(st, [req(66, 150)], [{66: 90}, {}], load_balance_weight=0.2,
                                    match_rate_threshold=threshold)
                self.assertEqual(got[home], [66])

    def test_fair_share_multiplier_caps_a_rank(self):
        batch = [req(k, 100) for k in range(6)]
        matches = [{}, {}, {k: 90 for k in range(6)}]
        for mult, cached, cap in [(3.0, [0, 1, 2, 3, 4, 5], 6), (1.5, [0, 1, 2], 3), (1.0, [0, 1], 2)]:
            with self.subTest(mult):
                got, expected = self.route(idle(3), batch, matches, maxn=50, load_balance_weight=0.1,
                                           match_rate_threshold=0.0, fair_share_multiplier=mult)
                self.assertEqual((got[2], expected), (cached, cap))
                self.assertEqual(len(got[0]) + len(got[1]), 6 - len(cached))
                self.assertTrue(len(got[0]) <= cap and len(got[1]) <= cap)

    def test_counts_and_expected(self):
        got, expected = self.route(states((1, 10), (3, 30)), [], [{}, {}], maxn=10)
        self.assertEqual((got, expected), ({0: [], 1: []}, 4))
        got, _ = self.route(idle(4), [req(k, 20) for k in range(12)], [{}] * 4)
        self.assertEqual([len(got[r]) for r in range(4)], [3, 3, 3, 3])
        got, expected = self.route(states((1, 0), (0, 0), (2, 0)), [req(k, 10) for k in range(5)], [{}] * 3, maxn=3)
        self.assertEqual(expected, 3)  # the fair-share cap never passes max_num_active_requests
        self.assertEqual(sum(map(len, got.values())), 5)
        self.assertTrue(all(n + len(got[r]) <= 3 for r, n in enumerate((1, 0, 2))))


class KVWarmupTest(unittest.TestCase):
    """Cold-start warmup: until every rank got a request through the router,
    relaxed requests go to the lowest rank not yet reached, ignoring cache,
    so a shared system prompt is seeded everywhere."""

    def router(self, ranks, warmup=True, dp_size=None):
        dist = F.Dist(0, ranks)
        if dp_size is not None:
            dist.mapping.dp_size = dp_size
        return T.KVCacheAwareADPRouter(dist, F.KVCacheManager(), cold_start_warmup=warmup)

    def test_pending_set(self):
        self.assertEqual(self.router(4)._pending_warmup_ranks, {0, 1, 2, 3})
        self.assertEqual(self.router(1, dp_size=3)._pending_warmup_ranks, {0, 1, 2})  # mapping.dp_size decides
        self.assertEqual(self.router(4, warmup=False)._pending_warmup_ranks, set())

    def test_first_batch_in_arrival_order_ignores_cache(self):
        r = self.router(4)
        r._all_ranks_prefix_matches = [{}, {}, {}, {17: 15}]
        out, _ = r.route_requests(idle(4), [req(k, 16) for k in (17, 5, 11, 2)], 100)
        self.assertEqual(ids(out), {0: [17], 1: [5], 2: [11], 3: [2]})
        self.assertEqual(r._pending_warmup_ranks, set())

    def test_single_request_batches_then_scoring(self):
        r = self.router(3)
        for k, left in [(0, {1, 2}), (1, {2}), (2, set())]:
            r._all_ranks_prefix_matches = [{}, {}, {}]
            out, _ = r.route_requests(idle(3), [req(500 + k, 40)], 100)
            self.assertEqual(ids(out)[k], [500 + k])
            self.assertEqual(r._pending_warmup_ranks, left)
        r._all_ranks_prefix_matches = [{}, {503: 32}, {}]
        out, _ = r.route_requests(idle(3), [req(503, 40)], 100)
        self.assertEqual(ids(out)[1], [503])

    def test_strict_target_takes_its_slot(self):
        r = self.router(4)
        out, _ = r.route_requests(idle(4), [req(7), req(8, target=1, relax=False), req(9)], 100)
        self.assertEqual(ids(out), {0: [7], 1: [8], 2: [9], 3: []})
        self.assertEqual(r._pending_warmup_ranks, {3})

    def test_saturated_pick_stays_pending(self):
        r = self.router(3)
        out, _ = r.route_requests(states((2, 20), (0, 0), (0, 0)), [req(14)], 2)
        self.assertEqual(ids(out)[0], [])
        self.assertEqual(sum(map(len, out.values())), 1)
        self.assertEqual(r._pending_warmup_ranks, {0, 1, 2})
        out, _ = r.route_requests(idle(3), [req(15)], 2)
        self.assertEqual(ids(out)[0], [15])
        self.assertNotIn(0, r._pending_warmup_ranks)

    def test_assigning_the_set(self):
        r = self.router(3)
        r._pending_warmup_ranks = {2}
        out, _ = r.route_requests(idle(3), [req(31)], 100)
        self.assertEqual(ids(out)[2], [31])
        r = self.router(2)
        r._pending_warmup_ranks = set()  # warmup off: scoring decides
        r._all_ranks_prefix_matches = [{}, {32: 80}]
        out, _ = r.route_requests(idle(2), [req(32, 100)], 100)
        self.assertEqual(ids(out), {0: [], 1: [32]})


def conv(rid, cid, **kw):
    return req(rid, 12, conversation=cid, **kw)


class ConversationRouterTest(unittest.TestCase):
    """A conversation returns to the rank of its first turn while that rank
    is under max_num_active_requests; first turns and requests without a
    conversation spread round robin (or least queued) under the fair share."""

    def router(self, ranks=4, **kw):
        return T.ConversationAwareADPRouter(F.Dist(0, ranks), **kw)

    def place(self, r, st, batch, maxn=1000):
        out, _ = r.route_requests(st, batch, maxn)
        return {it.id: rank for rank, v in out.items() for it in v}

    def test_first_turns_round_robin_then_sticky(self):
        r = self.router(3)
        first = self.place(r, idle(3), [conv(k, "u%d" % k) for k in range(6)])
        self.assertEqual([first[k] for k in range(6)], [0, 1, 2, 0, 1, 2])
        later = self.place(r, states((9, 90), (0, 0), (4, 40)), [conv(60 + k, "u%d" % k) for k in (5, 2, 0, 3)])
        self.assertEqual(later, {65: 2, 62: 2, 60: 0, 63: 0})

    def test_no_conversation_spreads_and_is_not_recorded(self):
        r = self.router(3)
        got = self.place(r, idle(3), [req(k) for k in range(9)])
        self.assertEqual([got[k] for k in range(9)], [0, 1, 2] * 3)
        self.assertEqual(dict(r._conv_to_rank), {})

    def test_deterministic_across_instances(self):
        """Every rank routes on its own, with no broadcast: two ranks that
        disagree would wait in different collectives."""
        batches = [["a", "b", None, "a", "c"], ["b", None, "d", "a", None, "e"]]
        for placement in ("round_robin", "least_queued"):
            with self.subTest(placement):
                runs = []
                for _ in range(2):
                    r = self.router(new_conv_placement=placement)
                    runs.append([self.place(r, states((1, 0), (3, 0), (0, 0), (2, 0)),
                                            [conv(10 * b + k, c) for k, c in enumerate(cs)])
                                 for b, cs in enumerate(batches)])
                self.assertEqual(runs[0], runs[1])

    def test_lru_bound(self):
        r = self.router(2, max_sessions=3)
        self.place(r, idle(2), [conv(k, "s%d" % k) for k in range(7)])
        self.assertEqual(list(r._conv_to_rank), ["s4", "s5", "s6"])
        self.place(r, idle(2), [conv(20, "s4")])  # a returning turn is a use
        self.place(r, idle(2), [conv(21, "s7")])
        self.assertEqual(list(r._conv_to_rank), ["s6", "s4", "s7"])

    def test_explicit_targets_and_bindings(self):
        r = self.router()
        self.assertEqual(self.place(r, idle(4), [conv(1, "alpha", target=2, relax=False)]), {1: 2})
        self.assertEqual(r._conv_to_rank["alpha"], 2)
        self.assertEqual(self.place(r, idle(4), [conv(2, "alpha")]), {2: 2})
        self.assertEqual(self.place(r, idle(4), [conv(3, "alpha", target=0, relax=False)]), {3: 2})
        self.assertEqual(r._conv_to_rank["alpha"], 2)

    def test_sticky_uses_the_hard_cap(self):
        r = self.router(2)
        home = self.place(r, idle(2), [conv(1, "beta")])[1]
        busy = [T.RankState(k, 5 if k == home else 0, 0) for k in range(2)]
        self.assertEqual(self.place(r, busy, [conv(2, "beta")], maxn=6), {2: home})  # over the fair share
        self.assertEqual(self.place(r, busy, [conv(3, "beta")], maxn=5), {3: 1 - home})  # full: overflow
        self.assertEqual(r._conv_to_rank["beta"], home)
        self.assertEqual(self.place(r, idle(2), [conv(4, "beta")], maxn=5), {4: home})

    def test_least_queued(self):
        r = self.router(new_conv_placement="least_queued")
        self.assertEqual(self.place(r, states((6, 0), (2, 0), (4, 0), (5, 0)), [conv(1, "x")]), {1: 1})
        self.assertEqual(r._conv_to_rank["x"], 1)
        self.assertEqual(self.place(r, states((0, 0), (9, 0), (0, 0), (0, 0)), [conv(2, "x")]), {2: 1})
        got = self.place(self.router(new_conv_placement="least_queued"), states((4, 0), (1, 0), (3, 0), (4, 0)),
                         [conv(k, "v%d" % k) for k in range(5)])
        self.assertEqual([got[k] for k in range(5)], [1, 1, 1, 2, 0])

    def test_new_conv_placement_setting(self):
        cfg = F.attention_dp_config(kv_cache_routing_conversation_affinity=True, kv_cache_routing_max_sessions=5,
                                    kv_cache_routing_new_conv_placement="least_queued")
        r = T.ADPRouter.create(F.Dist(0, 4), None, cfg)
        self.assertEqual((r._new_conv_placement, r._max_sessions), ("least_queued", 5))
        for value in ("zigzag", object(), None):
            with self.subTest(repr(value)):
                r = self.router(new_conv_placement=value)
                self.assertEqual(r._new_conv_placement, "round_robin")
                got = self.place(r, states((0, 0), (3, 0), (0, 0), (0, 0)), [conv(k, "n%d" % k) for k in range(3)])
                self.assertEqual([got[k] for k in range(3)], [0, 1, 2])  # least queued: 0, 2, 3

    def test_expected_covers_a_sticky_storm(self):
        """The executor pads every rank up to expected with dummy requests;
        a rank left above expected breaks that padding."""
        r = self.router(6)
        out, expected = r.route_requests(idle(6), [conv(k, "storm") for k in range(30)], 100)
        home = r._conv_to_rank["storm"]
        self.assertEqual((len(out[home]), expected), (30, 30))

    def test_new_conversations_respect_the_slot_cap(self):
        """A rank already at max_num_active_requests has no sequence slot
        left; the fair-share cap must never admit it."""
        st = states((12, 0), (12, 0), (12, 0), (20, 0))
        out, expected = self.router().route_requests(st, [req(k) for k in range(6)], 20)
        self.assertEqual(ids(out), {0: [0, 3], 1: [1, 4], 2: [2, 5], 3: []})
        self.assertEqual(expected, 20)


class FactoryTest(unittest.TestCase):
    """ADPRouter.create: conversation affinity first, then the KV-aware
    router only with a block-reusing KV cache manager, else the default."""

    def test_choice(self):
        cfg = F.attention_dp_config
        reuse, no_reuse = F.KVCacheManager(), F.KVCacheManager(enable_block_reuse=False)
        for name, kv, config, want in [
            ("conversation wins over kv", reuse, cfg(kv_cache_routing_conversation_affinity=True,
                                                     enable_kv_cache_aware_routing=True), T.ConversationAwareADPRouter),
            ("conversation needs no manager", None, cfg(kv_cache_routing_conversation_affinity=True),
             T.ConversationAwareADPRouter),
            ("kv with reuse", reuse, cfg(enable_kv_cache_aware_routing=True), T.KVCacheAwareADPRouter),
            ("kv without reuse", no_reuse, cfg(enable_kv_cache_aware_routing=True), T.DefaultADPRouter),
            ("kv without a manager", None, cfg(enable_kv_cache_aware_routing=True), T.DefaultADPRouter),
            ("both disabled", reuse, cfg(), T.DefaultADPRouter),
            ("no config", reuse, None, T.DefaultADPRouter),
        ]:
            with self.subTest(name):
                r = T.ADPRouter.create(F.Dist(0, 2), kv, config)
                self.assertIs(type(r), want)
                self.assertIsInstance(r, T.ADPRouter)
                self.assertEqual(r.needs_prefix_matches, want is T.KVCacheAwareADPRouter)


if __name__ == "__main__":
    unittest.main()
