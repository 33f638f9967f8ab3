"""adprouter: KV-cache-aware request routing for attention-data-parallel LLM engines.

A ctypes binding (standard library only) of libadprouter.so. Decisions equal
TensorRT-LLM's ADP routers request by request; requests that fit nowhere come
back in ``RouteResult.unassigned`` instead of being lost.

    import adprouter
    with adprouter.Router(policy="kv_cache_aware", dp_size=4) as r:
        res = r.route(states=[adprouter.RankState(rank=i) for i in range(4)],
                      requests=[adprouter.Request(id=1, tokens=[1, 2, 3])],
                      max_num_active_requests=8)
        res.assignment  # {0: [...], 1: [...], 2: [...], 3: [...]}

The library is found at ``$ADPROUTER_LIBRARY`` when set, else inside the
package (``pip install`` puts it there), else at ``build/libadprouter.so`` of
the source tree this package lives in. It is loaded on first use, not at
import.

The Go runtime inside the library does not survive ``fork()`` without exec:
use the "spawn" or "forkserver" start method with ``multiprocessing``. Calls
in a forked child raise ForkedError instead of hanging.
"""

import ctypes
import os
import struct
import threading
from array import array

from . import _receipt

__all__ = [
    "Router", "RankState", "Request", "RouteResult",
    "Error", "InvalidArgumentError", "ConfigError", "InvalidHandleError", "InternalError",
    "library_path", "abi_version", "version", "block_hashes",
    "NVMLError", "NVMLUnavailableError", "GPULostError", "NVMLNotSupportedError",
    "NVMLPermissionError", "GPUNotFoundError", "ForkedError",
    "nvml_init", "nvml_shutdown", "nvml_device_count", "read_memory",
    "kv_bytes_per_token", "size_kv", "fill_rank_state",
]

ABI_VERSION = 1
NO_TARGET = -1

# Status codes (include/adprouter.h).
_OK, _INVALID_ARGUMENT, _INVALID_HANDLE, _CONFIG, _INTERNAL = 0, 1, 2, 3, 4
_NVML_UNAVAILABLE, _GPU_LOST, _NOT_SUPPORTED, _NO_PERMISSION, _NOT_FOUND = 5, 6, 7, 8, 9
_NVML, _FORKED = 10, 11

# The KV-aware policy groups requests by their first PREFIX_TOKENS tokens and
# reads no others; the other policies read none.
PREFIX_TOKENS = 64


class Error(Exception):
    """An error reported by adprouter; ``status`` is the library's code."""

    def __init__(self, message, status=_INTERNAL):
        super().__init__(message)
        self.status = status


class InvalidArgumentError(Error, ValueError):
    """A routing argument was invalid; nothing changed."""


class ConfigError(Error, ValueError):
    """A configuration option was invalid."""


class InvalidHandleError(Error, ValueError):
    """The router was closed (like I/O on a closed file, a ValueError)."""


class InternalError(Error):
    """A bug inside the library; the router concerned must be recreated."""


class ForkedError(Error, RuntimeError):
    """The library was called in a child after os.fork() without exec: the Go
    runtime inside does not survive fork, so the library refuses. Start
    worker processes with multiprocessing's "spawn" or "forkserver" method
    and use adprouter there; the parent is unaffected."""


class NVMLError(Error):
    """A GPU memory query failed (see the subclasses)."""


class NVMLUnavailableError(NVMLError):
    """No NVIDIA driver, or nvml_init() not called: routing still works."""


class GPULostError(NVMLError):
    """The GPU fell off the bus or needs a reset."""


class NVMLNotSupportedError(NVMLError):
    """The GPU or driver does not support the query."""


class NVMLPermissionError(NVMLError):
    """The caller may not make the query."""


class GPUNotFoundError(NVMLError, LookupError):
    """No GPU matches the device selector."""

# Any other NVML failure is an NVMLError whose message carries NVML's code.


_ERRORS = {
    _INVALID_ARGUMENT: InvalidArgumentError,
    _CONFIG: ConfigError,
    _INVALID_HANDLE: InvalidHandleError,
    _NVML_UNAVAILABLE: NVMLUnavailableError,
    _GPU_LOST: GPULostError,
    _NOT_SUPPORTED: NVMLNotSupportedError,
    _NO_PERMISSION: NVMLPermissionError,
    _NOT_FOUND: GPUNotFoundError,
    _NVML: NVMLError,
    _FORKED: ForkedError,
}


class RankState:
    """What one rank reports before a decision (allgathered by the executor)."""

    __slots__ = ("rank", "num_active_requests", "num_active_tokens",
                 "kv_capacity_tokens", "free_kv_tokens", "memory_pressure")

    def __init__(self, rank, num_active_requests=0, num_active_tokens=0,
                 kv_capacity_tokens=0, free_kv_tokens=0, memory_pressure=False):
        self.rank = rank
        self.num_active_requests = num_active_requests
        self.num_active_tokens = num_active_tokens
        # Admissible KV pool and free room in tokens (0 capacity = unknown);
        # used by capacity_aware routing. See nvml/ for filling them from GPU
        # memory.
        self.kv_capacity_tokens = kv_capacity_tokens
        self.free_kv_tokens = free_kv_tokens
        self.memory_pressure = memory_pressure

    def __repr__(self):
        kv = ""
        if self.kv_capacity_tokens or self.memory_pressure:
            kv = ", kv_capacity_tokens=%r, free_kv_tokens=%r, memory_pressure=%r" % (
                self.kv_capacity_tokens, self.free_kv_tokens, self.memory_pressure)
        return "RankState(rank=%r, num_active_requests=%r, num_active_tokens=%r%s)" % (
            self.rank, self.num_active_requests, self.num_active_tokens, kv)


