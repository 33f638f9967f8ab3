"""Receipts: why each request of a router's last decision went where it did.

A Router created with ``explain=True`` keeps, for every request of its last
successful ``route()``, a receipt (include/adprouter.h: adpr_receipt and
adpr_candidate); ``Router.receipts()`` returns them as Receipt objects, whose
``str()`` is the library's own explanation::

    with adprouter.Router(dp_size=4, explain=True) as r:
        r.route(states, requests, 8)
        for rc in r.receipts():
            print(rc)          # request 7 (10 tokens) -> rank 3: scored; ...
            rc.reason          # "scored"
            rc.candidates[3]   # Candidate(rank=3, match=0, score=10.0, ...)

The structs and signatures are in _abi with every other layout; the
decoding and the Receipt classes are here.
"""

import ctypes

from ._abi import CandidateC, ReceiptC
from ._errors import INTERNAL, INVALID_ARGUMENT, OK, SHORT_BUFFER, InternalError

# ADPR_REASON_* and ADPR_EXCLUDED_* of include/adprouter.h, by value: the
# name is the macro's suffix in lower case (python/tests/test_abi_layout.py
# checks them against the header).
REASONS = ("unplaced", "explicit", "cold_start_warmup", "demand_warmup", "scored",
           "least_loaded", "conversation_bound", "new_conversation", "predicted_ttft", "held",
           "held_in_flight")
EXCLUSIONS = (None, "at_cap", "no_room", "stacked_tails")


class Candidate:
    """One rank as a scored or least-loaded placement saw it, just before it.

    rank; requests and tokens: its active requests and token load then;
    match: prompt tokens it caches; load_term: beta * tokens / max(eligible
    ranks' tokens, n) * n; score: (n - match if the affinity gate was on) +
    load_term (the default policy ranks by tokens: score = tokens; under
    score="ttft", reason "predicted_ttft" (or "new_conversation", a turn of a
    conversation not yet bound), match is the prefix the rank would
    reuse, load_term the prefill queued there and score the predicted cost in
    prefill tokens: the lock-step wait for load_term + n - match, plus the
    charges docs/ROUTING.md lists; in a call where some rank shows tokens
    waiting for KV memory, score="ttft" places by the reference's score,
    reason "scored", and, for a request with no prefix to keep, such a rank
    is "no_room" while another has room);
    excluded: None (it competed), "at_cap", "no_room" (capacity_aware) or
    "stacked_tails" (score="ttft": samples of its prompt placed there earlier
    in the call already stack more than a block of their last tokens)."""

    __slots__ = ("rank", "requests", "tokens", "match", "load_term", "score", "excluded")

    def __init__(self, c):
        self.rank, self.requests, self.tokens, self.match = c.rank, c.requests, c.tokens, c.match
        self.load_term, self.score = c.load_term, c.score
        self.excluded = EXCLUSIONS[c.excluded] if 0 <= c.excluded < len(EXCLUSIONS) else "excluded(%d)" % c.excluded

    def __repr__(self):
        return "Candidate(%s)" % ", ".join("%s=%r" % (k, getattr(self, k)) for k in self.__slots__)


class Receipt:
    """Why one request went where it did.

    id, rank (-1: unplaced), reason (one of REASONS), num_tokens (n);
    step: when the decision placed it (0 first, -1 unplaced; candidates show
    the loads the earlier steps left);
    expected: the decision's soft cap per rank; eligible: ranks under it
    when the request was placed; the affinity gate: max_match, match_rate,
    threshold, affinity (True: the match counted); candidates: one per rank
    for scored, least-loaded and score "ttft" placements, else empty; ties: ranks sharing
    the lowest (score, tokens); shuffle: when ties > 1, the ranks in
    random.Random(id).shuffle order (rank is the first tied one);
    capacity_fallback: no rank had KV room, the most headroom won;
    replica_wanted (score "ttft"): the request's prompt family wants another
    rank, or its prefix is still being computed, so a rank whose queue with it ends within the busiest rank's share
    of the next iteration (its queued prefill, at most ttft_drain_tokens) was not charged for computing the prefix
    again. str() gives the
    library's explanation."""

    __slots__ = ("id", "rank", "reason", "num_tokens", "step", "expected", "eligible", "max_match",
                 "match_rate", "threshold", "affinity", "ties", "capacity_fallback", "replica_wanted",
                 "candidates", "shuffle", "text")

    def __init__(self, rc, cands, text):
        self.id, self.rank, self.num_tokens, self.step = rc.id, rc.rank, rc.num_tokens, rc.step
        self.reason = REASONS[rc.reason] if 0 <= rc.reason < len(REASONS) else "reason(%d)" % rc.reason
        self.expected, self.eligible = rc.expected, rc.eligible
        self.max_match, self.match_rate, self.threshold = rc.max_match, rc.match_rate, rc.threshold
        self.affinity, self.ties = bool(rc.affinity), rc.ties
        self.capacity_fallback = bool(rc.capacity_fallback)
        self.replica_wanted = bool(rc.replica_wanted)
        self.candidates = [Candidate(c) for c in cands]
        self.shuffle = [c.rank for c in sorted((c for c in cands if c.shuffle_pos >= 0),
                                                key=lambda c: c.shuffle_pos)]
        self.text = text

    def __str__(self):
        return self.text

    def __repr__(self):
        return "Receipt(id=%d, rank=%d, reason=%r)" % (self.id, self.rank, self.reason)


