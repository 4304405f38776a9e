"""deploy/kubernetes: the manifests checked against Kubernetes' OpenAPI schemas (the
kubernetes-validate package from PyPI, strict: unknown fields are errors), the LeaderWorkerSet's pod
templates as PodTemplates (its CRD is not in those schemas), the coserve arguments run for real (the
Deployment's, with the demo model on the CPU, answers its probes' /health and publishes KV-cache
events), and the LWS leader's host list computed by its shell command for a group of three."""
import json
import pathlib
import subprocess

import httpx
import kubernetes_validate
import pytest
import yaml

from conftest import Server, coserve_binary

ROOT = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
K8S_VERSION = "1.32.0"


def docs(name):
    return [d for d in yaml.safe_load_all((ROOT / name).read_text()) if d]


def pod_template(template, name):
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name}, "template": template}


def test_deployment_and_service_are_valid_kubernetes_objects():
    objs = docs("coserve.yaml")
    assert [o["kind"] for o in objs] == ["Deployment", "Service"]
    for o in objs:
        kubernetes_validate.validate(o, K8S_VERSION, strict=True)
    pod = objs[0]["spec"]["template"]["spec"]
    c = pod["containers"][0]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["path"] == "/health"
    # The grace period outlasts the drain coserve is told to do.
    timeout = int(c["args"][c["args"].index("--shutdown-timeout") + 1])
    assert pod["terminationGracePeriodSeconds"] > timeout


def test_leaderworkerset_templates_are_valid_pod_templates():
    lws, svc = docs("coserve-tensor-parallel-lws.yaml")
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1" and lws["kind"] == "LeaderWorkerSet"
    spec = lws["spec"]
    assert set(spec) <= {"replicas", "leaderWorkerTemplate", "rolloutStrategy", "startupPolicy", "networkConfig"}
    t = spec["leaderWorkerTemplate"]
    assert set(t) <= {"size", "restartPolicy", "leaderTemplate", "workerTemplate", "subGroupPolicy"}
    assert t["restartPolicy"] in ("RecreateGroupOnPodRestart", "None")
    kubernetes_validate.validate(pod_template(t["leaderTemplate"], "leader"), K8S_VERSION, strict=True)
    kubernetes_validate.validate(pod_template(t["workerTemplate"], "worker"), K8S_VERSION, strict=True)
    kubernetes_validate.validate(svc, K8S_VERSION, strict=True)


def test_lws_leader_command_lists_every_rank_of_its_group(coserve_bin):
    lws = docs("coserve-tensor-parallel-lws.yaml")[0]
    script = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["args"][0]
    assert "exec mpirun" in script
    env = {"PATH": "/usr/bin:/bin", "LWS_LEADER_ADDRESS": "coserve-tp-0.coserve-tp.default", "LWS_GROUP_SIZE": "3"}
    out = subprocess.run(["sh", "-c", script.replace("exec mpirun", "echo mpirun")], env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    hosts = out[out.index("--host") + 1]
    assert hosts == ("coserve-tp-0.coserve-tp.default:1,coserve-tp-0-1.coserve-tp.default:1,"
                     "coserve-tp-0-2.coserve-tp.default:1")
    assert out[out.index("-np") + 1] == "3"
    assert out[out.index("--tensor-parallel-size") + 1] == "3"
    # Every coserve flag the command passes is one `coserve serve` knows.
    known = subprocess.run([coserve_bin, "serve", "--help"], capture_output=True, text=True).stdout
    serve_args = out[out.index("serve") + 1:]
    for flag in [a for a in serve_args if a.startswith("--")]:
        assert flag in known, flag


def test_deployment_arguments_serve_the_probes_and_publish_events():
    """The Deployment's coserve arguments, with the demo model and the CPU in place of the GPU and
    the model volume, and free ports: /health answers as the probes expect, events are published."""
    c = docs("coserve.yaml")[0]["spec"]["template"]["spec"]["containers"][0]
    args = list(c["args"])
    args[0] = "--demo"  # the model folder
    args[args.index("--device") + 1] = "cpu"
    i = args.index("--port")
    del args[i:i + 2]  # the test server picks a free port
    i = args.index("--host")
    del args[i:i + 2]
    cfg = json.loads(args[args.index("--kv-events-config") + 1].replace("$(POD_NAME)", "coserve-0"))
    cfg["endpoint"], cfg["replay_endpoint"] = "tcp://127.0.0.1:*", "tcp://127.0.0.1:*"
    args[args.index("--kv-events-config") + 1] = json.dumps(cfg)
    s = Server(*args[1:])
    try:
        assert httpx.get(s.url + "/health").status_code == 200
        assert any('KV-cache events published on tcp://127.0.0.1:' in line and 'topic "kv@coserve-0"' in line
                   for line in s.log)
        models = httpx.get(s.url + "/v1/models").json()["data"]
        assert models[0]["id"] == "qwen2.5-7b-instruct"
    finally:
        assert s.stop() == 0
