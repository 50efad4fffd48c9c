"""Running a model over calibration windows for TKV: the engine's own decoder (`load_model`) with a wrapper
around its attention backend that records each layer's post-RoPE keys and values, or rewrites the new K/V
before the backend stores them (fake quantization, to score a bit allocation by its loss).

Every window is scored alone as one sequence starting at position 0, so position p of a window is position p
of a sequence: the first `sink_tokens` positions are what the cache keeps in fp16.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from arbi_grpc.attention.backend import AttentionBackend
from arbi_grpc.attention.metadata import AttentionMetadata, token_positions
from arbi_grpc.attention.paged_kv_cache import PagedKVCache
from arbi_grpc.attention.torch_paged import TorchPagedAttention
from arbi_grpc.errors import InvalidArgumentError
from arbi_grpc.models.config import ModelConfig
from arbi_grpc.models.decoder import CausalLM
from arbi_grpc.models.loader import load_model

BLOCK_SIZE = 16
# (layer, positions [T], keys [T, Hkv, D], values [T, Hkv, D]) -> (keys, values) as attention should see them
KvRewrite = Callable[[int, Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]


@dataclass
class LayerRecord:
    """The new keys and values one layer saw, step after step ([T, Hkv, D] each, fp32 on the CPU)."""

    keys: list[Tensor] = field(default_factory=list)
    values: list[Tensor] = field(default_factory=list)


@dataclass
class ObservingAttention:
    """An AttentionBackend around `inner` that records or rewrites the new K/V of every layer, per step."""

    inner: AttentionBackend
    records: dict[int, LayerRecord] | None = None
    rewrite: KvRewrite | None = None

    def forward(
        self,
        layer_index: int,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        metadata: AttentionMetadata,
        kv_cache: PagedKVCache,
    ) -> Tensor:
        if self.rewrite is not None:
            positions = token_positions(metadata.query_lens_host, metadata.seq_lens_host, key.device)
            key, value = self.rewrite(layer_index, positions, key, value)
            key, value = key.to(query.dtype), value.to(query.dtype)
        output = self.inner.forward(layer_index, query, key, value, metadata, kv_cache)
        if self.records is None:
            return output
        record = self.records.setdefault(layer_index, LayerRecord())
        record.keys.append(key.float().cpu())
        record.values.append(value.float().cpu())
        return output


@dataclass(frozen=True)
class LayerActivations:
    """One layer's post-RoPE keys and values over all windows, window after window: [N*W, Hkv, D] each."""

    keys: Tensor
    values: Tensor


@dataclass
class CalibrationRunner:
    """The model as the engine loads it, with an ObservingAttention backend, scoring fixed-length windows."""

    model: CausalLM
    config: ModelConfig
    probe: ObservingAttention
    device: torch.device

    @classmethod
    def load(cls, model_dir: Path, device: str = "cpu") -> CalibrationRunner:
        """fp32 weights (calibration measures the codec, not a low-precision forward)."""
        probe = ObservingAttention(TorchPagedAttention.for_device(device))
        model, config = load_model(model_dir, dtype=torch.float32, device=device, attention_backend=probe)
        return cls(model, config, probe, torch.device(device))

    def _window_logits(self, window: Tensor) -> Tensor:
        """Next-token logits [W-1, V] of one window [W] scored alone (a fresh cache per window)."""
        length = window.shape[0]
        num_blocks = -(-length // BLOCK_SIZE)
        kv_cache = PagedKVCache.for_model(
            self.config, num_blocks=num_blocks, block_size=BLOCK_SIZE, dtype=torch.float32, device=self.device
        )
        metadata = AttentionMetadata.build(
            query_lens=[length], seq_lens=[length], block_tables=[list(range(num_blocks))],
            block_size=BLOCK_SIZE, device=self.device,
        )
        positions = token_positions([length], [length], self.device)
        hidden = self.model(window.to(self.device), positions, metadata, kv_cache)
        return self.model.compute_logits(hidden[:-1])

    def _per_window(self, windows: Tensor, rewrite: KvRewrite | None, score: Callable[[int, Tensor], Tensor]) -> Tensor:
        """score(window index, next-token logits [W-1, V]) stacked over windows, K/V through `rewrite`."""
        _check_windows(windows)
        self.probe.rewrite, self.probe.records = rewrite, None
        try:
            with torch.inference_mode():
                return torch.stack([score(i, self._window_logits(w)) for i, w in enumerate(windows)])
        finally:
            self.probe.rewrite = None

    def window_losses(self, windows: Tensor, rewrite: KvRewrite | None = None) -> Tensor:
        """Next-token losses [N, W-1] of windows [N, W], with each layer's new K/V through `rewrite`."""

        def losses(i: int, logits: Tensor) -> Tensor:
            return torch.nn.functional.cross_entropy(logits, windows[i, 1:].to(self.device), reduction="none")

        return self._per_window(windows, rewrite, losses).cpu()

    def mean_loss(self, windows: Tensor, rewrite: KvRewrite | None = None) -> float:
        return self.window_losses(windows, rewrite).double().mean().item()

    def perplexity(self, windows: Tensor, rewrite: KvRewrite | None = None) -> float:
        return math.exp(self.mean_loss(windows, rewrite))

    def window_log_probs(self, windows: Tensor, rewrite: KvRewrite | None = None) -> Tensor:
        """Next-token log-probabilities [N, W-1, V] of windows [N, W] (on the runner's device)."""
        return self._per_window(windows, rewrite, lambda i, logits: logits.float().log_softmax(dim=-1))

    def mean_divergence(self, windows: Tensor, reference_log_probs: Tensor, rewrite: KvRewrite | None) -> float:
        """Mean KL(reference || K/V through `rewrite`) over the next-token distributions of windows [N, W];
        reference_log_probs: window_log_probs of the same windows, usually with exact K/V."""

        def divergence(i: int, logits: Tensor) -> Tensor:
            log_probs = logits.float().log_softmax(dim=-1)
            return torch.nn.functional.kl_div(log_probs, reference_log_probs[i], log_target=True, reduction="sum")

        total = self._per_window(windows, rewrite, divergence).double().sum().item()
        return total / (windows.shape[0] * (windows.shape[1] - 1))

    def collect(self, windows: Tensor) -> list[LayerActivations]:
        """Per-layer keys and values over windows [N, W], with exact K/V."""
        _check_windows(windows)
        records: dict[int, LayerRecord] = {}
        self.probe.rewrite, self.probe.records = None, records
        try:
            with torch.inference_mode():
                for window in windows:
                    self._window_logits(window)
        finally:
            self.probe.records = None
        return [LayerActivations(torch.cat(records[i].keys), torch.cat(records[i].values)) for i in sorted(records)]


def without_sink(samples: Tensor, window: int, sink_tokens: int) -> Tensor:
    """Samples [N*window, ...] collected window after window, without each window's first sink_tokens rows."""
    per_window = samples.view(-1, window, *samples.shape[1:])
    return per_window[:, sink_tokens:].reshape(-1, *samples.shape[1:])


def _check_windows(windows: Tensor) -> None:
    if windows.dim() != 2 or windows.shape[0] == 0 or windows.shape[1] < 2:
        raise InvalidArgumentError(
            "calibration_windows", f"need token ids [windows, length >= 2], got {list(windows.shape)}"
        )
