"""Hostile objects against the compiled path (adprouter._speedups): it never
crashes or hangs its host, and decides as the pure-Python path does.

Every case of CASES builds a batch whose objects run the caller's code while
route() packs it: int, str, list and dict subclasses whose __eq__, __hash__,
__index__, __bool__ or __len__ mutate the batch, the match rows or the
router; garbage collections forced mid-call (gc callbacks, __del__ of objects
in cycles); calls on the same router from inside such code (they must work
or raise an adprouter error, never hang); and other threads mutating the
inputs, routing, or closing the router while route() runs. Each case runs
twice, on fresh routers and fresh inputs: through the C packer and through
pure Python (adprouter._accel.use(None)). Where the case's code leaves the
inputs as they were (same=True), both must give the same outcome (the
decision, or the same exception type) and leave the same router state;
elsewhere each must give a valid decision or a clean exception.

The cases run in child processes with a hard timeout (a crash or a hang
fails the case that was running, and the rest go on in a new child), under
the flags of this interpreter: ./build.sh test (router_test.go) runs this
file under python3 -X dev with PYTHONMALLOC=malloc as well, and runs the
cases marked valgrind=True under valgrind's memcheck (--valgrind). The
RegressionTest class holds one test per crash or hang fixed in the compiled
path, each crashing or hanging without its fix.

Run from the repository root, after ./build.sh:
    PYTHONPATH=python python3 -m unittest discover -s python/tests -p test_hostile.py -v
    PYTHONPATH=python python3 python/tests/test_hostile.py --worker [CASE ...]   # one child's work
"""

import faulthandler
import gc
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import unittest
from array import array

import adprouter
from adprouter import Error, InvalidHandleError, RankState, Request, Router, _accel
from adprouter import trtllm as T

import trtllm_fakes as F  # noqa: E402 - tests/, next to this file

DP = 4
# Ids above the small-int cache: each is its own object, freed with its owner.
BASE = 10 ** 6
# Seconds; a case taking longer has hung (faulthandler ends the child).
CASE_TIMEOUT = float(os.environ.get("ADPROUTER_HOSTILE_TIMEOUT", "30"))
SPEEDUPS = _accel.speedups  # the C packer the binding loaded (None: not built)


# --- building blocks ------------------------------------------------------------


def fresh(n):
    """A fresh int equal to n (not a cached small int or a constant)."""
    return int(str(n))


def states(dp=DP):
    return [RankState(rank=i) for i in range(dp)]


def requests(n, ids=None, **kw):
    ids = ids or [fresh(BASE + i) for i in range(n)]
    return [Request(id=ids[i], tokens=[i % 3, i, 7, 9][: 2 + i % 3], **kw) for i in range(n)]


def dense(reqs, dp=DP, k=3):
    """One {id: matched} dict per rank naming every request, in batch order."""
    return [{q.id: fresh((i * 7 + r * 3) % k) for i, q in enumerate(reqs)} for r in range(dp)]


def pairs_rows(ids, dp=DP):
    """One raw [id, matched, ...] row per rank, out of batch order."""
    rows = []
    for r in range(dp):
        row = []
        for i, rid in reversed(list(enumerate(ids))):
            if (i + r) % 2 == 0:
                row += [rid, fresh(1 + (i + r) % 3)]
        rows.append(row)
    return rows


def churn():
    """Allocates and drops enough tracked objects to trigger collections."""
    for _ in range(50):
        [object() for _ in range(20)]  # noqa: B018 - the allocation is the point
    gc.collect()


class Once:
    """Calls fn the first time only (for code that would otherwise run again
    on the Python path after the C path handed the batch over)."""

    def __init__(self, fn):
        self.fn, self.done = fn, False

    def __call__(self):
        if not self.done:
            self.done = True
            self.fn()


def quiet(fn):
    """fn() with adprouter errors swallowed (code in __del__ and gc
    callbacks must not raise; a closed router is fine)."""
    try:
        fn()
    except Error:
        pass


class collections_during:
    """While active: gc.set_threshold(1) (a collection every few tracked
    allocations) and, after each of the first `times` collections, action()
    (which may leave new garbage for the next one)."""

    def __init__(self, action, times=40):
        self.action, self.left = action, times

    def callback(self, phase, info):
        if phase == "stop" and self.left > 0:
            self.left -= 1
            self.action()

    def __enter__(self):
        self.old = gc.get_threshold()
        gc.collect()
        gc.callbacks.append(self.callback)
        gc.set_threshold(1)
        return self

    def __exit__(self, *exc):
        gc.set_threshold(*self.old)
        gc.callbacks.remove(self.callback)
        gc.collect()


class Cycle:
    """Garbage only the collector frees; its __del__ runs fn."""

    def __init__(self, fn):
        self.fn, self.me = fn, self

    def __del__(self):
        quiet(self.fn)


def cycles_calling(fn):
    """A gc action that leaves a Cycle calling fn for the next collection."""
    return lambda: Cycle(fn)


# --- hostile types ----------------------------------------------------------------


class HookInt(int):
    """An int whose __eq__ and __hash__ run hook() (equal and hashing as the
    int, so both paths find the same requests)."""

    hook = staticmethod(lambda: None)

    def __eq__(self, other):
        type(self).hook()
        return int(self) == other

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        type(self).hook()
        return int.__hash__(self)

    def __index__(self):
        type(self).hook()
        return int(self)


def hook_int_type(hook, eq_only=False):
    """A fresh HookInt subclass whose methods run hook() (eq_only: only
    __eq__ and __ne__; hashing runs no code, as an int's)."""
    ns = {"hook": staticmethod(hook)}
    if eq_only:
        ns["__hash__"], ns["__index__"] = int.__hash__, int.__index__
    return type("HookInt", (HookInt,), ns)


class Indexable:
    """Not an int: a value with __index__ (the Python path's struct.pack
    takes it; the C path hands such values to Python)."""

    def __init__(self, v, hook=lambda: None):
        self.v, self.hook = v, hook

    def __index__(self):
        self.hook()
        return self.v


