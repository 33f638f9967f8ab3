"""docs/operations.md stays true: every stats() field and every metric family
is documented there, and nothing documented there is gone. (Its Python
blocks run with every other document's, in docs_test.go.)"""

import os
import re
import unittest

import adprouter.metrics as M
import adprouter.trtllm as T
from adprouter import RankState, Router

import trtllm_fakes as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "operations.md")


@unittest.skipUnless(os.path.exists(DOC), "no docs/operations.md (an installed-package run)")
class OperationsDocTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(DOC) as f:
            cls.text = f.read()

    def table(self, heading):
        """The first column of the table under heading, without backquotes."""
        part = self.text[self.text.index(heading):]
        rows = re.findall(r"^\| `([^`]+)`", part.split("\n#", 1)[0], re.M)
        self.assertTrue(rows, heading)
        return rows

    def test_stats_fields(self):
        with Router(dp_size=2) as r:
            st = r.stats()
        documented = set(self.table("## What stats() counts"))
        want = {k for k in st} | {"ranks[k].%s" % k for k in st["ranks"][0]}
        with Router(dp_size=2, preset="full", warmup_min_requests=1) as r:
            from adprouter import Request
            r.route([RankState(rank=0), RankState(rank=1)], [Request(id=1, tokens=list(range(80)))] * 1, 4)
            group = r.stats()["hot_groups"][0]
        want |= {"hot_groups[i].%s" % k for k in group}
        adapter = T.DefaultADPRouter(F.Dist(0, 2))
        want |= set(adapter.stats()) - set(st)
        adapter.close()
        self.assertEqual(want, {d.split(" ")[0] for d in documented})

    def test_metric_families(self):
        self.assertEqual(self.table("### Families"), list(M.FAMILIES))
        for name in M.FAMILIES:
            row = re.search(r"^\| `%s` \| (\w+) \|" % name, self.text, re.M)
            self.assertEqual(row.group(1), M.FAMILIES[name][0], name)

    def test_names_mentioned_exist(self):
        names = set(re.findall(r"(?<![.\w])adprouter_[a-z_]+", self.text))
        self.assertGreater(len(names), 10)
        self.assertEqual(names - set(M.FAMILIES), set())


if __name__ == "__main__":
    unittest.main()