class Request:
    """One new request.

    tokens: the prompt as a list of ints or any buffer of int32 (array('i'),
    memoryview, a numpy int32 array); or give num_tokens alone where the
    policy needs only the count (default, conversation). target_rank None
    means no target; relax=False is TensorRT-LLM's strict placement.
    """

    __slots__ = ("id", "tokens", "num_tokens", "target_rank", "relax", "conversation_id",
                 "lora_id", "cache_salt")

    def __init__(self, id, tokens=None, num_tokens=None, target_rank=None, relax=True,
                 conversation_id=None, lora_id=0, cache_salt=0):
        self.id = id
        self.tokens = tokens
        self.num_tokens = num_tokens
        self.target_rank = target_rank
        self.relax = relax
        self.conversation_id = conversation_id
        # Scope of the router's prefix index (prefix_source "index" or
        # "probe+index"): different adapters or salts never share blocks.
        self.lora_id = lora_id
        self.cache_salt = cache_salt

    def __repr__(self):
        n = self.num_tokens if self.num_tokens is not None else len(self.tokens or ())
        return "Request(id=%r, n=%r, target_rank=%r, relax=%r, conversation_id=%r)" % (
            self.id, n, self.target_rank, self.relax, self.conversation_id)


# The definition of Request. When adprouter._speedups is built, Request is its
# C type of the same shape (attributes, signature, defaults, repr, errors),
# which constructs several times faster; this class is used otherwise.
_PyRequest = Request


class RouteResult:
    """One decision: ``assignment`` {rank: [ids in placement order]} with every
    rank present, ``expected`` (expected_num_active_requests), ``unassigned``
    (ids to requeue, in input order) and ``ranks`` (the rank of each request in
    input order, -1 when unassigned)."""

    __slots__ = ("assignment", "expected", "unassigned", "ranks")

    def __init__(self, assignment, expected, unassigned, ranks):
        self.assignment = assignment
        self.expected = expected
        self.unassigned = unassigned
        self.ranks = ranks

    def __repr__(self):
        return "RouteResult(assignment=%r, expected=%r, unassigned=%r)" % (
            self.assignment, self.expected, self.unassigned)


# --- the C structs (layout of include/adprouter.h, x86-64/aarch64 LP64) ------

class _Option(ctypes.Structure):
    _fields_ = [("key", ctypes.c_char_p), ("value", ctypes.c_char_p)]


class _Batch(ctypes.Structure):
    _fields_ = [
        ("states", ctypes.c_void_p), ("num_states", ctypes.c_int32),
        ("num_requests", ctypes.c_int32), ("requests", ctypes.c_void_p),
        ("tokens", ctypes.c_void_p), ("tokens_len", ctypes.c_int64),
        ("text", ctypes.c_void_p), ("text_len", ctypes.c_int64),
        ("match_lens", ctypes.c_void_p), ("max_num_active_requests", ctypes.c_int32),
    ]


class _Result(ctypes.Structure):
    _fields_ = [
        ("request_rank", ctypes.c_void_p), ("order", ctypes.c_void_p),
        ("rank_offsets", ctypes.c_void_p), ("expected", ctypes.c_int32),
        ("num_unassigned", ctypes.c_int32),
    ]


class _Stats(ctypes.Structure):
    _fields_ = [
        ("decisions", ctypes.c_uint64), ("unassigned", ctypes.c_uint64),
        ("warmup_placements", ctypes.c_uint64), ("demand_placements", ctypes.c_uint64),
        ("pending_warmup", ctypes.c_int64), ("conversations", ctypes.c_int64),
        ("index_entries", ctypes.c_int64), ("index_bytes", ctypes.c_int64),
        ("num_hot_groups", ctypes.c_int32), ("reserved", ctypes.c_int32),
    ]


