"""A fake of TensorRT-LLM's PyExecutor under attention DP, reduced to what
touches the ADP router, driving adprouter.trtllm's routers rank by rank.

Written from the facts of TensorRT-LLM's executor at adprouter.trtllm's
TRTLLM_COMMIT (its ``_fetch_new_requests`` and
``_pad_attention_dp_dummy_request``), not from its code. One FakeExecutor
runs per rank; ``step()`` is one executor iteration, in the executor's order:

(a) gather: an iteration-stats payload (RankIterStatsPayload, has_iter_stats
    1, iter_stats_iter = the iteration, the previous iteration's prefill
    counts, num_gen_requests = the routable active requests) when stats are
    on, else None;
    ``router.gather_all_rank_states(active_requests,
    iter_stats_payload=...)`` with this rank's active requests, the retiring
    ones included; from the states, the routable total (num_active_requests)
    and the live total (plus num_retiring_requests), and with stats on every
    rank's has_iter_stats / iter_stats_iter, which must agree as
    ADPIterStatsBuffer.finalize needs;
(b) pop: at most tp_size * max_num_active_requests - routable total requests
    (TensorRT-LLM's admission capacity; tp_size * (max_num_active_requests +
    overcommit) - routable total with overcommit, see below) from the
    waiting queue (identical on every rank), a request with child
    requests counting 1 + children; a strict request (a target rank and a
    false attention_dp_relax, None included, as the executor's pop reads it)
    whose target is already at max_num_active_requests, counting the strict
    requests popped before it, is set aside and put back at the head of the
    queue in order;
(c) ``router.gather_prefix_matches(new_requests)`` only when
    needs_prefix_matches and something was popped;
(d) ``route_requests(all_rank_states, new_requests, max_num_active_requests)``
    every iteration, also with nothing popped; ``expected`` is kept and
    ``assignment[dist.tp_rank]`` (a dict look-up) joins active_requests;
(e) the dummy-padding check: routable = len(active_requests) -
    count_retiring_requests(active_requests). The executor only warns when
    expected < routable; this fake counts it as an error (a stronger
    check). needs_dummy = expected > 0 and no schedulable request (without
    a KV transceiver: active_requests is empty, retiring ones counted) is
    recorded;
(f) the forward step: requests still retiring from the previous iteration
    leave active_requests (the overlap scheduler keeps a finished request
    one iteration in state GENERATION_TO_COMPLETE); the newly activated ones
    run their prefill (cached_tokens probed in this rank's fake KV cache,
    their blocks added to it); the requests whose last token came out move to
    GENERATION_TO_COMPLETE.

Invariants, collected (``errors``), not stopping at the first:

* every rank agrees each iteration: a digest of the popped ids, the decision,
  expected, the carried ids and the router's state_digest() is allgathered
  and must be equal (a difference ends the run on every rank alike);
* the states come back in rank order, and this rank's own state counts its
  routable active requests and, in num_retiring_requests, exactly the
  requests it left retiring; with stats on every rank reports
  has_iter_stats 1 for this iteration and the counts it sent, with stats
  off none reports any;
* the pop stays within the capacity and leaves a strict request behind only
  when its target is full;
* the router's collectives are exactly one allgather for the states plus one
  for the prefix matches where the executor calls it (so the probe is
  skipped exactly on iterations where nothing was popped), and its probes of
  the KV cache are one per carried or new request of that call, none
  elsewhere;
* the decision has a list for every rank, holds exactly the carried and
  popped requests less those carried on (or handed back), places none
  twice (in this iteration or ever), keeps every rank within
  max_num_active_requests and within expected (expected >= routable on
  this rank, the padding check);
* at the end (``run``), after the waiting queue and the carry-over drained,
  every request issued was admitted by exactly one rank.

With TensorRT-LLM's admission capacity the router never has to carry a
request over: the pop never takes more than the ranks hold under
max_num_active_requests, and a strict request only while its target has
room. ``overcommit`` (requests per rank the pop admits beyond
max_num_active_requests; 0, TensorRT-LLM's, by default) stands for an
engine without that bound: the router gets more than fits and must carry
the rest over, within the same invariants.

``requeue`` (the "+requeue" twins of the overcommitted configurations)
passes ``executor=self`` to ``ADPRouter.create``, as install() and the
start-up hook do for TensorRT-LLM's PyExecutor: what no rank can take goes
back to the front of this executor's waiting queue (``WaitingQueue``, with
the ``prepend_requests`` and ``remove_by_ids`` of TensorRT-LLM's FCFS
queue) instead of into the router's carry-over. Then, each iteration, the
router carries nothing, the requests it handed back are exactly the offered
(carried and popped) ones it did not place, in the order offered, and they
lie at the head of the queue; at the end the router's stats() count them
("requeued") and its carry ("carried" 0).

Two more of the executor's paths that look at the waiting queue and not at
the router:

* cancellation (``cancel``, ``_handle_canceled_requests``): the cancel items
  a fetch received go to ``canceled_req_ids``; after the forward step the
  canceled ids are removed from the waiting queue (``remove_by_ids``) and
  matching active requests finish (here: they retire next iteration). An id
  found in neither is forgotten, as TensorRT-LLM forgets it: a request the
  router carries then is admitted later despite its cancel. A request
  canceled while waiting must never be admitted;
* shutdown (``shutdown_at``): the shutdown item arrives after that
  iteration's requests (nothing arrives after it) and the executor stops
  once ``is_shutdown`` and it holds no active request and its waiting queue
  is empty (checked right after the fetch, as should_stop_processing is;
  here the ranks stop together, when every rank would).

``run(dist, ...)`` is the driver: a seeded workload (bursts, ordinary
arrivals and quiet stretches) arriving for ``iters`` iterations, then
draining; ``CONFIGS`` lists the configurations (every policy and option,
each policy overcommitted, and its "+requeue" twin). Used by
test_trtllm_executor.py (4 ranks as threads, trtllm_fakes.ThreadGroup) and
mpi_trtllm.py (4 MPI ranks).
Standard library only (plus adprouter and the fakes).
"""

