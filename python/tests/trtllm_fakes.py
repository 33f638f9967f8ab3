"""Duck-typed stand-ins for the TensorRT-LLM objects adprouter.trtllm reads,
written from TensorRT-LLM's public attribute names, and a pure-Python
TensorRT-LLM-style router over them (the oracle of the tests and the
baseline of python/bench_trtllm.py).

Used by test_trtllm.py, mpi_trtllm.py (4 ranks under MPI) and the benchmark;
nothing here imports tensorrt_llm.
"""

import enum
import os
import sys
import threading
from types import SimpleNamespace

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import reference as ref  # noqa: E402


class SchedulingParams:
    """tensorrt_llm.scheduling_params.SchedulingParams: both fields optional."""

    def __init__(self, attention_dp_rank=None, attention_dp_relax=None):
        self.attention_dp_rank = attention_dp_rank
        self.attention_dp_relax = attention_dp_relax


class NewerSchedulingParams(SchedulingParams):
    """SchedulingParams of newer TensorRT-LLM releases: also
    subagent_affinity_id, the parent session's key a sub-agent's request
    carries (routed as its conversation)."""

    def __init__(self, attention_dp_rank=None, attention_dp_relax=None, subagent_affinity_id=None):
        super().__init__(attention_dp_rank, attention_dp_relax)
        self.subagent_affinity_id = subagent_affinity_id


class ConversationParams:
    def __init__(self, conversation_id):
        self.conversation_id = conversation_id


class LoraConfig:
    def __init__(self, task_id):
        self.task_id = task_id


class LlmRequestState(enum.IntEnum):
    """The request states the routers tell apart (TensorRT-LLM's C++ enum
    has more, with other values; only the names matter here)."""

    CONTEXT_INIT = 1
    GENERATION_IN_PROGRESS = 2
    GENERATION_TO_COMPLETE = 3
    GENERATION_COMPLETE = 4
    DISAGG_GENERATION_TRANS_IN_PROGRESS = 5


class LlmRequest:
    """The fields of an LlmRequest (new or active) the routers read."""

    def __init__(self, tokens, target=None, relax=None, conversation=None, lora=None,
                 cache_salt=None, cached_tokens=0, total_input_len_cp=None,
                 state=LlmRequestState.CONTEXT_INIT, max_tokens=None, context_position=0, generated=0):
        self.input_token_ids = tokens
        # The output cap, under both names: the executor request's max_tokens
        # (a new request; None: not given) and the LlmRequest's
        # py_max_new_tokens (an active one).
        self.max_tokens = max_tokens
        self.py_max_new_tokens = max_tokens or 0
        self.context_current_position = context_position
        self._generated = generated
        self.state = state
        self.py_orig_prompt_len = len(tokens)
        self.total_input_len_cp = len(tokens) if total_input_len_cp is None else total_input_len_cp
        self.cached_tokens = cached_tokens
        self.py_scheduling_params = (SchedulingParams(target, relax)
                                     if target is not None or relax is not None else None)
        self.py_conversation_params = (ConversationParams(conversation)
                                       if conversation is not None else None)
        self.lora_config = LoraConfig(lora) if lora is not None else None
        self.cache_salt = cache_salt

    @property
    def is_context_init_state(self):
        return self.state == LlmRequestState.CONTEXT_INIT

    def get_num_tokens(self, beam):
        """The tokens the request holds: its prompt and what it generated."""
        return len(self.input_token_ids) + self._generated

    @property
    def num_input_tokens(self):
        """The prompt length, as the C++ request reports it without copying
        the tokens."""
        return len(self.input_token_ids)


class RequestQueueItem:
    def __init__(self, id, request=None, child_req_ids=None):
        self.id = id
        self.request = request
        self.child_req_ids = child_req_ids

    def __repr__(self):
        return "RequestQueueItem(%r)" % (self.id,)


def item(rid, tokens, **kw):
    return RequestQueueItem(rid, LlmRequest(list(tokens), **kw))


class Dist:
    """A Distributed: tp_rank, tp_size, mapping.dp_size, has_cp_helix and
    tp_allgather (a callable taking this rank's object, returning all)."""

    def __init__(self, tp_rank=0, tp_size=1, allgather=None, has_cp_helix=False):
        self.tp_rank = tp_rank
        self.tp_size = tp_size
        self.mapping = SimpleNamespace(dp_size=tp_size)
        self.has_cp_helix = has_cp_helix
        self._allgather = allgather or (lambda obj: [obj])
        self.allgathers = 0

    def tp_allgather(self, obj):
        self.allgathers += 1
        return self._allgather(obj)


