"""Reader of the routing fixtures in testdata/routing (format: its README.md).

The fixtures are the one executable copy of the worked examples and test
vectors of docs/ROUTING.md, shared with the Go and C++ suites. This module
parses them and runs every directive through an adapter, one per front end:

* test_reference.py runs them through the pure-Python reference router, and
  checks the shuffle vectors against CPython's ``random`` itself;
* test_binding.py runs them through the ctypes binding (the C ABI).

An adapter provides ``new(options) -> router`` (options: {key: text}, the
C ABI's option keys and text), ``route(router, call) -> (per-rank id lists,
expected, unassigned)``, ``stats(router) -> (pending_warmup,
conversations)``, ``state(router) -> (pending warmup ranks, [(conversation
id, rank)] least recently used first)``, ``receipts(router) -> [(request id,
receipt text)]`` and ``check_generator``: whether to check ``shuffle`` and
``genrand`` against CPython's ``random`` (otherwise ``shuffle`` is checked
only through routing and ``genrand`` is skipped).

An adapter that implements only part of the library (the reference: only the
reference's options) says so with ``options`` (the option keys it takes; None:
every option), ``receipts`` (whether it has receipts), ``kv_states`` (rank
states with KV capacity) and ``scoped_requests`` (requests with ``lora=`` or
``salt=``). A router block (a ``new`` and the directives up to the next
``new``) that needs more is skipped, visibly: one skipped subTest per block,
naming what is missing, and a count in the summary line run_fixtures prints.
A ``receipts`` directive on an adapter without receipts is skipped alone.

The fixture folder is ``$ADPROUTER_FIXTURES`` when set, else
``testdata/routing`` at the root of the checkout this file lives in.
"""

import dataclasses
import glob
import os
import random
import sys

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


