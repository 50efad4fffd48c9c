"""Container health probe: asks the server's grpc.health.v1 service for one service's status and exits 0 only
when it is SERVING (1 otherwise), for Docker's HEALTHCHECK where no grpc_health_probe binary is installed.

    python grpc_health_probe.py [--address 127.0.0.1:50051] [--service arbi.v1.GenerateService]
"""

from __future__ import annotations

import argparse
import sys

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default="127.0.0.1:50051", help="server address (host:port)")
    parser.add_argument("--service", default="", help="service to check (empty: the server as a whole)")
    parser.add_argument("--timeout-s", type=float, default=3.0, help="deadline of the check")
    args = parser.parse_args(argv)
    with grpc.insecure_channel(args.address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout_s)
        except grpc.RpcError as error:
            print(f"health check failed: {error.code().name}", file=sys.stderr)
            return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    print(status)
    return 0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1


if __name__ == "__main__":
    sys.exit(main())
