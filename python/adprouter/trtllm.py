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
lora_config, cache_salt, and where the ranks report their KV state
max_tokens (a new request's), py_max_new_tokens, is_context_init_state,
context_current_position and get_num_tokens (an active one's);
``Distributed``: tp_rank, tp_size, mapping.dp_size, has_cp_helix,
tp_allgather).

Decisions equal TensorRT-LLM's for the same inputs, request by request and
in the same per-rank order, wherever TensorRT-LLM neither raises nor loses a
request. Where it does (docs/trtllm.md, "What differs"):

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
variables ``TRTLLM_ADPROUTER_<NAME>`` (upper case; TensorRT-LLM forwards
``TRTLLM*`` variables to the MPI workers it spawns) or ``ADPROUTER_<NAME>``,
in that order of precedence after the mapping; an unknown
``TRTLLM_ADPROUTER_*`` variable is warned about once. ``OPTIONS`` lists them:
the library's options beyond TensorRT-LLM's parameters (docs/configuration.md
has the table: preset, score, prefix_source, warmup, capacity_aware,
explain, ...), read from the library's option schema, and this module's own:

=====================  ==========================================================
route_trace            fill ``_last_route_trace`` after every decision
                       (TensorRT-LLM's TRTLLM_ADP_ROUTE_TRACE sink turns it on
                       by itself)
check_ranks            allgather every rank's fingerprint at the first gather
                       and refuse to route if they differ (needs adprouter on
                       every rank)
=====================  ==========================================================

The library resolves presets and their precedence (explicit options over the
preset's); ``options`` on a router shows the effective value of every option
given or set by its preset. KV-aware-only options are ignored by the other
routers, so one environment serves every configuration ``create`` may choose.
"""

import copy
import ctypes
import dataclasses
import hashlib
import inspect
import logging
import os
import sys
import warnings
import weakref
from array import array
from collections import OrderedDict
from itertools import repeat
from typing import Optional

from . import ConfigError, InvalidArgumentError, Request, Router, _accel, _consts, abi_version, version
from . import option_schema as _option_schema
from . import preset_options as _library_preset_options
from . import _log
from ._errors import CONFIG, INVALID_ARGUMENT
from _adprouter_startup import TRTLLM_MODULES

log = logging.getLogger(__name__)

__all__ = [
    "ADPRouter", "DefaultADPRouter", "KVCacheAwareADPRouter", "ConversationAwareADPRouter",
    "RankState", "RankIterStatsPayload", "is_retiring_request", "build_active_requests_for_overlap",
    "count_retiring_requests", "OPTIONS", "TRTLLM_COMMIT", "preset_options", "install", "uninstall",
    "installed",
]

# The TensorRT-LLM code this module follows (its adp_router.py, the executor
# that calls it, and its router tests).
TRTLLM_COMMIT = "04fe30a9f89f8aabd72d632580f15c752972d954"

# TensorRT-LLM's own router parameters (constructor arguments, from its
# AttentionDpConfig): options of the library this module sets itself.
_TRTLLM_PARAMETERS = ("policy", "dp_size", "load_balance_weight", "match_rate_threshold",
                      "fair_share_multiplier", "cold_start_warmup", "max_sessions")


def _options_table():
    """OPTIONS: every option of the library's schema beyond TensorRT-LLM's
    parameters, "kv" when only the KV-aware policy reads it, else "library";
    and this module's own, "adapter"."""
    out = {}
    for o in _option_schema()["options"]:
        if o["name"] not in _TRTLLM_PARAMETERS:
            out[o["name"]] = "kv" if o.get("policies") == ["kv_cache_aware"] else "library"
    out.update(route_trace="adapter", check_ranks="adapter")
    return out


# Options this module accepts beyond TensorRT-LLM's constructor parameters,
# mapped to who reads them: "kv" the library, for the KV-aware router only;
# "library" the library, for every router; "adapter" this module. The
# library's come from its option schema (docs/configuration.md).
OPTIONS = _options_table()


def preset_options(preset, policy="kv_cache_aware"):
    """The options preset sets for policy, as {name: text}, from the
    library's table (adprouter.preset_options): "reference", "recommended",
    "index" or "full". Explicit options and ADPROUTER_* variables win over
    them."""
    return _library_preset_options(preset, policy)


# Environment variable prefixes of the options, the first winning:
# TensorRT-LLM forwards TRTLLM* variables to the workers it spawns.
_ENV_PREFIXES = ("TRTLLM_ADPROUTER_", "ADPROUTER_")
_U64 = (1 << 64) - 1
_warned_variables = set()


def _env_options(env):
    """The options set in env, {name: text}; an unknown
    TRTLLM_ADPROUTER_* variable is warned about (once per name)."""
    out = {}
    for prefix in reversed(_ENV_PREFIXES):
        for k in OPTIONS:
            if prefix + k.upper() in env:
                out[k] = env[prefix + k.upper()]
    known = {_ENV_PREFIXES[0] + k.upper() for k in OPTIONS}
    for var in env:
        if var.startswith(_ENV_PREFIXES[0]) and var not in known and var not in _warned_variables:
            _warned_variables.add(var)
            warnings.warn("adprouter.trtllm: ignoring %s: no such option (known: %s)"
                          % (var, ", ".join(sorted(_ENV_PREFIXES[0] + k.upper() for k in OPTIONS))),
                          stacklevel=3)
    return out


def _given_options(options, environ=None):
    """The options given: ADPROUTER_* variables, overridden by
    TRTLLM_ADPROUTER_* ones, overridden by the options mapping, as given
    (text from the environment). Presets and their precedence are the
    library's to resolve: "preset" stays one option among the others."""
    env = os.environ if environ is None else environ
    given = dict(options or {})
    unknown = sorted(set(given) - set(OPTIONS))
    if unknown:
        raise ConfigError("unknown adprouter option(s) %s; known: %s"
                          % (", ".join(map(repr, unknown)), ", ".join(sorted(OPTIONS))))
    out = _env_options(env)
    out.update(given)
    return out


def _effective(policy, config):
    """The library's effective options, {name: text}, for a router of
    policy with config: presets expanded, explicit options over them,
    unset options as the values they mean, canonical text ("true"/"false")."""
    with Router(policy=policy, dp_size=1, **config) as r:
        return r.options()


def _flag(options, name):
    """A boolean adapter option: True, False, or the library's words for
    them (the schema's bool_true and bool_false)."""
    v = options.get(name, False)
    if isinstance(v, bool):
        return v
    schema = _option_schema()
    if str(v) in schema["bool_true"]:
        return True
    if str(v) in schema["bool_false"]:
        return False
    raise ConfigError("option %s = %r: want %s or %s" % (name, v, " / ".join(map(repr, schema["bool_true"])),
                                                          " / ".join(map(repr, schema["bool_false"]))), CONFIG)


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
# and the ttft score read, on every rank) capacity, free tokens and a flags
# word (_KV_PRESSURE; TensorRT-LLM-era senders put 0 or 1 there), then
# (only when the rank reports them) the pending and evictable KV, each
# meaningful only where its flag is set.
_STATE_FIELDS = 4
_PAYLOAD_FIELDS = len(dataclasses.fields(RankIterStatsPayload))
_WIRE = _STATE_FIELDS + _PAYLOAD_FIELDS
_KV_FIELDS = 3
_KV_STATE_FIELDS = 2
_KV_PRESSURE, _KV_PENDING, _KV_EVICTABLE = 1, 2, 4
_INT_TYPES = {int, bool}


@dataclasses.dataclass(eq=False)
class RankState:
    """One rank's state as allgathered: TensorRT-LLM's RankState (rank, its
    routable active requests and tokens, the retiring requests left out of
    them, the piggybacked iteration stats) plus the KV fields capacity_aware
    routing and the ttft score read: kv_capacity_tokens, free_kv_tokens,
    memory_pressure, and pending_kv_tokens and evictable_kv_tokens (tokens;
    None: not reported), as adprouter.RankState takes them.

    serialize() is TensorRT-LLM's 13 ints while the KV fields are unset,
    so ranks running TensorRT-LLM's router and ours exchange states; with a
    KV capacity (capacity_aware, or the ttft score of the recommended
    preset) three more follow, and two more when the pending or evictable
    KV is reported; TensorRT-LLM's deserialize refuses them: those options
    need adprouter on every rank."""

    rank: int
    num_active_requests: int = 0
    num_active_tokens: int = 0
    num_retiring_requests: int = 0
    iter_stats: RankIterStatsPayload = dataclasses.field(default_factory=RankIterStatsPayload)
    kv_capacity_tokens: int = 0
    free_kv_tokens: int = 0
    memory_pressure: bool = False
    pending_kv_tokens: Optional[int] = None
    evictable_kv_tokens: Optional[int] = None

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
        pending, evictable = self.pending_kv_tokens, self.evictable_kv_tokens
        if self.kv_capacity_tokens or self.memory_pressure or pending is not None or evictable is not None:
            flags = ((_KV_PRESSURE if self.memory_pressure else 0) | (0 if pending is None else _KV_PENDING)
                     | (0 if evictable is None else _KV_EVICTABLE))
            out += [self.kv_capacity_tokens, self.free_kv_tokens, flags]
            if pending is not None or evictable is not None:
                out += [pending or 0, evictable or 0]
        return out

    @classmethod
    def deserialize(cls, data):
        """From a flat list as serialize() makes it: 1 to 13 values
        (missing trailing fields take their defaults), 16 with the KV pool,
        or 18 with the pending and evictable KV too."""
        values = list(data)
        kv_lengths = (_WIRE + _KV_FIELDS, _WIRE + _KV_FIELDS + _KV_STATE_FIELDS)
        if not values or (_WIRE < len(values) and len(values) not in kv_lengths):
            raise ValueError("RankState payload has %d values, want 1..%d (TensorRT-LLM's), %d (with the KV pool "
                             "of capacity_aware and the ttft score) or %d (with the pending and evictable KV too)"
                             % ((len(values), _WIRE) + kv_lengths))
        if set(map(type, values)) - _INT_TYPES and not all(isinstance(v, int) for v in values):
            raise ValueError("RankState payload %r holds a value that is not an int: did the ranks make "
                             "different collective calls (the check_ranks option on some ranks only)?"
                             % (values[:4] if len(values) > 4 else values,))
        if len(values) == _WIRE:  # TensorRT-LLM's whole payload: every rank, every iteration
            return cls(values[0], values[1], values[2], values[3], RankIterStatsPayload(*values[_STATE_FIELDS:]))
        head = values[:_STATE_FIELDS]
        head += [_default(f) for f in dataclasses.fields(cls)[len(head):_STATE_FIELDS]]
        out = cls(*head, iter_stats=RankIterStatsPayload.deserialize(values[_STATE_FIELDS:_WIRE]))
        if len(values) > _WIRE:
            out.kv_capacity_tokens, out.free_kv_tokens, flags = values[_WIRE:_WIRE + _KV_FIELDS]
            known = _KV_PRESSURE | (_KV_PENDING | _KV_EVICTABLE if len(values) == kv_lengths[1] else 0)
            if flags & ~known:
                raise ValueError("RankState payload's KV flags are %d, want a combination of %s" % (
                    flags, " | ".join(str(f) for f in (_KV_PRESSURE, _KV_PENDING, _KV_EVICTABLE) if f & known)))
            out.memory_pressure = bool(flags & _KV_PRESSURE)
            if len(values) == kv_lengths[1]:
                pending, evictable = values[kv_lengths[0]:]
                for name, flag, v in (("pending", _KV_PENDING, pending), ("evictable", _KV_EVICTABLE, evictable)):
                    if not flags & flag and v != 0:
                        raise ValueError("RankState payload's %s KV is %d without its flag (%d), want 0"
                                         % (name, v, flag))
                out.pending_kv_tokens = pending if flags & _KV_PENDING else None
                out.evictable_kv_tokens = evictable if flags & _KV_EVICTABLE else None
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


# The library's bound on a conversation id (ADPR_MAX_CONVERSATION_ID_BYTES).
_MAX_CONVERSATION_BYTES = _consts.MAX_CONVERSATION_ID_BYTES


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


_UNSET = object()  # an argument not given


class ADPRouter:
    """The common part of the three routers: the library router, sized by
    the number of rank states, the rank state allgather, what becomes of a
    request no rank can take, route traces and the rank check. Use
    ``create`` or a subclass."""

    needs_prefix_matches = False

    # Set by subclasses: the library policy.
    _policy = None

    def __init__(self, dist, *, options=None, kv_cache_manager=None, has_seq_slot_headroom=None,
                 executor=None, **config):
        self.dist = dist
        given = _given_options(options)
        adapter = {k: v for k, v in given.items() if OPTIONS[k] == "adapter"}
        extras = {k: v for k, v in given.items()
                  if OPTIONS[k] == "library" or (OPTIONS[k] == "kv" and self._policy == "kv_cache_aware")}
        if self._policy != "conversation":
            extras.pop("new_conv_placement", None)
        if "warmup" in extras:
            config.pop("cold_start_warmup", None)  # warmup replaces it
        # The library resolves presets and precedence; this module reads the
        # outcome (its effective options) to know what to gather and send.
        eff = _effective(self._policy, dict(config, **extras))
        # options: the effective value of every option given or set by the
        # preset, and the adapter's own.
        shown = set(extras) - {"preset"}
        if "preset" in extras:
            shown |= set(preset_options(extras["preset"], self._policy))
        self.options = dict({k: eff[k] for k in sorted(shown) if k in eff}, **adapter)
        self._capacity_aware = eff["capacity_aware"] == "true"
        if self._capacity_aware and kv_cache_manager is None:
            raise ConfigError("capacity_aware needs the kv_cache_manager (its get_kv_cache_stats() "
                              "is each rank's free KV); pass kv_cache_manager=")
        self.kv_cache_manager = kv_cache_manager
        # Each rank reports its KV pool (three more wire fields, so every
        # rank must run adprouter) where a rule reads it: capacity_aware, and
        # the ttft score (the recommended preset), which heeds full pools and
        # counts what cannot start for want of memory as queued. Without the
        # reports that score routes as if every pool had room.
        self._reports_kv = self._capacity_aware or (
            eff["score"] == "ttft" and callable(getattr(kv_cache_manager, "get_kv_cache_stats", None)))
        # Newer TensorRT-LLM passes has_seq_slot_headroom and leaves retiring
        # requests in the load without it; at the pinned commit (None here)
        # they are always left out.
        self.exclude_retiring_requests = True if has_seq_slot_headroom is None else bool(has_seq_slot_headroom)
        self._executor = weakref.ref(executor) if executor is not None else None
        self._defaults_from_engine(extras, eff, kv_cache_manager, executor)
        # Route traces need the library's receipts: on when our option asks,
        # or when TensorRT-LLM's trace sink variable is set (its executor
        # then sets route_trace_enabled on the rank that writes).
        self.route_trace_enabled = _flag(adapter, "route_trace")
        self._last_route_trace = None
        if self.route_trace_enabled or os.environ.get("TRTLLM_ADP_ROUTE_TRACE"):
            extras.setdefault("explain", True)
        self._check_ranks = _flag(adapter, "check_ranks")
        self._config = dict(config, **extras)
        self._effective = eff = _effective(self._policy, self._config)
        self._explains = eff["explain"] == "true"
        # Token counts: read by every policy but the plain conversation
        # router (TensorRT-LLM's reads none); both paths send 0 there.
        self._counts = (self._policy != "conversation" or self._capacity_aware or self._explains
                        or eff["new_conv_placement"] == "least_tokens")
        # The conversation key goes to the library where it reads it: the
        # conversation policy and the KV-aware "ttft" score.
        self._send_conversations = self._policy == "conversation" or eff["score"] == "ttft"
        # TensorRT-LLM sizes every decision by the number of rank states.
        # The library keeps per-rank state, so its router is sized by the
        # first decision (built before it from mapping.dp_size, else
        # tp_size, and rebuilt if the first decision's states say otherwise).
        mapping = getattr(dist, "mapping", None)
        guess = _positive_int(getattr(mapping, "dp_size", None)) or _positive_int(getattr(dist, "tp_size", None))
        self._lib = None
        self._routed = False
        self._gathered_once = False
        self._pending_warned = False
        self._pending_assigned = False
        self._carry = []
        self._requeued = 0
        self._conv_ids = {}  # tagged or digested conversation key -> the engine's id
        self._library(guess or 1)
        self.fingerprint = self._fingerprint()
        log.info("adprouter.trtllm rank %s: %s, adprouter %s (ABI %d), options %s, fingerprint %s",
                 getattr(dist, "tp_rank", "?"), type(self).__name__, version(), abi_version(),
                 _describe(self._config), self.fingerprint)

    def _defaults_from_engine(self, extras, eff, kv_cache_manager, executor):
        """Options the engine knows, unless set (added to extras): the KV
        block size of the prefix index (kv_cache_manager.tokens_per_block),
        and the per-iteration token budget of the ttft score (the executor's
        max_num_tokens). eff: the effective options without them."""
        if self._policy != "kv_cache_aware":
            return
        indexed = eff["prefix_source"] in ("index", "probe+index") or eff["warmup"] == "demand"
        tpb = _positive_int(getattr(kv_cache_manager, "tokens_per_block", None))
        if indexed and tpb is not None and "tokens_per_block" not in extras:
            extras["tokens_per_block"] = tpb
        if eff["score"] == "ttft" and "ttft_drain_tokens" not in extras:
            budget = _positive_int(getattr(getattr(executor, "llm_args", None), "max_num_tokens", None))
            if budget is not None:
                extras["ttft_drain_tokens"] = budget

    def _fingerprint(self):
        """What every rank must agree on to route alike: the library's
        version and ABI, this router's class and its library options but
        explain (receipts change no decision), as 16 hex digits."""
        config = {k: v for k, v in self._config.items() if k != "explain"}
        text = repr((version(), abi_version(), type(self).__name__, _describe(config)))
        return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()

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
        """The library's counters (adprouter.Router.stats), plus this
        router's: carried (requests it holds now) and requeued (requests it
        has put back at the front of the executor's waiting queue)."""
        out = self._lib.stats()
        out["carried"] = len(self._carry)
        out["requeued"] = self._requeued
        return out

    def receipts(self):
        """Why each request of the last decision went where it did (create
        the router with options={"explain": True})."""
        return self._lib.receipts()

    # ---- TensorRT-LLM's factory ------------------------------------------------------

    @classmethod
    def create(cls, dist, *args, kv_cache_manager=_UNSET, attention_dp_config=_UNSET,
               async_transfer_manager=_UNSET, has_seq_slot_headroom=_UNSET, options=None, executor=None):
        """The router TensorRT-LLM's ADPRouter.create would choose, ours:
        conversation affinity when the config asks for it; else the
        KV-cache-aware router when the config asks for it and the KV cache
        manager reuses blocks; else the default router.

        Both of TensorRT-LLM's orders are taken: (dist, kv_cache_manager,
        attention_dp_config, async_transfer_manager) at the pinned commit,
        and (dist, has_seq_slot_headroom, kv_cache_manager, ...) in newer
        releases, told apart by the bool. executor: TensorRT-LLM's
        PyExecutor, whose waiting queue takes back what no rank can take
        (install() finds it by itself)."""
        names = ["kv_cache_manager", "attention_dp_config", "async_transfer_manager"]
        if args and isinstance(args[0], bool):
            names.insert(0, "has_seq_slot_headroom")
        if len(args) > len(names):
            raise TypeError("ADPRouter.create takes at most %d positional arguments after dist (%d given)"
                            % (len(names), len(args)))
        given = dict(kv_cache_manager=kv_cache_manager, attention_dp_config=attention_dp_config,
                     async_transfer_manager=async_transfer_manager, has_seq_slot_headroom=has_seq_slot_headroom)
        for name, value in zip(names, args):
            if given[name] is not _UNSET:
                raise TypeError("ADPRouter.create got %s twice" % name)
            given[name] = value
        given = {k: None if v is _UNSET else v for k, v in given.items()}
        kv_cache_manager, cfg = given["kv_cache_manager"], given["attention_dp_config"]
        common = dict(has_seq_slot_headroom=given["has_seq_slot_headroom"], executor=executor, options=options)
        get = lambda name, default: getattr(cfg, name, default) if cfg is not None else default
        conv = get("kv_cache_routing_conversation_affinity", False)
        # Every router gets the KV cache manager: the option capacity_aware
        # (the library resolves whether it is on) reads its free KV.
        kv = kv_cache_manager
        if conv:
            return ConversationAwareADPRouter(
                dist=dist, max_sessions=get("kv_cache_routing_max_sessions", 1 << 16),
                fair_share_multiplier=get("kv_cache_routing_fair_share_multiplier", 2.0),
                new_conv_placement=get("kv_cache_routing_new_conv_placement", "round_robin"),
                kv_cache_manager=kv, **common)
        if (get("enable_kv_cache_aware_routing", False) and kv_cache_manager is not None
                and kv_cache_manager.enable_block_reuse):
            return KVCacheAwareADPRouter(
                dist=dist, kv_cache_manager=kv_cache_manager,
                load_balance_weight=get("kv_cache_routing_load_balance_weight", 1.0),
                match_rate_threshold=get("kv_cache_routing_match_rate_threshold", 0.1),
                fair_share_multiplier=get("kv_cache_routing_fair_share_multiplier", 2.0),
                cold_start_warmup=get("kv_cache_routing_cold_start_warmup", False),
                async_transfer_manager=given["async_transfer_manager"],
                account_for_in_transfer=get("kv_cache_routing_account_for_in_transfer", False), **common)
        return DefaultADPRouter(dist=dist, kv_cache_manager=kv, **common)

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
                                       self._prompt_tokens(active_requests)), active_requests)

    def _with_kv(self, state, active_requests):
        """state with this rank's KV pool from the KV cache manager's stats
        and the KV its active requests will still take (_pending_kv), where
        a rule reads them."""
        if self._reports_kv:
            st = self.kv_cache_manager.get_kv_cache_stats()
            per_block = getattr(st, "tokens_per_block", 0) or 0
            state.kv_capacity_tokens = max(getattr(st, "max_num_blocks", 0) * per_block, 0)
            state.free_kv_tokens = max(getattr(st, "free_num_blocks", 0) * per_block, 0)
            if state.kv_capacity_tokens > 0 and not self.dist.has_cp_helix:
                state.pending_kv_tokens = self._pending_kv(active_requests)
        return state

    def _pending_kv(self, active_requests):
        """The KV, in tokens, active_requests will still take beyond what the
        pool's free blocks show taken, as TensorRT-LLM allocates it: a
        request not started yet (context-init, at position 0) holds no
        blocks and will take its prompt and py_max_new_tokens; a started one
        holds its prompt and the tokens it has (get_num_tokens(0)) and will
        take the rest of its output. It counts the prefix a request may
        reuse, as the engine reserves before it looks. None (not reported,
        warned once) when a request lacks those attributes."""
        total = 0
        try:
            for r in active_requests:
                seq = r.py_orig_prompt_len + r.py_max_new_tokens
                if r.is_context_init_state and r.context_current_position == 0:
                    total += seq
                else:
                    held = r.get_num_tokens(0)
                    if seq > held:
                        total += seq - held
        except (AttributeError, TypeError) as e:
            if not self._pending_warned:
                self._pending_warned = True
                log.warning("adprouter.trtllm: not reporting the KV this rank's requests will still take: an "
                             "active request has no usable py_orig_prompt_len, py_max_new_tokens, "
                             "is_context_init_state, context_current_position or get_num_tokens (%s)", e)
            return None
        return total

    def gather_all_rank_states(self, active_requests, new_requests=None, iter_stats_payload=None):
        """Builds this rank's state from its routable active requests (the
        retiring ones are counted in num_retiring_requests instead, so that
        the executor's idle check still sees them; unless
        exclude_retiring_requests is False), attaches iter_stats_payload,
        allgathers the states over dist.tp_allgather and returns every
        rank's, in allgather order. With the check_ranks option the first
        call allgathers every rank's fingerprint first."""
        if self._check_ranks and not self._gathered_once:
            self._compare_fingerprints()
        self._gathered_once = True
        routable = active_requests
        if self.exclude_retiring_requests:
            routable = build_active_requests_for_overlap(active_requests)
        local = self.create_rank_state(routable, new_requests or [])
        local.num_retiring_requests = len(active_requests) - len(routable)
        local.copy_iter_stats_from(iter_stats_payload)
        return [RankState.deserialize(d) for d in self.dist.tp_allgather(local.serialize())]

    def _compare_fingerprints(self):
        """The check_ranks option: one allgather of fingerprints; a
        ConfigError on every rank when they differ."""
        prints = list(self.dist.tp_allgather(self.fingerprint))
        if not all(isinstance(fp, str) for fp in prints):
            raise ConfigError(
                "adprouter.trtllm: check_ranks is on for some ranks only (rank %s sent %r instead of a "
                "fingerprint): set TRTLLM_ADPROUTER_CHECK_RANKS on every rank"
                % (next(r for r, fp in enumerate(prints) if not isinstance(fp, str)),
                   next(fp for fp in prints if not isinstance(fp, str))), CONFIG)
        if len(set(prints)) > 1:
            groups = {}
            for rank, fp in enumerate(prints):
                groups.setdefault(fp, []).append(rank)
            raise ConfigError(
                "adprouter.trtllm: the ranks would route differently: fingerprints %s (ranks by "
                "fingerprint). Give every rank the same adprouter version and options (the "
                "TRTLLM_ADPROUTER_* variables); each rank logs its options at start (logger "
                "adprouter.trtllm, INFO)" % "; ".join("%s: ranks %s" % (fp, r) for fp, r in sorted(groups.items())),
                CONFIG)

    # ---- routing ---------------------------------------------------------------------

    @property
    def carried(self):
        """Requests no rank could take in the last call, routed first in the
        next one (the same on every rank). Always empty when the router
        knows the executor's waiting queue: they go back there instead."""
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
        prompt (KV-aware), the conversation key, the index scopes, the
        output it reserves KV for (the executor request's max_tokens, where
        the ranks report their KV)."""
        tokens_needed = self._tokens_needed()
        counts = self._counts
        convs = self._send_conversations
        scoped = self._scoped
        outputs = self._reports_kv  # the KV room reads each request's output
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
                # Newer TensorRT-LLM keys a conversation by the sub-agent
                # affinity id (text from a request header) when a request
                # carries one.
                cid = getattr(sp, "subagent_affinity_id", None) if sp is not None else None
                if not (cid and isinstance(cid, str)):
                    cp = getattr(req, "py_conversation_params", None)
                    cid = cp.conversation_id if cp is not None else None
                cid = self._conversation(cid)
            out = 0
            if outputs:
                out = getattr(req, "max_tokens", None)
                if out is None:
                    out = 0
                elif not isinstance(out, int):
                    raise InvalidArgumentError("new_requests[%d].request.max_tokens = %r, want an int or None"
                                               % (i, out), INVALID_ARGUMENT)
            q = Request(rid, tokens=toks, num_tokens=_num_input_tokens(req) if counts else 0, target_rank=target,
                        relax=relax is None or bool(relax), conversation_id=cid, max_new_tokens=out)
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
        number of ranks is len(all_rank_states).

        A request is left over only when every rank holds
        max_num_active_requests (TensorRT-LLM's executor never offers more
        than its free slots, so it never happens there) or, under
        score="ttft" (the recommended preset), when it waits for a full rank
        holding its prompt or, one decision, for its prompt in flight on the
        rank it would take (docs/ROUTING.md). It goes back to the front of
        the executor's waiting queue when the router knows the executor (its
        cancellation, shutdown and idle checks look there), else it is
        carried into the next call."""
        items = self._carry + list(new_requests) if self._carry else list(new_requests)
        lib = self._library(len(all_rank_states))
        got = None
        t0 = _log.clock() if _log.decisions.isEnabledFor(_log.DEBUG) else None  # DEBUG: adprouter._log
        flags = self._item_flags
        if not self.route_trace_enabled and flags is not None:
            # The C path: the same reading of every item, the library call
            # and the decoding in one; None where the Python path must run.
            got = lib._route_items(all_rank_states, items, flags, self._match_source(), max_num_active_requests)
        if got is not None:
            expected, out, left = got
            self._routed = True
            if t0 is not None:  # the Python path's lib.route() logs its own
                _log.routed_items(lib, expected, out, left, t0)
        else:
            reqs = self._requests(items)
            ids = [q.id for q in reqs]
            matches = self._match_rows(ids, items, lib.dp_size)
            res = lib.route(all_rank_states, reqs, max_num_active_requests, matches)
            self._routed = True
            by_id = dict(zip(ids, items))
            get = by_id.__getitem__
            out = {r: list(map(get, placed)) for r, placed in res.assignment.items()}
            left = list(map(get, res.unassigned))
            expected = res.expected
            if self.route_trace_enabled:
                self._trace(all_rank_states, reqs, matches, len(left), by_id)
        self._carry = [] if left and self._requeue(left) else left
        return out, expected

    @property
    def _item_flags(self):
        """What the C path reads of each item beyond TensorRT-LLM's fields
        every policy reads (_speedups' T_* flags); None where that C path
        cannot read what this router needs."""
        sp = _accel.speedups
        if sp is None or not hasattr(sp, "T_CONVERSATIONS"):
            return 0
        if self._reports_kv and not hasattr(sp, "T_OUTPUTS"):
            return None  # a C packer that reads no outputs nor pending KV: the Python path
        return ((sp.T_CONVERSATIONS if self._send_conversations else 0) | (sp.T_SCOPES if self._scoped else 0)
                | (sp.T_COUNTS if self._counts else 0) | (sp.T_OUTPUTS if self._reports_kv else 0))

    def _match_source(self):
        """The match lengths as the C path takes them: None, or per rank an
        allgathered [id, match, ...] list or an {id: match} dict."""
        return None

    def _requeue(self, items):
        """Puts items back at the front of the executor's waiting queue, in
        order; False when the router knows no such queue."""
        executor = self._executor() if self._executor is not None else None
        prepend = getattr(getattr(executor, "waiting_queue", None), "prepend_requests", None)
        if prepend is None:
            return False
        prepend(items)
        self._requeued += len(items)
        return True

    def _match_rows(self, ids, items, ranks):
        return None

    # ---- route traces ----------------------------------------------------------------

    def _trace(self, states, reqs, matches, unrouted, items):
        """Fills _last_route_trace in TensorRT-LLM's shape from the library's
        receipts of the last decision: the load before it and one entry per
        placement, in placement order. Left as it was when the decision
        placed and left over nothing (TensorRT-LLM's executor clears it
        when it writes it)."""
        if not reqs:
            return
        if not self._explains:
            if not getattr(self, "_trace_warned", False):
                self._trace_warned = True
                log.warning("adprouter.trtllm: route_trace_enabled was set, but this router keeps no receipts "
                            "(set TRTLLM_ADP_ROUTE_TRACE or the route_trace option before the engine starts)")
            return
        kv = self._policy == "kv_cache_aware"
        ranks = len(states)
        decisions = []
        for i, rc in sorted(enumerate(self._lib.receipts()), key=lambda p: p[1].step):
            if rc.rank < 0:
                continue
            req = reqs[i]
            n = rc.num_tokens
            entry = dict(req_id=rc.id, client_id=None, disagg_request_id=None,
                         phase=_PHASES.get(rc.reason, rc.reason), req_tokens=n, best_rank=rc.rank,
                         effective_added=n)
            if kv:
                if rc.candidates:
                    match = rc.candidates[rc.rank].match
                else:
                    match = matches[i * ranks + rc.rank] if matches is not None else 0
                entry["effective_added"] = max(n - match, 0)
            if rc.candidates:
                eligible = [c for c in rc.candidates if c.excluded is None]
                entry["match_lens"] = {c.rank: c.match for c in eligible}
                entry["scores"] = {c.rank: c.score for c in eligible}
                entry["cache_affinity_active"] = rc.affinity
            decisions.append(entry)
        for entry in decisions:
            request = getattr(items.get(entry["req_id"]), "request", None)
            entry["client_id"] = getattr(request, "client_id", None)
            entry["disagg_request_id"] = getattr(request, "disagg_request_id", None)
        if not decisions and not unrouted:
            return
        tokens = [float(s.num_active_tokens) if kv else s.num_active_tokens for s in states]
        trace = {"load_before": {"num_active_requests": [s.num_active_requests for s in states],
                                 "num_active_tokens": tokens},
                 "decisions": decisions}
        if unrouted:
            trace["num_unrouted"] = unrouted
        self._last_route_trace = trace

    def close(self):
        """Releases the library router."""
        self._lib.close()


