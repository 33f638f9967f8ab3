"""Tests of the DEBUG logging of decisions and receipts (adprouter._log):
one record per decision on adprouter.decisions with the decision's counts,
the receipts on adprouter.receipts when the router explains, the same from
the pure-Python and the C-extension paths and from adprouter.trtllm, and
nothing at all (one isEnabledFor, no clock, no record) when DEBUG is off.
"""

import contextlib
import logging
import unittest
from unittest import mock

import adprouter.trtllm as T
from adprouter import RankState, Request, Router, _accel, _log

import trtllm_fakes as F

_loaded = _accel.speedups

# Both packing paths: the C extension when it was built, and pure Python.
PATHS = [("python", None)] + ([("speedups", _loaded)] if _loaded is not None else [])


def idle(n):
    return [RankState(rank=k) for k in range(n)]


def batch(first, n):
    return [Request(id=first + i, tokens=list(range(40 + 10 * i))) for i in range(n)]


class Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)

    def of(self, name):
        return [r for r in self.records if r.name == name]


class LoggingCase(unittest.TestCase):
    level = logging.DEBUG

    def setUp(self):
        self.logger = logging.getLogger("adprouter")
        self.saved = (self.logger.level, self.logger.propagate)
        self.capture = Capture()
        self.logger.addHandler(self.capture)
        self.logger.setLevel(self.level)
        self.logger.propagate = False

    def tearDown(self):
        self.logger.removeHandler(self.capture)
        self.logger.setLevel(self.saved[0])
        self.logger.propagate = self.saved[1]
        logging.getLogger("adprouter.receipts").setLevel(logging.NOTSET)
        _accel.use(_loaded)


class DecisionLogTest(LoggingCase):
    def test_one_record_per_decision(self):
        seen = {}
        for path, mod in PATHS:
            _accel.use(mod)
            self.capture.records.clear()
            with Router(dp_size=3) as r:
                got = []
                for k in range(4):
                    res = r.route(idle(3), batch(10 * k, 2 + 2 * k), 2)
                    recs = self.capture.of("adprouter.decisions")
                    self.assertEqual(len(recs), k + 1, path)
                    rec = recs[-1]
                    f = rec.adprouter
                    self.assertEqual(rec.levelno, logging.DEBUG)
                    placed = [len(res.assignment[j]) for j in range(3)]
                    self.assertEqual(f["placed"], placed, path)
                    self.assertEqual(f["expected"], res.expected, path)
                    self.assertEqual(f["unassigned"], list(res.unassigned), path)
                    self.assertEqual(f["decision"], k + 1, path)
                    self.assertEqual(f["digest"], r.state_digest(), path)
                    self.assertEqual(f["handle"], r._handle, path)
                    self.assertEqual(f["policy"], "kv_cache_aware")
                    self.assertGreater(f["elapsed_s"], 0)
                    msg = rec.getMessage()
                    self.assertIn("placed=%s expected=%d unassigned=%d" % (placed, res.expected,
                                                                              len(res.unassigned)), msg)
                    self.assertIn("decision=%d requests=%d" % (k + 1, 2 + 2 * k), msg)
                    self.assertIn("digest=%016x" % r.state_digest(), msg)
                    self.assertNotIn("\n", msg)
                    got.append({key: v for key, v in f.items() if key not in ("elapsed_s", "handle")})
                self.assertTrue(any(g["unassigned"] for g in got))  # the run had some
                self.assertEqual(self.capture.of("adprouter.receipts"), [])  # explain is off
            seen[path] = got
        if len(seen) == 2:
            self.assertEqual(seen["python"], seen["speedups"])

    def test_unassigned_ids_in_the_message(self):
        with Router(policy="default", dp_size=1) as r:
            r.route(idle(1), [Request(id=i, num_tokens=5) for i in range(20)], 1)
        msg = self.capture.of("adprouter.decisions")[0].getMessage()
        self.assertIn("unassigned=19 unassigned_ids=[", msg)
        self.assertIn(", ...]", msg)

    def test_receipts_when_explaining(self):
        for path, mod in PATHS:
            _accel.use(mod)
            self.capture.records.clear()
            with Router(dp_size=2, explain=True) as r:
                r.route(idle(2), batch(0, 3), 1)
                want = [str(rc) for rc in r.receipts()]
                r.route(idle(2), batch(10, 2), 4)
                want2 = [str(rc) for rc in r.receipts()]
            names = [rec.name for rec in self.capture.records]
            self.assertEqual(names, ["adprouter.decisions", "adprouter.receipts"] * 2, path)
            for rec, texts, n in zip(self.capture.of("adprouter.receipts"), (want, want2), (1, 2)):
                self.assertEqual([str(rc) for rc in rec.adprouter_receipts], texts, path)
                lines = rec.getMessage().split("\n", 1)
                self.assertIn("decision=%d (%d requests)" % (n, len(texts)), lines[0])
                self.assertEqual(lines[1], "\n".join(texts))
            self.assertIn("unplaced", self.capture.of("adprouter.receipts")[0].getMessage())

    def test_receipts_logger_off(self):
        logging.getLogger("adprouter.receipts").setLevel(logging.INFO)
        with Router(dp_size=2, explain=True) as r:
            with mock.patch.object(Router, "receipts", side_effect=AssertionError("read")):
                r.route(idle(2), batch(0, 3), 4)
        self.assertEqual([rec.name for rec in self.capture.records], ["adprouter.decisions"])

    def test_failed_route_logs_nothing(self):
        with Router(dp_size=2) as r:
            with self.assertRaises(ValueError):
                r.route(idle(2), [Request(id=1, num_tokens=3, target_rank=9)], 4)
        self.assertEqual(self.capture.records, [])

    def test_trtllm(self):
        for path, mod in PATHS:
            for trace in (False, True):
                _accel.use(mod)
                self.capture.records.clear()
                r = T.KVCacheAwareADPRouter(F.Dist(0, 2), F.KVCacheManager(), options={"route_trace": trace})
                states = [T.RankState(rank=k) for k in range(2)]
                out, expected = r.route_requests(states, [F.item(i, [1] * (10 + i)) for i in range(5)], 2)
                recs = self.capture.of("adprouter.decisions")
                self.assertEqual(len(recs), 1, (path, trace))
                f = recs[0].adprouter
                self.assertEqual(f["placed"], [len(out[0]), len(out[1])], (path, trace))
                self.assertEqual(f["expected"], expected)
                self.assertEqual(f["unassigned"], [x.id for x in r.carried], (path, trace))
                self.assertEqual(len(f["unassigned"]), 1)
                self.assertEqual(f["handle"], r.router._handle)
                # With traces on, the router explains: its receipts follow.
                self.assertEqual(len(self.capture.of("adprouter.receipts")), 1 if trace else 0, (path, trace))
                r.close()