class _RankStats(ctypes.Structure):
    _fields_ = [
        ("placed", ctypes.c_uint64), ("predicted_hit_tokens", ctypes.c_uint64),
        ("index_blocks", ctypes.c_int64), ("index_limit_blocks", ctypes.c_int64),
        ("index_evicted_blocks", ctypes.c_uint64), ("flags", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


class _HotGroup(ctypes.Structure):
    _fields_ = [
        ("family", ctypes.c_uint64), ("requests", ctypes.c_int64), ("share", ctypes.c_double),
        ("replicas", ctypes.c_int32), ("target", ctypes.c_int32),
    ]


class _RankStateC(ctypes.Structure):
    """adpr_rank_state (include/adprouter.h)."""
    _fields_ = [("rank", ctypes.c_int32), ("num_active_requests", ctypes.c_int32),
                ("num_active_tokens", ctypes.c_int64), ("kv_capacity_tokens", ctypes.c_int64),
                ("free_kv_tokens", ctypes.c_int64), ("flags", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32)]


class _RequestC(ctypes.Structure):
    """adpr_request (include/adprouter.h)."""
    _fields_ = [("id", ctypes.c_uint64), ("token_offset", ctypes.c_int64),
                ("token_count", ctypes.c_int64), ("num_tokens", ctypes.c_int64),
                ("conversation_offset", ctypes.c_int64), ("conversation_len", ctypes.c_int64),
                ("target_rank", ctypes.c_int32), ("relax", ctypes.c_int32),
                ("lora_id", ctypes.c_uint64), ("cache_salt", ctypes.c_uint64)]


_STRUCT_CODES = {ctypes.c_int32: "i", ctypes.c_uint32: "I", ctypes.c_int64: "q",
                 ctypes.c_uint64: "Q"}


def _packer(layout):
    """A struct.Struct packing one record of a ctypes layout, so that each
    ABI struct's layout is written once (above) and packed fast here."""
    packer = struct.Struct("=" + "".join(_STRUCT_CODES[t] for _, t in layout._fields_))
    assert packer.size == ctypes.sizeof(layout), layout  # no padding in the ABI structs
    return packer


_STATE = _packer(_RankStateC)
_REQUEST = _packer(_RequestC)
_REQ_SIZE = _REQUEST.size

_ERRBUF = 512

# _INTS[k] packs k int32 values in one C call (k <= PREFIX_TOKENS).
_INTS = [struct.Struct("=%di" % k) for k in range(PREFIX_TOKENS + 1)]

# --- loading ------------------------------------------------------------------

_lib = None
_lib_lock = threading.Lock()
# adpr_route's address in _lib, for adprouter._speedups.route.
_route_address = None


def library_path():
    """Where the library is loaded from: $ADPROUTER_LIBRARY when set; else the
    libadprouter.so inside this package (an installed wheel carries one);
    else build/libadprouter.so of the source tree this package lives in."""
    p = os.environ.get("ADPROUTER_LIBRARY")
    if p:
        return p
    here = os.path.dirname(os.path.abspath(__file__))
    bundled = os.path.join(here, "libadprouter.so")
    if os.path.exists(bundled):
        return bundled
    return os.path.join(os.path.dirname(os.path.dirname(here)), "build", "libadprouter.so")


def _load():
    global _lib
    if _lib is not None:
        return _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        path = library_path()
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise Error("cannot load the adprouter library from %s (%s); build it with "
                        "./build.sh or set ADPROUTER_LIBRARY" % (path, e)) from None
        lib.adpr_abi_version.restype = ctypes.c_uint32
        lib.adpr_abi_version.argtypes = []
        lib.adpr_version.restype = ctypes.c_char_p
        lib.adpr_version.argtypes = []
        lib.adpr_strerror.restype = ctypes.c_char_p
        lib.adpr_strerror.argtypes = [ctypes.c_int32]
        lib.adpr_router_create.restype = ctypes.c_int32
        lib.adpr_router_create.argtypes = [ctypes.POINTER(_Option), ctypes.c_int32,
                                           ctypes.POINTER(ctypes.c_uint64), ctypes.c_char_p,
                                           ctypes.c_size_t]
        lib.adpr_router_destroy.restype = ctypes.c_int32
        lib.adpr_router_destroy.argtypes = [ctypes.c_uint64]
        lib.adpr_router_state_digest.restype = ctypes.c_int32
        lib.adpr_router_state_digest.argtypes = [ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64)]
        lib.adpr_router_tokens_read.restype = ctypes.c_int32
        lib.adpr_router_tokens_read.argtypes = [ctypes.c_uint64, ctypes.POINTER(ctypes.c_int32)]
        lib.adpr_router_stats.restype = ctypes.c_int32
        lib.adpr_router_stats.argtypes = [ctypes.c_uint64, ctypes.POINTER(_Stats),
                                          ctypes.POINTER(_RankStats), ctypes.c_int32,
                                          ctypes.POINTER(_HotGroup), ctypes.c_int32,
                                          ctypes.c_char_p, ctypes.c_size_t]
        lib.adpr_block_hashes.restype = ctypes.c_int32
        lib.adpr_block_hashes.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32,
                                          ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p,
                                          ctypes.c_int64, ctypes.POINTER(ctypes.c_int64),
                                          ctypes.c_char_p, ctypes.c_size_t]
        _declare_nvml(lib)
        _receipt.declare(lib)
        lib.adpr_route.restype = ctypes.c_int32
        lib.adpr_route.argtypes = [ctypes.c_uint64, ctypes.POINTER(_Batch),
                                   ctypes.POINTER(_Result), ctypes.c_char_p, ctypes.c_size_t]
        global _route_address
        _route_address = ctypes.cast(lib.adpr_route, ctypes.c_void_p).value
        got = lib.adpr_abi_version()
        if got != ABI_VERSION:
            raise Error("%s has ABI version %d, this binding needs %d" % (path, got, ABI_VERSION))
        _lib = lib
        return lib


def abi_version():
    """The loaded library's ABI version."""
    return _load().adpr_abi_version()


def version():
    """The loaded library's version string."""
    return _load().adpr_version().decode()


def block_hashes(tokens, tokens_per_block=32, lora_id=0, cache_salt=0):
    """The prefix index's keys for tokens: one 64-bit hash per full block of
    tokens_per_block tokens, chained, scoped by lora_id and cache_salt (a
    partial last block is not hashed). The router hashes a prompt without its
    last token, as engines cache it."""
    lib = _load()
    _int("tokens_per_block", tokens_per_block, 1, 65536)
    _int("lora_id", lora_id, 0, _U64)
    _int("cache_salt", cache_salt, 0, _U64)
    try:
        buf = tokens if isinstance(tokens, array) and tokens.typecode == "i" else array("i", tokens)
    except (TypeError, OverflowError) as e:
        raise InvalidArgumentError("tokens: %s (want int32 token ids)" % (e,), _INVALID_ARGUMENT) from None
    n = len(buf)
    cap = n // tokens_per_block
    out = array("Q", bytes(8 * max(cap, 1)))
    got = ctypes.c_int64(0)
    errbuf = ctypes.create_string_buffer(_ERRBUF)
    status = lib.adpr_block_hashes(buf.buffer_info()[0] if n else None, n, tokens_per_block,
                                   lora_id, cache_salt, out.buffer_info()[0], cap,
                                   ctypes.byref(got), errbuf, _ERRBUF)
    if status != _OK:
        _raise(status, errbuf)
    return out[:got.value].tolist()


# --- GPU memory and KV budgets (NVML) ----------------------------------------

