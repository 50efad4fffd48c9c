"""OutputConstraint: the proto's oneof becomes a typed constraint; empty or malformed inputs are refused."""

from __future__ import annotations

import pytest

from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb
from arbi_grpc.engine.output_constraint import ConstraintKind, OutputConstraint
from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.servicers.generate_conversion import sampling_from_proto


@pytest.mark.parametrize("kwargs, reason", [
    (dict(kind=ConstraintKind.CHOICE), "choice list is empty"),
    (dict(kind=ConstraintKind.CHOICE, choices=("a", "")), "non-empty string"),
    (dict(kind=ConstraintKind.REGEX, text=" "), "must not be empty"),
    (dict(kind=ConstraintKind.JSON_SCHEMA, text="{not json"), "not valid JSON"),
    (dict(kind=ConstraintKind.JSON_SCHEMA, text="[1]"), "must be a JSON object"),
    (dict(kind=ConstraintKind.REGEX, text="a", choices=("a",)), "only allowed with the choice"),
])
def test_bad_constraints_are_refused(kwargs: dict, reason: str) -> None:
    with pytest.raises(InvalidArgumentError, match=reason):
        OutputConstraint(**kwargs)


def test_cache_key_tells_kinds_and_strictness_apart() -> None:
    keys = {OutputConstraint(ConstraintKind.REGEX, "a+").cache_key,
            OutputConstraint(ConstraintKind.EBNF_GRAMMAR, "a+").cache_key,
            OutputConstraint(ConstraintKind.JSON_SCHEMA, "{}").cache_key,
            OutputConstraint(ConstraintKind.JSON_SCHEMA, "{}", strict=True).cache_key}
    assert len(keys) == 4


def test_proto_constraint_is_validated_then_converted() -> None:
    request = pb.GenerateRequest(prompt="x")
    request.sampling.output_constraint.choice.SetInParent()
    with pytest.raises(InvalidArgumentError, match="choice list is empty"):
        sampling_from_proto(request)
    request.sampling.output_constraint.regex = r"\d+"
    assert sampling_from_proto(request).output_constraint == OutputConstraint(ConstraintKind.REGEX, r"\d+")


def test_proto_logit_bias_reaches_sampling_params() -> None:
    request = pb.GenerateRequest(prompt="x", sampling=types_pb.SamplingParameters(logit_bias={5: -3.0, 2: 1.5}))
    assert sampling_from_proto(request).logit_bias == ((2, 1.5), (5, -3.0))
