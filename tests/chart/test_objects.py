"""What the rendered objects must say: a pod per shard that takes its shard from its
ordinal, stable claim templates, no replicas on what the resource manager scales, the
manager's exact RBAC, stage Deployment names as the manager computes them, probes, resources
and security on every container, traces on every pod."""

import json

from conftest import RELEASE, by_kind, cascade_bin, pod_specs, run

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


def test_the_resource_managers_role_allows_only_the_scale_of_the_stage_deployments(rendered):
    objects = objects_of(rendered, "large-values")
    role = by_kind(objects, "Role")["rel-cascade-resource-manager"]
    stages = sorted(stage_deployments(objects))
    assert len(stages) == 4
    [rule] = role["rules"]
    assert sorted(rule["resourceNames"]) == stages
    assert rule == {
        "apiGroups": ["apps"],
        "resources": ["deployments/scale"],
        "resourceNames": rule["resourceNames"],
        "verbs": ["get", "patch"],
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
                                           "request_timeout": "10s"}
    nats_conf = by_kind(default, "ConfigMap")["rel-cascade-nats"]["data"]["nats.conf"]
    assert "max_payload: 5242880" in nats_conf  # 4 MiB + 1 MiB
    large = by_kind(objects_of(rendered, "large-values"), "ConfigMap")["rel-cascade-nats"]
    assert "max_payload: 9437184" in large["data"]["nats.conf"]  # 8 MiB + 1 MiB
    small = objects_of(rendered, "small-values")
    assert not [o for o in small if "nats" in o["metadata"]["name"]]
    for owner, spec in pod_specs(small):
        if owner["kind"] in ("Job", "Pod"):
            continue
        env = {e["name"]: e for e in spec["containers"][0]["env"]}
        assert env["CASCADE__BUS__URL"]["valueFrom"]["secretKeyRef"] == {
            "name": "cascade-nats", "key": "url"}, owner["metadata"]["name"]
    assert not [o for o in small if o["kind"] == "Secret"], "secrets only by reference"


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