# The reference's options (C ABI key names) and how to read their text; every
# other option of the library is beyond the reference (python/tests/reference.py).
REFERENCE_OPTIONS = {
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
    """The options of a "new" directive as text: {key: value}, in order."""
    opts = {}
    for k, v in d.args:
        if v is None:
            raise ValueError("option %r has no value" % k)
        if k in opts:
            raise ValueError("option %r given twice" % k)
        opts[k] = v
    return opts


def reference_options(opts):
    """Text options -> the reference's keyword arguments."""
    return {k: REFERENCE_OPTIONS[k](v) for k, v in opts.items()}


@dataclasses.dataclass
class RequestSpec:
    id: int
    tokens: list
    num_tokens: int = None
    target_rank: int = None
    relax: bool = True
    conversation_id: str = None
    lora_id: int = 0
    cache_salt: int = 0


@dataclasses.dataclass
class Call:
    # [(active requests, active tokens, free KV tokens, KV capacity tokens)]
    # in rank order; the last two are 0 (capacity unknown) unless given.
    states: list
    requests: list   # [RequestSpec]
    maxn: int
    matches: list    # None, or one dict {request id: match} per rank

    def kv_states(self):
        """Whether a rank state gives KV capacity or free tokens."""
        return any(s[2] or s[3] for s in self.states)

    def scoped(self):
        """Whether a request has a LoRA id or cache salt."""
        return any(q.lora_id or q.cache_salt for q in self.requests)


_MAX_LIST = 1 << 20


def _ints(s):
    """A comma-separated list of values v, runs lo..hi and repetitions v*k."""
    out = []
    for f in s.split(","):
        if ".." in f:
            lo, hi = (int(x) for x in f.split(".."))
            if hi < lo or hi - lo >= _MAX_LIST:
                raise ValueError("run %r, want lo..hi with lo <= hi" % f)
            out.extend(range(lo, hi + 1))
        elif "*" in f:
            v, k = (int(x) for x in f.split("*"))
            if not 0 <= k <= _MAX_LIST:
                raise ValueError("repetition %r, want value*count" % f)
            out.extend([v] * k)
        else:
            out.append(int(f))
        if len(out) > _MAX_LIST:
            raise ValueError("list longer than %d" % _MAX_LIST)
    return out


def parse_state(text):
    """requests/tokens or requests/tokens/free_kv_tokens/kv_capacity_tokens."""
    parts = [int(x) for x in text.split("/")]
    if len(parts) == 2:
        return (parts[0], parts[1], 0, 0)
    if len(parts) == 4:
        return tuple(parts)
    raise ValueError("rank state %r, want requests/tokens or requests/tokens/free/capacity" % text)


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
        elif k == "lora":
            q.lora_id = int(v)
        elif k == "salt":
            q.cache_salt = int(v)
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
    states = [(0, 0, 0, 0)] * size
    reqs, rows = [], []
    for line in d.input:
        fields = line.split()
        if fields[0] == "states":
            if len(fields) != size + 1:
                raise ValueError("%r: want %d rank states" % (line, size))
            states = [parse_state(f) for f in fields[1:]]
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


def _no_input(d, *keys):
    if d.input:
        raise ValueError("unexpected input %r" % d.input[0])
    for k, _ in d.args:
        if k not in keys:
            raise ValueError("unknown argument %r" % k)


class Skip(Exception):
    """A directive the adapter cannot run; block: the rest of the router
    block goes with it."""

    def __init__(self, reason, block):
        super().__init__(reason)
        self.block = block


class _Runner:
    def __init__(self, adapter):
        self.adapter = adapter
        self.router = None
        self.size = 0
        self.routed = False
        self.skipping = None  # the reason the current router block is skipped

    def close(self):
        if self.router is not None:
            _close(self.router)
            self.router = None

    def run(self, d):
        """Returns the output text, or None when the output is not checked.
        Raises Skip for a directive the adapter cannot run."""
        a = self.adapter
        if d.cmd == "new":
            self.close()
            self.skipping, self.routed = None, False
            if d.input:
                raise ValueError("unexpected input %r" % d.input[0])
            opts = new_options(d)
            known = getattr(a, "options", None)
            beyond = [k for k in opts if known is not None and k not in known]
            if beyond:
                raise Skip("options beyond the reference: " +
                           " ".join("%s=%s" % (k, opts[k]) for k in beyond), True)
            self.router, self.size = a.new(opts), int(opts.get("dp_size", 0))
            return ""
        if d.cmd in ("route", "stats", "state", "receipts"):
            if self.skipping:
                raise Skip(self.skipping, False)
            if self.router is None:
                raise ValueError('no router: "new" must come first')
        if d.cmd == "route":
            call = parse_call(d, self.size)
            if call.kv_states() and not getattr(a, "kv_states", True):
                raise Skip("rank states with KV capacity (free/capacity) are beyond the reference", True)
            if call.scoped() and not getattr(a, "scoped_requests", True):
                raise Skip("requests with lora= or salt= are beyond the reference", True)
            assignment, expected, unassigned = a.route(self.router, call)
            self.routed = True
            return render(assignment, expected, unassigned)
        if d.cmd == "stats":
            _no_input(d)
            return "pending_warmup %d\nconversations %d" % a.stats(self.router)
        if d.cmd == "state":
            _no_input(d)
            pending, bindings = a.state(self.router)
            return "pending_warmup [%s]\nconversations [%s]" % (
                ",".join(map(str, pending)), " ".join("%s=%d" % (c, k) for c, k in bindings))
        if d.cmd == "receipts":
            _no_input(d, "id")
            if not getattr(a, "receipts", True):
                raise Skip("receipts are beyond the reference", False)
            if not self.routed:
                raise ValueError('no decision: "route" must come first')
            rcs = a.receipts(self.router)
            if not d.args:
                return "\n".join(text for _, text in rcs)
            texts = []
            for x in ",".join(v for _, v in d.args).split(","):
                found = [text for i, text in rcs if i == int(x)]
                if not found:
                    raise ValueError("no request %s in the last decision" % x)
                texts.append(found[0])
            return "\n".join(texts)
        if d.cmd == "shuffle":
            _no_input(d, "seed", "n")
            seed, n = _arg(d, "seed"), _arg(d, "n")
            self._route_shuffle(d, seed, n)
            if not a.check_generator:
                return None
            x = list(range(n))
            random.Random(seed).shuffle(x)
            return " ".join(map(str, x))
        if d.cmd == "genrand":
            _no_input(d, "seed", "count")
            seed, count = _arg(d, "seed"), _arg(d, "count")
            if not a.check_generator:
                return None
            rng = random.Random(seed)
            return " ".join(str(rng.getrandbits(32)) for _ in range(count))
        raise ValueError("unknown command (want new, route, stats, state, receipts, shuffle or genrand)")

    def _route_shuffle(self, d, seed, n):
        """A lone request with id seed ties on n idle ranks: it must go to the
        first element of random.Random(seed).shuffle(list(range(n)))."""
        first = int((d.want.split() or ["-1"])[0])
        router = self.adapter.new({"policy": "kv_cache_aware", "dp_size": str(n)})
        try:
            assignment, _, _ = self.adapter.route(
                router, Call([(0, 0, 0, 0)] * n, [RequestSpec(seed, list(range(10)))], 1, None))
        finally:
            _close(router)
        got = [k for k, ids in enumerate(assignment) if seed in ids]
        if got != [first]:
            raise AssertionError("a lone request with id %d on %d tied ranks went to rank %s, want %d "
                                 "(the first element)" % (seed, n, got, first))


def run_fixtures(testcase, adapter, name=None):
    """Runs every fixture file through adapter, one subTest per file; every
    mismatch of a file is reported, every skipped router block is a skipped
    subTest with its reason. Prints a summary line (files, directives run,
    directives skipped) to stderr and returns how many directives ran."""
    name = name or type(adapter).__name__
    files = fixture_files()
    ran = skipped = blocks = 0
    reasons = {}
    for path in files:
        base = os.path.basename(path)
        with testcase.subTest(fixture=base):
            runner = _Runner(adapter)
            failures = []
            try:
                for d in parse(path):
                    try:
                        got = runner.run(d)
                    except Skip as e:
                        skipped += 1
                        if e.block:
                            runner.close()
                            runner.skipping = str(e)
                            blocks += 1
                            reasons[str(e)] = reasons.get(str(e), 0) + 1
                            with testcase.subTest(fixture=base, block=d.pos):
                                testcase.skipTest("%s (this router block)" % e)
                        elif not runner.skipping:
                            with testcase.subTest(fixture=base, directive=d.pos):
                                testcase.skipTest(str(e))
                        continue
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
    sys.stderr.write("\nrouting fixtures through %s: %d files, %d directives run, %d skipped "
                     "(%d router blocks)\n" % (name, len(files), ran, skipped, blocks))
    for reason, n in sorted(reasons.items()):
        sys.stderr.write("  skipped %d block(s): %s\n" % (n, reason))
    return ran
