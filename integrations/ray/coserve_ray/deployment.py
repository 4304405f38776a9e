"""The Ray Serve application: an ingress deployment proxying every HTTP route to a pool of replica
deployments, each supervising one `coserve serve` process.

    client --HTTP--> Ray's proxy --> CoserveIngress --handle (stream)--> CoserveReplica --HTTP--> coserve

The ingress reads the request, keeps the text a prompt starts with (for the prefix-affinity
router, coserve_ray.router) and calls a replica through a deployment handle whose router picks it;
the replica forwards the request to its coserve process and streams the answer back chunk by chunk
(SSE included: nothing is buffered). A replica whose coserve dies ends the requests it held with an
error (an SSE error event when the answer had started streaming, a 503 otherwise), fails its health
check, and Ray restarts it; a replica being scaled down lets its requests finish (Ray's graceful
shutdown) and then stops coserve with SIGTERM, which drains for up to --shutdown-timeout seconds.
"""
import json
import logging
import os
import shutil
from dataclasses import dataclass, field

import httpx
import ray
from ray import serve
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse

from coserve_ray.process import CoserveProcess

logger = logging.getLogger("ray.serve")

# Headers a proxy must not forward (hop-by-hop, or recomputed by the next hop).
_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
                "content-length", "host", "proxy-authorization", "proxy-connection"}


@dataclass
class ProxiedRequest:
    """An HTTP request as the ingress hands it to a replica. `prompt_prefix`: the text the prompt
    starts with (completions' prompt, or the chat messages' roles and contents joined), "" when the
    route has none; the router matches it against what each replica served."""
    method: str
    path: str
    query: str
    headers: list = field(default_factory=list)
    body: bytes = b""
    prompt_prefix: str = ""


def prompt_prefix_of(path, body, limit=8192):
    """The leading text of a request's prompt, at most `limit` characters."""
    if not body:
        return ""
    try:
        doc = json.loads(body)
    except ValueError:
        return ""
    if not isinstance(doc, dict):
        return ""
    parts = []
    if isinstance(doc.get("messages"), list):
        for m in doc["messages"]:
            if isinstance(m, dict):
                parts.append(str(m.get("role", "")) + ":" + _content_text(m.get("content")) + "\n")
    elif isinstance(doc.get("prompt"), str):
        parts.append(doc["prompt"])
    elif isinstance(doc.get("input"), str):  # /v1/responses
        parts.append(doc["input"])
    return "".join(parts)[:limit]


def _content_text(content):
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _sse_error(message, code=503):
    body = {"error": {"message": message, "type": "ServiceUnavailableError", "param": None, "code": code}}
    return ("data: " + json.dumps(body) + "\n\n").encode()


def _error_json(message, status=503):
    return {"error": {"message": message, "type": "ServiceUnavailableError", "param": None, "code": status}}


