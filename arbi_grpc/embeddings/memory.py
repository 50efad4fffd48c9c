"""What a resident embedding model holds, estimated from its directory before it loads (no torch needed): its
float32 weights, counted from config.json's shapes, plus the activation working set of the largest chunk the
batching runner pads (`EMBEDDING_ROWS_PER_CHUNK` rows of the model's context).

The working set of one encoder layer at its peak: the hidden stream and its transients (`HIDDEN_COPIES` x
[rows, seq, hidden]), the GELU MLP's [rows, seq, intermediate] input and output, and the attention's scores and
probabilities ([rows, heads, seq, seq] twice), all float32.
"""

from __future__ import annotations

import json
from pathlib import Path

from arbi_grpc.errors import ModelLoadError
from arbi_grpc.memory.budget import MemoryComponent
from arbi_grpc.memory.residents import embedding_model_component

EMBEDDING_ROWS_PER_CHUNK = 64  # rows the runner pads and runs together (encoder_runner.py)
FLOAT32_BYTES = 4
HIDDEN_COPIES = 6
MLP_COPIES = 2
SCORE_COPIES = 2


def encoder_parameter_count(config: dict) -> int:
    """Parameters of a BertModel encoder without its pooler head (as `models/bert.py` loads it)."""
    h, i = int(config["hidden_size"]), int(config["intermediate_size"])
    embeddings = (int(config["vocab_size"]) + int(config["max_position_embeddings"])
                  + int(config.get("type_vocab_size", 2))) * h + 2 * h
    layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 4 * h
    return embeddings + int(config["num_hidden_layers"]) * layer


def context_tokens(model_dir: Path, config: dict) -> int:
    """The longest input the model embeds: sentence-transformers' max_seq_length when declared, else the
    position table."""
    positions = int(config["max_position_embeddings"])
    declared = model_dir / "sentence_bert_config.json"
    if declared.is_file():
        return min(positions, int(json.loads(declared.read_text()).get("max_seq_length") or positions))
    return positions


def estimated_embedding_component(name: str, model_dir: Path) -> MemoryComponent:
    """The embedding model `name` in `model_dir` as one budget component."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
        rows, seq = EMBEDDING_ROWS_PER_CHUNK, context_tokens(model_dir, config)
        h, i, heads = int(config["hidden_size"]), int(config["intermediate_size"]), int(config["num_attention_heads"])
        weights = encoder_parameter_count(config) * FLOAT32_BYTES
    except (OSError, ValueError, KeyError) as error:
        raise ModelLoadError(f"{model_dir}: cannot read the encoder's config.json: {error}") from None
    activations = FLOAT32_BYTES * rows * seq * (HIDDEN_COPIES * h + MLP_COPIES * i + SCORE_COPIES * heads * seq)
    return embedding_model_component(name, weights, activations,
                                     f"a padded chunk of {rows} rows x {seq} tokens, float32")
