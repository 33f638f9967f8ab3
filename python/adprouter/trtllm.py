"""adprouter.trtllm: drop-in ADP routers for TensorRT-LLM's PyExecutor.

TensorRT-LLM's PyTorch executor routes each iteration's new requests across
its attention-DP ranks through ``ADPRouter.create(...)`` (module
``tensorrt_llm._torch.pyexecutor.scheduler.adp_router``). This module offers
classes with the same names, constructor parameters, attributes and methods,
backed by libadprouter. One line switches an engine over::

    import adprouter.trtllm
    adprouter.trtllm.install()   # TensorRT-LLM's ADPRouter.create now returns ours

or, in your own executor, ``router = adprouter.trtllm.ADPRouter.create(dist,
kv_cache_manager, attention_dp_config)``. Nothing here imports tensorrt_llm at
load time; it works on any objects with the attributes TensorRT-LLM's have
(``RequestQueueItem``: id, request; ``LlmRequest``: input_token_ids,
py_orig_prompt_len, cached_tokens, py_scheduling_params,
py_conversation_params, lora_config, cache_salt; ``Distributed``: tp_rank,
tp_size, mapping.dp_size, has_cp_helix, tp_allgather).

Decisions equal TensorRT-LLM's for the same inputs, request by request and in
the same per-rank order, with two differences:

* A request that fits on no rank (TensorRT-LLM's KV-aware router drops it
  silently, its default router raises) is *carried over*: the router keeps
  it and routes it first, ahead of that call's new requests, in the next
  ``route_requests`` call. Every rank computes the same carry-over from the
  same inputs, so the ranks stay in agreement; ``carried`` shows it and
  ``drain_carried()`` hands it back to an engine that prefers to requeue.
  ``gather_prefix_matches`` probes carried requests too.
* Entries of the allgathered match dicts whose id is not in the batch are
  ignored (as TensorRT-LLM's dict lookups do); non-string conversation ids
  are accepted (and read only by the conversation router).

Options beyond TensorRT-LLM's (all off by default, so the default decisions
are the reference's) come from ``options=`` (a mapping) and from
environment variables ``ADPROUTER_<NAME>`` (upper case), the mapping
winning; see ``OPTIONS`` and ``preset_options``:

=====================  ========  ==============================================
name                   applies   meaning (include/adprouter.h has the details)
=====================  ========  ==============================================
preset                 all       "reference" (nothing), "recommended" (the
                                 predicted-TTFT score, probe+index, quiet
                                 warmup: README "Routing quality"), "index"
                                 (prefix_source index: no probe, no second
                                 allgather), "full" (index + demand warmup +
                                 capacity_aware); the library holds the table
                                 (``preset_options``)
score                  KV-aware  "reference" | "ttft"
engine_reuse           KV-aware  "after_iteration" (TensorRT-LLM, default) |
                                 "on_schedule"; read by score "ttft"
ttft_drain_tokens      KV-aware  prefill tokens a rank computes per iteration
                                 (max_num_tokens); read by score "ttft"
prefix_source          KV-aware  "probe" | "index" | "probe+index"
warmup                 KV-aware  "off" | "once" | "quiet" | "demand"
                                 (replaces kv_cache_routing_cold_start_warmup)
warmup_factor,         KV-aware  demand warmup tuning
warmup_window,
warmup_min_requests
tokens_per_block       KV-aware  block size of the router's prefix index
index_capacity_blocks  KV-aware  index bound per rank without KV capacity
index_max_bytes        KV-aware  memory bound of the whole prefix index
capacity_aware         all       avoid ranks whose free KV cannot hold a
                                 request (read from the KV cache manager's
                                 get_kv_cache_stats(); pass kv_cache_manager)
new_conv_placement     conv.     "round_robin" | "least_queued" (also read
                                 from kv_cache_routing_new_conv_placement)
=====================  ========  ==============================================

KV-aware-only options are ignored by the other routers, so one environment
serves every configuration ``create`` may choose.
"""

import ctypes
import hashlib
import os
from array import array
from itertools import repeat
from operator import itemgetter

