"""The Router: one routing policy and its state behind a library handle,
and block_hashes, the prefix index's keys.

Router.route packs through _pack (or the C packer of _accel, when in use)
and calls adpr_route; every other method is one library call.

No method holds a Python lock while it calls the library or runs code that
can run the caller's (packing reads the caller's objects: __bool__,
__index__, __eq__, ...; any allocation can collect garbage and run a
__del__): such code may call the same router again, and a lock held there
would hang the thread. None is needed: the library serialises calls on one
handle and never reuses a handle, so a call racing close() gets
InvalidHandleError; and each call takes an error buffer of its own from a
pool (_take_errbuf), so that no two calls, on other threads or re-entrant
on this one, write one buffer. Router.dp_size is the int the library
accepted (Router(dp_size="4").dp_size == 4).
"""

import ctypes
import json
import threading
from array import array

from . import _abi, _accel, _consts, _receipt
from . import _log
from ._abi import ERRBUF, Batch, BindingC, HotGroup, Option, RankStats, Result, Stats, load, raise_status
from ._errors import (CONFIG, FORKED, INVALID_ARGUMENT, INVALID_HANDLE, OK, SHORT_BUFFER, U64, ConfigError,
                      InvalidArgumentError, InvalidHandleError, check_int)
from ._options import option_text
from ._pack import LazyResult, address, match_table, pack_requests, pack_states
from ._types import RouteResult

# The most hot groups stats() asks for.
_MAX_GROUPS = 1 << 16

# Error buffers no call is using. The library writes one only when it returns
# an error, so a buffer goes back (_ERRBUFS.append) after OK calls only and
# every buffer here is empty. list.pop and list.append are atomic.
_ERRBUFS = []


def _take_errbuf():
    """An error buffer for one library call, the caller's alone."""
    try:
        return _ERRBUFS.pop()
    except IndexError:
        return ctypes.create_string_buffer(ERRBUF)


def block_hashes(tokens, tokens_per_block=32, lora_id=0, cache_salt=0):
    """The prefix index's keys for tokens: one 64-bit hash per full block of
    tokens_per_block tokens, chained, scoped by lora_id and cache_salt (a
    partial last block is not hashed). The router hashes a prompt without its
    last token, as engines cache it."""
    lib = load()
    check_int("tokens_per_block", tokens_per_block, 1, _consts.MAX_TOKENS_PER_BLOCK)
    check_int("lora_id", lora_id, 0, U64)
    check_int("cache_salt", cache_salt, 0, U64)
    try:
        buf = tokens if isinstance(tokens, array) and tokens.typecode == "i" else array("i", tokens)
    except (TypeError, OverflowError) as e:
        raise InvalidArgumentError("tokens: %s (want int32 token ids)" % (e,), INVALID_ARGUMENT) from None
    n = len(buf)
    cap = n // tokens_per_block
    out = array("Q", bytes(8 * max(cap, 1)))
    got = ctypes.c_int64(0)
    errbuf = ctypes.create_string_buffer(ERRBUF)
    status = lib.adpr_block_hashes(buf.buffer_info()[0] if n else None, n, tokens_per_block,
                                   lora_id, cache_salt, out.buffer_info()[0], cap,
                                   ctypes.byref(got), errbuf, ERRBUF)
    if status != OK:  # the buffer holds every full block: never ADPR_ERR_SHORT_BUFFER
        raise_status(status, errbuf)
    return out[:got.value].tolist()


def option_schema():
    """The library's option schema (docs/configuration.md): {"options": [one
    dict per option: name, kind, values, default, range, unit, policies,
    doc], "bool_true": [...], "bool_false": [...], "presets": {preset:
    {policy: [[key, value], ...]}}}. The one list of option names: the
    TensorRT-LLM drop-in reads it too."""
    global _schema
    if _schema is None:
        _schema = json.loads(_abi.text("adpr_option_schema", initial=1 << 15))
    return _schema


_schema = None


