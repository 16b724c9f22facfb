"""Shared fixtures of the chart tests: the tools (installed by scripts/chart-tools.sh), the
chart rendered by each Helm for each ci/ values file, and the Cascade binaries."""

import hashlib
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "cascade"
VALUES_FILES = sorted((CHART / "ci").glob("*-values.yaml"))
TOOLS = Path(os.environ.get("CHART_TOOLS", ROOT / "target" / "chart-tools"))
BIN_DIR = Path(os.environ.get("CASCADE_BIN_DIR", ROOT / "target" / "debug"))
HELMS = ("helm3", "helm4")
NAMESPACE = "cascade"
RELEASE = "rel"


def tool(name: str) -> str:
    for path in (TOOLS / name, TOOLS / "venv" / "bin" / name, TOOLS / "checkov" / "bin" / name,
                 TOOLS / "node_modules" / ".bin" / name):
        if path.is_file():
            return str(path)
    pytest.fail(f"{name} is missing from {TOOLS}: run scripts/chart-tools.sh")


def cascade_bin(name: str = "cascade") -> str:
    path = BIN_DIR / name
    if not path.exists():
        pytest.fail(f"{path} is missing: build the binaries first (cargo build --bins)")
    return str(path)


def run(args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=300, **kwargs)


def helm_template(helm: str, *args: str) -> subprocess.CompletedProcess:
    return run([tool(helm), "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                "--kube-version", "1.33.0", *args])


@pytest.fixture(scope="session")
def rendered(tmp_path_factory):
    """{(helm, values file stem): (manifest path, objects)} for every Helm and ci/ file."""
    out = tmp_path_factory.mktemp("rendered")
    result = {}
    for helm in HELMS:
        for values in VALUES_FILES:
            done = helm_template(helm, "-f", str(values))
            assert done.returncode == 0, f"{helm} {values.name}: {done.stderr}"
            path = out / f"{helm}-{values.stem}.yaml"
            path.write_text(done.stdout)
            objects = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
            result[(helm, values.stem)] = (path, objects)
    return result


def by_kind(objects: list, kind: str) -> dict:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def pod_specs(objects: list):
    """(object, pod spec) of everything that runs pods."""
    for o in objects:
        if o["kind"] in ("Deployment", "StatefulSet", "Job"):
            yield o, o["spec"]["template"]["spec"]
        elif o["kind"] == "Pod":
            yield o, o["spec"]


# --- Running a rendered container here -------------------------------------------------------
# The hook and settings tests run a rendered container's command on this machine: each volume
# it mounts becomes a local directory (a ConfigMap's or Secret's keys as files, the way the
# kubelet projects them), paths under its mount points are rewritten to those directories,
# and its environment is made as the kubelet makes it (secretKeyRef, fieldRef, $(VAR)).

CERTIFICATE_NAMES = "DNS:rel-cascade-ingest.cascade.svc,DNS:localhost,IP:127.0.0.1"


def openssl(*args, cwd):
    done = run(["openssl", *args], cwd=cwd)
    assert done.returncode == 0, f"openssl {' '.join(args)}: {done.stderr}"


def make_certificates(directory: Path) -> None:
    """A CA, the gateway's certificate (for the gateway Service's name and 127.0.0.1) and a
    client certificate, in PEM files named as in the chart's Secrets' keys."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
            "-subj", "/CN=cascade-test-ca", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=directory)
    for name, usage, names in [("gateway", "serverAuth", CERTIFICATE_NAMES),
                               ("client", "clientAuth", "DNS:cascade-chart-client")]:
        (directory / f"{name}.ext").write_text(
            f"subjectAltName={names}\nextendedKeyUsage={usage}\nbasicConstraints=CA:FALSE\n"
            "keyUsage=critical,digitalSignature\n")
        openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN={name}", cwd=directory)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.crt", "-days", "2",
                "-extfile", f"{name}.ext", cwd=directory)


def documented_credentials(directory: Path) -> dict:
    """identities.toml and the two tokens, made by the commands docs/kubernetes.md gives (its
    shell block that writes identities.toml, up to the `kubectl create secret`)."""
    text = (ROOT / "docs" / "kubernetes.md").read_text()
    [block] = [b.split("\n", 1)[1] for b in text.split("```")[1::2]
               if b.startswith("sh\n") and "cat > identities.toml" in b]
    script = block.split("\nkubectl ", 1)[0]
    script += ('\nprintf %s "$OPERATOR_TOKEN" > operator-token'
               '\nprintf %s "$STAGE_WORKER_TOKEN" > stage-worker-token\n')
    done = run(["bash", "-euo", "pipefail", "-c", script], cwd=directory)
    assert done.returncode == 0, f"the documented commands failed:\n{script}\n{done.stderr}"
    made = {key: (directory / key).read_text()
            for key in ("identities.toml", "operator-token", "stage-worker-token")}
    # One of "your producers" added below the chart's own clients, as the file's comment says.
    made["producer-token"] = "producer-token-of-the-tests"
    made["identities.toml"] += (
        '\n[[identities]]\nname = "producer"\n'
        f'token_sha256 = "{hashlib.sha256(made["producer-token"].encode()).hexdigest()}"\n'
        'grants = [{ role = "producer", queues = ["*"] }]\n')
    return made


@pytest.fixture(scope="session")
def secrets(tmp_path_factory):
    """The Secrets the ci/ values files name, {name: {key: value}}: the identities and tokens
    as docs/kubernetes.md makes them, certificates made here."""
    directory = tmp_path_factory.mktemp("secrets")
    make_certificates(directory)
    pem = {name: (directory / name).read_text() for name in
           ("ca.crt", "gateway.crt", "gateway.key", "client.crt", "client.key")}
    return {
        "cascade-auth": documented_credentials(directory),
        "cascade-gateway-tls": {"tls.crt": pem["gateway.crt"], "tls.key": pem["gateway.key"],
                                "ca.crt": pem["ca.crt"]},
        "cascade-client-tls": {"tls.crt": pem["client.crt"], "tls.key": pem["client.key"],
                               "ca.crt": pem["ca.crt"]},
        "cascade-nats-auth": {"token": "nats-token-of-the-test"},
        "cascade-nats": {"url": "nats://127.0.0.1:4222"},
        "cascade-nats-tls": {"ca.crt": pem["ca.crt"], "tls.crt": pem["client.crt"],
                             "tls.key": pem["client.key"]},
    }


def _projected(secret: dict, items) -> dict:
    if items is None:
        return dict(secret)
    return {item["path"]: secret[item["key"]] for item in items}


class LocalContainer:
    """A rendered container made runnable here: `command` and `env` with paths under its mount
    points rewritten to local directories under `root` that hold what the volumes would."""

    def __init__(self, objects, spec, container, secrets, root: Path, pod_ip="127.0.0.1"):
        configmaps = by_kind(objects, "ConfigMap")
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        self.mounts = {}
        files = {}
        for mount in container.get("volumeMounts", []):
            local = root / mount["name"]
            local.mkdir(parents=True, exist_ok=True)
            volume = volumes.get(mount["name"], {})  # none: a claim template's volume
            if "configMap" in volume:
                files[local] = dict(configmaps[volume["configMap"]["name"]]["data"])
            elif "secret" in volume:
                files[local] = _projected(secrets[volume["secret"]["secretName"]],
                                          volume["secret"].get("items"))
            elif "projected" in volume:
                files[local] = {}
                for source in volume["projected"]["sources"]:
                    files[local].update(_projected(secrets[source["secret"]["name"]],
                                                   source["secret"].get("items")))
            self.mounts[mount["mountPath"]] = str(local)
        for local, contents in files.items():
            for name, text in contents.items():
                (local / name).write_text(self.local(text))
        self.env = {}
        for entry in container.get("env", []):
            if "value" in entry:
                value = self.expand(entry["value"])  # the variables defined before it
            elif "secretKeyRef" in entry["valueFrom"]:
                ref = entry["valueFrom"]["secretKeyRef"]
                value = secrets[ref["name"]][ref["key"]]
            else:
                path = entry["valueFrom"]["fieldRef"]["fieldPath"]
                value = {"status.podIP": pod_ip,
                         "metadata.labels['apps.kubernetes.io/pod-index']": "0"}[path]
            self.env[entry["name"]] = self.local(value)
        # The kubelet puts the container's variables in place of $(NAME) in command and args.
        self.command = [self.expand(self.local(arg)) for arg in container.get("command", [])]
        self.args = [self.expand(self.local(arg)) for arg in container.get("args", [])]

    def expand(self, text: str) -> str:
        return re.sub(r"\$\((\w+)\)", lambda m: self.env.get(m[1], m[0]), text)

    def local(self, text: str) -> str:
        """`text` with every path under a mount point moved to the mount's local directory."""
        if not self.mounts:
            return text
        # One pass, longest mount point first, so that a rewritten path is not rewritten again.
        paths = "|".join(re.escape(p) for p in sorted(self.mounts, key=len, reverse=True))
        return re.sub(f"({paths})(?=[/\"]|$)", lambda m: self.mounts[m[1]], text)

    def environ(self, **overrides) -> dict:
        """The process environment to run it with: this machine's (less CASCADE settings), the
        Cascade binaries first on PATH, the container's variables and `overrides`."""
        base = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE")}
        return {**base, "PATH": f"{BIN_DIR}{os.pathsep}{os.environ['PATH']}", **self.env,
                **overrides}


def container_of(objects, kind: str, name: str):
    """(pod spec, first container) of the object `kind`/`name`."""
    [(spec)] = [s for o, s in pod_specs(objects)
                if o["kind"] == kind and o["metadata"]["name"] == name]
    return spec, spec["containers"][0]