from . import ConfigError, Request, Router
from . import RankState as _RankState
from ._abi import call

__all__ = [
    "ADPRouter", "DefaultADPRouter", "KVCacheAwareADPRouter", "ConversationAwareADPRouter",
    "RankState", "OPTIONS", "preset_options", "install", "uninstall", "installed",
]

# Options this module accepts beyond TensorRT-LLM's constructor parameters,
# mapped to whether only the KV-aware router reads them.
OPTIONS = {
    "preset": False,
    "prefix_source": True,
    "score": True,
    "engine_reuse": True,
    "ttft_drain_tokens": True,
    "warmup": True,
    "warmup_factor": True,
    "warmup_window": True,
    "warmup_min_requests": True,
    "tokens_per_block": True,
    "index_capacity_blocks": True,
    "index_max_bytes": True,
    "capacity_aware": False,
    "new_conv_placement": False,
}


def preset_options(preset, policy="kv_cache_aware"):
    """The options preset sets for policy, as {name: text}, from the
    library's table (adpr_preset_options): "reference", "recommended",
    "index" or "full". Explicit options and ADPROUTER_* variables win over
    them."""
    out = ctypes.create_string_buffer(4096)
    call("adpr_preset_options", str(preset).encode(), str(policy).encode(), out, len(out))
    return dict(line.split("=", 1) for line in out.value.decode().splitlines())


_ENV_PREFIX = "ADPROUTER_"
_U64 = (1 << 64) - 1


def _resolve_options(options, policy, environ=None, cold_start_warmup=False):
    """The effective extra options for policy: the preset's, overridden by
    ADPROUTER_* variables, overridden by the options mapping. Values stay as
    given (strings from the environment); the library parses them. As in the
    library, a true cold_start_warmup replaces the preset's warmup."""
    env = os.environ if environ is None else environ
    given = dict(options or {})
    unknown = sorted(set(given) - set(OPTIONS))
    if unknown:
        raise ConfigError("unknown adprouter option(s) %s; known: %s"
                          % (", ".join(map(repr, unknown)), ", ".join(sorted(OPTIONS))))
    from_env = {k: env[_ENV_PREFIX + k.upper()] for k in OPTIONS if _ENV_PREFIX + k.upper() in env}
    preset = given.get("preset", from_env.get("preset", "reference"))
    out = preset_options(preset, policy)
    if _truthy(cold_start_warmup):
        out.pop("warmup", None)
    out.update(from_env)
    out.update(given)
    out.pop("preset", None)
    return out


def _truthy(v):
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes", "on")
    return bool(v)


class RankState(_RankState):
    """One rank's state as allgathered: adprouter.RankState (TensorRT-LLM's
    three fields and the KV fields capacity-aware routing reads) plus
    TensorRT-LLM's optional piggybacked ``iter_stats``. Wire format: [rank,
    num_active_requests, num_active_tokens, kv_capacity_tokens,
    free_kv_tokens, memory_pressure, *iter_stats.serialize()]."""

    __slots__ = ("iter_stats",)

    _FIELDS = 6
    _COMPARED = ("rank", "num_active_requests", "num_active_tokens", "kv_capacity_tokens",
                 "free_kv_tokens", "memory_pressure", "iter_stats")

    def __init__(self, rank, num_active_requests=0, num_active_tokens=0, kv_capacity_tokens=0,
                 free_kv_tokens=0, memory_pressure=False, iter_stats=None):
        super().__init__(rank, num_active_requests, num_active_tokens, kv_capacity_tokens,
                         free_kv_tokens, memory_pressure)
        self.iter_stats = iter_stats

    def copy_iter_stats_from(self, payload):
        """TensorRT-LLM's name: attach the previous iteration's stats payload."""
        if payload is not None:
            self.iter_stats = payload

    def serialize(self):
        out = [self.rank, self.num_active_requests, self.num_active_tokens,
               self.kv_capacity_tokens, self.free_kv_tokens, 1 if self.memory_pressure else 0]
        if self.iter_stats is not None:
            out += self.iter_stats.serialize()
        return out

    @classmethod
    def deserialize(cls, data, iter_stats_cls=None):
        data = list(data)
        if len(data) < cls._FIELDS:
            raise ValueError("RankState payload has %d values, want at least %d (was it serialized "
                             "by adprouter.trtllm on every rank?)" % (len(data), cls._FIELDS))
        rest = data[cls._FIELDS:]
        stats = None
        if rest:
            stats = iter_stats_cls.deserialize(rest) if iter_stats_cls is not None else rest
        return cls(data[0], data[1], data[2], data[3], data[4], bool(data[5]), stats)

    def __eq__(self, other):
        return isinstance(other, RankState) and all(
            getattr(self, f) == getattr(other, f) for f in self._COMPARED)

    def __repr__(self):
        return "RankState(rank=%r, num_active_requests=%r, num_active_tokens=%r)" % (
            self.rank, self.num_active_requests, self.num_active_tokens)