class Flag:
    """A truth value whose __bool__ runs hook() first."""

    def __init__(self, value, hook):
        self.value, self.hook = value, hook

    def __bool__(self):
        self.hook()
        return self.value


class LenFlag:
    """A truth value by __len__ (no __bool__), running hook() first."""

    def __init__(self, n, hook):
        self.n, self.hook = n, hook

    def __len__(self):
        self.hook()
        return self.n


class HookList(list):
    def __init__(self, items, hook):
        super().__init__(items)
        self.hook = hook

    def __len__(self):
        self.hook()
        return super().__len__()

    def __iter__(self):
        self.hook()
        return super().__iter__()


class HookDict(dict):
    def __init__(self, items, hook):
        super().__init__(items)
        self.hook = hook

    def __len__(self):
        self.hook()
        return super().__len__()

    def items(self):
        self.hook()
        return super().items()

    def __iter__(self):
        self.hook()
        return super().__iter__()


class HookStr(str):
    def __eq__(self, other):
        self.hook()
        return str.__eq__(self, other)

    __hash__ = str.__hash__

    def encode(self, *a, **k):
        self.hook()
        return str.encode(self, *a, **k)


def hook_str(s, hook):
    v = HookStr(s)
    v.hook = hook
    return v


# --- the cases ----------------------------------------------------------------------

CASES = {}


class Case:
    """build(r) returns route()'s arguments for router r: a dict with
    states, requests, maxn and optionally match_lens and match_format, or
    run(r) does its own calls and returns the outcome of its last route().
    same: both paths must give the same outcome and leave the same router
    state (the case's code leaves the inputs as they were). valgrind: in the
    subset run under memcheck."""

    def __init__(self, name, build=None, run=None, same=True, valgrind=False, router=None, allow=()):
        self.name, self.build, self.run = name, build, run
        self.same, self.valgrind, self.allow = same, valgrind, set(allow)
        self.router = router or dict(policy="kv_cache_aware", dp_size=DP)


def case(name, same=True, valgrind=False, router=None, runs=False, allow=()):
    """Registers a case; allow: exception type names it may raise besides
    CLEAN (the pure-Python path's own, on inputs that change under it)."""
    def register(fn):
        assert name not in CASES, name
        CASES[name] = Case(name, None if runs else fn, fn if runs else None, same, valgrind, router, allow)
        return fn
    return register


def batch(reqs, match_lens=None, fmt="auto", sts=None, maxn=8):
    return dict(states=sts if sts is not None else states(), requests=reqs, maxn=maxn,
                match_lens=match_lens, match_format=fmt)


# Request ids.

@case("id: plain int subclass, dict and pairs rows")
def _(r):
    T = hook_int_type(lambda: None)
    reqs = requests(12, ids=[T(BASE + i) for i in range(12)])
    return batch(reqs, dense(reqs))


@case("id: plain int subclass, pairs rows")
def _(r):
    T = hook_int_type(lambda: None)
    ids = [T(BASE + i) for i in range(12)]
    return batch(requests(12, ids=ids), pairs_rows([BASE + i for i in range(12)]), "pairs")


@case("pairs: id __eq__ clears the match row", valgrind=True)
def _(r):
    rows = pairs_rows([BASE + i for i in range(8)])
    T = hook_int_type(lambda: (rows[0].clear(), churn()), eq_only=True)
    return batch(requests(8, ids=[T(BASE + i) for i in range(8)]), rows, "pairs")


@case("dict: id __eq__ clears the match dict", valgrind=True)
def _(r):
    reqs0 = requests(8)
    m = {q.id: fresh(BASE + 5) for q in reversed(reqs0)}  # out of batch order: lookups
    T = hook_int_type(lambda: (m.clear(), churn()), eq_only=True)
    reqs = requests(8, ids=[T(BASE + i) for i in range(8)])
    return batch(reqs, [m, {}, {}, {}])


@case("dict: id __eq__ allocates and collects")
def _(r):
    T = hook_int_type(churn)
    reqs = requests(10, ids=[T(BASE + i) for i in range(10)])
    ml = dense(requests(10))
    for m in ml:
        m[BASE + 3] = m.pop(BASE + 3)  # out of order: the lookups compare
    return batch(reqs, ml)


@case("dict: id __hash__ clears the caller's lists")
def _(r):
    reqs_list, ml = [], None

    def hook():
        reqs_list.clear()
        for m in ml:
            m.clear()
    T = hook_int_type(hook)
    reqs_list.extend(requests(6, ids=[T(BASE + i) for i in range(6)]))
    ml = [{BASE + i: fresh(2) for i in (5, 1, 3)} for _ in range(DP)]
    return batch(reqs_list, ml)


@case("id: __eq__ calls the router (state_digest, stats, pending_warmup)")
def _(r):
    T = hook_int_type(lambda: (r.state_digest(), r.stats(), r.pending_warmup()))
    reqs = requests(8, ids=[T(BASE + i) for i in range(8)])
    return batch(reqs, pairs_rows([BASE + i for i in range(8)]), "pairs")


@case("id: __eq__ routes on the same router", valgrind=True)
def _(r):
    inner = Once(lambda: r.route(states(), requests(3, ids=[5, 6, 7]), 8))
    T = hook_int_type(inner)
    reqs = requests(8, ids=[T(BASE + i) for i in range(8)])
    ml = dense(requests(8))
    for m in ml:
        m[BASE] = m.pop(BASE)
    return batch(reqs, ml)


@case("id: bools")
def _(r):
    reqs = requests(2, ids=[True, False])
    return batch(reqs, [{False: 3, True: 1}, {1: 2}, {}, {0: 4}])


@case("id: bools, pairs")
def _(r):
    return batch(requests(2, ids=[False, True]), [[1, 2, 0, 1], [True, 5], [], [False, 1]], "pairs")


