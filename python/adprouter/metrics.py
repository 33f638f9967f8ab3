"""adprouter.metrics: routers' counters in the Prometheus text format.

Standard library only. ``render(routers)`` is the exposition (text format
0.0.4) of every router of a mapping {name: router}, where a router is an
adprouter.Router or an adprouter.trtllm router (its library Router's
counters, plus the adapter's carried and requeued requests); ``name``
becomes the ``router`` label. ``serve(routers, port)`` answers
``GET /metrics`` from a daemon thread (bound to 127.0.0.1 unless told
otherwise), ``handler(routers)`` is the request handler class for an
http.server of your own, and ``Collector(routers)`` registers the same
families with prometheus_client's registry when that package is installed
(it is imported only then)::

    import adprouter, adprouter.metrics
    routers = {"main": adprouter.Router(dp_size=4)}
    print(adprouter.metrics.render(routers))
    server = adprouter.metrics.serve(routers, 9464)   # http://127.0.0.1:9464/metrics

The mapping is read at every scrape: routers added to it or removed from it
later are exported from then on. A closed router, or one whose counters
cannot be read, is exported as ``adprouter_router_up{router="..."} 0`` and
nothing else: reading never raises into a scrape. Every family is listed in
docs/operations.md with its unit; FAMILIES here holds their names, kinds and
help texts.
"""

import http.server
import logging
import math
import threading
import weakref

from . import _abi
from ._errors import InvalidHandleError
from ._router import _MAX_GROUPS, Router

__all__ = ["render", "serve", "handler", "Collector", "FAMILIES", "CONTENT_TYPE"]

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_R = ("router",)
_RANK = ("router", "rank")
_GROUP = ("router", "position")

# name: (kind, label names, help). The order is the exposition's.
FAMILIES = {
    "adprouter_router_up": (
        "gauge", _R, "1 when the router's counters were read, 0 when it is closed or they could not be read."),
    "adprouter_router_info": (
        "gauge", ("router", "policy", "version"), "Always 1: the router's policy and the library version."),
    "adprouter_ranks": ("gauge", _R, "Attention-DP ranks the router routes over (dp_size)."),
    "adprouter_decisions_total": ("counter", _R, "Routing decisions made (route() calls that succeeded)."),
    "adprouter_unassigned_requests_total": (
        "counter", _R, "Requests returned unassigned because every rank was full, to be requeued by the caller."),
    "adprouter_warmup_placements_total": (
        "counter", _R, "Requests placed by warmup, cold-start and demand together (KV-aware policy)."),
    "adprouter_demand_warmup_placements_total": (
        "counter", _R, "Requests placed by demand warmup alone (KV-aware policy, warmup demand)."),
    "adprouter_pending_warmup_ranks": ("gauge", _R, "Ranks the cold-start warmup has yet to send a request to."),
    "adprouter_conversations": ("gauge", _R, "Conversation bindings (conversation id to rank) held."),
    "adprouter_max_sessions": (
        "gauge", _R, "Bound of the conversation map (max_sessions); beyond it the least recently used is evicted."),
    "adprouter_index_entries": ("gauge", _R, "(block, rank) entries in the prefix index."),
    "adprouter_index_bytes": ("gauge", _R, "Memory the prefix index holds (its arrays' capacity), in bytes."),
    "adprouter_index_max_bytes": ("gauge", _R, "Bound of the prefix index's memory (index_max_bytes), in bytes."),
    "adprouter_carried_requests": (
        "gauge", _R, "adprouter.trtllm: requests held over, routed first in the next call."),
    "adprouter_requeued_requests_total": (
        "counter", _R, "adprouter.trtllm: requests put back at the front of the executor's waiting queue."),
    "adprouter_rank_placed_requests_total": ("counter", _RANK, "Requests routed to the rank."),
    "adprouter_rank_predicted_hit_tokens_total": (
        "counter", _RANK, "Prompt tokens the KV-aware policy expected the rank to have cached, summed over the "
                          "requests it routed there."),
    "adprouter_rank_index_blocks": ("gauge", _RANK, "KV blocks the prefix index expects the rank to cache."),
    "adprouter_rank_index_limit_blocks": (
        "gauge", _RANK, "Bound of the rank's share of the prefix index, in blocks (its KV capacity)."),
    "adprouter_rank_index_evicted_blocks_total": (
        "counter", _RANK, "Blocks evicted from the rank's share of the prefix index (its bound or the total one)."),
    "adprouter_rank_memory_pressure": (
        "gauge", _RANK, "1 when the rank's last state reported GPU memory pressure, else 0."),
    "adprouter_hot_group_requests": (
        "gauge", _GROUP, "Requests of the position-th most requested hot prompt family in the warmup window."),
    "adprouter_hot_group_share": (
        "gauge", _GROUP, "The family's share of the requests in the warmup window (0 to 1)."),
    "adprouter_hot_group_replicas": ("gauge", _GROUP, "Ranks the prefix index expects to hold the family."),
    "adprouter_hot_group_target_replicas": ("gauge", _GROUP, "Ranks demand warmup wants to hold the family."),
}

