"""Shared fixtures of the chart tests: the tools (installed by scripts/chart-tools.sh), the
chart rendered by each Helm for each ci/ values file, and the Cascade binaries."""

import os
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