@case("id: __index__ object that clears the match dicts")
def _(r):
    ml = dense(requests(6))
    ids = [Indexable(BASE + i, hook=lambda: [m.clear() for m in ml]) for i in range(6)]
    return batch(requests(6, ids=ids), ml)


@case("id: __index__ object, no matches")
def _(r):
    return batch(requests(6, ids=[Indexable(BASE + i) for i in range(6)]))


# Tokens.

@case("tokens: int subclasses whose methods collect")
def _(r):
    T = hook_int_type(churn)
    reqs = [Request(id=fresh(BASE + i), tokens=[T(t) for t in range(i, i + 70)]) for i in range(4)]
    return batch(reqs)


@case("tokens: list subclass whose __len__ clears it")
def _(r):
    reqs = []
    for i in range(4):
        toks = HookList(range(i, i + 80), None)
        toks.hook = Once(toks.clear)
        reqs.append(Request(id=fresh(BASE + i), tokens=toks))
    return batch(reqs)


@case("tokens: object whose __len__ calls the router")
def _(r):
    class Tokens:
        def __len__(self):
            r.stats()
            return 5
    reqs = requests(3) + [Request(id=fresh(BASE + 9), tokens=Tokens())]
    return batch(reqs)


@case("tokens: array resized by a relax flag", same=False, valgrind=True)
def _(r):
    toks = array("i", range(100))

    def grow():
        try:
            toks.extend(range(10 ** 5))
        except BufferError:
            pass
    reqs = [Request(id=fresh(BASE + i), tokens=toks if i == 0 else [1, 2, 3]) for i in range(4)]
    reqs[1].relax = Flag(True, grow)
    return batch(reqs)


@case("tokens: lists cleared and refilled by a relax flag", same=False)
def _(r):
    reqs = requests(6)
    lists = [q.tokens for q in reqs]

    def hook():
        for t in lists:
            t.clear()
            t.extend(object() for _ in range(50))
        churn()
    reqs[-1].relax = Flag(True, hook)
    return batch(reqs)


# Relax flags.

@case("relax: __bool__ calls state_digest", valgrind=True)
def _(r):
    return batch(requests(6, relax=Flag(True, r.state_digest)))


@case("relax: __len__ calls stats")
def _(r):
    return batch(requests(6, relax=LenFlag(1, r.stats)))


@case("relax: __bool__ routes on the same router")
def _(r):
    inner = Once(lambda: r.route(states(), requests(2, ids=[1, 2]), 8))
    reqs = requests(6)
    reqs[2].relax = Flag(False, inner)
    return batch(reqs, dense(reqs))


@case("relax: __bool__ closes the router", valgrind=True)
def _(r):
    reqs = requests(6)
    reqs[3].relax = Flag(True, r.close)
    return batch(reqs)


@case("relax: __bool__ reads receipts and conversations", router=dict(policy="kv_cache_aware", dp_size=DP,
                                                                      explain=True))
def _(r):
    r.route(states(), requests(3, ids=[1, 2, 3]), 8)
    reqs = requests(6)
    reqs[0].relax = Flag(True, lambda: (r.receipts(), r.conversations()))
    return batch(reqs)


@case("relax: __bool__ deletes and rebinds its request's fields")
def _(r):
    reqs = requests(6)
    q = reqs[2]

    def hook():
        del q.relax
        q.tokens, q.id = None, fresh(BASE + 99)
        churn()
    q.relax = Flag(True, Once(hook))
    return batch(reqs)


@case("relax: __bool__ raises")
def _(r):
    def boom():
        raise ZeroDivisionError("relax")
    reqs = requests(4)
    reqs[1].relax = Flag(True, boom)
    return batch(reqs)


@case("relax: __bool__ empties the batch and rebinds every id", same=False, valgrind=True)
def _(r):
    reqs = requests(8)
    caller = list(reqs)
    ml = dense(reqs)

    def hook():
        caller.clear()
        for q in reqs:
            q.id = fresh(BASE * 2)
        for m in ml:
            m.clear()
        churn()
    reqs[-1].relax = Flag(True, hook)
    return batch(caller, ml)


# Rank states.

@case("state: memory_pressure __bool__ rebinds itself and collects", valgrind=True)
def _(r):
    sts = states()

    def hook():
        sts[1].memory_pressure = False
        churn()
    sts[1].memory_pressure = Flag(True, Once(hook))
    return batch(requests(6), sts=sts)


@case("state: memory_pressure __bool__ calls stats")
def _(r):
    sts = states()
    sts[2].memory_pressure = Flag(True, r.stats)
    return batch(requests(6), sts=sts)


@case("state: memory_pressure __bool__ clears the states list", same=False)
def _(r):
    sts = states()
    sts[0].memory_pressure = Flag(False, sts.clear)
    return batch(requests(6), sts=sts)


@case("state: int subclass loads")
def _(r):
    T = hook_int_type(churn)
    sts = [RankState(rank=T(i), num_active_requests=T(i), num_active_tokens=T(100 * i)) for i in range(DP)]
    return batch(requests(6), sts=sts)


# Match lengths.

@case("match: dict subclass whose methods clear the caller's rows")
def _(r):
    reqs = requests(6)
    ml = dense(reqs)
    ml[1] = HookDict(ml[1], lambda: ml[2].clear())
    return batch(reqs, ml)


@case("match: list subclass rows")
def _(r):
    reqs = requests(6)
    ml = [HookList([fresh(i % 3) for i in range(6)], churn) for _ in range(DP)]
    return batch(reqs, ml)


class StaleLen(list):
    """A list whose first len() reports its length and then drops its last
    item: what another thread can do between a length check and a read."""

    def __len__(self):
        n = super().__len__()
        if not getattr(self, "shrunk", False):
            self.shrunk = True
            self.pop()
        return n


