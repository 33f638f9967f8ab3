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

The package is split into private modules with one job each; this file only
re-exports. Imports run one way, each module from those above it:

    _errors   status codes, the exception classes, integer checks
    _types    RankState, Request (pure Python), RouteResult
    _abi      every struct layout and function signature of adprouter.h,
              loading the library, raising a status
    _options  option values as the text the library parses
    _accel    the optional C packer adprouter._speedups and the switch
              between it and pure Python (_accel.use)
    _pack     batches into adpr_batch buffers, results out (pure Python)
    _nvml     GPU memory and KV sizing
    _receipt  Router.receipts(): adpr_receipt decoded into Receipt objects
    _router   Router (and block_hashes)
    trtllm    the TensorRT-LLM drop-in (public, imported on demand)

A new library function is one line in _abi.SIGNATURES (and its structs in
_abi); its wrapper goes in the module of its job (a Router method in
_router, a new job in a new module importing from those above), and its
public names are re-exported here and listed in __all__.
"""

from . import _types
from ._abi import ABI_VERSION, NO_TARGET, abi_version, library_path, version
from ._accel import Request
from ._errors import (ConfigError, Error, ForkedError, GPULostError, GPUNotFoundError, InternalError,
                      InvalidArgumentError, InvalidHandleError, NVMLError, NVMLNotSupportedError,
                      NVMLPermissionError, NVMLUnavailableError)
from ._nvml import (fill_rank_state, kv_bytes_per_token, nvml_device_count, nvml_init, nvml_shutdown,
                    read_memory, size_kv)
from ._pack import PREFIX_TOKENS
from ._router import Router, block_hashes, option_schema, preset_options
from ._types import RankState, RouteResult

# The pure-Python Request, also when the C one is exported (docs/performance.md).
_PyRequest = _types.Request

__all__ = [
    "Router", "RankState", "Request", "RouteResult",
    "Error", "InvalidArgumentError", "ConfigError", "InvalidHandleError", "InternalError",
    "library_path", "abi_version", "version", "block_hashes", "option_schema", "preset_options",
    "NVMLError", "NVMLUnavailableError", "GPULostError", "NVMLNotSupportedError",
    "NVMLPermissionError", "GPUNotFoundError", "ForkedError",
    "nvml_init", "nvml_shutdown", "nvml_device_count", "read_memory",
    "kv_bytes_per_token", "size_kv", "fill_rank_state",
]

# The public names say they are adprouter's, wherever they are defined, as
# they did before the split (reprs, tracebacks, pickles, help()); so does the
# pure-Python Request when the C one is exported (the C type says so itself).
for _obj in [globals()[_name] for _name in __all__] + [_PyRequest]:
    if getattr(_obj, "__module__", "").startswith(__name__ + "._"):
        _obj.__module__ = __name__
del _obj
