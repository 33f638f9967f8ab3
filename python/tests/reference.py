"""Pure-Python reference implementation of the three attention-DP routing policies.

This module is the executable form of ``docs/ROUTING.md``. It serves two purposes:

* a differential-test oracle for the Go core (see the JSON command line at the end of
  this file: ``python3 python/tests/reference.py < cases.json``), and
* the "pure-Python baseline" in benchmarks.

The contract's worked examples and test vectors run against it as fixtures
(``testdata/routing``, through ``python/tests/test_reference.py``), as they do against
the Go router, the C ABI and the ctypes binding.

It is deliberately plain: standard library only, no imports from the rest of the
``adprouter`` package, every step of each policy written out in the order the spec
gives it. Where the spec says "we differ on purpose" from TensorRT-LLM's routers
(unassigned requests instead of silent loss or a crash, a floored KV denominator,
up-front validation), this file implements our behaviour, not the reference's.

Conventions used throughout:

* ``n`` is a request's token count: ``num_tokens`` when given, else ``len(tokens)``.
* ``maxn`` is ``max_num_active_requests``, the HARD per-rank slot limit: no policy
  ever places a request on a rank whose active count is already >= maxn.
* ``counts[r]`` / ``tokens[r]`` are rank r's active request count / token load,
  updated as requests are placed during one ``route`` call.
* ``placed[r]`` is the ordered list of request ids given to rank r in this call:
  explicit placements first, then the balanced ones, in processing order.
"""

import os
import sys

if __name__ == "__main__":
    # Run as a script, Python puts this file's folder (the adprouter package folder)
    # first on sys.path. Drop it so that a sibling module can never shadow a standard
    # library module imported below.
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]

import collections
import dataclasses
import heapq
import json
import math
import random

__all__ = [
    "RankState",
    "Request",
    "RouteResult",
    "ReferenceRouter",
    "run_cases",
    "POLICIES",
    "NEW_CONV_PLACEMENTS",
]

POLICIES = ("default", "kv_cache_aware", "conversation")
NEW_CONV_PLACEMENTS = ("round_robin", "least_queued", "least_tokens")

# KV-aware grouping looks only at this many leading prompt tokens.
PREFIX_GROUP_TOKENS = 64

# Request ids are uint64 on the Go/C side.
MAX_REQUEST_ID = 2**64 - 1


# --------------------------------------------------------------------------------------
# Data types
# --------------------------------------------------------------------------------------


@dataclasses.dataclass
class RankState:
    """What one rank contributes to the allgather: its index and current load."""

    rank: int
    num_active_requests: int
    num_active_tokens: int


@dataclasses.dataclass
class Request:
    """One new request.

    ``tokens`` may hold the whole prompt, only a prefix of it (e.g. its first 64
    tokens, which is all the KV-aware grouping looks at) together with ``num_tokens``,
    or be None. ``conversation_id`` "" means "no conversation", like None.
    """

    id: int
    tokens: list | None = None
    num_tokens: int | None = None
    target_rank: int | None = None
    relax: bool = True
    conversation_id: str | None = None

    @property
    def n(self) -> int:
        """Token count of the prompt (0 when there is none)."""
        if self.num_tokens is not None:
            return self.num_tokens
        return len(self.tokens or [])

    @property
    def conversation(self) -> str | None:
        """The conversation id, with "" normalised to None (no conversation)."""
        return self.conversation_id or None


@dataclasses.dataclass
class RouteResult:
    """Outcome of one ``route`` call.

    assignment: rank -> ordered list of request ids placed there (every rank present).
    expected:   expected_num_active_requests (per-rank target used to pad idle ranks).
    unassigned: ids of requests no rank could take, in INPUT order (caller requeues).
    """

    assignment: dict
    expected: int
    unassigned: list


# --------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------


def _is_int(x) -> bool:
    """True for a Python int that is not a bool."""
    return isinstance(x, int) and not isinstance(x, bool)


def _is_real(x) -> bool:
    """True for an int (not bool) or a float."""
    return _is_int(x) or isinstance(x, float)


