"""The C ABI of libadprouter.so: each struct's layout, each function's
signature, and loading the library.

Every layout and signature of include/adprouter.h the binding uses is
written here once (python/tests/test_abi_layout.py checks the layouts
against the header). A new export is declared by adding its line to
SIGNATURES; nothing else needs to know.
"""

import ctypes
import os
import struct
import threading

from . import _consts
from ._errors import ERRORS, INVALID_ARGUMENT, OK, SHORT_BUFFER, Error, InternalError, InvalidArgumentError

ABI_VERSION = _consts.ABI_VERSION
NO_TARGET = _consts.NO_TARGET

# Room for the library's error messages (the errbuf of every call): any
# message fits ADPR_MESSAGE_MAX.
ERRBUF = _consts.MESSAGE_MAX


# --- the C structs (layout of include/adprouter.h, x86-64/aarch64 LP64) ------

class Option(ctypes.Structure):
    """adpr_option."""
    _fields_ = [("key", ctypes.c_char_p), ("value", ctypes.c_char_p)]


class Batch(ctypes.Structure):
    """adpr_batch."""
    _fields_ = [
        ("states", ctypes.c_void_p), ("num_states", ctypes.c_int32),
        ("num_requests", ctypes.c_int32), ("requests", ctypes.c_void_p),
        ("tokens", ctypes.c_void_p), ("tokens_len", ctypes.c_int64),
        ("text", ctypes.c_void_p), ("text_len", ctypes.c_int64),
        ("match_lens", ctypes.c_void_p), ("max_num_active_requests", ctypes.c_int32),
    ]


class Result(ctypes.Structure):
    """adpr_route_result."""
    _fields_ = [
        ("request_rank", ctypes.c_void_p), ("order", ctypes.c_void_p),
        ("rank_offsets", ctypes.c_void_p), ("expected", ctypes.c_int32),
        ("num_unassigned", ctypes.c_int32),
    ]


class Stats(ctypes.Structure):
    """adpr_stats."""
    _fields_ = [
        ("decisions", ctypes.c_uint64), ("unassigned", ctypes.c_uint64),
        ("warmup_placements", ctypes.c_uint64), ("demand_placements", ctypes.c_uint64),
        ("pending_warmup", ctypes.c_int64), ("conversations", ctypes.c_int64),
        ("index_entries", ctypes.c_int64), ("index_bytes", ctypes.c_int64),
    ]