import collections
import hashlib
import itertools
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trtllm_fakes as F  # noqa: E402

from adprouter import trtllm as T  # noqa: E402

KV = dict(enable_kv_cache_aware_routing=True)
CONV = dict(kv_cache_routing_conversation_affinity=True)

# name, AttentionDpConfig fields, adprouter options, FakeExecutor arguments:
# every policy and option with TensorRT-LLM's admission capacity, then each
# policy overcommitted (FakeExecutor's overcommit), which is what makes the
# router carry requests over.
OVER = {"overcommit": 2}
REQUEUE = {"overcommit": 2, "requeue": True}
CONFIGS = [
    ("default", {}, {}, {}),
    ("default+capacity", {}, {"capacity_aware": True}, {}),
    ("kv_cache_aware", KV, {}, {}),
    ("kv_cache_aware+warmup", dict(KV, kv_cache_routing_cold_start_warmup=True), {}, {}),
    ("kv_cache_aware+index", KV, {"prefix_source": "index"}, {}),
    ("kv_cache_aware+probe+index", KV, {"prefix_source": "probe+index"}, {}),
    ("kv_cache_aware+demand", KV, {"warmup": "demand", "warmup_min_requests": 1}, {}),
    ("kv_cache_aware+capacity", KV, {"capacity_aware": True}, {}),
    ("kv_cache_aware+preset=full", KV, {"preset": "full"}, {}),
    ("kv_cache_aware+preset=recommended", KV, {"preset": "recommended"}, {}),
    ("conversation", CONV, {}, {}),
    ("conversation+least_queued", dict(CONV, kv_cache_routing_new_conv_placement="least_queued"), {}, {}),
    ("default+overcommit", {}, {}, OVER),
    ("kv_cache_aware+overcommit", KV, {}, OVER),
    ("conversation+overcommit", CONV, {}, OVER),
    ("default+overcommit+requeue", {}, {}, REQUEUE),
    ("kv_cache_aware+overcommit+requeue", KV, {}, REQUEUE),
    ("conversation+overcommit+requeue", CONV, {}, REQUEUE),
]
CONFIG = {c[0]: c[1:] for c in CONFIGS}

MAXN = 4         # max_num_active_requests per rank: small, so that ranks fill up
KV_BLOCKS = 48   # blocks of each rank's fake KV cache: small, so that capacity_aware bites
DRAIN = 200      # iterations after the last arrival within which everything must be admitted


