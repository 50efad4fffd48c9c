"""Python client of arbi-serve: generated gRPC stubs (`arbi_client.arbi.v1`) and a typed wrapper.

Needs only grpcio and protobuf, never torch.
"""