class RankStats(ctypes.Structure):
    """adpr_rank_stats."""
    _fields_ = [
        ("placed", ctypes.c_uint64), ("predicted_hit_tokens", ctypes.c_uint64),
        ("index_blocks", ctypes.c_int64), ("index_limit_blocks", ctypes.c_int64),
        ("index_evicted_blocks", ctypes.c_uint64), ("flags", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


class HotGroup(ctypes.Structure):
    """adpr_hot_group."""
    _fields_ = [
        ("family", ctypes.c_uint64), ("requests", ctypes.c_int64), ("share", ctypes.c_double),
        ("replicas", ctypes.c_int32), ("target", ctypes.c_int32),
    ]


class RankStateC(ctypes.Structure):
    """adpr_rank_state."""
    _fields_ = [("rank", ctypes.c_int32), ("num_active_requests", ctypes.c_int32),
                ("num_active_tokens", ctypes.c_int64), ("kv_capacity_tokens", ctypes.c_int64),
                ("free_kv_tokens", ctypes.c_int64), ("flags", ctypes.c_uint32),
                ("reserved", ctypes.c_uint32), ("pending_kv_tokens", ctypes.c_int64),
                ("evictable_kv_tokens", ctypes.c_int64)]


class RequestC(ctypes.Structure):
    """adpr_request."""
    _fields_ = [("id", ctypes.c_uint64), ("token_offset", ctypes.c_int64),
                ("token_count", ctypes.c_int64), ("num_tokens", ctypes.c_int64),
                ("conversation_offset", ctypes.c_int64), ("conversation_len", ctypes.c_int64),
                ("target_rank", ctypes.c_int32), ("relax", ctypes.c_int32),
                ("lora_id", ctypes.c_uint64), ("cache_salt", ctypes.c_uint64),
                ("max_new_tokens", ctypes.c_int64)]


class MemoryInfo(ctypes.Structure):
    """adpr_memory_info."""
    _fields_ = [("total_bytes", ctypes.c_uint64), ("free_bytes", ctypes.c_uint64),
                ("used_bytes", ctypes.c_uint64), ("reserved_bytes", ctypes.c_uint64),
                ("has_reserved", ctypes.c_int32), ("reserved", ctypes.c_int32)]


class KVShape(ctypes.Structure):
    """adpr_kv_shape."""
    _fields_ = [(name, ctypes.c_int32) for name in (
        "attention", "dtype", "layers", "kv_heads", "head_dim", "attention_tp",
        "kv_lora_rank", "qk_rope_head_dim")]


class KVBudget(ctypes.Structure):
    """adpr_kv_budget."""
    _fields_ = [("free_bytes", ctypes.c_uint64), ("reserve_bytes", ctypes.c_uint64),
                ("fraction", ctypes.c_double), ("bytes_per_token", ctypes.c_uint64),
                ("tokens_per_block", ctypes.c_uint64), ("max_tokens", ctypes.c_uint64),
                ("available_bytes", ctypes.c_uint64), ("usable_bytes", ctypes.c_uint64),
                ("fit_tokens", ctypes.c_uint64), ("tokens", ctypes.c_uint64),
                ("blocks", ctypes.c_uint64), ("capped", ctypes.c_int32),
                ("reserved", ctypes.c_int32)]


_STRUCT_CODES = {ctypes.c_int32: "i", ctypes.c_uint32: "I", ctypes.c_int64: "q",
                 ctypes.c_uint64: "Q"}


def _packer(layout):
    """A struct.Struct packing one record of a ctypes layout, so that each
    ABI struct's layout is written once (above) and packed fast (_pack)."""
    packer = struct.Struct("=" + "".join(_STRUCT_CODES[t] for _, t in layout._fields_))
    assert packer.size == ctypes.sizeof(layout), layout  # no padding in the ABI structs
    return packer


STATE = _packer(RankStateC)
REQUEST = _packer(RequestC)

_RANGES = {ctypes.c_int32: ("int32", -(1 << 31), (1 << 31) - 1), ctypes.c_uint32: ("uint32", 0, (1 << 32) - 1),
           ctypes.c_int64: ("int64", -(1 << 63), (1 << 63) - 1), ctypes.c_uint64: ("uint64", 0, (1 << 64) - 1)}


def out_of_range(layout, values):
    """Why values (one record of layout, in field order) do not pack: the
    first int field outside its C type's range, as "name = value is out of
    the type range"; None when every int field is in range."""
    for (name, t), v in zip(layout._fields_, values):
        kind, lo, hi = _RANGES[t]
        if isinstance(v, int) and not lo <= v <= hi:
            return "%s = %d is out of the %s range" % (name, v, kind)
    return None


# --- the functions ----------------------------------------------------------------

class ReceiptC(ctypes.Structure):
    """adpr_receipt (include/adprouter.h)."""
    _fields_ = [("id", ctypes.c_uint64), ("rank", ctypes.c_int32), ("reason", ctypes.c_int32),
                ("num_tokens", ctypes.c_int64), ("step", ctypes.c_int32),
                ("replica_wanted", ctypes.c_int32),
                ("max_match", ctypes.c_int64),
                ("match_rate", ctypes.c_double), ("threshold", ctypes.c_double),
                ("expected", ctypes.c_int32), ("eligible", ctypes.c_int32),
                ("affinity", ctypes.c_int32), ("ties", ctypes.c_int32),
                ("capacity_fallback", ctypes.c_int32), ("num_candidates", ctypes.c_int32),
                ("candidate_offset", ctypes.c_int64)]


class CandidateC(ctypes.Structure):
    """adpr_candidate (include/adprouter.h)."""
    _fields_ = [("rank", ctypes.c_int32), ("excluded", ctypes.c_int32), ("match", ctypes.c_int64),
                ("tokens", ctypes.c_double), ("load_term", ctypes.c_double), ("score", ctypes.c_double),
                ("requests", ctypes.c_int32), ("shuffle_pos", ctypes.c_int32)]


class BindingC(ctypes.Structure):
    """adpr_binding (include/adprouter.h)."""
    _fields_ = [("id_offset", ctypes.c_int64), ("id_length", ctypes.c_int32), ("rank", ctypes.c_int32)]


_P = ctypes.POINTER
_ERR = [ctypes.c_char_p, ctypes.c_size_t]  # the trailing errbuf, errbuf_len

# name: (restype, argtypes) of every adpr_* function the binding calls. A
# new export goes here, in the order of include/adprouter.h.
SIGNATURES = {
    "adpr_abi_version": (ctypes.c_uint32, []),
    "adpr_version": (ctypes.c_char_p, []),
    "adpr_strerror": (ctypes.c_char_p, [ctypes.c_int32]),
    "adpr_router_create": (ctypes.c_int32, [_P(Option), ctypes.c_int32, _P(ctypes.c_uint64)] + _ERR),
    "adpr_preset_options": (ctypes.c_int32, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                             ctypes.c_int64, _P(ctypes.c_int64)] + _ERR),
    "adpr_option_schema": (ctypes.c_int32, [ctypes.c_char_p, ctypes.c_int64, _P(ctypes.c_int64)] + _ERR),
    "adpr_router_options": (ctypes.c_int32, [ctypes.c_uint64, ctypes.c_char_p, ctypes.c_int64,
                                             _P(ctypes.c_int64)] + _ERR),
    "adpr_router_destroy": (ctypes.c_int32, [ctypes.c_uint64]),
    "adpr_router_state_digest": (ctypes.c_int32, [ctypes.c_uint64, _P(ctypes.c_uint64)]),
    "adpr_router_tokens_read": (ctypes.c_int32, [ctypes.c_uint64, _P(ctypes.c_int32)]),
    "adpr_router_receipts": (ctypes.c_int32, [ctypes.c_uint64, _P(ReceiptC), ctypes.c_int64, _P(CandidateC),
                                              ctypes.c_int64, _P(ctypes.c_int64), _P(ctypes.c_int64)] + _ERR),
    "adpr_router_receipt_text": (ctypes.c_int32, [ctypes.c_uint64, ctypes.c_int64, ctypes.c_char_p,
                                                  ctypes.c_int64, _P(ctypes.c_int64)] + _ERR),
    "adpr_router_stats": (ctypes.c_int32, [ctypes.c_uint64, _P(Stats), _P(RankStats), ctypes.c_int32,
                                           _P(HotGroup), ctypes.c_int64, _P(ctypes.c_int64)] + _ERR),
    "adpr_router_pending_warmup": (ctypes.c_int32, [ctypes.c_uint64, _P(ctypes.c_int32), ctypes.c_int64,
                                                    _P(ctypes.c_int64)] + _ERR),
    "adpr_router_set_pending_warmup": (ctypes.c_int32, [ctypes.c_uint64, _P(ctypes.c_int32),
                                                        ctypes.c_int64] + _ERR),
    "adpr_router_conversations": (ctypes.c_int32, [ctypes.c_uint64, _P(BindingC), ctypes.c_int64,
                                                   ctypes.c_char_p, ctypes.c_int64, _P(ctypes.c_int64),
                                                   _P(ctypes.c_int64)] + _ERR),
    "adpr_block_hashes": (ctypes.c_int32, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32,
                                           ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p,
                                           ctypes.c_int64, _P(ctypes.c_int64)] + _ERR),
    "adpr_nvml_init": (ctypes.c_int32, _ERR),
    "adpr_nvml_shutdown": (ctypes.c_int32, _ERR),
    "adpr_nvml_device_count": (ctypes.c_int32, [_P(ctypes.c_int32)] + _ERR),
    "adpr_nvml_memory": (ctypes.c_int32, [ctypes.c_char_p, _P(MemoryInfo)] + _ERR),
    "adpr_kv_bytes_per_token": (ctypes.c_int32, [_P(KVShape), _P(ctypes.c_uint64)] + _ERR),
    "adpr_size_kv": (ctypes.c_int32, [_P(KVBudget), ctypes.c_char_p, ctypes.c_size_t] + _ERR),
    "adpr_rank_state_fill_kv": (ctypes.c_int32, [_P(RankStateC), ctypes.c_int64, ctypes.c_int64,
                                                 ctypes.c_char_p, ctypes.c_uint64, ctypes.c_uint64,
                                                 ctypes.c_int32] + _ERR),
    "adpr_route": (ctypes.c_int32, [ctypes.c_uint64, _P(Batch), _P(Result)] + _ERR),
}