def workload(seed, it, next_id):
    """Iteration it's arrivals: identical on every rank. In cycles of 20
    iterations: 4 of bursts (4 to 16 requests), 6 of ordinary arrivals
    (0 to 8), 10 without any (the ranks drain unevenly: dummies, then idle
    iterations)."""
    phase = it % 20
    if phase >= 10:
        return []
    rng = random.Random(seed * 1_000_003 + it)
    batch = []
    for _ in range(rng.randrange(0, 9) + (rng.randrange(4, 9) if phase < 4 else 0)):
        rid = next_id()
        fam = rng.randrange(6)
        n = rng.randrange(40, 300)
        tokens = [fam * 100_000 + i for i in range(n)] + [rid] * rng.randrange(0, 3)
        target = rng.randrange(4) if rng.random() < 0.1 else None
        relax = rng.choice([None, None, True, False])
        conv = rng.choice(["c%d" % rng.randrange(12), rng.randrange(12), None])
        lora = 1 if rng.random() < 0.2 else None
        salt = "tenant" if rng.random() < 0.2 else None
        out = rng.choice([None, 16, 256])  # max_tokens: the KV a rank reserves for the output
        batch.append(F.item(rid, tokens, target=target, relax=relax, conversation=conv,
                            lora=lora, cache_salt=salt, max_tokens=out))
    return batch


def strict_target(item):
    """The target rank of a request the executor's pop treats as strict (a
    target and a false attention_dp_relax, None included), else None."""
    sp = getattr(item.request, "py_scheduling_params", None)
    if sp is None or sp.attention_dp_rank is None or sp.attention_dp_relax:
        return None
    return sp.attention_dp_rank


def retiring_count(active_requests):
    """The retiring requests among active_requests, counted by the fakes'
    own test (trtllm_fakes.retiring), apart from adprouter.trtllm's."""
    return sum(1 for r in active_requests if F.retiring(r))


def lifetime(rid):
    """Iterations a request generates after its prefill iteration."""
    return rid % 5


class WaitingQueue(collections.deque):
    """The executor's waiting queue (TensorRT-LLM's FCFS queue, as far as
    the router and the executor's cancellation touch it): a deque of
    RequestQueueItems with add_requests, prepend_requests (to the head, in
    the order given) and remove_by_ids. It records what is prepended to it
    (``prepended``: every id, in order, until take_prepended())."""

    def __init__(self, items=()):
        super().__init__(items)
        self.prepended = []

    def add_requests(self, items):
        self.extend(items)

    def prepend_requests(self, items):
        items = list(items)
        self.extendleft(reversed(items))
        self.prepended += [x.id for x in items]

    def remove_by_ids(self, ids):
        keep = [x for x in self if x.id not in ids]
        self.clear()
        self.extend(keep)

    def take_prepended(self):
        out, self.prepended = self.prepended, []
        return out


