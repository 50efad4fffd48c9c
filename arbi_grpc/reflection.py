"""Server reflection under both protocol versions: `grpc.reflection.v1` (newer grpcurl, Postman, Envoy's
GRPCRoute) and `grpc.reflection.v1alpha` (older tools).

grpcio-reflection implements v1alpha only. The two versions are the same protocol: v1's
`reflection.proto` is v1alpha's under another package, with the same messages and field numbers. So
v1's file descriptor is derived from v1alpha's (added to the default pool, so reflection describes
itself under both names), and v1's method is served by the same servicer with v1alpha's message classes,
which encode v1's messages byte for byte.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection, reflection_pb2

V1ALPHA_SERVICE_NAME = reflection.SERVICE_NAME
V1_PACKAGE = "grpc.reflection.v1"
V1_FILE_NAME = "grpc/reflection/v1/reflection.proto"
V1_SERVICE_NAME = f"{V1_PACKAGE}.ServerReflection"


def _add_v1_descriptor(pool: descriptor_pool.DescriptorPool) -> None:
    """Adds v1's reflection.proto, derived from v1alpha's, to `pool` (once)."""
    try:
        pool.FindFileByName(V1_FILE_NAME)
        return
    except KeyError:
        pass
    v1 = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(v1)
    old_prefix, new_prefix = f".{v1.package}.", f".{V1_PACKAGE}."
    v1.name, v1.package = V1_FILE_NAME, V1_PACKAGE
    v1.options.Clear()
    for field in (field for message in v1.message_type for field in message.field):
        if field.type_name.startswith(old_prefix):
            field.type_name = new_prefix + field.type_name[len(old_prefix):]
    for method in (method for service in v1.service for method in service.method):
        method.input_type = new_prefix + method.input_type[len(old_prefix):]
        method.output_type = new_prefix + method.output_type[len(old_prefix):]
    pool.Add(v1)


def enable_reflection(service_names: Iterable[str], server: grpc.aio.Server) -> None:
    """Serves reflection of `service_names` (and of reflection itself) under v1 and v1alpha on `server`."""
    _add_v1_descriptor(descriptor_pool.Default())
    names = (*service_names, V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME)
    servicer = reflection.aio.ReflectionServicer(names)
    for service in (V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME):
        handler = grpc.stream_stream_rpc_method_handler(
            servicer.ServerReflectionInfo,
            request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
            response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service, {"ServerReflectionInfo": handler}),)
        )