# --- loading ------------------------------------------------------------------

lib = None  # the loaded library (load() sets it once)
_lib_lock = threading.Lock()
# adpr_route's address in lib, for adprouter._speedups.route.
route_address = None


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


def load():
    """The library, loaded and declared on first use (not at import)."""
    global lib, route_address
    if lib is not None:
        return lib
    with _lib_lock:
        if lib is not None:
            return lib
        path = library_path()
        try:
            loaded = ctypes.CDLL(path)
        except OSError as e:
            raise Error("cannot load the adprouter library from %s (%s); build it with "
                        "./build.sh or set ADPROUTER_LIBRARY" % (path, e)) from None
        for name, (restype, argtypes) in SIGNATURES.items():
            fn = getattr(loaded, name)
            fn.restype = restype
            fn.argtypes = argtypes
        route_address = ctypes.cast(loaded.adpr_route, ctypes.c_void_p).value
        got = loaded.adpr_abi_version()
        if got != ABI_VERSION:
            raise Error("%s has ABI version %d, this binding needs %d" % (path, got, ABI_VERSION))
        lib = loaded
        return lib


def abi_version():
    """The loaded library's ABI version."""
    return load().adpr_abi_version()


def version():
    """The loaded library's version string."""
    return load().adpr_version().decode()


