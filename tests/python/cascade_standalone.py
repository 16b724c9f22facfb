"""A pytest plugin (`-p cascade_standalone`, with this directory on PYTHONPATH): the `gateway`
fixture, a real `cascade standalone` on loopback ports of its choosing, for the suites that
drive Cascade from Python (the chart's hooks, the Python client)."""

import os
import re
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("CASCADE_BIN_DIR", ROOT / "target" / "debug"))


def wait_ready(process, log_path):
    """The gRPC and HTTP addresses a starting `cascade standalone` announces in its log,
    once its `/readyz` answers 200; fails if it exits or is not ready within a minute."""
    deadline = time.monotonic() + 60
    announced = None
    while announced is None:
        assert process.poll() is None, log_path.read_text()
        assert time.monotonic() < deadline, log_path.read_text()
        announced = re.search(r"gRPC on (\S+), HTTP on (\S+),", log_path.read_text())
        time.sleep(0.05)
    grpc, http = announced.groups()
    with urllib.request.urlopen(f"http://{http}/readyz", timeout=10) as ready:
        assert ready.status == 200
    return grpc, http


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """A `cascade standalone` of the module's own: its gRPC address, `http://host:port`."""
    binary = BIN_DIR / "cascade"
    if not binary.exists():
        pytest.fail(f"{binary} is missing: build the binaries first (cargo build --bins)")
    data = tmp_path_factory.mktemp("standalone")
    log_path = data / "standalone.log"
    with open(log_path, "w+") as log:
        process = subprocess.Popen(
            [str(binary), "standalone", "--data-dir", str(data / "data"),
             "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"],
            stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "CASCADE__STORE__DURABILITY": "none"})
    grpc, _ = wait_ready(process, log_path)
    yield f"http://{grpc}"
    process.terminate()
    assert process.wait(timeout=60) == 0, log_path.read_text()
