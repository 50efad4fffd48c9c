"""Compiles output constraints for one served model, off the engine thread: one xgrammar `GrammarCompiler` over
the model's vocabulary, a small thread pool, the compile cache, and a time limit.

`compile(constraint)` parses the constraint at once on the caller's thread (cheap; a constraint that does not
parse raises InvalidArgumentError there, so a bad request is refused before anything is queued) and returns a
future of the compiled grammar: done already on a cache hit, shared by every request of the same constraint
while it compiles. A compile that outlasts the limit fails its future with ResourceExhaustedError; it keeps
running in the pool and its result is still cached, so a retry can hit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import xgrammar as xgr

from arbi_grpc.engine.grammar.compile_cache import CompileCache
from arbi_grpc.engine.grammar.constraint_grammar import grammar_of, xgrammar_message
from arbi_grpc.engine.grammar.matcher import SequenceGrammar
from arbi_grpc.engine.grammar.vocabulary import GrammarVocabulary
from arbi_grpc.engine.output_constraint import FIELD, OutputConstraint
from arbi_grpc.errors import InvalidArgumentError, ResourceExhaustedError

log = logging.getLogger(__name__)

COMPILE_THREADS = 2  # pool workers; xgrammar itself uses up to as many threads within one compile
TIMEOUT_FLAG = "--grammar-compile-timeout-ms"


class ConstraintCompiler:
    """Compiled grammars of one model's vocabulary. `on_compiled(seconds)` and `on_cache_hit(source)` feed
    metrics ("memory" or "disk"); they are called on pool and caller threads."""

    def __init__(self, vocabulary: GrammarVocabulary, cache: CompileCache, timeout_ms: int,
                 on_compiled: Callable[[float], None] = lambda seconds: None,
                 on_cache_hit: Callable[[str], None] = lambda source: None) -> None:
        if timeout_ms <= 0:
            raise InvalidArgumentError("grammar_compile_timeout_ms", f"must be > 0, got {timeout_ms}")
        self.vocabulary = vocabulary
        self.timeout_ms = timeout_ms
        self._compiler = xgr.GrammarCompiler(vocabulary.info, max_threads=COMPILE_THREADS, cache_enabled=False)
        self._cache = cache
        self._pool = ThreadPoolExecutor(COMPILE_THREADS, thread_name_prefix="arbi-grammar")
        self._lock = threading.Lock()
        self._in_flight: dict[str, Future] = {}
        self._on_compiled = on_compiled
        self._on_cache_hit = on_cache_hit

    def compile(self, constraint: OutputConstraint, record_hit: bool = True) -> Future[xgr.CompiledGrammar]:
        """The future compiled grammar of `constraint`; raises InvalidArgumentError when it does not parse.
        `record_hit` False leaves a cache hit out of the metrics (the engine's second ask for a request)."""
        key = constraint.cache_key
        with self._lock:
            shared = self._in_flight.get(key)
        if shared is not None:
            return shared
        cached = self._cache.get(key)
        if cached is not None:
            if record_hit:
                self._on_cache_hit(cached[1])
            done: Future = Future()
            done.set_result(cached[0])
            return done
        grammar = grammar_of(constraint)
        with self._lock:
            shared = self._in_flight.get(key)
            if shared is not None:
                return shared
            future: Future = Future()
            self._in_flight[key] = future
        timer = threading.Timer(self.timeout_ms / 1000, self._expire, (future, constraint))
        timer.daemon = True
        timer.start()
        self._pool.submit(self._compile, key, constraint, grammar, future, timer)
        return future

    def matcher(self, compiled: xgr.CompiledGrammar) -> SequenceGrammar:
        """A fresh matcher of a compiled grammar, for one sequence."""
        return SequenceGrammar(compiled)

    def close(self) -> None:
        """Stops the pool: queued compiles are dropped, a running one finishes in the background."""
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _compile(self, key: str, constraint: OutputConstraint, grammar: xgr.Grammar, future: Future,
                 timer: threading.Timer) -> None:
        started = time.monotonic()
        try:
            compiled = self._compiler.compile_grammar(grammar)
        except (RuntimeError, ValueError) as error:
            self._forget(key, timer)
            self._resolve(future, error=InvalidArgumentError(
                f"{FIELD}.{constraint.kind.value}", f"cannot be compiled: {xgrammar_message(error)}"))
            return
        seconds = time.monotonic() - started
        self._cache.put(key, compiled)
        self._forget(key, timer)  # after the cache holds it: a later request finds one or the other
        self._on_compiled(seconds)
        self._resolve(future, result=compiled)

    def _forget(self, key: str, timer: threading.Timer) -> None:
        timer.cancel()
        with self._lock:
            self._in_flight.pop(key, None)

    def _expire(self, future: Future, constraint: OutputConstraint) -> None:
        self._resolve(future, error=ResourceExhaustedError(
            f"{FIELD}.{constraint.kind.value}: the grammar did not compile within {self.timeout_ms} ms "
            f"({TIMEOUT_FLAG}); simplify the constraint or retry later"))

    def _resolve(self, future: Future, result: xgr.CompiledGrammar | None = None,
                 error: Exception | None = None) -> None:
        """Sets the future once: the compile and the time limit race for it (the winner marks it running under
        the lock; its callbacks then run outside the lock)."""
        with self._lock:
            if future.running() or future.done():
                return
            future.set_running_or_notify_cancel()
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
