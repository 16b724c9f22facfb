"""The chart's hooks and clients do what they say, run for real on this machine against a
`cascade standalone` with the gateway pod's own settings, identities and certificate (the
rendered cascade.json and the Secrets' files, laid out by LocalContainer): the `helm test`
Pod's script enqueues an event, takes it back and acks it, and is refused without its token;
the pipelines Job applies the values' pipelines over mutual TLS (their handlers allowed by the
chart's allow-list), and applying them again changes nothing; a stage worker serves its stage
with its token and client certificate. The identities and tokens are made by the commands
docs/kubernetes.md gives; the certificates name the gateway Service and 127.0.0.1."""

import json
import subprocess
import time
from pathlib import Path

import pytest

from cascade_standalone import wait_ready
from conftest import LocalContainer, cascade_bin, container_of, run

GATEWAYS = {"default-values": ("Deployment", "rel-cascade-ingest"),
            "large-values": ("Deployment", "rel-cascade-ingest"),
            "standalone-values": ("StatefulSet", "rel-cascade-standalone")}
HOOKS = {"Pod": "rel-cascade-test-enqueue", "Job": "rel-cascade-apply-pipelines"}


def objects_of(rendered, stem):
    return rendered[("helm4", stem)][1]


def start(command, env, log_path: Path) -> subprocess.Popen:
    with open(log_path, "w") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)


@pytest.fixture(scope="module")
def gateway(rendered, secrets, tmp_path_factory):
    """gateway(stem): the gRPC URL of a `cascade standalone` serving what the gateway pod of
    the ci/ values file `stem` would (its settings less the pipelines, which the Job applies;
    auth, TLS and allow-list as rendered); started once per module."""
    started, processes = {}, []

    def gateway_of(stem):
        if stem in started:
            return started[stem]
        objects = objects_of(rendered, stem)
        spec, container = container_of(objects, *GATEWAYS[stem])
        root = tmp_path_factory.mktemp(stem)
        pod = LocalContainer(objects, spec, container, secrets, root)
        pod.env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        path = Path(pod.mounts["/etc/cascade"]) / "cascade.json"
        settings = json.loads(path.read_text())
        settings["pipelines"] = []
        path.write_text(json.dumps(settings))
        log_path = root / "standalone.log"
        process = start([cascade_bin(), "standalone", "--config", str(path),
                         "--data-dir", str(root / "data"),
                         "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"],
                        pod.environ(CASCADE__STORE__DURABILITY="none",
                                    CASCADE__STANDALONE__STAGE_WORKERS="false"), log_path)
        processes.append((process, log_path))
        grpc, _ = wait_ready(process, log_path)
        scheme = "https" if settings["grpc"]["tls"].get("cert_file") else "http"
        started[stem] = f"{scheme}://{grpc}"
        return started[stem]

    yield gateway_of
    for process, log_path in processes:
        process.terminate()
        assert process.wait(timeout=60) == 0, log_path.read_text()


def hook(rendered, secrets, stem, kind, root) -> LocalContainer:
    objects = objects_of(rendered, stem)
    return LocalContainer(objects, *container_of(objects, kind, HOOKS[kind]), secrets, root)


def without(env: dict, *names) -> dict:
    return {k: v for k, v in env.items() if k not in names}


@pytest.mark.parametrize("stem, address", [
    ("default-values", "http://rel-cascade-ingest:7700"),
    ("standalone-values", "https://rel-cascade-ingest.cascade.svc:7700"),
    ("large-values", "https://rel-cascade-ingest.cascade.svc:7700"),
])
def test_the_helm_test_pod_enqueues_takes_and_acks_through_the_gateway(
        rendered, secrets, gateway, tmp_path, stem, address):
    pod = hook(rendered, secrets, stem, "Pod", tmp_path)
    assert pod.command[:2] == ["sh", "-ec"]
    assert pod.env["CASCADE_ADDR"] == address
    assert pod.env["CASCADE_TOKEN"] == secrets["cascade-auth"]["operator-token"]
    env = pod.environ(CASCADE_ADDR=gateway(stem))
    done = run(pod.command, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "enqueued, took back and acked one event" in done.stdout
    taken = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{\"")
                            and "lease_token" in line))
    assert taken["payload"].startswith("hello from helm test")
    refused = run(pod.command, env=without(env, "CASCADE_TOKEN"))
    assert refused.returncode != 0, "authentication is on"
    assert "send a token as `authorization: Bearer <token>`" in refused.stderr, refused.stderr


def test_the_pipelines_job_applies_the_values_pipelines_idempotently(
        rendered, secrets, gateway, tmp_path):
    job = hook(rendered, secrets, "large-values", "Job", tmp_path)
    assert "/etc/cascade/cascade.json" not in job.command, "the Job reads the mounted settings"
    assert {"CASCADE_CA", "CASCADE_CERT", "CASCADE_KEY", "CASCADE_TOKEN"} <= set(job.env)
    env = job.environ(CASCADE_ADDR=gateway("large-values"))
    for _ in range(2):
        done = run(job.command, env=env)
        assert done.returncode == 0, done.stderr
        applied = [json.loads(line) for line in done.stdout.splitlines()]
        assert applied == [{"applied": "orders", "stages": 3}, {"applied": "reminders", "stages": 1}]
    listed = run([cascade_bin(), "queue", "list", "--json"], env=env)
    assert listed.returncode == 0, listed.stderr
    names = {json.loads(line)["name"] for line in listed.stdout.splitlines()}
    assert {"orders.check_stock", "orders.Charge", "orders.ship", "reminders.notify"} <= names
    # Mutual TLS: without its client certificate the Job does not get through.
    refused = run([cascade_bin(), "queue", "list"], env=without(env, "CASCADE_CERT", "CASCADE_KEY"))
    assert refused.returncode != 0, "the gateway asks for a client certificate"


def test_a_stage_worker_serves_its_stage_with_its_token_and_client_certificate(
        rendered, secrets, gateway, tmp_path):
    url = gateway("large-values")
    job = hook(rendered, secrets, "large-values", "Job", tmp_path / "job")
    operator = job.environ(CASCADE_ADDR=url)
    assert run(job.command, env=operator).returncode == 0
    producer = {**operator, "CASCADE_TOKEN": secrets["cascade-auth"]["producer-token"]}
    enqueued = run([cascade_bin(), "enqueue", "reminders.notify", "remind me", "--json"],
                   env=producer)
    assert enqueued.returncode == 0, enqueued.stderr
    event = json.loads(enqueued.stdout)["id"]
    objects = objects_of(rendered, "large-values")
    spec, container = container_of(objects, "Deployment", "rel-cascade-stage-reminders-notify")
    worker = LocalContainer(objects, spec, container, secrets, tmp_path / "worker")
    assert worker.env["CASCADE__STAGE_WORKER__TOKEN"] == secrets["cascade-auth"]["stage-worker-token"]
    worker.env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    log_path = tmp_path / "worker.log"
    process = start(worker.command, worker.environ(CASCADE__STAGE_WORKER__GATEWAY=url,
                                                   CASCADE__STAGE_WORKER__HTTP_ADDR="127.0.0.1:0"),
                    log_path)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, log_path.read_text()
            got = run([cascade_bin(), "get", "reminders.notify", event, "--json"], env=producer)
            if got.returncode != 0 and "not found" in got.stderr.lower():
                break  # acked: the last stage's advance takes it out of the pipeline
            assert time.monotonic() < deadline, got.stdout + got.stderr + log_path.read_text()
            time.sleep(0.2)
    finally:
        process.terminate()
        assert process.wait(timeout=60) == 0, log_path.read_text()