# Route-trace phases by receipt reason: TensorRT-LLM's names where it has
# the step ("strict" is any explicit target, as there), ours elsewhere.
_PHASES = {"explicit": "strict", "cold_start_warmup": "warmup", "scored": "scored"}


def _describe(config):
    """Options as sorted "key=value" text, for logs and fingerprints."""
    return ", ".join("%s=%s" % (k, config[k]) for k in sorted(config))


class DefaultADPRouter(ADPRouter):
    """TensorRT-LLM's DefaultADPRouter: explicit targets, then the least
    token-loaded ranks, largest prompts first."""

    _policy = "default"

    def __init__(self, dist, *, options=None, kv_cache_manager=None, has_seq_slot_headroom=None, executor=None):
        super().__init__(dist, options=options, kv_cache_manager=kv_cache_manager,
                         has_seq_slot_headroom=has_seq_slot_headroom, executor=executor)

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


_PLACEMENTS = ("round_robin", "least_queued", "least_tokens")


class ConversationAwareADPRouter(ADPRouter):
    """TensorRT-LLM's ConversationAwareADPRouter: every request of a
    conversation (py_conversation_params.conversation_id) returns to the
    rank of its first turn while that rank is under max_num_active_requests;
    new conversations and requests without one go round robin (or to the
    least queued rank) under the fair-share cap."""

    _policy = "conversation"
    DEFAULT_MAX_SESSIONS = 1 << 16

    def __init__(self, dist, max_sessions=DEFAULT_MAX_SESSIONS, fair_share_multiplier=2.0,
                 new_conv_placement="round_robin", *, options=None, kv_cache_manager=None,
                 has_seq_slot_headroom=None, executor=None):
        self._max_sessions = max(1, int(max_sessions))
        self._fair_share_multiplier = max(1.0, float(fair_share_multiplier))
        # TensorRT-LLM: an unknown placement is round robin ("least_tokens"
        # arrived in a newer release). Our new_conv_placement option
        # (options= or the environment) wins.
        placement = new_conv_placement if new_conv_placement in _PLACEMENTS else "round_robin"
        super().__init__(dist, options=options, kv_cache_manager=kv_cache_manager,
                         has_seq_slot_headroom=has_seq_slot_headroom, executor=executor,
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
                 account_for_in_transfer=False, *, options=None, has_seq_slot_headroom=None, executor=None):
        self.load_balance_weight = load_balance_weight
        self.match_rate_threshold = match_rate_threshold
        self.fair_share_multiplier = fair_share_multiplier
        self.async_transfer_manager = async_transfer_manager
        self.account_for_in_transfer = account_for_in_transfer
        super().__init__(dist, options=options, kv_cache_manager=kv_cache_manager,
                         has_seq_slot_headroom=has_seq_slot_headroom, executor=executor,
                         load_balance_weight=load_balance_weight,
                         match_rate_threshold=match_rate_threshold,
                         fair_share_multiplier=fair_share_multiplier,
                         cold_start_warmup=bool(cold_start_warmup))
        self._use_matches = self._effective["prefix_source"] != "index"
        self.needs_prefix_matches = self._use_matches
        self._gathered = None  # (ids probed, [flat id/match list per rank], _speedups match index or None)
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
        return self._with_kv(RankState(self.dist.tp_rank, count, tokens), active_requests)

    def _tokens_needed(self):
        return True

    def gather_prefix_matches(self, new_requests):
        """Probes this rank's KV cache for the carried and new requests as
        TensorRT-LLM does (probe_prefix_match_length(prompt[:-1],
        lora_task_id, cache_salt=...)) and allgathers the results: one flat
        [id, match, id, match, ...] list per rank."""
        items = self._carry + list(new_requests) if self._carry else list(new_requests)
        probe = self.kv_cache_manager.probe_prefix_match_length
        sp = _accel.speedups
        got = sp.probe_items(items, probe) if sp is not None and hasattr(sp, "probe_items") else None
        if got is not None:  # the same loop in C: the same calls, in the same order
            ids, flat = got
        else:
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
        rows = list(self.dist.tp_allgather(flat))
        # Read once here, as TensorRT-LLM parses them into dicts here: the C
        # path's index of every rank's matches by id (None: it reads rows).
        index = sp.match_index(rows) if sp is not None and hasattr(sp, "match_index") else None
        self._gathered = (ids, rows, index)
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

    def _match_source(self):
        if not self._use_matches:
            return None
        if self._dicts is not None:
            return self._dicts or None
        if self._gathered is None:
            return None
        return self._gathered[2] if self._gathered[2] is not None else self._gathered[1]

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
            try:
                table[r::ranks] = array("i", row)
            except (TypeError, OverflowError):
                bad = next(v for v in row if not _int32(v))
                raise InvalidArgumentError(
                    "rank %d's prefix match lengths must be ints (matched tokens, 0 to 2^31-1), "
                    "got %r of type %s" % (r, bad, type(bad).__name__)) from None
        return table


