"""adprouter.trtllm against TensorRT-LLM's own ADP routers, on identical objects.

    PYTHONPATH=python python3 python/bench_trtllm.py --trtllm PATH   # against TensorRT-LLM
    PYTHONPATH=python python3 python/bench_trtllm.py                 # against the oracle
    ... --quick      a few seconds (few runs)
    ... --runs N     N timed calls per row and size (default: 151 at 256 x 16, 51 at 1024 x 64)
    ... --size NxR   one size only (repeatable): 256x16, 1024x64
    ... --row R      one row only (repeatable): 1, 2, 3, 4, 4f, 5, 6 (see Rows)
    ... --profile    where ours' KV-aware route_requests spends its time (256 x 16, or each --size)
    ... --profile --row 6   the same for row 6's iteration: states, probes, decision

PATH (or the environment variable ADPR_TRTLLM_SRC) is a folder holding
tensorrt_llm/_torch/pyexecutor/scheduler/adp_router.py and stubs of what it
imports (a TensorRT-LLM checkout works too); it goes first on sys.path, and
TensorRT-LLM's DefaultADPRouter, KVCacheAwareADPRouter,
ConversationAwareADPRouter and RankState (its gather_all_rank_states and
gather_prefix_matches included) are what we are timed against. Without it the
other side is this project's pure-Python oracle
(python/tests/trtllm_fakes.ReferenceADPRouter: the same rules, not
TensorRT-LLM's code), behind TensorRT-LLM's method names, with TensorRT-LLM's
state and probe loops written out here. The header says which side ran.

Both sides get the same RequestQueueItem/LlmRequest objects (trtllm_fakes),
the same fake allgather and the same fake KV cache manager (row 6: ours its
own allgather and KV cache manager, which also report the ranks' KV, with the
same probes and matches), and are called alternately, call by call, in one
process (which goes first alternates too), with gc off while timing. Every
timed call routes a batch of new objects, built untimed just before it, as
an engine's new_requests are new objects every iteration (rows 1, 2, 4 and
4f: the same requests as new RequestQueueItem/LlmRequest objects sharing
their prompt lists; rows 3, 5 and 6: new requests), and the objects of the
call before are freed untimed, before it (an engine frees its requests in
its own code: a timed call that dropped the last reference to the previous
batch would count freeing it; figures in docs/trtllm.md). Routing one batch
of objects call after call would keep them in cache, which favours ours.
Every timed call's decisions are compared: the same ids on the same ranks in
the same order and the same expected, every request placed; any difference
exits non-zero. Rows 5 and 6's decisions differ by design (ours predicts
matches from its own prefix index; row 6 also scores by predicted time to
first token and heeds the ranks' KV room): ours is checked to be consistent
instead (every request placed once, strict targets kept, no rank past
expected, expected within max_num_active_requests).

Workload per size (requests x ranks), built once, outside the timed region:

* prompts: Python lists of 1536..2560 tokens (vocabulary 128000); 7 in 8
  start with one of 4 shared system prompts (384..1536 tokens), the rest
  unique; the second-to-last token is unique per request (the probe's key);
* dense allgathered matches: every rank reports a block-aligned (32-token)
  match for every request: the ranks holding a request's system prompt
  report it, the others 0..64 tokens, and a returning conversation's home
  rank most of its prompt;
* loaded ranks: 0..2n/r+4 active requests, 200..3000 uncached tokens each;
  rank 0 (the rank timed) also has two retiring requests
  (GENERATION_TO_COMPLETE), the other ranks' payloads carry iteration stats;
  rank 0's active requests have prompts of 1536..2560 tokens, output caps
  (py_max_new_tokens) of 128..2048, 9 in 10 decoding
  (GENERATION_IN_PROGRESS, part of their output generated), 1 in 10 not
  started (CONTEXT_INIT at position 0); every new request has an output cap
  (max_tokens) of 128..2048;
* KV state (row 6): each rank's pool holds 2..4 times what its active
  requests take in all (prompts and output caps), or 32768 tokens where they
  take less; 30..100% of what the blocks they hold leave is free; and each
  rank reports the KV its active requests will still take: rank 0 through
  get_kv_cache_stats() and its active requests, the others in their payloads
  (ours' RankState with the KV fields, for requests drawn as rank 0's are);
  drawn apart, so rows 1-5's workload is the same with or without it;
* scheduling params on a few requests: ~3% strict attention_dp_rank
  targets, ~3% relaxed targets, ~2% attention_dp_relax=False without one;
* conversations (row 3): each call's batch has the timed batch's prompts
  and scheduling params under fresh ids; half its requests return to a
  conversation started in the last 32 calls, 40% start one, 10% carry none;
* max_num_active_requests = the busiest rank + the batch: nothing is dropped.

Rows (median microseconds, time.perf_counter_ns; the machine is shared, so
read ratios more than absolutes):

1. KV-aware route_requests, after each side's own gather_prefix_matches
   (untimed);
2. default route_requests;
3. conversation route_requests in steady state: one pair of routers, fed
   untimed batches until each has started 65536 conversations (TensorRT-LLM's
   default max_sessions: both maps full and evicting, least recently used
   first), then a new batch per timed call;
4. the KV-aware iteration as TensorRT-LLM's executor runs it:
   gather_all_rank_states (each side builds, serializes and deserializes the
   states; the fake allgather returns every rank's payload) +
   gather_prefix_matches (each side's probe loop calls the same probe with
   prompt[:-1], which returns a precomputed value; the allgather returns the
   precomputed [id, match, ...] lists) + route_requests;
4f. row 4's floor: no router, only the probe loop (prompt[:-1] and one probe
   call per request, the part of gather_prefix_matches that is the engine's
   API), timed against the other side's row-4 iteration: the most any router
   that probes can gain on row 4;
5. the same iteration with ours in index mode (options={"prefix_source":
   "index"}: no probes, no second allgather) against the other side's row-4
   iteration; every call brings fresh prompts (new blocks after the system
   prompts), ours' router lives across calls and is timed once its index is
   full (ours alone until then, tests/index_fill.py, then 3 untimed calls);
6. the same iteration with ours under the recommended preset
   (options={"preset": "recommended"}: prefix_source probe+index, score
   ttft, warmup quiet) on ranks that report their KV state (ours' states
   carry each rank's KV pool and pending KV: rank 0's read from
   get_kv_cache_stats() and its active requests, every new request's
   max_tokens read too) against the other side's row-4 iteration; fresh
   prompts each call, and, as row 5, ours' router is timed once its index is
   full (its placements fill it, each rank's part bounded by the rank's
   reported pool; a full index is the steady state, and slower than one
   still filling), then 3 untimed calls.

The KV-aware and default routers of rows 1, 2 and 4 live across calls, as in
an engine (warmup off: nothing they keep changes a decision), after 2
untimed calls.
"""