@case("match: a row shrinks after its length is read", same=False)
def _(r):
    # The pure-Python path reads each row once, into a list of its own: a
    # row that changes after its length was read is refused cleanly (it was
    # a ValueError from the slice assignment).
    reqs = requests(6)
    ml = [[fresh(i % 3) for i in range(6)] for _ in range(DP)]
    ml[1] = StaleLen(ml[1])
    return batch(reqs, ml)


@case("match: values are int subclasses that collect")
def _(r):
    T = hook_int_type(churn)
    reqs = requests(6)
    return batch(reqs, [{q.id: T(i % 3) for i, q in enumerate(reqs)} for _ in range(DP)])


@case("match: value __index__ object clearing the rows")
def _(r):
    reqs = requests(6)
    ml = dense(reqs)
    ml[0][reqs[0].id] = Indexable(2, lambda: ml[1].clear())
    return batch(reqs, ml)


@case("pairs: row ids are int subclasses whose __hash__ clears the row", valgrind=True)
def _(r):
    reqs = requests(6)
    rows = pairs_rows([q.id for q in reqs])
    T = hook_int_type(lambda: rows[0].clear())
    rows[0] = [T(v) if k % 2 == 0 else v for k, v in enumerate(rows[0])]
    return batch(reqs, rows, "pairs")


@case("dict: keys are int subclasses whose __eq__ clears the dict")
def _(r):
    reqs = requests(6)
    m = {}
    T = hook_int_type(lambda: m.clear())
    m.update({T(q.id): fresh(2) for q in reversed(reqs)})
    return batch(reqs, [m, {}, {}, {}])


@case("pairs: row is a tuple, ids and lengths collected away mid-call", same=False)
def _(r):
    reqs = requests(6)
    rows = [tuple(row) for row in pairs_rows([q.id for q in reqs])]
    reqs[-1].relax = Flag(True, Once(lambda: (rows.clear(), churn())))
    return batch(reqs, rows, "pairs")


# Conversation ids.

@case("conversation: str subclass whose methods call the router", valgrind=True,
      router=dict(policy="conversation", dp_size=DP))
def _(r):
    reqs = [Request(id=fresh(BASE + i), num_tokens=10, conversation_id=hook_str("c%d" % (i % 3), r.stats))
            for i in range(6)]
    return batch(reqs)


@case("conversation: bytearray mutated by a relax flag", same=False, router=dict(policy="conversation", dp_size=DP))
def _(r):
    cid = bytearray(b"conversation")
    reqs = [Request(id=fresh(BASE + i), num_tokens=10, conversation_id=cid) for i in range(4)]
    reqs[2].relax = Flag(True, lambda: cid.extend(b"x" * 5000))
    return batch(reqs)


# The C Request type's repr.

@case("repr: a field's __repr__ deletes the request's fields", valgrind=True, runs=True)
def _(r):
    from adprouter._types import Request as PyRequest
    texts = []
    for cls in (Request, PyRequest):
        for deleted in (("tokens",), ("tokens", "target_rank")):
            class Id(int):
                def __repr__(self):
                    for name in deleted:
                        delattr(q, name)
                    churn()
                    return "Id(%d)" % self

            class Target(int):
                def __repr__(self):
                    q.relax = fresh(BASE + 3)
                    churn()
                    return "Target"
            q = cls(Id(BASE), tokens=[fresh(BASE + 1)], target_rank=Target(2), relax=Flag(True, lambda: None),
                    conversation_id="c%d" % fresh(BASE))
            texts.append(outcome(lambda: repr(q)))
    if texts[:2] != texts[2:]:
        raise AssertionError("C repr %r, Python repr %r" % (texts[:2], texts[2:]))
    return r.route(states(), requests(3), 8)


# Garbage collection mid-call.

@case("gc: a __del__ in a cycle calls stats() mid-call", valgrind=True, runs=True)
def _(r):
    reqs = requests(16)
    ml = dense(reqs)
    with collections_during(cycles_calling(lambda: r.stats())):
        return r.route(states(), reqs, 8, ml)


@case("gc: __del__ routes on the same router mid-call", same=False, runs=True)
def _(r):
    reqs = requests(16)
    inner = Once(lambda: r.route(states(), requests(2, ids=[1, 2]), 8))
    with collections_during(cycles_calling(inner)):
        return r.route(states(), reqs, 8, dense(reqs))


@case("gc: __del__ closes the router mid-call", same=False, valgrind=True, runs=True)
def _(r):
    reqs = requests(16)
    with collections_during(cycles_calling(r.close), times=3):
        return r.route(states(), reqs, 8, pairs_rows([q.id for q in reqs]), "pairs")


@case("gc: callbacks rebind every id and clear the rows mid-call", same=False, valgrind=True, runs=True)
def _(r):
    reqs = requests(16)
    caller = list(reqs)
    ml = dense(reqs)

    def vandal():
        for q in reqs:
            q.id = fresh(BASE * 3)
            q.tokens = None
        for m in ml:
            m.clear()
        caller.clear()
    with collections_during(vandal, times=2):
        return r.route(states(), caller, 8, ml)


@case("gc: __del__ switches the packer mid-call", same=False, runs=True)
def _(r):
    reqs = requests(16)
    sp = _accel.speedups
    with collections_during(cycles_calling(lambda: _accel.use(None if _accel.speedups else sp)), times=5):
        return r.route(states(), reqs, 8, dense(reqs))


# Other threads.

def threaded(r, other, rounds=30, allow=()):
    """Runs other() in a thread in a loop while this one routes; the outcome
    of the last route, and every route's outcome must be valid."""
    stop = threading.Event()
    errors = []

    def loop():
        while not stop.is_set():
            try:
                other()
            except Error:
                pass
            except Exception as e:  # noqa: BLE001 - reported
                errors.append(e)
                return
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    t = threading.Thread(target=loop)
    t.start()
    try:
        last = None
        for _ in range(rounds):
            last = outcome(lambda: r.route(*route_args(make_thread_batch(r))))
            check_outcome(last, r, allow)
    finally:
        stop.set()
        t.join(CASE_TIMEOUT)
        sys.setswitchinterval(old)
    if t.is_alive():
        raise AssertionError("the other thread hung")
    if errors:
        raise errors[0]
    return last


