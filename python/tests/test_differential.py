"""Differential tests: the library (through the ctypes binding) against the pure-Python
reference router (python/tests/reference.py) on random batches.

Run from the repository root, after ./build.sh:
    PYTHONPATH=python python3 -m unittest discover -s python/tests -v

Fixed seeds; multi-call sequences so router state (KV warmup set, conversation map,
round-robin cursor) evolves; many ties (idle ranks, equal prompt lengths, equal
prefixes); ids over the whole uint64 range; explicit targets, strict and relaxed;
match lengths as dicts and as aligned lists; occasional invalid calls, where both
must raise and neither may change state. The binding sends only the first 64 tokens
for kv_cache_aware (and none otherwise) while the reference gets whole prompts.

ADPROUTER_DIFF_SCALE (default 1) multiplies the number of sequences.
"""

import os
import random
import unittest

import adprouter
import reference as ref

SCALE = float(os.environ.get("ADPROUTER_DIFF_SCALE", "1"))
POLICIES = ("default", "kv_cache_aware", "conversation")


def setUpModule():
    if not os.path.exists(adprouter.library_path()):
        raise RuntimeError("%s does not exist: build it with ./build.sh" % adprouter.library_path())


# --- random inputs -------------------------------------------------------------------------


def random_config(rng, policy):
    cfg = dict(policy=policy, dp_size=rng.choice((1, 2, 3, 4, 4, 8, 8, 16)))
    if policy == "kv_cache_aware":
        cfg.update(
            load_balance_weight=rng.choice((0.0, 0.1, 0.5, 1.0, 1.0, 2.0, 10.0, 1 / 3)),
            match_rate_threshold=rng.choice((0.0, 0.1, 0.1, 0.5, 0.9)),
            fair_share_multiplier=rng.choice((1.0, 1.5, 2.0, 2.0, 4.0)),
            cold_start_warmup=rng.random() < 0.4,
        )
    elif policy == "conversation":
        cfg.update(
            fair_share_multiplier=rng.choice((0.5, 1.0, 1.25, 2.0)),
            max_sessions=rng.choice((1, 2, 4, 16, 65536)),
            new_conv_placement=rng.choice(("round_robin", "least_queued", "least_tokens")),
        )
    elif rng.random() < 0.3:
        cfg["fair_share_multiplier"] = 3.0  # ignored by the default policy
    return cfg


def random_states(rng, dp, maxn):
    mode = rng.random()
    out = []
    for r in range(dp):
        if mode < 0.35:  # all idle: ties everywhere
            a, t = 0, 0
        elif mode < 0.55:  # a few equal loads
            a, t = rng.choice(((0, 0), (1, 100), (1, 100), (2, 256)))
        else:
            a = rng.randrange(0, maxn + 2)
            t = rng.choice((0, rng.randrange(0, 5000), a * 512))
        out.append((r, a, t))
    return out


