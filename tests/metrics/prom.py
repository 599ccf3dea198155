"""Scraping helpers: the text exposition parsed back with prometheus_client's own parser."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families


class Scrape:
    """One scrape of a registry: the raw text and its parsed families (keyed by the parser's family name)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.text = generate_latest(registry).decode()
        self.families: dict[str, Any] = {f.name: f for f in text_string_to_metric_families(self.text)}

    def samples(self) -> list[Any]:
        return [s for f in self.families.values() for s in f.samples]

    def value(self, sample_name: str, **labels: str) -> float:
        """The value of the one sample with this name and exactly these labels (KeyError if absent)."""
        found = [s.value for s in self.samples() if s.name == sample_name and s.labels == labels]
        if len(found) != 1:
            raise KeyError(f"{sample_name}{labels}: {len(found)} samples in\n{self.text}")
        return float(found[0])

    def buckets(self, family: str, name: str) -> dict[str, float]:
        """``le`` label -> cumulative count for one histogram series."""
        return {
            s.labels["le"]: float(s.value)
            for s in self.families[family].samples
            if s.name == f"{family}_bucket" and s.labels.get("name") == name
        }

    def names(self) -> set[str]:
        return {s.name for s in self.samples()}
