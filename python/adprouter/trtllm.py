"""adprouter.trtllm: drop-in ADP routers for TensorRT-LLM's PyExecutor.

TensorRT-LLM's PyTorch executor routes each iteration's new requests across
its attention-DP ranks through ``ADPRouter.create(...)`` (module
``tensorrt_llm._torch.pyexecutor.scheduler.adp_router``). This module offers
the same names (the three routers and their factory, ``RankState``,
``RankIterStatsPayload`` and the retiring-request helpers the executor
imports) with the same constructor parameters, attributes, methods and wire
format, backed by libadprouter. The behaviour followed is TensorRT-LLM's code
at commit ``TRTLLM_COMMIT``. One line switches an engine over::

    import adprouter.trtllm
    adprouter.trtllm.install()   # TensorRT-LLM's ADPRouter.create now returns ours

Nothing here imports tensorrt_llm; it works on any objects with the
attributes TensorRT-LLM's have (``RequestQueueItem``: id, request;
``LlmRequest``: input_token_ids, num_input_tokens, py_orig_prompt_len,
cached_tokens, state, py_scheduling_params, py_conversation_params,
lora_config, cache_salt; ``Distributed``: tp_rank, tp_size, mapping.dp_size,
has_cp_helix, tp_allgather).

Decisions equal TensorRT-LLM's for the same inputs, request by request and
in the same per-rank order, wherever TensorRT-LLM neither raises nor loses a
request. Where it does (README, "TensorRT-LLM"):

* A request that fits on no rank (TensorRT-LLM's KV-aware router drops it
  silently, its default router raises IndexError, its conversation router
  puts it on a rank already at max_num_active_requests) is *carried over*:
  the router keeps it and routes it first, ahead of that call's new requests,
  in the next ``route_requests`` call. Every rank computes the same carry-over
  from the same inputs; ``carried`` shows it and ``drain_carried()`` hands it
  back to an engine that prefers to requeue.
* Invalid input (a target rank out of range, a duplicate request id, an item
  without an id, a number of rank states that changes after the first
  decision) raises ``adprouter.InvalidArgumentError`` and changes nothing.

Options beyond TensorRT-LLM's (all off by default, so the default decisions
are the reference's) come from ``options=`` (a mapping) and from environment
variables ``ADPROUTER_<NAME>`` (upper case), the mapping winning; see
``OPTIONS`` and ``preset_options``:

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
new_conv_placement     conv.     "round_robin" | "least_queued" (overrides
                                 kv_cache_routing_new_conv_placement)
explain                all       keep a receipt per request: ``receipts()``
=====================  ========  ==============================================

KV-aware-only options are ignored by the other routers, so one environment
serves every configuration ``create`` may choose.
"""

import copy
import ctypes
import dataclasses
import hashlib
import os
import sys
from array import array
from collections import OrderedDict
from itertools import repeat
from operator import itemgetter

from . import ConfigError, InvalidArgumentError, Request, Router
from ._abi import call
from ._errors import INVALID_ARGUMENT

__all__ = [
    "ADPRouter", "DefaultADPRouter", "KVCacheAwareADPRouter", "ConversationAwareADPRouter",
    "RankState", "RankIterStatsPayload", "is_retiring_request", "build_active_requests_for_overlap",
    "count_retiring_requests", "OPTIONS", "TRTLLM_COMMIT", "preset_options", "install", "uninstall",
    "installed",
]

# The TensorRT-LLM code this module follows (its adp_router.py, the executor
# that calls it, and its router tests).
TRTLLM_COMMIT = "04fe30a9f89f8aabd72d632580f15c752972d954"

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
    "explain": False,
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


# ---- the executor's helpers ------------------------------------------------------------

_RETIRING = "GENERATION_TO_COMPLETE"


def _retiring_state():
    """TensorRT-LLM's LlmRequestState.GENERATION_TO_COMPLETE when its module
    is loaded (the executor loads it long before routing), else None."""
    mod = sys.modules.get("tensorrt_llm._torch.pyexecutor.llm_request")
    states = getattr(mod, "LlmRequestState", None)
    return getattr(states, _RETIRING, None)


