"""sentence-transformers' all-MiniLM-L6-v2 as the test reference for EmbeddingService (tests only)."""

from __future__ import annotations

import functools

import numpy as np

from arbi_grpc.embeddings.resident import MINILM_NAME, resolve_embedding_spec

SENTENCE_TRIPLES = [  # (anchor, similar, dissimilar)
    ("A man is eating food.", "A man is eating a piece of bread.", "The new movie is awesome."),
    ("The cat sits outside.", "A cat is sitting in the garden.", "The stock market fell sharply today."),
    ("How do I bake bread?", "What is a good recipe for baking a loaf?", "Where is the nearest train station?"),
    ("A woman is playing the violin.", "Someone plays a string instrument.", "Two men pushed carts through the woods."),
]


@functools.cache
def reference_model():
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(resolve_embedding_spec(MINILM_NAME)[1]), device="cpu")


def reference_embeddings(texts: list[str]) -> np.ndarray:
    return reference_model().encode(texts, convert_to_numpy=True)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