def _int32(v):
    """Whether array("i") takes v."""
    try:
        array("i", [v])
        return True
    except (TypeError, OverflowError):
        return False


# ---- install into TensorRT-LLM ---------------------------------------------------------

_original = {}  # module name -> the ADPRouter.create we replaced

# The parameters of TensorRT-LLM's ADPRouter.create that this module knows,
# at the pinned commit and in newer releases.
_KNOWN_CREATE = ("dist", "has_seq_slot_headroom", "kv_cache_manager", "attention_dp_config",
                 "async_transfer_manager")


def _trtllm_router_module():
    import importlib

    import tensorrt_llm  # ImportError when TensorRT-LLM is not installed

    tried = []
    for name in TRTLLM_MODULES:
        try:
            mod = importlib.import_module(name)
        except ImportError as e:
            tried.append("%s (%s)" % (name, e))
            continue
        cls = getattr(mod, "ADPRouter", None)
        if cls is not None and hasattr(cls, "create"):
            return mod
        tried.append("%s (no ADPRouter.create)" % name)
    raise ImportError("adprouter.trtllm.install: TensorRT-LLM %s has no ADPRouter.create where "
                      "expected; tried %s" % (getattr(tensorrt_llm, "__version__", "(unknown version)"),
                                              "; ".join(tried)))