class ThreadGroup:
    """size ranks as threads with a real (in-process) allgather, to run an
    engine's per-rank code side by side."""

    def __init__(self, size):
        self.size = size
        self._slots = [None] * size
        self._barrier = threading.Barrier(size)

    def dist(self, rank):
        def allgather(obj):
            self._slots[rank] = obj
            self._barrier.wait()
            out = list(self._slots)
            self._barrier.wait()
            return out
        return Dist(rank, self.size, allgather)

    def run(self, fn):
        """fn(dist) on every rank at once; returns the results in rank order."""
        out = [None] * self.size
        errors = []

        def body(r):
            try:
                out[r] = fn(self.dist(r))
            except BaseException as e:  # surfaced below
                errors.append(e)
                self._barrier.abort()
        threads = [threading.Thread(target=body, args=(r,)) for r in range(self.size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return out


class KVCacheManager:
    """A rank's radix tree reduced to what probing sees: the set of cached
    block-aligned prefixes per (LoRA task, cache salt)."""

    def __init__(self, tokens_per_block=32, enable_block_reuse=True, max_num_blocks=4096):
        self.tokens_per_block = tokens_per_block
        self.enable_block_reuse = enable_block_reuse
        self.max_num_blocks = max_num_blocks
        self.used_blocks = 0
        self._prefixes = set()
        self.probes = []

    def add(self, tokens, lora=None, salt=None):
        """Caches every full block of tokens (what a finished prefill leaves)."""
        b = self.tokens_per_block
        for k in range(b, len(tokens) + 1, b):
            key = (lora, salt, tuple(tokens[:k]))
            if key not in self._prefixes:
                self._prefixes.add(key)
                self.used_blocks += 1

    def probe_prefix_match_length(self, input_tokens, lora_task_id=None, cache_salt=None):
        self.probes.append((len(input_tokens), lora_task_id, cache_salt))
        if not self.enable_block_reuse:
            return 0
        b = self.tokens_per_block
        k = len(input_tokens) // b * b
        while k > 0 and (lora_task_id, cache_salt, tuple(input_tokens[:k])) not in self._prefixes:
            k -= b
        return k

    def get_kv_cache_stats(self):
        free = max(self.max_num_blocks - self.used_blocks, 0)
        return SimpleNamespace(max_num_blocks=self.max_num_blocks, free_num_blocks=free,
                               tokens_per_block=self.tokens_per_block)


class AsyncTransferManager:
    def __init__(self, requests=None):
        self.requests = dict(requests or {})

    def requests_in_transfer(self):
        return self.requests


def attention_dp_config(**kw):
    """An AttentionDpConfig with TensorRT-LLM's defaults, overridden by kw."""
    cfg = dict(enable_kv_cache_aware_routing=False, kv_cache_routing_load_balance_weight=1.0,
               kv_cache_routing_match_rate_threshold=0.1,
               kv_cache_routing_fair_share_multiplier=2.0,
               kv_cache_routing_cold_start_warmup=False,
               kv_cache_routing_account_for_in_transfer=False,
               kv_cache_routing_conversation_affinity=False,
               kv_cache_routing_max_sessions=65536,
               kv_cache_routing_new_conv_placement="round_robin")
    unknown = set(kw) - set(cfg)
    assert not unknown, unknown
    cfg.update(kw)
    return SimpleNamespace(**cfg)


# ---- the oracle ----------------------------------------------------------------------

def num_input_tokens(request):
    """TensorRT-LLM's token count of a request: num_input_tokens when an
    int, else len(input_token_ids); 0 without a request."""
    if request is None:
        return 0
    n = getattr(request, "num_input_tokens", None)
    return n if isinstance(n, int) else len(getattr(request, "input_token_ids", []))


def retiring(request):
    """TensorRT-LLM's is_retiring_request: state GENERATION_TO_COMPLETE."""
    return getattr(getattr(request, "state", None), "name", None) == "GENERATION_TO_COMPLETE"


def reference_rank_state(policy, rank, active, has_cp_helix=False, in_transfer=()):
    """(num_active_requests, num_active_tokens, num_retiring_requests) of one
    rank as TensorRT-LLM's gather_all_rank_states reports them: retiring
    requests left out of the load and counted apart; the KV-aware router
    counts uncached tokens and, given in_transfer (account_for_in_transfer),
    the requests still sending KV."""
    live = [r for r in active if not retiring(r)]
    length = (lambda r: r.total_input_len_cp) if has_cp_helix else (lambda r: r.py_orig_prompt_len)
    if policy == "kv_cache_aware":
        live = live + list(in_transfer)
        tokens = sum(max(length(r) - r.cached_tokens, 0) for r in live)
    else:
        tokens = sum(length(r) for r in live)
    return len(live), tokens, len(active) - len([r for r in active if not retiring(r)])


def _conversation_text(cid):
    """A conversation id as the reference's text: a non-empty str as it is,
    anything else ("" included, which TensorRT-LLM binds like any id) tagged
    with its type."""
    if cid is None:
        return None
    return cid if isinstance(cid, str) and cid else "%r" % ((type(cid).__name__, cid),)


class ReferenceADPRouter:
    """TensorRT-LLM's route_requests at the pinned commit over
    RequestQueueItems, in pure Python: each item read as TensorRT-LLM reads
    it (num_input_tokens, attention_dp_rank and attention_dp_relax with None
    relaxed, py_conversation_params.conversation_id for the conversation
    router), then the rules of adprouter's pure-Python reference
    (python/tests/reference.py: the per-policy relax sort, the explicit and
    warmup pass, the policies), with what no rank can take carried into the
    next call as adprouter.trtllm documents."""

    lossy = None  # a call that raised, dropped or overfilled: never here (see TrtllmADPRouter)

    def __init__(self, policy, dp_size, **config):
        self.policy = policy
        self.ref = ref.ReferenceRouter(policy=policy, dp_size=dp_size, **config)
        self.carry = []
        self.matches = None  # per rank {id: match}, as TensorRT-LLM's gather leaves them

    def gather(self, flat_per_rank):
        """TensorRT-LLM's parse of the allgathered [id, match, ...] lists."""
        self.matches = []
        for data in flat_per_rank:
            d = {}
            for i in range(0, len(data), 2):
                d[data[i]] = data[i + 1]
            self.matches.append(d)

    def route(self, states, items, maxn):
        batch = self.carry + list(items)
        reqs = []
        for it in batch:
            r = it.request
            if r is None:
                reqs.append(ref.Request(id=it.id, num_tokens=0))
                continue
            sp = r.py_scheduling_params
            relax = sp.attention_dp_relax if sp is not None else None
            conv = None
            if self.policy == "conversation" and r.py_conversation_params is not None:
                conv = _conversation_text(r.py_conversation_params.conversation_id)
            reqs.append(ref.Request(id=it.id, tokens=list(r.input_token_ids), num_tokens=num_input_tokens(r),
                                    target_rank=sp.attention_dp_rank if sp else None,
                                    relax=relax is None or bool(relax), conversation_id=conv))
        ref_states = [ref.RankState(s.rank, s.num_active_requests, s.num_active_tokens)
                      for s in states]
        matches = self.matches if self.policy == "kv_cache_aware" and self.matches else None
        if matches is not None and len(matches) < len(states):
            matches = matches + [{} for _ in range(len(states) - len(matches))]
        if matches is not None:  # ids outside the batch are ignored, as TensorRT-LLM's look-ups do
            ids = {it.id for it in batch}
            matches = [{k: v for k, v in d.items() if k in ids} for d in matches[:len(states)]]
        res = self.ref.route(ref_states, reqs, maxn, matches)
        by_id = {it.id: it for it in batch}
        self.carry = [by_id[i] for i in res.unassigned]
        return {r: [by_id[i] for i in ids] for r, ids in res.assignment.items()}, res.expected


# ---- TensorRT-LLM's own routers, where a checkout of them is at hand -----------------

# A folder holding tensorrt_llm/_torch/pyexecutor/scheduler/adp_router.py (and
# stubs of what it imports, as ../shared/trtllm-peer lays out): never part of
# this repository. When set, oracle() is TensorRT-LLM's own router.
TRTLLM_SRC = os.environ.get("ADPR_TRTLLM_SRC")


class TrtllmADPRouter:
    """TensorRT-LLM's routers behind ReferenceADPRouter's interface, to check
    the oracle and the drop-in against the code they follow. TensorRT-LLM
    keeps nothing across calls (carry is always empty); lossy says the last
    call raised, lost a request or put one on a rank at
    max_num_active_requests, where adprouter differs on purpose."""

    def __init__(self, policy, dp_size, **config):
        if TRTLLM_SRC not in sys.path:
            sys.path.insert(0, TRTLLM_SRC)
        import importlib
        mod = importlib.import_module("tensorrt_llm._torch.pyexecutor.scheduler.adp_router")
        dist = SimpleNamespace(tp_rank=0, tp_size=dp_size, mapping=SimpleNamespace(dp_size=dp_size),
                               has_cp_helix=False)
        if policy == "default":
            self.r = mod.DefaultADPRouter(dist=dist)
        elif policy == "kv_cache_aware":
            self.r = mod.KVCacheAwareADPRouter(dist=dist, kv_cache_manager=None, **config)
        else:
            self.r = mod.ConversationAwareADPRouter(dist=dist, **config)
        self.state_cls = mod.RankState
        self.carry = []
        self.lossy = False

    def gather(self, flat_per_rank):
        self.r._all_ranks_prefix_matches = [dict(zip(d[0::2], d[1::2])) for d in flat_per_rank]

    def route(self, states, items, maxn):
        theirs = [self.state_cls(rank=s.rank, num_active_requests=s.num_active_requests,
                                 num_active_tokens=s.num_active_tokens) for s in states]
        try:
            out, expected = self.r.route_requests(theirs, list(items), maxn)
        except Exception:
            self.lossy = "raised"
            return None, None
        self.lossy = None
        if any(len(out[s.rank]) and s.num_active_requests + len(out[s.rank]) > maxn for s in states):
            self.lossy = "overfilled"
        elif sum(map(len, out.values())) != len(items):
            self.lossy = "dropped"
        return out, expected


def oracle(policy, dp_size, **config):
    """The oracle of the pinned commit's rules: TensorRT-LLM's own router
    when ADPR_TRTLLM_SRC is set, else the pure-Python ReferenceADPRouter."""
    cls = TrtllmADPRouter if TRTLLM_SRC else ReferenceADPRouter
    return cls(policy, dp_size, **config)
