"""The chart's hooks do what they say, run for real against `cascade standalone` on
loopback: the `helm test` Pod's script enqueues an event, takes it back and acks it; the
pipelines Job applies the values' pipelines, and applying them again changes nothing. The
`gateway` fixture (a real `cascade standalone`) comes from `tests/python/cascade_standalone.py`,
loaded as a plugin by the test command."""

import json
import os

import pytest

from conftest import BIN_DIR, by_kind, cascade_bin, pod_specs, run


def hook_container(objects, kind):
    [(owner, spec)] = [(o, s) for o, s in pod_specs(objects) if o["kind"] == kind]
    return spec["containers"][0]


def hook_env(container, gateway):
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["CASCADE_ADDR"] == "http://rel-cascade-ingest:7700"
    return {**os.environ, "CASCADE_ADDR": gateway,
            "PATH": f"{BIN_DIR}{os.pathsep}{os.environ['PATH']}"}


@pytest.mark.parametrize("stem", ["default-values", "standalone-values"])
def test_the_helm_test_pod_enqueues_takes_and_acks_through_the_gateway(rendered, gateway, stem):
    container = hook_container(rendered[("helm4", stem)][1], "Pod")
    assert container["command"][:2] == ["sh", "-ec"]
    done = run(container["command"], env=hook_env(container, gateway))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "enqueued, took back and acked one event" in done.stdout
    taken = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{\"")
                            and "lease_token" in line))
    assert taken["payload"].startswith("hello from helm test")


def test_the_pipelines_job_applies_the_values_pipelines_idempotently(rendered, gateway, tmp_path):
    objects = rendered[("helm4", "large-values")][1]
    container = hook_container(objects, "Job")
    settings = tmp_path / "cascade.json"
    settings.write_text(by_kind(objects, "ConfigMap")["rel-cascade-config"]["data"]["cascade.json"])
    command = [str(settings) if arg == "/etc/cascade/cascade.json" else arg
               for arg in container["command"]]
    assert command != container["command"], "the Job reads the mounted settings"
    for _ in range(2):
        done = run(command, env=hook_env(container, gateway))
        assert done.returncode == 0, done.stderr
        applied = [json.loads(line) for line in done.stdout.splitlines()]
        assert applied == [{"applied": "orders", "stages": 3}, {"applied": "reminders", "stages": 1}]
    listed = run([cascade_bin(), "queue", "list", "--addr", gateway, "--json"])
    assert listed.returncode == 0, listed.stderr
    names = {json.loads(line)["name"] for line in listed.stdout.splitlines()}
    assert {"orders.check_stock", "orders.Charge", "orders.ship", "reminders.notify"} <= names
