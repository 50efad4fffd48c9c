"""The resident embedding models' Prometheus gauge: weight bytes per model, read at each scrape."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from arbi_grpc.embeddings.resident import ResidentEmbeddingModels


class EmbeddingModelsCollector(Collector):
    def __init__(self, models: ResidentEmbeddingModels) -> None:
        self._models = models

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily("arbi_embedding_model_weight_bytes",
                                  "Weight bytes of each resident embedding model", labels=["model"])
        for model in self._models.models():
            gauge.add_metric([model.name], model.weight_bytes)
        yield gauge


def register_embedding_metrics(registry: CollectorRegistry, models: ResidentEmbeddingModels) -> None:
    registry.register(EmbeddingModelsCollector(models))
