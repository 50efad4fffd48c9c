"""The `google.api.http` annotations of the public protos, read from the generated descriptors: one
`HttpBinding` per HTTP route (additional bindings included), with its path as a Starlette route path.

Supported path templates: literal segments, variables `{field}`, `{field=*}` and `{field=**}` (a dotted
field path is allowed), and a trailing `:verb`. Variables with other patterns, anonymous wildcards, custom
HTTP methods and `response_body` raise NotImplementedError when the routes are built.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass

from google.api import annotations_pb2, http_pb2
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor

import arbi_client.arbi.v1 as public_protos
from arbi_gateway.upstream import RpcKind

_HTTP_METHODS = ("get", "put", "post", "delete", "patch")
_SEGMENT = re.compile(r"\{[^}]*\}|[^/]+")


@dataclass(frozen=True)
class HttpBinding:
    """One HTTP route of one RPC."""

    http_method: str  # "GET", "POST", ...
    template: str  # the annotation's path template
    path: str  # the Starlette route path
    variables: tuple[tuple[str, str], ...]  # (Starlette path parameter, request field path)
    body: str  # "" (no body), "*" (the whole request) or the request field the body fills
    method: MethodDescriptor

    @property
    def rpc_path(self) -> str:
        return f"/{self.method.containing_service.full_name}/{self.method.name}"

    @property
    def kind(self) -> RpcKind:
        return RpcKind.of(self.method.client_streaming, self.method.server_streaming)


def public_services() -> list[ServiceDescriptor]:
    """Every service of the generated `arbi_client.arbi.v1` modules."""
    services = []
    for module_info in pkgutil.iter_modules(public_protos.__path__):
        if module_info.name.endswith("_pb2"):
            module = importlib.import_module(f"{public_protos.__name__}.{module_info.name}")
            services.extend(module.DESCRIPTOR.services_by_name.values())
    return sorted(services, key=lambda service: service.full_name)


def http_bindings(services: list[ServiceDescriptor]) -> list[HttpBinding]:
    """The HTTP routes the services' RPCs are annotated with."""
    bindings = []
    for service in services:
        for method in service.methods:
            options = method.GetOptions()
            if not options.HasExtension(annotations_pb2.http):
                continue
            rule = options.Extensions[annotations_pb2.http]
            for each in (rule, *rule.additional_bindings):
                bindings.append(_binding(method, each))
    return bindings


def _binding(method: MethodDescriptor, rule: http_pb2.HttpRule) -> HttpBinding:
    pattern = rule.WhichOneof("pattern")
    if pattern not in _HTTP_METHODS:
        raise NotImplementedError(f"{method.full_name}: HTTP rule pattern {pattern!r} (only {_HTTP_METHODS})")
    if rule.response_body:
        raise NotImplementedError(f"{method.full_name}: response_body is not supported")
    template = getattr(rule, pattern)
    path, variables = starlette_path(template)
    return HttpBinding(pattern.upper(), template, path, variables, rule.body, method)


def starlette_path(template: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A path template as a Starlette path, with its variables' (parameter, field path) pairs."""
    if not template.startswith("/"):
        raise NotImplementedError(f"path template {template!r} does not start with '/'")
    colon = template.rfind(":")
    has_verb = colon > max(template.rfind("/"), template.rfind("}"))
    verb = template[colon:] if has_verb else ""
    segments = _SEGMENT.findall(template[:colon] if has_verb else template)
    parts, variables = [], []
    for segment in segments:
        if not segment.startswith("{"):
            if "*" in segment or "{" in segment:
                raise NotImplementedError(f"path template {template!r}: segment {segment!r}")
            parts.append(segment)
            continue
        field, _, pattern = segment[1:-1].partition("=")
        parameter = field.replace(".", "__")
        if pattern in ("", "*"):
            parts.append(f"{{{parameter}}}")
        elif pattern == "**":
            parts.append(f"{{{parameter}:path}}")
        else:
            raise NotImplementedError(f"path template {template!r}: variable pattern {pattern!r}")
        variables.append((parameter, field))
    return "/" + "/".join(parts) + verb, tuple(variables)
