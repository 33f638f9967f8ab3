"""GPU memory (NVML) and KV-cache sizing: the wrappers of the library's
adpr_nvml_* and KV functions, which fill a RankState's KV fields before the
allgather. Routing never needs NVML; every failure raises an NVMLError
subclass (or InvalidArgumentError for a bad argument).
"""

import ctypes

from ._abi import ERRBUF, KVBudget, KVShape, MemoryInfo, RankStateC, call
from ._errors import I32, I64, INVALID_ARGUMENT, U64, InvalidArgumentError, check_int


def _device(device):
    if isinstance(device, int) and not isinstance(device, bool):
        device = "index:%d" % device
    if not isinstance(device, str):
        raise InvalidArgumentError("device = %r, want a UUID, PCI bus id or NVML index" % (device,),
                                   INVALID_ARGUMENT)
    return device.encode()


def nvml_init():
    """Initialises NVML (reference counted). Raises NVMLUnavailableError on
    a machine without an NVIDIA driver; routing does not need NVML."""
    call("adpr_nvml_init")


def nvml_shutdown():
    """Undoes one successful nvml_init()."""
    call("adpr_nvml_shutdown")


def nvml_device_count():
    """The number of GPUs NVML sees (all of them, whatever
    CUDA_VISIBLE_DEVICES says)."""
    n = ctypes.c_int32(0)
    call("adpr_nvml_device_count", ctypes.byref(n))
    return n.value


def read_memory(device):
    """A GPU's memory now, in bytes: dict(total_bytes, free_bytes, used_bytes,
    reserved_bytes, has_reserved). device: a UUID ("GPU-..."; preferred), a
    PCI bus id, or an NVML index (int or "index:N"). About 10 us and a driver
    lock: never per request."""
    m = MemoryInfo()
    call("adpr_nvml_memory", _device(device), ctypes.byref(m))
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
                                   INVALID_ARGUMENT)
    dims = [check_int(n, v, 0, I32) for n, v in (
        ("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim),
        ("attention_tp", attention_tp), ("kv_lora_rank", kv_lora_rank),
        ("qk_rope_head_dim", qk_rope_head_dim))]
    shape = KVShape(_ATTENTION[attention], _DTYPES[dtype], *dims)
    out = ctypes.c_uint64(0)
    call("adpr_kv_bytes_per_token", ctypes.byref(shape), ctypes.byref(out))
    return out.value


def size_kv(free_bytes, bytes_per_token, reserve_bytes=0, fraction=0.9, tokens_per_block=32,
            max_tokens=0):
    """A rank's start-up KV budget, with every figure behind it: a dict of
    the inputs plus available_bytes, usable_bytes, fit_tokens, tokens, blocks,
    capped and reason (why a budget is zero or capped; "" otherwise)."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise InvalidArgumentError("fraction = %r, want a number in (0, 1]" % (fraction,),
                                   INVALID_ARGUMENT)
    b = KVBudget(check_int("free_bytes", free_bytes, 0, U64), check_int("reserve_bytes", reserve_bytes, 0, U64),
                  fraction, check_int("bytes_per_token", bytes_per_token, 0, U64),
                  check_int("tokens_per_block", tokens_per_block, 0, U64),
                  check_int("max_tokens", max_tokens, 0, U64))
    reason = ctypes.create_string_buffer(ERRBUF)  # ADPR_MESSAGE_MAX holds any reason
    call("adpr_size_kv", ctypes.byref(b), reason, ERRBUF)
    out = {name: getattr(b, name) for name, _ in KVBudget._fields_ if name != "reserved"}
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
    check_int("capacity_tokens", capacity_tokens, 0, I64)
    check_int("free_tokens", free_tokens, 0, I64)
    check_int("guard_band_bytes", guard_band_bytes, 0, U64)
    check_int("bytes_per_token", bytes_per_token, 0, U64)
    check_int("min_interval_ms", min_interval_ms, -I32 - 1, I32)
    c = RankStateC(state.rank, state.num_active_requests, state.num_active_tokens,
                    getattr(state, "kv_capacity_tokens", 0), getattr(state, "free_kv_tokens", 0),
                    1 if getattr(state, "memory_pressure", False) else 0, 0)
    call("adpr_rank_state_fill_kv", ctypes.byref(c), capacity_tokens, free_tokens,
          None if device is None else _device(device), guard_band_bytes, bytes_per_token,
          min_interval_ms)
    state.kv_capacity_tokens = c.kv_capacity_tokens
    state.free_kv_tokens = c.free_kv_tokens
    state.memory_pressure = bool(c.flags & 1)
    return state
