"""Decisions and receipts to Python logging, at DEBUG, on request.

Loggers (children of ``adprouter``, which adprouter.trtllm also logs under):

    adprouter.decisions  one record per decision: the ranks' counts, expected,
                         the unassigned requests, the state digest and the
                         wall time route() took in Python
    adprouter.receipts   with a router created with explain=True, one record
                         per decision holding every request's receipt (why it
                         went where it did), written after its decision record

Both are gated by ``adprouter.decisions``: Router.route and
adprouter.trtllm's route_requests ask ``decisions.isEnabledFor(DEBUG)`` once
per call, and do nothing else for logging when it says no. When it says yes
they read the clock before the decision and call routed() (or
routed_items()) after it; everything else happens here, outside the
library's decision. Nothing here raises into route(): a failure to read
what is logged is itself logged.

Each decision record carries its fields as ``record.adprouter`` (a dict:
handle, policy, decision, placed, expected, unassigned, elapsed_s, digest),
each receipts record the Receipt objects as ``record.adprouter_receipts``,
for handlers that want structure rather than text.
"""

import logging
import time
import weakref

from ._errors import InvalidArgumentError

DEBUG = logging.DEBUG

log = logging.getLogger("adprouter")
decisions = logging.getLogger("adprouter.decisions")
receipts = logging.getLogger("adprouter.receipts")

# The clock route() reads before a decision it logs.
clock = time.perf_counter

# How many unassigned ids a decision's message lists (record.adprouter has
# them all).
_SHOWN_IDS = 16

# Routers known to keep no receipts (created without explain=True): asked
# once each.
_silent = weakref.WeakSet()


def routed(router, res, t0):
    """Logs one decision of router, res (a RouteResult) its result and t0
    the clock when route() began; returns res."""
    elapsed = clock() - t0
    try:
        assignment = res.assignment
        placed = [len(assignment.get(k, ())) for k in range(router.dp_size)]
        unassigned = list(res.unassigned)
    except Exception:
        log.debug("adprouter: could not read a decision to log it", exc_info=True)
        return res
    _emit(router, placed, res.expected, unassigned, elapsed)
    return res


def routed_items(router, expected, out, left, t0):
    """Logs one decision of adprouter.trtllm's C path: out {rank: [items]},
    left the items left over, router the library Router behind it."""
    elapsed = clock() - t0
    try:
        placed = [len(out.get(k, ())) for k in range(router.dp_size)]
        unassigned = [getattr(item, "id", None) for item in left]
    except Exception:
        log.debug("adprouter: could not read a decision to log it", exc_info=True)
        return
    _emit(router, placed, expected, unassigned, elapsed)


def _emit(router, placed, expected, unassigned, elapsed):
    handle = getattr(router, "_handle", 0)
    try:
        decision = router.stats(0)["decisions"]
        digest = router.state_digest()
    except Exception:  # closed meanwhile by another thread: log what is known
        decision, digest = -1, None
    fields = dict(handle=handle, policy=router.policy, decision=decision, placed=placed, expected=expected,
                  unassigned=unassigned, elapsed_s=elapsed, digest=digest)
    ids = ""
    if unassigned:
        shown = ", ".join(map(repr, unassigned[:_SHOWN_IDS]))
        ids = " unassigned_ids=[%s%s]" % (shown, ", ..." if len(unassigned) > _SHOWN_IDS else "")
    decisions.debug("route handle=%d policy=%s decision=%d requests=%d placed=%s expected=%d unassigned=%d%s "
                    "digest=%s elapsed_us=%.1f",
                    handle, router.policy, decision, sum(placed) + len(unassigned), placed, expected,
                    len(unassigned), ids, "-" if digest is None else "%016x" % digest, elapsed * 1e6,
                    extra={"adprouter": fields})
    if router in _silent or not receipts.isEnabledFor(DEBUG):
        return
    try:
        got = router.receipts()
    except InvalidArgumentError:  # explain is off: never ask this router again
        _silent.add(router)
        return
    except Exception as e:
        receipts.debug("receipts handle=%d decision=%d: not read: %s", handle, decision, e)
        return
    receipts.debug("receipts handle=%d decision=%d (%d requests)\n%s", handle, decision, len(got),
                   "\n".join(map(str, got)), extra={"adprouter_receipts": got})
