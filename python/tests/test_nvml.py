"""Tests of the binding's GPU-memory and KV-budget functions against the real
libadprouter.so: the pure arithmetic (kv_bytes_per_token, size_kv,
fill_rank_state without a device), the behaviour without an NVIDIA driver,
and the production NVML code path (go-nvml inside the library) against a fake
libnvidia-ml.so.1 built from nvml/nvmltest/testdata/fake_nvml.c.

Run from the repository root, after ./build.sh:
    PYTHONPATH=python python3 -m unittest python/tests/test_nvml.py -v

The fake is found through LD_LIBRARY_PATH, which the dynamic loader reads only
when a process starts, so every NVML scenario runs in a child Python process
(this file run as a script: ``python3 test_nvml.py --child SCENARIO``) that
prints its results as JSON. Each scenario runs twice: with lazy binding and
under LD_BIND_NOW=1. Without gcc the fake cannot be built and those tests are
skipped, unless $CI is set, where that is a failure.
"""

import fractions
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(TESTS_DIR))  # python/, for the child processes

import adprouter
from adprouter import (
    GPULostError,
    GPUNotFoundError,
    InvalidArgumentError,
    NVMLError,
    NVMLNotSupportedError,
    NVMLPermissionError,
    NVMLUnavailableError,
    RankState,
    Request,
    Router,
)

REPO = os.path.dirname(os.path.dirname(TESTS_DIR))
FAKE_SOURCE = os.path.join(REPO, "nvml", "nvmltest", "testdata", "fake_nvml.c")
PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(adprouter.__file__)))

GIB = 1 << 30
LLAMA_8B = 131072  # bf16 B/token of Llama-3.1-8B