class _MemoryInfo(ctypes.Structure):
    _fields_ = [("total_bytes", ctypes.c_uint64), ("free_bytes", ctypes.c_uint64),
                ("used_bytes", ctypes.c_uint64), ("reserved_bytes", ctypes.c_uint64),
                ("has_reserved", ctypes.c_int32), ("reserved", ctypes.c_int32)]


class _KVShape(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int32) for name in (
        "attention", "dtype", "layers", "kv_heads", "head_dim", "attention_tp",
        "kv_lora_rank", "qk_rope_head_dim")]


class _KVBudget(ctypes.Structure):
    _fields_ = [("free_bytes", ctypes.c_uint64), ("reserve_bytes", ctypes.c_uint64),
                ("fraction", ctypes.c_double), ("bytes_per_token", ctypes.c_uint64),
                ("tokens_per_block", ctypes.c_uint64), ("max_tokens", ctypes.c_uint64),
                ("available_bytes", ctypes.c_uint64), ("usable_bytes", ctypes.c_uint64),
                ("fit_tokens", ctypes.c_uint64), ("tokens", ctypes.c_uint64),
                ("blocks", ctypes.c_uint64), ("capped", ctypes.c_int32),
                ("reserved", ctypes.c_int32)]



_ERR = [ctypes.c_char_p, ctypes.c_size_t]


def _declare_nvml(lib):
    sig = {
        "adpr_nvml_init": _ERR,
        "adpr_nvml_shutdown": _ERR,
        "adpr_nvml_device_count": [ctypes.POINTER(ctypes.c_int32)] + _ERR,
        "adpr_nvml_memory": [ctypes.c_char_p, ctypes.POINTER(_MemoryInfo)] + _ERR,
        "adpr_kv_bytes_per_token": [ctypes.POINTER(_KVShape), ctypes.POINTER(ctypes.c_uint64)] + _ERR,
        "adpr_size_kv": [ctypes.POINTER(_KVBudget), ctypes.c_char_p, ctypes.c_size_t] + _ERR,
        "adpr_rank_state_fill_kv": [ctypes.POINTER(_RankStateC), ctypes.c_int64, ctypes.c_int64,
                                    ctypes.c_char_p, ctypes.c_uint64, ctypes.c_uint64,
                                    ctypes.c_int32] + _ERR,
    }
    for name, args in sig.items():
        fn = getattr(lib, name)
        fn.restype = ctypes.c_int32
        fn.argtypes = args


def _call(name, *args):
    errbuf = ctypes.create_string_buffer(_ERRBUF)
    try:
        status = getattr(_load(), name)(*args, errbuf, _ERRBUF)
    except (ctypes.ArgumentError, TypeError) as e:
        raise InvalidArgumentError("%s: %s" % (name, e), _INVALID_ARGUMENT) from None
    if status != _OK:
        _raise(status, errbuf)


def _int(name, v, lo, hi):
    """v as an int in [lo, hi], or InvalidArgumentError: ctypes would wrap
    out-of-range values silently."""
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise InvalidArgumentError("%s = %r, want an integer in %d..%d" % (name, v, lo, hi),
                                   _INVALID_ARGUMENT)
    return v


_I32, _I64, _U64 = 2**31 - 1, 2**63 - 1, 2**64 - 1
_MAX_GROUPS = 1 << 16


def _device(device):
    if isinstance(device, int) and not isinstance(device, bool):
        device = "index:%d" % device
    if not isinstance(device, str):
        raise InvalidArgumentError("device = %r, want a UUID, PCI bus id or NVML index" % (device,),
                                   _INVALID_ARGUMENT)
    return device.encode()


def nvml_init():
    """Initialises NVML (reference counted). Raises NVMLUnavailableError on
    a machine without an NVIDIA driver; routing does not need NVML."""
    _call("adpr_nvml_init")


def nvml_shutdown():
    """Undoes one successful nvml_init()."""
    _call("adpr_nvml_shutdown")


def nvml_device_count():
    """The number of GPUs NVML sees (all of them, whatever
    CUDA_VISIBLE_DEVICES says)."""
    n = ctypes.c_int32(0)
    _call("adpr_nvml_device_count", ctypes.byref(n))
    return n.value


def read_memory(device):
    """A GPU's memory now, in bytes: dict(total_bytes, free_bytes, used_bytes,
    reserved_bytes, has_reserved). device: a UUID ("GPU-..."; preferred), a
    PCI bus id, or an NVML index (int or "index:N"). About 10 us and a driver
    lock: never per request."""
    m = _MemoryInfo()
    _call("adpr_nvml_memory", _device(device), ctypes.byref(m))
    return dict(total_bytes=m.total_bytes, free_bytes=m.free_bytes, used_bytes=m.used_bytes,
                reserved_bytes=m.reserved_bytes, has_reserved=bool(m.has_reserved))


_ATTENTION = {"gqa": 1, "mla": 2}
_DTYPES = {"bf16": 1, "bfloat16": 1, "fp16": 2, "float16": 2, "fp8": 3, "nvfp4": 4}


