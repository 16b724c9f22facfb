"""A second language: stubs generated from `proto/` with grpcio-tools, and the example client
in `deploy/clients/python` run against a real `cascade standalone`."""

import importlib
import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "clients" / "python" / "cascade_example.py"


@pytest.fixture(scope="module")
def stubs(tmp_path_factory):
    """The directory the generated `cascade.v1` modules are in."""
    gen = tmp_path_factory.mktemp("gen")
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I", str(ROOT / "proto"),
         f"--python_out={gen}", f"--grpc_python_out={gen}", "cascade/v1/cascade.proto"],
        check=True, timeout=120)
    return gen


def test_the_example_enqueues_takes_and_acks(gateway, stubs):
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "py-jobs"], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(stubs), "CASCADE_ADDR": gateway})
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    event_id = lines[0].split()[1]
    assert lines == [f"enqueued {event_id} to py-jobs",
                     f"took {event_id} (attempt 1): hello from python",
                     f"acked {event_id}"]


def test_a_refusal_names_the_queue_and_what_to_do(gateway, stubs, monkeypatch):
    monkeypatch.syspath_prepend(str(stubs))
    pb = importlib.import_module("cascade.v1.cascade_pb2")
    rpc = importlib.import_module("cascade.v1.cascade_pb2_grpc")
    with grpc.insecure_channel(gateway.removeprefix("http://")) as channel:
        with pytest.raises(grpc.RpcError) as refused:
            rpc.IngestStub(channel).Enqueue(pb.EnqueueRequest(queue="nowhere", payload=b"x"))
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
    assert refused.value.details().startswith(
        "queue 'nowhere' does not exist; create it with CreateQueue")
