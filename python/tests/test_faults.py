"""Panics inside the library come back to Python as InternalError, never a
dead interpreter, and a router poisoned by one refuses further calls but
close().

Needs the fault-injection build of the library (ADPROUTER_BUILD_TAGS=adpr_faultinject
./build.sh build), which exports adpr_test_inject_panic; abi_safety_test.go at
the repository root builds it and runs this module with
ADPROUTER_FAULT_INJECTION=1. Skipped otherwise.
"""

import ctypes
import os
import unittest

import adprouter
import adprouter.trtllm
from adprouter import InternalError, RankState, Request, Router

ENABLED = os.environ.get("ADPROUTER_FAULT_INJECTION") == "1"


def inject(point):
    lib = adprouter._abi.load()
    fn = lib.adpr_test_inject_panic
    fn.argtypes, fn.restype = [ctypes.c_char_p], None
    fn(point.encode() if point else None)


def states(n):
    return [RankState(rank=i) for i in range(n)]


REQS = [Request(id=i, tokens=list(range(40 + i))) for i in range(4)]


@unittest.skipUnless(ENABLED, "needs the adpr_faultinject library (ADPROUTER_FAULT_INJECTION=1)")
class InjectedPanicTest(unittest.TestCase):
    def tearDown(self):
        inject(None)

    def expect_internal(self, point, fn):
        inject(point)
        try:
            with self.assertRaises(InternalError, msg=point) as cm:
                fn()
        finally:
            inject(None)
        return cm.exception

    def test_every_binding_call(self):
        r = Router(dp_size=2, explain=True)
        calls = {
            "adpr_router_create": lambda: Router(dp_size=2),
            "adpr_route": lambda: r.route(states(2), REQS, 8),
            "adpr_router_state_digest": r.state_digest,
            "adpr_router_stats": r.stats,
            # r has routed by now: receipts() reads the receipts, then their text.
            "adpr_router_receipts": r.receipts,
            "adpr_router_receipt_text": r.receipts,
            "adpr_block_hashes": lambda: adprouter.block_hashes(list(range(64))),
            "adpr_preset_options": lambda: adprouter.trtllm.preset_options("full"),
            "adpr_option_schema": lambda: adprouter._abi.text("adpr_option_schema"),
            "adpr_router_options": r.options,
            "adpr_nvml_init": adprouter.nvml_init,
            "adpr_nvml_shutdown": adprouter.nvml_shutdown,
            "adpr_nvml_device_count": adprouter.nvml_device_count,
            "adpr_nvml_memory": lambda: adprouter.read_memory(0),
            "adpr_kv_bytes_per_token": lambda: adprouter.kv_bytes_per_token(32, kv_heads=8, head_dim=128),
            "adpr_size_kv": lambda: adprouter.size_kv(1 << 30, 1024),
            "adpr_rank_state_fill_kv": lambda: adprouter.fill_rank_state(RankState(rank=0), 100, 50),
            "adpr_router_destroy": r.close,
        }
        for point, fn in calls.items():
            e = self.expect_internal(point, fn)
            if point not in ("adpr_router_destroy", "adpr_router_state_digest"):
                self.assertIn("injected panic", str(e), point)
            # A panic before the router's lock leaves the router usable.
            self.assertEqual(len(r.route(states(2), REQS, 8).ranks), 4, point)
        r.close()
        with self.assertRaises(adprouter.InvalidHandleError):
            r.route(states(2), REQS, 8)

    def test_poisoned_router(self):
        for point in ("adpr_route/locked", "adpr_router_stats/locked", "adpr_router_state_digest/locked",
                      "adpr_router_receipts/locked"):
            r = Router(dp_size=2, explain=True)
            self.expect_internal(point, {
                "adpr_route/locked": lambda: r.route(states(2), REQS, 8),
                "adpr_router_receipts/locked": r.receipts,
                "adpr_router_stats/locked": r.stats,
                "adpr_router_state_digest/locked": r.state_digest,
            }[point])
            with self.assertRaisesRegex(InternalError, "destroy it"):
                r.route(states(2), REQS, 8)
            with self.assertRaises(InternalError):
                r.stats()
            with self.assertRaises(InternalError):
                r.state_digest()
            r.close()  # destroy works on a poisoned router
        other = Router(dp_size=2)
        self.assertEqual(len(other.route(states(2), REQS, 8).ranks), 4)
        other.close()


if __name__ == "__main__":
    unittest.main()
