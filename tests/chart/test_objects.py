"""What the rendered objects must say: a pod per shard that takes its shard from its
ordinal, stable claim templates, no replicas on what the resource manager scales, the
manager's exact RBAC, stage Deployment names as the manager computes them, probes, resources
and security on every container, traces on every pod; the identities, certificates and
tokens each pod mounts or gets (and no other), NATS credentials that the bundled NATS
requires, and every address bound to the pod's IP."""

import json
import socket
import subprocess
import time
import urllib.request

import pytest

from conftest import (RELEASE, LocalContainer, by_kind, cascade_bin, container_of, pod_specs,
                      run)

DISTRIBUTED = ("default-values", "small-values", "large-values")


def objects_of(rendered, stem, helm="helm4"):
    return rendered[(helm, stem)][1]


def settings_of(objects):
    return json.loads(by_kind(objects, "ConfigMap")["rel-cascade-config"]["data"]["cascade.json"])


def test_one_pod_per_shard_with_its_shard_from_its_ordinal_and_its_own_volume(rendered):
    for stem in DISTRIBUTED:
        objects = objects_of(rendered, stem)
        shards = settings_of(objects)["cluster"]["shards"]
        sets = by_kind(objects, "StatefulSet")
        assert set(sets) == {"rel-cascade-dispatcher", "rel-cascade-activation-timer"}, stem
        for name, sts in sets.items():
            spec = sts["spec"]
            assert spec["replicas"] == shards, f"{stem} {name}"
            assert spec["podManagementPolicy"] == "Parallel"
            assert spec["persistentVolumeClaimRetentionPolicy"] == {
                "whenDeleted": "Retain", "whenScaled": "Retain"}
            assert spec["serviceName"] == name
            container = spec["template"]["spec"]["containers"][0]
            env = {e["name"]: e for e in container["env"]}
            assert env["SHARD"]["valueFrom"]["fieldRef"]["fieldPath"] == \
                "metadata.labels['apps.kubernetes.io/pod-index']"
            shard_var = ("CASCADE__DISPATCHER__SHARDS" if "dispatcher" in name
                         else "CASCADE__TIMER__SHARDS")
            assert env[shard_var]["value"] == "$(SHARD)"
            assert {"name": "data", "mountPath": "/var/lib/cascade"} in container["volumeMounts"]
            startup = container["startupProbe"]
            assert startup["httpGet"]["path"] == "/readyz"
            assert startup["periodSeconds"] * startup["failureThreshold"] >= 600
            grace = spec["template"]["spec"]["terminationGracePeriodSeconds"]
            assert grace > 30, "longer than a shard's drain"
            [claim] = spec["volumeClaimTemplates"]
            assert claim["metadata"]["name"] == "data"
            # Claim templates are immutable: only labels that never change.
            assert set(claim["metadata"]["labels"]) == {
                "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"}
            assert spec["selector"]["matchLabels"] == claim["metadata"]["labels"]
        pdbs = by_kind(objects, "PodDisruptionBudget")
        for name in sets:
            assert pdbs[name]["spec"]["maxUnavailable"] == 1


def stage_deployments(objects):
    return {name: d for name, d in by_kind(objects, "Deployment").items()
            if d["spec"]["template"]["metadata"]["labels"].get("cascade.dev/stage-worker") == "true"}


def test_stage_deployments_are_named_as_the_resource_manager_scales_them(rendered, tmp_path):
    for stem in DISTRIBUTED:
        objects = objects_of(rendered, stem)
        config = by_kind(objects, "ConfigMap")["rel-cascade-config"]["data"]
        path = tmp_path / f"{stem}.json"
        path.write_text(config["cascade.json"])
        done = run([cascade_bin(), "config", "check", str(path)])
        assert done.returncode == 0, done.stderr
        expected = json.loads(done.stdout)["stage_deployments"]
        deployments = stage_deployments(objects)
        assert set(deployments) == set(expected.values()), stem
        for queue, name in expected.items():
            pipeline, stage = queue.split(".")
            worker = json.loads(config[f"{name}.json"])
            assert (worker["pipeline"], worker["stage"]) == (pipeline, stage)
            command = deployments[name]["spec"]["template"]["spec"]["containers"][0]["command"]
            assert command == ["cascade-stage-worker", "--config", f"/etc/cascade/{name}.json"]