# Router-wide families read from stats() by key.
_ROUTER_FIELDS = (
    ("adprouter_decisions_total", "decisions"),
    ("adprouter_unassigned_requests_total", "unassigned"),
    ("adprouter_warmup_placements_total", "warmup_placements"),
    ("adprouter_demand_warmup_placements_total", "demand_placements"),
    ("adprouter_pending_warmup_ranks", "pending_warmup"),
    ("adprouter_conversations", "conversations"),
    ("adprouter_index_entries", "index_entries"),
    ("adprouter_index_bytes", "index_bytes"),
)
_RANK_FIELDS = (
    ("adprouter_rank_placed_requests_total", "placed"),
    ("adprouter_rank_predicted_hit_tokens_total", "predicted_hit_tokens"),
    ("adprouter_rank_index_blocks", "index_blocks"),
    ("adprouter_rank_index_limit_blocks", "index_limit_blocks"),
    ("adprouter_rank_index_evicted_blocks_total", "index_evicted_blocks"),
    ("adprouter_rank_memory_pressure", "memory_pressure"),
)
_GROUP_FIELDS = (
    ("adprouter_hot_group_requests", "requests"),
    ("adprouter_hot_group_share", "share"),
    ("adprouter_hot_group_replicas", "replicas"),
    ("adprouter_hot_group_target_replicas", "target"),
)


# ---- reading routers -----------------------------------------------------------------

# Each Router's (max_sessions, index_max_bytes), read once (a router's
# options never change).
_limits_of = weakref.WeakKeyDictionary()

# (router name, error type) pairs warned about, so that a scrape every few
# seconds warns once.
_warned = set()


def _option_int(value):
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def _limits(lib):
    """(max_sessions, index_max_bytes) of a Router, as its effective
    options say (Router.options(): presets expanded, defaults filled in);
    None for one it does not give."""
    got = _limits_of.get(lib)
    if got is None:
        opts = lib.options()
        got = _limits_of[lib] = (_option_int(opts.get("max_sessions")), _option_int(opts.get("index_max_bytes")))
    return got


def _read(name, obj, hot_groups, family_label):
    """[(family, label values, value)] of one router; raises when it cannot
    be read."""
    lib = obj if isinstance(obj, Router) else getattr(obj, "router", None)
    if not isinstance(lib, Router):
        raise TypeError("%r is neither an adprouter.Router nor an adprouter.trtllm router" % (obj,))
    st = lib.stats(hot_groups)
    # Read the adapter's counters before writing anything: a failure leaves
    # the router down, not half exported.
    carried = requeued = None
    if obj is not lib:
        carried = len(obj.carried) if hasattr(obj, "carried") else None
        requeued = getattr(obj, "_requeued", None)
    sessions, index = _limits(lib)
    out = [("adprouter_router_up", (name,), 1),
           ("adprouter_router_info", (name, str(lib.policy), _abi.version()), 1),
           ("adprouter_ranks", (name,), lib.dp_size)]
    out += [(fam, (name,), st[key]) for fam, key in _ROUTER_FIELDS]
    if sessions is not None:
        out.append(("adprouter_max_sessions", (name,), sessions))
    if index is not None:
        out.append(("adprouter_index_max_bytes", (name,), index))
    if carried is not None:
        out.append(("adprouter_carried_requests", (name,), carried))
    if isinstance(requeued, int):
        out.append(("adprouter_requeued_requests_total", (name,), requeued))
    for k, rank in enumerate(st["ranks"]):
        out += [(fam, (name, str(k)), int(rank[key])) for fam, key in _RANK_FIELDS]
    for pos, g in enumerate(st["hot_groups"][:hot_groups]):
        labels = (name, str(pos)) + (("%016x" % g["family"],) if family_label else ())
        out += [(fam, labels, g[key]) for fam, key in _GROUP_FIELDS]
    return out


def _check_groups(hot_groups):
    if isinstance(hot_groups, bool) or not isinstance(hot_groups, int) or not 0 <= hot_groups <= _MAX_GROUPS:
        raise ValueError("hot_groups = %r, want an integer 0..%d" % (hot_groups, _MAX_GROUPS))


def _labelnames(family, family_label):
    names = FAMILIES[family][1]
    return names + ("family",) if family_label and names == _GROUP else names


