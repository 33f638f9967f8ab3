"""Tests of the binding's options beyond the reference: prefix index sources,
demand warmup, capacity awareness, stats and block hashes."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import adprouter  # noqa: E402


def family(f, rid, n=300):
    """A 300-token prompt: a 256-token system prompt of family f, then a
    suffix unique to rid."""
    return [f * 1_000_000 + i if i < 256 else rid * 1_000 + i for i in range(n)]


def busy(size, tokens=10000):
    return [adprouter.RankState(rank=k, num_active_tokens=tokens) for k in range(size)]


class PresetTest(unittest.TestCase):
    """The "preset" keyword goes to the library like any option: its table
    and the override order live there."""

    def route_siblings(self, reuse=None, **opts):
        # Four samples of one prompt at once, probed nowhere: where do they go?
        prompt = family(2, 0)
        reqs = [adprouter.Request(id=i, tokens=prompt) for i in range(4)]
        if reuse:
            opts["engine_reuse"] = reuse
        with adprouter.Router(dp_size=4, fair_share_multiplier=4.0, **opts) as r:
            res = r.route(busy(4), reqs, 8, match_lens=[[0] * 4 for _ in reqs])
            return sum(1 for ids in res.assignment.values() if ids), r

    def test_recommended_spreads_in_flight_siblings(self):
        # probe+index alone piles the siblings onto the first one's rank,
        # where TensorRT-LLM computes the prompt again for each; the
        # recommended preset knows the prefix is still in flight there.
        self.assertEqual(self.route_siblings(prefix_source="probe+index")[0], 1)
        used, r = self.route_siblings(preset="recommended")
        self.assertEqual(used, 4)
        self.assertEqual(r.tokens_read, -1)  # its prefix index hashes the prompt
        # An engine that reuses blocks as soon as they are scheduled shares
        # them only when that is no slower: four idle ranks are faster.
        self.assertEqual(self.route_siblings("on_schedule", preset="recommended")[0], 4)

    def test_explicit_options_override_the_preset(self):
        with adprouter.Router(dp_size=2, prefix_source="probe", score="reference", warmup="off",
                              preset="recommended") as r:
            self.assertEqual(r.tokens_read, 64)  # probe only, whatever the order
        with adprouter.Router(policy="default", dp_size=2, preset="recommended") as r:
            self.assertEqual(r.tokens_read, 0)  # nothing KV-aware for the default policy
        with self.assertRaisesRegex(adprouter.ConfigError, "fastest.*recommended"):
            adprouter.Router(dp_size=2, preset="fastest")
        with self.assertRaisesRegex(adprouter.ConfigError, "score"):
            adprouter.Router(dp_size=2, preset="recommended", prefix_source="probe")


class PrefixIndexTest(unittest.TestCase):
    def route_siblings(self, **opts):
        prompt = family(1, 0)
        reqs = [adprouter.Request(id=i, tokens=prompt) for i in range(4)]
        with adprouter.Router(policy="kv_cache_aware", dp_size=4, fair_share_multiplier=4.0,
                              **opts) as r:
            res = r.route(busy(4), reqs, 8)
            return res, r.stats()

    def test_siblings_colocated_with_index(self):
        probe, _ = self.route_siblings()
        index, st = self.route_siblings(prefix_source="probe+index")
        used = lambda res: sum(1 for ids in res.assignment.values() if ids)
        self.assertEqual(used(probe), 4, probe)  # no probes: scattered by the tie-break
        self.assertEqual(used(index), 1, index)  # the index sees the first sibling placed
        self.assertGreater(st["index_entries"], 0)
        self.assertGreater(sum(r["predicted_hit_tokens"] for r in st["ranks"]), 0)

    def test_index_source_needs_kv_policy(self):
        with self.assertRaises(adprouter.ConfigError):
            adprouter.Router(policy="default", dp_size=2, prefix_source="index")
        with self.assertRaises(adprouter.ConfigError):
            adprouter.Router(policy="kv_cache_aware", dp_size=2, prefix_source="radix")

    def test_lora_scopes_the_index(self):
        with adprouter.Router(policy="kv_cache_aware", dp_size=4, prefix_source="index") as r:
            first = r.route(busy(4), [adprouter.Request(id=1, tokens=family(7, 1))], 8)
            home = first.ranks[0]
            same = r.route(busy(4), [adprouter.Request(id=2, tokens=family(7, 2))], 8)
            self.assertEqual(same.ranks[0], home)
            hits_before = r.stats()["ranks"][home]["predicted_hit_tokens"]
            r.route(busy(4), [adprouter.Request(id=3, tokens=family(7, 3), lora_id=9)], 8)
            hits_after = r.stats()["ranks"][home]["predicted_hit_tokens"]
            self.assertEqual(hits_before, hits_after, "another adapter matched the base model's blocks")


class DemandWarmupTest(unittest.TestCase):
    def test_hot_family_reaches_every_rank(self):
        with adprouter.Router(policy="kv_cache_aware", dp_size=4, warmup="demand") as r:
            ranks = set()
            for i in range(8):
                res = r.route(busy(4), [adprouter.Request(id=i, tokens=family(1, i))], 16)
                ranks.add(res.ranks[0])
            st = r.stats(max_groups=4)
        self.assertEqual(ranks, {0, 1, 2, 3})
        self.assertEqual(len(st["hot_groups"]), 1)
        g = st["hot_groups"][0]
        self.assertEqual((g["replicas"], g["target"], g["requests"]), (4, 4, 8))
        self.assertGreater(st["demand_placements"], 0)

    def test_conflicting_warmups_rejected(self):
        with self.assertRaises(adprouter.ConfigError):
            adprouter.Router(policy="kv_cache_aware", dp_size=2, warmup="demand",
                             cold_start_warmup=True)
        with self.assertRaises(adprouter.ConfigError):
            adprouter.Router(policy="kv_cache_aware", dp_size=2, warmup="off",
                             cold_start_warmup=True)


class CapacityTest(unittest.TestCase):
    def test_avoids_ranks_without_room(self):
        states = [adprouter.RankState(rank=k, kv_capacity_tokens=100, free_kv_tokens=free)
                  for k, free in enumerate([5, 100, 9, 0])]
        req = [adprouter.Request(id=0, tokens=list(range(10)))]
        with adprouter.Router(policy="kv_cache_aware", dp_size=4) as plain:
            self.assertEqual(plain.route(states, req, 8).ranks, [2])  # docs/ROUTING.md example 7
        with adprouter.Router(policy="kv_cache_aware", dp_size=4, capacity_aware=True) as r:
            self.assertEqual(r.route(states, req, 8).ranks, [1])
            st = r.stats()
        self.assertEqual(st["decisions"], 1)

    def test_bad_capacity_rejected(self):
        states = [adprouter.RankState(rank=0, kv_capacity_tokens=10, free_kv_tokens=11)]
        with adprouter.Router(policy="default", dp_size=1, capacity_aware=True) as r:
            with self.assertRaises(adprouter.InvalidArgumentError):
                r.route(states, [adprouter.Request(id=1, num_tokens=5)], 4)

    def test_memory_pressure_reported(self):
        states = [adprouter.RankState(rank=0, memory_pressure=True), adprouter.RankState(rank=1)]
        with adprouter.Router(policy="default", dp_size=2) as r:
            r.route(states, [], 4)
            st = r.stats()
        self.assertEqual([x["memory_pressure"] for x in st["ranks"]], [True, False])


class BlockHashTest(unittest.TestCase):
    def test_pinned_values(self):
        # adprouter block hash v1 of tokens 0..63 (router/internal/prefix TestHashStable).
        self.assertEqual(adprouter.block_hashes(list(range(64))),
                         [0xdf1daabaa8d84931, 0x3f62b48348652bbe])

    def test_scopes_and_partial_blocks(self):
        toks = list(range(100))
        base = adprouter.block_hashes(toks)
        self.assertEqual(len(base), 3)
        self.assertEqual(adprouter.block_hashes(toks[:64]), base[:2])
        self.assertNotEqual(adprouter.block_hashes(toks, lora_id=1), base)
        self.assertNotEqual(adprouter.block_hashes(toks, cache_salt=1), base)
        self.assertEqual(adprouter.block_hashes(toks, tokens_per_block=7)[:1],
                         adprouter.block_hashes(toks[:7], tokens_per_block=7))
        with self.assertRaises(adprouter.InvalidArgumentError):
            adprouter.block_hashes(toks, tokens_per_block=0)


if __name__ == "__main__":
    unittest.main()
