"""A served model's output-constraint support built on first use: xgrammar (which imports transformers: ~40 MiB
resident and about a second to import) is loaded, and the vocabulary converted, when the first request with an
output constraint is built, so a server whose requests carry none never holds them.

`GrammarsOnDemand` stands for `engine.grammar.ConstraintCompiler` (the input processor and the grammar gate call
it) and `TokenMasksOnDemand` for `engine.grammar.token_masks.TokenMaskBuilder` (the model runner builds a step's
masks through it). Each builds its part once, under a lock, on whichever thread asks first; a constrained
sequence reaches the runner only after its constraint compiled, so the masks' builder finds the compiler built.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from arbi_grpc.engine.grammar.compiler import ConstraintCompiler
    from arbi_grpc.engine.grammar.matcher import SequenceGrammar
    from arbi_grpc.engine.grammar.token_masks import TokenMaskBuilder, TokenMasks
    from arbi_grpc.engine.grammar.vocabulary import GrammarVocabulary
    from arbi_grpc.engine.output_constraint import OutputConstraint
    from arbi_grpc.engine.sampler import SamplingState


class GrammarsOnDemand:
    """The grammar compiler `build()` returns, built on the first call that needs it."""

    def __init__(self, build: Callable[[], ConstraintCompiler]) -> None:
        self._build = build
        self._compiler: ConstraintCompiler | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def built(self) -> bool:
        return self._compiler is not None

    def compiler(self) -> ConstraintCompiler:
        with self._lock:
            if self._compiler is None:
                self._compiler = self._build()
                if self._closed:
                    self._compiler.close()
            return self._compiler

    @property
    def vocabulary(self) -> GrammarVocabulary:
        return self.compiler().vocabulary

    def compile(self, constraint: OutputConstraint, record_hit: bool = True) -> Future:
        return self.compiler().compile(constraint, record_hit)

    def matcher(self, compiled: Any) -> SequenceGrammar:
        return self.compiler().matcher(compiled)

    def close(self) -> None:
        """Stops the compiler's threads when it was built (nothing to stop otherwise)."""
        with self._lock:
            self._closed = True
            compiler = self._compiler
        if compiler is not None:
            compiler.close()


class TokenMasksOnDemand:
    """The token masks of `grammars`' vocabulary, their builder made at the first constrained step."""

    def __init__(self, grammars: GrammarsOnDemand | ConstraintCompiler) -> None:
        self._grammars = grammars
        self._builder: TokenMaskBuilder | None = None

    def build(self, grammars: Sequence[SequenceGrammar | None], states: Sequence[SamplingState],
              device: torch.device) -> TokenMasks | None:
        if self._builder is None:  # the engine thread's only: no lock needed
            from arbi_grpc.engine.grammar.token_masks import TokenMaskBuilder

            vocabulary = self._grammars.vocabulary
            self._builder = TokenMaskBuilder(vocabulary.vocab_size, vocabulary.stop_token_ids)
        return self._builder.build(grammars, states, device)