import argparse
import ctypes
import gc
import hashlib
import importlib
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from types import SimpleNamespace

# The binding timed is the one on PYTHONPATH, so that this script can time
# another checkout (PYTHONPATH=OTHER/python python3 python/bench_trtllm.py).
if os.environ.get("PYTHONPATH") and sys.path and sys.path[0] == os.path.dirname(os.path.abspath(__file__)):
    sys.path.append(sys.path.pop(0))

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests"))
import index_fill  # noqa: E402
import trtllm_fakes as F  # noqa: E402

import adprouter  # noqa: E402
from adprouter import _abi, _accel  # noqa: E402
from adprouter import trtllm as T  # noqa: E402

ROUTER_MODULE = "tensorrt_llm._torch.pyexecutor.scheduler.adp_router"
REQUEST_MODULE = "tensorrt_llm._torch.pyexecutor.llm_request"
ROUTER_FILE = os.path.join(*ROUTER_MODULE.split(".")) + ".py"

VOCAB = 128_000
BLOCK = 32
SYSTEM_LENS = (384, 768, 1200, 1536)
# Row 6: the least a rank's KV pool is sized for (2..4 times this), in tokens.
POOL_FLOOR = 32768
SIZES = ((256, 16), (1024, 64))
ROWS = ("1", "2", "3", "4", "4f", "5", "6")
DEFAULT_RUNS = {(256, 16): 151, (1024, 64): 51}
QUICK_RUNS = 3
WARM = 2
INDEX_WARM = 3
# Rows 5 and 6 time ours once its index is full (index_fill), or after this
# many calls.
INDEX_FILL_MAX = 3000
# Row 3 routes this many new conversations before timing (both sides' maps
# then hold TensorRT-LLM's default max_sessions, 65536, and evict).
CONV_FILL = 1 << 16

_now = time.perf_counter_ns

try:
    import resource
    _THREAD = resource.RUSAGE_THREAD  # Linux
except (ImportError, AttributeError):
    resource = None


def _sleeps():
    """How many times this thread has given up its CPU (voluntary context
    switches), or None where the system does not say."""
    if resource is None:
        return None
    return resource.getrusage(_THREAD).ru_nvcsw


# ---- the other side -------------------------------------------------------------------

class TrtllmSide:
    """TensorRT-LLM's routers, imported from path."""

    def __init__(self, path):
        path = os.path.abspath(path)
        if not os.path.isfile(os.path.join(path, ROUTER_FILE)):
            raise SystemExit("--trtllm %s: no %s there" % (path, ROUTER_FILE))
        if ROUTER_MODULE in sys.modules:
            raise SystemExit("TensorRT-LLM's router module is already imported")
        sys.path.insert(0, path)
        self.mod = importlib.import_module(ROUTER_MODULE)
        where = os.path.abspath(self.mod.__file__)
        if where != os.path.join(path, ROUTER_FILE):
            raise SystemExit("imported %s from %s, not from %s" % (ROUTER_MODULE, where, path))
        self.request_states = importlib.import_module(REQUEST_MODULE).LlmRequestState
        self.path = path
        self.label = "TensorRT-LLM"
        with open(where, "rb") as f:
            self.digest = hashlib.sha256(f.read()).hexdigest()[:16]
        self.commit = _git_commit(path)

    def describe(self):
        commit = ("commit %s" % self.commit[:12]) if self.commit else "commit unknown (not a git checkout)"
        return ("TensorRT-LLM's own routers: %s from %s (sha256 %s), %s; adprouter.trtllm follows TensorRT-LLM %s"
                % (ROUTER_FILE, self.path, self.digest, commit, T.TRTLLM_COMMIT[:12]))

    def default(self, dist):
        return self.mod.DefaultADPRouter(dist=dist)

    def kv(self, dist, kv):
        return self.mod.KVCacheAwareADPRouter(dist=dist, kv_cache_manager=kv)

    def conversation(self, dist):
        return self.mod.ConversationAwareADPRouter(dist=dist)

    def states(self, loads):
        RankState = self.mod.RankState
        return [RankState(rank=r, num_active_requests=a, num_active_tokens=t) for r, (a, t) in enumerate(loads)]


