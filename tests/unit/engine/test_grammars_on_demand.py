"""GrammarsOnDemand builds its compiler once, on the first call that needs it, from any number of threads; closing
stops a built compiler and builds none."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

from arbi_grpc.engine.grammars_on_demand import GrammarsOnDemand
from arbi_grpc.engine.output_constraint import ConstraintKind, OutputConstraint

CHOICE = OutputConstraint(ConstraintKind.CHOICE, choices=("yes", "no"))


class FakeCompiler:
    def __init__(self) -> None:
        self.compiled: list[tuple[OutputConstraint, bool]] = []
        self.closed = False
        self.vocabulary = "vocabulary"

    def compile(self, constraint: OutputConstraint, record_hit: bool = True) -> Future:
        self.compiled.append((constraint, record_hit))
        future: Future = Future()
        future.set_result("grammar")
        return future

    def matcher(self, compiled: str) -> str:
        return f"matcher of {compiled}"

    def close(self) -> None:
        self.closed = True


class CountingBuild:
    def __init__(self) -> None:
        self.built: list[FakeCompiler] = []
        self._lock = threading.Lock()

    def __call__(self) -> FakeCompiler:
        with self._lock:
            self.built.append(FakeCompiler())
            return self.built[-1]


def test_nothing_is_built_until_a_compile_and_then_once() -> None:
    build = CountingBuild()
    grammars = GrammarsOnDemand(build)
    assert not grammars.built and not build.built
    with ThreadPoolExecutor(8) as pool:
        futures = list(pool.map(lambda _: grammars.compile(CHOICE, record_hit=False), range(32)))
    assert len(build.built) == 1 and grammars.built
    compiler = build.built[0]
    assert len(compiler.compiled) == 32 and all(hit is False for _, hit in compiler.compiled)
    assert grammars.matcher(futures[0].result()) == "matcher of grammar"
    assert grammars.vocabulary == "vocabulary"
    grammars.close()
    assert compiler.closed


def test_closing_before_any_constraint_builds_nothing() -> None:
    build = CountingBuild()
    grammars = GrammarsOnDemand(build)
    grammars.close()
    assert not build.built
    grammars.compile(CHOICE)  # a compile after the close gets a compiler that is stopped at once
    assert build.built[0].closed