_shared = {}


def make_thread_batch(r):
    return _shared["build"]()


def route_args(b):
    return b["states"], b["requests"], b["maxn"], b.get("match_lens"), b.get("match_format", "auto")


@case("thread: another thread mutates the inputs while route runs", same=False, valgrind=True, runs=True)
def _(r):
    reqs = requests(24)
    caller = list(reqs)
    ml = dense(reqs)
    _shared["build"] = lambda: batch(caller, ml)
    k = [0]

    def mutate():
        k[0] += 1
        q = reqs[k[0] % len(reqs)]
        q.tokens = list(range(k[0] % 90))
        q.id = fresh(BASE + k[0] % 40)
        ml[k[0] % DP].clear()
        ml[k[0] % DP].update({p.id: fresh(k[0] % 5) for p in reqs[: k[0] % 24]})
        if k[0] % 7 == 0:
            caller[:] = reqs[: k[0] % 24]
    return threaded(r, mutate)


@case("thread: another thread routes and reads the same router", same=False, valgrind=True, runs=True,
      router=dict(policy="kv_cache_aware", dp_size=DP, explain=True))
def _(r):
    reqs = requests(16)
    _shared["build"] = lambda: batch(reqs, dense(reqs))
    other_reqs = requests(5, ids=[1, 2, 3, 4, 5])

    def other():
        r.route(states(), other_reqs, 8)
        r.stats()
        got = r.receipts()
        if len(got) not in (5, 16):
            raise AssertionError("receipts of no decision: %d" % len(got))
    return threaded(r, other)


@case("thread: another thread closes the router while routes run", same=False, runs=True)
def _(r):
    reqs = requests(16)
    _shared["build"] = lambda: batch(reqs, pairs_rows([q.id for q in reqs]), "pairs")
    n = [0]

    def closer():
        n[0] += 1
        if n[0] == 200:
            r.close()
        time.sleep(0)
    return threaded(r, closer, rounds=60)


# adprouter.trtllm's routers (the C calls trtllm_route and probe_items) over
# hostile RequestQueueItems: properties that run the caller's code while the
# items are read, probes that mutate the batch, collections and re-entrant
# calls mid-call. A case returns Routed, the outcome of its last
# route_requests.

class Routed(tuple):
    """(placements {rank: [item ids]}, expected, carried item ids, the
    library state digest) of an adprouter.trtllm router's last call."""


def routed(t, got):
    """Routed of route_requests' result got on router t; every item placed
    once on a rank of 0..dp-1 or carried over."""
    assignment, expected = got
    if sorted(assignment) != list(range(t.dist.tp_size)) or type(expected) is not int:
        raise AssertionError("assignment ranks %r, expected %r" % (sorted(assignment), expected))
    every = [it for v in assignment.values() for it in v] + list(t.carried)
    if len(set(map(id, every))) != len(every):
        raise AssertionError("an item placed twice: %r" % every)
    return Routed(({k: [it.id for it in v] for k, v in assignment.items()}, expected,
                   [it.id for it in t.carried], digest(t.router)))


class Prop:
    """An attribute whose every read runs hook() first and returns value."""

    def __init__(self, value, hook):
        self.value, self.hook = value, hook

    def __get__(self, obj, cls):
        self.hook()
        return self.value


def hostile_item(rid, tokens, attr=None, value=None, hook=None, **kw):
    """A RequestQueueItem whose request's attr (or the item's own: "id",
    "request") is a property running hook() and returning value."""
    req = F.LlmRequest(list(tokens), **kw)
    item = F.RequestQueueItem(rid, req)
    if attr in ("id", "request"):
        item.__class__ = type("HostileItem", (F.RequestQueueItem,),
                              {attr: Prop(getattr(item, attr), hook)})
        del item.__dict__[attr]
    elif attr is not None:
        req.__class__ = type("HostileRequest", (F.LlmRequest,), {attr: Prop(value, hook)})
        req.__dict__.pop(attr, None)
    return item


def trt_items(n, base=BASE, **kw):
    shared = list(range(100, 164))
    return [F.item(fresh(base + i), shared[: 8 + (i * 13) % 56] + [i], **kw) for i in range(n)]


def trt_states(dp=DP):
    return [T.RankState(k, k % 3, 100 * k) for k in range(dp)]


def kv_router(**kw):
    """A KV-cache-aware router on a one-rank Dist whose allgather hands every
    rank the same probes."""
    kv = F.KVCacheManager(tokens_per_block=8)
    kv.add(list(range(100, 164)))
    return T.KVCacheAwareADPRouter(F.Dist(0, DP, lambda flat: [flat] * DP), kv, **kw)


def trt_route(t, items, maxn=8, sts=None):
    """One iteration as the executor runs it: probe (where the router
    reads matches), then route."""
    if t.needs_prefix_matches:
        t.gather_prefix_matches(items)
    return routed(t, t.route_requests(trt_states() if sts is None else sts, items, maxn))


@case("trtllm: item.id property clears the batch list", runs=True, same=False)
def _(r):
    t = kv_router()
    items = trt_items(12)
    items[3] = hostile_item(fresh(BASE + 3), range(100, 120), "id", hook=items.clear)
    return trt_route(t, items)


@case("trtllm: input_token_ids property collects garbage", runs=True, valgrind=True)
def _(r):
    t = kv_router()
    items = trt_items(10) + [hostile_item(fresh(BASE + 50 + i), range(100, 140), "input_token_ids",
                                          list(range(100, 140)), churn) for i in range(3)]
    return trt_route(t, items)


