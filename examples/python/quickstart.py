"""Route a small shared-system-prompt workload and print why each request went
where it did, in the router's own words (its receipts).

    PYTHONPATH=python python3 examples/python/quickstart.py

Four attention-DP ranks, the kv_cache_aware policy with cold-start warmup, two
iterations: first nothing is cached, so warmup sends one request to every rank;
then the ranks report which system prompt (A or B) they cache, and cache
affinity and load decide. examples/cpp/quickstart.cpp prints the same.
"""

import adprouter

RANKS, MAX_ACTIVE, SYSTEM = 4, 3, 512  # system prompts are 512 tokens
ITERATIONS = [  # (request id, system prompt, user tokens after it)
    [(1, "A", 88), (2, "A", 128), (3, "B", 300), (4, "A", 188), (5, "A", 68), (6, "A", 108)],
    [(7, "A", 100), (8, "B", 40), (9, "A", 150), (10, "B", 90), (11, "A", 60), (12, "B", 200)],
]


def main():
    active, load, cached = [0] * RANKS, [0] * RANKS, [set() for _ in range(RANKS)]
    # The same options on every rank: every rank reaches the same decision.
    with adprouter.Router(policy="kv_cache_aware", dp_size=RANKS, cold_start_warmup=True,
                          explain=True) as router:
        for it, prompts in enumerate(ITERATIONS, 1):
            print("iteration %d" % it)
            states = [adprouter.RankState(rank=r, num_active_requests=active[r], num_active_tokens=load[r])
                      for r in range(RANKS)]
            # The policy reads a prompt's first 64 tokens and its length.
            requests = [adprouter.Request(id=i, tokens=[(1000 if s == "A" else 2000) + k for k in range(64)],
                                          num_tokens=SYSTEM + n) for i, s, n in prompts]
            # What each rank's prefix-cache probe reports: the system prompt it holds.
            match = [{i: SYSTEM for i, s, _ in prompts if s in cached[r]} for r in range(RANKS)]
            res = router.route(states, requests, MAX_ACTIVE, match_lens=match)
            # In the order the router placed them: each receipt's loads include the earlier ones.
            for receipt in sorted(router.receipts(), key=lambda rc: (rc.step < 0, rc.step)):
                print(receipt)
            for (i, s, n), r in zip(prompts, res.ranks):  # the requests keep running
                if r >= 0:
                    active[r] += 1
                    load[r] += SYSTEM + n - match[r].get(i, 0)  # uncached tokens
                    cached[r].add(s)


if __name__ == "__main__":
    main()
