"""The interpreter-start hook of the adprouter wheel: with TRTLLM_ADPROUTER=1,
TensorRT-LLM's ADPRouter.create returns adprouter.trtllm's routers in every
process that imports TensorRT-LLM's router module, the MPI workers
TensorRT-LLM spawns included.

The wheel installs this module and adprouter-trtllm.pth at the root of
site-packages. Python runs the .pth's one line at every interpreter start:
it imports this module and calls main() only when TRTLLM_ADPROUTER is set
(and not "0"/"false") or the process is an MPI rank (OMPI_COMM_WORLD_RANK,
PMIX_RANK or PMI_RANK in the environment), so any other interpreter pays
a few environment look-ups. The MPI case is there because TensorRT-LLM
forwards TRTLLM* variables to the workers it spawns with mpi4py's
MPIPoolExecutor(env=...), which sets them in the worker after the
interpreter started: the hook then decides when TensorRT-LLM's router
module is imported, by which time they are set.

This module imports nothing but the standard library's os, sys and warnings
at start, and never tensorrt_llm: an import hook waits for TensorRT-LLM's
router module and patches it right after it has run (through
adprouter.trtllm, imported then). Nothing here raises: a TensorRT-LLM whose
router module or factory this adprouter does not know, or a library that
does not load, leaves TensorRT-LLM's own router in place, with a warning.
"""

import os
import sys
import warnings

# TensorRT-LLM's router modules, newest first.
TRTLLM_MODULES = (
    "tensorrt_llm._torch.pyexecutor.scheduler.adp_router",
    "tensorrt_llm._torch.pyexecutor.adp_router",
)

VARIABLE = "TRTLLM_ADPROUTER"
_ON = ("1", "true", "True")
_OFF = ("", "0", "false", "False")


def enabled(environ=None):
    """Whether the environment asks for adprouter: TRTLLM_ADPROUTER is "1"
    or "true" (the library's boolean grammar). Any other value but "0",
    "false" or unset is a mistake, warned about, and leaves it off."""
    value = (os.environ if environ is None else environ).get(VARIABLE, "").strip()
    if value in _ON:
        return True
    if value not in _OFF:
        warnings.warn("adprouter: %s=%r is not understood (want 1 or true to route with adprouter, 0 or "
                      "false not to); TensorRT-LLM keeps its own router" % (VARIABLE, value), stacklevel=2)
    return False


def _patch(module):
    """Makes module's ADPRouter.create return adprouter's routers when the
    environment asks for it; a failure is a warning."""
    if not enabled():
        return
    try:
        from adprouter import _abi, trtllm
        _abi.load()  # a library that does not load: keep TensorRT-LLM's router
        trtllm._patch_module(module)
    except Exception as e:  # never take the engine down from an import hook
        warnings.warn("adprouter: could not install into %s (%s: %s); TensorRT-LLM keeps its own router"
                      % (getattr(module, "__name__", module), type(e).__name__, e))


class _Loader:
    """Runs the real loader, then patches the module it made."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        _patch(module)


class _Finder:
    """Finds TensorRT-LLM's router modules through the other finders and
    wraps their loader; every other import passes by after one test."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in TRTLLM_MODULES:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _Loader(spec.loader)
            return spec
        return None


def main():
    """What adprouter-trtllm.pth runs: patches TensorRT-LLM's router module
    now if it is loaded, and when it is imported otherwise. Idempotent."""
    try:
        for name in TRTLLM_MODULES:
            if name in sys.modules:
                _patch(sys.modules[name])
        if not any(isinstance(f, _Finder) for f in sys.meta_path):
            sys.meta_path.insert(0, _Finder())
    except Exception as e:
        warnings.warn("adprouter: the start-up hook failed (%s: %s); TensorRT-LLM keeps its own router"
                      % (type(e).__name__, e))