class CoserveReplica:
    """One replica: a `coserve serve` process on the resources Ray gave this actor."""

    def __init__(self, model_args, binary=None, startup_timeout_s=600.0, shutdown_timeout_s=30,
                 extra_env=None):
        binary = binary or os.environ.get("COSERVE_BIN") or shutil.which("coserve")
        if not binary:
            raise RuntimeError("coserve binary not found: pass binary= or set COSERVE_BIN")
        ctx = ray.get_runtime_context()
        gpus = ctx.get_accelerator_ids().get("GPU", [])
        cpus = int(ctx.get_assigned_resources().get("CPU", 1)) or 1
        args = list(model_args)
        if "--device" not in args:  # Ray sets CUDA_VISIBLE_DEVICES to the GPUs it assigned
            args += ["--device", "cuda"] if gpus else ["--device", "cpu"]
        if not gpus and "--cpu-threads" not in args:
            args += ["--cpu-threads", str(cpus)]
        if "--shutdown-timeout" not in args:
            args += ["--shutdown-timeout", str(int(shutdown_timeout_s))]
        self.shutdown_timeout_s = shutdown_timeout_s
        self.process = CoserveProcess(binary, args, env=extra_env, startup_timeout_s=startup_timeout_s)
        self.client = httpx.AsyncClient(base_url=self.process.url, timeout=httpx.Timeout(None, connect=10.0))
        logger.info("coserve replica: pid %d on %s (%s, %d CPUs)", self.process.pid, self.process.url,
                    "GPUs " + ",".join(map(str, gpus)) if gpus else "no GPU", cpus)

    async def handle(self, req: ProxiedRequest):
        """Streams the answer: first {"status", "headers"}, then the body's chunks as they come."""
        started, sse = False, False
        try:
            url = req.path + ("?" + req.query if req.query else "")
            async with self.client.stream(req.method, url, headers=req.headers, content=req.body) as r:
                headers = [(k, v) for k, v in r.headers.items() if k.lower() not in _HOP_HEADERS]
                sse = r.headers.get("content-type", "").startswith("text/event-stream")
                started = True
                yield {"status": r.status_code, "headers": headers}
                async for chunk in r.aiter_raw():
                    yield chunk
        except httpx.HTTPError as e:
            why = f"the replica's coserve failed mid-request ({type(e).__name__}); retry"
            if not self.process.alive():
                why = f"the replica's coserve exited (status {self.process.proc.returncode}); retry"
            if started and sse:
                yield _sse_error(why)  # the client has a 200 and part of the stream: end it
            elif started:
                raise RuntimeError(why) from e  # a body cut short: the connection is dropped
            else:
                yield {"status": 503, "headers": [("content-type", "application/json")]}
                yield json.dumps(_error_json(why)).encode()

    async def check_health(self):
        """Ray's health check: raising restarts this replica."""
        if not self.process.alive():
            raise RuntimeError(f"coserve exited with status {self.process.proc.returncode}:\n"
                               + self.process.tail(20))
        r = await self.client.get("/health", timeout=10.0)
        if r.status_code != 200:
            raise RuntimeError(f"coserve /health answered {r.status_code}: {r.text[:200]}")

    async def record_autoscaling_stats(self):
        """Queue depth for coserve_ray.autoscaling's policy: requests running and waiting."""
        text = (await self.client.get("/metrics", timeout=5.0)).text
        depth = {"running": 0.0, "waiting": 0.0}
        for line in text.splitlines():
            for name in depth:
                if line.startswith("vllm:num_requests_" + name + "{"):
                    depth[name] = float(line.rsplit(" ", 1)[1])
        return {"coserve_requests_running": depth["running"],
                "coserve_requests_waiting": depth["waiting"]}

    def coserve_pid(self):
        return self.process.pid

    def __del__(self):
        # Ray calls this once the replica's ongoing requests finished or its graceful shutdown
        # timed out: coserve drains what it still holds.
        process = getattr(self, "process", None)
        if process is not None:
            process.stop(self.shutdown_timeout_s + 5)


class CoserveIngress:
    """Every route, proxied: the answer streams through as the replica sends it."""

    def __init__(self, replicas):
        self.replicas = replicas.options(stream=True)

    async def __call__(self, request: Request):
        body = await request.body()
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS]
        req = ProxiedRequest(method=request.method, path=request.url.path, query=request.url.query,
                             headers=headers, body=body,
                             prompt_prefix=prompt_prefix_of(request.url.path, body))
        stream = self.replicas.handle.remote(req)
        try:
            head = await stream.__anext__()
        except Exception as e:  # the replica died before answering
            return JSONResponse(_error_json(f"no replica answered: {type(e).__name__}"), status_code=503)

        sse = any(k.lower() == "content-type" and v.startswith("text/event-stream")
                  for k, v in head["headers"])

        async def rest():
            try:
                async for chunk in stream:
                    yield chunk
            except Exception as e:  # the replica's actor died mid-answer
                if not sse:
                    raise  # a body cut short: the connection is dropped
                yield _sse_error(f"the replica failed mid-request ({type(e).__name__}); retry")

        return StreamingResponse(rest(), status_code=head["status"], headers=dict(head["headers"]))
