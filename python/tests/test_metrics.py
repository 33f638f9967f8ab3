"""Tests of adprouter.metrics: the Prometheus text exposition of routers'
stats() (read back with a strict parser of the text format written here),
counters that only go up, closed routers reported down, label escaping,
the limits, adprouter.trtllm's own counters, the HTTP helper and the
prometheus_client collector (skipped where that package is missing).
"""

import os
import re
import subprocess
import sys
import unittest
import urllib.error
import urllib.request

import adprouter
import adprouter.metrics as M
import adprouter.trtllm as T
from adprouter import RankState, Request, Router

import trtllm_fakes as F

try:
    import prometheus_client
except ImportError:
    prometheus_client = None


_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_TYPES = ("counter", "gauge", "histogram", "summary", "untyped")


def _unescape(text, allowed):
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\":
            nxt = text[i + 1:i + 2]
            if nxt not in allowed:
                raise ValueError("bad escape \\%s in %r" % (nxt, text))
            out.append({"\\": "\\", "n": "\n", '"': '"'}[nxt])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _value(text):
    if text in ("NaN", "+Inf", "-Inf", "Inf"):
        return float(text.replace("Inf", "inf").replace("NaN", "nan"))
    if not re.fullmatch(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?", text):
        raise ValueError("bad value %r" % text)
    return float(text)


def _labels(text):
    """(name, value) pairs of a sample's {...} contents."""
    out, i = [], 0
    while i < len(text):
        m = _LABEL.match(text, i)
        if not m:
            raise ValueError("bad label name at %r" % text[i:])
        name = m.group()
        i = m.end()
        if text[i:i + 2] != '="':
            raise ValueError("want =\" after %s in %r" % (name, text))
        i += 2
        j = i
        while True:
            if j >= len(text):
                raise ValueError("unterminated label value in %r" % text)
            if text[j] == "\\":
                j += 2
                continue
            if text[j] == '"':
                break
            if text[j] == "\n":
                raise ValueError("raw newline in a label value")
            j += 1
        out.append((name, _unescape(text[i:j], ('\\', 'n', '"'))))
        i = j + 1
        if i < len(text):
            if text[i] != ",":
                raise ValueError("want , between labels in %r" % text)
            i += 1
    names = [n for n, _ in out]
    if len(set(names)) != len(names):
        raise ValueError("repeated label in %r" % text)
    return tuple(out)


def parse(text):
    """A strict reading of the text format 0.0.4 as render() writes it:
    {family: {"type", "help", "samples": {label pairs: value}}}. Raises
    ValueError on anything out of place: HELP or TYPE twice or after the
    family's samples, samples of a family split by another's, a sample name
    other than its family's, a counter not named *_total, a duplicate
    series, a bad escape, label name or value."""
    if text and not text.endswith("\n"):
        raise ValueError("the exposition does not end with a newline")
    fams, current, closed = {}, None, set()

    def family(name):
        nonlocal current
        if name != current:
            if name in closed:
                raise ValueError("family %s split" % name)
            if current is not None:
                closed.add(current)
            current = name
        return fams.setdefault(name, {"type": None, "help": None, "samples": {}})

    for line in text.split("\n")[:-1]:
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if parts[1] not in ("HELP", "TYPE"):
                continue  # a comment
            if len(parts) < 4 or not _NAME.match(parts[2]):
                raise ValueError("bad line %r" % line)
            f = family(parts[2])
            key = parts[1].lower()
            if f[key] is not None:
                raise ValueError("%s of %s twice" % (parts[1], parts[2]))
            if f["samples"]:
                raise ValueError("%s of %s after its samples" % (parts[1], parts[2]))
            if key == "type":
                if parts[3] not in _TYPES:
                    raise ValueError("bad type %r" % parts[3])
                f["type"] = parts[3]
            else:
                f["help"] = _unescape(parts[3], ("\\", "n"))
            continue
        m = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)( -?\d+)?", line)
        if not m:
            raise ValueError("bad sample line %r" % line)
        name, labels, value = m.group(1), _labels(m.group(3) or ""), _value(m.group(4))
        f = family(name)
        if f["type"] is None or f["help"] is None:
            raise ValueError("sample of %s before its HELP and TYPE" % name)
        if f["type"] == "counter" and not name.endswith("_total"):
            raise ValueError("counter %s not named *_total" % name)
        if labels in f["samples"]:
            raise ValueError("duplicate series %s%r" % (name, labels))
        f["samples"][labels] = value
    return fams