@case("trtllm: a later item's property rewrites earlier prompts", runs=True, valgrind=True)
def _(r):
    # The C path reads every prompt's tokens after all the items' fields, as
    # the Python path packs them: a token rewritten meanwhile is read as
    # rewritten on both.
    t = kv_router()
    items = trt_items(10)

    def rewrite():
        for it in items[:5]:
            it.request.input_token_ids[0] = 163
        churn()
    items.append(hostile_item(fresh(BASE + 60), range(100, 140), "py_scheduling_params", None, Once(rewrite)))
    return trt_route(t, items)


@case("trtllm: a later item's property grows an earlier prompt", runs=True, same=False, valgrind=True)
def _(r):
    # A prompt whose length changed after its count was read: the C path
    # hands the batch to the Python path, which reads it again (the pure
    # Python path, having read the count before the change, refuses it).
    t = kv_router()
    items = trt_items(10)

    def grow():
        items[2].request.input_token_ids.extend(range(100, 164))
        churn()
    items.append(hostile_item(fresh(BASE + 62), range(100, 140), "py_scheduling_params", None, Once(grow)))
    return trt_route(t, items)


@case("trtllm: a later item's property empties earlier prompts", runs=True, same=False, valgrind=True)
def _(r):
    # Emptied lists (their item arrays freed) must not be read ahead, either
    # for the next list or two lists ahead.
    t = kv_router(options={"prefix_source": "index"})
    items = trt_items(10)

    def empty():
        for it in items[:8]:
            it.request.input_token_ids.clear()
        churn()
    items.append(hostile_item(fresh(BASE + 63), range(100, 140), "py_scheduling_params", None, Once(empty)))
    return trt_route(t, items)


@case("trtllm: a later item's property rewrites earlier prompts in index mode", runs=True, valgrind=True)
def _(r):
    t = kv_router(options={"prefix_source": "index"})  # every token of every prompt is read
    items = trt_items(10)

    def rewrite():
        for it in items[:5]:
            it.request.input_token_ids[-1] = 7
    items.append(hostile_item(fresh(BASE + 61), range(100, 140), "py_scheduling_params", None, Once(rewrite)))
    return trt_route(t, items)


@case("trtllm: lora task_id property closes the router", runs=True, valgrind=True)
def _(r):
    t = kv_router(options={"prefix_source": "index"})  # reads the task again when routing
    items = trt_items(8)
    items[2].request.lora_config = type("Lora", (), {"task_id": Prop(5, Once(t.router.close))})()
    return trt_route(t, items)


@case("trtllm: cache_salt property routes on the same router", runs=True, same=False)
def _(r):
    t = kv_router()
    inner = trt_items(3, base=BASE * 2)
    busy = []

    def again():
        if not busy:
            busy.append(1)
            t.route_requests(trt_states(), inner, 8)
    items = trt_items(8) + [hostile_item(fresh(BASE + 99), range(100, 130), "cache_salt", None, again)]
    return trt_route(t, items)


@case("trtllm: relax __bool__ clears the states list", runs=True, same=False)
def _(r):
    t = T.DefaultADPRouter(F.Dist(0, DP))
    sts = trt_states()
    items = trt_items(8, target=1, relax=Flag(True, sts.clear))
    return trt_route(t, items, sts=sts)


@case("trtllm: rank state property rebinds the batch's ids", runs=True, same=False)
def _(r):
    t = T.DefaultADPRouter(F.Dist(0, DP))
    items = trt_items(8)

    def rebind():
        for it in items:
            it.id = fresh(BASE * 5)
    cls = type("State", (T.RankState,), {"num_active_tokens": Prop(7, Once(rebind))})
    sts = [cls(k) for k in range(DP)]
    return trt_route(t, items, sts=sts)


@case("trtllm: max_tokens property collects and clears the batch list", runs=True, same=False, valgrind=True)
def _(r):
    t = kv_router(options={"preset": "recommended"})  # the ranks report KV: each item's max_tokens is read
    items = trt_items(10, max_tokens=64)

    def clear():
        churn()
        items.clear()
    items.append(hostile_item(fresh(BASE + 70), range(100, 140), "max_tokens", 32, Once(clear)))
    return trt_route(t, items)


@case("trtllm: pending_kv_tokens property clears the states list and collects", runs=True, same=False,
      valgrind=True)
def _(r):
    t = kv_router(options={"preset": "recommended"})
    sts = []

    def clear():
        sts.clear()
        churn()
    cls = type("State", (T.RankState,), {"pending_kv_tokens": Prop(640, Once(clear))})
    sts += [cls(k, k % 3, 100 * k, kv_capacity_tokens=4096, free_kv_tokens=2048, evictable_kv_tokens=k)
            for k in range(DP)]
    return trt_route(t, trt_items(10, max_tokens=64), sts=sts)


@case("trtllm: conversation id property collects and calls the router", runs=True,
      valgrind=True, router=dict(policy="conversation", dp_size=DP))
def _(r):
    t = T.ConversationAwareADPRouter(F.Dist(0, DP))
    items = [F.item(fresh(BASE + i), [i, 1, 2], conversation="c%d" % (i % 3)) for i in range(9)]
    conv = type("Conv", (), {"conversation_id": Prop("c1", lambda: (churn(), t.router.stats()))})()
    items[4].request.py_conversation_params = conv
    return trt_route(t, items)


@case("trtllm: probe clears the batch and collects", runs=True, same=False, valgrind=True)
def _(r):
    t = kv_router()
    items = trt_items(12)
    real = t.kv_cache_manager.probe_prefix_match_length

    def probe(head, task, cache_salt=None):
        items.clear()
        churn()
        return real(head, task, cache_salt=cache_salt)
    t.kv_cache_manager.probe_prefix_match_length = probe
    return trt_route(t, items)


@case("trtllm: probe returns int subclasses and floats", runs=True)
def _(r):
    t = kv_router()
    H = hook_int_type(churn)
    n = [0]

    def probe(head, task, cache_salt=None):
        n[0] += 1
        return H(8) if n[0] % 2 else 8.0
    t.kv_cache_manager.probe_prefix_match_length = probe
    return trt_route(t, trt_items(10))