def _git_commit(path):
    """HEAD of path when path is the top of a git checkout, else None."""
    try:
        top = subprocess.run(["git", "-C", path, "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, timeout=10)
        if top.returncode or os.path.realpath(top.stdout.strip()) != os.path.realpath(path):
            return None
        head = subprocess.run(["git", "-C", path, "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
        return head.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


class OracleState:
    """The four fields of a RankState the oracle reads."""

    __slots__ = ("rank", "num_active_requests", "num_active_tokens", "num_retiring_requests")

    def __init__(self, rank, num_active_requests=0, num_active_tokens=0, num_retiring_requests=0):
        self.rank = rank
        self.num_active_requests = num_active_requests
        self.num_active_tokens = num_active_tokens
        self.num_retiring_requests = num_retiring_requests


class OracleRouter:
    """trtllm_fakes.ReferenceADPRouter behind TensorRT-LLM's method names;
    gather_all_rank_states and gather_prefix_matches as TensorRT-LLM's
    (retiring requests left out of the load, its probe loop and parse)."""

    def __init__(self, policy, dist, kv=None):
        self.policy = policy
        self.dist = dist
        self.kv_cache_manager = kv
        self.needs_prefix_matches = policy == "kv_cache_aware"
        self.o = F.ReferenceADPRouter(policy, dist.tp_size)

    def gather_all_rank_states(self, active_requests, new_requests=None, iter_stats_payload=None):
        n, tokens, retiring = F.reference_rank_state(self.policy, self.dist.tp_rank, active_requests)
        local = [self.dist.tp_rank, n, tokens, retiring, 0, -1, 0, 0, 0, 0, 0, 0, 0]
        return [OracleState(*d[:4]) for d in self.dist.tp_allgather(local)]

    def gather_prefix_matches(self, new_requests):
        probe = self.kv_cache_manager.probe_prefix_match_length
        local = []
        for it in new_requests:
            req = it.request
            if req is None:
                local.extend([it.id, 0])
                continue
            toks = getattr(req, "input_token_ids", None) or []
            lora = getattr(req, "lora_config", None)
            match = probe(toks[:-1] if len(toks) > 1 else [], lora.task_id if lora is not None else None,
                          cache_salt=getattr(req, "cache_salt", None))
            local.extend([it.id, match])
        self.o.gather(self.dist.tp_allgather(local))

    def route_requests(self, all_rank_states, new_requests, max_num_active_requests):
        out, expected = self.o.route(all_rank_states, new_requests, max_num_active_requests)
        if self.o.carry:
            raise SystemExit("the oracle left %d requests over: raise max_num_active_requests" % len(self.o.carry))
        return out, expected


class OracleSide:
    def __init__(self):
        self.request_states = F.LlmRequestState
        self.label = "oracle"

    def describe(self):
        return ("the pure-Python oracle (python/tests/trtllm_fakes.ReferenceADPRouter: TensorRT-LLM's rules at "
                "%s, not its code); run with --trtllm PATH to time TensorRT-LLM's own routers"
                % T.TRTLLM_COMMIT[:12])

    def default(self, dist):
        return OracleRouter("default", dist)

    def kv(self, dist, kv):
        return OracleRouter("kv_cache_aware", dist, kv)

    def conversation(self, dist):
        return OracleRouter("conversation", dist)

    def states(self, loads):
        return [OracleState(r, a, t) for r, (a, t) in enumerate(loads)]


class OursSide:
    label = "ours"

    def default(self, dist):
        return T.DefaultADPRouter(dist)

    def kv(self, dist, kv, options=None):
        return T.KVCacheAwareADPRouter(dist, kv, options=options)

    def conversation(self, dist):
        return T.ConversationAwareADPRouter(dist)

    def states(self, loads):
        return [T.RankState(r, a, t) for r, (a, t) in enumerate(loads)]


# ---- the fakes both sides share ---------------------------------------------------------

class BenchDist:
    """Rank 0 of dp ranks. tp_allgather answers as the other ranks would: a
    rank state payload (at most 18 ints: TensorRT-LLM's 13, ours' 18 with
    the KV pool and pending KV) with the other ranks' serialized states, a
    prefix match list (2 ints per request) with their precomputed [id,
    match, ...] lists; this rank's own object first, as it is."""

    def __init__(self, dp, state_payloads, match_lists):
        self.tp_rank = 0
        self.tp_size = dp
        self.mapping = SimpleNamespace(dp_size=dp)
        self.has_cp_helix = False
        self._states = state_payloads[1:]
        self._matches = match_lists[1:]

    def tp_allgather(self, obj):
        if len(obj) <= 18:
            return [obj] + self._states
        return [obj] + self._matches


class ProbeKV:
    """A KV cache manager whose probe takes prompt[:-1] (a list) as
    TensorRT-LLM passes it and answers rank 0's precomputed match, looked up
    by the list's last token (unique per request)."""

    enable_block_reuse = True
    tokens_per_block = BLOCK

    def __init__(self, by_key):
        self._by_key = by_key

    def probe_prefix_match_length(self, input_tokens, lora_task_id=None, cache_salt=None):
        return self._by_key[input_tokens[-1]]


class StatsProbeKV(ProbeKV):
    """Row 6's KV cache manager, ours' only: ProbeKV's probe (the same
    matches) and get_kv_cache_stats, rank 0's pool in blocks as
    TensorRT-LLM's KV cache manager reports it (a new stats object per
    call). The other side keeps ProbeKV, as in rows 1-5."""

    def __init__(self, by_key, max_num_blocks, free_num_blocks):
        super().__init__(by_key)
        self._blocks = (max_num_blocks, free_num_blocks)

    def get_kv_cache_stats(self):
        return SimpleNamespace(max_num_blocks=self._blocks[0], free_num_blocks=self._blocks[1],
                               tokens_per_block=BLOCK)


class ActiveRequest(F.LlmRequest):
    """An active request of the workload: trtllm_fakes.LlmRequest with a
    prompt of n tokens (py_orig_prompt_len; its token list, which no router
    reads, is one token), an output cap (py_max_new_tokens) and its
    progress: not started (context-init, position 0) or decoding (prompt
    computed, generated tokens generated; get_num_tokens(0) counts both).
    is_context_init_state is an attribute set from the state's name, so
    that it holds with TensorRT-LLM's LlmRequestState too (the fake's
    property compares with trtllm_fakes' enum, whose values differ)."""

    is_context_init_state = False  # shadows the fake's property: set per request

    def __init__(self, n, state, max_tokens, generated):
        started = state.name != "CONTEXT_INIT"
        super().__init__([1], state=state, max_tokens=max_tokens, context_position=n if started else 0)
        self.py_orig_prompt_len = n
        self.generated = generated
        self.is_context_init_state = not started

    def get_num_tokens(self, beam):
        return self.py_orig_prompt_len + self.generated


def _progress(rng, S):
    """A drawn active request's (state, max_tokens, generated tokens): 1 in
    10 not started yet, the others decoding, part of their output made."""
    cap = rng.randint(128, 2048)
    if rng.random() < 0.1:
        return S.CONTEXT_INIT, cap, 0
    return S.GENERATION_IN_PROGRESS, cap, rng.randint(1, cap - 1)


def _not_started(r):
    return r.is_context_init_state and r.context_current_position == 0


def pending_kv(active):
    """The KV, in tokens, active requests will still take from the pool, as
    ours reports it (docs/ROUTING.md, pending_kv_tokens): a request not
    started yet its prompt and output cap, a started one the rest of its
    output. Row 6 checks ours' report of rank 0 against it."""
    total = 0
    for r in active:
        seq = r.py_orig_prompt_len + r.py_max_new_tokens
        total += seq if _not_started(r) else max(seq - r.get_num_tokens(0), 0)
    return total


# ---- the workload -------------------------------------------------------------------------

class Workload:
    """One size's batches, rank loads, allgather payloads and matches."""

    def __init__(self, nreq, dp, request_states, seed=1):
        rng = random.Random(seed * 1_000_003 + nreq * 1009 + dp)
        self.nreq, self.dp = nreq, dp
        self.systems = [rng.choices(range(VOCAB), k=n) for n in SYSTEM_LENS]
        holders = [set(rng.sample(range(dp), max(1, dp // 8))) for _ in self.systems]
        # The earlier batch: the conversations half of the timed batch returns to.
        prime_convs = ["chat-%012x" % rng.getrandbits(48) for _ in range(nreq)]
        self.prime, _, _ = self._batch(rng, 1_000_000, prime_convs, holders)
        returning = set(rng.sample(range(nreq), nreq // 2))
        back = iter(rng.sample(prime_convs, nreq // 2))
        convs = []
        for i in range(nreq):
            if i in returning:
                convs.append(next(back))
            else:
                convs.append("chat-%012x" % rng.getrandbits(48) if rng.random() < 0.8 else None)
        self.items, self.rows, self.sys_len = self._batch(rng, 2_000_000, convs, holders,
                                                          returning=returning)
        # What the ranks' KV reports read (row 6), drawn from a generator of
        # their own so that every other draw, and rows 1-5, stay as they were:
        # each new request's output cap (max_tokens).
        kv_rng = random.Random("kv %d %d %d" % (seed, nreq, dp))
        for it in self.items:
            it.request.max_tokens = it.request.py_max_new_tokens = kv_rng.randint(128, 2048)
        self.ids = [it.id for it in self.items]
        self.flat = []
        for row in self.rows:
            flat = [0] * (2 * nreq)
            flat[0::2] = self.ids
            flat[1::2] = row
            self.flat.append(flat)
        self.kv = ProbeKV({it.request.input_token_ids[-2]: m for it, m in zip(self.items, self.rows[0])})
        # Rank loads.
        counts = [rng.randrange(0, 2 * nreq // dp + 5) for _ in range(dp)]
        self.loads = [(a, sum(rng.randrange(200, 3000) for _ in range(a))) for a in counts]
        self.maxn = max(counts) + nreq + 4
        self.started, self.conversations = {}, 0  # row 3's conversations
        # Rank 0's active requests (two retiring) and the other ranks' payloads.
        S = request_states
        self.active = []
        for _ in range(counts[0]):
            n = rng.randrange(1536, 2561)
            r = ActiveRequest(n, *_progress(kv_rng, S))
            r.cached_tokens = rng.choice((0, 0, n // BLOCK * BLOCK // 2, 1024))
            self.active.append(r)
        for _ in range(2):
            r = F.LlmRequest([1], state=S.GENERATION_TO_COMPLETE)
            r.py_orig_prompt_len = 2000
            self.active.append(r)
        tok0 = sum(max(r.py_orig_prompt_len - r.cached_tokens, 0) for r in self.active[:counts[0]])
        self.payloads = [[0, counts[0], tok0, 2] + [0, -1] + [0] * 7]
        for r in range(1, dp):
            a, t = self.loads[r]
            retiring = rng.randrange(0, 3)
            self.payloads.append([r, a, t, retiring, 1, 1000, rng.randrange(0, 4), rng.randrange(0, 8192),
                                  rng.randrange(0, 4096), a, t, 0, 0])
        self.gathered = [tuple(p[:4]) for p in self.payloads]
        self.dist = BenchDist(dp, self.payloads, self.flat)
        # Row 6's ranks report their KV state as well: each rank's pool (2..4
        # times what its active requests take in all, or POOL_FLOOR tokens
        # where they take less; 30..100% of what the blocks they hold leave
        # free) and the KV its active requests will still take (pending_kv:
        # rank 0's from self.active, the other ranks' from requests drawn
        # alike). The other ranks' payloads are ours' RankState with those
        # fields; rank 0's pool is its KV cache manager's stats (self.kv_stats,
        # ours' only in row 6: the other side's KV object stays as rows 1-5
        # have it).
        self.kv_gathered = []
        kv_payloads = []
        for r in range(dp):
            reqs = self.active[:counts[0]] if r == 0 else [
                ActiveRequest(kv_rng.randrange(1536, 2561), *_progress(kv_rng, S)) for _ in range(counts[r])]
            need = sum(q.py_orig_prompt_len + q.py_max_new_tokens for q in reqs)
            held = sum(q.get_num_tokens(0) for q in reqs if not _not_started(q))
            blocks = -(-int(max(need, POOL_FLOOR) * kv_rng.uniform(2.0, 4.0)) // BLOCK)
            free = int((blocks - -(-held // BLOCK)) * kv_rng.uniform(0.3, 1.0))
            pending = pending_kv(reqs)
            self.kv_gathered.append(self.gathered[r] + (blocks * BLOCK, free * BLOCK, pending))
            if r == 0:
                self.kv_stats = StatsProbeKV(self.kv._by_key, blocks, free)
            p = self.payloads[r]
            kv_payloads.append(T.RankState(*p[:4], iter_stats=T.RankIterStatsPayload(*p[4:]),
                                           kv_capacity_tokens=blocks * BLOCK, free_kv_tokens=free * BLOCK,
                                           pending_kv_tokens=pending).serialize())
        self.kv_dist = BenchDist(dp, kv_payloads, self.flat)

    def _batch(self, rng, first_id, convs, holders, returning=()):
        """nreq items and each rank's match for each of them."""
        items, sys_len = [], []
        rows = [[0] * self.nreq for _ in range(self.dp)]
        sentinels = rng.sample(range(VOCAB), self.nreq)
        for i in range(self.nreq):
            n = rng.randrange(1536, 2561)
            s = rng.randrange(len(self.systems)) if rng.randrange(8) else None
            head = self.systems[s] if s is not None else []
            n = max(n, len(head) + 128)  # a unique suffix of at least 4 blocks
            prompt = head + rng.choices(range(VOCAB), k=n - len(head))
            prompt[-2] = sentinels[i]
            u = rng.random()
            target = relax = None
            if u < 0.03:
                target, relax = rng.randrange(self.dp), False
            elif u < 0.06:
                target, relax = rng.randrange(self.dp), True
            elif u < 0.08:
                relax = False
            items.append(F.RequestQueueItem(first_id + i, F.LlmRequest(prompt, target=target, relax=relax,
                                                                       conversation=convs[i])))
            sys_len.append(len(head))
            cap = (n - 1) // BLOCK * BLOCK
            home = rng.randrange(self.dp) if i in returning else None
            for r in range(self.dp):
                if r == home:
                    m = int(n * rng.uniform(0.5, 0.9)) // BLOCK * BLOCK
                elif s is not None and r in holders[s]:
                    m = len(head) // BLOCK * BLOCK
                else:
                    m = rng.choice((0, 0, 0, BLOCK, 2 * BLOCK))
                rows[r][i] = min(m, cap)
        return items, rows, sys_len

    def conversation_batch(self, call):
        """Row 3's batch number call (calls come in order): the timed
        batch's prompts and scheduling params with fresh ids; half the
        requests return to a conversation started in the last 32 calls, 40%
        start one, 10% carry none."""
        rng = random.Random(call * 7919 + self.nreq)
        recent = [c for k in range(max(0, call - 32), call) for c in self.started.get(k, ())]
        self.started.pop(call - 32, None)
        started, out = [], []
        for i, it in enumerate(self.items):
            u = rng.random()
            if u < 0.5 and recent:
                conv = rng.choice(recent)
            elif u < 0.9:
                conv = "chat-%d-%d" % (call, i)
                started.append(conv)
            else:
                conv = None
            new = F.LlmRequest(it.request.input_token_ids, conversation=conv)
            new.py_scheduling_params = it.request.py_scheduling_params
            out.append(F.RequestQueueItem(3_000_000 + call * self.nreq + i, new))
        self.started[call] = started
        self.conversations += len(started)
        return out

    def renewed(self):
        """The timed batch as new objects: new RequestQueueItem, LlmRequest,
        SchedulingParams and ConversationParams objects for the same requests
        (ids, params, conversations, output caps, and the prompt lists
        themselves, which a request keeps), as an engine's new_requests are
        new objects every iteration."""
        out = []
        for it in self.items:
            req = it.request
            new = F.LlmRequest(req.input_token_ids, max_tokens=req.max_tokens)
            p = req.py_scheduling_params
            if p is not None:
                new.py_scheduling_params = F.SchedulingParams(p.attention_dp_rank, p.attention_dp_relax)
            c = req.py_conversation_params
            if c is not None:
                new.py_conversation_params = F.ConversationParams(c.conversation_id)
            out.append(F.RequestQueueItem(it.id, new))
        return out

    def fresh(self, call):
        """The timed batch with new prompts: the first token after each system
        prompt is unique to (call, request), so every block after the system
        prompts is new to a prefix index; same ids, params and probe keys."""
        out = self.renewed()
        for i, it in enumerate(out):
            prompt = list(it.request.input_token_ids)
            prompt[self.sys_len[i]] = VOCAB + call * self.nreq + i
            it.request.input_token_ids = prompt  # the same length: the request's counts hold
        return out


# ---- checks -------------------------------------------------------------------------------

class Mismatch(Exception):
    pass


def decisions(result):
    out, expected = result
    return {r: [it.id for it in v] for r, v in out.items()}, expected


def check_same(what, ours, theirs):
    a, b = decisions(ours), decisions(theirs)
    if a != b:
        diff = [r for r in sorted(set(a[0]) | set(b[0])) if a[0].get(r) != b[0].get(r)]
        raise Mismatch("%s: decisions differ: expected %r vs %r; ranks %s differ (first: ours %r, theirs %r)"
                       % (what, a[1], b[1], diff[:8], a[0].get(diff[0]) if diff else None,
                          b[0].get(diff[0]) if diff else None))


def check_consistent(what, result, items, active, maxn, targets=True, left=()):
    """Every request placed once or left over (left: what the router carried
    out of the call; the recommended preset leaves a request over to wait
    for its prompt in flight), none lost, strict targets kept (unless not
    targets: the conversation router keeps a bound conversation on its rank
    instead), no rank past expected, expected within maxn."""
    out, expected = result
    placed = [it.id for v in out.values() for it in v]
    over = [it.id for it in left]
    want = [it.id for it in items]
    if len(placed) + len(over) != len(want) or set(placed) | set(over) != set(want):
        raise Mismatch("%s: %d of %d requests placed (%d distinct), %d left over"
                       % (what, len(placed), len(want), len(set(placed)), len(over)))
    where = {it.id: r for r, v in out.items() for it in v}
    for it in items:
        sp = it.request.py_scheduling_params
        if targets and sp is not None and sp.attention_dp_rank is not None and sp.attention_dp_relax is False \
                and where.get(it.id) != sp.attention_dp_rank:
            raise Mismatch("%s: request %d wants rank %d, went to %s" % (what, it.id, sp.attention_dp_rank,
                                                                         where.get(it.id, "none (left over)")))
    for r, v in out.items():
        if active[r] + len(v) > expected:
            raise Mismatch("%s: rank %d holds %d + %d > expected %d" % (what, r, active[r], len(v), expected))
    if expected > maxn:
        raise Mismatch("%s: expected %d > max_num_active_requests %d" % (what, expected, maxn))


# ---- timing -------------------------------------------------------------------------------

def timed(runs, warm, prepare, check):
    """runs timed calls of each side (after warm untimed ones), alternating
    which goes first; prepare(k) -> (ours(), theirs()) builds what call k
    needs, untimed; check(k, ours_result, theirs_result) after each pair.
    Returns ours' times, theirs', and the share of ours' timed calls during
    which this thread gave up its CPU (None where unknown): in ours, the Go
    runtime preempting the library call (docs/performance.md)."""
    t_ours, t_theirs, slept = [], [], []
    for k in range(warm + runs):
        f_ours, f_theirs = prepare(k)
        gc.collect()
        gc.disable()
        try:
            if k % 2 == 0:
                s0 = _sleeps()
                t0 = _now()
                r_ours = f_ours()
                t1 = _now()
                s1 = _sleeps()
                t2 = _now()
                r_theirs = f_theirs()
                t3 = _now()
                d_ours, d_theirs = t1 - t0, t3 - t2
            else:
                t0 = _now()
                r_theirs = f_theirs()
                t1 = _now()
                s0 = _sleeps()
                t2 = _now()
                r_ours = f_ours()
                t3 = _now()
                s1 = _sleeps()
                d_theirs, d_ours = t1 - t0, t3 - t2
        finally:
            gc.enable()
        check(k, r_ours, r_theirs)
        # Drop both results now, untimed: they hold the batch's objects,
        # and replacing them inside the next timed region would free this
        # batch there, in whichever side's call replaced the last reference
        # (the engine frees its requests in its own code, not in the router).
        del r_ours, r_theirs
        if k >= warm:
            t_ours.append(d_ours / 1000.0)
            t_theirs.append(d_theirs / 1000.0)
            if s0 is not None:
                slept.append(s1 > s0)
    return t_ours, t_theirs, (sum(slept) / len(slept) if slept else None)


def iteration(router, active, items, maxn):
    """One KV-aware iteration as TensorRT-LLM's executor runs it."""
    states = router.gather_all_rank_states(active, items)
    if router.needs_prefix_matches:
        router.gather_prefix_matches(items)
    return router.route_requests(states, items, maxn)


def fill_index(router, w, fill_max, check=None):
    """Routes workload w's fresh batches through ours' router alone until its
    prefix index is full (tests/index_fill.py: an engine's steady state) or
    fill_max calls, draining what each call leaves over; check(k, decision,
    batch, left), when given, sees every call. Returns (calls, full)."""
    calls, filling = 0, index_fill.Filling()
    full = filling.full(router.stats())
    while calls < fill_max and not full:
        fresh = w.fresh(calls)
        got = iteration(router, w.active, fresh, w.maxn)
        left = router.drain_carried()
        if check is not None:
            check(calls, got, fresh, left)
        calls += 1
        full = filling.full(router.stats())
    return calls, full


def probe_loop(kv, items):
    """The engine's share of gather_prefix_matches, as both sides run it:
    for each item, its prompt without the last token (a copy: the probe API
    takes a list) and one probe_prefix_match_length call. Nothing else."""
    out = []
    for it in items:
        req = it.request
        if req is None:
            out.append(0)
            continue
        toks = getattr(req, "input_token_ids", None) or []
        cfg = getattr(req, "lora_config", None)
        out.append(kv.probe_prefix_match_length(toks[:-1] if len(toks) > 1 else [],
                                                cfg.task_id if cfg is not None else None,
                                                cache_salt=getattr(req, "cache_salt", None)))
    return out


def chosen(row, only):
    """Whether row (one of ROWS) runs when only (--row) names the rows to run."""
    return not only or row in only


def bench_size(nreq, dp, runs, ours, theirs, counter, fill_max=INDEX_FILL_MAX, only=None):
    """The seven rows at one size, or those named in only (ROWS):
    [(label, ours times, theirs times)]."""
    def want(row):
        return chosen(row, only)

    w = Workload(nreq, dp, theirs.request_states)
    gc.collect()
    gc.freeze()  # the workload stays: collections between runs skip it
    items, maxn, dist, kv = w.items, w.maxn, w.dist, w.kv
    size = "%d x %d" % (nreq, dp)
    rows = []
    made = []  # ours' routers the chosen rows made, closed at the end

    # Rows 1, 2, 4 and 4f route each call's batch as new objects
    # (Workload.renewed), built untimed before the call.
    batches = {}

    def renewed(k):
        batches[k] = batch = w.renewed()
        batches.pop(k - 1, None)
        return batch

    def same(label):
        def check(k, a, b):
            check_same("%s %s call %d" % (label, size, k), a, b)
            check_consistent("%s %s call %d" % (label, size, k), a, batches[k], active_of(label), maxn,
                             targets=not label.startswith("(3)"))
            counter["same"] += 1
        return check

    loads_active = [a for a, _ in w.loads]
    gathered_active = [g[1] for g in w.gathered]
    active_of = lambda label: gathered_active if label.startswith("(4)") else loads_active  # noqa: E731

    # Both sides gather the same states and the same matches.
    o_kv, t_kv = ours.kv(dist, kv), theirs.kv(dist, kv)
    got_o = [(s.rank, s.num_active_requests, s.num_active_tokens, s.num_retiring_requests)
             for s in o_kv.gather_all_rank_states(w.active, items)]
    got_t = [(s.rank, s.num_active_requests, s.num_active_tokens, s.num_retiring_requests)
             for s in t_kv.gather_all_rank_states(w.active, items)]
    if got_o != got_t or got_o != w.gathered:
        raise Mismatch("%s: gathered rank states differ:\n ours   %s\n theirs %s\n want   %s"
                       % (size, got_o[:4], got_t[:4], w.gathered[:4]))

    # (1) KV-aware route_requests after each side's own gather_prefix_matches.
    so, st = ours.states(w.loads), theirs.states(w.loads)
    label = "(1) KV-aware route_requests"

    if want("1"):
        def prepare_kv(k):
            batch = renewed(k)
            o_kv.gather_prefix_matches(batch)
            t_kv.gather_prefix_matches(batch)
            return lambda: o_kv.route_requests(so, batch, maxn), lambda: t_kv.route_requests(st, batch, maxn)
        rows.append((label,) + timed(runs, WARM, prepare_kv, same(label)))

    # (2) default route_requests.
    if want("2"):
        o_d, t_d = ours.default(dist), theirs.default(dist)
        made.append(o_d)
        label = "(2) default route_requests"

        def prepare_default(k):
            batch = renewed(k)
            return lambda: o_d.route_requests(so, batch, maxn), lambda: t_d.route_requests(st, batch, maxn)
        rows.append((label,) + timed(runs, WARM, prepare_default, same(label)))

    # (3) conversation route_requests in steady state: one pair of routers
    # whose conversation maps are full (LRU evicting) before timing starts.
    if want("3"):
        label = "(3) conversation route_requests"
        o_c, t_c = ours.conversation(dist), theirs.conversation(dist)
        made.append(o_c)
        conv_calls = 0
        while w.conversations < (CONV_FILL if fill_max else 0) or conv_calls < 4:
            batch = w.conversation_batch(conv_calls)
            check_same("%s %s filling call %d" % (label, size, conv_calls),
                       o_c.route_requests(so, batch, maxn), t_c.route_requests(st, batch, maxn))
            counter["same"] += 1
            conv_calls += 1
        conv_batches = {}

        def prepare_conv(k):
            conv_batches[k] = batch = w.conversation_batch(conv_calls + k)
            conv_batches.pop(k - 1, None)
            return lambda: o_c.route_requests(so, batch, maxn), lambda: t_c.route_requests(st, batch, maxn)

        def check_conv(k, a, b):
            check_same("%s %s call %d" % (label, size, k), a, b)
            check_consistent("%s %s call %d" % (label, size, k), a, conv_batches[k], loads_active, maxn, targets=False)
            counter["same"] += 1
        rows.append((label,) + timed(runs, WARM, prepare_conv, check_conv))

    # (4) the whole KV-aware iteration.
    o_it, t_it = ours.kv(dist, kv), theirs.kv(dist, kv)
    made.append(o_it)
    label = "(4) KV-aware iteration"

    if want("4"):
        def prepare_iteration(k):
            batch = renewed(k)
            return (lambda: iteration(o_it, w.active, batch, maxn),
                    lambda: iteration(t_it, w.active, batch, maxn))
        rows.append((label,) + timed(runs, WARM, prepare_iteration, same(label)))

    # (4f) row 4's floor: the probe loop alone against the other side's
    # whole iteration. Its speed-up is the most any router that probes
    # through the engine's API can reach on row 4.
    if want("4f"):
        label = "(4f) row 4's probe loop alone"

        def prepare_probes(k):
            batch = renewed(k)
            return lambda: probe_loop(kv, batch), lambda: iteration(t_it, w.active, batch, maxn)
        rows.append((label,) + timed(runs, WARM, prepare_probes, lambda k, a, b: None))

    def steady(row, key, label, make):
        """Rows 5 and 6: ours' router from make(), which keeps a prefix index,
        against the other side's row-4 iteration, fresh prompts each call;
        ours alone until its index is full (an engine's steady state), then
        INDEX_WARM untimed calls and the timed ones. Both sides' decisions
        are checked for consistency (counter[key] counts the calls) and the
        index's size goes to the notes, as row row's."""
        rss0 = resident_bytes()
        router = make()
        made.append(router)

        def check_filling(k, got, fresh, left):
            check_consistent("%s %s filling call %d" % (label, size, k), got, fresh, gathered_active, maxn,
                             left=left)
        filled, full = fill_index(router, w, fill_max, check_filling)
        batches = {}

        def prepare_index(k):
            batches[k] = fresh = w.fresh(filled + k)
            batches.pop(k - 1, None)
            return (lambda: iteration(router, w.active, fresh, maxn),
                    lambda: iteration(t_it, w.active, fresh, maxn))

        def check_index(k, a, b):
            check_consistent("%s %s call %d, ours" % (label, size, k), a, batches[k], gathered_active, maxn,
                             left=router.drain_carried())
            check_consistent("%s %s call %d, theirs" % (label, size, k), b, batches[k], gathered_active, maxn)
            counter[key] += 1
        rows.append((label,) + timed(runs, INDEX_WARM, prepare_index, check_index))
        st_ix = router.stats()
        # The last batch's prompt lists are the benchmark's, not the index's.
        batches.clear()
        rss1 = resident_bytes()
        counter["index_note"].append(
            "row %s, %s: ours' index: full after %d untimed calls%s; after all %d: %d entries, %.0f MB "
            "(index_bytes; the process grew by %s), %d blocks evicted"
            % (row, size, filled, "" if full else " (NOT full: timed while filling)",
               filled + INDEX_WARM + runs, st_ix.get("index_entries", -1), st_ix.get("index_bytes", 0) / 1e6,
               "%.0f MB resident" % ((rss1 - rss0) / 1e6) if rss0 and rss1 else "an unknown amount",
               evicted(router)))

    # (5) ours in index mode against the other side's row-4 iteration, fresh prompts each call.
    if want("5"):
        def index_mode():
            o_ix = ours.kv(dist, kv, options={"prefix_source": "index"})
            if o_ix.needs_prefix_matches:
                o_ix.close()
                raise Mismatch("prefix_source=index: needs_prefix_matches is still True")
            return o_ix
        steady("5", "index", "(5) index-mode iteration (ours)", index_mode)

    # (6) ours under the recommended preset (probe+index, ttft score, quiet
    # warmup), on ranks that report their KV pool and pending KV, against the
    # other side's row-4 iteration, fresh prompts each call.
    if want("6"):
        def recommended():
            # Its own allgather (the other ranks' states carry their KV) and
            # KV cache manager (rank 0's pool); the same probes and matches.
            o_rc = ours.kv(w.kv_dist, w.kv_stats, options={"preset": "recommended"})
            got = [(s.rank, s.num_active_requests, s.num_active_tokens, s.num_retiring_requests,
                    s.kv_capacity_tokens, s.free_kv_tokens, s.pending_kv_tokens)
                   for s in o_rc.gather_all_rank_states(w.active, items)]
            if not o_rc.needs_prefix_matches or got != w.kv_gathered:
                o_rc.close()
                raise Mismatch("%s: the recommended preset's rank states (probing: %s) differ:\n ours %s\n want %s"
                               % (size, o_rc.needs_prefix_matches, got[:4], w.kv_gathered[:4]))
            return o_rc
        steady("6", "preset", "(6) recommended iteration (ours)", recommended)
    for r in [o_kv] + made:
        r.close()
    gc.unfreeze()
    return [(lbl, size, o, t, z) for lbl, o, t, z in rows]


def resident_bytes():
    """This process's resident set size in bytes (Linux), else 0, once the C
    heap's free memory is back with the operating system (glibc's
    malloc_trim, where there is one): the memory the benchmark's own batches
    freed (their prompt lists) is then not counted as the index's."""
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def evicted(router):
    """Blocks ours' prefix index has evicted, all ranks together."""
    return index_fill.evicted(router.stats())


def spread(xs):
    """(p90 - p10) / median, in percent."""
    s = sorted(xs)
    q = lambda f: s[min(len(s) - 1, int(round(f * (len(s) - 1))))]  # noqa: E731
    return 100.0 * (q(0.9) - q(0.1)) / statistics.median(s)


# ---- --profile ----------------------------------------------------------------------------

class _Timed:
    """Wraps callables of an object: times named ones into acc, forwards the rest."""

    def __init__(self, obj, names, acc, prefix):
        self._obj = obj
        for name in names:
            fn = getattr(obj, name, None)
            if fn is not None:
                setattr(self, name, _timer(fn, acc, prefix + name))

    def __getattr__(self, name):
        return getattr(self._obj, name)


def _timer(fn, acc, key):
    def wrapper(*args, **kwargs):
        t0 = _now()
        try:
            return fn(*args, **kwargs)
        finally:
            acc[key] = acc.get(key, 0) + _now() - t0
    return wrapper


def profile(calls, nreq=256, dp=16):
    """Ours' KV-aware route_requests at nreq x dp, split by perf_counter_ns:
    the whole call, the one C call of the compiled path inside it
    (_speedups.trtllm_route: read the items, pack, decide, build the result).
    The library's decision alone is BenchmarkRoute in router/bench_test.go."""
    w = Workload(nreq, dp, F.LlmRequestState)
    router = T.KVCacheAwareADPRouter(w.dist, w.kv)
    router.gather_prefix_matches(w.items)
    states = [T.RankState(r, a, t) for r, (a, t) in enumerate(w.loads)]
    items, maxn = w.items, w.maxn
    sp = _accel.speedups
    c_path = sp is not None and hasattr(sp, "trtllm_route")
    acc = {}
    if c_path:
        real = sp.trtllm_route

        def timed_route(*args):
            t0 = _now()
            got = real(*args)
            acc["c"] = _now() - t0
            return got
        sp.trtllm_route = timed_route
    gc.collect()
    gc.freeze()  # as in the table: the collection between calls then skips the workload

    def run(n, fn):
        out = []
        for _ in range(n):
            gc.collect()
            gc.disable()
            acc.clear()
            t0 = _now()
            fn()
            t1 = _now()
            gc.enable()
            out.append((t1 - t0, acc.get("c", 0)))
        return out

    try:
        run(5, lambda: router.route_requests(states, items, maxn))
        whole = run(calls, lambda: router.route_requests(states, items, maxn))
    finally:
        if c_path:
            sp.trtllm_route = real
        gc.unfreeze()
    router.close()
    med = lambda v: statistics.median(v) / 1000.0  # noqa: E731
    print("--profile: ours' KVCacheAwareADPRouter.route_requests, %d requests x %d ranks, ~2k-token prompts,"
          % (nreq, dp))
    print("dense gathered matches; median us of %d calls (time.perf_counter_ns; gc off)" % calls)
    print("  %-62s %9.1f" % ("route_requests", med([t for t, _ in whole])))
    if c_path:
        print("    %-60s %9.1f" % ("_speedups.trtllm_route: read items, pack, decide, result (one C call)",
                                    med([c for _, c in whole])))
    else:
        print("    (pure-Python path: adprouter._speedups is not built)")
    print("(here ours runs alone, so its caches are warmer than in the table, where the other side runs "
          "between calls)")


def profile_row6(calls, nreq=256, dp=16, fill_max=INDEX_FILL_MAX):
    """Row 6's iteration (ours under the recommended preset, ranks reporting
    their KV) at nreq x dp, split by perf_counter_ns into its three stages:
    gather_all_rank_states (rank 0's state and KV report, the allgather),
    gather_prefix_matches (the probe loop and the allgathered matches) and
    route_requests (the decision). As in the table: fresh requests each call,
    the previous call's freed untimed, ours alone until its index is full,
    then INDEX_WARM untimed calls; the requests a call leaves over are drained
    untimed."""
    w = Workload(nreq, dp, F.LlmRequestState)
    router = T.KVCacheAwareADPRouter(w.kv_dist, w.kv_stats, options={"preset": "recommended"})
    n, full = fill_index(router, w, fill_max)
    stages = ([], [], [], [])
    gc.collect()
    gc.freeze()
    try:
        for k in range(INDEX_WARM + calls):
            fresh = w.fresh(n + k)  # the previous batch is freed here, untimed
            gc.collect()
            gc.disable()
            t0 = _now()
            states = router.gather_all_rank_states(w.active, fresh)
            t1 = _now()
            router.gather_prefix_matches(fresh)
            t2 = _now()
            router.route_requests(states, fresh, w.maxn)
            t3 = _now()
            gc.enable()
            router.drain_carried()
            if k >= INDEX_WARM:
                for acc, d in zip(stages, (t1 - t0, t2 - t1, t3 - t2, t3 - t0)):
                    acc.append(d)
    finally:
        gc.unfreeze()
        router.close()
    med = lambda v: statistics.median(v) / 1000.0  # noqa: E731
    print("--profile --row 6: ours' iteration under the recommended preset, %d requests x %d ranks, ranks "
          "reporting their KV;" % (nreq, dp))
    print("index %s after %d untimed calls; median us of %d calls (time.perf_counter_ns; gc off)"
          % ("full" if full else "NOT full", n, calls))
    for label, v in zip(("gather_all_rank_states (states, KV report, allgather)",
                         "gather_prefix_matches (probe loop, allgathered matches)",
                         "route_requests (the decision)", "the whole iteration"), stages):
        print("  %-62s %9.1f" % (label, med(v)))
    print("(here ours runs alone, so its caches are warmer than in the table, where the other side runs "
          "between calls)")


# ---- main ---------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trtllm", metavar="PATH", default=os.environ.get("ADPR_TRTLLM_SRC") or None,
                    help="folder holding %s (default: $ADPR_TRTLLM_SRC; none: the oracle)" % ROUTER_FILE)
    ap.add_argument("--quick", action="store_true",
                    help="%d runs per row, rows 5 and 6 timed while ours' index fills: a few seconds" % QUICK_RUNS)
    ap.add_argument("--runs", type=int, help="timed calls per row and size")
    ap.add_argument("--size", action="append", choices=["%dx%d" % s for s in SIZES], help="one size (repeatable)")
    ap.add_argument("--row", action="append", choices=ROWS, help="one row (repeatable)")
    ap.add_argument("--profile", action="store_true",
                    help="only: where ours' KV-aware route_requests spends its time (256 x 16, or each --size); "
                         "with --row 6, where row 6's iteration does")
    args = ap.parse_args()
    start = time.monotonic()
    if args.profile:
        rows = set(args.row or ["1"])
        if rows - {"1", "6"}:
            ap.error("--profile times row 1 (the default) or row 6, not %s" % ", ".join(sorted(rows - {"1", "6"})))
        for size in args.size or ["256x16"]:
            nreq, dp = map(int, size.split("x"))
            if "1" in rows:
                profile(args.runs or (20 if args.quick else 200 if nreq < 1024 else 50), nreq, dp)
            if "6" in rows:
                profile_row6(args.runs or (20 if args.quick else 100 if nreq < 1024 else 30), nreq, dp,
                             fill_max=0 if args.quick else INDEX_FILL_MAX)
        return 0

    theirs = TrtllmSide(args.trtllm) if args.trtllm else OracleSide()
    ours = OursSide()
    print("adprouter.trtllm against %s" % theirs.describe())
    sp = _accel.speedups
    print("adprouter %s (ABI %d), %s; Python %s (%s), %s, %d CPUs, load average %.2f"
          % (adprouter.version(), adprouter.abi_version(),
             "_speedups from %s" % sp.__file__ if sp is not None else "no _speedups (pure-Python packing)",
             platform.python_version(), sys.executable, platform.machine(), os.cpu_count() or 0, os.getloadavg()[0]))
    env = sorted(k for k in os.environ if k.startswith(("TRTLLM_ADPROUTER_", "ADPROUTER_")))
    if env:
        print("NOTE: options from the environment apply to ours: %s" % ", ".join(env))
    sizes = [s for s in SIZES if not args.size or "%dx%d" % s in args.size]
    runs = {s: args.runs or (QUICK_RUNS if args.quick else DEFAULT_RUNS[s]) for s in sizes}
    print("runs: %s per row (after %d untimed calls; rows 5 and 6: ours alone until its index is full%s, then %d "
          "untimed), interleaved call by call, gc off while timing"
          % (", ".join("%d x %d: %d" % (s + (runs[s],)) for s in sizes), WARM,
             " (not with --quick)" if args.quick else "", INDEX_WARM))
    counter = {"same": 0, "index": 0, "preset": 0, "index_note": []}
    results = []
    try:
        for s in sizes:
            results += bench_size(s[0], s[1], runs[s], ours, theirs, counter,
                                  fill_max=0 if args.quick else INDEX_FILL_MAX, only=args.row)
    except Mismatch as e:
        print("FAIL: %s" % e)
        return 1

    other = theirs.label
    print()
    print("median us per call (spread: p10..p90 as %% of the median); speed-up = %s / ours" % other)
    head = "%-34s %-10s %12s %12s %9s %7s %7s %7s" % ("row", "size", "ours", other, "speed-up", "spr.o", "spr.t",
                                                         "slept.o")
    print(head)
    print("-" * len(head))
    for label, size, o, t, z in results:
        mo, mt = statistics.median(o), statistics.median(t)
        print("%-34s %-10s %12.1f %12.1f %8.1fx %6.0f%% %6.0f%% %7s" % (label, size, mo, mt, mt / mo, spread(o),
                                                                         spread(t),
                                                                         "-" if z is None else "%.0f%%" % (100 * z)))
    print()
    want = lambda row: chosen(row, args.row)  # noqa: E731
    if any(want(r) for r in ("1", "2", "3", "4")):
        print("decisions: identical in all %d compared calls of rows 1-4 (timed, warm-up and the conversation "
              "router's earlier batches untimed), every request placed" % counter["same"])
    if want("5"):
        print("row 5: ours (index mode) consistent in all %d calls (every request placed once, strict targets "
              "kept, no rank past expected); its decisions differ from %s's by design" % (counter["index"], other))
    if want("6"):
        print("row 6: ours (recommended preset, ranks reporting their KV) consistent in all %d calls (every request "
              "placed once or left over to wait for its prompt in flight, none lost, strict targets kept, no rank "
              "past expected); its decisions differ from %s's by design" % (counter["preset"], other))
    if want("4f"):
        print("row 4f: no router, only the probe loop both sides' gather_prefix_matches run (prompt[:-1] and one "
              "probe call per request), against %s's row-4 iteration: its speed-up is the most any router that "
              "probes through the engine's API can reach on row 4" % other)
    for note in counter["index_note"]:
        print("  " + note)
    print("slept.o: the share of ours' timed calls during which the calling thread gave up its CPU; in ours "
          "that is the Go runtime's monitor preempting a library call it found running "
          "(docs/performance.md, \"Called once per iteration\")")
    print("wall time %.1f s" % (time.monotonic() - start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