def _ceil_div(a: int, b: int) -> int:
    """Integer ceil(a / b) for a >= 0, b > 0 (exact, no floats involved)."""
    return -(-a // b)


def _soft_cap(counts: list, n_remaining: int, multiplier: float, maxn: int) -> int:
    """The 'expected' soft cap shared by all three policies.

    fair     = ceil((sum(active after explicit pass) + n_remaining) / size)   (integer)
    expected = min(max(ceil(multiplier * fair), max(active)), maxn)
    ``multiplier * fair`` is an IEEE double product; math.ceil turns it into an int.
    """
    fair = _ceil_div(sum(counts) + n_remaining, len(counts))
    return min(max(math.ceil(multiplier * fair), max(counts)), maxn)


def _strict_key(req: Request) -> int:
    """Relax sort key of the default and KV-aware policies.

    A request is "strict" (sorts first) only when it has a target rank AND relax is
    False. Python's sort is stable, so arrival order is kept within each group.
    """
    return 0 if (req.target_rank is not None and not req.relax) else 1


def _conversation_relax_key(req: Request) -> int:
    """Relax sort key of the conversation policy: the relax flag alone."""
    return 0 if not req.relax else 1


def _prefix_group_key(req: Request):
    """KV-aware grouping key: (first 64 tokens, longer prompt first).

    Tuples of ints compare lexicographically, and a tuple that is a prefix of a longer
    one sorts first, so an empty prompt sorts before everything.
    """
    prefix = tuple((req.tokens or [])[:PREFIX_GROUP_TOKENS])
    return (prefix, -req.n)


# --------------------------------------------------------------------------------------
# The router
# --------------------------------------------------------------------------------------


class ReferenceRouter:
    """Reference router; state (warmup set, conversation map, cursor) persists across calls.

    Every argument is validated before any state changes: a call that raises
    ValueError leaves the router exactly as it was.
    """

    def __init__(
        self,
        policy="kv_cache_aware",
        dp_size=None,
        load_balance_weight=1.0,
        match_rate_threshold=0.1,
        fair_share_multiplier=2.0,
        cold_start_warmup=False,
        max_sessions=65536,
        new_conv_placement="round_robin",
    ):
        # ---- configuration validation -------------------------------------------------
        if not isinstance(policy, str) or policy not in POLICIES:
            raise ValueError(f"policy: unknown policy {policy!r} (want one of {', '.join(POLICIES)})")
        if dp_size is None:
            raise ValueError("dp_size: required")
        if not _is_int(dp_size) or dp_size < 1:
            raise ValueError(f"dp_size: must be an integer >= 1, got {dp_size!r}")
        # The KV-aware options are checked whatever the policy: one flat, shared config.
        for name, value in (
            ("load_balance_weight", load_balance_weight),
            ("match_rate_threshold", match_rate_threshold),
        ):
            if not _is_real(value) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name}: must be a finite number >= 0, got {value!r}")
        # fair_share_multiplier: KV-aware rejects < 1; conversation clamps it to >= 1
        # (but a non-finite value is still an error); default ignores it entirely.
        if policy == "kv_cache_aware":
            if (
                not _is_real(fair_share_multiplier)
                or not math.isfinite(fair_share_multiplier)
                or fair_share_multiplier < 1
            ):
                raise ValueError(
                    f"fair_share_multiplier: must be a finite number >= 1 for the "
                    f"kv_cache_aware policy, got {fair_share_multiplier!r}"
                )
        elif policy == "conversation":
            if not _is_real(fair_share_multiplier) or not math.isfinite(fair_share_multiplier):
                raise ValueError(
                    f"fair_share_multiplier: must be a finite number, got {fair_share_multiplier!r}"
                )
        if not isinstance(cold_start_warmup, bool):
            raise ValueError(f"cold_start_warmup: must be a bool, got {cold_start_warmup!r}")
        if not _is_int(max_sessions) or max_sessions < 1:
            raise ValueError(f"max_sessions: must be an integer >= 1, got {max_sessions!r}")
        if not isinstance(new_conv_placement, str) or new_conv_placement not in NEW_CONV_PLACEMENTS:
            raise ValueError(
                f"new_conv_placement: unknown value {new_conv_placement!r} "
                f"(want one of {', '.join(NEW_CONV_PLACEMENTS)})"
            )

        self.policy = policy
        self.dp_size = dp_size
        self.load_balance_weight = float(load_balance_weight)
        self.match_rate_threshold = float(match_rate_threshold)
        self.fair_share_multiplier = (
            float(fair_share_multiplier) if _is_real(fair_share_multiplier) else fair_share_multiplier
        )
        self.cold_start_warmup = cold_start_warmup
        self.max_sessions = max_sessions
        self.new_conv_placement = new_conv_placement

        # ---- router state (lives as long as the router) -----------------------------
        # KV-aware one-shot warmup: ranks that have not yet received a request. Starts
        # full when warmup is on, is only ever shrunk, never re-armed.
        self._pending_warmup = set(range(dp_size)) if (policy == "kv_cache_aware" and cold_start_warmup) else set()
        # Conversation policy: conversation id -> home rank, least recently used first.
        self._sessions = collections.OrderedDict()
        # Conversation policy, round_robin placement: next rank to try.
        self._cursor = 0

    # ---- introspection (tests, debugging) ---------------------------------------------

    def snapshot(self) -> dict:
        """A plain copy of the router state, for comparisons in tests."""
        return {
            "pending_warmup": sorted(self._pending_warmup),
            "sessions": list(self._sessions.items()),  # least recently used first
            "cursor": self._cursor,
        }

    # ---- public entry point -----------------------------------------------------------

    def route(self, states, requests, max_num_active_requests, match_lens=None) -> RouteResult:
        """Place ``requests`` on ranks.

        states: one RankState per rank, in rank order.
        requests: the new requests, in arrival order.
        max_num_active_requests: hard per-rank slot limit (maxn).
        match_lens: None, or one dict per rank {request_id: matched prompt tokens}
            (a missing entry means 0). Used by the KV-aware policy only.
        """
        states = list(states)
        requests = list(requests)
        if match_lens is not None:
            match_lens = list(match_lens)
        self._validate_call(states, requests, max_num_active_requests, match_lens)
        maxn = max_num_active_requests

        if self.policy == "default":
            placed, expected, unassigned = self._route_default(states, requests, maxn)
        elif self.policy == "kv_cache_aware":
            placed, expected, unassigned = self._route_kv_cache_aware(states, requests, maxn, match_lens)
        else:
            placed, expected, unassigned = self._route_conversation(states, requests, maxn)

        unassigned_ids = {req.id for req in unassigned}
        return RouteResult(
            assignment={r: placed[r] for r in range(self.dp_size)},
            expected=expected,
            unassigned=[req.id for req in requests if req.id in unassigned_ids],
        )

    # ---- validation (runs before any state changes) -----------------------------------

    def _validate_call(self, states, requests, maxn, match_lens):
        if not _is_int(maxn) or maxn < 1:
            raise ValueError(f"max_num_active_requests: must be an integer >= 1, got {maxn!r}")

        if len(states) != self.dp_size:
            raise ValueError(f"states: got {len(states)} rank states, want dp_size={self.dp_size}")
        for i, st in enumerate(states):
            if not isinstance(st, RankState):
                raise ValueError(f"states[{i}]: must be a RankState, got {type(st).__name__}")
            if not _is_int(st.rank) or st.rank != i:
                raise ValueError(f"states[{i}].rank: states must be in rank order, got rank {st.rank!r} at index {i}")
            if not _is_int(st.num_active_requests) or st.num_active_requests < 0:
                raise ValueError(
                    f"states[{i}].num_active_requests: must be an integer >= 0, got {st.num_active_requests!r}"
                )
            if not _is_int(st.num_active_tokens) or st.num_active_tokens < 0:
                raise ValueError(
                    f"states[{i}].num_active_tokens: must be an integer >= 0, got {st.num_active_tokens!r}"
                )

        seen = set()
        for i, req in enumerate(requests):
            if not isinstance(req, Request):
                raise ValueError(f"requests[{i}]: must be a Request, got {type(req).__name__}")
            if not _is_int(req.id) or not 0 <= req.id <= MAX_REQUEST_ID:
                raise ValueError(f"requests[{i}].id: must be an integer in [0, 2**64-1], got {req.id!r}")
            if req.id in seen:
                raise ValueError(f"requests[{i}].id: duplicate request id {req.id}")
            seen.add(req.id)
            if req.tokens is not None:
                if not isinstance(req.tokens, (list, tuple)):
                    raise ValueError(f"requests[{i}].tokens: must be a list of ints or None")
                # Only the leading tokens are ever compared (prefix grouping).
                for tok in req.tokens[:PREFIX_GROUP_TOKENS]:
                    if not _is_int(tok):
                        raise ValueError(f"requests[{i}].tokens: token {tok!r} is not an integer")
            if req.num_tokens is not None:
                if not _is_int(req.num_tokens) or req.num_tokens < 0:
                    raise ValueError(f"requests[{i}].num_tokens: must be an integer >= 0, got {req.num_tokens!r}")
                if req.num_tokens < len(req.tokens or []):
                    raise ValueError(
                        f"requests[{i}].num_tokens: {req.num_tokens} is less than len(tokens)={len(req.tokens)}"
                    )
            if req.target_rank is not None:
                if not _is_int(req.target_rank) or not 0 <= req.target_rank < self.dp_size:
                    raise ValueError(
                        f"requests[{i}].target_rank: {req.target_rank!r} out of range [0, {self.dp_size})"
                    )
            if not isinstance(req.relax, bool):
                raise ValueError(f"requests[{i}].relax: must be a bool, got {req.relax!r}")
            if req.conversation_id is not None and not isinstance(req.conversation_id, str):
                raise ValueError(f"requests[{i}].conversation_id: must be a string or None, got {req.conversation_id!r}")

        if match_lens is not None:
            if len(match_lens) != self.dp_size:
                raise ValueError(f"match_lens: got {len(match_lens)} ranks, want dp_size={self.dp_size}")
            for r, per_rank in enumerate(match_lens):
                if not isinstance(per_rank, dict):
                    raise ValueError(f"match_lens[{r}]: must be a dict {{request_id: matched_tokens}}")
                for rid, m in per_rank.items():
                    if not _is_int(m) or m < 0:
                        raise ValueError(f"match_lens[{r}][{rid!r}]: must be an integer >= 0, got {m!r}")

    # ---- shared explicit pass (default policy) ----------------------------------------

    @staticmethod
    def _explicit_pass(ordered, counts, placed, maxn):
        """Place every request that has a target rank with room (count < maxn).

        The relax flag is NOT looked at here: a relaxed request with a target still
        goes to it when there is room. Returns the requests that fell through, in order.
        """
        rest = []
        for req in ordered:
            target = req.target_rank
            if target is not None and counts[target] < maxn:
                placed[target].append(req.id)
                counts[target] += 1
            else:
                rest.append(req)
        return rest

    # ---- default policy ----------------------------------------------------------------

    def _route_default(self, states, requests, maxn):
        size = self.dp_size
        counts = [st.num_active_requests for st in states]
        tokens = [st.num_active_tokens for st in states]
        placed = [[] for _ in range(size)]

        # 1. Relax sort (strict first, stable), then the explicit pass. The explicit
        #    pass updates request counts only, not token loads.
        ordered = sorted(requests, key=_strict_key)
        rest = self._explicit_pass(ordered, counts, placed, maxn)

        # 2. Soft cap with multiplier 1.
        expected = _soft_cap(counts, len(rest), 1.0, maxn)

        # 3. Open ranks (count < expected) form a min-heap on (tokens, count, rank).
        #    Since expected <= maxn, an open rank is always under the hard cap too.
        heap = [(tokens[r], counts[r], r) for r in range(size) if counts[r] < expected]
        heapq.heapify(heap)

        # Remaining requests, largest prompt first (stable: arrival order among equals).
        unassigned = []
        for req in sorted(rest, key=lambda q: -q.n):
            if not heap:
                # Every rank is closed: we hand the request back instead of raising.
                unassigned.append(req)
                continue
            tok, cnt, r = heapq.heappop(heap)
            placed[r].append(req.id)
            tok += req.n
            cnt += 1
            if cnt < expected:  # the rank closes when its count reaches expected
                heapq.heappush(heap, (tok, cnt, r))

        # 4. placed[r] already holds explicit placements first, then balanced ones.
        return placed, expected, unassigned

    # ---- KV-cache-aware policy -------------------------------------------------------

    def _route_kv_cache_aware(self, states, requests, maxn, match_lens):
        size = self.dp_size
        beta = self.load_balance_weight
        threshold = self.match_rate_threshold
        counts = [st.num_active_requests for st in states]
        # Token load is tracked as a float (IEEE double), as in the reference.
        tokens = [float(st.num_active_tokens) for st in states]
        placed = [[] for _ in range(size)]

        def match(r, req):
            """Prompt tokens of req already cached on rank r (0 when unknown)."""
            if match_lens is None:
                return 0
            return match_lens[r].get(req.id, 0)

        # 1. Relax sort (strict first, stable).
        ordered = sorted(requests, key=_strict_key)

        # 2. Explicit + warmup pass.
        rest = []
        for req in ordered:
            target = req.target_rank
            if target is None and self._pending_warmup:
                target = min(self._pending_warmup)  # warm the smallest pending rank
            if target is not None and counts[target] < maxn:
                placed[target].append(req.id)
                counts[target] += 1
                tokens[target] += max(req.n - match(target, req), 0)
                # Any placement on a rank (explicit target, strict or relaxed, or a
                # warmup placement) consumes that rank's warmup slot.
                self._pending_warmup.discard(target)
            else:
                # Target full: the rank (if it was pending) stays pending.
                rest.append(req)

        # 3. Group the rest by shared prompt prefix, longer prompts first.
        grouped = sorted(rest, key=_prefix_group_key)

        # 4. Soft cap with the KV multiplier; eligible ranks in ascending order.
        expected = _soft_cap(counts, len(grouped), self.fair_share_multiplier, maxn)
        eligible = [r for r in range(size) if counts[r] < expected]

        # 5. Score every eligible rank for each request.
        unassigned = []
        for index, req in enumerate(grouped):
            if not eligible:
                # No rank under the soft cap: the rest are handed back, not dropped.
                unassigned.extend(grouped[index:])
                break
            n = req.n

            # Tie-break order: CPython's own seeded shuffle of the eligible ranks.
            order = list(eligible)
            random.Random(req.id).shuffle(order)

            # Normaliser: total load of the eligible ranks, floored at n, then at 1 (a
            # 0-token request on an idle system would otherwise divide by zero). The
            # loads are integer-valued doubles, so the summation order cannot matter.
            total = 0.0
            for r in eligible:
                total += tokens[r]
            denom = max(total, float(n))
            if denom == 0:
                denom = 1.0

            # Cache affinity only when the best eligible match is a large enough share
            # of the prompt (strictly greater than the threshold).
            best_match = max(match(r, req) for r in eligible)
            affinity = best_match / max(n, 1) > threshold

            best_rank = None
            best_key = None
            for r in order:
                m_eff = match(r, req) if affinity else 0
                # Exactly this evaluation order, as IEEE doubles:
                x = tokens[r] / denom * n
                x = beta * x
                score = (n - m_eff) + x
                key = (score, tokens[r])
                if best_key is None or key < best_key:  # first in shuffled order wins full ties
                    best_rank, best_key = r, key

            placed[best_rank].append(req.id)
            counts[best_rank] += 1
            # Raw match here, even when the affinity gate was off.
            tokens[best_rank] += max(n - match(best_rank, req), 0)
            if counts[best_rank] >= expected:
                eligible.remove(best_rank)

        return placed, expected, unassigned

    # ---- conversation-affinity policy ------------------------------------------------

    def _bind(self, conv, rank):
        """Bind conversation -> rank as the most recent entry; evict LRU beyond max_sessions."""
        self._sessions[conv] = rank
        self._sessions.move_to_end(conv)
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)

    def _pick_new_rank(self, counts, tokens, expected, maxn):
        """Rank for a new conversation, a request without one, or an overflowing one.

        Returns None when every rank is at the hard cap.
        """
        size = self.dp_size
        if self.new_conv_placement == "least_tokens":
            # Fewest tokens, then fewest requests, then the first at or after the
            # cursor, among the ranks under the soft cap, else under the hard cap;
            # the cursor moves past the chosen rank.
            candidates = [r for r in range(size) if counts[r] < expected]
            if not candidates:
                candidates = [r for r in range(size) if counts[r] < maxn]
            if not candidates:
                return None
            r = min(candidates, key=lambda r: (tokens[r], counts[r], (r - self._cursor) % size))
            self._cursor = (r + 1) % size
            return r
        if self.new_conv_placement == "least_queued":
            candidates = [r for r in range(size) if counts[r] < expected]
            if not candidates:
                candidates = [r for r in range(size) if counts[r] < maxn]
            if not candidates:
                return None
            return min(candidates, key=lambda r: (counts[r], r))

        # round_robin: advance the persistent cursor over up to `size` ranks and take
        # the first one under the soft cap (the cursor moves past every rank it looks at).
        for _ in range(size):
            r = self._cursor
            self._cursor = (self._cursor + 1) % size
            if counts[r] < expected:
                return r
        # Nobody under the soft cap: least loaded rank still under the hard cap.
        candidates = [r for r in range(size) if counts[r] < maxn]
        if not candidates:
            return None
        return min(candidates, key=lambda r: (counts[r], r))

    def _route_conversation(self, states, requests, maxn):
        size = self.dp_size
        counts = [st.num_active_requests for st in states]
        tokens = [st.num_active_tokens for st in states]  # read by least_tokens
        placed = [[] for _ in range(size)]

        def put(req, r):
            placed[r].append(req.id)
            counts[r] += 1
            tokens[r] += req.n

        # 1. Sort by the relax flag alone (relax=False first, stable).
        ordered = sorted(requests, key=_conversation_relax_key)

        # 2. Explicit pass, for requests whose conversation is not (yet) bound.
        rest = []
        for req in ordered:
            conv = req.conversation
            target = req.target_rank
            if conv is not None and conv in self._sessions:
                rest.append(req)  # an existing binding beats a target hint
            elif target is not None and counts[target] < maxn:
                put(req, target)
                if conv is not None:
                    self._bind(conv, target)
            else:
                rest.append(req)

        # 3. Soft cap; the multiplier is clamped to >= 1.
        expected = _soft_cap(counts, len(rest), max(1.0, self.fair_share_multiplier), maxn)

        # 4. Sticky placement for bound conversations, otherwise pick a rank.
        unassigned = []
        for req in rest:
            conv = req.conversation
            home = self._sessions.get(conv) if conv is not None else None  # checked now
            if home is not None and counts[home] < maxn:
                # Sticky return: only the HARD cap applies; refresh recency.
                put(req, home)
                self._sessions.move_to_end(conv)
                continue
            # New conversation, no conversation, or home rank full (overflow).
            r = self._pick_new_rank(counts, tokens, expected, maxn)
            if r is None:
                unassigned.append(req)
                continue
            put(req, r)
            if conv is not None and home is None:
                self._bind(conv, r)  # a new conversation lives where it landed
            # An overflowing request keeps its old binding, recency not refreshed.

        # 5. Sticky returns may exceed the soft cap.
        expected = max(expected, max(counts))
        return placed, expected, unassigned


