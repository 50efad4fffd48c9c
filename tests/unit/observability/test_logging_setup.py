"""Structured logs: one JSON object per line with the call's extra fields (request ids), arbi-serve's
debug records without other libraries' debug chatter, and the loggers restored afterwards."""

from __future__ import annotations

import io
import json
import logging

from arbi_grpc.observability.logging_setup import configure_logging
from arbi_grpc.observability.settings import ObservabilityConfig


def test_json_records_carry_extras_and_tracebacks() -> None:
    stream = io.StringIO()
    root_level = logging.getLogger().level
    pipeline = configure_logging(ObservabilityConfig(log_format="json", log_level="debug"), stream)
    try:
        logging.getLogger("arbi_grpc.engine").debug("request %s done", "r1", extra={"request_id": "r1",
                                                                                   "output_tokens": 5})
        logging.getLogger("some.library").debug("chatter")
        try:
            raise ValueError("broken")
        except ValueError:
            logging.getLogger("arbi_grpc.engine").exception("step failed")
    finally:
        pipeline.stop()
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [r["message"].splitlines()[0] for r in records] == ["request r1 done", "step failed"]
    assert records[0]["request_id"] == "r1" and records[0]["output_tokens"] == 5
    assert records[0]["level"] == "debug" and records[0]["logger"] == "arbi_grpc.engine"
    assert "ValueError: broken" in records[1]["message"] and records[1]["level"] == "error"
    assert logging.getLogger().level == root_level


def test_text_records_at_info_drop_debug() -> None:
    stream = io.StringIO()
    pipeline = configure_logging(ObservabilityConfig(), stream)
    try:
        logging.getLogger("arbi_grpc.x").debug("hidden")
        logging.getLogger("arbi_grpc.x").info("shown %d", 1)
    finally:
        pipeline.stop()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].endswith("INFO arbi_grpc.x: shown 1")
