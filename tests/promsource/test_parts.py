"""A read of many targets comes in parts (``batch.split_read``): every target in exactly one part, and, where
every target is read, each part's matcher picks from a real Prometheus and a real VictoriaMetrics exactly the
targets ``batch.part_of`` gives it (names ending in digits, letters, punctuation, another script, nothing)."""

from __future__ import annotations

import itertools
import json
import math
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from exporter.promsource import backfill
from exporter.promsource.batch import (
    PART_TARGETS,
    READ_PARTS,
    ending_matchers,
    ending_skip,
    part_of,
    parts_for,
    split_read,
)
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
    skip = ending_skip([key.labels[0][1] for key in everything], parts)
    assert len(split) == parts and [key.labels[0][1] for key in unsure] == ["line\nbreak"]
    for index, part in enumerate(split):
        assert part.narrowings == [ending_matchers("instance", parts, skip)[index]]
        assert all(part_of(key.labels[0][1], parts, skip) == index for key in part.keys if key not in unsure)
        assert set(unsure) <= set(part.keys)  # read with every part, judged after the last
    mine = [key for part in split for key in part.keys if key not in unsure]
    assert sorted(mine, key=lambda k: k.name) == sorted(set(everything) - set(unsure), key=lambda k: k.name)
    assert len(mine) == len(set(mine))
    # The character chosen spreads the targets at least as evenly as the last one does.
    last = [len([name for name in NAMES if part_of(name, parts) == index]) for index in range(parts)]
    assert max(len(part.keys) for part in split) <= max(last) + len(unsure)
    # Named targets (a shard's): each part names its own, in matchers, and none is left to judge last.
    named, none = split_read(source, everything[:40], False, parts)
    assert not none and [key for part in named for key in part.keys] == everything[:40]
    assert all(len(part.narrowings) == 1 and part.narrowings[0].startswith('instance=~"') for part in named)


# Instances as Prometheus names them by default: every name ends in the port's 0, so the last character would put
# them all in one part; the host's last digit, five characters in, spreads them.
PORTS = [f"10.0.{i // 10}.{i % 10 + 10}:8000" for i in range(40)]


@pytest.mark.parametrize("parts", [2, 5, 10])
def test_names_that_share_their_ending_are_parted_by_a_character_further_in(parts: int) -> None:
    source = PrometheusSource(url="http://127.0.0.1:9", match='{job="vllm"}')
    assert ending_skip(PORTS, parts) == 5 and ending_skip(NAMES[:40], parts) == 0  # vllm-00000 ... vllm-00039
    split, unsure = split_read(source, keys(PORTS), True, parts)
    assert not unsure and [len(part.keys) for part in split] == [40 // parts] * parts
    assert [part.narrowings for part in split] == [[matcher] for matcher in ending_matchers("instance", parts, 5)]
    assert all(part_of(key.labels[0][1], parts, 5) == index for index, part in enumerate(split) for key in part.keys)
    assert ending_matchers("instance", 2, 5)[0] == 'instance=~".*[02468acegikmoqsuwyACEGIKMOQSUWY].{5}"'


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
            for i, name in enumerate(NAMES + PORTS)]
    with (tmp_path / "parts.om").open("w") as out:
        backfill.write(out, rows)
    promtool_backfill(tmp_path / "parts.om", tmp_path / "tsdb")
    (tmp_path / "vm").mkdir()
    with prometheus(tmp_path / "tsdb") as prom, victoria_metrics(tmp_path / "vm") as vm:
        vm_import(vm, backfill.prometheus_text(rows))
        for parts, skip, url in itertools.product((2, 5, 10), (0, 5), (prom, vm)):
            picked = [_values(url, f'vllm:num_requests_running{{job="vllm", {matcher}}}', at)
                      for matcher in ending_matchers("instance", parts, skip)]
            assert sorted(value for part in picked for value in part) == sorted(NAMES + PORTS), (url, parts, skip)
            for index, part in enumerate(picked):
                assert part == sorted(name for name in NAMES + PORTS if part_of(name, parts, skip) == index), \
                    (url, parts, skip)
