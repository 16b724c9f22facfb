"""The chart lints and renders with Helm 3 and Helm 4 for every ci/ values file, every
rendered object passes the Kubernetes 1.33 schemas, and bad values fail with a message
that names them."""

import json
import re
import shutil
import tomllib

import pytest
import yaml

from conftest import (CHART, HELMS, ROOT, VALUES_FILES, LocalContainer, by_kind, cascade_bin,
                      helm_template, pod_specs, run, tool)


@pytest.mark.parametrize("helm", HELMS)
@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.stem)
def test_lint_strict(helm, values):
    done = run([tool(helm), "lint", "--strict", str(CHART), "-f", str(values)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


def test_every_object_passes_the_kubernetes_schemas(rendered):
    for (helm, stem), (path, objects) in rendered.items():
        # ServiceMonitor is a CRD: the validator warns about it and checks nothing.
        done = run([tool("kubernetes-validate"), "--strict", "-k", "1.33.0", str(path)])
        assert done.returncode == 0, f"{helm} {stem}:\n{done.stdout}{done.stderr}"
        checked = done.stdout.count("INFO") + done.stdout.count("WARN")
        assert checked >= len(objects), f"{helm} {stem}: only {checked} of {len(objects)} seen"


def test_both_helms_render_the_same_objects(rendered):
    for values in VALUES_FILES:
        three = rendered[("helm3", values.stem)][1]
        four = rendered[("helm4", values.stem)][1]
        assert three == four, values.name


def _fails(*args):
    done = helm_template("helm4", *args)
    assert done.returncode != 0, f"rendered with {args}"
    return done.stderr


@pytest.mark.parametrize("helm", HELMS)
def test_unknown_keys_and_wrong_types_fail_with_the_schemas_message(helm):
    for args, expected in [
        (["--set", "bogus=1"], "bogus"),
        (["--set", "config.store.bogus=1"], "bogus"),
        (["--set", "ingest.replicas=two"], "ingest"),
        (["--set", "config.cluster.shards=0"], "shards"),
        (["--set", "mode=cluster"], "mode"),
        (["--set", "config.store.durability=sometimes"], "durability"),
        (["--set", "auth.handlerUrlPrefixes[0]=ftp://handlers.shop.svc/"], "handlerUrlPrefixes"),
        (["--set", "tls.existingSecret=Not_A_Name"], "existingSecret"),
        (["--set", "nats.external.url=redis://somewhere:6379"], "url"),
        (["--set", "config.grpc.max_requests_in_flight=0"], "max_requests_in_flight"),
    ]:
        done = helm_template(helm, *args)
        assert done.returncode != 0, f"{helm} rendered with {args}"
        assert "schema" in done.stderr and expected in done.stderr, done.stderr


def test_a_shard_count_of_zero_fails_even_without_the_schema():
    stderr = _fails("--skip-schema-validation", "--set", "config.cluster.shards=0")
    assert "config.cluster.shards: must be at least 1, is 0" in stderr


def test_a_stage_name_that_cannot_name_a_deployment_fails_naming_it():
    long_stage = "stage_name_long_enough_to_pass_the_deployment_limit"
    stderr = _fails("-f", str(CHART / "ci" / "small-values.yaml"),
                    "--set", f"pipelines[0].stages[0].name={long_stage}")
    assert long_stage in stderr and "63" in stderr, stderr
    stderr = _fails("-f", str(CHART / "ci" / "small-values.yaml"),
                    "--set", "pipelines[0].stages[0].name=send_")
    assert "send_" in stderr and "begin and end with a letter or digit" in stderr, stderr


def test_a_payload_limit_nats_cannot_carry_fails_naming_it():
    stderr = _fails("--set", "auth.existingSecret=cascade-auth",
                    "--set", "config.ingest.max_payload=70MiB")
    assert "config.ingest.max_payload" in stderr and "64 MiB" in stderr, stderr


@pytest.mark.parametrize("helm", HELMS)
def test_authentication_is_on_by_default_and_fails_without_its_secret_saying_what_to_create(helm):
    done = helm_template(helm)
    assert done.returncode != 0, "the defaults rendered without auth.existingSecret"
    for expected in ("auth.enabled is true (the default) and auth.existingSecret is empty",
                     "the chart generates no credentials",
                     "kubectl -n cascade create secret generic cascade-auth "
                     "--from-file=identities.toml",
                     '--from-literal=operator-token="$OPERATOR_TOKEN"',
                     '--from-literal=stage-worker-token="$STAGE_WORKER_TOKEN"',
                     "set auth.existingSecret=cascade-auth", "or set auth.enabled=false"):
        assert expected in done.stderr, done.stderr
    assert helm_template(helm, "--set", "auth.enabled=false").returncode == 0
    assert helm_template(helm, "--set", "auth.existingSecret=cascade-auth").returncode == 0


def test_security_values_that_cannot_work_fail_saying_what_to_set():
    auth = ("--set", "auth.existingSecret=cascade-auth")
    external = ("--set", "nats.external.url=tls://nats.messaging:4222")
    for args, expected in [
        (("--set", "tls.enabled=true"),
         ["tls.existingSecret is empty", "kubernetes.io/tls Secret with tls.crt, tls.key and "
          "ca.crt", "rel-cascade-ingest.cascade.svc"]),
        (("--set", "tls.clientAuth=true"), ["mutual TLS needs TLS", "tls.enabled=true"]),
        (("--set", "tls.enabled=true", "--set", "tls.existingSecret=gw", "--set",
          "tls.clientAuth=true"), ["tls.clientSecret is empty", "stage workers"]),
        (("--set", "nats.tls.existingSecret=nats-ca"), ["the bundled NATS speaks no TLS"]),
        ((*external, "--set", "nats.auth.existingSecret=n", "--set", "nats.auth.tokenKey=",
          "--set", "nats.auth.userKey="), ["nats.auth.tokenKey, or nats.auth.userKey and"]),
    ]:
        stderr = _fails(*auth, *args)
        for text in expected:
            assert text in stderr, f"{args}: {stderr}"
    assert helm_template("helm4", *auth, *external, "--set",
                         "nats.tls.existingSecret=nats-ca").returncode == 0


def _keys(table, prefix=""):
    keys = set()
    for key, value in table.items():
        path = f"{prefix}{key}"
        # Tables of names (resource attributes, Deployment overrides) and pipelines are values.
        if isinstance(value, dict) and value and key not in ("resource_attributes", "deployments"):
            keys |= _keys(value, path + ".")
        else:
            keys.add(path)
    return keys


def _commented_keys(text):
    """The keys the example config shows commented out (`# cert_file = "…"` under [grpc.tls]):
    optional ones, without a default."""
    keys, section = set(), ""
    for line in text.splitlines():
        if match := re.match(r"^\[([a-z_.]+)\]$", line):
            section = match[1] + "."
        elif match := re.match(r"^# ([a-z_]+) = ", line):
            keys.add(section + match[1])
    return keys


def test_the_rendered_settings_have_the_example_configs_keys(rendered):
    text = (ROOT / "deploy" / "config" / "cascade.toml").read_text()
    example = _keys(tomllib.loads(text))
    optional = _commented_keys(text)
    assert {"auth.identities_file", "grpc.tls.cert_file", "bus.tls.ca_file"} <= optional
    for (helm, stem), (_, objects) in rendered.items():
        config = by_kind(objects, "ConfigMap")["rel-cascade-config"]
        keys = _keys(json.loads(config["data"]["cascade.json"]))
        assert keys <= example | optional, f"{helm} {stem}: {keys - example - optional}"
        # Every key of the example, or (an empty table of it, bus.tls) keys within it.
        missing = {k for k in example
                   if k not in keys and not any(key.startswith(k + ".") for key in keys)}
        assert not missing, f"{helm} {stem}"


def test_the_values_config_is_the_example_config_less_the_keys_the_chart_sets():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    example = tomllib.loads((ROOT / "deploy" / "config" / "cascade.toml").read_text())
    chart_owned = {"bus.kind", "bus.url", "bus.tls", "grpc.addr", "http.addr", "data.dir",
                   "auth.enabled", "auth.handler_url_prefixes",
                   "dispatcher.shards", "timer.shards", "resource_manager.executor",
                   "resource_manager.kubernetes.namespace", "resource_manager.kubernetes.deployment",
                   "resource_manager.kubernetes.deployments", "pipelines"}
    assert _keys(values["config"]) | chart_owned == _keys(example)
    assert not _keys(values["config"]) & chart_owned


def test_the_chart_readme_is_generated_from_the_values(tmp_path):
    generator = tool("readme-generator")
    readme = tmp_path / "README.md"
    shutil.copy(CHART / "README.md", readme)
    done = run([generator, "--values", str(CHART / "values.yaml"), "--readme", str(readme)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert readme.read_text() == (CHART / "README.md").read_text(), (
        "helm/cascade/README.md is not current: run readme-generator --values values.yaml "
        "--readme README.md in helm/cascade")


def test_the_rendered_settings_load_as_the_services_load_them(rendered, tmp_path):
    for (helm, stem), (_, objects) in rendered.items():
        if helm != "helm4":
            continue
        data = by_kind(objects, "ConfigMap")["rel-cascade-config"]["data"]
        for key, text in data.items():
            path = tmp_path / f"{stem}-{key}"
            path.write_text(text)
            args = [cascade_bin(), "config", "check", str(path)]
            if key != "cascade.json":
                args.append("--stage-worker")
            done = run(args)
            assert done.returncode == 0, f"{stem} {key}: {done.stderr}"
            assert json.loads(done.stdout)["valid"] is True


@pytest.mark.parametrize("pod_ip", ["10.1.2.3", "fd00:10:1::17"])
def test_every_pod_loads_its_settings_with_its_environment(rendered, secrets, tmp_path, pod_ip):
    """Each container's settings as it would load them: the rendered file with the pod's
    environment (its IP in the addresses, Secrets' values, mounted files), an IPv4 and an
    IPv6 pod address."""
    checked = set()
    for (helm, stem), (_, objects) in rendered.items():
        if helm != "helm4":
            continue
        for owner, spec in pod_specs(objects):
            container = spec["containers"][0]
            command = container.get("command", [])
            if owner["kind"] in ("Job", "Pod") or "--config" not in command:
                continue
            name = owner["metadata"]["name"]
            pod = LocalContainer(objects, spec, container, secrets, tmp_path / stem / name,
                                 pod_ip=pod_ip)
            config = pod.command[pod.command.index("--config") + 1]
            args = [cascade_bin(), "config", "check", config]
            if command[0] == "cascade-stage-worker":
                args.append("--stage-worker")
                assert pod.env["CASCADE__STAGE_WORKER__HTTP_ADDR"] in (
                    f"{pod_ip}:7701", "0.0.0.0:7701"), name
            else:
                assert pod.env["CASCADE__GRPC__ADDR"] in (f"{pod_ip}:7700", "0.0.0.0:7700"), name
                # The files this service reads at start, as its pod mounts them.
                service = "standalone" if command[0] == "cascade" else command[0][len("cascade-"):]
                args += ["--service", service]
            done = run(args, env=pod.environ())
            assert done.returncode == 0, f"{stem} {name}: {done.stderr}"
            assert json.loads(done.stdout)["valid"] is True
            checked.add(command[0])
    assert checked == {"cascade-ingest", "cascade-dispatcher", "cascade-activation-timer",
                       "cascade-resource-manager", "cascade-stage-worker", "cascade"}


@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.stem)
def test_the_notes_tell_how_to_reach_the_gateway_and_enqueue(values):
    done = run([tool("helm4"), "install", "--dry-run=client", "rel", str(CHART), "-n", "cascade",
                "-f", str(values)])
    assert done.returncode == 0, done.stderr
    notes = done.stdout.split("NOTES:", 1)[1]
    for expected in ("rel-cascade-ingest.cascade.svc:7700", "port-forward svc/rel-cascade-ingest",
                     "http://127.0.0.1:7701/", "cascade enqueue jobs", "helm test rel"):
        assert expected in notes, f"{values.name}: {expected!r} not in\n{notes}"


@pytest.mark.parametrize("helm", HELMS)
def test_a_payload_limit_given_as_a_number_in_a_values_file_sizes_nats(helm, tmp_path):
    # A number in a values file reaches the templates as a float (8.388608e+06 as text).
    values = tmp_path / "values.yaml"
    values.write_text("auth:\n  enabled: false\nconfig:\n  ingest:\n    max_payload: 8388608\n")
    done = helm_template(helm, "-f", str(values))
    assert done.returncode == 0, done.stderr
    objects = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    nats_conf = by_kind(objects, "ConfigMap")["rel-cascade-nats"]["data"]["nats.conf"]
    assert "max_payload: 9437184" in nats_conf  # 8 MiB + 1 MiB


@pytest.mark.parametrize("helm", HELMS)
def test_a_duration_without_its_unit_fails_at_the_schema(helm):
    # The services would refuse "30" at start (seconds? minutes?), every pod crash-looping.
    done = helm_template(helm, "--set", "auth.enabled=false",
                         "--set-string", "config.bus.request_timeout=30")
    assert done.returncode != 0, "rendered with a duration without a unit"
    assert "schema" in done.stderr and "request_timeout" in done.stderr, done.stderr
    for duration in ("0", "30s", "1.5s", "250ms"):
        done = helm_template(helm, "--set", "auth.enabled=false",
                             "--set-string", f"config.bus.request_timeout={duration}")
        assert done.returncode == 0, f"{duration}: {done.stderr}"
