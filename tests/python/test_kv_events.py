"""KV-cache events (--kv-events-config) as a fleet router reads them: a pyzmq subscriber decodes
each batch with msgspec structs declared as vLLM's KVEventBatch (array-like, tagged events), applies
BlockStored / BlockRemoved / AllBlocksCleared, and must end up holding exactly the blocks the
server's prefix cache holds (GET /api/prefix_cache) after a workload that evicts; a late subscriber
rebuilds the same set from the replay endpoint; two cache_salt values never share a block;
POST /reset_prefix_cache empties both."""
import json
import re
import subprocess
import threading
import time

import httpx
import msgspec
import pytest
import zmq

from conftest import Server, coserve_binary, wait_for


# vLLM's wire schema (vllm/distributed/kv_events.py, array-like encoding): field order is the
# protocol.
class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    pass


class BlockStored(KVCacheEvent):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[int]
    medium: str | None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(EventBatch):
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]


DECODER = msgspec.msgpack.Decoder(type=KVEventBatch)
BLOCK = 16


class Subscriber:
    """A SUB socket on a thread, keeping every batch by sequence number; gaps filled by replay."""

    def __init__(self, endpoint, replay_endpoint, topic):
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, topic.encode())
        self.sub.connect(endpoint)
        self.replay_endpoint = replay_endpoint
        self.topic = topic
        self.batches = {}
        self.lock = threading.Lock()
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        for seq, batch in self.replay(0):  # what was published before this subscriber joined
            with self.lock:
                self.batches.setdefault(seq, batch)

    def _run(self):
        while self.running:
            if self.sub.poll(50):
                topic, seq, payload = self.sub.recv_multipart()
                assert topic == self.topic.encode()
                with self.lock:
                    self.batches[int.from_bytes(seq, "big")] = DECODER.decode(payload)

    def replay(self, start):
        """Every batch the server still buffers from `start` on, in order."""
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.connect(self.replay_endpoint)
        dealer.send_multipart([b"", start.to_bytes(8, "big")])
        out = []
        while True:
            assert dealer.poll(5000), "no replay answer"
            empty, seq, payload = dealer.recv_multipart()
            assert empty == b""
            seq = int.from_bytes(seq, "big", signed=True)
            if seq == -1:
                assert payload == b""
                dealer.close(0)
                return out
            out.append((seq, DECODER.decode(payload)))

    def complete(self):
        """The batches 0..newest with any gap (batches sent before the subscription reached the
        server) filled from the replay endpoint."""
        with self.lock:
            got = dict(self.batches)
        newest = max(got) if got else -1
        missing = [s for s in range(newest + 1) if s not in got]
        if missing:
            for seq, batch in self.replay(missing[0]):
                got.setdefault(seq, batch)
        assert sorted(got) == list(range(len(got))), "sequence numbers must have no gap"
        return [got[s] for s in sorted(got)]

    def close(self):
        self.running = False
        self.thread.join()
        self.sub.close(0)
        self.ctx.term()


def apply(batches):
    """The set of cached block hashes after `batches`, checking each event's shape."""
    held = set()
    for b in batches:
        assert b.data_parallel_rank == 0
        for e in b.events:
            if isinstance(e, BlockStored):
                assert e.block_size == BLOCK and e.medium == "CPU" and e.lora_id is None
                assert len(e.token_ids) == BLOCK * len(e.block_hashes)
                for h in e.block_hashes:
                    assert h not in held
                    held.add(h)
            elif isinstance(e, BlockRemoved):
                for h in e.block_hashes:
                    held.remove(h)
            else:
                held.clear()
    return held


def cached(server):
    r = httpx.get(server.url + "/api/prefix_cache")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["block_size"] == BLOCK
    return {b["hash"] for b in body["blocks"]}


@pytest.fixture(scope="module")
def events_server():
    config = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://127.0.0.1:*",
              "replay_endpoint": "tcp://127.0.0.1:*", "topic": "kv-test", "buffer_steps": 100000}
    s = Server("--kv-events-config", json.dumps(config), "--num-gpu-blocks-override", "48",
               "--block-size", str(BLOCK))
    line = next(l for l in s.log if "KV-cache events published on" in l)
    m = re.search(r"published on (tcp://\S+) \(topic \"kv-test\"\), replayed on (tcp://\S+)", line)
    assert m, line
    s.endpoints = m.group(1), m.group(2)
    yield s
    s.stop()