def kv_bytes_per_token(layers, attention="gqa", kv_heads=0, head_dim=0, attention_tp=1,
                       kv_lora_rank=0, qk_rope_head_dim=0, dtype="bf16"):
    """KV cache bytes of one token on one rank. GQA: 2 * layers *
    max(1, kv_heads / attention_tp) * head_dim * dtype bytes; MLA: layers *
    (kv_lora_rank + qk_rope_head_dim) * dtype bytes. dtype: "bf16", "fp16",
    "fp8" or "nvfp4" (GQA only). Example: Llama-3.1-8B
    kv_bytes_per_token(32, kv_heads=8, head_dim=128) == 131072."""
    if attention not in _ATTENTION or dtype not in _DTYPES:
        raise InvalidArgumentError("attention = %r, dtype = %r; want one of %s and one of %s"
                                   % (attention, dtype, sorted(_ATTENTION), sorted(_DTYPES)),
                                   _INVALID_ARGUMENT)
    dims = [_int(n, v, 0, _I32) for n, v in (
        ("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim),
        ("attention_tp", attention_tp), ("kv_lora_rank", kv_lora_rank),
        ("qk_rope_head_dim", qk_rope_head_dim))]
    shape = _KVShape(_ATTENTION[attention], _DTYPES[dtype], *dims)
    out = ctypes.c_uint64(0)
    _call("adpr_kv_bytes_per_token", ctypes.byref(shape), ctypes.byref(out))
    return out.value


def size_kv(free_bytes, bytes_per_token, reserve_bytes=0, fraction=0.9, tokens_per_block=32,
            max_tokens=0):
    """A rank's start-up KV budget, with every figure behind it: a dict of
    the inputs plus available_bytes, usable_bytes, fit_tokens, tokens, blocks,
    capped and reason (why a budget is zero or capped; "" otherwise)."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise InvalidArgumentError("fraction = %r, want a number in (0, 1]" % (fraction,),
                                   _INVALID_ARGUMENT)
    b = _KVBudget(_int("free_bytes", free_bytes, 0, _U64), _int("reserve_bytes", reserve_bytes, 0, _U64),
                  fraction, _int("bytes_per_token", bytes_per_token, 0, _U64),
                  _int("tokens_per_block", tokens_per_block, 0, _U64),
                  _int("max_tokens", max_tokens, 0, _U64))
    reason = ctypes.create_string_buffer(256)
    _call("adpr_size_kv", ctypes.byref(b), reason, 256)
    out = {name: getattr(b, name) for name, _ in _KVBudget._fields_ if name != "reserved"}
    out["capped"] = bool(b.capped)
    out["reason"] = reason.value.decode()
    return out


def fill_rank_state(state, capacity_tokens, free_tokens, device=None, guard_band_bytes=0,
                    bytes_per_token=0, min_interval_ms=0):
    """Fills state's KV fields (kv_capacity_tokens, free_kv_tokens,
    memory_pressure) for this rank before the allgather. capacity_tokens and
    free_tokens are the engine's own pool (block counts x tokens per block);
    with a device, its free memory (read at most once per min_interval_ms, 0
    = 250 ms) is the guard: under guard_band_bytes both shrink by the deficit
    and memory_pressure is set. Returns state. On error state is unchanged."""
    _int("capacity_tokens", capacity_tokens, 0, _I64)
    _int("free_tokens", free_tokens, 0, _I64)
    _int("guard_band_bytes", guard_band_bytes, 0, _U64)
    _int("bytes_per_token", bytes_per_token, 0, _U64)
    _int("min_interval_ms", min_interval_ms, -_I32 - 1, _I32)
    c = _RankStateC(state.rank, state.num_active_requests, state.num_active_tokens,
                    getattr(state, "kv_capacity_tokens", 0), getattr(state, "free_kv_tokens", 0),
                    1 if getattr(state, "memory_pressure", False) else 0, 0)
    _call("adpr_rank_state_fill_kv", ctypes.byref(c), capacity_tokens, free_tokens,
          None if device is None else _device(device), guard_band_bytes, bytes_per_token,
          min_interval_ms)
    state.kv_capacity_tokens = c.kv_capacity_tokens
    state.free_kv_tokens = c.free_kv_tokens
    state.memory_pressure = bool(c.flags & 1)
    return state


def _raise(status, errbuf):
    msg = errbuf is not None and errbuf.value.decode("utf-8", "replace")
    msg = msg or _load().adpr_strerror(status).decode()
    raise _ERRORS.get(status, InternalError)(msg, status)


def _option_text(key, value):
    """The text the library parses for option key: the binding formats, the
    library alone parses, so both layers read an option the same way."""
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, int):
        return str(value).encode()
    if isinstance(value, float):
        return repr(value).encode()  # round-trips exactly; inf and nan are refused by the library
    if isinstance(value, str):
        if "\0" in value:
            raise ConfigError("option %s = %r contains a NUL character" % (key, value), _CONFIG)
        try:
            return value.encode()
        except UnicodeError as e:
            raise ConfigError("option %s = %r: %s" % (key, value, e), _CONFIG) from None
    raise ConfigError("option %s = %r: want a str, int, float or bool, not %s"
                      % (key, value, type(value).__name__), _CONFIG)


# --- the router ---------------------------------------------------------------

class Router:
    """One routing policy and its state (warmup set, conversation map, ...).

    Keyword arguments are the configuration options of include/adprouter.h,
    with TensorRT-LLM's names: policy ("default" | "kv_cache_aware" |
    "conversation"), dp_size (required), load_balance_weight,
    match_rate_threshold, fair_share_multiplier, cold_start_warmup,
    max_sessions, new_conv_placement, capacity_aware, explain (keep
    receipts: receipts()). Unknown names raise ConfigError.

    Safe to share between threads (calls on one router are serialised by the
    library). Close it with close() or use it as a context manager.
    """

    def __init__(self, policy="kv_cache_aware", dp_size=None, **options):
        lib = _load()
        if dp_size is None:
            raise ConfigError("dp_size is required", _CONFIG)
        opts = [("policy", policy), ("dp_size", dp_size)] + sorted(options.items())
        arr = (_Option * len(opts))()
        for i, (k, v) in enumerate(opts):
            arr[i].key = k.encode()
            arr[i].value = _option_text(k, v)
        handle = ctypes.c_uint64(0)
        errbuf = ctypes.create_string_buffer(_ERRBUF)
        status = lib.adpr_router_create(arr, len(opts), ctypes.byref(handle), errbuf, _ERRBUF)
        if status != _OK:
            _raise(status, errbuf)
        self._lib = lib
        self._handle = handle.value
        self.policy = policy
        self.dp_size = dp_size
        # How many leading tokens per request to send, as the library says
        # its decisions read them: none, the first 64 (the KV-aware grouping
        # key) or the whole prompt (None: the prefix index hashes it).
        n = ctypes.c_int32(0)
        status = lib.adpr_router_tokens_read(self._handle, ctypes.byref(n))
        if status != _OK:
            lib.adpr_router_destroy(self._handle)
            self._handle = 0
            _raise(status, None)
        self._send_tokens = None if n.value < 0 else n.value
        self._errbuf = errbuf
        self._lock = threading.Lock()

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
        if status not in (_OK, _INVALID_HANDLE, _FORKED):
            _raise(status, None)  # the handle is kept: close() may be retried
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
        if not self._handle:
            raise InvalidHandleError("the router is closed", _INVALID_HANDLE)
        maxn = max_num_active_requests
        if not isinstance(maxn, int) or not 1 <= maxn <= 0x7FFFFFFF:
            raise InvalidArgumentError("max_num_active_requests = %r, want an integer >= 1" % (maxn,),
                                       _INVALID_ARGUMENT)
        if match_format not in ("auto", "pairs"):
            raise InvalidArgumentError("match_format = %r, want \"auto\" or \"pairs\"" % (match_format,),
                                       _INVALID_ARGUMENT)
        try:
            ns, nr = len(states), len(requests)
        except TypeError as e:
            raise InvalidArgumentError("states and requests must be sequences: %s" % (e,),
                                       _INVALID_ARGUMENT) from None
        sp = _speedups
        if sp is not None and self._lib is _lib and (match_lens is None or not isinstance(match_lens, array)):
            # The C path: packing and the adpr_route call in one, through
            # the function's address (no ctypes conversions); None means
            # something unusual, which the general path below handles.
            ranks = array("i", bytes(4 * nr))
            order = array("Q", bytes(8 * nr))
            offsets = array("i", bytes(4 * (ns + 1)))
            with self._lock:
                if not self._handle:
                    raise InvalidHandleError("the router is closed", _INVALID_HANDLE)
                got = sp.route(_route_address, self._handle, states, requests, self._send_tokens, match_lens,
                               match_format == "pairs", maxn, self._errbuf, ranks, order, offsets)
                if got is not None:
                    status, expected = got
                    if status != _OK:
                        _raise(status, self._errbuf)
                    return _LazyResult(order, offsets, ranks, expected)
        sbuf = sp.pack_states(states) if sp else None
        if sbuf is None:
            sbuf = _pack_states(states)
        packed = sp.pack_requests(requests, self._send_tokens) if sp else None
        if packed is None:
            packed = _pack_requests(requests, self._send_tokens)
        rbuf, tokens, ntok, text = packed
        matches = None
        if match_lens is not None:
            matches = _match_table(match_lens, requests, ns, nr, match_format == "pairs")

        ranks = array("i", bytes(4 * nr))
        order = array("Q", bytes(8 * nr))
        offsets = array("i", bytes(4 * (ns + 1)))
        batch = _Batch(
            _address(sbuf) if ns else None, ns, nr,
            _address(rbuf) if nr else None,
            _address(tokens) if ntok else None, ntok,
            _address(text) if text else None, len(text),
            _address(matches) if matches is not None and len(matches) else None,
            maxn)
        out = _Result(ranks.buffer_info()[0], order.buffer_info()[0], offsets.buffer_info()[0], 0, 0)
        with self._lock:
            if not self._handle:
                raise InvalidHandleError("the router is closed", _INVALID_HANDLE)
            status = self._lib.adpr_route(self._handle, ctypes.byref(batch), ctypes.byref(out),
                                          self._errbuf, _ERRBUF)
            if status != _OK:
                _raise(status, self._errbuf)
        return _LazyResult(order, offsets, ranks, out.expected)

    def receipts(self):
        """Why each request of the last route() went where it did: a list of
        adprouter._receipt.Receipt, one per request in request order (create
        the router with explain=True; print one to read it)."""
        if not self._handle:
            raise InvalidHandleError("the router is closed", _INVALID_HANDLE)
        return _receipt.read(self, _raise)

    def state_digest(self):
        """A 64-bit digest of the router state that determines future
        decisions; equal on every rank that saw the same calls."""
        if not self._handle:
            raise InvalidHandleError("the router is closed", _INVALID_HANDLE)
        out = ctypes.c_uint64(0)
        with self._lock:
            status = self._lib.adpr_router_state_digest(self._handle, ctypes.byref(out))
        if status != _OK:
            _raise(status, None)
        return out.value

    def stats(self, max_groups=16):
        """Cumulative counters as a dict: decisions, unassigned,
        warmup_placements, demand_placements, pending_warmup, conversations,
        index_entries, index_bytes, ranks (a list of per-rank dicts: placed,
        predicted_hit_tokens, index_blocks, index_limit_blocks,
        index_evicted_blocks, memory_pressure) and hot_groups (family,
        requests, share, replicas, target; most requested first)."""
        if not self._handle:
            raise InvalidHandleError("the router is closed", _INVALID_HANDLE)
        _int("max_groups", max_groups, 0, _MAX_GROUPS)
        st = _Stats()
        ranks = (_RankStats * self.dp_size)()
        groups = (_HotGroup * max(max_groups, 1))()
        with self._lock:
            status = self._lib.adpr_router_stats(self._handle, ctypes.byref(st), ranks,
                                                 self.dp_size, groups, max_groups,
                                                 self._errbuf, _ERRBUF)
            if status != _OK:
                _raise(status, self._errbuf)
        out = {name: getattr(st, name) for name, _ in _Stats._fields_
               if name not in ("num_hot_groups", "reserved")}
        out["ranks"] = [dict(placed=r.placed, predicted_hit_tokens=r.predicted_hit_tokens,
                             index_blocks=r.index_blocks, index_limit_blocks=r.index_limit_blocks,
                             index_evicted_blocks=r.index_evicted_blocks,
                             memory_pressure=bool(r.flags & 1)) for r in ranks]
        out["hot_groups"] = [dict(family=g.family, requests=g.requests, share=g.share,
                                  replicas=g.replicas, target=g.target)
                             for g in groups[:st.num_hot_groups]]
        return out


# --- the packing hot path -------------------------------------------------------
#
# Router.route turns states, requests and match lengths into adpr_batch's flat
# buffers. The functions below are the reference implementation, in Python;
# adprouter._speedups (optional, C) does the same for the plain case, byte for
# byte, and returns None for anything else, which then comes here and raises
# the documented errors.

def _pack_states(states):
    """adpr_rank_state records of states, as bytes-like."""
    sbuf = array("B", bytes(_STATE.size * len(states)))
    pack = _STATE.pack_into
    i = 0
    try:
        for i, s in enumerate(states):
            pack(sbuf, _STATE.size * i, s.rank, s.num_active_requests, s.num_active_tokens,
                 getattr(s, "kv_capacity_tokens", 0), getattr(s, "free_kv_tokens", 0),
                 1 if getattr(s, "memory_pressure", False) else 0, 0)
    except (struct.error, TypeError, AttributeError) as e:
        raise InvalidArgumentError("states[%d]: %s" % (i, e), _INVALID_ARGUMENT) from None
    return sbuf


def _pack_requests(requests, send_tokens):
    """(adpr_request records, int32 tokens, token count, conversation text) of
    requests, sending send_tokens leading tokens of each (None: all)."""
    rbuf = array("B", bytes(_REQ_SIZE * len(requests)))
    chunks = []
    ntok = 0
    ints = _INTS
    text = []
    text_len = 0
    pack = _REQUEST.pack_into
    i = 0
    try:
        for i, q in enumerate(requests):
            toks = q.tokens
            n = q.num_tokens
            off = ntok
            if toks is not None:
                if n is None:
                    n = len(toks)
                elif n < len(toks):
                    raise ValueError("num_tokens = %r is less than the %d tokens given" % (n, len(toks)))
                if send_tokens != 0:
                    if isinstance(toks, (list, tuple)):
                        head = toks[:send_tokens]
                        k = len(head)
                        chunks.append(ints[k].pack(*head) if k <= PREFIX_TOKENS
                                      else struct.pack("=%di" % k, *head))
                        ntok += k
                    else:
                        mv = memoryview(toks)
                        if mv.ndim != 1 or mv.itemsize != 4 or mv.format not in ("i", "l", "=i", "<i"):
                            raise TypeError("tokens buffer has format %r and %d dimensions, want a 1-D int32 buffer"
                                            % (mv.format, mv.ndim))
                        head = mv[:send_tokens].cast("B")
                        chunks.append(head)
                        ntok += len(head) // 4
            elif n is None:
                n = 0
            cid = q.conversation_id
            coff, clen = text_len, 0
            if cid is not None and not isinstance(cid, (str, bytes, bytearray)):
                raise TypeError("conversation_id must be str, bytes or None, not %s" % type(cid).__name__)
            if cid:
                b = cid.encode() if isinstance(cid, str) else bytes(cid)
                text.append(b)
                clen = len(b)
                text_len += clen
            t = q.target_rank
            if t is not None and t < 0:
                raise ValueError("target_rank = %r, want None or 0..dp_size-1" % (t,))
            pack(rbuf, _REQ_SIZE * i, q.id, off, ntok - off, n, coff, clen,
                 NO_TARGET if t is None else t, 1 if q.relax else 0,
                 getattr(q, "lora_id", 0), getattr(q, "cache_salt", 0))
    except (struct.error, TypeError, OverflowError, ValueError, AttributeError, BufferError) as e:
        raise InvalidArgumentError("requests[%d]: %s" % (i, e), _INVALID_ARGUMENT) from None
    return rbuf, b"".join(chunks), ntok, b"".join(text)


def _match_table(match_lens, requests, ns, nr, pairs):
    """The int32 match table, row-major by request (adpr_batch.match_lens),
    from match_lens in the dict/row form or, with pairs, the raw
    [id, len, ...] form (see Router.route)."""
    if isinstance(match_lens, array) and match_lens.typecode == "i" and not pairs:
        if len(match_lens) != ns * nr:
            raise InvalidArgumentError("match_lens array has %d values, want requests x ranks (%d)"
                                       % (len(match_lens), ns * nr), _INVALID_ARGUMENT)
        return match_lens
    if not hasattr(match_lens, "__len__"):
        raise InvalidArgumentError("match_lens is a %s, want one entry per rank"
                                   % type(match_lens).__name__, _INVALID_ARGUMENT)
    if len(match_lens) != ns:
        raise InvalidArgumentError("match_lens has %d entries, want one per rank (%d)"
                                   % (len(match_lens), ns), _INVALID_ARGUMENT)
    sp = _speedups
    if sp:
        table = sp.match_table(match_lens, requests, pairs)
        if table is not None:
            return table
    out = [0] * (ns * nr)
    ids = pos = None
    r = 0
    try:
        for r, m in enumerate(match_lens):
            if pairs or isinstance(m, dict):
                if ids is None:
                    ids = [q.id for q in requests]
                    pos = {rid: i for i, rid in enumerate(ids)}
            if pairs:
                _fill_pairs(out, m, r, ns, nr, ids, pos)
            elif isinstance(m, dict):
                if len(m) == nr and list(m) == ids:
                    out[r::ns] = m.values()  # names every request, in batch order
                    continue
                try:
                    for rid, v in m.items():
                        out[pos[rid] * ns + r] = v
                except KeyError:
                    rid = next(k for k in m if k not in pos)
                    raise InvalidArgumentError(
                        "match_lens[%d] names request id %r, which is not in the batch"
                        % (r, rid), _INVALID_ARGUMENT) from None
            elif len(m) != nr:
                raise InvalidArgumentError(
                    "match_lens[%d] has %d values, want one per request (%d)"
                    % (r, len(m), nr), _INVALID_ARGUMENT)
            else:
                out[r::ns] = m
        return array("i", out)
    except (TypeError, OverflowError) as e:
        raise InvalidArgumentError("match_lens: %s" % (e,), _INVALID_ARGUMENT) from None


def _fill_pairs(out, row, r, ns, nr, ids, pos):
    """Rank r's column of the match table from its raw row [id, len, ...]."""
    if len(row) % 2:
        raise InvalidArgumentError(
            "match_lens[%d] has %d values, want [id, matched, id, matched, ...] pairs"
            % (r, len(row)), _INVALID_ARGUMENT)
    seen = bytearray(nr)
    it = iter(row)
    for rid, v in zip(it, it):
        k = pos.get(rid)
        if k is None:
            raise InvalidArgumentError(
                "match_lens[%d] names request id %r, which is not in the batch" % (r, rid),
                _INVALID_ARGUMENT)
        if seen[k]:
            raise InvalidArgumentError(
                "match_lens[%d] names request id %r twice" % (r, rid), _INVALID_ARGUMENT)
        seen[k] = 1
        out[k * ns + r] = v