def _dp_size(dist):
    mapping = getattr(dist, "mapping", None)
    n = getattr(mapping, "dp_size", None) if mapping is not None else None
    return n if n is not None else dist.tp_size


def _salt64(salt):
    """A cache salt as the index's uint64 scope, the same on every rank
    (Python's own hash() of a str is randomized per process)."""
    if salt is None:
        return 0
    if isinstance(salt, int) and not isinstance(salt, bool):
        return salt & _U64
    b = salt if isinstance(salt, (bytes, bytearray)) else str(salt).encode()
    return int.from_bytes(hashlib.blake2b(b, digest_size=8).digest(), "little")


# The library's bound on a conversation id (router.MaxConversationIDBytes).
_MAX_CONVERSATION_BYTES = 1024


def _conversation_key(cid):
    """A conversation id as the binding's text: strings as they are, anything
    else tagged with its type so that 7 and "7" stay different; an id longer
    than the library takes is replaced by a digest of it (the same on every
    rank), so any id TensorRT-LLM accepts routes."""
    if cid is None or isinstance(cid, str):
        key = cid or None
    else:
        key = "\x00%s:%r" % (type(cid).__name__, cid)
    if key is not None:
        raw = key.encode("utf-8", "surrogatepass")
        if len(raw) > _MAX_CONVERSATION_BYTES:
            key = "\x00blake2b:" + hashlib.blake2b(raw, digest_size=16).hexdigest()
    return key