def _calling_executor(frame):
    """TensorRT-LLM's PyExecutor when it is the one calling create (its
    __init__ does), else None."""
    obj = frame.f_locals.get("self") if frame is not None else None
    if any(c.__name__ == "PyExecutor" for c in type(obj).__mro__):
        return obj
    return None


def _patch_module(mod, options=None):
    """Makes mod.ADPRouter.create (mod: TensorRT-LLM's router module) return
    our routers; install() and the start-up hook. Idempotent."""
    cls = mod.ADPRouter
    # TensorRT-LLM's routers are abstract base classes: registering ours
    # keeps isinstance(router, TheirClass) true for the executor's code.
    for ours in (ADPRouter, DefaultADPRouter, KVCacheAwareADPRouter, ConversationAwareADPRouter):
        theirs = getattr(mod, ours.__name__, None)
        if hasattr(theirs, "register"):
            theirs.register(ours)
    name = mod.__name__
    if name not in _original:
        _original[name] = cls.__dict__.get("create", cls.create)
    original = _original[name].__get__(None, cls)
    try:
        signature = inspect.signature(original)
    except (TypeError, ValueError):
        signature = None
    refused = []  # why TensorRT-LLM's own router is used, warned once

    def keep_theirs(why, args, kwargs):
        if not refused:
            refused.append(why)
            warnings.warn("adprouter.trtllm: TensorRT-LLM's ADPRouter.create %s, which this adprouter does "
                          "not know; using TensorRT-LLM's own router" % why, stacklevel=3)
        return original(*args, **kwargs)

    def create(_cls, *args, **kwargs):
        if signature is None:
            return keep_theirs("has no signature to read", args, kwargs)
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as e:
            return keep_theirs("was called with arguments that do not fit it (%s)" % e, args, kwargs)
        passed = dict(bound.arguments)
        bound.apply_defaults()  # a known parameter left at TensorRT-LLM's default counts as given
        given = {k: v for k, v in bound.arguments.items() if k in _KNOWN_CREATE}
        unknown = []
        for k, v in passed.items():
            kind = signature.parameters[k].kind
            if kind is inspect.Parameter.VAR_KEYWORD:
                unknown += v  # names passed through **kwargs
            elif kind is inspect.Parameter.VAR_POSITIONAL:
                unknown += ["*%s" % k] if v else []
            elif k not in _KNOWN_CREATE and v is not signature.parameters[k].default:
                unknown.append(k)
        unknown.sort()
        if unknown:
            return keep_theirs("got %s" % ", ".join(unknown), args, kwargs)
        return ADPRouter.create(given["dist"], kv_cache_manager=given.get("kv_cache_manager"),
                                attention_dp_config=given.get("attention_dp_config"),
                                async_transfer_manager=given.get("async_transfer_manager"),
                                has_seq_slot_headroom=given.get("has_seq_slot_headroom"),
                                options=options, executor=_calling_executor(sys._getframe(1)))

    create.__doc__ = ADPRouter.create.__doc__
    cls.create = classmethod(create)


def install(options=None):
    """Makes TensorRT-LLM's ADPRouter.create return adprouter's routers
    (options as for ADPRouter.create), in this process. Idempotent; undo
    with uninstall(). Raises ImportError naming the TensorRT-LLM version when
    its router module is not where expected. For the MPI workers
    TensorRT-LLM spawns, use the start-up hook instead (TRTLLM_ADPROUTER=1,
    docs/trtllm.md)."""
    _patch_module(_trtllm_router_module(), options)


def uninstall():
    """Restores TensorRT-LLM's own ADPRouter.create (no-op if not installed)."""
    if not _original:
        return
    mod = _trtllm_router_module()
    orig = _original.pop(mod.__name__, None)
    if orig is not None:
        mod.ADPRouter.create = orig


def installed():
    """True while install() is in effect."""
    return bool(_original)