# How many times read() starts over when routes on other threads keep
# changing the receipts under it.
_TRIES = 16


def read(router, raise_status, errbuf):
    """The receipts of router's last decision (Router.receipts). raise_status
    is the binding's status -> exception function, errbuf this call's own
    error buffer.

    No lock is held (the library serialises calls on one router; a binding
    lock held here could be re-entered by code that runs while Python
    objects are allocated, such as a __del__ that calls the router, and
    hang): the receipts are copied, then their texts, then the receipts
    again. A decision on another thread in between (the copies differ, or
    the counts changed under a call) starts it over."""
    lib, h, errlen = router._lib, router._handle, len(errbuf)
    n, nc = ctypes.c_int64(0), ctypes.c_int64(0)
    for attempt in range(_TRIES):
        last = attempt == _TRIES - 1
        status = lib.adpr_router_receipts(h, None, 0, None, 0, ctypes.byref(n), ctypes.byref(nc), errbuf, errlen)
        if status not in (OK, SHORT_BUFFER):
            raise_status(status, errbuf)
        rcs, cands, status = _copy(lib, h, n, nc, errbuf, errlen)
        if status == SHORT_BUFFER and not last:
            continue  # more receipts than asked for: a decision in between
        if status != OK:
            raise_status(status, errbuf)
        texts = []
        total = ctypes.c_int64(0)
        buf = ctypes.create_string_buffer(4096)
        for i in range(n.value):
            status = lib.adpr_router_receipt_text(h, i, buf, len(buf), ctypes.byref(total), errbuf, errlen)
            if status == SHORT_BUFFER and total.value > len(buf):
                buf = ctypes.create_string_buffer(total.value)
                status = lib.adpr_router_receipt_text(h, i, buf, len(buf), ctypes.byref(total), errbuf, errlen)
            if status != OK:
                break
            texts.append(buf.value.decode())
        if status in (INVALID_ARGUMENT, SHORT_BUFFER) and not last:
            continue  # fewer receipts now, or a longer text: a decision in between
        if status != OK:
            raise_status(status, errbuf)
        n2, nc2 = ctypes.c_int64(n.value), ctypes.c_int64(nc.value)
        rcs2, cands2, status = _copy(lib, h, n2, nc2, errbuf, errlen)
        if status == SHORT_BUFFER and not last:
            continue
        if status != OK:
            raise_status(status, errbuf)
        if (n2.value, nc2.value) == (n.value, nc.value) and bytes(rcs2) == bytes(rcs) and \
                bytes(cands2) == bytes(cands):
            break
        if last:
            raise InternalError("receipts: other threads' decisions kept changing them while they were read",
                                INTERNAL)
    out = []
    for i in range(n.value):
        rc = rcs[i]
        off = rc.candidate_offset
        out.append(Receipt(rc, cands[off:off + rc.num_candidates], texts[i]))
    return out


def _copy(lib, h, n, nc, errbuf, errlen):
    """(receipts, candidates, status): a copy of the last decision's
    receipts into arrays of n and nc entries (n and nc then hold the
    counts)."""
    rcs = (ReceiptC * max(n.value, 1))()
    cands = (CandidateC * max(nc.value, 1))()
    status = lib.adpr_router_receipts(h, rcs, n.value, cands, nc.value, ctypes.byref(n), ctypes.byref(nc),
                                      errbuf, errlen)
    return rcs, cands, status