def preset_options(preset, policy="kv_cache_aware"):
    """The options preset sets for policy, {name: text}, from the
    library's table (adpr_preset_options)."""
    text = _abi.text("adpr_preset_options", str(preset).encode(), str(policy).encode())
    return dict(line.split("=", 1) for line in text.splitlines())


class Router:
    """One routing policy and its state (warmup set, conversation map, ...).

    Keyword arguments are the configuration options of include/adprouter.h,
    with TensorRT-LLM's names: policy ("default" | "kv_cache_aware" |
    "conversation"), dp_size (required), load_balance_weight,
    match_rate_threshold, fair_share_multiplier, cold_start_warmup,
    max_sessions, new_conv_placement, capacity_aware, explain (keep
    receipts: receipts()), preset ("reference" | "recommended" | ...) and the
    other options of include/adprouter.h. Unknown names raise ConfigError.

    Safe to share between threads (calls on one router are serialised by the
    library), and to call from code that runs during a call on it (a
    __del__, a flag's __bool__): no Python lock is held. Close it with
    close() or use it as a context manager.
    """

    def __init__(self, policy="kv_cache_aware", dp_size=None, **options):
        lib = load()
        if dp_size is None:
            raise ConfigError("dp_size is required", CONFIG)
        opts = [("policy", policy), ("dp_size", dp_size)] + sorted(options.items())
        arr = (Option * len(opts))()
        for i, (k, v) in enumerate(opts):
            arr[i].key = k.encode()
            arr[i].value = option_text(k, v)
        handle = ctypes.c_uint64(0)
        errbuf = ctypes.create_string_buffer(ERRBUF)
        status = lib.adpr_router_create(arr, len(opts), ctypes.byref(handle), errbuf, ERRBUF)
        if status != OK:
            raise_status(status, errbuf)
        self._lib = lib
        self._handle = handle.value
        self.policy = policy
        # The int the library accepted (digits with an optional "-", which
        # int() reads as the library does), whatever type was given.
        self.dp_size = int(arr[1].value)
        # How many leading tokens per request to send, as the library says
        # its decisions read them: none, the first 64 (the KV-aware grouping
        # key) or the whole prompt (None: the prefix index hashes it).
        n = ctypes.c_int32(0)
        status = lib.adpr_router_tokens_read(self._handle, ctypes.byref(n))
        if status != OK:
            lib.adpr_router_destroy(self._handle)
            self._handle = 0
            raise_status(status, None)
        self._send_tokens = None if n.value < 0 else n.value
        self._errbufs = threading.local()
        self._errbufs.buf = errbuf

    @property
    def _errbuf(self):
        """An error buffer of the calling thread's (for callers outside this
        module; the methods here take one per call: _take_errbuf)."""
        buf = getattr(self._errbufs, "buf", None)
        if buf is None:
            buf = self._errbufs.buf = ctypes.create_string_buffer(ERRBUF)
        return buf

    @property
    def tokens_read(self):
        """How many leading prompt tokens of each request this router's
        decisions read (the library says, from the options): 0, 64, or -1
        for the whole prompt. route() sends only those."""
        return -1 if self._send_tokens is None else self._send_tokens

    def close(self):
        """Destroys the router; further calls raise InvalidHandleError.
        Closing a closed router does nothing."""
        h = getattr(self, "_handle", 0)
        if not h:
            return
        status = self._lib.adpr_router_destroy(h)
        if status not in (OK, INVALID_HANDLE, FORKED):
            raise_status(status, None)  # the handle is kept: close() may be retried
        self._handle = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def route(self, states, requests, max_num_active_requests, match_lens=None, match_format="auto"):
        """Places one batch of new requests; returns a RouteResult.

        states: one RankState per rank, in rank order. requests: Request
        objects. Raises InvalidArgumentError (a ValueError) for bad input,
        after which the router is unchanged.

        match_lens (KV-aware policy): None (nothing cached), or one entry per
        rank, in rank order, giving how many prompt tokens of each request
        that rank already caches. With match_format="auto" each entry is
        either a dict {request_id: matched tokens} (requests it omits count
        0; ids not in the batch are an error) or a sequence aligned with
        requests (a list, tuple or 1-D int32 buffer of len(requests)
        values: rank-major rows); or the whole table as one array('i') of
        len(requests) x len(states) values, request-major as adpr_batch
        takes it (passed without a copy). With match_format="pairs" each entry is
        the rank's raw allgathered row [id, matched, id, matched, ...]
        (a list or tuple, or any sequence: an even number of values, each id
        in the batch and at most once per row, omitted requests count 0).
        All forms give the same decision for the same lengths; dicts that
        name every request in batch order and pairs in batch order are the
        fastest.
        """
        t0 = _log.clock() if _log.decisions.isEnabledFor(_log.DEBUG) else None  # DEBUG: adprouter._log
        h = self._handle  # a close() from here on: adpr_route says InvalidHandleError
        if not h:
            raise InvalidHandleError("the router is closed", INVALID_HANDLE)
        maxn = max_num_active_requests
        if not isinstance(maxn, int) or not 1 <= maxn <= 0x7FFFFFFF:
            raise InvalidArgumentError("max_num_active_requests = %r, want an integer >= 1" % (maxn,),
                                       INVALID_ARGUMENT)
        if match_format not in ("auto", "pairs"):
            raise InvalidArgumentError("match_format = %r, want \"auto\" or \"pairs\"" % (match_format,),
                                       INVALID_ARGUMENT)
        try:
            ns, nr = len(states), len(requests)
        except TypeError as e:
            raise InvalidArgumentError("states and requests must be sequences: %s" % (e,),
                                       INVALID_ARGUMENT) from None
        sp = _accel.speedups
        if sp is not None and self._lib is _abi.lib and (match_lens is None or not isinstance(match_lens, array)):
            # The C path: packing, the adpr_route call (through the
            # function's address: no ctypes conversions) and decoding in
            # one; None means something unusual, which the general path
            # below handles.
            err = _take_errbuf()
            got = sp.route(_abi.route_address, h, states, requests, self._send_tokens, match_lens,
                           match_format == "pairs", maxn, err)
            if got is not None:
                status, expected, assignment, unassigned, ranks = got
                if status != OK:
                    raise_status(status, err)
                _ERRBUFS.append(err)
                res = RouteResult(assignment, expected, unassigned, ranks)
                return res if t0 is None else _log.routed(self, res, t0)
            _ERRBUFS.append(err)
        # Read from snapshots, as the C path does: code run meanwhile (another
        # thread, a __del__, a flag's __bool__) cannot resize them under the
        # packing.
        try:
            states, requests = tuple(states), tuple(requests)
        except TypeError as e:
            raise InvalidArgumentError("states and requests must be sequences: %s" % (e,),
                                       INVALID_ARGUMENT) from None
        ns, nr = len(states), len(requests)
        sbuf = sp.pack_states(states) if sp else None
        if sbuf is None:
            sbuf = pack_states(states)
        packed = sp.pack_requests(requests, self._send_tokens) if sp else None
        if packed is None:
            packed = pack_requests(requests, self._send_tokens)
        rbuf, tokens, ntok, text = packed
        matches = None
        if match_lens is not None:
            matches = match_table(match_lens, requests, ns, nr, match_format == "pairs")

        ranks = array("i", bytes(4 * nr))
        order = array("Q", bytes(8 * nr))
        offsets = array("i", bytes(4 * (ns + 1)))
        batch = Batch(
            address(sbuf) if ns else None, ns, nr,
            address(rbuf) if nr else None,
            address(tokens) if ntok else None, ntok,
            address(text) if text else None, len(text),
            address(matches) if matches is not None and len(matches) else None,
            maxn)
        out = Result(ranks.buffer_info()[0], order.buffer_info()[0], offsets.buffer_info()[0], 0, 0)
        err = _take_errbuf()
        status = self._lib.adpr_route(h, ctypes.byref(batch), ctypes.byref(out), err, ERRBUF)
        if status != OK:
            raise_status(status, err)
        _ERRBUFS.append(err)
        res = LazyResult(order, offsets, ranks, out.expected)
        return res if t0 is None else _log.routed(self, res, t0)

    def _route_items(self, states, items, flags, match_rows, maxn):
        """adprouter.trtllm's C path (adprouter._speedups.trtllm_route): one
        decision over TensorRT-LLM's RequestQueueItems, read as that module's
        Python path reads them; (expected, {rank: [items]}, [items left
        over]), or None where the Python path must run (no C packer, or
        anything beyond the plain case). flags: which request fields the
        policy reads (the module's T_* constants); match_rows: None, or per
        rank an [id, match, ...] list or an {id: match} dict."""
        sp = _accel.speedups
        route = getattr(sp, "trtllm_route", None)
        h = self._handle
        if route is None or self._lib is not _abi.lib or not h:
            return None
        if not isinstance(maxn, int) or not 1 <= maxn <= 0x7FFFFFFF:
            return None
        err = _take_errbuf()
        got = route(_abi.route_address, h, states, items, self._send_tokens, flags, match_rows, maxn, err)
        if got is None:
            _ERRBUFS.append(err)
            return None
        status, expected, assignment, left = got
        if status != OK:
            raise_status(status, err)
        _ERRBUFS.append(err)
        return expected, assignment, left

    def receipts(self):
        """Why each request of the last route() went where it did: a list of
        adprouter._receipt.Receipt, one per request in request order (create
        the router with explain=True; print one to read it)."""
        self._check_open()
        err = _take_errbuf()
        out = _receipt.read(self, raise_status, err)
        _ERRBUFS.append(err)
        return out

    def state_digest(self):
        """A 64-bit digest of the router state that determines future
        decisions; equal on every rank that saw the same calls."""
        if not self._handle:
            raise InvalidHandleError("the router is closed", INVALID_HANDLE)
        out = ctypes.c_uint64(0)
        status = self._lib.adpr_router_state_digest(self._handle, ctypes.byref(out))
        if status != OK:
            raise_status(status, None)
        return out.value

    def pending_warmup(self):
        """The kv_cache_aware cold-start warmup's pending ranks, ascending:
        the ranks it has not sent a request to yet, the smallest next
        (TensorRT-LLM's _pending_warmup_ranks). Empty when warmup is off or
        complete, and for the other policies."""
        self._check_open()
        ranks = array("i")
        total = ctypes.c_int64(0)
        err = _take_errbuf()
        while True:
            status = self._lib.adpr_router_pending_warmup(
                self._handle, ctypes.cast(address(ranks), ctypes.POINTER(ctypes.c_int32)) if ranks else None,
                len(ranks), ctypes.byref(total), err, ERRBUF)
            if status != SHORT_BUFFER:
                break
            ranks = array("i", bytes(4 * total.value))
        if status != OK:
            raise_status(status, err)
        _ERRBUFS.append(err)
        return ranks[:total.value].tolist()

    def set_pending_warmup(self, ranks):
        """Replaces the kv_cache_aware cold-start warmup's pending ranks with
        ranks (any iterable of ints; repeats count once; empty ends the
        warmup, a set on a router without warmup starts it). Every rank must
        make the same change. InvalidArgumentError for another policy or a
        rank outside 0..dp_size-1, and nothing changes."""
        self._check_open()
        given = list(ranks)
        for i, k in enumerate(given):
            check_int("ranks[%d]" % i, k, -(1 << 31), (1 << 31) - 1)
        buf = array("i", given)
        err = _take_errbuf()
        status = self._lib.adpr_router_set_pending_warmup(
            self._handle, ctypes.cast(address(buf), ctypes.POINTER(ctypes.c_int32)) if buf else None,
            len(buf), err, ERRBUF)
        if status != OK:
            raise_status(status, err)
        _ERRBUFS.append(err)

    def conversations(self):
        """The conversation map as a list of (conversation id, rank), least
        recently used first (the order of eviction). Ids come back as the
        text they were routed with."""
        self._check_open()
        total, nbytes = ctypes.c_int64(0), ctypes.c_int64(0)
        bindings, ids = (BindingC * 0)(), ctypes.create_string_buffer(0)
        err = _take_errbuf()
        while True:
            status = self._lib.adpr_router_conversations(
                self._handle, bindings, len(bindings), ids, len(ids), ctypes.byref(total),
                ctypes.byref(nbytes), err, ERRBUF)
            if status != SHORT_BUFFER:
                break
            bindings = (BindingC * total.value)()
            ids = ctypes.create_string_buffer(nbytes.value)
        if status != OK:
            raise_status(status, err)
        _ERRBUFS.append(err)
        bindings = bindings[:total.value]
        raw = ids.raw
        return [(raw[b.id_offset:b.id_offset + b.id_length].decode("utf-8", "surrogateescape"), b.rank)
                for b in bindings]

    def _check_open(self):
        if not self._handle:
            raise InvalidHandleError("the router is closed", INVALID_HANDLE)

    def options(self):
        """The router's effective configuration, {option: text}: every
        option of the schema (option_schema()), presets expanded and unset
        options as the values they mean, as the library parsed them.
        Router(**router.options()) builds the same configuration."""
        self._check_open()
        text = _abi.text("adpr_router_options", self._handle)
        return dict(line.split("=", 1) for line in text.splitlines())

    def stats(self, max_groups=16):
        """The router's counters and gauges as a dict: decisions, unassigned,
        warmup_placements, demand_placements, pending_warmup, conversations,
        index_entries, index_bytes, ranks (one dict per rank: placed,
        predicted_hit_tokens, index_blocks, index_limit_blocks,
        index_evicted_blocks, memory_pressure) and hot_groups (at most
        max_groups dicts: family, requests, share, replicas, target; most
        requested first). docs/operations.md ("What stats() counts") gives
        each field's kind and unit; adprouter.metrics exports them."""
        if not self._handle:
            raise InvalidHandleError("the router is closed", INVALID_HANDLE)
        check_int("max_groups", max_groups, 0, _MAX_GROUPS)
        st = Stats()
        ranks = (RankStats * self.dp_size)()
        err = _take_errbuf()
        total = ctypes.c_int64(0)
        capacity = max_groups
        while True:
            # The library writes every hot group or none (the buffer rule):
            # ask for room for max_groups, then for all of them if there
            # are more, and keep the first max_groups (most requested first).
            groups = (HotGroup * max(capacity, 1))()
            status = self._lib.adpr_router_stats(self._handle, ctypes.byref(st), ranks, self.dp_size,
                                                 groups if capacity else None, capacity, ctypes.byref(total),
                                                 err, ERRBUF)
            if status == SHORT_BUFFER and max_groups > 0 and total.value > capacity:
                capacity = total.value
                continue
            break
        if status == SHORT_BUFFER and max_groups == 0:
            status = OK  # no groups wanted; stats and ranks are written
        if status != OK:
            raise_status(status, err)
        _ERRBUFS.append(err)
        out = {name: getattr(st, name) for name, _ in Stats._fields_}
        out["ranks"] = [dict(placed=r.placed, predicted_hit_tokens=r.predicted_hit_tokens,
                             index_blocks=r.index_blocks, index_limit_blocks=r.index_limit_blocks,
                             index_evicted_blocks=r.index_evicted_blocks,
                             memory_pressure=bool(r.flags & 1)) for r in ranks]
        out["hot_groups"] = [dict(family=g.family, requests=g.requests, share=g.share,
                                  replicas=g.replicas, target=g.target)
                             for g in groups[:min(total.value, max_groups)]]
        return out