class FakeExecutor:
    """One rank's executor state and its per-iteration routing (module
    docstring)."""

    def __init__(self, dist, attention_dp_config, options=None, max_num_active_requests=MAXN,
                 iter_stats=False, kv_cache_manager=None, overcommit=0, requeue=False, cancel=None):
        self.dist = dist
        self.kv_cache_manager = kv_cache_manager or F.KVCacheManager(max_num_blocks=KV_BLOCKS)
        self.waiting_queue = WaitingQueue()
        self.requeue = requeue
        self.router = T.ADPRouter.create(dist, self.kv_cache_manager, attention_dp_config, options=options,
                                         executor=self if requeue else None)
        self.active_requests = []
        self.max_num_active_requests = max_num_active_requests
        self.enable_iter_perf_stats = iter_stats
        self.overcommit = overcommit
        self.expected_num_active_requests = 0
        self.iteration = 0
        self.errors = []
        self.admitted = set()      # ids this rank activated
        self.placed = set()        # ids any rank was given (every rank sees every decision)
        self.needs_dummy = False   # the last iteration's padding decision
        self._finish = {}          # request id -> iteration whose forward emits its last token
        self._prefill = []         # requests activated this iteration
        self._last_ctx = (0, 0)    # (requests, tokens) prefilled in the previous iteration
        self.digest = hashlib.sha256()
        self.counts = collections.Counter()
        self.cancel = cancel       # cancel(executor, handed_back ids) -> ids canceled (see step)
        self.canceled_req_ids = []
        self.canceled_waiting = set()  # canceled while in the waiting queue: never to be admitted
        self.canceled_missed = set()   # canceled while the router carried them: out of reach
        self.handed_back = []      # ids the router put back at the head of the queue, last iteration
        self.is_shutdown = False
        self.stop = False          # should_stop_processing, as of the last fetch

    def enqueue(self, items):
        """New requests into the waiting queue (identical on every rank)."""
        self.waiting_queue.extend(items)

    def shutdown(self):
        """The shutdown item arrived (after this iteration's requests)."""
        self.is_shutdown = True

    def _handle_canceled_requests(self):
        """The executor's _handle_canceled_requests (module docstring)."""
        if not self.canceled_req_ids:
            return
        ids = set(self.canceled_req_ids)
        self.canceled_req_ids = []
        waiting = {x.id for x in self.waiting_queue} & ids
        self.waiting_queue.remove_by_ids(ids)
        if any(x.id in ids for x in self.waiting_queue):
            self._error("remove_by_ids left canceled requests in the waiting queue")
        self.canceled_waiting |= waiting
        for req in self.active_requests:
            if req.py_request_id in ids:
                req.state = F.LlmRequestState.GENERATION_TO_COMPLETE  # finished: retires next iteration
                self.counts["canceled_active"] += 1
        self.canceled_missed |= ids & {x.id for x in self.router.carried}

    def _error(self, msg):
        self.errors.append("iteration %d: %s" % (self.iteration, msg))

    # ---- (a) ----------------------------------------------------------------------

    def _iter_stats_payload(self):
        routable = len(self.active_requests) - retiring_count(self.active_requests)
        return T.RankIterStatsPayload(
            has_iter_stats=1, iter_stats_iter=self.iteration,
            num_context_requests=self._last_ctx[0], num_ctx_tokens=self._last_ctx[1],
            num_gen_requests=routable,
            num_gen_kv_tokens=sum(r.py_orig_prompt_len for r in self.active_requests if not F.retiring(r)))

    def _check_states(self, states, payload):
        dist, rank = self.dist, self.dist.tp_rank
        if [s.rank for s in states] != list(range(dist.tp_size)):
            self._error("rank states in order %r, want 0..%d" % ([s.rank for s in states], dist.tp_size - 1))
            return
        own = states[rank]
        retiring = retiring_count(self.active_requests)
        if own.num_retiring_requests != retiring:
            self._error("rank %d reported num_retiring_requests=%d, it left %d retiring"
                        % (rank, own.num_retiring_requests, retiring))
        if own.num_active_requests != len(self.active_requests) - retiring:
            self._error("rank %d reported num_active_requests=%d, it holds %d routable"
                        % (rank, own.num_active_requests, len(self.active_requests) - retiring))
        # Where the ranks report KV (the recommended preset), what this
        # rank's requests will still take: counted when some is pending.
        self.counts["pending_kv"] += bool(own.pending_kv_tokens)
        if T.count_retiring_requests(self.active_requests) != retiring:
            self._error("count_retiring_requests says %d, the fake's states say %d"
                        % (T.count_retiring_requests(self.active_requests), retiring))
        if payload is None:
            bad = [s.rank for s in states if s.iter_stats.has_iter_stats or s.iter_stats.iter_stats_iter != -1]
            if bad:
                self._error("iteration stats off, yet ranks %r report some" % bad)
            return
        if own.iter_stats.serialize() != payload.serialize():
            self._error("rank %d's payload came back as %r, sent %r" % (rank, own.iter_stats, payload))
        # ADPIterStatsBuffer.finalize: rank 0's iter id, every rank reporting it.
        iter_ids = [s.iter_stats.iter_stats_iter if s.iter_stats.has_iter_stats else None for s in states]
        if iter_ids != [self.iteration] * dist.tp_size:
            self._error("iteration stats ids %r, want %d on every rank" % (iter_ids, self.iteration))
        for s in states:
            if s.iter_stats.num_gen_requests != s.num_active_requests:
                self._error("rank %d: payload num_gen_requests=%d but num_active_requests=%d"
                            % (s.rank, s.iter_stats.num_gen_requests, s.num_active_requests))

    # ---- (b) ----------------------------------------------------------------------

    def _pop(self, capacity, all_ranks_num_active_requests):
        """The executor's pop under attention DP (module docstring, (b))."""
        if capacity <= 0:
            return []
        maxn = self.max_num_active_requests
        counts = list(all_ranks_num_active_requests)
        queue = self.waiting_queue
        popped, held = [], []
        n = 0
        while n < capacity and queue:
            need = 1 + len(queue[0].child_req_ids or ())
            if n + need > capacity:
                break
            x = queue.popleft()
            target = strict_target(x)
            if target is not None:
                if counts[target] >= maxn:
                    held.append(x)
                    continue
                counts[target] += 1
            popped.append(x)
            n += need
        queue.extendleft(reversed(held))
        self.counts["held_back"] += len(held)
        if n > capacity:
            self._error("popped %d requests, capacity %d" % (n, capacity))
        for x in held:
            t = strict_target(x)
            if t is None or all_ranks_num_active_requests[t] + sum(strict_target(p) == t for p in popped) < maxn:
                self._error("request %d set aside with room on its target rank %r" % (x.id, t))
        return popped

    # ---- one iteration -------------------------------------------------------------

    def step(self):
        """One executor iteration (module docstring). False when the ranks
        diverged (the same on every rank): stop."""
        dist, router, rank = self.dist, self.router, self.dist.tp_rank
        tp, maxn = dist.tp_size, self.max_num_active_requests
        kv = self.kv_cache_manager
        collectives = dist.allgathers
        probes = len(kv.probes)

        # (a) rank states, every iteration, before the pop
        payload = self._iter_stats_payload() if self.enable_iter_perf_stats else None
        states = router.gather_all_rank_states(self.active_requests, iter_stats_payload=payload)
        self._check_states(states, payload)
        all_active = [s.num_active_requests for s in states]
        total_routable = sum(all_active)
        total_live = total_routable + sum(s.num_retiring_requests for s in states)
        self.counts["retiring"] += states[rank].num_retiring_requests
        if total_live == 0 and not self.waiting_queue:
            self.counts["idle"] += 1

        # (b) the pop
        new_requests = self._pop(tp * (maxn + self.overcommit) - total_routable, all_active)
        popped_ids = [x.id for x in new_requests]
        self.counts["popped"] += len(new_requests)

        # (c) the probe, only with something popped
        carried_before = [x.id for x in router.carried]
        probed = False
        if router.needs_prefix_matches and new_requests:
            before = len(kv.probes)
            router.gather_prefix_matches(new_requests)
            probed = True
            self.counts["probes"] += 1
            want = len(carried_before) + len(new_requests)
            if len(kv.probes) - before != want:
                self._error("gather_prefix_matches probed %d times for %d carried and new requests"
                            % (len(kv.probes) - before, want))
        if new_requests:
            self.counts["popped_iters"] += 1

        # (d) route, every iteration
        self.waiting_queue.take_prepended()
        assignment, expected = router.route_requests(states, new_requests, maxn)
        self.expected_num_active_requests = expected
        carried_after = [x.id for x in router.carried]
        handed = self.waiting_queue.take_prepended()
        self.handed_back = handed
        self.counts["carried"] += len(carried_after)
        self.counts["requeued"] += len(handed)
        made = dist.allgathers - collectives
        if made != 1 + probed:
            self._error("the router made %d allgathers, want %d (states%s)"
                        % (made, 1 + probed, " + prefix matches" if probed else ""))
        if len(kv.probes) - probes != (len(carried_before) + len(new_requests) if probed else 0):
            self._error("the router probed the KV cache %d times%s"
                        % (len(kv.probes) - probes, "" if probed else " without gather_prefix_matches"))
        if sorted(assignment) != list(range(tp)):
            self._error("assignment has ranks %r, want 0..%d" % (sorted(assignment), tp - 1))
        decision = [[x.id for x in assignment.get(r, ())] for r in range(tp)]
        placed = [rid for ids in decision for rid in ids]
        if sorted(placed + carried_after + handed) != sorted(carried_before + popped_ids):
            self._error("placed %r + carried %r + handed back %r, want exactly the carried %r and popped %r"
                        % (placed, carried_after, handed, carried_before, popped_ids))
        if self.requeue:
            left = [rid for rid in carried_before + popped_ids if rid not in set(placed)]
            if carried_after:
                self._error("the router carries %r although it knows the waiting queue" % carried_after)
            if handed != left:
                self._error("handed back %r, want the unplaced %r in the order offered" % (handed, left))
            head = [x.id for x in itertools.islice(self.waiting_queue, len(handed))]
            if head != handed:
                self._error("the head of the waiting queue is %r, want the handed back %r" % (head, handed))
        elif handed:
            self._error("requests %r put back into the waiting queue of an executor the router was not given"
                        % handed)
        for r, ids in enumerate(decision):
            count = all_active[r] + len(ids)
            if count > maxn:
                self._error("rank %d has %d active requests, max %d" % (r, count, maxn))
            if count > expected:
                self._error("rank %d has %d active requests, expected %d" % (r, count, expected))
            for rid in ids:
                if rid in self.placed:
                    self._error("request %d placed twice" % rid)
                self.placed.add(rid)
        self.counts["routed"] += len(placed)
        mine = assignment.get(rank, [])
        self._prefill = []
        for x in mine:
            req = x.request
            req.py_request_id = x.id
            req.state = F.LlmRequestState.CONTEXT_INIT
            self._finish[x.id] = self.iteration + lifetime(x.id)
            self.active_requests.append(req)
            self._prefill.append(req)
            self.admitted.add(x.id)
        # should_stop_processing, right after the fetch
        self.stop = self.is_shutdown and not self.active_requests and not self.waiting_queue
        # cancel items this iteration's fetch received: the test names them
        # after seeing the decision (a client may cancel at any time)
        if self.cancel is not None:
            self.canceled_req_ids += list(self.cancel(self, handed))

        # (e) dummy padding
        routable = len(self.active_requests) - T.count_retiring_requests(self.active_requests)
        if expected < routable:  # the executor warns and carries on; here it is an error
            self._error("rank %d: routable active_requests (%d) exceeds expected_num_active_requests (%d)"
                        % (rank, routable, expected))
        self.needs_dummy = expected > 0 and len(self.active_requests) == 0
        self.counts["dummies"] += self.needs_dummy

        # (f) forward: retire, prefill, finish
        self.active_requests = [r for r in self.active_requests if not F.retiring(r)]
        for req in self._prefill:
            lora = req.lora_config.task_id if req.lora_config is not None else None
            req.cached_tokens = kv.probe_prefix_match_length(req.input_token_ids[:-1], lora,
                                                             cache_salt=req.cache_salt)
            kv.add(req.input_token_ids, lora, req.cache_salt)
            req.state = F.LlmRequestState.GENERATION_IN_PROGRESS
        self._last_ctx = (len(self._prefill), sum(r.py_orig_prompt_len for r in self._prefill))
        for req in self.active_requests:
            if self._finish[req.py_request_id] <= self.iteration:
                req.state = F.LlmRequestState.GENERATION_TO_COMPLETE
        self._handle_canceled_requests()

        # the ranks agree
        d = hashlib.sha256(repr((self.iteration, popped_ids, decision, expected, carried_after)
                                + ((handed,) if self.requeue else ())
                                + (router.router.state_digest(),)).encode()).hexdigest()
        self.digest.update(d.encode())
        digests = dist.tp_allgather(d)
        agree = len(set(digests)) == 1
        if not agree:
            self._error("DIVERGENCE: the ranks' decisions differ (rank digests %s)"
                        % ", ".join(x[:8] for x in digests))
        self.iteration += 1
        return agree


