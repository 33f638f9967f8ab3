"""python/bench_trtllm.py runs: --quick against the pure-Python oracle (no
TensorRT-LLM in this repository) prints its table with every row and size,
every compared decision agreeing, --row and --size choose what it times,
--profile prints its breakdown (row 1's call or, with --row 6, row 6's
iteration), and row 6's ranks report the KV state its
workload holds (timings are not checked: they are benchmarks, not tests)."""

import os
import re
import subprocess
import sys
import unittest
from types import SimpleNamespace

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(PYTHON_DIR, "bench_trtllm.py")

ROWS = ("(1) KV-aware route_requests", "(2) default route_requests", "(3) conversation route_requests",
        "(4) KV-aware iteration", "(4f) row 4's probe loop alone", "(5) index-mode iteration (ours)",
        "(6) recommended iteration (ours)")


def bench(*args):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    env.pop("ADPR_TRTLLM_SRC", None)
    for k in list(env):
        if k.startswith(("TRTLLM_ADPROUTER_", "ADPROUTER_")):
            del env[k]
    proc = subprocess.run([sys.executable, BENCH, *args], env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode:
        raise AssertionError("bench_trtllm.py %s exited %d:\n%s\n%s"
                             % (" ".join(args), proc.returncode, proc.stdout, proc.stderr))
    return proc.stdout


def bench_module():
    """python/bench_trtllm.py imported as a module (its folder on sys.path
    only while importing)."""
    sys.path.insert(0, PYTHON_DIR)
    try:
        import bench_trtllm
    finally:
        sys.path.remove(PYTHON_DIR)
    return bench_trtllm


@unittest.skipUnless(os.path.exists(BENCH), "no python/bench_trtllm.py beside the tests (an installed-package run)")
class BenchTrtllmTest(unittest.TestCase):
    def test_quick_against_oracle(self):
        out = bench("--quick")
        self.assertRegex(out, r"(?m)^adprouter\.trtllm against the pure-Python oracle")
        self.assertRegex(out, r"(?m)^row\s+size\s+ours\s+oracle\s+speed-up")
        for size in ("256 x 16", "1024 x 64"):
            for row in ROWS:
                with self.subTest(row=row, size=size):
                    self.assertRegex(out, r"(?m)^%s\s+%s\s+[\d.]+\s+[\d.]+\s+[\d.]+x\s"
                                     % (re.escape(row), re.escape(size)))
        m = re.search(r"(?m)^decisions: identical in all (\d+) compared calls of rows 1-4", out)
        self.assertIsNotNone(m, out)
        # 2 sizes x 4 rows x (2 warm-up + 3 timed) calls, plus the 4 batches
        # that fill the conversation routers (--quick: no fill to 65536).
        self.assertEqual(int(m.group(1)), 2 * (4 * 5 + 4))
        self.assertRegex(out, r"(?m)^row 5: ours \(index mode\) consistent in all 12 calls")
        self.assertRegex(out, r"(?m)^row 6: ours \(recommended preset, ranks reporting their KV\) consistent in all "
                              r"12 calls")
        for row in ("5", "6"):
            for size in ("256 x 16", "1024 x 64"):
                self.assertRegex(out, r"(?m)^  row %s, %s: ours' index: " % (row, size))
        self.assertNotIn("FAIL", out)

    def test_rows_chosen(self):
        # --row names the rows to time: only those are printed, and the
        # notes of rows not run are left out.
        out = bench("--quick", "--size", "256x16", "--row", "3", "--row", "4f")
        printed = [row for row in ROWS if re.search(r"(?m)^%s\s+256 x 16\s" % re.escape(row), out)]
        self.assertEqual(printed, [ROWS[2], ROWS[4]], out)
        self.assertNotIn("1024 x 64", out)
        m = re.search(r"(?m)^decisions: identical in all (\d+) compared calls of rows 1-4", out)
        self.assertIsNotNone(m, out)
        self.assertEqual(int(m.group(1)), 5 + 4)  # row 3: 2 warm-up + 3 timed, and 4 filling
        self.assertRegex(out, r"(?m)^row 4f: no router")
        self.assertNotRegex(out, r"(?m)^row 5:")
        self.assertNotRegex(out, r"(?m)^row 6:")
        self.assertNotIn("FAIL", out)

    def test_row_6_alone(self):
        # Row 6 runs on its own: no rows 1-4 to compare, its consistency
        # line and its index's note.
        out = bench("--quick", "--size", "256x16", "--row", "6")
        printed = [row for row in ROWS if re.search(r"(?m)^%s\s+256 x 16\s" % re.escape(row), out)]
        self.assertEqual(printed, [ROWS[6]], out)
        self.assertNotRegex(out, r"(?m)^decisions: ")
        self.assertRegex(out, r"(?m)^row 6: ours \(recommended preset, ranks reporting their KV\) consistent in all "
                              r"6 calls")
        self.assertRegex(out, r"(?m)^  row 6, 256 x 16: ours' index: ")
        self.assertNotIn("FAIL", out)

    def test_profile(self):
        out = bench("--profile", "--runs", "5")
        self.assertRegex(out, r"(?m)^\s+route_requests\s+[\d.]+$")
        from adprouter import _accel
        if _accel.speedups is not None:
            self.assertRegex(out, r"(?m)^\s+_speedups\.trtllm_route: .*\s[\d.]+$")

    def test_profile_row_6(self):
        out = bench("--profile", "--row", "6", "--quick", "--runs", "3")
        self.assertNotIn("route_requests, 256 requests", out)  # row 1's profile is not asked for
        got = [float(v) for v in re.findall(
            r"(?m)^  (?:gather_all_rank_states|gather_prefix_matches|route_requests|the whole iteration)"
            r" .*\s([\d.]+)$", out)]
        self.assertEqual(len(got), 4, out)
        self.assertTrue(all(v > 0 for v in got), out)
        # The stages' medians need not add up to the whole's, but none exceeds it.
        self.assertLessEqual(max(got[:3]), got[3], out)

    def test_profile_other_rows_refused(self):
        env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
        proc = subprocess.run([sys.executable, BENCH, "--profile", "--row", "4"], env=env,
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(proc.returncode, 2, proc.stdout + proc.stderr)
        self.assertIn("--profile times row 1 (the default) or row 6, not 4", proc.stderr)

    def test_mismatch_is_caught(self):
        B = bench_module()
        it = [SimpleNamespace(id=i) for i in range(3)]
        same = ({0: [it[0], it[1]], 1: [it[2]]}, 2)
        B.check_same("same", same, ({0: [it[0], it[1]], 1: [it[2]]}, 2))
        for other in (({0: [it[1], it[0]], 1: [it[2]]}, 2), ({0: [it[0], it[1]], 1: [it[2]]}, 3),
                      ({0: [it[0]], 1: [it[1], it[2]]}, 2)):
            with self.assertRaises(B.Mismatch):
                B.check_same("differ", same, other)
        with self.assertRaises(B.Mismatch):  # a request lost
            B.check_consistent("lost", ({0: [it[0]], 1: [it[2]]}, 2), it, [0, 0], 8)

    def test_previous_batch_freed_untimed(self):
        # A call's results hold its batch; freeing them must not land inside
        # the next pair's timed calls (either side's, whichever drops the
        # last reference). timed() reads the clock twice per timed call: a
        # result freed after an odd number of readings was freed while a call
        # was being timed.
        B = bench_module()
        events = []

        class Result:
            def __del__(self):
                events.append("free")

        def now():
            events.append("now")
            return 0

        saved = B._now
        B._now = now
        try:
            B.timed(4, 1, lambda k: (Result, Result), lambda k, a, b: None)
        finally:
            B._now = saved
        self.assertEqual(events.count("free"), 10)  # 5 pairs, every result freed
        for i, e in enumerate(events):
            if e == "free":
                self.assertEqual(events[:i].count("now") % 2, 0,
                                 "a result was freed while a call was timed: %s" % events)

    def test_renewed_batches_are_new_objects(self):
        # Rows 1, 2, 4 and 4f route each call's batch as new objects: the
        # same requests (ids, prompt lists, params) in objects no earlier call
        # saw, so that no call finds the batch in cache from the one before.
        B = bench_module()
        import trtllm_fakes as F
        w = B.Workload(16, 4, F.LlmRequestState)
        a, b = w.renewed(), w.renewed()
        for old, x, y in zip(w.items, a, b):
            self.assertEqual((x.id, y.id), (old.id, old.id))
            for obj in (x, x.request):
                self.assertNotIn(id(obj), {id(old), id(old.request), id(y), id(y.request)})
            self.assertIs(x.request.input_token_ids, old.request.input_token_ids)
            self.assertEqual(x.request.max_tokens, old.request.max_tokens)
            p, q = old.request.py_scheduling_params, x.request.py_scheduling_params
            self.assertEqual(p is None, q is None)
            if p is not None:
                self.assertIsNot(q, p)
                self.assertEqual((q.attention_dp_rank, q.attention_dp_relax),
                                 (p.attention_dp_rank, p.attention_dp_relax))

    def test_kv_reports(self):
        # Row 6's workload: ranks report a pool and the KV their active
        # requests will still take, rank 0's through its own KV cache
        # manager (the other side's has no get_kv_cache_stats), every
        # request carries what ours' report reads, and ours' states under
        # the recommended preset say what the workload says.
        B = bench_module()
        import trtllm_fakes as F
        from adprouter import trtllm as T
        w = B.Workload(256, 16, F.LlmRequestState)
        self.assertFalse(hasattr(w.kv, "get_kv_cache_stats"))
        for it in w.items:
            self.assertTrue(128 <= it.request.max_tokens <= 2048)
        live = [r for r in w.active if not T.is_retiring_request(r)]
        states = {r.state for r in live}
        self.assertEqual(states, {F.LlmRequestState.GENERATION_IN_PROGRESS, F.LlmRequestState.CONTEXT_INIT})
        for r in live:
            self.assertTrue(128 <= r.py_max_new_tokens <= 2048)
            if r.is_context_init_state:
                self.assertEqual((r.context_current_position, r.get_num_tokens(0)), (0, r.py_orig_prompt_len))
            else:
                self.assertLess(r.py_orig_prompt_len, r.get_num_tokens(0))
                self.assertLess(r.get_num_tokens(0), r.py_orig_prompt_len + r.py_max_new_tokens)
        for g in w.kv_gathered:
            capacity, free, pending = g[4:]
            self.assertTrue(0 < free < capacity, g)
            self.assertGreaterEqual(capacity, 2 * B.POOL_FLOOR)
            self.assertEqual(pending == 0, g[1] == 0, g)
        router = T.KVCacheAwareADPRouter(w.kv_dist, w.kv_stats, options={"preset": "recommended"})
        try:
            got = [(s.rank, s.num_active_requests, s.num_active_tokens, s.num_retiring_requests,
                    s.kv_capacity_tokens, s.free_kv_tokens, s.pending_kv_tokens)
                   for s in router.gather_all_rank_states(w.active, w.items)]
        finally:
            router.close()
        self.assertEqual(got, w.kv_gathered)
        self.assertEqual(got[0][6], sum(
            r.py_orig_prompt_len + r.py_max_new_tokens if r.is_context_init_state
            else r.py_orig_prompt_len + r.py_max_new_tokens - r.get_num_tokens(0) for r in live))


if __name__ == "__main__":
    unittest.main()