# The fake GPUs of most scenarios: (uuid, total, free, reserved). GPU 2 is
# half-full of another process: half the free memory of the others.
DEVICES = [
    ("GPU-00000000-fake-4000-8000-000000000000", 80 * GIB, 60 * GIB, GIB // 2),
    ("GPU-11111111-fake-4000-8000-000000000001", 80 * GIB, 60 * GIB, GIB // 2),
    ("GPU-22222222-fake-4000-8000-000000000002", 80 * GIB, 30 * GIB, GIB // 2),
    ("GPU-33333333-fake-4000-8000-000000000003", 80 * GIB, 60 * GIB, GIB // 2),
]


def devices_env(devices):
    return ";".join("%s:%d:%d:%d:Fake H100" % d for d in devices)


def pci_bus_id(index):
    return "00000000:%02X:00.0" % (index + 1)  # as fake_nvml.c numbers them


def setUpModule():
    if not os.path.exists(adprouter.library_path()):
        raise RuntimeError("%s does not exist: build it with ./build.sh (or set ADPROUTER_LIBRARY)"
                           % adprouter.library_path())


# --- the child process side ------------------------------------------------------------


def attempt(fn, *args, **kwargs):
    """{"ok": result} or {"error": class name, "status": code, "message": text}."""
    try:
        return {"ok": fn(*args, **kwargs)}
    except adprouter.Error as e:
        return {"error": type(e).__name__, "status": e.status, "message": str(e)}


def state_dict(s):
    return {"kv_capacity_tokens": s.kv_capacity_tokens, "free_kv_tokens": s.free_kv_tokens,
            "memory_pressure": s.memory_pressure}


def child_fill(state, *args, **kwargs):
    r = attempt(adprouter.fill_rank_state, state, *args, **kwargs)
    if "ok" in r:
        r["ok"] = state_dict(r["ok"])
    r["state"] = state_dict(state)
    return r


def scenario_nodriver(args):
    """No libnvidia-ml: every NVML function fails cleanly, routing works."""
    import ctypes
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        return {"driver_present": True}
    except OSError:
        pass
    out = {"driver_present": False}
    out["init"] = attempt(adprouter.nvml_init)
    out["count"] = attempt(adprouter.nvml_device_count)
    out["memory_index"] = attempt(adprouter.read_memory, 0)
    out["memory_uuid"] = attempt(adprouter.read_memory, DEVICES[0][0])
    st = RankState(0, kv_capacity_tokens=7, free_kv_tokens=3, memory_pressure=True)
    out["fill_device"] = child_fill(st, 1000, 500, device=0, guard_band_bytes=GIB,
                                    bytes_per_token=LLAMA_8B)
    out["fill_nodevice"] = child_fill(RankState(0, memory_pressure=True), 1000, 500)
    out["shutdown"] = attempt(adprouter.nvml_shutdown)
    out["bytes_per_token"] = attempt(adprouter.kv_bytes_per_token, 32, kv_heads=8, head_dim=128)
    with Router(policy="kv_cache_aware", dp_size=2, capacity_aware=True) as r:
        res = r.route([RankState(0), RankState(1)],
                      [Request(id=i, tokens=list(range(i, i + 100))) for i in range(4)], 8)
    out["routed"] = sorted(i for ids in res.assignment.values() for i in ids)
    return out


def scenario_lookup(args):
    """Device count and memory by every kind of selector, lookup errors, the
    guard band, and reference-counted init/shutdown."""
    out = {"before_init": attempt(adprouter.read_memory, 0)}
    out["init"] = attempt(adprouter.nvml_init)
    out["count"] = attempt(adprouter.nvml_device_count)
    out["memory"] = {}
    for i, d in enumerate(DEVICES):
        uuid = d[0]
        for sel in (i, "%d" % i, "index:%d" % i, uuid, "uuid:" + uuid, pci_bus_id(i),
                    "pci:" + pci_bus_id(i), pci_bus_id(i)[4:].lower()):
            out["memory"]["%d %r" % (i, sel)] = attempt(adprouter.read_memory, sel)
    out["unknown_uuid"] = attempt(adprouter.read_memory, "GPU-ffffffff-none")
    out["unknown_pci"] = attempt(adprouter.read_memory, "00000000:7F:00.0")
    out["unknown_index"] = attempt(adprouter.read_memory, len(DEVICES) + 3)
    out["bad_selector"] = attempt(adprouter.read_memory, "not-a-gpu")
    # Guard band above / below the squeezed GPU's free memory (30 GiB).
    cap, free, band = 131072, 65536, 36 * GIB
    out["fill_pressure"] = child_fill(RankState(0), cap, free, device=DEVICES[2][0],
                                      guard_band_bytes=band, bytes_per_token=LLAMA_8B)
    out["fill_no_pressure"] = child_fill(RankState(0, memory_pressure=True), cap, free,
                                         device=DEVICES[0][0], guard_band_bytes=band,
                                         bytes_per_token=LLAMA_8B)
    out["fill_unknown"] = child_fill(RankState(0, kv_capacity_tokens=9, free_kv_tokens=4), cap, free,
                                     device="GPU-ffffffff-none", guard_band_bytes=band,
                                     bytes_per_token=LLAMA_8B)
    out["fill_zero_bpt"] = child_fill(RankState(0, kv_capacity_tokens=9, free_kv_tokens=4), cap, free,
                                      device=0, guard_band_bytes=band, bytes_per_token=0)
    # Reference counting: two inits need two shutdowns.
    out["init2"] = attempt(adprouter.nvml_init)
    out["shutdown1"] = attempt(adprouter.nvml_shutdown)
    out["after_one_shutdown"] = attempt(adprouter.nvml_device_count)
    out["shutdown2"] = attempt(adprouter.nvml_shutdown)
    out["after_last_shutdown"] = attempt(adprouter.read_memory, 0)
    out["extra_shutdown"] = attempt(adprouter.nvml_shutdown)
    return out


def scenario_calls(args):
    """One of each NVML call, for the fault-injection environments."""
    out = {"init": attempt(adprouter.nvml_init)}
    out["count"] = attempt(adprouter.nvml_device_count)
    out["memory"] = attempt(adprouter.read_memory, 0)
    out["memory_uuid"] = attempt(adprouter.read_memory, DEVICES[0][0])
    st = RankState(0, kv_capacity_tokens=7, free_kv_tokens=3, memory_pressure=True)
    out["fill"] = child_fill(st, 1000, 500, device=0, guard_band_bytes=GIB, bytes_per_token=LLAMA_8B,
                             min_interval_ms=-1)
    return out


def scenario_ratelimit(args):
    """fill_rank_state polls NVML at most once per min_interval_ms. The fake
    loses the GPU after N device calls: with N just large enough for the
    first fill, a second fill within the interval still succeeds (no poll),
    while a fresh read fails. N is found by trying 0, 1, ... (each try
    re-initialises NVML, which resets the fake's counter, and uses its own
    interval, which gives it its own rate limiter)."""
    dev = DEVICES[2][0]
    for n in range(12):
        os.environ["FAKE_NVML_LOST_AFTER"] = str(n)
        init = attempt(adprouter.nvml_init)
        if "ok" not in init:
            return {"init": init}
        interval = 3600 * 1000 + n
        st = RankState(0)
        first = child_fill(st, 131072, 65536, device=dev, guard_band_bytes=36 * GIB,
                           bytes_per_token=LLAMA_8B, min_interval_ms=interval)
        if "ok" in first:
            out = {"n": n, "first": first}
            out["second"] = child_fill(RankState(0), 131072, 1000, device=dev, guard_band_bytes=36 * GIB,
                                       bytes_per_token=LLAMA_8B, min_interval_ms=interval)
            out["fresh_read"] = attempt(adprouter.read_memory, dev)
            st = RankState(0, kv_capacity_tokens=5, free_kv_tokens=2)
            out["unlimited"] = child_fill(st, 131072, 65536, device=dev, guard_band_bytes=36 * GIB,
                                          bytes_per_token=LLAMA_8B, min_interval_ms=-1)
            adprouter.nvml_shutdown()
            return out
        if first.get("error") != "GPULostError":
            return {"n": n, "first": first}
        adprouter.nvml_shutdown()
    return {"n": None}


def scenario_ranks(args):
    """Each of 4 ranks reads its own GPU and fills its state from the same
    engine pool and guard band."""
    out = {"init": attempt(adprouter.nvml_init), "memory": [], "states": []}
    for rank, uuid in enumerate(args["uuids"]):
        out["memory"].append(attempt(adprouter.read_memory, uuid))
        st = RankState(rank)
        out["states"].append(child_fill(st, args["capacity"], args["free"], device=uuid,
                                        guard_band_bytes=args["guard"], bytes_per_token=LLAMA_8B))
    adprouter.nvml_shutdown()
    return out


def child_main():
    name = sys.argv[sys.argv.index("--child") + 1]
    args = json.loads(sys.argv[sys.argv.index("--child") + 2])
    out = globals()["scenario_" + name](args)
    sys.stdout.write("RESULT " + json.dumps(out) + "\n")


# --- the parent side ----------------------------------------------------------------


class PureFunctionsTest(unittest.TestCase):
    """Arithmetic only: no NVML involved."""

    def test_bytes_per_token_published_models(self):
        kv = adprouter.kv_bytes_per_token
        self.assertEqual(kv(32, kv_heads=8, head_dim=128), 131072)  # Llama-3.1-8B
        self.assertEqual(kv(80, kv_heads=8, head_dim=128), 327680)  # Llama-3.1-70B
        self.assertEqual(kv(61, attention="mla", kv_lora_rank=512, qk_rope_head_dim=64), 70272)  # DeepSeek-V3
        self.assertEqual(kv(32, kv_heads=8, head_dim=128, dtype="fp16"), 131072)
        self.assertEqual(kv(32, kv_heads=8, head_dim=128, dtype="bfloat16"), 131072)

    def test_bytes_per_token_dtypes(self):
        kv = adprouter.kv_bytes_per_token
        self.assertEqual(kv(32, kv_heads=8, head_dim=128, dtype="fp8"), 131072 // 2)
        self.assertEqual(kv(80, kv_heads=8, head_dim=128, dtype="fp8"), 327680 // 2)
        self.assertEqual(kv(61, attention="mla", kv_lora_rank=512, qk_rope_head_dim=64, dtype="fp8"),
                         70272 // 2)
        # nvfp4: 16 four-bit values and one fp8 scale in 9 bytes.
        self.assertEqual(kv(32, kv_heads=8, head_dim=128, dtype="nvfp4"), 2 * 32 * 8 * 128 * 9 // 16)
        self.assertEqual(kv(80, kv_heads=8, head_dim=128, dtype="nvfp4"), 2 * 80 * 8 * 128 * 9 // 16)

    def test_bytes_per_token_attention_tp(self):
        kv = adprouter.kv_bytes_per_token
        self.assertEqual(kv(80, kv_heads=8, head_dim=128, attention_tp=2), 327680 // 2)
        self.assertEqual(kv(80, kv_heads=8, head_dim=128, attention_tp=8), 327680 // 8)
        # More TP ranks than KV heads: each rank keeps one (replicated) head.
        self.assertEqual(kv(80, kv_heads=8, head_dim=128, attention_tp=16), 327680 // 8)

    def test_bytes_per_token_bad_shapes(self):
        kv = adprouter.kv_bytes_per_token
        bad = [
            dict(layers=0, kv_heads=8, head_dim=128),
            dict(layers=-1, kv_heads=8, head_dim=128),
            dict(layers=32, kv_heads=0, head_dim=128),
            dict(layers=32, kv_heads=8, head_dim=0),
            dict(layers=32, kv_heads=8, head_dim=128, attention_tp=3),  # 8 % 3
            dict(layers=32, kv_heads=8, head_dim=128, attention_tp=-2),
            dict(layers=32, kv_heads=8, head_dim=128, kv_lora_rank=512),  # MLA field on GQA
            dict(layers=32, kv_heads=8, head_dim=120, dtype="nvfp4"),  # 120 % 16
            dict(layers=61, attention="mla", kv_lora_rank=0, qk_rope_head_dim=64),
            dict(layers=61, attention="mla", kv_lora_rank=512, qk_rope_head_dim=64, kv_heads=8),
            dict(layers=61, attention="mla", kv_lora_rank=512, qk_rope_head_dim=64, dtype="nvfp4"),
            dict(layers=32, kv_heads=8, head_dim=128, dtype="int4"),
            dict(layers=32, attention="mha", kv_heads=8, head_dim=128),
        ]
        for shape in bad:
            with self.subTest(shape=shape):
                with self.assertRaises(InvalidArgumentError) as cm:
                    kv(**shape)
                self.assertTrue(str(cm.exception))

    @staticmethod
    def expected_budget(free, bpt, reserve=0, fraction=0.9, tpb=32, max_tokens=0):
        available = max(free - reserve, 0) if reserve <= free else 0
        usable = math.floor(fractions.Fraction(fraction) * available)  # exact, as documented
        fit = usable // bpt
        tokens = fit if not max_tokens or fit <= max_tokens else max_tokens
        blocks = tokens // tpb
        return dict(available_bytes=available, usable_bytes=usable, fit_tokens=fit,
                    tokens=blocks * tpb, blocks=blocks, capped=bool(max_tokens and fit > max_tokens))

    def check_budget(self, got, **inputs):
        want = self.expected_budget(**inputs)
        for k, v in want.items():
            self.assertEqual(got[k], v, "%s for %r: %r" % (k, inputs, got))

    def test_size_kv_figures(self):
        b = adprouter.size_kv(60 * GIB, LLAMA_8B)
        self.check_budget(b, free=60 * GIB, bpt=LLAMA_8B)
        self.assertEqual(b["free_bytes"], 60 * GIB)
        self.assertEqual(b["bytes_per_token"], LLAMA_8B)
        self.assertEqual(b["fraction"], 0.9)
        self.assertEqual(b["tokens_per_block"], 32)
        self.assertEqual(b["reason"], "")
        self.assertFalse(b["capped"])
        # Defaults applied to zeroed inputs are reported back.
        b = adprouter.size_kv(60 * GIB, LLAMA_8B, fraction=0, tokens_per_block=0)
        self.assertEqual((b["fraction"], b["tokens_per_block"]), (0.9, 32))
        self.check_budget(b, free=60 * GIB, bpt=LLAMA_8B)
        cases = [
            dict(free=60 * GIB + 12345, bpt=327680, reserve=3 * GIB + 7, fraction=0.85, tpb=64),
            dict(free=80 * GIB, bpt=70272, reserve=GIB, fraction=1.0, tpb=1),
            dict(free=10 ** 12 + 1, bpt=36864, fraction=0.1, tpb=16),
            dict(free=123456789, bpt=1000, fraction=0.3333333333333333, tpb=7),
        ]
        for c in cases:
            with self.subTest(case=c):
                b = adprouter.size_kv(c["free"], c["bpt"], reserve_bytes=c.get("reserve", 0),
                                      fraction=c["fraction"], tokens_per_block=c["tpb"])
                self.check_budget(b, **c)
                self.assertEqual(b["reserve_bytes"], c.get("reserve", 0))

    def test_size_kv_reserve_above_free(self):
        b = adprouter.size_kv(10 * GIB, LLAMA_8B, reserve_bytes=12 * GIB)
        self.assertEqual((b["tokens"], b["blocks"], b["available_bytes"], b["usable_bytes"]), (0, 0, 0, 0))
        self.assertIn("reserve", b["reason"])
        self.assertFalse(b["capped"])

    def test_size_kv_less_than_a_block(self):
        b = adprouter.size_kv(31 * LLAMA_8B, LLAMA_8B, fraction=1.0)
        self.assertEqual((b["fit_tokens"], b["tokens"], b["blocks"]), (31, 0, 0))
        self.assertNotEqual(b["reason"], "")

    def test_size_kv_cap(self):
        b = adprouter.size_kv(60 * GIB, LLAMA_8B, max_tokens=100000)
        self.check_budget(b, free=60 * GIB, bpt=LLAMA_8B, max_tokens=100000)
        self.assertTrue(b["capped"])
        self.assertEqual(b["tokens"], 100000 // 32 * 32)
        self.assertNotEqual(b["reason"], "")
        self.assertEqual(b["max_tokens"], 100000)
        # A cap above what fits changes nothing.
        b = adprouter.size_kv(60 * GIB, LLAMA_8B, max_tokens=10 ** 9)
        self.assertFalse(b["capped"])
        self.assertEqual(b["reason"], "")
        self.check_budget(b, free=60 * GIB, bpt=LLAMA_8B)

    def test_size_kv_errors(self):
        for kwargs in (dict(fraction=1.5), dict(fraction=-0.1), dict(fraction=float("nan")),
                       dict(fraction=float("inf")), dict(fraction=1.0000000000000002)):
            with self.subTest(kwargs=kwargs):
                with self.assertRaises(InvalidArgumentError):
                    adprouter.size_kv(60 * GIB, LLAMA_8B, **kwargs)
        with self.assertRaises(InvalidArgumentError):
            adprouter.size_kv(60 * GIB, 0)
        with self.assertRaises(InvalidArgumentError):
            adprouter.size_kv(60 * GIB, 1 << 60, tokens_per_block=1 << 10)  # a block overflows

    def test_fill_rank_state_without_device(self):
        st = RankState(2, 3, 400, memory_pressure=True)
        got = adprouter.fill_rank_state(st, 100000, 25000)
        self.assertIs(got, st)
        self.assertEqual((st.kv_capacity_tokens, st.free_kv_tokens, st.memory_pressure), (100000, 25000, False))
        self.assertEqual((st.rank, st.num_active_requests, st.num_active_tokens), (2, 3, 400))
        # The guard needs a device: without one the band changes nothing.
        adprouter.fill_rank_state(st, 5000, 0, guard_band_bytes=1 << 50, bytes_per_token=1)
        self.assertEqual((st.kv_capacity_tokens, st.free_kv_tokens, st.memory_pressure), (5000, 0, False))
        adprouter.fill_rank_state(st, 0, 0)
        self.assertEqual((st.kv_capacity_tokens, st.free_kv_tokens, st.memory_pressure), (0, 0, False))

    def test_fill_rank_state_errors_leave_state(self):
        bad = [
            dict(capacity_tokens=100, free_tokens=101),
            dict(capacity_tokens=-1, free_tokens=0),
            dict(capacity_tokens=100, free_tokens=-1),
            dict(capacity_tokens=100, free_tokens=50, device=0, guard_band_bytes=GIB, bytes_per_token=0),
            dict(capacity_tokens=100, free_tokens=50, device="not-a-gpu", bytes_per_token=1),
            dict(capacity_tokens=100, free_tokens=50, device=3.5, bytes_per_token=1),
            dict(capacity_tokens="100", free_tokens=50),
        ]
        for kwargs in bad:
            with self.subTest(kwargs=kwargs):
                st = RankState(1, 2, 30, kv_capacity_tokens=77, free_kv_tokens=11, memory_pressure=True)
                with self.assertRaises(InvalidArgumentError):
                    adprouter.fill_rank_state(st, **kwargs)
                self.assertEqual((st.rank, st.num_active_requests, st.num_active_tokens, st.kv_capacity_tokens,
                                  st.free_kv_tokens, st.memory_pressure), (1, 2, 30, 77, 11, True))

    def test_error_classes(self):
        for cls in (NVMLUnavailableError, GPULostError, NVMLNotSupportedError, NVMLPermissionError,
                    GPUNotFoundError):
            self.assertTrue(issubclass(cls, NVMLError))
            self.assertTrue(issubclass(cls, adprouter.Error))
        self.assertTrue(issubclass(GPUNotFoundError, LookupError))


def child_env(extra, ld_library_path=None, bind_now=False):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("FAKE_NVML_") and k not in ("LD_LIBRARY_PATH", "LD_BIND_NOW", "LD_PRELOAD")}
    env["PYTHONPATH"] = PYTHON_DIR + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["ADPROUTER_LIBRARY"] = os.path.abspath(adprouter.library_path())
    if ld_library_path:
        env["LD_LIBRARY_PATH"] = ld_library_path
    if bind_now:
        env["LD_BIND_NOW"] = "1"
    env.update(extra)
    return env


def run_child(test, scenario, env, args=None):
    cmd = [sys.executable, os.path.join(TESTS_DIR, "test_nvml.py"), "--child", scenario,
           json.dumps(args or {})]
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    out = p.stdout.decode(errors="replace")
    diag = "child %s (env %s) exited %d\nstdout:\n%s\nstderr:\n%s" % (
        scenario, {k: v for k, v in env.items() if k.startswith(("FAKE_", "LD_"))}, p.returncode, out,
        p.stderr.decode(errors="replace"))
    test.assertEqual(p.returncode, 0, diag)
    lines = [l for l in out.splitlines() if l.startswith("RESULT ")]
    test.assertEqual(len(lines), 1, diag)
    return json.loads(lines[0][len("RESULT "):])


class NoDriverTest(unittest.TestCase):
    """Without libnvidia-ml every NVML call reports NVMLUnavailableError and
    routing keeps working."""

    BIND_NOW = False

    def test_no_driver(self):
        out = run_child(self, "nodriver", child_env({}, bind_now=self.BIND_NOW))
        if out["driver_present"]:
            self.skipTest("libnvidia-ml.so.1 is installed on this machine")
        for key in ("init", "count", "memory_index", "memory_uuid", "fill_device", "shutdown"):
            with self.subTest(call=key):
                self.assertEqual(out[key].get("error"), "NVMLUnavailableError", out[key])
                self.assertEqual(out[key]["status"], 5)
                self.assertTrue(out[key]["message"])
        self.assertIn("libnvidia-ml", out["init"]["message"])
        self.assertEqual(out["fill_device"]["state"],
                         {"kv_capacity_tokens": 7, "free_kv_tokens": 3, "memory_pressure": True})
        self.assertEqual(out["fill_nodevice"]["ok"],
                         {"kv_capacity_tokens": 1000, "free_kv_tokens": 500, "memory_pressure": False})
        self.assertEqual(out["bytes_per_token"], {"ok": LLAMA_8B})
        self.assertEqual(out["routed"], [0, 1, 2, 3])

    def test_in_process(self):
        # This process has no fake on LD_LIBRARY_PATH; NVML was never
        # initialised here, so whatever the machine, reads are refused.
        self.assertRaises(NVMLUnavailableError, adprouter.read_memory, 0)
        self.assertRaises(NVMLUnavailableError, adprouter.nvml_device_count)
        with Router(policy="default", dp_size=2) as r:
            res = r.route([RankState(0), RankState(1)], [Request(id=1, num_tokens=10)], 4)
        self.assertEqual(sum(len(v) for v in res.assignment.values()), 1)


class NoDriverBindNowTest(NoDriverTest):
    BIND_NOW = True

    test_in_process = None


_fake_dir = None
_fake_error = None


def fake_dir():
    """Builds the fake libnvidia-ml.so.1 twice (with and without the v2
    memory call) into a temporary directory, once per process."""
    global _fake_dir, _fake_error
    if _fake_dir is None and _fake_error is None:
        cc = shutil.which("gcc")
        if cc is None:
            _fake_error = "gcc not found: cannot build the fake libnvidia-ml.so.1"
        else:
            d = tempfile.mkdtemp(prefix="adpr-fakenvml-")
            try:
                for sub, defs in (("v2", []), ("nov2", ["-DFAKE_NVML_NO_V2"])):
                    os.mkdir(os.path.join(d, sub))
                    subprocess.run([cc] + defs + ["-shared", "-fPIC", "-Wl,-soname,libnvidia-ml.so.1", "-o",
                                                  os.path.join(d, sub, "libnvidia-ml.so.1"), FAKE_SOURCE,
                                                  "-lpthread"],
                                   check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
            except subprocess.CalledProcessError as e:
                shutil.rmtree(d, ignore_errors=True)
                raise RuntimeError("building the fake NVML failed:\n%s" % e.stdout.decode(errors="replace"))
            _fake_dir = d
    if _fake_error is not None:
        if os.environ.get("CI"):
            raise AssertionError(_fake_error + " (CI must install gcc)")
        raise unittest.SkipTest(_fake_error)
    return _fake_dir


def tearDownModule():
    if _fake_dir is not None:
        shutil.rmtree(_fake_dir, ignore_errors=True)


class FakeNVMLTest(unittest.TestCase):
    """The production NVML path against the fake libnvidia-ml.so.1."""

    BIND_NOW = False

    def child(self, scenario, extra=None, variant="v2", devices=DEVICES, args=None):
        env = dict(extra or {})
        if devices is not None:
            env["FAKE_NVML_DEVICES"] = devices_env(devices)
        args = dict(args or {}, uuids=[d[0] for d in devices or ()])
        return run_child(self, scenario,
                         child_env(env, os.path.join(fake_dir(), variant), bind_now=self.BIND_NOW), args)

    def assertError(self, got, cls, status):
        self.assertEqual(got.get("error"), cls.__name__, got)
        self.assertEqual(got["status"], status, got)

    def test_lookup(self):
        out = self.child("lookup")
        self.assertError(out["before_init"], NVMLUnavailableError, 5)
        self.assertEqual(out["init"], {"ok": None})
        self.assertEqual(out["count"], {"ok": len(DEVICES)})
        self.assertEqual(len(out["memory"]), 8 * len(DEVICES))
        for key, got in out["memory"].items():
            uuid, total, free, reserved = DEVICES[int(key.split()[0])]
            with self.subTest(selector=key):
                self.assertEqual(got.get("ok"), dict(total_bytes=total, free_bytes=free,
                                                     used_bytes=total - free - reserved,
                                                     reserved_bytes=reserved, has_reserved=True))
        self.assertError(out["unknown_uuid"], GPUNotFoundError, 9)
        self.assertError(out["unknown_pci"], GPUNotFoundError, 9)
        self.assertError(out["unknown_index"], GPUNotFoundError, 9)
        self.assertError(out["bad_selector"], InvalidArgumentError, 1)

        # Guard band 36 GiB over 30 GiB free: 6 GiB deficit shrinks both.
        shrink = -(-(36 * GIB - DEVICES[2][2]) // LLAMA_8B)
        self.assertEqual(out["fill_pressure"]["ok"], dict(kv_capacity_tokens=131072 - shrink,
                                                          free_kv_tokens=65536 - shrink, memory_pressure=True))
        self.assertEqual(out["fill_no_pressure"]["ok"], dict(kv_capacity_tokens=131072, free_kv_tokens=65536,
                                                             memory_pressure=False))
        unchanged = dict(kv_capacity_tokens=9, free_kv_tokens=4, memory_pressure=False)
        self.assertError(out["fill_unknown"], GPUNotFoundError, 9)
        self.assertEqual(out["fill_unknown"]["state"], unchanged)
        self.assertError(out["fill_zero_bpt"], InvalidArgumentError, 1)
        self.assertEqual(out["fill_zero_bpt"]["state"], unchanged)

        self.assertEqual(out["init2"], {"ok": None})
        self.assertEqual(out["shutdown1"], {"ok": None})
        self.assertEqual(out["after_one_shutdown"], {"ok": len(DEVICES)})
        self.assertEqual(out["shutdown2"], {"ok": None})
        self.assertError(out["after_last_shutdown"], NVMLUnavailableError, 5)
        self.assertIn("error", out["extra_shutdown"])  # refused, no crash

    def test_deficit_rounds_up(self):
        # Free memory 1 byte under the band: one whole token less.
        devices = [("GPU-odd", 80 * GIB, 20 * GIB, 0)]
        out = self.child("ranks", devices=devices,
                         args=dict(capacity=1000, free=400, guard=20 * GIB + 1))
        self.assertEqual(out["states"][0]["ok"], dict(kv_capacity_tokens=999, free_kv_tokens=399,
                                                      memory_pressure=True))
        # A deficit larger than the pool: nothing admissible, never negative.
        out = self.child("ranks", devices=devices, args=dict(capacity=1000, free=400, guard=30 * GIB))
        self.assertEqual(out["states"][0]["ok"], dict(kv_capacity_tokens=0, free_kv_tokens=0,
                                                      memory_pressure=True))

    def check_v1(self, out):
        self.assertEqual(out["init"], {"ok": None})
        uuid, total, free, reserved = DEVICES[0]
        # v1: the driver's reservation counts as used.
        want = dict(total_bytes=total, free_bytes=free, used_bytes=total - free, reserved_bytes=0,
                    has_reserved=False)
        self.assertEqual(out["memory"], {"ok": want})
        self.assertEqual(out["memory_uuid"], {"ok": want})
        self.assertEqual(out["fill"]["ok"], dict(kv_capacity_tokens=1000, free_kv_tokens=500,
                                                 memory_pressure=False))

    def test_v1_fallback_function_not_found(self):
        self.check_v1(self.child("calls", {"FAKE_NVML_NO_V2": "1"}))

    def test_v1_fallback_not_supported(self):
        self.check_v1(self.child("calls", {"FAKE_NVML_V2_ERROR": "3"}))

    def test_v1_fallback_symbol_missing(self):
        # A driver older than nvmlDeviceGetMemoryInfo_v2: the symbol is absent.
        self.check_v1(self.child("calls", variant="nov2"))

    def test_gpu_lost(self):
        out = self.child("calls", {"FAKE_NVML_LOST_AFTER": "0"})
        self.assertEqual(out["init"], {"ok": None})
        for key in ("count", "memory", "memory_uuid", "fill"):
            with self.subTest(call=key):
                self.assertError(out[key], GPULostError, 6)
        self.assertEqual(out["fill"]["state"], dict(kv_capacity_tokens=7, free_kv_tokens=3, memory_pressure=True))
        # Lost after the count: the count works, the memory reads do not.
        out = self.child("calls", {"FAKE_NVML_LOST_AFTER": "1"})
        self.assertEqual(out["count"], {"ok": len(DEVICES)})
        self.assertError(out["memory"], GPULostError, 6)

    def test_no_permission(self):
        out = self.child("calls", {"FAKE_NVML_NO_PERMISSION": "1"})
        self.assertEqual(out["count"], {"ok": len(DEVICES)})
        for key in ("memory", "memory_uuid", "fill"):
            with self.subTest(call=key):
                self.assertError(out[key], NVMLPermissionError, 8)
        self.assertEqual(out["fill"]["state"], dict(kv_capacity_tokens=7, free_kv_tokens=3, memory_pressure=True))

    def test_not_supported(self):
        out = self.child("calls", {"FAKE_NVML_MEMORY_ERROR": "3"})
        self.assertError(out["memory"], NVMLNotSupportedError, 7)
        self.assertError(out["fill"], NVMLNotSupportedError, 7)

    def test_init_errors(self):
        for code in ("9", "18"):  # driver not loaded, RM version mismatch
            with self.subTest(code=code):
                out = self.child("calls", {"FAKE_NVML_INIT_ERROR": code})
                for key in ("init", "count", "memory", "fill"):
                    self.assertError(out[key], NVMLUnavailableError, 5)
                self.assertEqual(out["fill"]["state"],
                                 dict(kv_capacity_tokens=7, free_kv_tokens=3, memory_pressure=True))

    def test_no_devices(self):
        out = self.child("calls", devices=[])
        self.assertEqual(out["count"], {"ok": 0})
        self.assertError(out["memory"], GPUNotFoundError, 9)
        self.assertError(out["memory_uuid"], GPUNotFoundError, 9)

    def test_rate_limit(self):
        out = self.child("ratelimit")
        self.assertIsNotNone(out.get("n"), out)
        self.assertIn("ok", out["first"], out)
        self.assertGreaterEqual(out["n"], 1)
        shrink = -(-(36 * GIB - DEVICES[2][2]) // LLAMA_8B)
        self.assertEqual(out["first"]["ok"], dict(kv_capacity_tokens=131072 - shrink,
                                                  free_kv_tokens=65536 - shrink, memory_pressure=True))
        # Within the interval: the cached reading, no NVML call (a call would
        # find the GPU lost). The engine's own figures are still fresh.
        self.assertEqual(out["second"].get("ok"), dict(kv_capacity_tokens=131072 - shrink,
                                                       free_kv_tokens=max(1000 - shrink, 0),
                                                       memory_pressure=True), out)
        self.assertError(out["fresh_read"], GPULostError, 6)
        self.assertError(out["unlimited"], GPULostError, 6)
        self.assertEqual(out["unlimited"]["state"], dict(kv_capacity_tokens=5, free_kv_tokens=2,
                                                         memory_pressure=False))

    def test_heterogeneous_ranks(self):
        # Every rank's engine has the same pool (131072 tokens, half free);
        # GPU 2 has half the free memory of the others (another process),
        # under the 36 GiB guard band, so its rank reports a smaller pool.
        capacity, free, guard = 131072, 65536, 36 * GIB
        out = self.child("ranks", args=dict(capacity=capacity, free=free, guard=guard))
        self.assertEqual(out["init"], {"ok": None})
        for rank, (uuid, total, dfree, reserved) in enumerate(DEVICES):
            self.assertEqual(out["memory"][rank]["ok"]["free_bytes"], dfree)
        filled = [s["ok"] for s in out["states"]]
        shrink = -(-(guard - DEVICES[2][2]) // LLAMA_8B)
        for rank, s in enumerate(filled):
            want = (capacity, free, False) if rank != 2 else (capacity - shrink, free - shrink, True)
            self.assertEqual((s["kv_capacity_tokens"], s["free_kv_tokens"], s["memory_pressure"]), want)

        def states(with_kv):
            out = []
            for rank, s in enumerate(filled):
                st = RankState(rank, num_active_requests=2, num_active_tokens=4000)
                if with_kv:
                    st.kv_capacity_tokens = s["kv_capacity_tokens"]
                    st.free_kv_tokens = s["free_kv_tokens"]
                    st.memory_pressure = s["memory_pressure"]
                out.append(st)
            return out

        rng = random.Random(5)
        batches = []
        for b in range(12):
            batch = []
            for i in range(32):
                n = rng.randint(2000, 8000)
                prefix = rng.randrange(4)  # a few shared system prompts
                batch.append((b * 1000 + i, [prefix * 100000 + k for k in range(64)], n))
            batches.append(batch)

        for policy in ("default", "kv_cache_aware"):
            with self.subTest(policy=policy):
                routers = {
                    "aware": Router(policy=policy, dp_size=4, capacity_aware=True),
                    "aware2": Router(policy=policy, dp_size=4, capacity_aware=True),
                    "plain": Router(policy=policy, dp_size=4),
                    "plain_nokv": Router(policy=policy, dp_size=4),
                }
                try:
                    to_squeezed = {k: 0 for k in routers}
                    decisions = {k: [] for k in routers}
                    for batch in batches:
                        for name, r in routers.items():
                            reqs = [Request(id=i, tokens=toks, num_tokens=n) for i, toks, n in batch]
                            res = r.route(states(name != "plain_nokv"), reqs, 64)
                            self.assertEqual(res.unassigned, [])
                            decisions[name].append(res.ranks)
                            sizes = {i: n for i, _, n in batch}
                            to_squeezed[name] += sum(sizes[i] for i in res.assignment[2])
                    # Capacity-aware routing sends less uncached prefill to the
                    # squeezed rank, and decides deterministically.
                    self.assertLess(to_squeezed["aware"], to_squeezed["plain"], to_squeezed)
                    if policy == "kv_cache_aware":
                        # Every rank is a candidate: the squeezed one takes a
                        # request only while its room holds it.
                        self.assertLessEqual(to_squeezed["aware"], len(batches) * filled[2]["free_kv_tokens"],
                                             to_squeezed)
                    self.assertEqual(decisions["aware"], decisions["aware2"])
                    self.assertEqual(routers["aware"].state_digest(), routers["aware2"].state_digest())
                    # With the option off, KV fields change nothing.
                    self.assertEqual(decisions["plain"], decisions["plain_nokv"])
                    self.assertNotEqual(decisions["aware"], decisions["plain"])
                finally:
                    for r in routers.values():
                        r.close()


class FakeNVMLBindNowTest(FakeNVMLTest):
    """The same under LD_BIND_NOW=1: every symbol of the library and of the
    fake resolved at load time."""

    BIND_NOW = True


if __name__ == "__main__":
    if "--child" in sys.argv:
        child_main()
    else:
        unittest.main()
