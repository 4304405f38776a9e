"""Prefix-affinity routing on Ray Serve's RequestRouter API.

Each router (one per handle: the ingress replicas each hold one) remembers, for the prompts it
routed, which replica got them, by chained hashes of the prompt text in `chunk_chars` pieces. A
request goes to the replica holding the longest run of its leading chunks, so a conversation's next
turn, or prompts sharing a system prompt or few-shot prefix, land where their prefix is cached. A
prompt with no remembered prefix goes to the replica with the shortest queue (the least loaded
spreads new prefixes). When the queues are imbalanced (the longest minus the shortest above
`imbalance_threshold`), affinity yields to the least loaded. Ray's own PrefixCacheAffinityRouter
(ray.serve.llm) follows the same policy but needs Ray's LLM extras (vLLM and pyarrow); this one
needs only ray[serve].

The ranks returned are tried in order by Ray, which probes queue lengths and skips a replica whose
queue is full (max_ongoing_requests), so a preferred replica at capacity falls through to the next.
"""
import hashlib
import random
import time
from collections import OrderedDict

from ray.serve.request_router import FIFOMixin, LocalityMixin, RequestRouter


def chunk_hashes(text, chunk_chars):
    """Chained hashes of text's whole leading chunks: out[i] names text[: (i + 1) * chunk_chars]."""
    out, h = [], b""
    for start in range(0, len(text) - chunk_chars + 1, chunk_chars):
        h = hashlib.blake2b(h + text[start:start + chunk_chars].encode(), digest_size=8).digest()
        out.append(h)
    return out


class PrefixAffinityRouter(FIFOMixin, LocalityMixin, RequestRouter):
    def initialize_state(self, chunk_chars=128, imbalance_threshold=8, max_entries=200_000):
        self.chunk_chars = chunk_chars
        self.imbalance_threshold = imbalance_threshold
        self.max_entries = max_entries
        self.owner = OrderedDict()  # chunk hash -> replica id (least recently routed first)
        self.routed_prefix = 0      # requests sent to the replica holding their prefix
        self.routed_balance = 0     # requests sent by load

    def _queue_len(self, replica):
        n = self.replica_queue_len_cache.get(replica.replica_id)
        return 0 if n is None else n

    def _prefix_of(self, pending_request):
        if pending_request is None:
            return ""
        for arg in pending_request.args:
            text = getattr(arg, "prompt_prefix", None)
            if isinstance(text, str):
                return text
        return ""

    async def choose_replicas(self, candidate_replicas, pending_request=None):
        if not candidate_replicas:
            return []
        by_load = sorted(candidate_replicas, key=lambda r: (self._queue_len(r), random.random()))
        loads = [self._queue_len(r) for r in by_load]
        hashes = chunk_hashes(self._prefix_of(pending_request), self.chunk_chars)
        if hashes and loads[-1] - loads[0] <= self.imbalance_threshold:
            live = {r.replica_id: r for r in candidate_replicas}
            for h in reversed(hashes):  # the longest remembered prefix first
                rid = self.owner.get(h)
                if rid in live:
                    self.routed_prefix += 1
                    rest = [r for r in by_load if r.replica_id != rid]
                    return [[live[rid]], rest]
        self.routed_balance += 1
        return [by_load[:1], by_load[1:]]

    def on_request_routed(self, pending_request, replica_id, result):
        for h in chunk_hashes(self._prefix_of(pending_request), self.chunk_chars):
            self.owner[h] = replica_id
            self.owner.move_to_end(h)
        while len(self.owner) > self.max_entries:
            self.owner.popitem(last=False)

    def on_replica_actor_died(self, replica_id):
        super().on_replica_actor_died(replica_id)
        self._forget(replica_id)

    def update_replicas(self, replicas):
        super().update_replicas(replicas)
        live = {r.replica_id for r in replicas}
        for rid in {rid for rid in self.owner.values() if rid not in live}:
            self._forget(rid)

    def _forget(self, replica_id):
        for h in [h for h, rid in self.owner.items() if rid == replica_id]:
            del self.owner[h]

    def routing_stats(self):
        return {"prefix": self.routed_prefix, "balance": self.routed_balance, "at": time.time()}