@case("trtllm: probe raises midway", runs=True, allow={"KeyError"})
def _(r):
    t = kv_router()
    n = [0]

    def probe(head, task, cache_salt=None):
        n[0] += 1
        if n[0] == 4:
            raise KeyError("probe")
        return 0
    t.kv_cache_manager.probe_prefix_match_length = probe
    return trt_route(t, trt_items(10))


@case("trtllm: token list whose slice collects and rebinds the request", runs=True, same=False)
def _(r):
    t = kv_router()
    items = trt_items(8)

    class Tokens(list):
        def __getitem__(self, k):
            churn()
            items[1].request = None
            return list.__getitem__(self, k)
    items[1].request.input_token_ids = Tokens(range(100, 140))
    return trt_route(t, items)


@case("trtllm: __del__ in a cycle closes the router mid-call", runs=True, same=False, valgrind=True)
def _(r):
    t = T.DefaultADPRouter(F.Dist(0, DP))
    items = trt_items(24)

    def collect():
        Cycle(t.router.close)
        gc.collect()
    items[20] = hostile_item(fresh(BASE + 20), range(9), "input_token_ids", list(range(9)), Once(collect))
    return trt_route(t, items)


# --- running a case ------------------------------------------------------------------


def outcome(fn):
    """("ok", result) or ("raise", exception type name)."""
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001 - the outcome
        return ("raise", type(e).__name__, str(e))


# Clean exceptions: the binding's, what the cases' own code raises, and the
# RuntimeError of a dict that changed size while Python iterated it.
CLEAN = {"InvalidArgumentError", "InvalidHandleError", "ZeroDivisionError", "RuntimeError"}


def check_outcome(got, r, allow=()):
    """A decision must be well formed; an exception a clean one (CLEAN or
    allow)."""
    if got[0] == "raise":
        if got[1] not in CLEAN and got[1] not in allow:
            raise AssertionError("raised %s: %s" % (got[1], got[2]))
        return
    res = got[1]
    if isinstance(res, Routed):
        return  # checked by routed()
    dp = r.dp_size
    if sorted(res.assignment) != list(range(dp)):
        raise AssertionError("assignment has ranks %r" % sorted(res.assignment))
    placed = [i for k in range(dp) for i in res.assignment[k]]
    ids = placed + list(res.unassigned)
    if not all(type(i) is int for i in ids) or len(set(ids)) != len(ids) or len(ids) != len(res.ranks):
        raise AssertionError("ids %r, ranks %r" % (ids, res.ranks))
    if not all(type(k) is int and -1 <= k < dp for k in res.ranks) or type(res.expected) is not int:
        raise AssertionError("ranks %r, expected %r" % (res.ranks, res.expected))


def normal(got):
    if got[0] == "raise":
        return ("raise", got[1])
    res = got[1]
    if isinstance(res, Routed):
        return ("ok",) + tuple(res)
    return ("ok", {k: list(v) for k, v in res.assignment.items()}, res.expected, list(res.unassigned),
            list(res.ranks))


def digest(r):
    try:
        return r.state_digest()
    except InvalidHandleError:
        return "closed"


def run_on(c, path):
    """(outcome, router state digest) of case c on path "c" or "python"."""
    _accel.use(SPEEDUPS if path == "c" else None)
    r = Router(**c.router)
    try:
        if c.run is not None:
            got = outcome(lambda: c.run(r))
            if got[0] == "ok" and type(got[1]) is tuple:  # threaded(): its last route's outcome
                got = got[1]
        else:
            got = outcome(lambda: r.route(*route_args(c.build(r))))
        check_outcome(got, r, c.allow)
        return normal(got), digest(r)
    finally:
        _accel.use(SPEEDUPS)
        r.close()
        gc.collect()


def run_case(c):
    """None, or what is wrong with case c."""
    try:
        c_got = run_on(c, "c")
        py_got = run_on(c, "python")
    except AssertionError as e:
        return str(e)
    if c.same and c_got != py_got:
        return "C path %r\nPython path %r" % (c_got, py_got)
    return None


def worker(names):
    """Runs the named cases (all: none named), printing one JSON line per
    case; a case that hangs ends the process (faulthandler)."""
    failed = False
    for name in names or list(CASES):
        print(json.dumps({"start": name}), flush=True)
        faulthandler.dump_traceback_later(CASE_TIMEOUT, exit=True)
        why = run_case(CASES[name])
        faulthandler.cancel_dump_traceback_later()
        failed |= why is not None
        print(json.dumps({"case": name, "error": why}), flush=True)
    return 1 if failed else 0


def child_command(*args):
    flags = ["-X", "dev"] if sys.flags.dev_mode else []
    return [sys.executable] + flags + [os.path.abspath(__file__), "--worker"] + list(args)


