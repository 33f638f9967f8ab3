"""Tests of Router.receipts() (python/adprouter/_receipt.py) against
build/libadprouter.so: one receipt per request with the reason the policy
gives, candidates whose scores make the chosen rank the policy's choice, and
a tie's shuffle equal to Python's own random.Random(id).shuffle.
"""

import random
import unittest

from adprouter import InvalidArgumentError, InvalidHandleError, RankState, Request, Router


def idle(n):
    return [RankState(rank=k) for k in range(n)]


class ReceiptTest(unittest.TestCase):
    def test_explicit_then_tie_broken_by_the_shuffle(self):
        with Router(dp_size=4, explain=True) as r:
            res = r.route(idle(4), [Request(id=0, tokens=[1] * 10, target_rank=2),
                                    Request(id=7, tokens=[1] * 10)], 8)
            target, tie = r.receipts()
        self.assertEqual((target.id, target.rank, target.reason, target.candidates), (0, 2, "explicit", []))
        self.assertEqual((tie.id, tie.rank, tie.reason, tie.ties, tie.eligible), (7, res.ranks[1], "scored", 3, 4))
        self.assertEqual((target.step, tie.step), (0, 1))
        shuffled = [0, 1, 2, 3]
        random.Random(7).shuffle(shuffled)
        self.assertEqual(tie.shuffle, shuffled)
        tied = [c.rank for c in tie.candidates if c.score == min(c.score for c in tie.candidates)]
        self.assertEqual(tie.rank, next(k for k in shuffled if k in tied))
        self.assertEqual(tie.candidates[2].tokens, 10)  # the explicit placement counts
        self.assertTrue(str(tie).startswith("request 7 (10 tokens) -> rank %d: scored" % tie.rank), str(tie))
        self.assertIn("3 ranks tied", str(tie))

    def test_affinity_gate_and_scores(self):
        states = [RankState(rank=0, num_active_requests=1, num_active_tokens=50),
                  RankState(rank=1, num_active_requests=1)]
        for threshold, rank, on in ((0.1, 0, True), (0.95, 1, False)):
            with Router(dp_size=2, explain=True, match_rate_threshold=threshold) as r:
                r.route(states, [Request(id=1, tokens=list(range(100)))], 4, match_lens=[{1: 90}, {}])
                (rc,) = r.receipts()
            self.assertEqual((rc.rank, rc.affinity, rc.max_match, rc.match_rate), (rank, on, 90, 0.9))
            for c in rc.candidates:
                self.assertEqual(c.score, (100 - (c.match if on else 0)) + c.load_term)
            self.assertEqual(min(rc.candidates, key=lambda c: c.score).rank, rank)

    def test_every_policy_names_its_reasons(self):
        cases = [
            (dict(policy="kv_cache_aware", cold_start_warmup=True), [Request(id=i, tokens=[5] * 8) for i in range(3)],
             ["cold_start_warmup", "cold_start_warmup", "scored"]),
            (dict(policy="default"), [Request(id=i, tokens=[5] * 8) for i in range(2)],
             ["least_loaded", "least_loaded"]),
            (dict(policy="conversation"), [Request(id=1, conversation_id="a"), Request(id=2, conversation_id="a")],
             ["new_conversation", "conversation_bound"]),
        ]
        for opts, reqs, reasons in cases:
            with self.subTest(**opts), Router(dp_size=2, explain=True, **opts) as r:
                res = r.route(idle(2), reqs, 4)
                got = r.receipts()
                self.assertEqual([rc.reason for rc in got], reasons)
                self.assertEqual([rc.rank for rc in got], res.ranks)

    def test_stacked_tails(self):
        # Four samples of a 2048-token prompt under on_schedule reuse: each
        # computes a 32-token tail beside the first; the third would stack
        # two blocks of tails on the rank that sets the lock step, and its
        # receipt says that rank was taken out (warmup off: an idle engine
        # would warm every rank).
        opts = dict(preset="recommended", warmup="off", engine_reuse="on_schedule", fair_share_multiplier=4)
        with Router(dp_size=4, explain=True, **opts) as r:
            res = r.route(idle(4), [Request(id=i, tokens=list(range(2048))) for i in range(1, 5)], 8,
                          match_lens=[{} for _ in range(4)])
            got = r.receipts()
        self.assertEqual(len(set(res.ranks)), 2, res.ranks)
        out = [c.rank for c in got[2].candidates if c.excluded == "stacked_tails"]
        self.assertEqual(out, [res.ranks[0]], str(got[2]))
        self.assertEqual((got[2].reason, got[2].eligible), ("predicted_ttft", 3))

    def test_soft_cap_exhausted_is_unplaced(self):
        with Router(dp_size=2, explain=True, fair_share_multiplier=1) as r:
            busy = [RankState(rank=k, num_active_requests=1) for k in range(2)]
            res = r.route(busy, [Request(id=i, tokens=[3] * 4) for i in range(3)], 2)
            last = r.receipts()[2]
        self.assertEqual(res.unassigned, [last.id])
        self.assertEqual((last.rank, last.reason, last.expected, last.step), (-1, "unplaced", 2, -1))
        self.assertIn("-> unplaced: every rank at its cap; soft cap 2, 0 eligible", str(last))

    def test_without_explain_and_after_close(self):
        r = Router(dp_size=2)
        with self.assertRaisesRegex(InvalidArgumentError, "explain"):
            r.receipts()
        r.close()
        with self.assertRaises(InvalidHandleError):
            r.receipts()
        with Router(dp_size=2, explain=True) as r:
            self.assertEqual(r.receipts(), [])


if __name__ == "__main__":
    unittest.main()
