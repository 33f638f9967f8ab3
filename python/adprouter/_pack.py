"""Packing: a batch's states, requests and match lengths into adpr_batch's
flat buffers, and adpr_route_result's arrays back into a RouteResult.

The functions here are the reference implementation, in Python.
adprouter._speedups (optional, C; see _accel) does the same for the plain
case, byte for byte, and returns None for anything else, which then comes
here and raises the documented errors. Each record's layout comes from
_abi, where it is written once.
"""

import ctypes
import struct
from array import array

from . import _accel, _consts
from ._abi import NO_TARGET, REQUEST, STATE, RankStateC, RequestC, out_of_range
from ._errors import INVALID_ARGUMENT, InvalidArgumentError
from ._types import RouteResult

# The KV-aware policy groups requests by their first PREFIX_TOKENS tokens and
# reads no others; the other policies read none (ADPR_PREFIX_TOKENS).
PREFIX_TOKENS = _consts.PREFIX_TOKENS

REQ_SIZE = REQUEST.size

# INTS[k] packs k int32 values in one C call (k <= PREFIX_TOKENS).
INTS = [struct.Struct("=%di" % k) for k in range(PREFIX_TOKENS + 1)]


def pack_states(states):
    """adpr_rank_state records of states, as bytes-like."""
    sbuf = array("B", bytes(STATE.size * len(states)))
    pack = STATE.pack_into
    i = 0
    vals = ()
    try:
        for i, s in enumerate(states):
            pending = getattr(s, "pending_kv_tokens", None)
            evictable = getattr(s, "evictable_kv_tokens", None)
            flags = ((_consts.RANK_MEMORY_PRESSURE if getattr(s, "memory_pressure", False) else 0)
                     | (0 if pending is None else _consts.RANK_PENDING_KV)
                     | (0 if evictable is None else _consts.RANK_EVICTABLE_KV))
            vals = (s.rank, s.num_active_requests, s.num_active_tokens, getattr(s, "kv_capacity_tokens", 0),
                    getattr(s, "free_kv_tokens", 0), flags, 0, pending or 0, evictable or 0)
            pack(sbuf, STATE.size * i, *vals)
    except (struct.error, TypeError, AttributeError) as e:
        why = isinstance(e, struct.error) and out_of_range(RankStateC, vals) or e
        raise InvalidArgumentError("states[%d]: %s" % (i, why), INVALID_ARGUMENT) from None
    return sbuf


def pack_requests(requests, send_tokens):
    """(adpr_request records, int32 tokens, token count, conversation text) of
    requests, sending send_tokens leading tokens of each (None: all)."""
    rbuf = array("B", bytes(REQ_SIZE * len(requests)))
    chunks = []
    ntok = 0
    ints = INTS
    text = []
    text_len = 0
    pack = REQUEST.pack_into
    i = 0
    vals = ()
    try:
        for i, q in enumerate(requests):
            toks = q.tokens
            n = q.num_tokens
            off = ntok
            if toks is not None:
                if n is None:
                    n = len(toks)
                elif n < len(toks):
                    raise ValueError("num_tokens = %r is less than the %d tokens given" % (n, len(toks)))
                if send_tokens != 0:
                    if isinstance(toks, (list, tuple)):
                        head = toks[:send_tokens]
                        k = len(head)
                        chunks.append(ints[k].pack(*head) if k <= PREFIX_TOKENS
                                      else struct.pack("=%di" % k, *head))
                        ntok += k
                    else:
                        mv = memoryview(toks)
                        if mv.ndim != 1 or mv.itemsize != 4 or mv.format not in ("i", "l", "=i", "<i"):
                            raise TypeError("tokens buffer has format %r and %d dimensions, want a 1-D int32 buffer"
                                            % (mv.format, mv.ndim))
                        head = mv[:send_tokens].cast("B")
                        chunks.append(head)
                        ntok += len(head) // 4
            elif n is None:
                n = 0
            cid = q.conversation_id
            coff, clen = text_len, 0
            if cid is not None and not isinstance(cid, (str, bytes, bytearray)):
                raise TypeError("conversation_id must be str, bytes or None, not %s" % type(cid).__name__)
            if cid:
                b = cid.encode() if isinstance(cid, str) else bytes(cid)
                text.append(b)
                clen = len(b)
                text_len += clen
            t = q.target_rank
            if t is not None and t < 0:
                raise ValueError("target_rank = %r, want None or 0..dp_size-1" % (t,))
            vals = (q.id, off, ntok - off, n, coff, clen, NO_TARGET if t is None else t, 1 if q.relax else 0,
                    getattr(q, "lora_id", 0), getattr(q, "cache_salt", 0), getattr(q, "max_new_tokens", 0))
            pack(rbuf, REQ_SIZE * i, *vals)
    except (struct.error, TypeError, OverflowError, ValueError, AttributeError, BufferError) as e:
        why = isinstance(e, struct.error) and out_of_range(RequestC, vals) or e
        raise InvalidArgumentError("requests[%d]: %s" % (i, why), INVALID_ARGUMENT) from None
    return rbuf, b"".join(chunks), ntok, b"".join(text)


