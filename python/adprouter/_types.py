"""The public value types: what a rank reports (RankState), one new request
(Request) and one decision (RouteResult).

Request here is the pure-Python definition; when adprouter._speedups is
built, the package exports its C type of the same shape instead (see
_accel). Both are packed by _pack; their ``__slots__`` name the fields, in
the order the C packer is configured with.
"""


class RankState:
    """What one rank reports before a decision (allgathered by the executor)."""

    __slots__ = ("rank", "num_active_requests", "num_active_tokens",
                 "kv_capacity_tokens", "free_kv_tokens", "memory_pressure",
                 "pending_kv_tokens", "evictable_kv_tokens")

    def __init__(self, rank, num_active_requests=0, num_active_tokens=0,
                 kv_capacity_tokens=0, free_kv_tokens=0, memory_pressure=False,
                 pending_kv_tokens=None, evictable_kv_tokens=None):
        self.rank = rank
        self.num_active_requests = num_active_requests
        self.num_active_tokens = num_active_tokens
        # Admissible KV pool and free room in tokens (0 capacity = unknown);
        # used by capacity_aware routing. See nvml/ for filling them from GPU
        # memory.
        self.kv_capacity_tokens = kv_capacity_tokens
        self.free_kv_tokens = free_kv_tokens
        self.memory_pressure = memory_pressure
        # The engine's KV state beside the pool, None when not reported
        # (docs/ROUTING.md, "Capacity awareness"): the KV the rank's active
        # requests will still take beyond what free_kv_tokens shows taken
        # (requests not admitted yet: their prompt and max_tokens), and how
        # many of the free tokens are cached blocks no request holds.
        self.pending_kv_tokens = pending_kv_tokens
        self.evictable_kv_tokens = evictable_kv_tokens

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
                 "lora_id", "cache_salt", "max_new_tokens")

    def __init__(self, id, tokens=None, num_tokens=None, target_rank=None, relax=True,
                 conversation_id=None, lora_id=0, cache_salt=0, max_new_tokens=0):
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
        # The output the engine reserves KV for at admission (TensorRT-LLM:
        # max_tokens); 0 when unknown. The KV room counts it.
        self.max_new_tokens = max_new_tokens

    def __repr__(self):
        n = self.num_tokens if self.num_tokens is not None else len(self.tokens or ())
        return "Request(id=%r, n=%r, target_rank=%r, relax=%r, conversation_id=%r)" % (
            self.id, n, self.target_rank, self.relax, self.conversation_id)


class RouteResult:
    """One decision: ``assignment`` {rank: [ids in the order the rank should
    queue them]} with every rank present (placement order, except under
    ``score="ttft"``: docs/ROUTING.md, "Hand-over order"), ``expected``
    (expected_num_active_requests), ``unassigned`` (ids to requeue, in input
    order) and ``ranks`` (the rank of each request in input order, -1 when
    unassigned)."""

    __slots__ = ("assignment", "expected", "unassigned", "ranks")

    def __init__(self, assignment, expected, unassigned, ranks):
        self.assignment = assignment
        self.expected = expected
        self.unassigned = unassigned
        self.ranks = ranks

    def __repr__(self):
        return "RouteResult(assignment=%r, expected=%r, unassigned=%r)" % (
            self.assignment, self.expected, self.unassigned)
