"""Route a small shared-system-prompt workload with adprouter (Python binding).

    PYTHONPATH=python python3 examples/python/quickstart.py

The same workload as examples/cpp/quickstart.cpp: four attention-DP ranks,
the kv_cache_aware policy with cold-start warmup, two routing iterations:
  1. cold start: nothing is cached; warmup sends one request to every rank.
  2. the ranks report what they cache (match_lens): system prompt A is on
     every rank that served it, system prompt B only on the rank that did.
For every request it prints the rank the library chose and an explanation of
why, recomputed here from the formula in docs/ROUTING.md. The assignments equal
the C++ quickstart's; the last lines check that when build/quickstart exists.
"""

import math
import os
import subprocess
import sys

import adprouter

RANKS = 4
MAX_ACTIVE = 3       # max_num_active_requests per rank
SYSTEM_LEN = 512     # both system prompts are 512 tokens
BETA = 1.0           # load_balance_weight (default)
THRESHOLD = 0.1      # match_rate_threshold (default)
MULTIPLIER = 2.0     # fair_share_multiplier (default)


class Req:
    def __init__(self, id, prompt, user_len):
        self.id, self.prompt = id, prompt
        base = 1000 if prompt == "A" else 2000
        self.tokens = [base + k for k in range(SYSTEM_LEN)] + \
                      [50000 + id * 1000 + k for k in range(user_len)]


class Cluster:
    """What the ranks look like before a decision."""

    def __init__(self):
        self.active = [0] * RANKS
        self.tokens = [0] * RANKS
        self.cached = [set() for _ in range(RANKS)]  # system prompts in each rank's KV cache


# --- The explanation -----------------------------------------------------------
# Not the library: a replay of docs/ROUTING.md's kv_cache_aware steps, used only to
# say WHY the library placed each request where it did.

pending_warmup = {0, 1, 2, 3}  # cold_start_warmup: ranks not yet warmed