def match_table(match_lens, requests, ns, nr, pairs):
    """The int32 match table, row-major by request (adpr_batch.match_lens),
    from match_lens in the dict/row form or, with pairs, the raw
    [id, len, ...] form (see Router.route)."""
    if isinstance(match_lens, array) and match_lens.typecode == "i" and not pairs:
        if len(match_lens) != ns * nr:
            raise InvalidArgumentError("match_lens array has %d values, want requests x ranks (%d)"
                                       % (len(match_lens), ns * nr), INVALID_ARGUMENT)
        return match_lens
    if not hasattr(match_lens, "__len__"):
        raise InvalidArgumentError("match_lens is a %s, want one entry per rank"
                                   % type(match_lens).__name__, INVALID_ARGUMENT)
    if len(match_lens) != ns:
        raise InvalidArgumentError("match_lens has %d entries, want one per rank (%d)"
                                   % (len(match_lens), ns), INVALID_ARGUMENT)
    sp = _accel.speedups
    if sp:
        table = sp.match_table(match_lens, requests, pairs)
        if table is not None:
            return table
    out = [0] * (ns * nr)
    ids = pos = None
    r = 0
    try:
        for r, m in enumerate(match_lens):
            if pairs or isinstance(m, dict):
                if ids is None:
                    ids = [q.id for q in requests]
                    pos = {rid: i for i, rid in enumerate(ids)}
            # Each row is read once, into a list of its own: another thread
            # may change it meanwhile, and a row that changed between a
            # check and its use would fail the slice assignment.
            if pairs:
                _fill_pairs(out, list(m), r, ns, nr, ids, pos)
            elif isinstance(m, dict):
                items = list(m.items())
                if len(items) == nr and [rid for rid, _ in items] == ids:
                    out[r::ns] = [v for _, v in items]  # names every request, in batch order
                    continue
                for rid, v in items:
                    k = pos.get(rid)
                    if k is None:
                        raise InvalidArgumentError(
                            "match_lens[%d] names request id %r, which is not in the batch"
                            % (r, rid), INVALID_ARGUMENT)
                    out[k * ns + r] = v
            else:
                vals = list(m)
                if len(vals) != nr:
                    raise InvalidArgumentError(
                        "match_lens[%d] has %d values, want one per request (%d)"
                        % (r, len(vals), nr), INVALID_ARGUMENT)
                out[r::ns] = vals
        return array("i", out)
    except (TypeError, OverflowError) as e:
        raise InvalidArgumentError("match_lens: %s" % (e,), INVALID_ARGUMENT) from None


def _fill_pairs(out, row, r, ns, nr, ids, pos):
    """Rank r's column of the match table from its raw row [id, len, ...]."""
    if len(row) % 2:
        raise InvalidArgumentError(
            "match_lens[%d] has %d values, want [id, matched, id, matched, ...] pairs"
            % (r, len(row)), INVALID_ARGUMENT)
    seen = bytearray(nr)
    it = iter(row)
    for rid, v in zip(it, it):
        k = pos.get(rid)
        if k is None:
            raise InvalidArgumentError(
                "match_lens[%d] names request id %r, which is not in the batch" % (r, rid),
                INVALID_ARGUMENT)
        if seen[k]:
            raise InvalidArgumentError(
                "match_lens[%d] names request id %r twice" % (r, rid), INVALID_ARGUMENT)
        seen[k] = 1
        out[k * ns + r] = v


def address(buf):
    """The address of a bytes object's or an array's contents."""
    if isinstance(buf, array):
        return buf.buffer_info()[0]
    return ctypes.cast(ctypes.c_char_p(buf), ctypes.c_void_p).value


class LazyResult(RouteResult):
    """A RouteResult decoded from the library's output arrays on first use of
    each field: routing code that reads only its own rank's list or only
    ``expected`` does not pay for building the rest. The ctypes path's
    result; adprouter._speedups.route decodes in the same C call instead,
    into ints that are the requests' own id objects, cheaper than either."""

    __slots__ = ("_order", "_offsets", "_ranks")

    def __init__(self, order, offsets, ranks, expected):
        self._order, self._offsets, self._ranks = order, offsets, ranks
        self.expected = expected

    @property
    def assignment(self):
        try:
            return RouteResult.assignment.__get__(self)
        except AttributeError:
            order, offsets = self._order, self._offsets
            sp = _accel.speedups
            value = sp.assignment(order, offsets) if sp else None
            if value is None:
                lists = [order[offsets[r]:offsets[r + 1]].tolist() for r in range(len(offsets) - 1)]
                value = dict(enumerate(lists))
            RouteResult.assignment.__set__(self, value)
            return value

    @assignment.setter
    def assignment(self, value):
        RouteResult.assignment.__set__(self, value)

    @property
    def unassigned(self):
        try:
            return RouteResult.unassigned.__get__(self)
        except AttributeError:
            value = self._order[self._offsets[-1]:].tolist()
            RouteResult.unassigned.__set__(self, value)
            return value

    @unassigned.setter
    def unassigned(self, value):
        RouteResult.unassigned.__set__(self, value)

    @property
    def ranks(self):
        try:
            return RouteResult.ranks.__get__(self)
        except AttributeError:
            value = self._ranks.tolist()
            RouteResult.ranks.__set__(self, value)
            return value

    @ranks.setter
    def ranks(self, value):
        RouteResult.ranks.__set__(self, value)