class ADPRouter:
    """The common part of the three routers: the library router, the rank
    state allgather and the carry-over of unplaceable requests."""

    needs_prefix_matches = False

    # Set by subclasses: the library policy.
    _policy = None

    def __init__(self, dist, *, options=None, kv_cache_manager=None, **config):
        self.dist = dist
        self.options = _resolve_options(options, self._policy,
                                        cold_start_warmup=config.get("cold_start_warmup", False))
        extras = {k: v for k, v in self.options.items()
                  if self._policy == "kv_cache_aware" or not OPTIONS[k]}
        if self._policy != "conversation":
            extras.pop("new_conv_placement", None)
        if "warmup" in extras:
            config.pop("cold_start_warmup", None)  # warmup replaces it
        self._capacity_aware = _truthy(extras.get("capacity_aware", False))
        if self._capacity_aware and kv_cache_manager is None:
            raise ConfigError("capacity_aware needs the kv_cache_manager (its get_kv_cache_stats() "
                              "is each rank's free KV); pass kv_cache_manager=")
        self.kv_cache_manager = kv_cache_manager
        self._dp = _dp_size(dist)
        self.router = Router(policy=self._policy, dp_size=self._dp, **config, **extras)
        # Send lora/salt scopes only when the router's prefix index reads them.
        self._scoped = self.router.tokens_read < 0
        self._carry = []

    # ---- TensorRT-LLM's factory ------------------------------------------------------

    @classmethod
    def create(cls, dist, kv_cache_manager=None, attention_dp_config=None,
               async_transfer_manager=None, *, options=None):
        """The router TensorRT-LLM's ADPRouter.create would choose, ours:
        conversation affinity when the config asks for it; else the
        KV-cache-aware router when the config asks for it and the KV cache
        manager reuses blocks; else the default router."""
        cfg = attention_dp_config
        get = lambda name, default: getattr(cfg, name, default) if cfg is not None else default
        conv = get("kv_cache_routing_conversation_affinity", False)
        policy = ConversationAwareADPRouter._policy if conv else DefaultADPRouter._policy
        capacity = _truthy(_resolve_options(options, policy).get("capacity_aware", False))
        kv = kv_cache_manager if capacity else None
        if conv:
            return ConversationAwareADPRouter(
                dist=dist, max_sessions=get("kv_cache_routing_max_sessions", 1 << 16),
                fair_share_multiplier=get("kv_cache_routing_fair_share_multiplier", 2.0),
                new_conv_placement=get("kv_cache_routing_new_conv_placement", None),
                options=options, kv_cache_manager=kv)
        if (get("enable_kv_cache_aware_routing", False) and kv_cache_manager is not None
                and kv_cache_manager.enable_block_reuse):
            return KVCacheAwareADPRouter(
                dist=dist, kv_cache_manager=kv_cache_manager,
                load_balance_weight=get("kv_cache_routing_load_balance_weight", 1.0),
                match_rate_threshold=get("kv_cache_routing_match_rate_threshold", 0.1),
                fair_share_multiplier=get("kv_cache_routing_fair_share_multiplier", 2.0),
                cold_start_warmup=get("kv_cache_routing_cold_start_warmup", False),
                async_transfer_manager=async_transfer_manager,
                account_for_in_transfer=get("kv_cache_routing_account_for_in_transfer", False),
                options=options)
        return DefaultADPRouter(dist=dist, options=options, kv_cache_manager=kv)

    # ---- rank states -----------------------------------------------------------------

    def _prompt_tokens(self, active_requests):
        if self.dist.has_cp_helix:
            return sum(r.total_input_len_cp for r in active_requests)
        return sum(r.py_orig_prompt_len for r in active_requests)

    def create_rank_state(self, active_requests, new_requests):
        """This rank's state: active requests and the sum of their prompt
        lengths (TensorRT-LLM's units for the default and conversation
        routers; helix CP counts total_input_len_cp)."""
        return self._with_kv(RankState(self.dist.tp_rank, len(active_requests),
                                       self._prompt_tokens(active_requests)))

    def _with_kv(self, state):
        if self._capacity_aware:
            st = self.kv_cache_manager.get_kv_cache_stats()
            per_block = getattr(st, "tokens_per_block", 0) or 0
            state.kv_capacity_tokens = max(getattr(st, "max_num_blocks", 0) * per_block, 0)
            state.free_kv_tokens = max(getattr(st, "free_num_blocks", 0) * per_block, 0)
        return state

    def gather_all_rank_states(self, active_requests, new_requests=None, iter_stats_payload=None):
        """Builds this rank's state, allgathers it over dist.tp_allgather and
        returns every rank's, in rank order."""
        local = self.create_rank_state(active_requests, new_requests or [])
        local.copy_iter_stats_from(iter_stats_payload)
        cls = type(iter_stats_payload) if iter_stats_payload is not None else None
        return [RankState.deserialize(d, cls) for d in self.dist.tp_allgather(local.serialize())]

    # ---- routing ---------------------------------------------------------------------

    @property
    def carried(self):
        """Requests no rank could take in the last call, routed first in the
        next one (the same on every rank)."""
        return tuple(self._carry)

    def drain_carried(self):
        """Hands the carried requests back (to requeue them yourself) and
        forgets them. Call it on every rank alike."""
        out, self._carry = self._carry, []
        return out

    def _batch(self):
        """Per-request fields the policy reads; overridden by the KV router."""
        return False, False

    def route_requests(self, all_rank_states, new_requests, max_num_active_requests):
        """Assigns the carried requests, then new_requests, to ranks. Returns
        ({rank: [RequestQueueItem, ...]} for every rank, expected number of
        active requests per rank), as TensorRT-LLM's route_requests does."""
        items = self._carry + list(new_requests) if self._carry else list(new_requests)
        tokens_needed, conv = self._batch()
        scoped = self._scoped
        n = len(items)
        reqs = [None] * n
        ids = [0] * n
        strict = None  # TensorRT-LLM sorts by attention_dp_relax: False first
        for i, item in enumerate(items):
            rid = item.id
            ids[i] = rid
            req = item.request
            if req is None:
                reqs[i] = Request(rid, num_tokens=0)
                continue
            toks = getattr(req, "input_token_ids", None)
            if toks is None:
                toks = ()
            elif not isinstance(toks, (list, tuple)):
                toks = list(toks)
            sp = getattr(req, "py_scheduling_params", None)
            target = relax = None
            if sp is not None:
                target = sp.attention_dp_rank
                relax = sp.attention_dp_relax
                if relax is not None and not relax:
                    if strict is None:
                        strict = [False] * n
                    strict[i] = True
            cid = None
            if conv:
                cp = getattr(req, "py_conversation_params", None)
                if cp is None:
                    cp = getattr(req, "py_disaggregated_params", None)
                cid = _conversation_key(getattr(cp, "conversation_id", None)) if cp is not None else None
            q = Request(rid, tokens=toks if tokens_needed else None, num_tokens=len(toks),
                        target_rank=target, conversation_id=cid)
            if scoped:
                lora = getattr(req, "lora_config", None)
                q.lora_id = (getattr(lora, "task_id", 0) or 0) & _U64 if lora is not None else 0
                salt = getattr(req, "cache_salt", None)
                q.cache_salt = _salt64(salt if salt is not None else getattr(req, "cache_salt_id", None))
            reqs[i] = q
        by_id = dict(zip(ids, items))
        order = None
        if strict is not None:
            # Stable: the strict requests first, arrival order kept in each
            # group. Every Request goes with relax=True so that the library's
            # own strict sort keeps this order.
            order = sorted(range(n), key=lambda i: not strict[i])
            pick = itemgetter(*order) if n > 1 else (lambda s: tuple(s))
            reqs = list(pick(reqs))
            ids = list(pick(ids))
        matches = self._match_rows(ids, items, order)
        res = self.router.route(all_rank_states, reqs, max_num_active_requests, matches)
        get = by_id.__getitem__
        out = {r: list(map(get, placed)) for r, placed in res.assignment.items()}
        self._carry = list(map(get, res.unassigned))
        return out, res.expected

    def _match_rows(self, ids, items, order):
        return None

    def close(self):
        """Releases the library router."""
        self.router.close()