def explain(c, reqs, match, lib_rank):
    """Prints the reasons; returns how many placements it cannot explain."""
    disagreements = 0
    count = list(c.active)
    tokens = [float(t) for t in c.tokens]

    def m(i, r):
        return match[r].get(reqs[i].id, 0) if match else 0

    # 1. Warmup: each request without a target goes to the lowest rank that
    #    has not been warmed yet, while there is one.
    rest = []
    for i, q in enumerate(reqs):
        if pending_warmup and count[min(pending_warmup)] < MAX_ACTIVE:
            r = min(pending_warmup)
            pending_warmup.discard(r)
            count[r] += 1
            tokens[r] += max(len(q.tokens) - m(i, r), 0)
            print("  request %2d (%d tokens, prompt %s) -> rank %d   why: cold-start warmup, rank %d had not "
                  "been warmed yet%s" % (q.id, len(q.tokens), q.prompt, lib_rank[i], r,
                                         "" if lib_rank[i] == r else "   ** the library disagrees **"))
            disagreements += lib_rank[i] != r
        else:
            rest.append(i)
    if not rest:
        return disagreements
    if not pending_warmup and len(rest) == len(reqs):
        print("  warmup: every rank is already warmed, so every request is scored")

    # 2. Group requests that share their first 64 tokens; longer prompts first.
    rest.sort(key=lambda i: (reqs[i].tokens[:64], -len(reqs[i].tokens)))

    # 3. Soft cap: expected = min(max(ceil(multiplier * fair share), busiest), max active).
    fair = -(-(sum(count) + len(rest)) // RANKS)
    expected = min(max(math.ceil(MULTIPLIER * fair), max(count)), MAX_ACTIVE)
    print("  soft cap for the rest: fair share %d x %.1f, capped at max_num_active_requests -> %d per rank"
          % (fair, MULTIPLIER, expected))

    # 4. Each request: the eligible rank with the lowest
    #    score = (n - match) + beta * tokens[r] / sum(tokens) * n.
    for i in rest:
        q = reqs[i]
        n = len(q.tokens)
        eligible = [r for r in range(RANKS) if count[r] < expected]
        best_match = max([m(i, r) for r in eligible] + [0])
        denom = max(sum(tokens[r] for r in eligible), n) or 1
        gate = best_match / max(n, 1) > THRESHOLD
        print("  request %2d (%d tokens, prompt %s) -> rank %d   why: cache affinity %s (best match %d/%d = %.2f %s %.1f)"
              % (q.id, n, q.prompt, lib_rank[i], "ON" if gate else "off", best_match, n, best_match / n,
                 ">" if gate else "<=", THRESHOLD))
        print("        rank  match    load term   score = (n - match) + load term")
        winners, best = [], None
        for r in range(RANKS):
            if count[r] >= expected:
                print("        %4d   full (%d of %d requests)" % (r, count[r], expected))
                continue
            load = BETA * (tokens[r] / denom * n)
            score = (n - (m(i, r) if gate else 0)) + load
            print("        %4d  %5d  %11.1f  %14.1f%s" % (r, m(i, r), load, score,
                                                         "   <- chosen" if r == lib_rank[i] else ""))
            if best is None or (score, tokens[r]) < best:
                winners, best = [r], (score, tokens[r])
            elif (score, tokens[r]) == best:
                winners.append(r)
        agrees = lib_rank[i] in winners
        if len(winners) > 1 and agrees:
            print("        tie on the lowest score: the seeded shuffle (random.Random(%d)) picked rank %d"
                  % (q.id, lib_rank[i]))
        if not agrees:
            print("        ** the explanation expected rank %d; the library disagrees **" % winners[0])
            disagreements += 1
        r = lib_rank[i]
        if r >= 0:
            count[r] += 1
            tokens[r] += max(n - m(i, r), 0)
    return disagreements


# --- Routing through the library -------------------------------------------------

def run_iteration(router, c, reqs, with_matches):
    """Routes one iteration, prints it, and updates the cluster as if every
    request were still running. Returns (summary text, disagreements)."""
    states = [adprouter.RankState(rank=r, num_active_requests=c.active[r], num_active_tokens=c.tokens[r])
              for r in range(RANKS)]
    # The binding sends only what the policy reads (the first 64 tokens and
    # the length), so whole prompts can be passed as lists.
    requests = [adprouter.Request(id=q.id, tokens=q.tokens) for q in reqs]
    # What each rank's radix-tree probe would report: the system prompt it caches.
    match = None
    if with_matches:
        match = [{q.id: SYSTEM_LEN for q in reqs if q.prompt in c.cached[r]} for r in range(RANKS)]
    res = router.route(states=states, requests=requests, max_num_active_requests=MAX_ACTIVE, match_lens=match)

    print("  ranks before:" + "".join("  [%d] %d req %d tok cache{%s}" % (r, c.active[r], c.tokens[r],
                                                                          "".join(sorted(c.cached[r])))
                                      for r in range(RANKS)))
    placed = "".join("  %d:[%s]" % (r, ",".join(map(str, ids))) for r, ids in res.assignment.items())
    print("  library placement (rank: ids in order):%s   expected_num_active_requests %d, unassigned %d"
          % (placed, res.expected, len(res.unassigned)))
    print("  explanation (recomputed from docs/ROUTING.md, not by the library):")
    disagreements = explain(c, reqs, match, res.ranks)

    for q, r in zip(reqs, res.ranks):
        if r >= 0:
            c.active[r] += 1
            c.tokens[r] += len(q.tokens)
            c.cached[r].add(q.prompt)
    summary = "".join(" r%d[%s]" % (r, ",".join(map(str, ids))) for r, ids in res.assignment.items())
    return summary, disagreements


def main():
    cluster = Cluster()
    # The same options on every rank: every rank reaches the same decision.
    with adprouter.Router(policy="kv_cache_aware", dp_size=RANKS, cold_start_warmup=True,
                          load_balance_weight=BETA, match_rate_threshold=THRESHOLD,
                          fair_share_multiplier=MULTIPLIER) as router:
        print("iteration 1: cold start, nothing cached, warmup on (4 ranks, max %d active requests each)" % MAX_ACTIVE)
        it1 = [Req(1, "A", 88), Req(2, "A", 128), Req(3, "B", 300), Req(4, "A", 188), Req(5, "A", 68), Req(6, "A", 108)]
        s1, d1 = run_iteration(router, cluster, it1, with_matches=False)

        print("\niteration 2: the ranks report cached system prompts through match_lens "
              "(prompt B only on the rank that served it)")
        it2 = [Req(7, "A", 100), Req(8, "B", 40), Req(9, "A", 150), Req(10, "B", 90), Req(11, "A", 60), Req(12, "B", 200)]
        s2, d2 = run_iteration(router, cluster, it2, with_matches=True)

    summary = "summary:it1%s | it2%s" % (s1, s2)
    print("\n" + summary)
    print("explanation agrees with the library: %s" % ("yes" if d1 + d2 == 0 else "NO"))

    # Same library, same inputs: the C++ quickstart must have placed every
    # request on the same rank.
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cpp = os.path.join(root, "build", "quickstart")
    same = True
    if os.path.exists(cpp):
        out = subprocess.run([cpp, adprouter.library_path()], capture_output=True, text=True).stdout
        theirs = [l for l in out.splitlines() if l.startswith("summary:")]
        same = theirs == [summary]
        print("same assignments as the C++ quickstart (build/quickstart): %s" % ("yes" if same else "NO: %s" % theirs))
    else:
        print("(build/quickstart not built; ./build.sh run builds it and runs both)")
    return 0 if d1 + d2 == 0 and same else 1


if __name__ == "__main__":
    sys.exit(main())
