"""The optional C packer (python/adprouter/_speedups.c) against the pure-Python path,
and the match-table input forms against the dict form.

The extension is compiled here into a temporary folder (skipped without a C compiler
or Python headers), then every check runs with the binding packing through it and
through pure Python: the adpr_batch buffers must be identical bytes, decisions and
error messages identical. Its Request type must behave as the pure-Python class does.
"""

import array
import collections
import copy
import ctypes
import gc
import importlib.util
import os
import pickle
import random
import shutil
import subprocess
import sysconfig
import tempfile
import unittest

import adprouter
from adprouter import _abi, _accel, _errors, _pack
from adprouter import InvalidArgumentError, RankState, Request, Router

import test_binding

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(os.path.dirname(HERE), "adprouter", "_speedups.c")
HEADERS = os.path.join(os.path.dirname(os.path.dirname(HERE)), "include")  # adprouter.h

_tmp = None
_built = None
_loaded = None


def setUpModule():
    global _tmp, _built, _loaded
    test_binding.setUpModule()
    _loaded = _accel.speedups  # whatever the binding found; restored afterwards
    if not os.path.exists(SOURCE):
        # An installed package without its sources (the wheel test): check
        # the extension the package was built with, if it has one.
        _built = _loaded
        return
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    include = sysconfig.get_paths()["include"]
    if not cc or not os.path.exists(os.path.join(include, "Python.h")):
        return
    _tmp = tempfile.mkdtemp(prefix="adpr-speedups-")
    path = os.path.join(_tmp, "_speedups" + sysconfig.get_config_var("EXT_SUFFIX"))
    proc = subprocess.run([cc, "-O2", "-Wall", "-Wextra", "-Werror", "-Wno-missing-field-initializers",
                           "-shared", "-fPIC", "-I" + include, "-I" + HEADERS, "-o", path, SOURCE],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError("compiling _speedups.c failed:\n" + proc.stderr)
    spec = importlib.util.spec_from_file_location("adprouter._speedups", path)
    _built = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(_built)


def tearDownModule():
    _accel.use(_loaded)
    if _tmp:
        shutil.rmtree(_tmp, ignore_errors=True)


class BothPaths(unittest.TestCase):
    def setUp(self):
        if _built is None:
            self.skipTest("no C compiler or Python headers to build _speedups.c")

    def tearDown(self):
        _accel.use(_loaded)

    def each_path(self):
        """Yields "c" and "python" with the binding switched accordingly."""
        for name, mod in (("c", _built), ("python", None)):
            _accel.use(mod)
            with self.subTest(path=name):
                yield name


def batch(rng, n, dp, kinds=("list",)):
    """Requests with every field exercised, tokens in the given container kinds."""
    reqs = []
    for i in range(n):
        length = rng.choice((0, 1, 5, 63, 64, 65, 200))
        toks = [rng.randrange(-2 ** 31, 2 ** 31) if rng.random() < 0.1 else rng.randrange(50)
                for _ in range(length)]
        kind = rng.choice(kinds)
        if kind == "tuple":
            toks = tuple(toks)
        elif kind == "array":
            toks = array.array("i", toks)
        elif kind == "memoryview":
            toks = memoryview(array.array("i", toks))
        elif kind == "ctypes":
            toks = (ctypes.c_int32 * len(toks))(*toks)
        elif kind == "none":
            toks = None
        q = Request(rng.randrange(2 ** 64), tokens=toks,
                    num_tokens=rng.choice((None, length + rng.randrange(3000))) if toks is not None
                    else rng.randrange(3000),
                    target_rank=rng.choice((None, None, rng.randrange(dp))),
                    relax=rng.choice((True, False, 0, 1)),
                    conversation_id=rng.choice((None, "", "c%d" % i, "ü-%d" % i, b"b%d" % i, bytearray(b"x"))),
                    lora_id=rng.choice((0, 7, 2 ** 64 - 1)), cache_salt=rng.choice((0, 3)))
        reqs.append(q)
    sts = [RankState(r, rng.randrange(5), rng.randrange(10 ** 6), kv_capacity_tokens=rng.choice((0, 10 ** 6)),
                     free_kv_tokens=rng.randrange(10 ** 5), memory_pressure=rng.choice((False, True)))
           for r in range(dp)]
    return sts, reqs


def as_bytes(packed):
    rbuf, tokens, ntok, text = packed
    return bytes(rbuf), bytes(tokens), ntok, bytes(text)


class PackingTest(BothPaths):
    def test_identical_bytes(self):
        rng = random.Random(5)
        kinds = ("list", "tuple", "array", "memoryview", "ctypes", "none")
        for it in range(60):
            sts, reqs = batch(rng, rng.randrange(0, 40), 4, kinds)
            with self.subTest(iteration=it):
                self.assertEqual(bytes(_built.pack_states(sts)), bytes(_pack.pack_states(sts)))
                for send in (0, adprouter.PREFIX_TOKENS, None):
                    got = _built.pack_requests(reqs, send)
                    self.assertIsNotNone(got)
                    self.assertEqual(as_bytes(got), as_bytes(_pack.pack_requests(reqs, send)))

    def test_unusual_input_goes_to_python(self):
        class MyRequest(Request):
            __slots__ = ()

        class Index:
            def __index__(self):
                return 3

        good = Request(1, tokens=[1, 2, 3])
        for name, q in [
            ("subclass", MyRequest(1, tokens=[1])),
            ("__index__ token", Request(1, tokens=[1, Index()])),
            ("float token", Request(1, tokens=[1, 2.0])),
            ("token 2**31", Request(1, tokens=[2 ** 31])),
            ("id -1", Request(-1, tokens=[1])),
            ("target -1", Request(1, tokens=[1], target_rank=-1)),
            ("array('q')", Request(1, tokens=array.array("q", [1]))),
            ("strided buffer", Request(1, tokens=memoryview(array.array("i", [1, 2, 3, 4]))[::2])),
            ("num_tokens < len", Request(1, tokens=[1, 2], num_tokens=1)),
            ("conversation int", Request(1, tokens=[1], conversation_id=5)),
            ("surrogate", Request(1, tokens=[1], conversation_id="\ud800")),
        ]:
            with self.subTest(name):
                self.assertIsNone(_built.pack_requests([good, q], 64))
        unset = Request(1, tokens=[1])
        del unset.relax
        self.assertIsNone(_built.pack_requests([unset], 64))
        self.assertIsNone(_built.pack_states([RankState(0, 1.5, 0)]))

    def test_same_errors(self):
        for dp in (4, 3):
            for name, bad in test_binding.bad_calls(dp):
                messages = {}
                for path in self.each_path():
                    with Router(policy="kv_cache_aware", dp_size=dp) as r:
                        with self.assertRaises(InvalidArgumentError) as cm:
                            bad(r, 1)
                        messages[path] = str(cm.exception)
                self.assertEqual(messages["c"], messages["python"], name)

    def test_same_decisions(self):
        rng = random.Random(11)
        for it in range(30):
            dp = rng.choice((2, 4, 8))
            sts, reqs = batch(rng, rng.randrange(1, 60), dp, ("list", "array"))
            for q in reqs:
                if q.target_rank is not None:
                    q.target_rank %= dp
            matches = [{q.id: rng.randrange(100) for q in reqs if rng.random() < 0.7} for _ in range(dp)]
            outcomes = []
            for _ in self.each_path():
                with Router(policy="kv_cache_aware", dp_size=dp, capacity_aware=True) as r:
                    res = r.route(sts, reqs, 16, matches)
                    outcomes.append((res.assignment, res.expected, res.unassigned, res.ranks))
            self.assertEqual(outcomes[0], outcomes[1], it)


class RouteInCTest(BothPaths):
    def call(self, r, sts, reqs, maxn, match_lens=None, pairs=False):
        """_built.route on r: (status, expected, assignment, unassigned, ranks), or None."""
        _built.configure(Request, REQUEST_FIELDS, RankState, RankState.__slots__)
        return _built.route(_abi.route_address, r._handle, sts, reqs, r._send_tokens, match_lens, pairs,
                            maxn, r._errbuf)

    def test_same_outputs_as_ctypes(self):
        rng = random.Random(17)
        for it in range(20):
            dp = rng.choice((1, 3, 8))
            sts, reqs = batch(rng, rng.randrange(0, 50), dp, ("list", "array"))
            m = [{q.id: rng.randrange(300) for q in reqs if rng.random() < 0.7} for _ in range(dp)]
            with self.subTest(iteration=it), Router(policy="kv_cache_aware", dp_size=dp) as r1, \
                    Router(policy="kv_cache_aware", dp_size=dp) as r2:
                got = self.call(r1, sts, reqs, 64, m)
                _accel.use(None)
                want = r2.route(sts, reqs, 64, m)
                self.assertEqual(got, (0, want.expected, want.assignment, want.unassigned, want.ranks))
                # The lists hold the requests' own id objects (exact ints).
                by_id = {q.id: q.id for q in reqs}
                for i in [i for k in range(dp) for i in got[2][k]] + got[3]:
                    self.assertIs(i, by_id[i])

    def test_buffers_kept_between_calls_hold_nothing_over(self):
        # route() packs into buffers it keeps between calls. Batches that
        # grow, shrink, drop their match table and bring it back must each
        # decide as the Python path does: nothing of an earlier, larger
        # batch (its requests, tokens, matches or conversation ids) may leak
        # into a later one.
        rng = random.Random(29)
        for policy in ("kv_cache_aware", "conversation", "default"):
            dp = 4
            with Router(policy=policy, dp_size=dp) as c, Router(policy=policy, dp_size=dp) as p:
                for call, n in enumerate((60, 3, 0, 45, 200, 1, 30)):
                    sts, reqs = batch(rng, n, dp)
                    shape = call % 3
                    m = None if shape == 0 else [{q.id: rng.randrange(300) for q in reqs if rng.random() < 0.6}
                                                 for _ in range(dp)]
                    with self.subTest(policy=policy, call=call, n=n, matches=m is not None):
                        _accel.use(None)
                        try:
                            want = p.route(sts, reqs, 1024, m)
                        except InvalidArgumentError as e:
                            want = type(e)
                        got = self.call(c, sts, reqs, 1024, m)
                        if want is InvalidArgumentError:
                            self.assertEqual(got[0], _errors.INVALID_ARGUMENT)
                        else:
                            self.assertEqual(got, (0, want.expected, want.assignment, want.unassigned, want.ranks))
                        self.assertEqual(c.state_digest(), p.state_digest())

    def test_ids_that_are_not_exact_ints_decode_as_ints(self):
        class Int(int):
            pass

        with Router(policy="kv_cache_aware", dp_size=2) as r:
            got = self.call(r, test_binding.idle(2), [Request(True, tokens=[1]), Request(Int(7), tokens=[2])], 8)
            self.assertIsNotNone(got)
            ids = [i for k in (0, 1) for i in got[2][k]]
            self.assertEqual(sorted(ids), [1, 7])
            self.assertEqual({type(i) for i in ids}, {int})

    def test_caller_code_during_packing_changes_nothing_packed(self):
        # A relax or memory_pressure object's truth test runs the caller's
        # code in the middle of packing, on every Python version. Whatever it
        # does to the batch (rebinding the requests' ids and other attributes
        # to free the objects packed, emptying or growing the lists) the
        # call packs what it was given or hands the batch to the Python path,
        # and nothing is read after it is freed.
        class Vandal:
            def __init__(self, reqs, *lists):
                self.reqs, self.lists, self.ran = reqs, lists, 0

            def __bool__(self):
                self.ran += 1
                for q in self.reqs:
                    q.id, q.lora_id, q.conversation_id = -1, 0, None
                for lst in self.lists:
                    lst.clear()
                    lst.extend(object() for _ in range(100))
                gc.collect()
                return True

        _built.configure(Request, REQUEST_FIELDS, RankState, RankState.__slots__)
        for where in ("last request's relax", "a state's memory_pressure"):
            with self.subTest(where), Router(policy="kv_cache_aware", dp_size=4) as r:
                n = 32
                reqs = [Request(2 ** 62 + i, tokens=[i % 3, i], lora_id=2 ** 40 + i, conversation_id="c%d" % i)
                        for i in range(n)]
                want = [2 ** 62 + i for i in range(n)]  # equal ints, other objects than the requests'
                batch_list, sts = list(reqs), list(test_binding.idle(4))
                vandal = Vandal(reqs, batch_list, sts)
                if where.startswith("last"):
                    reqs[-1].relax = vandal
                else:
                    sts[2].memory_pressure = vandal
                got = _built.route(_abi.route_address, r._handle, sts, batch_list, r._send_tokens,
                                   [{} for _ in range(4)], False, 64, r._errbuf)
                self.assertEqual(vandal.ran, 1)
                if where.startswith("last"):  # every id was packed before the vandal ran
                    self.assertIsNotNone(got)
                    self.assertEqual(got[0], 0)
                    self.assertEqual(sorted(i for k in range(4) for i in got[2][k]), want)
                # else the ids it rebound are not the plain case: None, for the Python path
                del reqs, batch_list, sts, vandal
                gc.collect()

    def test_decode_survives_collections_that_change_the_batch(self):
        # A garbage collection during decoding runs arbitrary code; here it
        # rebinds every request's id, freeing the id objects packed. The
        # result must still name the ids routed, and nothing may be freed
        # under it. The batch is passed as tuples, which route() need not
        # copy, so that decoding makes the call's first tracked allocations.
        # (Up to 3.11 collections run inside them; from 3.12 at the
        # interpreter's next check, after the call, where this proves less:
        # the packing test above covers every version.)
        reqs = [Request(2 ** 62 + i, tokens=[i % 3, i]) for i in range(64)]
        want = [2 ** 62 + i for i in range(64)]  # equal ints, other objects: the requests' die with them
        batch = tuple(reqs)
        sts = tuple(test_binding.idle(4))
        collections_seen = []

        def vandal(phase, info):
            collections_seen.append(phase)
            for q in reqs:
                q.id = -1

        _built.configure(Request, REQUEST_FIELDS, RankState, RankState.__slots__)
        old = gc.get_threshold()
        with Router(policy="kv_cache_aware", dp_size=4) as r:
            # Packing allocates no tracked objects; decoding's first
            # allocation collects.
            gc.collect()
            gc.callbacks.append(vandal)
            gc.set_threshold(1)
            try:
                got = _built.route(_abi.route_address, r._handle, sts, batch, r._send_tokens, None, False,
                                   64, r._errbuf)
            finally:
                gc.set_threshold(*old)
                gc.callbacks.remove(vandal)
        self.assertTrue(collections_seen, "no collection ran during the call: the test proves nothing")
        self.assertEqual({q.id for q in reqs}, {-1})
        self.assertIsNotNone(got)
        self.assertEqual(got[0], 0)
        self.assertEqual(sorted(i for k in range(4) for i in got[2][k]), sorted(want))
        del reqs, batch
        gc.collect()
        self.assertEqual(sum(len(v) for v in got[2].values()), 64)  # still alive and intact

    def test_router_routes_through_it(self):
        calls = []

        class Spy:
            def __getattr__(self, name):
                return getattr(_built, name)

            def route(self, *args):
                got = _built.route(*args)
                calls.append(got)
                return got

        _accel.use(Spy())
        with Router(policy="kv_cache_aware", dp_size=2) as r:
            res = r.route(test_binding.idle(2), [Request(1, tokens=[1, 2]), Request(2, tokens=[1, 2])], 8,
                          [{1: 2}, {}])
            self.assertEqual(res.ranks, [0, 1])
            self.assertEqual(calls, [(0, res.expected, res.assignment, res.unassigned, res.ranks)])
            with self.assertRaises(InvalidArgumentError):
                r.route(test_binding.idle(2), [Request(1, target_rank=2)], 8)
            self.assertEqual(calls[-1][0], _errors.INVALID_ARGUMENT)
            self.assertEqual(calls[-1][2:], (None, None, None))

    def test_assignment(self):
        rng = random.Random(2)
        for it in range(30):
            dp, n = rng.randrange(1, 9), rng.randrange(0, 40)
            order = array.array("Q", [rng.randrange(2 ** 64) for _ in range(n)])
            cuts = sorted(rng.randrange(n + 1) for _ in range(dp))
            offsets = array.array("i", [0] + cuts)
            want = {r: order[offsets[r]:offsets[r + 1]].tolist() for r in range(dp)}
            self.assertEqual(_built.assignment(order, offsets), want, it)
        good = array.array("Q", [1, 2])
        for bad_order, bad_offsets in [(good, array.array("i", [0, 3])), (good, array.array("i", [1, 0])),
                                       (good, array.array("i", [-1, 1])), (b"123", array.array("i", [0, 0])),
                                       (good, b"\0\0\0"), (good, 5)]:
            self.assertIsNone(_built.assignment(bad_order, bad_offsets))

    def test_library_errors_come_back(self):
        with Router(policy="kv_cache_aware", dp_size=2) as r:
            got = self.call(r, test_binding.idle(2), [Request(1, tokens=[1], target_rank=5)], 8)
            self.assertEqual(got[0], _errors.INVALID_ARGUMENT)
            self.assertEqual(got[2:], (None, None, None))
            self.assertIn(b"target_rank", r._errbuf.value)

    def test_unusual_input_goes_to_python(self):
        class MyRequest(Request):
            __slots__ = ()

        with Router(policy="kv_cache_aware", dp_size=2) as r:
            sts = test_binding.idle(2)
            for name, args in [
                ("subclass", (sts, [MyRequest(1, tokens=[1])], 8)),
                ("states a UserList", (collections.UserList(sts), [Request(1)], 8)),
                ("match rows != ranks", (sts, [Request(1)], 8, [{}])),
                ("match_lens a dict", (sts, [Request(1)], 8, {0: {}})),
                ("id not in the batch", (sts, [Request(1)], 8, [{2: 1}, {}])),
            ]:
                with self.subTest(name):
                    self.assertIsNone(self.call(r, *args))


class MatchFormsTest(BothPaths):
    """Every match-table form gives the dict form's table and decision."""

    def forms(self, rng, ids, table):
        """(name, match_lens, match_format) for one table {rank: {id: len}}."""
        dp = len(table)
        dicts_in_order = [{i: table[r].get(i, 0) for i in ids} for r in range(dp)]
        shuffled = []
        for r in range(dp):
            items = list(table[r].items())
            rng.shuffle(items)
            shuffled.append(dict(items))
        rows = [[table[r].get(i, 0) for i in ids] for r in range(dp)]
        pairs_sparse = []
        for r in range(dp):
            items = list(table[r].items())
            rng.shuffle(items)
            pairs_sparse.append([x for kv in items for x in kv])
        return [
            ("dicts, sparse, shuffled", shuffled, "auto"),
            ("dicts, dense, in order", dicts_in_order, "auto"),
            ("dicts with equal int keys of other objects", [{int(str(k)): v for k, v in d.items()}
                                                           for d in dicts_in_order], "auto"),
            ("rows as lists", rows, "auto"),
            ("rows as tuples", [tuple(x) for x in rows], "auto"),
            ("rows as array('i')", [array.array("i", x) for x in rows], "auto"),
            ("mixed rows and dicts", [rows[r] if r % 2 else shuffled[r] for r in range(dp)], "auto"),
            ("pairs, dense, in order", [[x for i in ids for x in (i, table[r].get(i, 0))] for r in range(dp)], "pairs"),
            ("pairs, sparse, shuffled", pairs_sparse, "pairs"),
            ("pairs as tuples of array('q')", tuple(array.array("q", p) for p in pairs_sparse), "pairs"),
        ]

    def test_forms_agree(self):
        rng = random.Random(3)
        for it in range(25):
            dp = rng.choice((1, 2, 4, 8))
            n = rng.randrange(0, 40)
            reqs = [Request(rng.randrange(2 ** 63), tokens=[rng.randrange(3) for _ in range(rng.randrange(1, 80))])
                    for _ in range(n)]
            ids = [q.id for q in reqs]
            table = [{i: rng.randrange(80) for i in ids if rng.random() < 0.6} for _ in range(dp)]
            sts = [RankState(r, rng.randrange(3), rng.randrange(500)) for r in range(dp)]
            want_table = want = None
            for path in self.each_path():
                for name, m, fmt in self.forms(rng, ids, table):
                    got_table = bytes(_pack.match_table(m, reqs, dp, n, fmt == "pairs"))
                    with Router(policy="kv_cache_aware", dp_size=dp) as r:
                        res = r.route(sts, reqs, 64, m, match_format=fmt)
                    got = (res.assignment, res.expected, res.unassigned)
                    if want is None:
                        want_table, want = got_table, got
                    self.assertEqual(got_table, want_table, (it, path, name))
                    self.assertEqual(got, want, (it, path, name))

    def test_pairs_errors(self):
        reqs = [Request(10, tokens=[1]), Request(20, tokens=[2])]
        sts = test_binding.idle(2)
        for name, m, fmt, needle in [
            ("odd length", [[10, 1, 20], []], "pairs", "pairs"),
            ("unknown id", [[10, 1, 30, 2], []], "pairs", "30, which is not in the batch"),
            ("id twice", [[], [20, 1, 20, 2]], "pairs", "names request id 20 twice"),
            ("negative length", [[10, -1], []], "pairs", "match"),
            ("too few rows", [[10, 1]], "pairs", "one per rank"),
            ("row None", [None, []], "pairs", "match_lens"),
            ("unknown format", [[0, 0], [0, 0]], "rows", "match_format"),
        ]:
            messages = set()
            for _ in self.each_path():
                with Router(policy="kv_cache_aware", dp_size=2) as r:
                    with self.assertRaises(InvalidArgumentError) as cm:
                        r.route(sts, reqs, 8, m, match_format=fmt)
                    self.assertIn(needle, str(cm.exception), name)
                    messages.add(str(cm.exception))
            self.assertEqual(len(messages), 1, (name, messages))


REQUEST_FIELDS = ("id", "tokens", "num_tokens", "target_rank", "relax", "conversation_id", "lora_id", "cache_salt",
                  "max_new_tokens")


class RequestTypeTest(unittest.TestCase):
    """_speedups.Request (exported as adprouter.Request when the extension
    loads) against the pure-Python class it stands in for."""

    def setUp(self):
        if _built is None or not hasattr(_built, "Request"):
            self.skipTest("no C compiler or Python headers to build _speedups.c")
        self.fast, self.slow = _built.Request, adprouter._PyRequest

    def tearDown(self):
        _accel.use(_loaded)

    def outcome(self, fn):
        """("ok", fields, repr) or (exception type, message) of fn()."""
        try:
            q = fn()
        except Exception as e:  # noqa: BLE001 - comparing whatever is raised
            return type(e), str(e)
        return "ok", tuple(getattr(q, f) for f in REQUEST_FIELDS), repr(q)

    def test_same_construction(self):
        toks = [1, 2, 3]
        buf = array.array("i", [4, 5])
        calls = [
            ((7,), {}), ((7, toks), {}), ((7,), {"tokens": toks}), ((7, None, 99), {}),
            ((7,), {"num_tokens": 5}), ((7,), {"tokens": ()}), ((7,), {"tokens": buf}),
            ((7, toks, None, 2, False, "conv", 3, 4), {}),
            ((), dict(zip(REQUEST_FIELDS, (7, toks, 10, 1, 0, b"c", 2 ** 64 - 1, 5)))),
            ((7, toks), {"cache_salt": 9, "lora_id": 8, "relax": None}),
            ((-1,), {"tokens": "not checked here"}),
            # call errors: the messages Python gives for Request.__init__
            ((), {}), (tuple(range(9)), {}), ((7,), {"bogus": 1}), ((7,), {"id": 8}),
            ((7, toks), {"tokens": toks}), ((), {"tokens": toks}), ((7,), {1: 2}),
        ]
        for args, kwargs in calls:
            with self.subTest(args=args, kwargs=kwargs):
                want = self.outcome(lambda: self.slow(*args, **kwargs))
                self.assertEqual(self.outcome(lambda: self.fast(*args, **kwargs)), want)
                # Subclasses construct through __new__/__init__, not vectorcall.
                sub = type("Sub", (self.fast,), {"__slots__": ()})
                got = self.outcome(lambda: sub(*args, **kwargs))
                self.assertEqual(got[:2], want[:2])
                if args or kwargs:
                    q = self.fast(1)
                    init = self.outcome(lambda: self.fast.__init__(q, *args, **kwargs) or q)
                    self.assertEqual(init, want)

    def test_same_attribute_behaviour(self):
        for cls in (self.fast, self.slow):
            q = cls(1, tokens=[1])
            q.tokens, q.num_tokens, q.relax = None, 12, False
            self.assertEqual(repr(q), "Request(id=1, n=12, target_rank=None, relax=False, conversation_id=None)")
        errors = {}
        for cls in (self.fast, self.slow):
            q = cls(1)
            del q.relax
            got = []
            for fn in (lambda: q.relax, lambda: repr(q), lambda: setattr(q, "extra", 1),
                       lambda: q.__dict__, lambda: cls.__new__(cls).id):
                got.append(self.outcome(fn)[:2])
            errors[cls] = got
            self.assertTrue(all(t is AttributeError for t, _ in got), got)
        self.assertEqual(errors[self.fast], errors[self.slow])

    def test_pickle_and_copy(self):
        q = self.fast(2 ** 63, tokens=[1, 2], num_tokens=9, target_rank=1, relax=False, conversation_id="c",
                      lora_id=3, cache_salt=4)
        clones = [(q, copy.copy(q)), (q, copy.deepcopy(q))]
        if adprouter.Request is not adprouter._PyRequest:
            # pickle finds the class by name: the one the binding exports.
            exported = adprouter.Request(*(getattr(q, f) for f in REQUEST_FIELDS))
            clones += [(exported, pickle.loads(pickle.dumps(exported, protocol=2))),
                       (exported, pickle.loads(pickle.dumps(exported)))]
        for orig, clone in clones:
            self.assertIs(type(clone), type(orig))
            self.assertEqual([getattr(clone, f) for f in REQUEST_FIELDS], [getattr(q, f) for f in REQUEST_FIELDS])
        self.assertIs(copy.copy(q).tokens, q.tokens)

    def test_gc_sees_fields(self):
        q = self.fast(1, tokens=[])
        q.tokens.append(q)  # a cycle the collector must be able to break
        self.assertTrue(gc.is_tracked(q))
        self.assertIn(q.tokens, gc.get_referents(q))

    def test_packs_like_the_class(self):
        _built.configure(self.fast, REQUEST_FIELDS, RankState, adprouter.RankState.__slots__)
        rng = random.Random(3)
        _, reqs = batch(rng, 30, 4, ("list", "array", "none"))
        fast = [self.fast(*(getattr(q, f) for f in REQUEST_FIELDS)) for q in reqs]
        for send in (0, adprouter.PREFIX_TOKENS, None):
            got = _built.pack_requests(fast, send)
            self.assertIsNotNone(got)
            self.assertEqual(as_bytes(got), as_bytes(_pack.pack_requests(reqs, send)))
        sub = type("Sub", (self.fast,), {"__slots__": ()})
        self.assertIsNone(_built.pack_requests([fast[0], sub(1, tokens=[1])], 64))

    def test_exported_when_loaded(self):
        if _loaded is None or not hasattr(_loaded, "Request"):
            self.assertIs(adprouter.Request, adprouter._PyRequest)
        else:
            self.assertIs(adprouter.Request, _loaded.Request)
            self.assertEqual(adprouter.Request.__doc__, adprouter._PyRequest.__doc__)
            self.assertEqual(adprouter.Request.__module__, "adprouter")


class LazyResultTest(unittest.TestCase):
    def tearDown(self):
        _accel.use(_loaded)

    def test_fields_decode_on_use_and_can_be_set(self):
        _accel.use(None)  # the ctypes path decodes lazily; the C path decodes in route()
        with Router(policy="kv_cache_aware", dp_size=2) as r:
            res = r.route(test_binding.idle(2), [Request(i, tokens=[i]) for i in range(3)], 1)
            self.assertIsInstance(res, _pack.LazyResult)
            self.assertEqual(res.expected, 1)
            self.assertEqual(sorted(res.assignment), [0, 1])
            self.assertEqual(len(res.unassigned), 1)
            self.assertEqual(sorted(res.ranks), [-1, 0, 1])
            self.assertIs(res.assignment, res.assignment)  # decoded once
            res.assignment = {}
            self.assertEqual(res.assignment, {})
            self.assertIn("RouteResult(", repr(res))


if __name__ == "__main__":
    unittest.main()