class DefaultADPRouter(ADPRouter):
    """TensorRT-LLM's DefaultADPRouter: explicit targets, then the least
    token-loaded ranks, largest prompts first."""

    _policy = "default"

    def __init__(self, dist, *, options=None, kv_cache_manager=None):
        super().__init__(dist, options=options, kv_cache_manager=kv_cache_manager)


class ConversationAwareADPRouter(ADPRouter):
    """TensorRT-LLM's ConversationAwareADPRouter: every request of a
    conversation (py_conversation_params.conversation_id, else
    py_disaggregated_params.conversation_id) returns to the rank of its first
    turn while that rank is under max_num_active_requests."""

    _policy = "conversation"
    DEFAULT_MAX_SESSIONS = 1 << 16

    def __init__(self, dist, max_sessions=DEFAULT_MAX_SESSIONS, fair_share_multiplier=2.0,
                 new_conv_placement=None, *, options=None, kv_cache_manager=None):
        self._max_sessions = max(1, int(max_sessions))
        self._fair_share_multiplier = max(1.0, float(fair_share_multiplier))
        config = dict(max_sessions=self._max_sessions,
                      fair_share_multiplier=self._fair_share_multiplier)
        opts = dict(options or {})
        if new_conv_placement is not None and "new_conv_placement" not in opts:
            opts["new_conv_placement"] = new_conv_placement
        super().__init__(dist, options=opts, kv_cache_manager=kv_cache_manager, **config)

    def _batch(self):
        return False, True