def is_retiring_request(request):
    """True if request has produced its last token and waits for teardown
    (state GENERATION_TO_COMPLETE). Under TensorRT-LLM's overlap scheduler such
    a request stays in active_requests one more iteration; it is no load and
    must not hold admission capacity. Other lingering states (the disagg
    transfer states) still hold a slot and KV and are not retiring. An enum
    state is recognised by its name (TensorRT-LLM's C++ enum and any
    stand-in alike); anything else is compared with TensorRT-LLM's enum
    member when its module is loaded."""
    state = getattr(request, "state", None)
    name = getattr(state, "name", None)
    if isinstance(name, str):
        return name == _RETIRING
    want = _retiring_state()
    return want is not None and bool(state == want)


def build_active_requests_for_overlap(active_requests):
    """A new list of active_requests without the retiring ones: the routers'
    view of a rank's load (the executor's own list is not touched)."""
    return [r for r in active_requests if not is_retiring_request(r)]


def count_retiring_requests(active_requests):
    """How many of active_requests build_active_requests_for_overlap drops."""
    return sum(1 for r in active_requests if is_retiring_request(r))


def _num_input_tokens(request):
    """A request's prompt length as TensorRT-LLM's routers count it: its
    num_input_tokens when that is an int (it spares materializing the token
    list), else len(input_token_ids); 0 for no request."""
    if request is None:
        return 0
    n = getattr(request, "num_input_tokens", None)
    if isinstance(n, int):
        return n
    return len(getattr(request, "input_token_ids", []))


# ---- what ranks allgather ---------------------------------------------------------------

def _default(f):
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()


@dataclasses.dataclass
class RankIterStatsPayload:
    """The previous iteration's stats one rank sends along with its
    RankState (TensorRT-LLM's iteration statistics under attention DP; nine
    ints on the wire, in field order)."""

    has_iter_stats: int = 0
    iter_stats_iter: int = -1
    num_context_requests: int = 0
    num_ctx_tokens: int = 0
    num_ctx_kv_tokens: int = 0
    num_gen_requests: int = 0
    num_gen_kv_tokens: int = 0
    num_paused_requests: int = 0
    num_paused_kv_tokens: int = 0

    def serialize(self):
        return [getattr(self, f.name) for f in dataclasses.fields(self)]

    @classmethod
    def deserialize(cls, data):
        """From a flat list; missing trailing fields take their defaults."""
        values = list(data)
        fs = dataclasses.fields(cls)
        if len(values) > len(fs):
            raise ValueError("RankIterStatsPayload has %d fields, want at most %d" % (len(values), len(fs)))
        values += [_default(f) for f in fs[len(values):]]
        return cls(*values)


# Wire layout of a RankState: TensorRT-LLM's four fields and the nine of the
# payload, then (only when a rank reports a KV capacity, which capacity_aware
# routing needs on every rank) capacity, free tokens and the pressure flag.
_STATE_FIELDS = 4
_PAYLOAD_FIELDS = len(dataclasses.fields(RankIterStatsPayload))
_WIRE = _STATE_FIELDS + _PAYLOAD_FIELDS
_KV_FIELDS = 3


