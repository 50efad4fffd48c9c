"""Process-wide log output: text lines or one JSON object per line, written by a background thread.

Callers (the engine thread among them) only put records on a queue; a listener thread formats and writes
them, so a slow or blocked stderr never stalls serving. JSON records carry the standard fields plus every
`extra=` field of the call, e.g. `request_id`, `config` and `memory_budget`.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import queue
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

from arbi_grpc.observability.settings import ObservabilityConfig

_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_OWN_LOGGER = "arbi_grpc"
# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD_ATTRIBUTES = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message (with any traceback), extras."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRIBUTES and not key.startswith("_"):
                document[key] = value
        return json.dumps(document, default=str, ensure_ascii=False)


class LogPipeline:
    """The installed queue handler and its writer thread; `stop()` flushes what is queued and restores the
    loggers as they were."""

    def __init__(self, listener: logging.handlers.QueueListener, handler: logging.Handler,
                 previous_levels: dict[str, int]) -> None:
        self._listener = listener
        self._handler = handler
        self._previous_levels = previous_levels

    def stop(self) -> None:
        self._listener.stop()
        logging.getLogger().removeHandler(self._handler)
        for name, level in self._previous_levels.items():
            logging.getLogger(name or None).setLevel(level)


def configure_logging(settings: ObservabilityConfig, stream: TextIO | None = None) -> LogPipeline:
    """Routes the root logger through a queue to `stream` (stderr) in the configured format.

    The level applies to arbi-serve's own loggers; other libraries log at info and above, so `debug` adds
    arbi-serve's per-request records without their chatter.
    """
    output = logging.StreamHandler(stream or sys.stderr)
    output.setFormatter(JsonFormatter() if settings.log_format == "json" else logging.Formatter(_TEXT_FORMAT))
    records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
    handler = logging.handlers.QueueHandler(records)
    root, own = logging.getLogger(), logging.getLogger(_OWN_LOGGER)
    previous_levels = {"": root.level, _OWN_LOGGER: own.level}
    level = logging.getLevelName(settings.log_level.upper())
    root.addHandler(handler)
    root.setLevel(max(level, logging.INFO))
    own.setLevel(level)
    listener = logging.handlers.QueueListener(records, output, respect_handler_level=True)
    listener.start()
    return LogPipeline(listener, handler, previous_levels)
