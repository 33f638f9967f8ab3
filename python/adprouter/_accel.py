"""The optional C packer, adprouter._speedups: finding it at import, and the
switch between it and the pure-Python packing of _pack.

``speedups`` is the module packing now (None: pure Python); _pack and
_router read it at each call, so use() swaps the implementation everywhere.
``Request`` is the class the package exports: the extension's C type of the
same shape when it has one (it constructs several times faster), else the
pure-Python class of _types.
"""

import importlib
import importlib.machinery
import importlib.util
import os

from ._types import RankState
from ._types import Request as PyRequest

speedups = None
Request = PyRequest


def use(mod):
    """Makes the binding pack through mod (None: pure Python)."""
    global speedups
    if mod is not None:
        mod.configure(Request, PyRequest.__slots__, RankState, RankState.__slots__)
    speedups = mod


def load():
    """adprouter._speedups if it was built (by the package build next to this
    file, or by build.sh into the source tree's build/python/), else None;
    ADPROUTER_NO_SPEEDUPS=1 forces the pure-Python path. A module found is
    put in use, and its Request becomes the exported one."""
    global Request
    if os.environ.get("ADPROUTER_NO_SPEEDUPS"):
        return None
    name = __package__ + "._speedups"
    try:
        mod = importlib.import_module(name)
    except ImportError:
        mod = None
    if mod is None:
        here = os.path.dirname(os.path.abspath(__file__))
        folder = os.path.join(os.path.dirname(os.path.dirname(here)), "build", "python", "adprouter")
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(folder, "_speedups" + suffix)
            if os.path.exists(path):
                try:
                    spec = importlib.util.spec_from_file_location(name, path)
                    mod = importlib.util.module_from_spec(spec)
                    spec.loader.exec_module(mod)
                except ImportError:
                    mod = None
                break
    if mod is not None:
        fast = getattr(mod, "Request", None)
        if fast is not None:
            fast.__doc__ = PyRequest.__doc__
            Request = fast
        use(mod)
    return mod


load()