def _address(buf):
    """The address of a bytes object's or an array's contents."""
    if isinstance(buf, array):
        return buf.buffer_info()[0]
    return ctypes.cast(ctypes.c_char_p(buf), ctypes.c_void_p).value


class _LazyResult(RouteResult):
    """A RouteResult decoded from the library's output arrays on first use of
    each field: routing code that reads only its own rank's list or only
    ``expected`` does not pay for building the rest."""

    __slots__ = ("_order", "_offsets", "_ranks")

    def __init__(self, order, offsets, ranks, expected):
        self._order, self._offsets, self._ranks = order, offsets, ranks
        self.expected = expected

    @property
    def assignment(self):
        try:
            return RouteResult.assignment.__get__(self)
        except AttributeError:
            order, offsets = self._order, self._offsets
            sp = _speedups
            value = sp.assignment(order, offsets) if sp else None
            if value is None:
                lists = [order[offsets[r]:offsets[r + 1]].tolist() for r in range(len(offsets) - 1)]
                value = dict(enumerate(lists))
            RouteResult.assignment.__set__(self, value)
            return value

    @assignment.setter
    def assignment(self, value):
        RouteResult.assignment.__set__(self, value)

    @property
    def unassigned(self):
        try:
            return RouteResult.unassigned.__get__(self)
        except AttributeError:
            value = self._order[self._offsets[-1]:].tolist()
            RouteResult.unassigned.__set__(self, value)
            return value

    @unassigned.setter
    def unassigned(self, value):
        RouteResult.unassigned.__set__(self, value)

    @property
    def ranks(self):
        try:
            return RouteResult.ranks.__get__(self)
        except AttributeError:
            value = self._ranks.tolist()
            RouteResult.ranks.__set__(self, value)
            return value

    @ranks.setter
    def ranks(self, value):
        RouteResult.ranks.__set__(self, value)


