"""When a benchmark's prefix index is full: python/bench_route.py and
python/bench_trtllm.py time index mode only then, as the Go benchmark
BenchmarkIndexSteady does (router/index_test.go, fillIndex).

The first eviction comes long before the index is full: one rank's share
fills while the others' still grow (the ranks that take fewer new requests
fill last). A full index is larger, so slower, than one still filling, and
its arrays no longer grow (a growth's copy is a one-time cost).
"""

# Full: the index has evicted, and over its last SETTLE calls its entries
# grew by less than SETTLED and its memory not at all.
SETTLE = 50
SETTLED = 0.01


def evicted(stats):
    """Blocks the prefix index has evicted, all ranks together, from a
    stats() dict (Router.stats() or the TensorRT-LLM drop-in's)."""
    return sum(r.get("index_evicted_blocks", 0) for r in stats.get("ranks", []))


class Filling:
    """Follows one router's index call by call: full(stats) after each."""

    def __init__(self):
        self._held = []

    def full(self, stats):
        """Records stats (the router's stats() dict after a call) and says
        whether the index is full."""
        held = self._held
        held.append((stats.get("index_entries", 0), stats.get("index_bytes", 0)))
        if len(held) <= SETTLE or evicted(stats) == 0:
            return False
        (n0, b0), (n1, b1) = held[-1 - SETTLE], held[-1]
        return n1 - n0 < SETTLED * n1 and b1 == b0