def test_the_resource_manager_owns_the_stage_replicas_when_it_runs(rendered):
    for stem in DISTRIBUTED:
        objects = objects_of(rendered, stem)
        managed = settings_of(objects)["resource_manager"]["enabled"]
        for name, deployment in stage_deployments(objects).items():
            assert ("replicas" in deployment["spec"]) != managed, f"{stem} {name}"
        assert ("rel-cascade-resource-manager" in by_kind(objects, "Deployment")) == managed


def test_the_resource_managers_role_allows_only_reading_and_scaling_the_stage_deployments(rendered):
    objects = objects_of(rendered, "large-values")
    role = by_kind(objects, "Role")["rel-cascade-resource-manager"]
    stages = sorted(stage_deployments(objects))
    assert len(stages) == 4
    [read, scale] = role["rules"]
    for rule in (read, scale):
        assert sorted(rule["resourceNames"]) == stages
    assert read == {
        "apiGroups": ["apps"],
        "resources": ["deployments"],
        "resourceNames": read["resourceNames"],
        "verbs": ["get"],
    }
    assert scale == {
        "apiGroups": ["apps"],
        "resources": ["deployments/scale"],
        "resourceNames": scale["resourceNames"],
        "verbs": ["patch"],
    }
    binding = by_kind(objects, "RoleBinding")["rel-cascade-resource-manager"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": "rel-cascade-resource-manager"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "rel-cascade-resource-manager",
                                    "namespace": "cascade"}]
    manager = by_kind(objects, "Deployment")["rel-cascade-resource-manager"]["spec"]
    assert manager["replicas"] == 1
    assert manager["template"]["spec"]["serviceAccountName"] == "rel-cascade-resource-manager"
    assert settings_of(objects)["resource_manager"]["executor"] == "kubernetes"
    assert not [r for r in objects if r["kind"] in ("ClusterRole", "ClusterRoleBinding")]


def test_every_container_has_probes_resources_and_a_locked_down_security_context(rendered):
    for (helm, stem), (_, objects) in rendered.items():
        for owner, spec in pod_specs(objects):
            where = f"{helm} {stem} {owner['kind']} {owner['metadata']['name']}"
            pod_security = spec["securityContext"]
            assert pod_security["runAsNonRoot"] is True, where
            assert isinstance(pod_security["runAsUser"], int) and pod_security["runAsUser"] > 0
            assert pod_security["seccompProfile"] == {"type": "RuntimeDefault"}, where
            one_shot = owner["kind"] in ("Job", "Pod")
            for container in spec["containers"]:
                security = container["securityContext"]
                assert security["runAsNonRoot"] is True, where
                assert isinstance(security["runAsUser"], int), where
                assert security["readOnlyRootFilesystem"] is True, where
                assert security["allowPrivilegeEscalation"] is False, where
                assert security["capabilities"] == {"drop": ["ALL"]}, where
                assert security["seccompProfile"] == {"type": "RuntimeDefault"}, where
                resources = container["resources"]
                assert resources["requests"] and resources["limits"], where
                if one_shot:
                    continue
                assert container["livenessProbe"]["httpGet"]["path"] == "/healthz", where
                # NATS answers /healthz only once it can serve.
                ready = "/healthz" if container["name"] == "nats" else "/readyz"
                assert container["readinessProbe"]["httpGet"]["path"] == ready, where


def test_every_cascade_pod_names_its_service_and_exports_traces_to_one_endpoint(rendered):
    for stem in ("large-values", "standalone-values"):
        objects = objects_of(rendered, stem)
        names = set()
        for owner, spec in pod_specs(objects):
            container = spec["containers"][0]
            if owner["kind"] in ("Job", "Pod") or "nats" in owner["metadata"]["name"]:
                continue
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == \
                "http://jaeger-collector.observability.svc:4317", owner["metadata"]["name"]
            names.add(env["OTEL_SERVICE_NAME"])
        expected = ({"cascade"} if stem == "standalone-values" else
                    {"cascade-ingest", "cascade-dispatcher", "cascade-activation-timer",
                     "cascade-stage-worker", "cascade-resource-manager"})
        assert names == expected, stem


def test_pods_roll_when_their_settings_change(rendered):
    for stem in DISTRIBUTED:
        objects = objects_of(rendered, stem)
        for owner, spec in pod_specs(objects):
            if owner["kind"] == "Pod" or "nats" in owner["metadata"]["name"]:
                continue
            annotations = (owner["metadata"].get("annotations", {}) if owner["kind"] == "Job"
                           else owner["spec"]["template"]["metadata"]["annotations"])
            assert len(annotations["checksum/config"]) == 64, owner["metadata"]["name"]


