"""Reflection's v1 protocol (`grpc.reflection.v1.ServerReflection`), spoken with v1's own message types:
it lists the services and returns the file descriptors that define them, as v1alpha does (grpcurl in
test_grpcurl_api.py speaks v1alpha)."""

from __future__ import annotations

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from arbi_grpc.reflection import V1_PACKAGE, V1_SERVICE_NAME

_METHOD = f"/{V1_SERVICE_NAME}/ServerReflectionInfo"


def _v1_messages():
    """v1's request and response classes, from the descriptor the server added to the default pool."""
    pool = descriptor_pool.Default()
    request = pool.FindMessageTypeByName(f"{V1_PACKAGE}.ServerReflectionRequest")
    response = pool.FindMessageTypeByName(f"{V1_PACKAGE}.ServerReflectionResponse")
    return message_factory.GetMessageClass(request), message_factory.GetMessageClass(response)


def test_v1_lists_services_and_describes_them(served_smollm2) -> None:
    request_type, response_type = _v1_messages()
    with grpc.insecure_channel(served_smollm2.target) as channel:
        call = channel.stream_stream(_METHOD, request_serializer=request_type.SerializeToString,
                                     response_deserializer=response_type.FromString)
        listed, described = call(iter([request_type(list_services=""),
                                       request_type(file_containing_symbol="arbi.v1.GenerateService")]),
                                 timeout=30)
    names = {service.name for service in listed.list_services_response.service}
    assert {"arbi.v1.GenerateService", "arbi.v1.AdminService", V1_SERVICE_NAME} <= names
    files = [descriptor_pb2.FileDescriptorProto.FromString(raw)
             for raw in described.file_descriptor_response.file_descriptor_proto]
    generate = next(f for f in files if f.name == "arbi/v1/generate_service.proto")
    assert "ListServedModels" in [method.name for method in generate.service[0].method]


def test_v1_answers_an_unknown_symbol_with_not_found(served_smollm2) -> None:
    request_type, response_type = _v1_messages()
    with grpc.insecure_channel(served_smollm2.target) as channel:
        call = channel.stream_stream(_METHOD, request_serializer=request_type.SerializeToString,
                                     response_deserializer=response_type.FromString)
        (reply,) = call(iter([request_type(file_containing_symbol="no.such.Service")]), timeout=30)
    assert reply.error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]