def idle(n, **kw):
    return [RankState(rank=k, **kw) for k in range(n)]


def prompts(first, n, length=96, shared=64):
    """n requests from id first on, sharing a prefix of shared tokens."""
    return [Request(id=first + i, tokens=list(range(shared)) + [1000 + 7 * (first + i) + j
                                                                  for j in range(length - shared)])
            for i in range(n)]


def series(fams, name, **labels):
    return fams[name]["samples"][tuple(labels.items())]


class ParserTest(unittest.TestCase):
    """The parser refuses what the format forbids (else the other tests
    would prove nothing)."""

    def test_refuses(self):
        good = '# HELP a_total x\n# TYPE a_total counter\na_total{router="r"} 1\n'
        self.assertEqual(parse(good)["a_total"]["samples"], {(("router", "r"),): 1.0})
        for bad in (
            good.rstrip("\n"),
            '# TYPE a_total counter\na_total{router="r"} 1\n',                       # no HELP
            good + '# HELP a_total y\n',                                            # HELP twice, late
            '# HELP a x\n# TYPE a counter\na 1\n',                                  # counter without _total
            good + 'a_total{router="r"} 2\n',                                       # duplicate series
            good + '# HELP b x\n# TYPE b gauge\nb 1\na_total{router="s"} 1\n',      # split family
            '# HELP a x\n# TYPE a gauge\na{router="r\\t"} 1\n',                     # bad escape
            '# HELP a x\n# TYPE a gauge\na{router="r",router="s"} 1\n',             # repeated label
            '# HELP a x\n# TYPE a gauge\na{1router="r"} 1\n',                       # bad label name
            '# HELP a x\n# TYPE a gauge\na 1.2.3\n',                                # bad value
            '# HELP a x\n# TYPE a gauge\nb 1\n',                                    # sample before HELP
        ):
            with self.assertRaises(ValueError, msg=bad):
                parse(bad)