class KVCacheAwareADPRouter(ADPRouter):
    """TensorRT-LLM's KVCacheAwareADPRouter: each rank's cached prefix
    (probed, allgathered) against its uncached token load. With
    prefix_source "index" the router predicts matches itself:
    needs_prefix_matches is False and gather_prefix_matches is not needed."""

    _policy = "kv_cache_aware"
    needs_prefix_matches = True

    def __init__(self, dist, kv_cache_manager, load_balance_weight=1.0, match_rate_threshold=0.1,
                 fair_share_multiplier=2.0, cold_start_warmup=False, async_transfer_manager=None,
                 account_for_in_transfer=False, *, options=None):
        self.load_balance_weight = load_balance_weight
        self.match_rate_threshold = match_rate_threshold
        self.fair_share_multiplier = fair_share_multiplier
        self.async_transfer_manager = async_transfer_manager
        self.account_for_in_transfer = account_for_in_transfer
        super().__init__(dist, options=options, kv_cache_manager=kv_cache_manager,
                         load_balance_weight=load_balance_weight,
                         match_rate_threshold=match_rate_threshold,
                         fair_share_multiplier=fair_share_multiplier,
                         cold_start_warmup=bool(cold_start_warmup))
        source = self.options.get("prefix_source", "probe")
        self._use_matches = source != "index"
        self.needs_prefix_matches = self._use_matches
        self._gathered = None  # (ids probed, [flat id/match list per rank])
        self._dicts = None     # explicit per-rank {id: match} dicts

    def create_rank_state(self, active_requests, new_requests):
        """Active requests and their uncached prompt tokens (prompt minus
        cached_tokens, floored at 0), plus requests still sending KV when
        account_for_in_transfer is set: TensorRT-LLM's units."""
        helix = self.dist.has_cp_helix

        def uncached(r):
            n = r.total_input_len_cp if helix else r.py_orig_prompt_len
            return max(n - r.cached_tokens, 0)

        tokens = sum(map(uncached, active_requests))
        count = len(active_requests)
        if self.account_for_in_transfer and self.async_transfer_manager is not None:
            moving = self.async_transfer_manager.requests_in_transfer().values()
            tokens += sum(map(uncached, moving))
            count += len(moving)
        return self._with_kv(RankState(self.dist.tp_rank, count, tokens))

    def _batch(self):
        return True, False

    def gather_prefix_matches(self, new_requests):
        """Probes this rank's KV cache for the carried and new requests (the
        prompt without its last token, the request's LoRA task and cache
        salt) and allgathers the results as TensorRT-LLM does: one flat
        [id, match, id, match, ...] list per rank."""
        items = self._carry + list(new_requests) if self._carry else list(new_requests)
        probe = self.kv_cache_manager.probe_prefix_match_length
        n = len(items)
        ids = [0] * n
        lens = [0] * n
        for i, item in enumerate(items):
            ids[i] = item.id
            req = item.request
            if req is None:
                continue
            toks = getattr(req, "input_token_ids", None) or []
            head = toks[:-1] if len(toks) > 1 else []
            lora = getattr(req, "lora_config", None)
            task = lora.task_id if lora is not None else None
            salt = getattr(req, "cache_salt", None)
            if salt is not None:
                lens[i] = probe(head, task, cache_salt=salt)
            else:
                salt_id = getattr(req, "cache_salt_id", None)
                lens[i] = (probe(head, task) if salt_id is None
                           else probe(head, task, cache_salt_id=salt_id))
        flat = [0] * (2 * n)
        flat[0::2] = ids
        flat[1::2] = lens
        self._gathered = (ids, list(self.dist.tp_allgather(flat)))
        self._dicts = None

    @property
    def _all_ranks_prefix_matches(self):
        """TensorRT-LLM's attribute: per rank, {request id: matched tokens}."""
        if self._dicts is not None:
            return self._dicts
        if self._gathered is None:
            return []
        return [dict(zip(d[0::2], d[1::2])) for d in self._gathered[1]]

    @_all_ranks_prefix_matches.setter
    def _all_ranks_prefix_matches(self, dicts):
        self._dicts = list(dicts)
        self._gathered = None

    def _match_rows(self, ids, items, order):
        """Match lengths per rank aligned with the batch: slices of the
        gathered lists when every rank probed exactly this batch, else dict
        look-ups (ids not in the batch ignored, missing ids 0); built with
        C-level slices and maps, never a Python loop per (rank, request)."""
        if not self._use_matches or not ids:
            return None
        n = len(ids)
        rows = None
        g = self._gathered
        if g is not None and len(g[0]) == n:
            arrival = [it.id for it in items]
            if g[0] == arrival and all(d[0::2] == arrival for d in g[1]):
                rows = [d[1::2] for d in g[1]]
                if order is not None:
                    pick = itemgetter(*order) if n > 1 else (lambda s: tuple(s))
                    rows = [pick(r) for r in rows]
        if rows is None:
            dicts = self._all_ranks_prefix_matches
            if not dicts:
                return None
            rows = [list(map(d.get, ids, repeat(0))) for d in dicts]
        # One request-major array('i') for the binding, a strided store per rank.
        dp = self._dp
        table = array("i", bytes(4 * n * dp))
        for r, row in enumerate(rows[:dp]):
            table[r::dp] = array("i", row)
        return table