class DisabledTest(LoggingCase):
    level = logging.INFO

    @contextlib.contextmanager
    def counting(self):
        """Patches every Logger's isEnabledFor and what a record needs, and
        _log's clock and writers, to count their calls (yields the counts)."""
        calls = {}
        real = logging.Logger.isEnabledFor

        def count(name, fn=None):
            def wrapper(*args, **kwargs):
                calls[name] = calls.get(name, 0) + 1
                return fn(*args, **kwargs) if fn else None
            return wrapper

        with contextlib.ExitStack() as stack:
            stack.enter_context(mock.patch.object(logging.Logger, "isEnabledFor", count("isEnabledFor", real)))
            for name in ("_log", "handle", "makeRecord", "debug", "log"):
                stack.enter_context(mock.patch.object(logging.Logger, name, count(name)))
            for name in ("clock", "routed", "routed_items", "_emit"):
                stack.enter_context(mock.patch.object(_log, name, count(name)))
            yield calls

    def ours(self):
        return [r for r in self.capture.records if r.name in ("adprouter.decisions", "adprouter.receipts")]

    def test_route_asks_once(self):
        for path, mod in PATHS:
            _accel.use(mod)
            with Router(dp_size=2, explain=True) as r:
                with self.counting() as calls:
                    r.route(idle(2), batch(0, 3), 1)
                self.assertEqual(calls, {"isEnabledFor": 1}, path)
        self.assertEqual(self.ours(), [])

    def test_trtllm_asks_once(self):
        for path, mod in PATHS:
            _accel.use(mod)
            r = T.DefaultADPRouter(F.Dist(0, 2))
            states = [T.RankState(rank=k) for k in range(2)]
            with self.counting() as calls:
                r.route_requests(states, [F.item(i, [1] * (10 + i)) for i in range(3)], 4)
            # The C path asks once; the Python path once more, in Router.route.
            self.assertEqual(calls, {"isEnabledFor": 1 if mod is not None else 2}, path)
            r.close()
        self.assertEqual(self.ours(), [])

    def test_disabled_by_logging_disable(self):
        self.logger.setLevel(logging.DEBUG)
        logging.disable(logging.DEBUG)
        try:
            with Router(dp_size=2) as r:
                r.route(idle(2), batch(0, 3), 4)
        finally:
            logging.disable(logging.NOTSET)
        self.assertEqual(self.ours(), [])


if __name__ == "__main__":
    unittest.main()
