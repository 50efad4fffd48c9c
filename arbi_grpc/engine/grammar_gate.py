"""Requests whose output constraint is still compiling, held by the engine thread outside the scheduler: such a
request takes no batch slot, no KV block and no place in the running batch until its grammar is ready, so a slow
compile never stalls the requests that run.

`hold` asks the compiler (which compiles on its own threads) and calls `on_ready(request_id)` from whichever
thread finishes the compile; the engine posts that as a task and, on its thread, `take`s the sequence back: with
its matcher set, to be scheduled, or with the error that ends it (INVALID_ARGUMENT, or RESOURCE_EXHAUSTED past
the compile time limit).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol

from arbi_grpc.engine.sequence import Sequence
from arbi_grpc.errors import ArbiError, UnimplementedError


class GrammarSource(Protocol):
    """What the gate needs of `engine.grammar.ConstraintCompiler`."""

    def compile(self, constraint: Any, record_hit: bool = True) -> Future: ...

    def matcher(self, compiled: Any) -> Any: ...

    def close(self) -> None: ...


class GrammarGate:
    """Held sequences by request id; used on the engine thread only (`on_ready` excepted)."""

    def __init__(self, source: GrammarSource | None, on_ready: Callable[[str], None]) -> None:
        self._source = source
        self._on_ready = on_ready
        self._held: dict[str, tuple[Sequence, Future]] = {}

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, sequence: Sequence) -> None:
        """Starts (or joins) the compile of the sequence's constraint; raises ArbiError when it cannot be had."""
        if self._source is None:
            raise UnimplementedError("sampling.output_constraint: this engine was built without a grammar compiler")
        # The input processor asked first (and counted a cache hit); this joins its compile or its result.
        future = self._source.compile(sequence.request.sampling.output_constraint, record_hit=False)
        request_id = sequence.request_id
        self._held[request_id] = (sequence, future)
        future.add_done_callback(lambda _: self._on_ready(request_id))

    def release(self, request_id: str) -> bool:
        """Forgets a held sequence (cancelled or ended); False when none is held by that id."""
        return self._held.pop(request_id, None) is not None

    def close(self) -> None:
        """Stops the compiler's threads (at engine shutdown)."""
        if self._source is not None:
            self._source.close()

    def take(self, request_id: str) -> tuple[Sequence, ArbiError | None] | None:
        """The sequence whose compile finished, its matcher set, or the error that ends it; None when it was
        released meanwhile."""
        held = self._held.pop(request_id, None)
        if held is None:
            return None
        sequence, future = held
        error = future.exception()
        if error is not None:
            return sequence, error if isinstance(error, ArbiError) else ArbiError(f"grammar compile failed: {error!r}")
        sequence.grammar = self._source.matcher(future.result())
        return sequence, None
