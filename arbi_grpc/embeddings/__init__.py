"""Embedding models: an encoder with its checkpoint's pooling, a batching runner, and the registry of the
resident embedding models that EmbeddingService routes to by name."""