class Gen:
    """Random batches for one router sequence."""

    def __init__(self, rng, cfg):
        self.rng = rng
        self.cfg = cfg
        self.dp = cfg["dp_size"]
        self.policy = cfg["policy"]
        # A few shared "system prompts" (some sharing a prefix with each other, some with
        # signed int32 extremes) so that grouping by the first 64 tokens matters.
        base = [rng.randrange(-2 ** 31, 2 ** 31) for _ in range(80)]
        self.systems = [
            [],
            base[:20],
            base[:40],
            base[:40] + [7] * 30,
            [0] * 70,
            [2 ** 31 - 1, -2 ** 31, 0, -1] * 20,
            [rng.randrange(100) for _ in range(64)],
            base[:50],  # requests from these differ only from token 50 or 60 on
            base[:60],
            base[:60],
        ]
        self.conversations = ["c%d" % k for k in range(6)] + ["日本-%d" % k for k in range(2)] + ["", None]
        self.next_id = rng.choice((0, 10 ** 6, 2 ** 63, 2 ** 64 - 4000))

    def new_id(self):
        rng = self.rng
        x = rng.random()
        if x < 0.5:
            self.next_id = (self.next_id + 1) % 2 ** 64
            return self.next_id
        if x < 0.8:
            return rng.randrange(2 ** 64)
        return rng.choice((0, 1, 2, 3, 5, 42, 99, 2 ** 32 - 1, 2 ** 32, 2 ** 63, 2 ** 64 - 1, 2 ** 64 - 2))

    def request(self, ids):
        rng = self.rng
        rid = self.new_id()
        while rid in ids:
            rid = self.new_id()
        ids.add(rid)
        sysp = rng.choice(self.systems)
        length = rng.choice((0, 1, 10, 10, 10, 32, 64, 64, 65, 100, 100, 200, len(sysp) + 3, 2048))
        if length <= len(sysp):
            toks = sysp[:length]
        else:
            toks = sysp + [rng.choice((1, 2, 3, rng.randrange(50000))) for _ in range(length - len(sysp))]
        kind = rng.random()
        num_tokens = None
        tokens = toks
        if kind < 0.1:  # prefix only, with the length
            tokens, num_tokens = toks[: rng.choice((0, 16, 64))], len(toks)
        elif kind < 0.2 and self.policy != "kv_cache_aware":  # count only
            tokens, num_tokens = None, len(toks)
        elif kind < 0.25:  # explicit, consistent num_tokens
            num_tokens = len(toks)
        target = None
        relax = True
        if rng.random() < 0.25:
            target = rng.randrange(self.dp)
            relax = rng.random() < 0.5
        elif rng.random() < 0.05:
            relax = False  # strict without a target: matters for the conversation policy only
        cid = rng.choice(self.conversations) if self.policy == "conversation" or rng.random() < 0.1 else None
        return dict(id=rid, tokens=tokens, num_tokens=num_tokens, target_rank=target, relax=relax,
                    conversation_id=cid, n=len(toks))

    def matches(self, reqs):
        rng = self.rng
        if self.policy != "kv_cache_aware" and rng.random() < 0.9:
            return None
        if rng.random() < 0.3:
            return None
        block = rng.choice((1, 16, 32))
        table = []
        for r in range(self.dp):
            row = []
            for q in reqs:
                n = q["n"]
                if rng.random() < 0.5 or n <= 1:
                    m = 0
                else:
                    m = rng.randrange(0, n) // block * block  # at most n-1
                    if rng.random() < 0.05:
                        m = n + rng.randrange(5)  # over-long matches are legal
                row.append(m)
            table.append(row)
        return table

    def call(self):
        rng = self.rng
        maxn = rng.choice((1, 2, 3, 4, 6, 8, 16, 100))
        n_req = rng.choice((0, 1, 2, 3, 5, 8, 8, 13, 16, 32, 64))
        ids = set()
        reqs = [self.request(ids) for _ in range(n_req)]
        return dict(states=random_states(rng, self.dp, maxn), requests=reqs, maxn=maxn, matches=self.matches(reqs))


# Invalid calls that both implementations must reject.
def corrupt(rng, call, dp):
    reqs = call["requests"]
    options = ["maxn0", "state_count", "neg_active", "neg_tokens"]
    if reqs:
        options += ["target_hi", "dup"] if len(reqs) > 1 else ["target_hi"]
    if dp > 1:
        options.append("swap")
    if reqs and call["matches"] is not None:
        options.append("neg_match")
    what = rng.choice(options)
    sts = [list(s) for s in call["states"]]
    reqs = [dict(q) for q in reqs]
    matches = [list(row) for row in call["matches"]] if call["matches"] is not None else None
    maxn = call["maxn"]
    if what == "maxn0":
        maxn = 0
    elif what == "state_count":
        sts = sts[:-1] if rng.random() < 0.5 else sts + [[dp, 0, 0]]
    elif what == "neg_active":
        sts[rng.randrange(dp)][1] = -1
    elif what == "neg_tokens":
        sts[rng.randrange(dp)][2] = -rng.randrange(1, 100)
    elif what == "target_hi":
        reqs[rng.randrange(len(reqs))]["target_rank"] = dp + rng.randrange(3)
    elif what == "dup":
        i, j = rng.sample(range(len(reqs)), 2)
        reqs[j]["id"] = reqs[i]["id"]
        if matches is not None:  # keep the dict form well defined: identical rows
            for row in matches:
                row[j] = row[i]
    elif what == "swap":
        i, j = rng.sample(range(dp), 2)
        sts[i], sts[j] = sts[j], sts[i]
    elif what == "neg_match":
        matches[rng.randrange(dp)][rng.randrange(len(reqs))] = -1
    return dict(states=[tuple(s) for s in sts], requests=reqs, maxn=maxn, matches=matches), what