def child_env(**extra):
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(adprouter.__file__)))
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join([package_root] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


@unittest.skipIf(SPEEDUPS is None, "adprouter._speedups is not built (./build.sh builds it)")
class HostileTest(unittest.TestCase):
    def test_cases(self):
        """Every case, in children: a crash or hang fails the case that ran
        and the remaining ones run in a new child."""
        results, left = {}, list(CASES)
        while left:
            try:
                proc = subprocess.run(child_command(*left), env=child_env(), capture_output=True, text=True,
                                      timeout=CASE_TIMEOUT * (len(left) + 1))
                out, err, code = proc.stdout, proc.stderr, proc.returncode
            except subprocess.TimeoutExpired as e:
                out, err, code = e.stdout or "", e.stderr or "", "timeout"
                out, err = [s.decode() if isinstance(s, bytes) else s for s in (out, err)]
            running = None
            for line in out.splitlines():
                msg = json.loads(line)
                if "start" in msg:
                    running = msg["start"]
                else:
                    results[msg["case"]] = msg["error"]
                    running = None
            if running is not None:
                results[running] = "the child died (exit %s) running it:\n%s" % (code, err[-3000:])
            done = set(results)
            if running is None and not done.issuperset(left):
                self.fail("the child stopped before every case (exit %s):\n%s" % (code, err[-3000:]))
            left = [n for n in left if n not in done]
        for name in CASES:
            with self.subTest(name):
                if results[name] is not None:
                    self.fail(results[name])


# --- regressions of fixed crashes and hangs -------------------------------------------------------------

# Run in a child under -X dev with the debug allocator (freed memory is
# overwritten, so a use after free reads garbage and crashes), with a timeout
# (a hang fails instead of hanging the suite).
PRELUDE = """
import gc, sys
from adprouter import Router, Request, RankState, _accel
assert _accel.speedups is not None
r = Router(dp_size=2)
st = [RankState(rank=0), RankState(rank=1)]
"""

REGRESSIONS = {
    # 1: fill_pairs held the row's items while the positions dict compared
    # stored ids with their __eq__, which cleared the row.
    "pairs_row_cleared_by_id_eq": """
row = []
class Evil(int):
    def __eq__(self, other):
        row.clear()
        [object() for _ in range(1000)]
        return int.__eq__(self, other)
    __hash__ = int.__hash__
reqs = [Request(id=Evil(1000 + i), tokens=[1, 2, 3]) for i in range(4)]
row[:] = [int("1003"), int("5"), int("1002"), int("7"), int("1001"), int("900"), int("1000"), int("1")]
res = r.route(st, reqs, 8, match_lens=[row, [1000, 2]], match_format="pairs")
print(sorted(i for v in res.assignment.values() for i in v))
""",
    # 2: fill_dict held a borrowed value of the match dict while an id's
    # __eq__ cleared it.
    "dict_cleared_by_id_eq": """
m = {}
class Evil(int):
    def __eq__(self, other):
        m.clear()
        [object() for _ in range(1000)]
        return int.__eq__(self, other)
    __hash__ = int.__hash__
reqs = [Request(id=Evil(1000 + i), tokens=[1, 2, 3]) for i in range(4)]
m.update({1003: int("100005"), 1002: int("1000000"), 1001: int("900")})
# The C path hands the dict to the Python path, which reads it once, before
# any id's __eq__ runs, and routes on what it read.
r.route(st, reqs, 8, match_lens=[m, {}])
print("routed")
""",
    # 3: route() packed under the router's non-reentrant lock; a flag's
    # __bool__ calling the router hung.
    "relax_bool_calls_router": """
class Flag:
    def __bool__(self):
        r.state_digest()
        return True
reqs = [Request(id=i, tokens=[1, 2, 3], relax=Flag()) for i in range(4)]
print(sorted(i for v in r.route(st, reqs, 8).assignment.values() for i in v))
""",
    # 3: ... and so did a __del__ the collector ran mid-call.
    "gc_del_calls_router": """
calls = []
class D:
    def __del__(self):
        calls.append(1)
        r.stats()
def garbage():
    a = D(); a.me = a
left = [50]
def cb(phase, info):
    if phase == "stop" and left[0] > 0:
        left[0] -= 1
        garbage()
reqs = [Request(id=i, tokens=[1, 2, 3]) for i in range(64)]
ml = [{i: 1 for i in range(64)}, {}]
gc.callbacks.append(cb)
garbage()
gc.set_threshold(1)
res = r.route(st, reqs, 8, ml)
gc.set_threshold(700)
print(res.expected, len(calls) > 0)
""",
}

EXPECTED = {
    "pairs_row_cleared_by_id_eq": "[1000, 1001, 1002, 1003]",
    "dict_cleared_by_id_eq": "routed",
    "relax_bool_calls_router": "[0, 1, 2, 3]",
    "gc_del_calls_router": "8 True",
}


@unittest.skipIf(SPEEDUPS is None, "adprouter._speedups is not built (./build.sh builds it)")
class RegressionTest(unittest.TestCase):
    def child(self, name, timeout=20):
        env = child_env(PYTHONMALLOC="debug")
        cmd = [sys.executable, "-X", "dev", "-c", textwrap.dedent(PRELUDE) + REGRESSIONS[name]]
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            self.fail("%s: hung (killed after %ds)" % (name, timeout))
        self.assertEqual(proc.returncode, 0, "%s: exit %d\n%s" % (name, proc.returncode, proc.stderr[-3000:]))
        self.assertEqual(proc.stdout.strip(), EXPECTED[name])

    def test_pairs_row_cleared_by_id_eq(self):
        self.child("pairs_row_cleared_by_id_eq")

    def test_dict_cleared_by_id_eq(self):
        self.child("dict_cleared_by_id_eq")

    def test_relax_bool_calls_router(self):
        self.child("relax_bool_calls_router")

    def test_gc_del_calls_router(self):
        self.child("gc_del_calls_router")

    def test_dp_size_is_the_int_accepted(self):
        # 4: dp_size was kept as given, and stats() multiplied a ctypes type by "4".
        with Router(dp_size="4") as r:
            self.assertEqual(r.dp_size, 4)
            self.assertIs(type(r.dp_size), int)
            self.assertEqual(len(r.stats()["ranks"]), 4)
        with Router(dp_size=hook_int_type(lambda: None)(3)) as r:
            self.assertIs(type(r.dp_size), int)
            self.assertEqual(len(r.stats()["ranks"]), 3)


def main(argv):
    if argv[:1] == ["--worker"]:
        return worker(argv[1:])
    if argv[:1] == ["--valgrind"]:  # the memcheck subset, in this process
        if SPEEDUPS is None:
            print("adprouter._speedups is not built", file=sys.stderr)
            return 1
        return worker([n for n, c in CASES.items() if c.valgrind])
    unittest.main(argv=[sys.argv[0]] + argv)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