class RenderTest(unittest.TestCase):
    def route_some(self, r, n=6):
        """A few decisions with hits, warmup and unassigned requests."""
        states = idle(r.dp_size, kv_capacity_tokens=1 << 16, free_kv_tokens=1 << 15)
        states[1].memory_pressure = True
        for k in range(n):
            r.route(states, prompts(10 * k, 7), 2)

    def test_parses_and_equals_stats(self):
        with Router(dp_size=3, preset="full", warmup_min_requests=1, max_sessions=77,
                    index_max_bytes=1 << 20) as r:
            self.route_some(r)
            text = M.render({"main": r}, hot_groups=2)
            st = r.stats(2)
        fams = parse(text)
        self.assertEqual(set(fams) - set(M.FAMILIES), set())
        for name, f in fams.items():
            self.assertEqual(f["type"], M.FAMILIES[name][0], name)
            self.assertEqual(f["help"], M.FAMILIES[name][2], name)
            self.assertEqual(f["type"] == "counter", name.endswith("_total"), name)
            for labels in f["samples"]:
                self.assertEqual(tuple(k for k, _ in labels), M.FAMILIES[name][1], name)
        # The adapter's families are absent for a plain Router, every other one present.
        self.assertEqual(set(M.FAMILIES) - set(fams), {"adprouter_carried_requests",
                                                        "adprouter_requeued_requests_total"})
        self.assertEqual(series(fams, "adprouter_router_up", router="main"), 1)
        self.assertEqual(series(fams, "adprouter_router_info", router="main", policy="kv_cache_aware",
                                version=adprouter.version()), 1)
        self.assertEqual(series(fams, "adprouter_ranks", router="main"), 3)
        self.assertEqual(series(fams, "adprouter_max_sessions", router="main"), 77)
        self.assertEqual(series(fams, "adprouter_index_max_bytes", router="main"), 1 << 20)
        for fam, key in M._ROUTER_FIELDS:
            self.assertEqual(series(fams, fam, router="main"), st[key], fam)
        for k, rank in enumerate(st["ranks"]):
            for fam, key in M._RANK_FIELDS:
                self.assertEqual(series(fams, fam, router="main", rank=str(k)), rank[key], fam)
        self.assertEqual(len(st["hot_groups"]), 1)
        for pos, g in enumerate(st["hot_groups"]):
            for fam, key in M._GROUP_FIELDS:
                self.assertEqual(series(fams, fam, router="main", position=str(pos)), g[key], fam)
        # The run exercised what is compared: not all zeros.
        self.assertEqual(st["decisions"], 6)
        self.assertGreater(st["unassigned"], 0)
        self.assertGreater(st["index_entries"], 0)
        self.assertGreater(sum(rk["predicted_hit_tokens"] for rk in st["ranks"]), 0)
        self.assertEqual([rk["memory_pressure"] for rk in st["ranks"]], [False, True, False])

    def test_hot_group_options(self):
        with Router(dp_size=2, preset="full", warmup_min_requests=1) as r:
            r.route(idle(2), prompts(0, 4), 8)
            family = r.stats()["hot_groups"][0]["family"]
            self.assertEqual(M.render({"r": r}, hot_groups=0).count("adprouter_hot_group"), 0)
            fams = parse(M.render({"r": r}, family_label=True))
        self.assertEqual(series(fams, "adprouter_hot_group_requests", router="r", position="0",
                                family="%016x" % family), 4)
        for bad in (-1, 1 << 17, 2.0, True):
            with self.assertRaises(ValueError):
                M.render({}, hot_groups=bad)
            with self.assertRaises(ValueError):
                M.Collector({}, hot_groups=bad)

    def test_counters_only_go_up(self):
        with Router(dp_size=4, preset="full", warmup_min_requests=1) as r:
            # 8 blocks per rank: evictions. Single requests of one family
            # while idle: demand warmup. Six at caps of 1 or 2: unassigned.
            states = idle(4, kv_capacity_tokens=32 * 8, free_kv_tokens=32 * 8)
            last, grew = None, set()
            for k in range(12):
                r.route(states, prompts(100 * k, 6 if k % 3 == 2 else 1, length=200, shared=64), 1 + k % 2)
                fams = parse(M.render({"r": r}))
                counters = {(name, labels): v for name, f in fams.items() if f["type"] == "counter"
                            for labels, v in f["samples"].items()}
                if last is not None:
                    self.assertEqual(set(counters), set(last))
                    for key, v in counters.items():
                        self.assertGreaterEqual(v, last[key], key)
                        if v > last[key]:
                            grew.add(key[0])
                last = counters
        self.assertEqual(grew, {name for name, (kind, _, _) in M.FAMILIES.items() if kind == "counter"}
                         - {"adprouter_requeued_requests_total"})

    def test_closed_router_is_down(self):
        a, b = Router(dp_size=2), Router(policy="conversation", dp_size=3)
        a.route(idle(2), prompts(0, 2), 4)
        b.close()
        routers = {"a": a, "b": b}
        fams = parse(M.render(routers))
        self.assertEqual(series(fams, "adprouter_router_up", router="a"), 1)
        self.assertEqual(series(fams, "adprouter_router_up", router="b"), 0)
        for name, f in fams.items():
            routers_seen = {dict(labels)["router"] for labels in f["samples"]}
            self.assertEqual(routers_seen, {"a", "b"} if name == "adprouter_router_up" else {"a"}, name)
        a.close()
        fams = parse(M.render(routers))
        self.assertEqual(list(fams), ["adprouter_router_up"])
        self.assertEqual(fams["adprouter_router_up"]["samples"],
                         {(("router", "a"),): 0, (("router", "b"),): 0})
        self.assertEqual(M.render({}), "")

    def test_unreadable_router_is_down_with_one_warning(self):
        class Broken:
            router = Router(dp_size=2)

            @property
            def carried(self):
                raise RuntimeError("boom")

        routers = {"x": object(), "y": Broken()}
        with self.assertLogs("adprouter.metrics", "WARNING") as cm:
            fams = parse(M.render(routers))
            parse(M.render(routers))  # warned once per router and error
        self.assertEqual(len(cm.records), 2, cm.output)
        self.assertEqual(fams["adprouter_router_up"]["samples"], {(("router", "x"),): 0, (("router", "y"),): 0})
        Broken.router.close()

    def test_label_escaping(self):
        names = ['quote"d', "back\\slash", "new\nline", "all\\\"\n\\n", "ünï cödé {x=\"1\"}", "", 7]
        with Router(dp_size=1) as r:
            fams = parse(M.render({n: r for n in names}))
        got = {dict(labels)["router"] for labels in fams["adprouter_router_up"]["samples"]}
        self.assertEqual(got, {str(n) for n in names})
        with Router(dp_size=1) as r, Router(dp_size=2) as other:
            with self.assertLogs("adprouter.metrics", "WARNING"):
                fams = parse(M.render({7: r, "7": other}))  # one name: the first router only
        self.assertEqual(fams["adprouter_ranks"]["samples"], {(("router", "7"),): 1})
        text = M.render({'a"\n\\': Router(dp_size=1)})
        self.assertIn('router="a\\"\\n\\\\"', text)

    def test_limits(self):
        # The router's effective options: explicit, from a preset, or the defaults.
        cases = [({}, 65536, 320 << 20), ({"max_sessions": "12", "index_max_bytes": 4096}, 12, 4096),
                 ({"preset": "recommended", "max_sessions": 5}, 5, 320 << 20)]
        for opts, sessions, index in cases:
            with Router(dp_size=2, **opts) as r:
                fams = parse(M.render({"r": r}))
                effective = r.options()
            self.assertEqual(series(fams, "adprouter_max_sessions", router="r"), sessions, opts)
            self.assertEqual(series(fams, "adprouter_index_max_bytes", router="r"), index, opts)
            self.assertEqual((int(effective["max_sessions"]), int(effective["index_max_bytes"])),
                             (sessions, index))

    def test_conversation_map_size(self):
        with Router(policy="conversation", dp_size=2, max_sessions=3) as r:
            for k in range(5):
                r.route(idle(2), [Request(id=k, num_tokens=10, conversation_id="c%d" % k)], 4)
            fams = parse(M.render({"conv": r}))
        self.assertEqual(series(fams, "adprouter_conversations", router="conv"), 3)
        self.assertEqual(series(fams, "adprouter_max_sessions", router="conv"), 3)