@dataclasses.dataclass(eq=False)
class RankState:
    """One rank's state as allgathered: TensorRT-LLM's RankState (rank, its
    routable active requests and tokens, the retiring requests left out of
    them, the piggybacked iteration stats) plus the KV fields capacity_aware
    routing reads (kv_capacity_tokens, free_kv_tokens, memory_pressure).

    serialize() is TensorRT-LLM's 13 ints while the KV fields are unset,
    so ranks running TensorRT-LLM's router and ours exchange states; with a
    KV capacity (capacity_aware) three more follow, which TensorRT-LLM's
    deserialize refuses: capacity_aware needs adprouter on every rank."""

    rank: int
    num_active_requests: int = 0
    num_active_tokens: int = 0
    num_retiring_requests: int = 0
    iter_stats: RankIterStatsPayload = dataclasses.field(default_factory=RankIterStatsPayload)
    kv_capacity_tokens: int = 0
    free_kv_tokens: int = 0
    memory_pressure: bool = False

    def copy_iter_stats_from(self, iter_stats_payload):
        """Attaches a copy of the previous iteration's stats payload (None:
        keep what is there)."""
        if iter_stats_payload is None:
            return
        if dataclasses.is_dataclass(iter_stats_payload):
            self.iter_stats = dataclasses.replace(iter_stats_payload)
        else:
            self.iter_stats = copy.copy(iter_stats_payload)

    def serialize(self):
        out = [self.rank, self.num_active_requests, self.num_active_tokens, self.num_retiring_requests]
        out += self.iter_stats.serialize()
        if self.kv_capacity_tokens or self.memory_pressure:
            out += [self.kv_capacity_tokens, self.free_kv_tokens, 1 if self.memory_pressure else 0]
        return out

    @classmethod
    def deserialize(cls, data):
        """From a flat list as serialize() makes it: 1 to 13 values
        (missing trailing fields take their defaults), or 16 with the KV
        fields."""
        values = list(data)
        if not values or (_WIRE < len(values) and len(values) != _WIRE + _KV_FIELDS):
            raise ValueError("RankState payload has %d values, want 1..%d (TensorRT-LLM's) or %d (with the KV "
                             "fields of capacity_aware)" % (len(values), _WIRE, _WIRE + _KV_FIELDS))
        head = values[:_STATE_FIELDS]
        head += [_default(f) for f in dataclasses.fields(cls)[len(head):_STATE_FIELDS]]
        out = cls(*head, iter_stats=RankIterStatsPayload.deserialize(values[_STATE_FIELDS:_WIRE]))
        if len(values) > _WIRE:
            out.kv_capacity_tokens, out.free_kv_tokens = values[_WIRE], values[_WIRE + 1]
            out.memory_pressure = bool(values[_WIRE + 2])
        return out

    def __eq__(self, other):
        """Field by field; payloads compare by their wire values, so a state
        holding TensorRT-LLM's payload class equals one holding ours."""
        if not (hasattr(other, "serialize") and hasattr(other, "num_retiring_requests")):
            return NotImplemented
        return self.serialize() == other.serialize()

    __hash__ = None


# ---- the routers -----------------------------------------------------------------------

def _positive_int(v):
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else None


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
    """A conversation id as the library's text: a non-empty str as it is;
    anything else (7, "", a str starting with NUL) tagged with its type so
    that 7 and "7" stay different; an id longer than the library takes is
    replaced by a digest of it (the same on every rank). None for no id."""
    if cid is None:
        return None
    if isinstance(cid, str) and cid and cid[0] != "\x00":
        key = cid
    else:
        key = "\x00%s:%r" % (type(cid).__name__, cid)
    if len(key) > _MAX_CONVERSATION_BYTES // 4:  # cheap test first: 4 bytes per char at most
        raw = key.encode("utf-8", "surrogatepass")
        if len(raw) > _MAX_CONVERSATION_BYTES:
            key = "\x00blake2b:" + hashlib.blake2b(raw, digest_size=16).hexdigest()
    return key


