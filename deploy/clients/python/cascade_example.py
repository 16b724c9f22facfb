"""Cascade from Python: create a queue, enqueue an event, take it back under a lease, ack it.

The stubs are generated from the repository's `proto/` with grpcio-tools (see README.md here):

    python -m grpc_tools.protoc -I proto --python_out=gen --grpc_python_out=gen cascade/v1/cascade.proto
    PYTHONPATH=gen CASCADE_ADDR=127.0.0.1:7700 python deploy/clients/python/cascade_example.py [QUEUE]
"""

import os
import sys

import grpc
from google.protobuf import duration_pb2

from cascade.v1 import cascade_pb2 as pb
from cascade.v1 import cascade_pb2_grpc as rpc


def main() -> None:
    addr = os.environ.get("CASCADE_ADDR", "127.0.0.1:7700").removeprefix("http://")
    queue = sys.argv[1] if len(sys.argv) > 1 else "python-example"
    # Pings while a call waits (a long poll): a connection to a gateway whose machine is gone
    # fails within 40 s instead of when TCP gives up. The gateway answers pings at any rate.
    keepalive = [
        ("grpc.keepalive_time_ms", 20_000),
        ("grpc.keepalive_timeout_ms", 20_000),
        ("grpc.http2.max_pings_without_data", 0),
    ]
    with grpc.insecure_channel(addr, options=keepalive) as channel:
        admin = rpc.AdminStub(channel)
        ingest = rpc.IngestStub(channel)
        worker = rpc.WorkerStub(channel)

        # Creating a queue again with the same config is fine; another config is refused.
        admin.CreateQueue(pb.CreateQueueRequest(name=queue, config=pb.QueueConfig(max_attempts=5)))

        sent = ingest.Enqueue(pb.EnqueueRequest(
            queue=queue, payload=b"hello from python", headers={"lang": "python"}))
        print(f"enqueued {sent.id} to {sent.queue}")

        # A long poll: answered as soon as an event is ready, or empty after 5 s.
        taken = worker.Take(pb.TakeRequest(
            queue=queue, max_events=1, wait=duration_pb2.Duration(seconds=5),
            worker_id="python-example"))
        for leased in taken.events:
            event = leased.event
            print(f"took {event.id} (attempt {event.attempts}): {event.payload.decode()}")
            # Completions answer one result per item: a refusal is a result, not an exception.
            done = worker.Complete(pb.CompleteRequest(completions=[pb.Completion(
                queue=queue, id=event.id, lease_token=leased.lease_token, ack=pb.Ack())]))
            result = done.results[0]
            if result.code != 0:  # a gRPC status code: 0 is OK
                sys.exit(f"ack of {event.id} refused: {result.message}")
            print(f"acked {event.id}")


if __name__ == "__main__":
    try:
        main()
    except grpc.RpcError as error:
        # The gateway's message names the field or the queue and says what would be valid.
        sys.exit(f"error: {error.code().name}: {error.details()}")
