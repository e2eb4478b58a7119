"""A read of many targets comes in parts (``batch.split_read``): every target in exactly one part, and, where
every target is read, each part's matcher picks from a real Prometheus and a real VictoriaMetrics exactly the
targets ``batch.part_of`` gives it (names ending in digits, letters, punctuation, another script, nothing)."""

from __future__ import annotations

import json
import math
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from exporter.promsource import backfill
from exporter.promsource.batch import PART_TARGETS, READ_PARTS, ending_matchers, part_of, parts_for, split_read
from exporter.promsource.rebuild import TargetKey
from exporter.promsource.settings import PrometheusSource
from tests.promsource.conftest import backfill as promtool_backfill
from tests.promsource.conftest import prometheus, victoria_metrics, vm_import

NAMES = [f"vllm-{i:05d}" for i in range(40)] + [
    "pod-a", "pod-Z", "pod-q", "x_", "x.", "x-", "10.0.0.1:8000", "vllm-é", "vllm-ø9", "a b", "", "9", "z", "A",
]


def keys(names: list[str]) -> list[TargetKey]:
    return [TargetKey((("instance", name),)) for name in names]


def test_parts_grow_with_the_targets_to_a_fixed_number() -> None:
    assert parts_for(1) == parts_for(2 * PART_TARGETS - 1) == 1
    assert parts_for(2 * PART_TARGETS) == 2
    assert parts_for(READ_PARTS[0] * PART_TARGETS) == parts_for(100_000) == READ_PARTS[0]


@pytest.mark.parametrize("parts", [2, 5, 10])
def test_every_target_is_in_exactly_one_part(parts: int) -> None:
    source = PrometheusSource(url="http://127.0.0.1:9", match='{job="vllm"}')
    everything = keys(NAMES + ["line\nbreak"])
    split, unsure = split_read(source, everything, True, parts)
    assert len(split) == parts and [key.labels[0][1] for key in unsure] == ["line\nbreak"]
    for index, part in enumerate(split):
        assert part.narrowings == [ending_matchers("instance", parts)[index]]
        assert all(part_of(key.labels[0][1], parts) == index for key in part.keys if key not in unsure)
        assert set(unsure) <= set(part.keys)  # read with every part, judged after the last
    mine = [key for part in split for key in part.keys if key not in unsure]
    assert sorted(mine, key=lambda k: k.name) == sorted(set(everything) - set(unsure), key=lambda k: k.name)
    assert len(mine) == len(set(mine))
    # A value's last digit spreads evenly: ten targets ending 0-9 fill every part alike.
    digits = [len([key for key in part.keys if key.labels[0][1].startswith("vllm-0")]) for part in split]
    assert digits == [40 // parts] * parts
    # Named targets (a shard's): each part names its own, in matchers, and none is left to judge last.
    named, none = split_read(source, everything[:40], False, parts)
    assert not none and [key for part in named for key in part.keys] == everything[:40]
    assert all(len(part.narrowings) == 1 and part.narrowings[0].startswith('instance=~"') for part in named)


def _values(url: str, expr: str, at: float) -> list[str]:
    data = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"}).encode()
    with urllib.request.urlopen(urllib.request.Request(f"{url}/api/v1/query", data=data), timeout=30) as response:
        result = json.loads(response.read())["data"]["result"]
    return sorted(series["metric"].get("instance", "") for series in result)


@pytest.mark.prometheus
@pytest.mark.slow
def test_each_part_is_what_both_stores_pick(tmp_path: Path) -> None:
    at = math.floor(time.time()) - 600
    # A series of each name, and one with no instance label at all (the last part's, as an empty value).
    rows = [(at, f'vllm:num_requests_running{{job="vllm"}} {i}\n', {"instance": name} if name else {})
            for i, name in enumerate(NAMES)]
    with (tmp_path / "parts.om").open("w") as out:
        backfill.write(out, rows)
    promtool_backfill(tmp_path / "parts.om", tmp_path / "tsdb")
    (tmp_path / "vm").mkdir()
    with prometheus(tmp_path / "tsdb") as prom, victoria_metrics(tmp_path / "vm") as vm:
        vm_import(vm, backfill.prometheus_text(rows))
        for parts in (2, 5, 10):
            for url in (prom, vm):
                picked = [_values(url, f'vllm:num_requests_running{{job="vllm", {matcher}}}', at)
                          for matcher in ending_matchers("instance", parts)]
                assert sorted(value for part in picked for value in part) == sorted(NAMES), (url, parts)
                for index, part in enumerate(picked):
                    assert part == sorted(name for name in NAMES if part_of(name, parts) == index), (url, parts)