class Queue:
    def __init__(self):
        self.items = []

    def prepend_requests(self, items):
        self.items[:0] = items


class Executor:
    def __init__(self):
        self.waiting_queue = Queue()


class TrtllmTest(unittest.TestCase):
    def test_adapter_counters(self):
        executor = Executor()
        carrying = T.DefaultADPRouter(F.Dist(0, 2))
        requeuing = T.DefaultADPRouter(F.Dist(0, 2), executor=executor)
        states = [T.RankState(rank=k) for k in range(2)]
        for r in (carrying, requeuing):
            r.route_requests(states, [F.item(i, [1] * (10 + i)) for i in range(5)], 2)
        fams = parse(M.render({"carrying": carrying, "requeuing": requeuing}))
        self.assertEqual(len(carrying.carried), 1)
        self.assertEqual(series(fams, "adprouter_carried_requests", router="carrying"), 1)
        self.assertEqual(series(fams, "adprouter_requeued_requests_total", router="carrying"), 0)
        self.assertEqual(series(fams, "adprouter_carried_requests", router="requeuing"), 0)
        self.assertEqual(series(fams, "adprouter_requeued_requests_total", router="requeuing"), 1)
        self.assertEqual(len(executor.waiting_queue.items), 1)
        for name, r in (("carrying", carrying), ("requeuing", requeuing)):
            st = r.stats()
            self.assertEqual(series(fams, "adprouter_decisions_total", router=name), st["decisions"])
            self.assertEqual(series(fams, "adprouter_rank_placed_requests_total", router=name, rank="0"),
                             st["ranks"][0]["placed"])
            self.assertEqual(series(fams, "adprouter_router_info", router=name, policy="default",
                                    version=adprouter.version()), 1)
        carrying.close()
        fams = parse(M.render({"carrying": carrying, "requeuing": requeuing}))
        self.assertEqual(series(fams, "adprouter_router_up", router="carrying"), 0)
        self.assertEqual(series(fams, "adprouter_router_up", router="requeuing"), 1)
        self.assertEqual({dict(k)["router"] for k in fams["adprouter_carried_requests"]["samples"]}, {"requeuing"})
        requeuing.close()

    def test_conversation_adapter_limit(self):
        r = T.ConversationAwareADPRouter(F.Dist(0, 2), max_sessions=9)
        fams = parse(M.render({"c": r}))
        self.assertEqual(series(fams, "adprouter_max_sessions", router="c"), 9)
        r.close()


