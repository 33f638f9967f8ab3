"""Duck-typed stand-ins for the TensorRT-LLM objects adprouter.trtllm reads,
written from TensorRT-LLM's public attribute names, and a pure-Python
TensorRT-LLM-style router over them (the oracle of the tests and the
baseline of python/bench_trtllm.py).

Used by test_trtllm.py, mpi_trtllm.py (4 ranks under MPI) and the benchmark;
nothing here imports tensorrt_llm.
"""

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


class ConversationParams:
    def __init__(self, conversation_id):
        self.conversation_id = conversation_id


class LoraConfig:
    def __init__(self, task_id):
        self.task_id = task_id


class LlmRequest:
    """The fields of an LlmRequest (new or active) the routers read."""

    def __init__(self, tokens, target=None, relax=None, conversation=None, lora=None,
                 cache_salt=None, cached_tokens=0, total_input_len_cp=None):
        self.input_token_ids = tokens
        self.py_orig_prompt_len = len(tokens)
        self.total_input_len_cp = len(tokens) if total_input_len_cp is None else total_input_len_cp
        self.cached_tokens = cached_tokens
        self.py_scheduling_params = (SchedulingParams(target, relax)
                                     if target is not None or relax is not None else None)
        self.py_conversation_params = (ConversationParams(conversation)
                                       if conversation is not None else None)
        self.lora_config = LoraConfig(lora) if lora is not None else None
        self.cache_salt = cache_salt


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

def _relax_first(it):
    """TensorRT-LLM's sort key: attention_dp_relax, None meaning True."""
    sp = getattr(it.request, "py_scheduling_params", None) if it.request is not None else None
    return True if sp is None or sp.attention_dp_relax is None else bool(sp.attention_dp_relax)


class ReferenceADPRouter:
    """TensorRT-LLM's route_requests over RequestQueueItems in pure Python:
    TensorRT-LLM's relax sort, then the rules of adprouter's pure-Python
    reference (python/tests/reference.py), with unplaceable requests
    carried into the next call as adprouter.trtllm documents."""

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
        batch = sorted(self.carry + list(items), key=_relax_first)
        reqs = []
        for it in batch:
            r = it.request
            if r is None:
                reqs.append(ref.Request(id=it.id, num_tokens=0))
                continue
            sp = r.py_scheduling_params
            conv = None
            if self.policy == "conversation" and r.py_conversation_params is not None:
                conv = r.py_conversation_params.conversation_id
                if conv is not None and not isinstance(conv, str):
                    conv = repr((type(conv).__name__, conv))  # the reference takes text only
            reqs.append(ref.Request(id=it.id, tokens=list(r.input_token_ids),
                                    target_rank=sp.attention_dp_rank if sp else None,
                                    relax=True, conversation_id=conv))
        ref_states = [ref.RankState(s.rank, s.num_active_requests, s.num_active_tokens)
                      for s in states]
        matches = self.matches if self.policy == "kv_cache_aware" and self.matches else None
        if matches is not None and len(matches) < len(states):
            matches = matches + [{} for _ in range(len(states) - len(matches))]
        res = self.ref.route(ref_states, reqs, maxn, matches)
        by_id = {it.id: it for it in batch}
        self.carry = [by_id[i] for i in res.unassigned]
        return {r: [by_id[i] for i in ids] for r, ids in res.assignment.items()}, res.expected
