"""The option schema as the binding sees it (adprouter.option_schema, from
the library's adpr_option_schema), the effective options of a router
(Router.options), the header's constants (adprouter._consts) and the buffer
rule as the binding applies it (texts and hot groups of any size).

Run from the repository root, after ./build.sh:
    PYTHONPATH=python python3 -m unittest discover -s python/tests -p test_schema.py -v
"""

import unittest

import adprouter
from adprouter import ConfigError, RankState, Request, Router, _abi, _consts


class SchemaTest(unittest.TestCase):
    def setUp(self):
        self.schema = adprouter.option_schema()
        self.by_name = {o["name"]: o for o in self.schema["options"]}

    def test_every_option_is_accepted_with_its_default(self):
        for o in self.schema["options"]:
            with self.subTest(o["name"]):
                if o["name"] in ("dp_size", "preset"):
                    continue
                kw = {o["name"]: o["default"]}
                if o.get("policies"):
                    kw.setdefault("policy", o["policies"][0])
                with Router(dp_size=2, **kw) as r:
                    self.assertEqual(r.options()[o["name"]], o["default"])

    def test_kinds_and_values(self):
        kinds = {o["kind"] for o in self.schema["options"]}
        self.assertLessEqual(kinds, {"enum", "int", "int64", "float", "bool"})
        self.assertEqual(self.by_name["policy"]["values"], ["default", "kv_cache_aware", "conversation"])
        self.assertEqual(self.by_name["dp_size"]["default"], "")  # required
        self.assertEqual(self.by_name["dp_size"]["range"], "1..%d" % _consts.MAX_DP_SIZE)
        self.assertIn("recommended", self.by_name["preset"]["values"])
        self.assertEqual(self.schema["bool_true"], ["true", "True", "1"])
        for bad in ("yes", "on", "TRUE"):
            with self.subTest(bad), self.assertRaises(ConfigError):
                Router(dp_size=2, capacity_aware=bad)

    def test_presets_match_preset_options(self):
        for preset, policies in self.schema["presets"].items():
            for policy, kv in policies.items():
                with self.subTest(preset=preset, policy=policy):
                    self.assertEqual(adprouter.preset_options(preset, policy), dict(kv))

    def test_options_round_trip(self):
        for kw in (dict(policy="kv_cache_aware", preset="recommended"), dict(policy="conversation", max_sessions=7),
                   dict(policy="default", capacity_aware=True), dict(cold_start_warmup=True)):
            with self.subTest(**kw), Router(dp_size=3, **kw) as r:
                eff = r.options()
                self.assertEqual(list(eff), [o["name"] for o in self.schema["options"] if o["name"] != "preset"])
                with Router(**eff) as again:
                    self.assertEqual(again.options(), eff)
                    self.assertEqual(again.state_digest(), r.state_digest())

    def test_constants_from_the_header(self):
        self.assertEqual(_abi.ABI_VERSION, adprouter.abi_version())
        self.assertEqual(_consts.PREFIX_TOKENS, adprouter.PREFIX_TOKENS)
        self.assertEqual(_abi.ERRBUF, _consts.MESSAGE_MAX)
        with self.assertRaises(ConfigError) as cm:
            Router(dp_size=_consts.MAX_DP_SIZE + 1)
        self.assertIn(str(_consts.MAX_DP_SIZE), str(cm.exception))


class BufferRuleTest(unittest.TestCase):
    """Results of any size arrive whole: the binding asks the library for the
    total and calls again with a buffer that size."""

    def test_text_longer_than_the_first_buffer(self):
        schema = _abi.text("adpr_option_schema", initial=16)
        self.assertTrue(schema.startswith("{") and schema.endswith("}"), schema[:40])
        self.assertEqual(schema, _abi.text("adpr_option_schema"))

    def test_hot_groups_more_than_asked(self):
        with Router(dp_size=4, prefix_source="index", warmup="demand", warmup_min_requests=1) as r:
            reqs = [Request(id=i, tokens=[1000 * (i % 5) + t for t in range(64)]) for i in range(20)]
            r.route([RankState(rank=k) for k in range(4)], reqs, 32)
            all_groups = r.stats(max_groups=64)["hot_groups"]
            self.assertEqual(len(all_groups), 5)
            top2 = r.stats(max_groups=2)["hot_groups"]
            self.assertEqual(top2, all_groups[:2])
            self.assertEqual(r.stats(max_groups=0)["hot_groups"], [])
            self.assertEqual(r.stats(max_groups=0)["decisions"], 1)

    def test_long_receipt_text(self):
        with Router(dp_size=128, explain=True) as r:
            r.route([RankState(rank=k) for k in range(128)], [Request(id=7, tokens=list(range(10)))], 8)
            (rc,) = r.receipts()
            self.assertGreater(len(str(rc)), 4096)  # past the binding's first buffer


if __name__ == "__main__":
    unittest.main()
