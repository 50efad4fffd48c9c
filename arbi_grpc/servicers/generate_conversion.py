"""Conversion between GenerateService protos and the engine's request and output types.

AIP names (`*_count`) live in the protos, engine names (`num_*`, `*_count` params) in the engine; this is
the only place that knows both.
"""

from __future__ import annotations

from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb
from arbi_grpc.auth.caller import request_tenant
from arbi_grpc.engine.output_constraint import ConstraintKind, OutputConstraint
from arbi_grpc.engine.input_processor import ChatPrompt, PromptInput, TextPrompt, TokenPrompt
from arbi_grpc.engine.request import FinishReason, Priority, RequestOutput, SchedulingParams
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.errors import InvalidArgumentError

_FINISH_REASONS = {
    FinishReason.EOS_TOKEN: types_pb.FINISH_REASON_EOS_TOKEN,
    FinishReason.STOP_TOKEN: types_pb.FINISH_REASON_STOP_TOKEN,
    FinishReason.STOP_STRING: types_pb.FINISH_REASON_STOP_STRING,
    FinishReason.MAX_OUTPUT_TOKENS: types_pb.FINISH_REASON_MAX_OUTPUT_TOKENS,
    FinishReason.CONTEXT_LIMIT: types_pb.FINISH_REASON_CONTEXT_LIMIT,
    FinishReason.CANCELLED: types_pb.FINISH_REASON_CANCELLED,
}


def prompt_from_proto(request: pb.GenerateRequest) -> PromptInput:
    which = request.WhichOneof("input")
    if which == "prompt":
        return TextPrompt(request.prompt)
    if which == "token_ids":
        return TokenPrompt(tuple(request.token_ids.ids))
    if which == "chat":
        return ChatPrompt(tuple({"role": m.role, "content": m.content} for m in request.chat.messages))
    raise InvalidArgumentError("input", "set one of prompt, token_ids or chat")


def sampling_from_proto(request: pb.GenerateRequest) -> SamplingParams:
    sampling, logprobs = request.sampling, request.logprobs
    return SamplingParams(
        temperature=sampling.temperature if sampling.HasField("temperature") else 1.0,
        top_p=sampling.top_p if sampling.HasField("top_p") else 1.0,
        top_k=sampling.top_k,
        min_p=sampling.min_p,
        repetition_penalty=(
            sampling.repetition_penalty if sampling.HasField("repetition_penalty") else 1.0
        ),
        presence_penalty=sampling.presence_penalty,
        frequency_penalty=sampling.frequency_penalty,
        seed=sampling.seed if sampling.HasField("seed") else None,
        logprobs_count=logprobs.top_logprob_count,
        prompt_logprobs=logprobs.include_prompt_logprobs,
        logit_bias=tuple(sampling.logit_bias.items()),
        output_constraint=_constraint_from_proto(sampling),
    )


def _constraint_from_proto(sampling: types_pb.SamplingParameters) -> OutputConstraint | None:
    if not sampling.HasField("output_constraint"):
        return None
    message = sampling.output_constraint
    which = message.WhichOneof("kind")
    if which is None:
        raise InvalidArgumentError("sampling.output_constraint", "set one of json_schema, json_object, regex, "
                                   "ebnf_grammar or choice")
    kind = ConstraintKind(which)
    text = {"json_schema": message.json_schema.schema_json, "regex": message.regex,
            "ebnf_grammar": message.ebnf_grammar}.get(which, "")
    return OutputConstraint(kind=kind, text=text, choices=tuple(message.choice.choices), strict=message.strict)


def stopping_from_proto(request: pb.GenerateRequest, default_max_output_tokens: int) -> StoppingParams:
    stopping = request.stopping
    return StoppingParams(
        max_output_tokens=(
            stopping.max_output_tokens
            if stopping.HasField("max_output_tokens")
            else default_max_output_tokens
        ),
        min_output_tokens=stopping.min_output_tokens,
        stop_strings=tuple(stopping.stop_strings),
        stop_token_ids=tuple(stopping.stop_token_ids),
        ignore_eos=stopping.ignore_eos,
    )


_PRIORITIES = {
    types_pb.PRIORITY_UNSPECIFIED: Priority.INTERACTIVE,
    types_pb.PRIORITY_INTERACTIVE: Priority.INTERACTIVE,
    types_pb.PRIORITY_BATCH: Priority.BATCH,
}


def scheduling_from_proto(request: pb.GenerateRequest) -> SchedulingParams:
    options = request.scheduling
    if options.priority not in _PRIORITIES:
        raise InvalidArgumentError("scheduling.priority", f"unknown priority value {options.priority}")
    return SchedulingParams(
        priority=_PRIORITIES[options.priority],
        tenant=request_tenant(options.tenant_id),
        use_prefix_cache=not options.skip_prefix_cache,
    )


def response_from_output(output: RequestOutput, prompt_token_ids: tuple[int, ...]) -> pb.GenerateResponse:
    response = pb.GenerateResponse(request_id=output.request_id, text=output.text)
    for token in output.tokens:
        response.tokens.add(
            token_id=token.token_id,
            logprob=token.logprob,
            top_logprobs=[
                types_pb.TokenLogprob(token_id=token_id, logprob=logprob)
                for token_id, logprob in token.top_logprobs
            ],
        )
    if output.prompt_logprobs is not None:
        for token_id, logprob in zip(prompt_token_ids, output.prompt_logprobs):
            entry = response.prompt_tokens.add(token_id=token_id)
            if logprob is not None:
                entry.logprob = logprob
    if output.finish_reason is not None:
        response.finish_reason = _FINISH_REASONS[output.finish_reason]
        response.usage.prompt_token_count = output.prompt_token_count
        response.usage.output_token_count = output.output_token_count
        response.usage.cached_prompt_token_count = output.cached_prompt_token_count
    return response