def test_the_gateway_is_a_grpc_service_with_a_headless_twin_and_a_budget(rendered):
    for stem in ("default-values", "large-values", "standalone-values"):
        objects = objects_of(rendered, stem)
        services = by_kind(objects, "Service")
        plain, headless = services["rel-cascade-ingest"], services["rel-cascade-ingest-headless"]
        assert plain["spec"]["type"] == "ClusterIP"
        assert headless["spec"]["clusterIP"] == "None"
        for service in (plain, headless):
            grpc = next(p for p in service["spec"]["ports"] if p["name"] == "grpc")
            assert grpc["appProtocol"] == "grpc" and grpc["port"] == 7700
        component = "standalone" if stem == "standalone-values" else "ingest"
        assert plain["spec"]["selector"]["app.kubernetes.io/component"] == component
    large = objects_of(rendered, "large-values")
    hpa = by_kind(large, "HorizontalPodAutoscaler")["rel-cascade-ingest"]["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (3, 12)
    assert "replicas" not in by_kind(large, "Deployment")["rel-cascade-ingest"]["spec"]
    assert by_kind(large, "PodDisruptionBudget")["rel-cascade-ingest"]["spec"]["maxUnavailable"] == 1
    default = objects_of(rendered, "default-values")
    assert not by_kind(default, "HorizontalPodAutoscaler")
    assert by_kind(default, "Deployment")["rel-cascade-ingest"]["spec"]["replicas"] == 2


def test_nats_is_bundled_with_room_for_the_largest_payload_or_taken_from_a_secret(rendered):
    default = objects_of(rendered, "default-values")
    assert settings_of(default)["bus"] == {"kind": "nats", "url": "nats://rel-cascade-nats:4222",
                                           "request_timeout": "10s", "tls": {}}
    nats_conf = by_kind(default, "ConfigMap")["rel-cascade-nats"]["data"]["nats.conf"]
    assert "max_payload: 5242880" in nats_conf  # 4 MiB + 1 MiB
    large = by_kind(objects_of(rendered, "large-values"), "ConfigMap")["rel-cascade-nats"]
    assert "max_payload: 9437184" in large["data"]["nats.conf"]  # 8 MiB + 1 MiB
    small = objects_of(rendered, "small-values")
    assert not [o for o in small if "nats" in o["metadata"]["name"]]
    for owner, spec in pod_specs(small):
        env = {e["name"]: e for e in spec["containers"][0]["env"]}
        if not nats_client(owner, spec):
            assert not [v for v in env if v.startswith("CASCADE__BUS__")], owner["metadata"]["name"]
            continue
        assert env["CASCADE__BUS__URL"]["valueFrom"]["secretKeyRef"] == {
            "name": "cascade-nats", "key": "url"}, owner["metadata"]["name"]
    for (helm, stem), (_, objects) in rendered.items():
        assert not [o for o in objects if o["kind"] == "Secret"], f"{stem}: Secrets by reference only"


def test_standalone_is_one_pod_with_its_volume_behind_the_same_services(rendered):
    objects = objects_of(rendered, "standalone-values")
    [sts] = by_kind(objects, "StatefulSet").values()
    assert sts["spec"]["replicas"] == 1
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["cascade", "standalone", "--config", "/etc/cascade/cascade.json"]
    assert sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    settings = settings_of(objects)
    assert settings["bus"]["kind"] == "local"
    assert settings["resource_manager"]["executor"] == "local"
    assert [p["name"] for p in settings["pipelines"]] == ["demo"]
    assert not by_kind(objects, "Deployment") and not by_kind(objects, "Job")


def test_optional_monitoring_and_network_policies(rendered):
    large = objects_of(rendered, "large-values")
    [monitor] = [o for o in large if o["kind"] == "ServiceMonitor"]
    assert monitor["spec"]["endpoints"][0]["port"] == "admin"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    dashboard = by_kind(large, "ConfigMap")["rel-cascade-dashboard"]
    assert json.loads(dashboard["data"]["cascade-dashboard.json"])["panels"]
    policies = by_kind(large, "NetworkPolicy")
    assert set(policies) == {"rel-cascade-gateway", "rel-cascade-services", "rel-cascade-nats"}
    grpc_rule = policies["rel-cascade-gateway"]["spec"]["ingress"][0]
    assert grpc_rule["ports"] == [{"port": "grpc", "protocol": "TCP"}]
    peers = grpc_rule["from"]
    assert {"namespaceSelector": {"matchLabels": {"cascade-client": "true"}}} in peers
    assert any(p.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/instance")
               == RELEASE for p in peers), "the release's own workers reach the gateway"
    default = objects_of(rendered, "default-values")
    assert not [o for o in default if o["kind"] in ("ServiceMonitor", "NetworkPolicy")]


# --- Authentication, TLS, NATS credentials, addresses --------------------------------------

SERVICES = ("cascade-ingest", "cascade-dispatcher", "cascade-activation-timer",
            "cascade-resource-manager", "cascade")


def nats_client(owner, spec) -> bool:
    """Whether the pod runs a service that reads the settings (and, distributed, talks NATS)."""
    command = spec["containers"][0].get("command", [])
    return owner["kind"] not in ("Job", "Pod") and bool(command) and command[0] in SERVICES


def env_of(container) -> dict:
    return {e["name"]: e for e in container.get("env", [])}


def mounts_of(spec, container) -> dict:
    """{mount path: volume} of the container."""
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    return {m["mountPath"]: {**volumes.get(m["name"], {}), "readOnly": m.get("readOnly", False)}
            for m in container.get("volumeMounts", [])}


def secret_ref(entry) -> tuple:
    ref = entry["valueFrom"]["secretKeyRef"]
    return ref["name"], ref["key"]


def test_authentication_mounts_the_identities_and_gives_each_client_its_own_token(rendered):
    for stem in ("default-values", "large-values", "standalone-values"):
        objects = objects_of(rendered, stem)
        auth = settings_of(objects)["auth"]
        assert auth["enabled"] is True
        assert auth["identities_file"] == "/etc/cascade-identities/identities.toml"
        seen = set()
        for owner, spec in pod_specs(objects):
            name = owner["metadata"]["name"]
            if "nats" in name:
                continue
            container = spec["containers"][0]
            env, mounts = env_of(container), mounts_of(spec, container)
            tokens = {v: secret_ref(e) for v, e in env.items()
                      if "valueFrom" in e and "secretKeyRef" in e["valueFrom"]
                      and e["valueFrom"]["secretKeyRef"]["name"] == "cascade-auth"}
            identities = mounts.get("/etc/cascade-identities")
            if nats_client(owner, spec):
                # Every service loads the identities file (the gateway checks calls with it,
                # every admin port its status pages); none holds a token.
                assert identities == {"name": "identities", "readOnly": True, "secret": {
                    "secretName": "cascade-auth", "defaultMode": 0o440,
                    "items": [{"key": "identities.toml", "path": "identities.toml"}]}}, name
                assert not tokens, name
                seen.add("service")
            elif owner["kind"] in ("Job", "Pod"):
                assert identities is None and tokens == {
                    "CASCADE_TOKEN": ("cascade-auth", "operator-token")}, name
                seen.add(owner["kind"])
            else:
                assert identities is None and tokens == {
                    "CASCADE__STAGE_WORKER__TOKEN": ("cascade-auth", "stage-worker-token")}, name
                seen.add("stage worker")
        expected = {"service", "Pod"} | ({"Job", "stage worker"} if stem == "large-values" else set())
        assert seen == expected, stem
    small = objects_of(rendered, "small-values")
    assert settings_of(small)["auth"] == {"enabled": False, "handler_url_prefixes": [],
                                          "reload_interval": "10s"}
    for owner, spec in pod_specs(small):
        container = spec["containers"][0]
        assert "/etc/cascade-identities" not in mounts_of(spec, container)
        assert not [v for v in env_of(container) if "TOKEN" in v], owner["metadata"]["name"]


def test_the_handler_allow_list_holds_the_values_prefixes_and_pipelines_handlers(rendered):
    large = settings_of(objects_of(rendered, "large-values"))
    assert large["auth"]["handler_url_prefixes"] == [
        "http://handlers.shop.svc:8080/", "http://inventory.shop.svc:50051",
        "http://payments.shop.svc:8080/charge", "http://shipping.shop.svc:8080/ship"]
    assert settings_of(objects_of(rendered, "default-values"))["auth"]["handler_url_prefixes"] == []


def test_tls_mounts_the_certificate_in_the_gateway_and_only_the_ca_in_its_clients(rendered):
    for stem, mutual in (("large-values", True), ("standalone-values", False)):
        objects = objects_of(rendered, stem)
        tls = settings_of(objects)["grpc"]["tls"]
        expected = {"cert_file": "/etc/cascade-tls/tls.crt", "key_file": "/etc/cascade-tls/tls.key",
                    "reload_interval": "10s"}
        if mutual:
            expected["client_ca_file"] = "/etc/cascade-tls/ca.crt"
        assert tls == expected, stem
        gateway = ("Deployment", "rel-cascade-ingest") if mutual else \
            ("StatefulSet", "rel-cascade-standalone")
        spec, container = container_of(objects, *gateway)
        volume = mounts_of(spec, container)["/etc/cascade-tls"]
        assert volume["readOnly"] and volume["secret"]["secretName"] == "cascade-gateway-tls"
        assert [i["key"] for i in volume["secret"]["items"]] == (
            ["tls.crt", "tls.key", "ca.crt"] if mutual else ["tls.crt", "tls.key"])
        clients = 0
        for owner, spec in pod_specs(objects):
            container = spec["containers"][0]
            mounts = mounts_of(spec, container)
            name = owner["metadata"]["name"]
            if nats_client(owner, spec) or "nats" in name:
                # Only the gateway holds the certificate's key; no service is a client.
                assert ("/etc/cascade-tls" in mounts) == (owner["metadata"]["name"] ==
                                                          gateway[1]), name
                assert "/etc/cascade-client-tls" not in mounts, name
                continue
            clients += 1
            volume = mounts["/etc/cascade-client-tls"]
            sources = [(src["secret"]["name"], [i["key"] for i in src["secret"]["items"]])
                       for src in volume["projected"]["sources"]]
            assert sources == [("cascade-gateway-tls", ["ca.crt"])] + (
                [("cascade-client-tls", ["tls.crt", "tls.key"])] if mutual else []), name
            env = {k: e.get("value") for k, e in env_of(container).items()}
            if owner["kind"] in ("Job", "Pod"):
                assert env["CASCADE_ADDR"] == "https://rel-cascade-ingest.cascade.svc:7700"
                assert env["CASCADE_CA"] == "/etc/cascade-client-tls/ca.crt"
                assert ("CASCADE_CERT" in env) == ("CASCADE_KEY" in env) == mutual, name
            else:
                command = container["command"]
                config = json.loads(by_kind(objects, "ConfigMap")["rel-cascade-config"]["data"][
                    command[-1].removeprefix("/etc/cascade/")])
                assert config["gateway"] == "https://rel-cascade-ingest.cascade.svc:7700"
                assert config["gateway_tls"] == {
                    "ca_file": "/etc/cascade-client-tls/ca.crt",
                    "cert_file": "/etc/cascade-client-tls/tls.crt",
                    "key_file": "/etc/cascade-client-tls/tls.key"}
        assert clients == (6 if mutual else 1), stem  # 4 stage workers, the Job, the test Pod
    default = objects_of(rendered, "default-values")
    assert set(settings_of(default)["grpc"]["tls"]) == {"reload_interval"}
    for owner, spec in pod_specs(default):
        mounts = mounts_of(spec, spec["containers"][0])
        assert not {"/etc/cascade-tls", "/etc/cascade-client-tls"} & set(mounts)
    [pod] = [s for o, s in pod_specs(default) if o["kind"] == "Pod"]
    assert env_of(pod["containers"][0])["CASCADE_ADDR"]["value"] == "http://rel-cascade-ingest:7700"


def test_nats_tls_of_your_own_nats_is_mounted_in_every_nats_client(rendered):
    small = objects_of(rendered, "small-values")
    assert settings_of(small)["bus"]["tls"] == {"ca_file": "/etc/cascade-nats-tls/ca.crt",
                                                "cert_file": "/etc/cascade-nats-tls/tls.crt",
                                                "key_file": "/etc/cascade-nats-tls/tls.key"}
    for owner, spec in pod_specs(small):
        mounts = mounts_of(spec, spec["containers"][0])
        volume = mounts.get("/etc/cascade-nats-tls")
        if nats_client(owner, spec):
            assert volume["secret"]["secretName"] == "cascade-nats-tls"
            assert [i["key"] for i in volume["secret"]["items"]] == ["ca.crt", "tls.crt", "tls.key"]
        else:
            assert volume is None, owner["metadata"]["name"]


def test_nats_credentials_reach_every_nats_client_and_the_bundled_nats_requires_them(rendered):
    large = objects_of(rendered, "large-values")
    for owner, spec in pod_specs(large):
        env = env_of(spec["containers"][0])
        bus = {v: secret_ref(e) for v, e in env.items() if v.startswith("CASCADE__BUS__")}
        name = owner["metadata"]["name"]
        expected = {"CASCADE__BUS__TOKEN": ("cascade-nats-auth", "token")}
        assert bus == (expected if nats_client(owner, spec) else {}), name
    spec, nats = container_of(large, "Deployment", "rel-cascade-nats")
    assert nats["args"] == ["--config", "/etc/nats/nats.conf", "--auth", "$(NATS_TOKEN)"]
    assert {v: secret_ref(e) for v, e in env_of(nats).items()} == {
        "NATS_TOKEN": ("cascade-nats-auth", "token")}
    _, default_nats = container_of(objects_of(rendered, "default-values"), "Deployment",
                                   "rel-cascade-nats")
    assert default_nats["args"] == ["--config", "/etc/nats/nats.conf"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("token_is_right", [True, False], ids=["its token", "another token"])
def test_the_bundled_nats_takes_a_service_with_its_token_only(rendered, secrets, tmp_path,
                                                              token_is_right):
    """The rendered NATS container (its config and flags, the token from the Secret) run by
    nats-server here, and an activation-timer shard of the rendered release as its client."""
    large = objects_of(rendered, "large-values")
    nats = LocalContainer(large, *container_of(large, "Deployment", "rel-cascade-nats"),
                          secrets, tmp_path / "nats")
    assert "--auth" in nats.args and "$(" not in " ".join(nats.args)
    port = free_port()
    server = subprocess.Popen(["nats-server", *nats.args, "-a", "127.0.0.1", "-p", str(port),
                               "-m", str(free_port())],
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    timer = LocalContainer(large, *container_of(large, "StatefulSet",
                                                "rel-cascade-activation-timer"),
                           secrets, tmp_path / "timer")
    timer.env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    assert timer.env["CASCADE__BUS__TOKEN"] == secrets["cascade-nats-auth"]["token"]
    http = f"127.0.0.1:{free_port()}"
    overrides = {"CASCADE__BUS__URL": f"nats://127.0.0.1:{port}", "CASCADE__HTTP__ADDR": http,
                 "CASCADE__STORE__DURABILITY": "none"}
    if not token_is_right:
        overrides["CASCADE__BUS__TOKEN"] = "not-the-token"
    log_path = tmp_path / "timer.log"
    try:
        time.sleep(0.3)  # nats-server starts listening
        with open(log_path, "w") as log:
            process = subprocess.Popen(timer.command, env=timer.environ(**overrides),
                                       stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while True:
                assert time.monotonic() < deadline, log_path.read_text()
                if process.poll() is not None:
                    assert not token_is_right, log_path.read_text()
                    assert "authorization violation" in log_path.read_text().lower()
                    break
                if token_is_right:
                    try:
                        with urllib.request.urlopen(f"http://{http}/readyz", timeout=2) as ready:
                            if ready.status == 200:
                                break
                    except OSError:
                        pass
                time.sleep(0.1)
        finally:
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=60)
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_every_pod_binds_its_ports_to_its_ip(rendered):
    for stem in ("default-values", "small-values", "large-values", "standalone-values"):
        objects = objects_of(rendered, stem)
        for owner, spec in pod_specs(objects):
            name = owner["metadata"]["name"]
            if owner["kind"] in ("Job", "Pod") or "nats" in name:
                continue
            container = spec["containers"][0]
            names = [e["name"] for e in container["env"]]
            env = env_of(container)
            addresses = {"CASCADE__GRPC__ADDR": 7700, "CASCADE__HTTP__ADDR": 7701} \
                if nats_client(owner, spec) else {"CASCADE__STAGE_WORKER__HTTP_ADDR": 7701}
            if stem == "standalone-values":  # bindToPodIP: false
                assert "POD_IP" not in env
                assert {v: env[v]["value"] for v in addresses} == {
                    v: f"0.0.0.0:{p}" for v, p in addresses.items()}, name
                continue
            assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
            for variable, port in addresses.items():
                assert env[variable]["value"] == f"$(POD_IP):{port}", f"{name} {variable}"
                # The kubelet expands only variables defined before.
                assert names.index("POD_IP") < names.index(variable), name
            # Probes go to the pod's IP: no host, the admin port by name.
            for probe in ("livenessProbe", "readinessProbe"):
                assert set(container[probe]["httpGet"]) == {"path", "port"}, name
                assert container[probe]["httpGet"]["port"] == "admin"