def _load_speedups():
    """adprouter._speedups if it was built (by the package build next to this
    file, or by build.sh into the source tree's build/python/), else None;
    ADPROUTER_NO_SPEEDUPS=1 forces the pure-Python path."""
    if os.environ.get("ADPROUTER_NO_SPEEDUPS"):
        return None
    import importlib
    try:
        # Not "from . import _speedups": that would find this module's own
        # _speedups attribute (None) before looking for the submodule.
        mod = importlib.import_module(__name__ + "._speedups")
    except ImportError:
        mod = None
    if mod is None:
        import importlib.machinery
        import importlib.util
        here = os.path.dirname(os.path.abspath(__file__))
        folder = os.path.join(os.path.dirname(os.path.dirname(here)), "build", "python", "adprouter")
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(folder, "_speedups" + suffix)
            if os.path.exists(path):
                try:
                    spec = importlib.util.spec_from_file_location(__name__ + "._speedups", path)
                    mod = importlib.util.module_from_spec(spec)
                    spec.loader.exec_module(mod)
                except ImportError:
                    mod = None
                break
    if mod is not None:
        global Request
        fast = getattr(mod, "Request", None)
        if fast is not None:
            fast.__doc__ = _PyRequest.__doc__
            Request = fast
        _use_speedups(mod)
    return mod


def _use_speedups(mod):
    """Makes the binding pack through mod (None: pure Python)."""
    global _speedups
    if mod is not None:
        mod.configure(Request, ("id", "tokens", "num_tokens", "target_rank", "relax", "conversation_id",
                                "lora_id", "cache_salt"),
                      RankState, ("rank", "num_active_requests", "num_active_tokens", "kv_capacity_tokens",
                                  "free_kv_tokens", "memory_pressure"))
    _speedups = mod


_speedups = None
_load_speedups()