class ServeTest(unittest.TestCase):
    def test_serve(self):
        with Router(dp_size=2) as r:
            r.route(idle(2), prompts(0, 3), 4)
            server = M.serve({"r": r}, 0)
            try:
                host, port = server.server_address[:2]
                self.assertEqual(host, "127.0.0.1")
                with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as resp:
                    self.assertEqual(resp.headers["Content-Type"], M.CONTENT_TYPE)
                    body = resp.read().decode()
                self.assertEqual(body, M.render({"r": r}))
                self.assertEqual(series(parse(body), "adprouter_decisions_total", router="r"), 1)
                with self.assertRaises(urllib.error.HTTPError) as cm:
                    urllib.request.urlopen("http://127.0.0.1:%d/other" % port, timeout=10)
                self.assertEqual(cm.exception.code, 404)
                cm.exception.close()
            finally:
                server.shutdown()
                server.server_close()


class CollectorTest(unittest.TestCase):
    def test_imports_without_prometheus_client(self):
        code = ("import sys; sys.modules['prometheus_client'] = None\n"
                "import adprouter, adprouter.metrics as M\n"
                "r = adprouter.Router(dp_size=2)\n"
                "assert 'adprouter_router_up{router=\"r\"} 1' in M.render({'r': r})\n"
                "c = M.Collector({'r': r})\n"
                "try:\n    list(c.collect())\nexcept ImportError:\n    print('ok')\n")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual((out.returncode, out.stdout.strip()), (0, "ok"), out.stderr)

    @unittest.skipIf(prometheus_client is None, "prometheus_client is not installed")
    def test_collector(self):
        from prometheus_client import CollectorRegistry, generate_latest
        from prometheus_client.parser import text_string_to_metric_families
        with Router(dp_size=3, preset="full", warmup_min_requests=1) as r, Router(dp_size=2) as closed:
            closed.close()
            r.route(idle(3), prompts(0, 7), 2)
            routers = {"main": r, 'we"ird\n': closed}
            registry = CollectorRegistry()
            registry.register(M.Collector(routers))
            ours = parse(M.render(routers))
            theirs = parse(generate_latest(registry).decode())
            # prometheus_client's own parser reads our exposition.
            read = {(s.name, tuple(sorted(s.labels.items()))): s.value
                    for fam in text_string_to_metric_families(M.render(routers)) for s in fam.samples}
        self.assertEqual(set(theirs), set(ours))
        for name, f in ours.items():
            self.assertEqual(theirs[name]["type"], f["type"], name)
            # (prometheus_client sorts the labels)
            self.assertEqual({tuple(sorted(k)): v for k, v in theirs[name]["samples"].items()},
                             {tuple(sorted(k)): v for k, v in f["samples"].items()}, name)
            for labels, v in f["samples"].items():
                self.assertEqual(read[(name, tuple(sorted(labels)))], v, name)
        self.assertEqual(series(ours, "adprouter_router_up", router='we"ird\n'), 0)
        self.assertEqual(series(theirs, "adprouter_decisions_total", router="main"), 1)
        # describe() names every family: a second collector's names clash.
        with self.assertRaises(ValueError):
            registry.register(M.Collector({}))


if __name__ == "__main__":
    unittest.main()