def test_subscriber_rebuilds_the_prefix_cache_through_evictions_and_replay(events_server):
    s = events_server
    sub = Subscriber(*s.endpoints, "kv-test")
    try:
        c = s.client()
        stems = ["the quick brown fox jumps over the lazy dog " * 6,
                 "a journey of a thousand miles begins with a single step " * 5,
                 "to be or not to be that is the question " * 7]
        # Prompts sharing a stem share its blocks; the ones opening with their own number share
        # none. 48 blocks of 16 tokens hold a few of them at once: later prompts evict earlier ones.
        for i in range(24):
            prompt = stems[i % 3] + f" variation {i} " * (1 + i % 4)
            if i % 2:
                prompt = f"prompt number {i} of this workload: " + prompt
            c.completions.create(model=s.model, prompt=prompt, max_tokens=8, temperature=0)
        ok = wait_for(lambda: apply(sub.complete()) == cached(s), timeout=10)
        batches = sub.complete()
        held = apply(batches)
        assert ok, (len(held), len(cached(s)))
        kinds = {type(e).__name__ for b in batches for e in b.events}
        assert {"BlockStored", "BlockRemoved"} <= kinds
        assert len(held) > 0
        # Stored token ids are the prompt's, block by block.
        first = next(e for b in batches for e in b.events if isinstance(e, BlockStored))
        ids = httpx.post(s.url + "/tokenize", json={"prompt": stems[0]}).json()["tokens"]
        assert first.parent_block_hash is None
        assert first.token_ids[:BLOCK] == ids[:BLOCK]
        # A subscriber that joins late rebuilds the same set from the replay endpoint alone.
        late = Subscriber(*s.endpoints, "kv-test")
        try:
            replayed = late.replay(0)
            assert [seq for seq, _ in replayed] == list(range(len(replayed)))
            assert apply([b for _, b in replayed]) == cached(s)
        finally:
            late.close()
    finally:
        sub.close()


def test_two_cache_salts_never_share_a_block_and_reset_clears_everything(events_server):
    s = events_server
    sub = Subscriber(*s.endpoints, "kv-test")
    try:
        c = s.client()
        prompt = "tenants must never share cached blocks of the same prompt " * 5

        def stored_by(**extra):
            before = len(sub.complete())
            c.completions.create(model=s.model, prompt=prompt, max_tokens=1, extra_body=extra)
            assert wait_for(lambda: apply(sub.complete()) == cached(s), timeout=10)
            return [e for b in sub.complete()[before:] for e in b.events if isinstance(e, BlockStored)]

        a = stored_by(cache_salt="tenant-a")
        b = stored_by(cache_salt="tenant-b")
        hashes_a = {h for e in a for h in e.block_hashes}
        hashes_b = {h for e in b for h in e.block_hashes}
        assert hashes_a and hashes_b
        assert not hashes_a & hashes_b
        # The same tokens, stored twice under different hashes.
        assert [t for e in a for t in e.token_ids] == [t for e in b for t in e.token_ids]
        assert stored_by(cache_salt="tenant-a") == []  # a hit: nothing new to store

        r = httpx.post(s.url + "/reset_prefix_cache")
        assert r.status_code == 200, r.text
        assert r.json()["dropped_blocks"] > 0
        assert cached(s) == set()
        assert wait_for(lambda: any(isinstance(e, AllBlocksCleared)
                                    for b in sub.complete() for e in b.events), timeout=10)
        assert apply(sub.complete()) == set()
        # Serving goes on; the prompt's blocks are stored again.
        assert stored_by(cache_salt="tenant-a")
        assert apply(sub.complete()) == cached(s) != set()
    finally:
        sub.close()


@pytest.mark.parametrize("config,extra,message", [
    ('{"enable_kv_cache_events": true, "endpiont": "tcp://*:1"}', [], "'endpiont' is not a known key"),
    ('{"enable_kv_cache_events": true, "publisher": "kafka"}', [], "'publisher' must be"),
    ('{"enable_kv_cache_events": true}', ["--no-enable-prefix-caching"], "--no-enable-prefix-caching"),
    ('[1]', [], "expected a JSON object"),
])
def test_bad_kv_events_config_is_a_clear_startup_error(config, extra, message):
    p = subprocess.run([coserve_binary(), "serve", "--demo", "--port", "0", "--kv-events-config", config, *extra],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert message in p.stderr, p.stderr[-2000:]


def test_an_endpoint_in_use_is_a_clear_startup_error(events_server):
    port = events_server.endpoints[0].rsplit(":", 1)[1]
    config = json.dumps({"enable_kv_cache_events": True, "endpoint": f"tcp://*:{port}"})
    p = subprocess.run([coserve_binary(), "serve", "--demo", "--port", "0", "--kv-events-config", config],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert f"cannot bind tcp://*:{port}" in p.stderr, p.stderr[-2000:]


def test_prefix_cache_routes_follow_the_web_ui_and_the_api_key():
    s = Server("--api-key", "sekret")
    try:
        assert httpx.get(s.url + "/api/prefix_cache").status_code == 401
        assert httpx.post(s.url + "/reset_prefix_cache").status_code == 401
        auth = {"Authorization": "Bearer sekret"}
        assert httpx.get(s.url + "/api/prefix_cache", headers=auth).status_code == 200
        assert httpx.post(s.url + "/reset_prefix_cache", headers=auth).json() == {"dropped_blocks": 0}
    finally:
        s.stop()
    s = Server("--no-webui")
    try:
        assert httpx.get(s.url + "/api/prefix_cache").status_code == 404
        assert httpx.post(s.url + "/reset_prefix_cache").status_code == 404
    finally:
        s.stop()