# --- the two front ends ------------------------------------------------------------------------


def binding_args(call, rng, policy):
    sts = [adprouter.RankState(r, a, t) for r, a, t in call["states"]]
    reqs = []
    for q in call["requests"]:
        cid = q["conversation_id"]
        if isinstance(cid, str) and cid and rng.random() < 0.3:
            cid = cid.encode()
        reqs.append(adprouter.Request(q["id"], tokens=q["tokens"], num_tokens=q["num_tokens"],
                                      target_rank=q["target_rank"], relax=q["relax"], conversation_id=cid))
    m = call["matches"]
    if m is not None and rng.random() < 0.5:
        # The dict form; a dict holds a request's last value, like the reference's.
        m = [{q["id"]: v for q, v in zip(call["requests"], row) if v or rng.random() < 0.5} for row in m]
    return sts, reqs, call["maxn"], m


def reference_args(call):
    sts = [ref.RankState(r, a, t) for r, a, t in call["states"]]
    reqs = [ref.Request(q["id"], q["tokens"], q["num_tokens"], q["target_rank"], q["relax"], q["conversation_id"])
            for q in call["requests"]]
    m = call["matches"]
    if m is not None:
        m = [{q["id"]: v for q, v in zip(call["requests"], row)} for row in m]
    return sts, reqs, call["maxn"], m


def run_binding(router, call, rng, policy):
    try:
        res = router.route(*binding_args(call, rng, policy))
    except adprouter.InvalidArgumentError as e:
        return ("error", str(e))
    return (res.assignment, res.expected, res.unassigned, res.ranks)


def run_reference(router, call):
    try:
        res = router.route(*reference_args(call))
    except ValueError as e:
        return ("error", str(e))
    return (res.assignment, res.expected, res.unassigned)


# --- the tests --------------------------------------------------------------------------------