def _families(routers, hot_groups, family_label):
    """[(family, kind, help, label names, [(label values, value)])] of every
    router of the mapping, families in FAMILIES order, empty ones left out."""
    _check_groups(hot_groups)
    samples = {name: [] for name in FAMILIES}
    seen = set()
    for name, obj in list(routers.items()):
        name = str(name)
        if name in seen:  # 7 and "7": one series each, or the scrape is invalid
            if (name, "duplicate") not in _warned:
                _warned.add((name, "duplicate"))
                log.warning("adprouter.metrics: two routers named %r: exporting the first", name)
            continue
        seen.add(name)
        try:
            got = _read(name, obj, hot_groups, family_label)
        except Exception as e:
            if not isinstance(e, InvalidHandleError) and (name, type(e)) not in _warned:
                _warned.add((name, type(e)))
                log.warning("adprouter.metrics: router %r exported as down: %s: %s", name, type(e).__name__, e)
            got = [("adprouter_router_up", (name,), 0)]
        for fam, labels, value in got:
            samples[fam].append((labels, value))
    return [(fam, FAMILIES[fam][0], FAMILIES[fam][2], _labelnames(fam, family_label), samples[fam])
            for fam in FAMILIES if samples[fam]]


# ---- the text format -----------------------------------------------------------------

def _escape_label(value):
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text):
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def render(routers, hot_groups=4, family_label=False):
    """The Prometheus text exposition (format 0.0.4) of routers, a mapping
    {name: adprouter.Router or adprouter.trtllm router}: every family of
    FAMILIES that has a sample, each router's under router="name".

    hot_groups: how many of the most requested hot prompt families to
    export per router (label position="0".."hot_groups-1"; 0: none).
    family_label: also label them family="<first-block hash, 16 hex
    digits>" (bounded by hot_groups per scrape, but the values change with
    traffic: every new family is a new series)."""
    lines = []
    for fam, kind, text, names, samples in _families(routers, hot_groups, family_label):
        lines.append("# HELP %s %s" % (fam, _escape_help(text)))
        lines.append("# TYPE %s %s" % (fam, kind))
        for values, value in samples:
            labels = ",".join('%s="%s"' % (k, _escape_label(v)) for k, v in zip(names, values))
            lines.append("%s{%s} %s" % (fam, labels, _number(value)))
    return "\n".join(lines) + "\n" if lines else ""


# ---- HTTP ----------------------------------------------------------------------------

def handler(routers, hot_groups=4, family_label=False, path="/metrics"):
    """A http.server request handler class answering GET path with
    render(routers, ...) and 404 elsewhere; its access log goes to the
    adprouter.metrics logger at DEBUG."""

    class MetricsHandler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.split("?", 1)[0] != path:
                self.send_error(404)
                return
            body = render(routers, hot_groups, family_label).encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format, *args):
            log.debug("%s %s", self.address_string(), format % args)

    return MetricsHandler


def serve(routers, port, addr="127.0.0.1", hot_groups=4, family_label=False, path="/metrics"):
    """Serves render(routers, ...) at http://addr:port/path from a daemon
    thread and returns the server (server.server_address: where it listens,
    port 0 picks a free one; server.shutdown() then server.server_close()
    stop it). Binds to 127.0.0.1 unless addr says otherwise ("0.0.0.0": every
    interface)."""
    server = http.server.ThreadingHTTPServer((addr, port), handler(routers, hot_groups, family_label, path))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="adprouter-metrics", daemon=True)
    thread.start()
    return server


# ---- prometheus_client ---------------------------------------------------------------

class Collector:
    """The families of render() as a prometheus_client collector, for
    ``prometheus_client.REGISTRY.register(Collector(routers))``.
    prometheus_client is imported when the registry collects, not before:
    this class exists, and constructs, without it."""

    def __init__(self, routers, hot_groups=4, family_label=False):
        _check_groups(hot_groups)
        self.routers = routers
        self.hot_groups = hot_groups
        self.family_label = family_label

    @staticmethod
    def _family(fam, kind, text, names):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        if kind == "counter":
            return CounterMetricFamily(fam[:-len("_total")], text, labels=names)
        return GaugeMetricFamily(fam, text, labels=names)

    def collect(self):
        for fam, kind, text, names, samples in _families(self.routers, self.hot_groups, self.family_label):
            m = self._family(fam, kind, text, names)
            for values, value in samples:
                m.add_metric(list(values), value)
            yield m

    def describe(self):
        """Every family, without samples (the registry checks names with it)."""
        return [self._family(fam, kind, text, _labelnames(fam, self.family_label))
                for fam, (kind, _, text) in FAMILIES.items()]