def raise_status(status, errbuf):
    """Raises the exception of a non-OK status, with errbuf's message (or
    the library's text for the status when there is none)."""
    msg = errbuf is not None and errbuf.value.decode("utf-8", "replace")
    msg = msg or load().adpr_strerror(status).decode()
    raise ERRORS.get(status, InternalError)(msg, status)


def call(name, *args):
    """Calls the adpr_* function name with args and a fresh errbuf; raises
    on a non-OK status."""
    errbuf = ctypes.create_string_buffer(ERRBUF)
    try:
        status = getattr(load(), name)(*args, errbuf, ERRBUF)
    except (ctypes.ArgumentError, TypeError) as e:
        raise InvalidArgumentError("%s: %s" % (name, e), INVALID_ARGUMENT) from None
    if status != OK:
        raise_status(status, errbuf)


def text(name, *args, initial=4096):
    """The NUL-terminated text that export name writes after args
    (name(*args, out, capacity, &total, err, err_len)), decoded, under the
    header's buffer rule: a buffer short of the total gets
    ADPR_ERR_SHORT_BUFFER and the total, and the call is repeated with a
    buffer that size."""
    fn = getattr(load(), name)
    errbuf = ctypes.create_string_buffer(ERRBUF)
    total = ctypes.c_int64(0)
    size = initial
    for _ in range(8):  # the text may grow between calls (another thread's decision)
        buf = ctypes.create_string_buffer(size)
        status = fn(*args, buf, size, ctypes.byref(total), errbuf, ERRBUF)
        if status == SHORT_BUFFER and total.value > size:
            size = total.value
            continue
        if status != OK:
            raise_status(status, errbuf)
        return buf.value.decode()
    raise InternalError("%s: the text kept growing while it was read" % name)
