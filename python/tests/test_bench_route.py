"""python/bench_route.py runs: each mode on a small cell, so that the
figures docs/performance.md quotes come from a harness that works (timings are not
checked: they are benchmarks, not tests)."""

import os
import re
import shutil
import subprocess
import sys
import unittest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(PYTHON_DIR, "bench_route.py")


def bench(*args):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    return subprocess.run([sys.executable, BENCH, *args], env=env, capture_output=True, text=True,
                          check=True, timeout=600).stdout


@unittest.skipUnless(os.path.exists(BENCH), "no python/bench_route.py beside the tests (an installed-package run)")
class BenchRouteTest(unittest.TestCase):
    def test_table(self):
        out = bench("--runs", "2", "--size", "64x8", "--policy", "kv_cache_aware+match",
                    "--policy", "conversation")
        for policy in ("kv_cache_aware +match", "conversation"):
            with self.subTest(policy):
                self.assertRegex(out, r"(?m)^%s\s+64\s+8\s+[\d.]+ .* [\d.]+x$" % re.escape(policy))

    def test_shaped_rows(self):
        # 256 x 16 +match also runs equal-length prompts and the tie-break's
        # worst case; each row first checks the binding's decision against
        # the reference's on its batch.
        out = bench("--runs", "2", "--size", "256x16", "--policy", "kv_cache_aware+match")
        for shape in ("", " =len", " =ties"):
            with self.subTest(shape or "plain"):
                self.assertRegex(out, r"(?m)^kv_cache_aware \+match%s\s+256\s+16\s+[\d.]+ .* [\d.]+x$"
                                 % re.escape(shape))

    def test_phases(self):
        out = bench("--phases", "--runs", "1", "--size", "64x8")
        self.assertRegex(out, r"64 requests x 8 ranks, (adprouter._speedups|pure Python);")
        for phase in ("Request objects from lists", "route(): pack, table, adpr_route, decode", "end to end"):
            self.assertRegex(out, r"(?m)^  %s\s+[\d.]+$" % re.escape(phase))

    @unittest.skipUnless(shutil.which("valgrind"), "valgrind is not installed")
    def test_instructions(self):
        out = bench("--instructions", "--runs", "2", "--size", "64x8")
        for key in ("instructions", "D1 misses", "LL misses"):
            self.assertRegex(out, r"(?m)^  %s\s+-?\d+$" % key)


if __name__ == "__main__":
    unittest.main()
