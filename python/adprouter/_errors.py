"""The status codes of include/adprouter.h, the exceptions they raise, and
the integer check every wrapper makes before handing a number to ctypes.

The library answers every call with a status; ``ERRORS`` maps each non-OK
status to the exception class the binding raises for it (any status not in
the map is an InternalError). Nothing here loads the library: the message
text comes from the caller (an error buffer, or adpr_strerror via
_abi.raise_status).
"""

from . import _consts as C

# Status codes (include/adprouter.h, through _consts).
OK, INVALID_ARGUMENT, INVALID_HANDLE, CONFIG, INTERNAL = (C.OK, C.ERR_INVALID_ARGUMENT, C.ERR_INVALID_HANDLE,
                                                          C.ERR_CONFIG, C.ERR_INTERNAL)
NVML_UNAVAILABLE, GPU_LOST, NOT_SUPPORTED, NO_PERMISSION, NOT_FOUND = (
    C.ERR_NVML_UNAVAILABLE, C.ERR_GPU_LOST, C.ERR_NOT_SUPPORTED, C.ERR_NO_PERMISSION, C.ERR_NOT_FOUND)
NVML, FORKED, SHORT_BUFFER = C.ERR_NVML, C.ERR_FORKED, C.ERR_SHORT_BUFFER


class Error(Exception):
    """An error reported by adprouter; ``status`` is the library's code."""

    def __init__(self, message, status=INTERNAL):
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


ERRORS = {
    INVALID_ARGUMENT: InvalidArgumentError,
    CONFIG: ConfigError,
    INVALID_HANDLE: InvalidHandleError,
    NVML_UNAVAILABLE: NVMLUnavailableError,
    GPU_LOST: GPULostError,
    NOT_SUPPORTED: NVMLNotSupportedError,
    NO_PERMISSION: NVMLPermissionError,
    NOT_FOUND: GPUNotFoundError,
    NVML: NVMLError,
    FORKED: ForkedError,
}


def check_int(name, v, lo, hi):
    """v as an int in [lo, hi], or InvalidArgumentError: ctypes would wrap
    out-of-range values silently."""
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise InvalidArgumentError("%s = %r, want an integer in %d..%d" % (name, v, lo, hi),
                                   INVALID_ARGUMENT)
    return v


# Bounds of the C integer types, for check_int.
I32, I64, U64 = 2**31 - 1, 2**63 - 1, 2**64 - 1
