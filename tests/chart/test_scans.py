"""checkov passes on every rendered ci/ values file and on the Dockerfile, except for the
checks accepted (with reasons) in checkov-accepted.yaml; hadolint passes on the Dockerfile."""

import json
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, VALUES_FILES, run, tool

ACCEPTED = yaml.safe_load((Path(__file__).parent / "checkov-accepted.yaml").read_text())
DOCKERFILE = ROOT / "deploy" / "docker" / "Dockerfile"


def failed_checks(args):
    done = run([tool("checkov"), *args, "--skip-download", "--quiet", "--compact", "-o", "json",
                "--skip-check", ",".join(ACCEPTED)])
    assert done.stdout.strip(), done.stderr
    reports = json.loads(done.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    passed = sum(r.get("summary", {}).get("passed", 0) for r in reports)
    assert passed > 0, "checkov checked nothing"
    return [(c["check_id"], c["check_name"], c["resource"])
            for r in reports for c in r.get("results", {}).get("failed_checks", [])]


def test_every_accepted_check_has_a_reason():
    for check, reason in ACCEPTED.items():
        assert check.startswith("CKV") and len(reason) > 40, check


@pytest.mark.parametrize("values", VALUES_FILES, ids=lambda p: p.stem)
def test_checkov_passes_on_the_rendered_chart(rendered, values):
    path, _ = rendered[("helm4", values.stem)]
    assert failed_checks(["-f", str(path), "--framework", "kubernetes"]) == []


def test_checkov_passes_on_the_dockerfile():
    assert failed_checks(["-f", str(DOCKERFILE), "--framework", "dockerfile"]) == []


def test_hadolint_passes_on_the_dockerfile():
    done = run([tool("hadolint"), str(DOCKERFILE)])
    assert done.returncode == 0, done.stdout + done.stderr
