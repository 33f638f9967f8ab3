"""A fake TensorRT-LLM package written to disk, for the tests of the
interpreter-start hook (adprouter/_startup.py, adprouter-trtllm.pth):
test_startup.py, and the Go tests hook_test.go and install_test.go, which
run this file as a script::

    python3 fake_trtllm.py DIR [VARIANT]

It writes DIR/tensorrt_llm/ (with ``__version__``) down to the router module
``tensorrt_llm._torch.pyexecutor.scheduler.adp_router``: an abstract
``ADPRouter`` (abc.ABC) whose classmethod ``create`` returns THEIRS, and its
``DefaultADPRouter``, ``KVCacheAwareADPRouter`` and
``ConversationAwareADPRouter`` subclasses, as TensorRT-LLM has them. VARIANT
picks create's parameters (SIGNATURES); "no_create" leaves create out (a
router module this adprouter does not know), "old_path" puts the module
where older TensorRT-LLM releases had it. Standard library only; nothing
here imports adprouter.
"""

import os
import sys

MODULE = "tensorrt_llm._torch.pyexecutor.scheduler.adp_router"
OLD_MODULE = "tensorrt_llm._torch.pyexecutor.adp_router"
VERSION = "0.0.0+fake"
THEIRS = "theirs"  # what the fake's own create returns

_PINNED = "dist, kv_cache_manager=None, attention_dp_config=None, async_transfer_manager=None"

# ADPRouter.create's parameters after cls.
SIGNATURES = {
    # TensorRT-LLM at the commit adprouter.trtllm follows.
    "pinned": _PINNED,
    # Newer releases.
    "headroom": "dist, has_seq_slot_headroom, kv_cache_manager=None, attention_dp_config=None, "
                "async_transfer_manager=None",
    # Releases this adprouter does not know.
    "dkv": _PINNED + ", dkv_enabled=False",
    "kwargs": _PINNED + ", **kwargs",
    "no_create": None,
    "old_path": _PINNED,
}

_ROUTER = '''"""A fake of TensorRT-LLM's router module (adprouter's tests)."""

import abc


class ADPRouter(abc.ABC):
    def __init__(self, dist):
        self.dist = dist

    @abc.abstractmethod
    def route_requests(self, all_rank_states, new_requests, max_num_active_requests):
        ...
%(create)s

class DefaultADPRouter(ADPRouter):
    def route_requests(self, all_rank_states, new_requests, max_num_active_requests):
        return {}, 0


class KVCacheAwareADPRouter(ADPRouter):
    needs_prefix_matches = True

    def route_requests(self, all_rank_states, new_requests, max_num_active_requests):
        return {}, 0


class ConversationAwareADPRouter(ADPRouter):
    def route_requests(self, all_rank_states, new_requests, max_num_active_requests):
        return {}, 0
'''

_CREATE = '''
    @classmethod
    def create(cls, %s):
        return %r
'''


def write(root, variant="pinned"):
    """Writes the fake package under root; returns the router module's name."""
    if variant not in SIGNATURES:
        raise ValueError("variant %r: want one of %s" % (variant, ", ".join(SIGNATURES)))
    module = OLD_MODULE if variant == "old_path" else MODULE
    params = SIGNATURES[variant]
    parts = module.split(".")
    for i in range(1, len(parts)):
        d = os.path.join(root, *parts[:i])
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "__init__.py"), "w") as f:
            f.write('__version__ = %r\n' % VERSION if i == 1 else "")
    create = _CREATE % (params, THEIRS) if params is not None else ""
    with open(os.path.join(root, *parts) + ".py", "w") as f:
        f.write(_ROUTER % {"create": create})
    return module


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: fake_trtllm.py DIR [%s]" % "|".join(SIGNATURES))
    print(write(*sys.argv[1:]))
