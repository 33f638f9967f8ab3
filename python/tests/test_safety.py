"""The binding never lets a bad call escape as anything but adprouter.Error,
and never takes its host down: calls in a forked child raise ForkedError at
once (instead of hanging in the Go runtime), every rejected input raises an
Error subclass and changes nothing, and integers are range-checked before
ctypes could wrap them.

Run from the repository root, after ./build.sh:
    PYTHONPATH=python python3 -m unittest discover -s python/tests -p test_safety.py -v
"""

import os
import signal
import time
import unittest

import adprouter
from adprouter import ConfigError, Error, ForkedError, InvalidArgumentError, RankState, Request, Router


def states(n):
    return [RankState(rank=i) for i in range(n)]


def wait_child(pid, timeout=20.0):
    """The child's exit status, or None (after killing it) if it hung."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got, status = os.waitpid(pid, os.WNOHANG)
        if got == pid:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


@unittest.skipUnless(hasattr(os, "fork"), "needs os.fork")
class ForkTest(unittest.TestCase):
    def test_child_refuses_parent_unaffected(self):
        r = Router(policy="kv_cache_aware", dp_size=2)
        reqs = [Request(id=i, tokens=list(range(100 + i))) for i in range(8)]
        r.route(states(2), reqs, max_num_active_requests=8)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report what each call raised, then exit
            os.close(read)
            lines = []
            calls = [
                ("route", lambda: r.route(states(2), reqs, max_num_active_requests=8)),
                ("state_digest", r.state_digest),
                ("stats", r.stats),
                ("Router", lambda: Router(dp_size=2)),
                ("block_hashes", lambda: adprouter.block_hashes(list(range(64)))),
                ("nvml_init", adprouter.nvml_init),
                ("size_kv", lambda: adprouter.size_kv(1 << 30, 1024)),
            ]
            # Many calls: the old failure was a hang once Go's GC ran.
            for _ in range(200):
                for name, fn in calls:
                    try:
                        fn()
                        lines.append("%s returned" % name)
                    except ForkedError as e:
                        if "spawn" not in str(e):
                            lines.append("%s: message does not name spawn: %s" % (name, e))
                    except BaseException as e:  # noqa: BLE001 - report anything else
                        lines.append("%s raised %s: %s" % (name, type(e).__name__, e))
            os.write(write, "\n".join(sorted(set(lines))).encode())
            os._exit(0)
        os.close(write)
        code = wait_child(pid)
        with os.fdopen(read, "rb") as f:
            report = f.read().decode()
        self.assertEqual(code, 0, "the forked child hung or died: %s" % report)
        self.assertEqual(report, "", "calls in the forked child did not all raise ForkedError")
        # The parent is unaffected.
        self.assertEqual(sum(map(len, r.route(states(2), reqs, 8).assignment.values())), 8)
        r.close()

    def test_forked_error_is_an_error(self):
        self.assertTrue(issubclass(ForkedError, Error))
        self.assertTrue(issubclass(ForkedError, RuntimeError))


class ErrorTypesTest(unittest.TestCase):
    """Every bad call raises an adprouter.Error subclass, never a raw
    TypeError, OverflowError, MemoryError or ctypes.ArgumentError."""

    def assert_error(self, fn, kind=Error, what=""):
        try:
            fn()
        except kind:
            return
        except BaseException as e:  # noqa: BLE001
            self.fail("%s raised %s: %s, want %s" % (what, type(e).__name__, e, kind.__name__))
        self.fail("%s did not raise, want %s" % (what, kind.__name__))

    def test_router_options(self):
        for what, kwargs in [
            ("NUL in a string", dict(dp_size=2, policy="default\0x")),
            ("NUL in new_conv_placement", dict(dp_size=2, policy="conversation", new_conv_placement="round_robin\0")),
            ("a list value", dict(dp_size=[2])),
            ("None policy", dict(dp_size=2, policy=None)),
            ("dp_size 2**31", dict(dp_size=2**31)),
            ("dp_size 2**64", dict(dp_size=2**64)),
            ("plus sign", dict(dp_size="+4")),
            ("underscores", dict(dp_size="1_0")),
            ("hex float", dict(dp_size=2, warmup_factor="0x1p1")),
            ("inf", dict(dp_size=2, load_balance_weight=float("inf"))),
            ("nan", dict(dp_size=2, load_balance_weight=float("nan"))),
            ("a float dp_size", dict(dp_size=2.0)),
            ("unknown option", dict(dp_size=2, beta=1)),
            ("lone surrogate", dict(dp_size=2, policy="\udc80")),
        ]:
            self.assert_error(lambda: Router(**kwargs), ConfigError, what)

    def test_option_text_equals_library_parse(self):
        # One parser: values the binding formats are the ones the library reads.
        r = Router(dp_size="4", load_balance_weight=0.1 + 0.2, warmup_factor="2.5")
        r.close()
        r = Router(dp_size=4, cold_start_warmup=True, capacity_aware="1")
        r.close()

    def test_route_inputs(self):
        r = Router(dp_size=2)
        ok = [Request(id=1, tokens=[1, 2, 3])]
        for what, args in [
            ("states not a sequence", (5, ok, 8)),
            ("requests not a sequence", (states(2), 5, 8)),
            ("state of the wrong type", ([object(), object()], ok, 8)),
            ("request of the wrong type", (states(2), [object()], 8)),
            ("id 2**64", (states(2), [Request(id=2**64, tokens=[1])], 8)),
            ("id -1", (states(2), [Request(id=-1, tokens=[1])], 8)),
            ("token 2**31", (states(2), [Request(id=1, tokens=[2**31])], 8)),
            ("token str", (states(2), [Request(id=1, tokens=["a"])], 8)),
            ("num_tokens 2**63", (states(2), [Request(id=1, num_tokens=2**63)], 8)),
            ("target 2**31", (states(2), [Request(id=1, tokens=[1], target_rank=2**31)], 8)),
            ("lora 2**64", (states(2), [Request(id=1, tokens=[1], lora_id=2**64)], 8)),
            ("active tokens 2**63", ([RankState(rank=0, num_active_tokens=2**63), RankState(rank=1)], ok, 8)),
            ("max active 0", (states(2), ok, 0)),
            ("max active 2**31", (states(2), ok, 2**31)),
            ("max active str", (states(2), ok, "8")),
            ("conversation int", (states(2), [Request(id=1, tokens=[1], conversation_id=5)], 8)),
        ]:
            self.assert_error(lambda: r.route(*args), InvalidArgumentError, what)
        self.assert_error(lambda: r.route(states(2), ok, 8, match_lens=[{1: 2**40}, {}]),
                          InvalidArgumentError, "match 2**40")
        self.assert_error(lambda: r.route(states(2), ok, 8, match_lens=5), InvalidArgumentError,
                          "match_lens not a sequence")
        self.assert_error(lambda: r.stats(max_groups=2**40), InvalidArgumentError, "max_groups 2**40")
        self.assert_error(lambda: r.stats(max_groups=-1), InvalidArgumentError, "max_groups -1")
        # Nothing changed: the router routes as a fresh one would.
        fresh = Router(dp_size=2)
        self.assertEqual(r.state_digest(), fresh.state_digest())
        fresh.close()
        r.close()

    def test_limits(self):
        # dp_size, conversation id length and the index's memory are bounded.
        self.assert_error(lambda: Router(dp_size=4097), ConfigError, "dp_size 4097")
        Router(dp_size=4096).close()
        self.assert_error(lambda: Router(dp_size=2, index_max_bytes=10), ConfigError, "index_max_bytes 10")
        r = Router(policy="conversation", dp_size=2)
        long_id = Request(id=1, num_tokens=5, conversation_id="c" * 1025)
        self.assert_error(lambda: r.route(states(2), [long_id], 8), InvalidArgumentError, "1025-byte id")
        ok = r.route(states(2), [Request(id=1, num_tokens=5, conversation_id="c" * 1024)], 8)
        self.assertEqual(sum(map(len, ok.assignment.values())), 1)
        self.assertEqual(r.stats(max_groups=0)["conversations"], 1)
        r.close()
        r = Router(dp_size=8, prefix_source="index", index_max_bytes=1 << 20)
        for k in range(40):
            r.route(states(8), [Request(id=i, tokens=list(range(k * 10000 + i * 3000, k * 10000 + i * 3000 + 2048)))
                               for i in range(8)], 100)
        st = r.stats(max_groups=0)
        self.assertLessEqual(st["index_bytes"], 1 << 20)
        self.assertGreater(st["index_entries"], 0)
        r.close()

    def test_tokens_read_comes_from_the_library(self):
        for kwargs, want in [(dict(policy="default"), 0), (dict(policy="conversation"), 0),
                             (dict(), 64), (dict(prefix_source="index"), -1),
                             (dict(prefix_source="probe+index"), -1), (dict(warmup="demand"), -1)]:
            r = Router(dp_size=2, **kwargs)
            self.assertEqual(r.tokens_read, want, kwargs)
            r.close()

    def test_block_hashes_ranges(self):
        for what, kwargs in [
            ("tokens_per_block 2**32+32", dict(tokens_per_block=2**32 + 32)),
            ("tokens_per_block 0", dict(tokens_per_block=0)),
            ("tokens_per_block 2**20", dict(tokens_per_block=2**20)),
            ("lora_id -1", dict(lora_id=-1)),
            ("cache_salt 2**64", dict(cache_salt=2**64)),
            ("tokens_per_block float", dict(tokens_per_block=32.0)),
        ]:
            self.assert_error(lambda: adprouter.block_hashes(list(range(100)), **kwargs),
                              InvalidArgumentError, what)
        self.assert_error(lambda: adprouter.block_hashes([2**31]), InvalidArgumentError, "token 2**31")
        self.assert_error(lambda: adprouter.block_hashes(5), InvalidArgumentError, "tokens not iterable")
        self.assertEqual(len(adprouter.block_hashes(list(range(100)), tokens_per_block=32)), 3)

    def test_nvml_selectors(self):
        for device in (2**32, -1, "index:4294967296", "index:+1", "x" * 10000, b"GPU-1", 1.5):
            self.assert_error(lambda: adprouter.read_memory(device), Error, "read_memory(%r)" % (device,))


if __name__ == "__main__":
    unittest.main()