def _natural(text):
    """A sort key putting "iteration 9" before "iteration 10"."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", text)]


def run(dist, attention_dp_config, options=None, iters=40, seed=1, iter_stats=False,
        max_num_active_requests=MAXN, overcommit=0, setup=None, requeue=False, cancel=None,
        shutdown_at=None):
    """Runs one configuration on this rank (all ranks call it alike): the
    workload arrives for iters iterations, then the executor steps until the
    waiting queue and the router's carry-over are empty (within DRAIN
    iterations). setup(executor), when given, runs once before the first
    iteration (the tests use it to break the router on purpose). requeue:
    the router gets executor= (module docstring). cancel(executor,
    handed_back): the ids whose cancel items arrived this iteration (module
    docstring). shutdown_at: the iteration whose requests the shutdown item
    follows; the run then ends when the executor stops (module docstring),
    not when the queue and carry-over are empty. Returns (errors of every
    rank, sorted; stats summed over the ranks where per rank: iterations,
    requests, routed, carried, requeued, digest, popped, popped_iters,
    probes, held_back, retiring, dummies, idle, canceled_waiting,
    canceled_active, canceled_missed, requeued_after_shutdown, stopped,
    pending_kv: the gathers in which the rank's own state reported KV
    pending)."""
    ex = FakeExecutor(dist, attention_dp_config, options=options,
                      max_num_active_requests=max_num_active_requests, iter_stats=iter_stats,
                      overcommit=overcommit, requeue=requeue, cancel=cancel)
    if setup is not None:
        setup(ex)
    ids = itertools.count(1)
    issued = []
    stopped = False
    if shutdown_at is not None:
        iters = min(iters, shutdown_at + 1)
    while True:
        it = ex.iteration
        if it < iters:
            batch = workload(seed, it, lambda: next(ids))
            issued += [x.id for x in batch]
            ex.enqueue(batch)
            if it == shutdown_at:
                ex.shutdown()
        elif shutdown_at is None and not ex.waiting_queue and not ex.router.carried:
            break
        if it >= iters + DRAIN:
            ex.errors.append("not drained %d iterations after the last arrival: %d waiting, carried %r"
                             % (DRAIN, len(ex.waiting_queue), [x.id for x in ex.router.carried]))
            break
        requeued = ex.counts["requeued"]
        if not ex.step():
            break
        if ex.is_shutdown:
            ex.counts["requeued_after_shutdown"] += ex.counts["requeued"] - requeued
            if all(dist.tp_allgather(ex.stop)):
                stopped = True
                break

    errors = list(ex.errors)
    if shutdown_at is not None:
        if not stopped:
            errors.append("the executor never stopped after the shutdown")
        elif ex.waiting_queue or ex.router.carried:
            errors.append("stopped with %d waiting and carried %r"
                          % (len(ex.waiting_queue), [x.id for x in ex.router.carried]))
    st = ex.router.stats()
    if (st["carried"], st["requeued"]) != (len(ex.router.carried), ex.counts["requeued"]):
        errors.append("router stats carried=%d requeued=%d, the executor saw %d carried and %d put back"
                      % (st["carried"], st["requeued"], len(ex.router.carried), ex.counts["requeued"]))
    owners = dist.tp_allgather(sorted(ex.admitted))
    seen = {}
    for r, rids in enumerate(owners):
        for rid in rids:
            if rid in seen:
                errors.append("request %d admitted by ranks %d and %d" % (rid, seen[rid], r))
            seen[rid] = r
    canceled = ex.canceled_waiting
    admitted_canceled = sorted(canceled & set(seen))
    if admitted_canceled:
        errors.append("requests canceled while waiting were admitted: %r" % admitted_canceled[:10])
    lost = sorted(set(issued) - set(seen) - canceled)
    if lost:
        errors.append("%d requests never admitted: %r" % (len(lost), lost[:10]))
    extra = sorted(set(seen) - set(issued))
    if extra:
        errors.append("admitted requests never issued: %r" % extra[:10])
    if ex.router.needs_prefix_matches and ex.counts["probes"] != ex.counts["popped_iters"]:
        errors.append("probed on %d iterations, popped on %d" % (ex.counts["probes"], ex.counts["popped_iters"]))
    if not ex.router.needs_prefix_matches and ex.counts["probes"]:
        errors.append("probed on %d iterations without needs_prefix_matches" % ex.counts["probes"])
    gathered = dist.tp_allgather((errors, dict(ex.counts)))
    errors = sorted(set(e for errs, _ in gathered for e in errs), key=_natural)
    per_rank = ("retiring", "dummies", "canceled_active", "pending_kv")
    stats = {k: (sum(c.get(k, 0) for _, c in gathered) if k in per_rank else ex.counts[k])
             for k in ("routed", "carried", "requeued", "requeued_after_shutdown", "popped", "popped_iters",
                       "probes", "held_back", "idle") + per_rank}
    stats.update(iterations=ex.iteration, requests=len(issued), digest=ex.digest.hexdigest()[:16],
                 canceled_waiting=len(ex.canceled_waiting), canceled_missed=len(ex.canceled_missed),
                 stopped=stopped)
    return errors, stats