# --------------------------------------------------------------------------------------
# JSON command line (differential test driver)
# --------------------------------------------------------------------------------------

_CONFIG_KEYS = (
    "policy",
    "dp_size",
    "load_balance_weight",
    "match_rate_threshold",
    "fair_share_multiplier",
    "cold_start_warmup",
    "max_sessions",
    "new_conv_placement",
)
_REQUEST_KEYS = ("id", "tokens", "num_tokens", "target_rank", "relax", "conversation_id")


def _router_from_config(config) -> ReferenceRouter:
    if not isinstance(config, dict):
        raise ValueError("config: must be an object")
    unknown = sorted(set(config) - set(_CONFIG_KEYS))
    if unknown:
        raise ValueError(f"config: unknown key(s) {', '.join(unknown)}")
    return ReferenceRouter(**config)


def _parse_call(call, dp_size):
    """JSON call object -> (states, requests, maxn, match_lens as per-rank dicts)."""
    if not isinstance(call, dict):
        raise ValueError("call: must be an object")
    states = []
    for i, st in enumerate(call["states"]):
        if not isinstance(st, list) or len(st) != 3:
            raise ValueError(f"states[{i}]: must be [rank, num_active_requests, num_active_tokens]")
        states.append(RankState(*st))
    requests = []
    for i, rq in enumerate(call["requests"]):
        if not isinstance(rq, dict):
            raise ValueError(f"requests[{i}]: must be an object")
        unknown = sorted(set(rq) - set(_REQUEST_KEYS))
        if unknown:
            raise ValueError(f"requests[{i}]: unknown key(s) {', '.join(unknown)}")
        if "id" not in rq:
            raise ValueError(f"requests[{i}].id: required")
        fields = dict(rq)
        if fields.get("relax") is None:
            fields["relax"] = True
        requests.append(Request(**fields))
    maxn = call["max_num_active_requests"]
    match_lens = None
    table = call.get("match_lens")
    if table is not None:
        if not isinstance(table, list) or len(table) != dp_size:
            raise ValueError(f"match_lens: must be a list of {dp_size} per-rank lists")
        match_lens = []
        for r, row in enumerate(table):
            if not isinstance(row, list) or len(row) != len(requests):
                raise ValueError(f"match_lens[{r}]: must list one match length per request ({len(requests)})")
            match_lens.append({req.id: m for req, m in zip(requests, row)})
    return states, requests, maxn, match_lens