class ADPRouter:
    """The common part of the three routers: the library router, sized by
    the number of rank states, the rank state allgather and the carry-over
    of unplaceable requests. Use ``create`` or a subclass."""

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
        self._config = dict(config, **extras)
        # The conversation key goes to the library where it reads it: the
        # conversation policy and the KV-aware "ttft" score.
        self._send_conversations = (self._policy == "conversation"
                                    or str(extras.get("score", "")).strip() == "ttft")
        # TensorRT-LLM sizes every decision by the number of rank states.
        # The library keeps per-rank state, so its router is sized by the
        # first decision (built before it from mapping.dp_size, else
        # tp_size, and rebuilt if the first decision's states say otherwise).
        mapping = getattr(dist, "mapping", None)
        guess = _positive_int(getattr(mapping, "dp_size", None)) or _positive_int(getattr(dist, "tp_size", None))
        self._lib = None
        self._routed = False
        self._pending_assigned = False
        self._carry = []
        self._conv_ids = {}  # tagged or digested conversation key -> the engine's id
        self._library(guess or 1)

    # ---- the library router ----------------------------------------------------------

    def _library(self, ranks):
        """The library router for ranks ranks (a decision's number of rank
        states)."""
        lib = self._lib
        if lib is not None and lib.dp_size == ranks:
            return lib
        if self._routed:
            raise InvalidArgumentError(
                "adprouter.trtllm: got %d rank states, but this router routed %d ranks: the number of "
                "attention-DP ranks cannot change during a router's life (its warmup, conversation and "
                "prefix state is per rank)" % (ranks, lib.dp_size), INVALID_ARGUMENT)
        new = Router(policy=self._policy, dp_size=ranks, **self._config)
        if lib is not None:
            if self._pending_assigned:
                new.set_pending_warmup(k for k in lib.pending_warmup() if k < ranks)
            lib.close()
        self._lib = new
        # Send lora/salt scopes only when the router's prefix index reads them.
        self._scoped = new.tokens_read < 0
        return new

    @property
    def router(self):
        """The adprouter.Router behind this one (stats(), state_digest(),
        receipts() with the explain option)."""
        return self._lib

    def stats(self):
        """The library's counters (adprouter.Router.stats)."""
        return self._lib.stats()

    def receipts(self):
        """Why each request of the last decision went where it did (create
        the router with options={"explain": True})."""
        return self._lib.receipts()

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
                new_conv_placement=get("kv_cache_routing_new_conv_placement", "round_robin"),
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
        routers; total_input_len_cp under helix context parallelism). It
        counts what it is given: gather_all_rank_states leaves the retiring
        requests out first."""
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
        """Builds this rank's state from its routable active requests (the
        retiring ones are counted in num_retiring_requests instead, so that
        the executor's idle check still sees them), attaches
        iter_stats_payload, allgathers the states over dist.tp_allgather
        and returns every rank's, in allgather order."""
        routable = build_active_requests_for_overlap(active_requests)
        local = self.create_rank_state(routable, new_requests or [])
        local.num_retiring_requests = len(active_requests) - len(routable)
        local.copy_iter_stats_from(iter_stats_payload)
        return [RankState.deserialize(d) for d in self.dist.tp_allgather(local.serialize())]

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

    def _tokens_needed(self):
        """Whether the policy reads prompt tokens (the KV-aware router)."""
        return False

    def _requests(self, items):
        """The library's Request of each item, with what this policy reads:
        TensorRT-LLM's token count, the target rank and relax flag, the
        prompt (KV-aware), the conversation key, the index scopes."""
        tokens_needed = self._tokens_needed()
        convs = self._send_conversations
        scoped = self._scoped
        reqs = [None] * len(items)
        for i, item in enumerate(items):
            try:
                rid = item.id
            except AttributeError:
                raise InvalidArgumentError("new_requests[%d] = %r has no id: want RequestQueueItems (id, request)"
                                           % (i, item), INVALID_ARGUMENT) from None
            req = item.request
            if req is None:
                reqs[i] = Request(rid, num_tokens=0)
                continue
            toks = None
            if tokens_needed:
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
            cid = None
            if convs:
                cp = getattr(req, "py_conversation_params", None)
                if cp is not None:
                    cid = self._conversation(cp.conversation_id)
            q = Request(rid, tokens=toks, num_tokens=_num_input_tokens(req), target_rank=target,
                        relax=relax is None or bool(relax), conversation_id=cid)
            if scoped:
                lora = getattr(req, "lora_config", None)
                task = getattr(lora, "task_id", None) if lora is not None else None
                q.lora_id = task & _U64 if isinstance(task, int) else 0
                q.cache_salt = _salt64(getattr(req, "cache_salt", None))
            reqs[i] = q
        return reqs

    def _conversation(self, cid):
        """The library's key for a conversation id, remembering ids whose key
        differs from them (for _conv_to_rank)."""
        key = _conversation_key(cid)
        if key is not None and key is not cid and key not in self._conv_ids:
            if len(self._conv_ids) >= 2 * self._max_sessions + 64:
                held = {k for k, _ in self._lib.conversations()}
                self._conv_ids = {k: v for k, v in self._conv_ids.items() if k in held}
            self._conv_ids[key] = cid
        return key

    _max_sessions = 1 << 16

    def route_requests(self, all_rank_states, new_requests, max_num_active_requests):
        """Assigns the carried requests, then new_requests, to ranks. Returns
        ({rank: [RequestQueueItem, ...]} for every rank, expected number of
        active requests per rank), as TensorRT-LLM's route_requests does. The
        number of ranks is len(all_rank_states)."""
        items = self._carry + list(new_requests) if self._carry else list(new_requests)
        lib = self._library(len(all_rank_states))
        reqs = self._requests(items)
        matches = self._match_rows([q.id for q in reqs], items, lib.dp_size)
        res = lib.route(all_rank_states, reqs, max_num_active_requests, matches)
        self._routed = True
        by_id = dict(zip([q.id for q in reqs], items))
        get = by_id.__getitem__
        out = {r: list(map(get, placed)) for r, placed in res.assignment.items()}
        self._carry = list(map(get, res.unassigned))
        return out, res.expected

    def _match_rows(self, ids, items, ranks):
        return None

    def close(self):
        """Releases the library router."""
        self._lib.close()


