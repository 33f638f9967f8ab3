"""Reader of the routing fixtures in testdata/routing (format: its README.md).

The fixtures are the one executable copy of the worked examples and test
vectors of docs/ROUTING.md, shared with the Go and C++ suites. This module
parses them and runs every directive through an adapter, one per front end:

* test_reference.py runs them through the pure-Python reference router, and
  checks the shuffle vectors against CPython's ``random`` itself;
* test_binding.py runs them through the ctypes binding (the C ABI).

An adapter provides ``new(options) -> router``, ``route(router, call) ->
(per-rank id lists, expected, unassigned)``, ``stats(router) ->
(pending_warmup, conversations)`` and ``check_generator``: whether to check
``shuffle`` and ``genrand`` against CPython's ``random`` (otherwise
``shuffle`` is checked only through routing and ``genrand`` is skipped).

The fixture folder is ``$ADPROUTER_FIXTURES`` when set, else
``testdata/routing`` at the root of the checkout this file lives in.
"""

import dataclasses
import glob
import os
import random

_HERE = os.path.dirname(os.path.abspath(__file__))


def fixture_dir():
    return os.environ.get("ADPROUTER_FIXTURES") or os.path.normpath(
        os.path.join(_HERE, "..", "..", "testdata", "routing"))


def fixture_files():
    """The fixture files, sorted; raises if there are none (a wrong path must
    not pass as an empty suite)."""
    files = sorted(glob.glob(os.path.join(fixture_dir(), "*.txt")))
    if not files:
        raise FileNotFoundError("no routing fixtures (*.txt) in %s: set ADPROUTER_FIXTURES" % fixture_dir())
    return files


@dataclasses.dataclass
class Directive:
    pos: str      # file:line of the command line
    cmd: str
    args: list    # [(key, value or None)]
    input: list   # input lines
    want: str     # expected output lines joined by "\n"


def parse_args(fields):
    out = []
    for f in fields:
        k, eq, v = f.partition("=")
        out.append((k, v if eq else None))
    return out


def parse(path):
    """The directives of one fixture file."""
    with open(path, encoding="utf-8") as f:
        lines = [ln.rstrip(" \t\r\n") for ln in f]
    name = os.path.basename(path)
    out, i = [], 0
    while i < len(lines):
        s = lines[i]
        i += 1
        if not s or s.startswith("#"):
            continue
        fields = s.split()
        d = Directive("%s:%d" % (name, i), fields[0], parse_args(fields[1:]), [], "")
        while i < len(lines) and lines[i] and lines[i] != "----":
            d.input.append(lines[i])
            i += 1
        if i >= len(lines) or lines[i] != "----":
            raise ValueError('%s: %r has no "----" line before a blank line or the end of the file' % (d.pos, d.cmd))
        i += 1
        want = []
        while i < len(lines) and lines[i]:
            want.append(lines[i])
            i += 1
        d.want = "\n".join(want)
        out.append(d)
    return out


# Types of the "new" options (the reference's options, C ABI key names).
OPTION_TYPES = {
    "policy": str,
    "dp_size": int,
    "load_balance_weight": float,
    "match_rate_threshold": float,
    "fair_share_multiplier": float,
    "cold_start_warmup": lambda v: {"true": True, "false": False}[v],
    "max_sessions": int,
    "new_conv_placement": str,
}


def new_options(d):
    opts = {}
    for k, v in d.args:
        if k not in OPTION_TYPES:
            raise ValueError("unknown option %r" % k)
        if v is None:
            raise ValueError("option %r has no value" % k)
        opts[k] = OPTION_TYPES[k](v)
    return opts


@dataclasses.dataclass
class RequestSpec:
    id: int
    tokens: list
    num_tokens: int = None
    target_rank: int = None
    relax: bool = True
    conversation_id: str = None


@dataclasses.dataclass
class Call:
    states: list     # [(active requests, active tokens)] in rank order
    requests: list   # [RequestSpec]
    maxn: int
    matches: list    # None, or one dict {request id: match} per rank


def _ints(s):
    return [int(x) for x in s.split(",")]


def parse_request(fields, size):
    q = RequestSpec(int(fields[0]), None)
    n, row = None, None
    for k, v in parse_args(fields[1:]):
        if k == "n":
            n = int(v)
        elif k == "prompt":
            q.tokens = _ints(v)
        elif k == "target":
            q.target_rank = int(v)
        elif k in ("strict", "relaxed") and v is None:
            q.relax = k == "relaxed"
        elif k == "conv":
            q.conversation_id = v
        elif k == "match":
            row = _ints(v)
            if len(row) != size:
                raise ValueError("%d match lengths, want dp_size = %d" % (len(row), size))
        else:
            raise ValueError("unknown field %r" % k)
    if q.tokens is None:
        q.tokens = list(range(n or 0))
    else:
        q.num_tokens = n
    return q, row


