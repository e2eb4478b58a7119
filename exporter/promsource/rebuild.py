"""Stored samples -> the exposition text of each scrape -> the same :class:`Snapshot` a scrape gives.

Range selectors return the raw samples with the scrape's own timestamp, and every sample of one
scrape carries that timestamp, so grouping by timestamp gives back each scrape exactly. Each is
rendered as exposition text and handed to the pipeline's parser: aliases of older vLLM names,
histogram assembly and the honesty rules (absent is absent, never zero) are the parser's, not
repeated here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from exporter.catalog import metrics as vllm
from exporter.catalog.metrics import SAMPLE_INDEX
from exporter.promsource.settings import matchers

# Every sample name the parser reads, in every naming generation it knows (current and older).
WIRE_NAMES: tuple[str, ...] = tuple(sorted(SAMPLE_INDEX))
# Gauges every vLLM generation exports once per engine: cheap to list, enough to find the targets.
DISCOVERY_NAMES: tuple[str, ...] = (vllm.NUM_REQUESTS_RUNNING, vllm.NUM_REQUESTS_WAITING)

_TARGET_NAME = re.compile(r"[^A-Za-z0-9_.:-]")


def quote_label_value(value: str) -> str:
    if "\\" not in value and '"' not in value and "\n" not in value:
        return value
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def selector(match: str, names: Sequence[str], labels: Mapping[str, str] | None = None) -> str:
    """``{__name__=~"a|b", <match>, label="value"}``: the series of ``names`` for one target (or all)."""
    parts = ['__name__=~"' + "|".join(re.escape(n) for n in names) + '"']
    parts += matchers(match)
    parts += [f'{key}="{quote_label_value(value)}"' for key, value in (labels or {}).items()]
    return "{" + ", ".join(parts) + "}"


@dataclass(frozen=True, slots=True)
class TargetKey:
    """One vLLM server: the values of the target labels (absent labels are empty)."""

    labels: tuple[tuple[str, str], ...]
    # A target name as the sidecar's are spelled (1-63 of letters, digits, _ . : -), and the key's hash: worked
    # out once, as a cycle looks each of thousands of targets up by both a dozen times.
    name: str = field(init=False, compare=False, repr=False)
    _hash: int = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        joined = "/".join(value for _, value in self.labels if value) or "unlabelled"
        object.__setattr__(self, "name", _TARGET_NAME.sub("-", joined)[:63])
        object.__setattr__(self, "_hash", hash(self.labels))

    def __hash__(self) -> int:
        return self._hash

    @classmethod
    def of(cls, series: Mapping[str, str], target_labels: Sequence[str]) -> TargetKey:
        return cls(tuple((label, series.get(label, "")) for label in target_labels))


def targets(series: Iterable[Mapping[str, str]], target_labels: Sequence[str]) -> list[TargetKey]:
    """Distinct targets among series label sets, sorted by name."""
    return sorted({TargetKey.of(s, target_labels) for s in series}, key=lambda key: (key.name, key.labels))


# vLLM's own labels that may hold one value on every series and still carry meaning.
KEEP_LABELS = frozenset({"model_name", "engine"})


def constant_labels(matrix: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    """Labels with one value on every series of a target (instance, job, pod, namespace ...).

    They say which target, not what happened: dropping them makes every target's label blocks
    the same text, which the parser's block cache then recognises across targets.
    """
    common: dict[str, str] | None = None
    for series in matrix:
        metric = series.get("metric", {})
        if common is None:
            common = {k: v for k, v in metric.items() if k != "__name__" and k not in KEEP_LABELS}
        else:
            common = {k: v for k, v in common.items() if metric.get(k) == v}
        if not common:
            break
    return frozenset(common or ())


def scrapes(matrix: Sequence[Mapping[str, Any]], after: float | None = None) -> list[tuple[float, str]]:
    """A range-vector result of one target -> (timestamp, exposition text) per scrape, oldest first.

    Samples at or before ``after`` (already fed) are left out; NaN stays NaN (the parser drops
    it and counts it); ``*_created`` twins and unknown names never come, the selector leaves them
    out. Labels constant over the whole result (the target's identity) are left out.
    """
    drop = constant_labels(matrix) if len(matrix) > 1 else frozenset()
    lines: dict[float, list[str]] = {}
    for series in matrix:
        metric = series.get("metric", {})
        name = metric.get("__name__")
        if name is None:
            continue
        block = ",".join(f'{key}="{quote_label_value(value)}"' for key, value in sorted(metric.items())
                         if key != "__name__" and key not in drop)
        head = f"{name}{{{block}}} " if block else f"{name} "
        for stamp, value in series.get("values", ()):
            at = float(stamp)
            if after is not None and at <= after:
                continue
            lines.setdefault(at, []).append(head + str(value))
    return [(at, "\n".join(lines[at]) + "\n") for at in sorted(lines)]