class DefaultADPRouter(ADPRouter):
    """TensorRT-LLM's DefaultADPRouter: explicit targets, then the least
    token-loaded ranks, largest prompts first."""

    _policy = "default"

    def __init__(self, dist, *, options=None, kv_cache_manager=None):
        super().__init__(dist, options=options, kv_cache_manager=kv_cache_manager)

    def _balance_requests_across_ranks(self, new_requests, all_ranks_new_requests,
                                       all_ranks_num_active_requests, all_ranks_num_active_tokens,
                                       expected_num_active_requests):
        """TensorRT-LLM's balancing step alone: new_requests, largest first,
        each to the rank with the fewest (tokens, requests) among those under
        expected_num_active_requests, appended to all_ranks_new_requests
        (returned). The library decides: a default-policy decision over these
        ranks plus one full rank that pins its soft cap to
        expected_num_active_requests. InvalidArgumentError when no rank has
        room for them all (TensorRT-LLM raises IndexError)."""
        if not new_requests:
            return all_ranks_new_requests
        ranks = len(all_ranks_num_active_requests)
        cap = expected_num_active_requests
        states = [RankState(k, all_ranks_num_active_requests[k], all_ranks_num_active_tokens[k])
                  for k in range(ranks)]
        states.append(RankState(ranks, max(cap, 0), 0))
        reqs = [Request(it.id, num_tokens=_num_input_tokens(it.request)) for it in new_requests]
        with Router(policy="default", dp_size=ranks + 1) as lib:
            res = lib.route(states, reqs, max(cap, 1), None)
        if res.unassigned:
            raise InvalidArgumentError("%d of %d requests found no rank under expected_num_active_requests = %r"
                                       % (len(res.unassigned), len(reqs), cap), INVALID_ARGUMENT)
        by_id = {it.id: it for it in new_requests}
        for k in range(ranks):
            all_ranks_new_requests[k].extend(by_id[i] for i in res.assignment[k])
        return all_ranks_new_requests