# ---- install into TensorRT-LLM ---------------------------------------------------------

# Where TensorRT-LLM keeps its ADP routers, newest first.
_TRTLLM_MODULES = (
    "tensorrt_llm._torch.pyexecutor.scheduler.adp_router",
    "tensorrt_llm._torch.pyexecutor.adp_router",
)
_original = {}  # module name -> the ADPRouter.create we replaced


def _trtllm_router_class():
    import importlib

    import tensorrt_llm  # ImportError when TensorRT-LLM is not installed

    tried = []
    for name in _TRTLLM_MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError as e:
            tried.append("%s (%s)" % (name, e))
            continue
        cls = getattr(mod, "ADPRouter", None)
        if cls is not None and hasattr(cls, "create"):
            return name, cls
        tried.append("%s (no ADPRouter.create)" % name)
    raise ImportError("adprouter.trtllm.install: TensorRT-LLM %s has no ADPRouter.create where "
                      "expected; tried %s" % (getattr(tensorrt_llm, "__version__", "(unknown version)"),
                                              "; ".join(tried)))


def install(options=None):
    """Makes TensorRT-LLM's ADPRouter.create return adprouter's routers
    (options as for ADPRouter.create). Idempotent; undo with uninstall().
    Raises ImportError naming the TensorRT-LLM version when its router module
    is not where expected."""
    name, cls = _trtllm_router_class()
    if name not in _original:
        _original[name] = cls.__dict__.get("create", cls.create)
    original = _original[name].__get__(None, cls)

    def create(_cls, dist, kv_cache_manager=None, attention_dp_config=None,
               async_transfer_manager=None, **newer):
        if newer:
            # A TensorRT-LLM newer than this module passes parameters we do
            # not know: keep its own router rather than guess.
            import warnings
            warnings.warn("adprouter.trtllm: ADPRouter.create got %s, which this adprouter does "
                          "not know; using TensorRT-LLM's own router" % ", ".join(sorted(newer)))
            return original(dist, kv_cache_manager, attention_dp_config,
                            async_transfer_manager, **newer)
        return ADPRouter.create(dist, kv_cache_manager, attention_dp_config,
                                async_transfer_manager, options=options)

    create.__doc__ = ADPRouter.create.__doc__
    cls.create = classmethod(create)


def uninstall():
    """Restores TensorRT-LLM's own ADPRouter.create (no-op if not installed)."""
    if not _original:
        return
    name, cls = _trtllm_router_class()
    orig = _original.pop(name, None)
    if orig is not None:
        cls.create = orig


def installed():
    """True while install() is in effect."""
    return bool(_original)