def run_cases(doc) -> dict:
    """Run a whole JSON document ({"cases": [...]}) and return {"results": [...]}.

    One router per case, persisting across the case's calls. A call that fails
    validation yields {"error": message} and leaves the router unchanged. If the
    config itself is invalid, every call of that case reports the config error.
    """
    results = []
    for case in doc["cases"]:
        calls = case.get("calls", [])
        try:
            router = _router_from_config(case.get("config", {}))
        except (ValueError, TypeError) as exc:
            results.append([{"error": str(exc)} for _ in calls])
            continue
        case_results = []
        for call in calls:
            try:
                states, requests, maxn, match_lens = _parse_call(call, router.dp_size)
                res = router.route(states, requests, maxn, match_lens)
            except ValueError as exc:
                case_results.append({"error": str(exc)})
                continue
            except (TypeError, KeyError) as exc:  # malformed JSON call (missing key, wrong shape)
                case_results.append({"error": f"malformed call: {type(exc).__name__}: {exc}"})
                continue
            case_results.append(
                {
                    "assignment": [res.assignment[r] for r in range(router.dp_size)],
                    "expected": res.expected,
                    "unassigned": res.unassigned,
                }
            )
        results.append(case_results)
    return {"results": results}


def main() -> int:
    try:
        doc = json.load(sys.stdin)
        if not isinstance(doc, dict) or not isinstance(doc.get("cases"), list):
            raise ValueError('input must be an object {"cases": [...]}')
        out = run_cases(doc)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        print(f"reference.py: bad input: {exc}", file=sys.stderr)
        return 2
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