class DifferentialTest(unittest.TestCase):
    stats = {}

    def sequences(self, policy, seed, n_sequences, calls_per_sequence):
        rng = random.Random(seed)
        decisions = errors = 0
        for s in range(max(1, int(n_sequences * SCALE))):
            cfg = random_config(rng, policy)
            dp = cfg["dp_size"]
            gen = Gen(rng, cfg)
            with adprouter.Router(**cfg) as lib:
                oracle = ref.ReferenceRouter(**cfg)
                for c in range(calls_per_sequence):
                    call = gen.call()
                    bad = None
                    if rng.random() < 0.1:
                        call, bad = corrupt(rng, call, dp)
                    got = run_binding(lib, call, rng, policy)
                    want = run_reference(oracle, call)
                    where = "seed %d sequence %d call %d config %r%s" % (
                        seed, s, c, cfg, "" if bad is None else " corrupted: " + bad)
                    if want[0] == "error" or got[0] == "error":
                        self.assertEqual(got[0], want[0], "%s\nbinding: %r\nreference: %r" % (where, got, want))
                        errors += 1
                        continue
                    self.assertEqual(got[:3], want, "%s\ncall: %r" % (where, call))
                    self.check_invariants(call, got, dp, where)
                    decisions += len(call["requests"])
        DifferentialTest.stats[policy] = DifferentialTest.stats.get(policy, (0, 0))
        d, e = DifferentialTest.stats[policy]
        DifferentialTest.stats[policy] = (d + decisions, e + errors)
        return decisions, errors

    def check_invariants(self, call, got, dp, where):
        assignment, expected, unassigned, ranks = got
        ids = [q["id"] for q in call["requests"]]
        placed = [i for r in range(dp) for i in assignment[r]]
        self.assertEqual(sorted(placed + unassigned), sorted(ids), where)
        self.assertEqual([i for i, k in zip(ids, ranks) if k == -1], unassigned, where)
        for i, k in zip(ids, ranks):
            if k != -1:
                self.assertIn(i, assignment[k], where)
        loads = [a + len(assignment[r]) for r, (_, a, _) in enumerate(call["states"])]
        for r in range(dp):
            if assignment[r]:  # the hard cap is never exceeded by a placement
                self.assertLessEqual(loads[r], call["maxn"], where)
        if max(a for _, a, _ in call["states"]) <= call["maxn"]:
            self.assertGreaterEqual(expected, max(loads), where)

    def test_default(self):
        d, e = self.sequences("default", 101, 40, 12)
        self.assertGreater(d, 1000)
        self.assertGreater(e, 5)

    def test_kv_cache_aware(self):
        d, e = self.sequences("kv_cache_aware", 202, 60, 12)
        self.assertGreater(d, 1500)
        self.assertGreater(e, 5)

    def test_conversation(self):
        d, e = self.sequences("conversation", 303, 50, 14)
        self.assertGreater(d, 1500)
        self.assertGreater(e, 5)

    def test_kv_heavy_ties(self):
        """Idle ranks, identical prompts and lengths: only the seeded shuffle decides."""
        rng = random.Random(404)
        for dp in (2, 3, 4, 5, 8, 16):
            for mult in (1.0, 2.0, 4.0):
                cfg = dict(policy="kv_cache_aware", dp_size=dp, fair_share_multiplier=mult)
                with adprouter.Router(**cfg) as lib:
                    oracle = ref.ReferenceRouter(**cfg)
                    for _ in range(3):
                        n_req = rng.choice((dp, 2 * dp, 3 * dp + 1, 40))
                        ids = (list({rng.randrange(2 ** 64) for _ in range(n_req)}) if rng.random() < 0.5
                               else list(range(n_req)))
                        call = dict(states=[(r, 0, 0) for r in range(dp)],
                                    requests=[dict(id=i, tokens=[5] * 10, num_tokens=None, target_rank=None,
                                                   relax=True, conversation_id=None, n=10) for i in ids],
                                    maxn=100, matches=None)
                        got = run_binding(lib, call, rng, "kv_cache_aware")
                        want = run_reference(oracle, call)
                        self.assertEqual(got[:3], want, "dp %d mult %r ids %r" % (dp, mult, ids))

    def test_kv_warmup_sequences(self):
        """Warmup lives across calls and is consumed by targets too."""
        rng = random.Random(505)
        for trial in range(int(30 * SCALE) or 1):
            dp = rng.choice((2, 4, 8, 16))
            cfg = dict(policy="kv_cache_aware", dp_size=dp, cold_start_warmup=True,
                       load_balance_weight=rng.choice((0.5, 1.0)))
            gen = Gen(rng, cfg)
            with adprouter.Router(**cfg) as lib:
                oracle = ref.ReferenceRouter(**cfg)
                for c in range(8):
                    call = gen.call()
                    call["requests"] = call["requests"][: rng.choice((0, 1, 2, 3))]
                    if call["matches"] is not None:
                        call["matches"] = [row[: len(call["requests"])] for row in call["matches"]]
                    got = run_binding(lib, call, rng, "kv_cache_aware")
                    want = run_reference(oracle, call)
                    if got[0] == "error" or want[0] == "error":
                        self.assertEqual(got[0], want[0])
                    else:
                        self.assertEqual(got[:3], want, "trial %d call %d" % (trial, c))

    @classmethod
    def tearDownClass(cls):
        if cls.stats and os.environ.get("ADPROUTER_DIFF_VERBOSE"):
            for p, (d, e) in sorted(cls.stats.items()):
                print("\n  %s: %d requests placed or requeued identically, %d calls rejected by both" % (p, d, e))


if __name__ == "__main__":
    unittest.main()