class ConversationAwareADPRouter(ADPRouter):
    """TensorRT-LLM's ConversationAwareADPRouter: every request of a
    conversation (py_conversation_params.conversation_id) returns to the
    rank of its first turn while that rank is under max_num_active_requests;
    new conversations and requests without one go round robin (or to the
    least queued rank) under the fair-share cap."""

    _policy = "conversation"
    DEFAULT_MAX_SESSIONS = 1 << 16

    def __init__(self, dist, max_sessions=DEFAULT_MAX_SESSIONS, fair_share_multiplier=2.0,
                 new_conv_placement="round_robin", *, options=None, kv_cache_manager=None):
        self._max_sessions = max(1, int(max_sessions))
        self._fair_share_multiplier = max(1.0, float(fair_share_multiplier))
        # TensorRT-LLM: anything but "least_queued" is round robin. Our
        # new_conv_placement option (options= or the environment) wins.
        placement = "least_queued" if new_conv_placement == "least_queued" else "round_robin"
        super().__init__(dist, options=options, kv_cache_manager=kv_cache_manager,
                         max_sessions=self._max_sessions,
                         fair_share_multiplier=self._fair_share_multiplier,
                         new_conv_placement=placement)
        self._new_conv_placement = self._config["new_conv_placement"]

    @property
    def _conv_to_rank(self):
        """TensorRT-LLM's conversation map, read from the library: an
        OrderedDict {conversation id: rank}, least recently used first (a
        copy; the library's map is the one routing uses)."""
        ids = self._conv_ids
        return OrderedDict((ids.get(k, k), rank) for k, rank in self._lib.conversations())


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

    @property
    def _pending_warmup_ranks(self):
        """TensorRT-LLM's set of ranks the cold-start warmup has yet to
        reach, read from the library (a copy). Assigning a set replaces the
        library's (an empty set ends the warmup); do it on every rank
        alike."""
        return set(self._lib.pending_warmup())

    @_pending_warmup_ranks.setter
    def _pending_warmup_ranks(self, ranks):
        self._lib.set_pending_warmup(sorted(ranks))
        self._pending_assigned = True

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

    def _tokens_needed(self):
        return True

    def gather_prefix_matches(self, new_requests):
        """Probes this rank's KV cache for the carried and new requests as
        TensorRT-LLM does (probe_prefix_match_length(prompt[:-1],
        lora_task_id, cache_salt=...)) and allgathers the results: one flat
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
            lens[i] = probe(head, task, cache_salt=getattr(req, "cache_salt", None))
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

    def _match_rows(self, ids, items, ranks):
        """Match lengths per rank aligned with the batch: slices of the
        gathered lists when every rank probed exactly this batch, else dict
        look-ups (ids not in the batch ignored, missing ids and missing
        ranks 0); built with C-level slices and maps, never a Python loop per
        (rank, request)."""
        if not self._use_matches or not ids:
            return None
        n = len(ids)
        rows = None
        g = self._gathered
        if g is not None and g[0] == ids and all(d[0::2] == ids for d in g[1]):
            rows = [d[1::2] for d in g[1]]
        if rows is None:
            dicts = self._all_ranks_prefix_matches
            if not dicts:
                return None
            rows = [list(map(d.get, ids, repeat(0))) for d in dicts]
        # One request-major array('i') for the binding, a strided store per rank.
        table = array("i", bytes(4 * n * ranks))
        for r, row in enumerate(rows[:ranks]):
            table[r::ranks] = array("i", row)
        return table


# ---- install into TensorRT-LLM ---------------------------------------------------------

# Where TensorRT-LLM keeps its ADP routers, newest first.
_TRTLLM_MODULES = (
    "tensorrt_llm._torch.pyexecutor.scheduler.adp_router",
    "tensorrt_llm._torch.pyexecutor.adp_router",
)
_original = {}  # module name -> the ADPRouter.create we replaced


def _trtllm_router_module():
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
            return name, mod
        tried.append("%s (no ADPRouter.create)" % name)
    raise ImportError("adprouter.trtllm.install: TensorRT-LLM %s has no ADPRouter.create where "
                      "expected; tried %s" % (getattr(tensorrt_llm, "__version__", "(unknown version)"),
                                              "; ".join(tried)))


def install(options=None):
    """Makes TensorRT-LLM's ADPRouter.create return adprouter's routers
    (options as for ADPRouter.create). Idempotent; undo with uninstall().
    Raises ImportError naming the TensorRT-LLM version when its router module
    is not where expected."""
    name, mod = _trtllm_router_module()
    cls = mod.ADPRouter
    # TensorRT-LLM's routers are abstract base classes: registering ours
    # keeps isinstance(router, TheirClass) true for the executor's code.
    for ours in (ADPRouter, DefaultADPRouter, KVCacheAwareADPRouter, ConversationAwareADPRouter):
        theirs = getattr(mod, ours.__name__, None)
        if hasattr(theirs, "register"):
            theirs.register(ours)
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
    name, mod = _trtllm_router_module()
    cls = mod.ADPRouter
    orig = _original.pop(name, None)
    if orig is not None:
        cls.create = orig


def installed():
    """True while install() is in effect."""
    return bool(_original)