def parse_call(d, size):
    maxn = None
    for k, v in d.args:
        if k != "maxn":
            raise ValueError("unknown argument %r" % k)
        maxn = int(v)
    if maxn is None:
        raise ValueError("missing argument maxn=")
    states = [(0, 0)] * size
    reqs, rows = [], []
    for line in d.input:
        fields = line.split()
        if fields[0] == "states":
            if len(fields) != size + 1:
                raise ValueError("%r: want %d rank states" % (line, size))
            states = [tuple(int(x) for x in f.split("/")) for f in fields[1:]]
            continue
        q, row = parse_request(fields, size)
        reqs.append(q)
        rows.append(row)
    matches = None
    if any(r is not None for r in rows):
        matches = [{q.id: r[k] for q, r in zip(reqs, rows) if r is not None} for k in range(size)]
    return Call(states, reqs, maxn, matches)


def render(assignment, expected, unassigned):
    """The canonical text of a route result."""
    text = "assignment " + " ".join("[%s]" % ",".join(map(str, ids)) for ids in assignment)
    text += "\nexpected %d" % expected
    if unassigned:
        text += "\nunassigned [%s]" % ",".join(map(str, unassigned))
    return text


def _close(router):
    close = getattr(router, "close", None)
    if close is not None:
        close()


def _arg(d, key):
    for k, v in d.args:
        if k == key:
            return int(v)
    raise ValueError("missing argument %s=" % key)


class _Runner:
    def __init__(self, adapter):
        self.adapter = adapter
        self.router = None
        self.size = 0

    def close(self):
        if self.router is not None:
            _close(self.router)
            self.router = None

    def run(self, d):
        """Returns the output text, or None when the output is not checked."""
        a = self.adapter
        if d.cmd == "new":
            self.close()
            if d.input:
                raise ValueError("unexpected input %r" % d.input[0])
            opts = new_options(d)
            self.router, self.size = a.new(opts), opts.get("dp_size", 0)
            return ""
        if d.cmd in ("route", "stats") and self.router is None:
            raise ValueError('no router: "new" must come first')
        if d.cmd == "route":
            assignment, expected, unassigned = a.route(self.router, parse_call(d, self.size))
            return render(assignment, expected, unassigned)
        if d.input:
            raise ValueError("unexpected input %r" % d.input[0])
        if d.cmd == "stats":
            if d.args:
                raise ValueError("unknown argument %r" % d.args[0][0])
            return "pending_warmup %d\nconversations %d" % a.stats(self.router)
        if d.cmd == "shuffle":
            seed, n = _arg(d, "seed"), _arg(d, "n")
            self._route_shuffle(d, seed, n)
            if not a.check_generator:
                return None
            x = list(range(n))
            random.Random(seed).shuffle(x)
            return " ".join(map(str, x))
        if d.cmd == "genrand":
            seed, count = _arg(d, "seed"), _arg(d, "count")
            if not a.check_generator:
                return None
            rng = random.Random(seed)
            return " ".join(str(rng.getrandbits(32)) for _ in range(count))
        raise ValueError("unknown command (want new, route, stats, shuffle or genrand)")

    def _route_shuffle(self, d, seed, n):
        """A lone request with id seed ties on n idle ranks: it must go to the
        first element of random.Random(seed).shuffle(list(range(n)))."""
        first = int((d.want.split() or ["-1"])[0])
        router = self.adapter.new({"policy": "kv_cache_aware", "dp_size": n})
        try:
            assignment, _, _ = self.adapter.route(
                router, Call([(0, 0)] * n, [RequestSpec(seed, list(range(10)))], 1, None))
        finally:
            _close(router)
        got = [k for k, ids in enumerate(assignment) if seed in ids]
        if got != [first]:
            raise AssertionError("a lone request with id %d on %d tied ranks went to rank %s, want %d "
                                 "(the first element)" % (seed, n, got, first))


def run_fixtures(testcase, adapter):
    """Runs every fixture file through adapter, one subTest per file; every
    mismatch of a file is reported. Returns how many directives ran."""
    ran = 0
    for path in fixture_files():
        with testcase.subTest(fixture=os.path.basename(path)):
            runner = _Runner(adapter)
            failures = []
            try:
                for d in parse(path):
                    try:
                        got = runner.run(d)
                    except Exception as e:  # a broken fixture or a failed call: report, go on
                        failures.append("%s: %s: %s: %s" % (d.pos, d.cmd, type(e).__name__, e))
                        continue
                    ran += 1
                    if got is not None and got != d.want:
                        failures.append("%s: %s: got\n%s\nwant\n%s" % (d.pos, d.cmd, got, d.want))
            finally:
                runner.close()
            if failures:
                testcase.fail("\n".join(failures))
    return ran
