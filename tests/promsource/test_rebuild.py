"""Stored samples -> the scrape they came from: the rebuilt snapshot equals the parsed capture."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter.catalog.metrics import SAMPLE_INDEX
from exporter.parse import parse
from exporter.promsource import backfill
from exporter.promsource.rebuild import WIRE_NAMES, TargetKey, scrapes, selector, targets
from exporter.promsource.settings import SelectorError, matchers


def as_matrix(captures: list[tuple[float, str]], extra: dict[str, str]) -> list[dict[str, object]]:
    """What a range selector returns for these captures: one series per label set, values in time order.

    Built from the OpenMetrics lines the backfill writes, parsed back into labels (as Prometheus would).
    """
    series: dict[tuple[str, tuple[tuple[str, str], ...]], list[list[object]]] = {}
    for at, text in captures:
        for line in backfill.samples(text, at, extra):
            name, block, value, stamp = re.match(r"([^{ ]+)(?:\{(.*)\})? (\S+) (\S+)$", line).groups()  # type: ignore[union-attr]
            labels = tuple(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', block or ""))
            if name not in SAMPLE_INDEX:
                continue  # the selector asks for the catalog's names only
            series.setdefault((name, labels), []).append([float(stamp), value])
    return [{"metric": {"__name__": name, **dict(labels)}, "values": values}
            for (name, labels), values in series.items()]


def test_rebuilt_scrape_is_the_parsed_capture(fixtures_dir: Path) -> None:
    texts = [(1000.0 + 15 * i, (fixtures_dir / f"snapshot-{phase}.txt").read_text())
             for i, phase in enumerate(("idle", "pressure-during", "final"))]
    rebuilt = scrapes(as_matrix(texts, {"instance": "vllm-0:8000", "job": "vllm"}))
    assert [at for at, _ in rebuilt] == [at for at, _ in texts]
    for (at, original), (_, text) in zip(texts, rebuilt, strict=True):
        want, got = parse(original, at), parse(text, at)
        assert got.families() == want.families()
        for name, series in want.scalars.items():
            assert dict(got.scalars[name]) == dict(series), name  # instance and job are left out
        for name, hist in want.histograms.items():
            assert dict(got.histograms[name]) == dict(hist), name
        assert len(want.info.get("vllm:cache_config_info", ())) == len(got.info.get("vllm:cache_config_info", ()))


def test_scrapes_after_leaves_out_what_was_fed() -> None:
    matrix = [{"metric": {"__name__": "vllm:num_requests_running", "instance": "a"},
               "values": [[10.0, "1"], [25.0, "2"], [40.0, "3"]]}]
    assert [at for at, _ in scrapes(matrix, after=25.0)] == [40.0]


def test_label_values_are_escaped_back() -> None:
    matrix = [{"metric": {"__name__": "vllm:num_requests_running", "model_name": 'a "quoted"\\ name\n'},
               "values": [[10.0, "4"]]}]
    (_, text), = scrapes(matrix)
    snapshot = parse(text, 10.0)
    assert dict(snapshot.scalars["vllm:num_requests_running"]) == {(("model_name", 'a "quoted"\\ name\n'),): 4.0}


def test_selector_names_every_generation() -> None:
    sel = selector('{job="vllm", namespace=~"prod-.*"}', WIRE_NAMES, {"instance": "10.0.0.1:8000"})
    assert sel.startswith('{__name__=~"')
    for old in ("vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds_bucket",
                "vllm:gpu_prefix_cache_hits_total", "vllm:kv_cache_usage_perc"):
        assert old in sel
    assert '_created' not in sel
    assert sel.endswith('job="vllm", namespace=~"prod-.*", instance="10.0.0.1:8000"}')


@pytest.mark.parametrize(("text", "says"), [
    ('job="vllm"', "is not a label selector"),
    ('vllm:num_requests_running{job="vllm"}', "is not a label selector"),
    ('{job=vllm}', "cannot read the matcher"),
    ('{__name__="x"}', "leave out __name__"),
])
def test_bad_selectors(text: str, says: str) -> None:
    with pytest.raises(SelectorError, match=says):
        matchers(text)


def test_empty_selector_and_target_names() -> None:
    assert matchers("{}") == []
    keys = targets([{"instance": "b:1", "engine": "0"}, {"instance": "b:1", "engine": "1"}, {"instance": "a:1"}],
                   ("instance",))
    assert [k.name for k in keys] == ["a:1", "b:1"]
    pod = TargetKey.of({"namespace": "llm", "pod": "vllm-3"}, ("namespace", "pod"))
    assert pod.name == "llm-vllm-3"
    assert TargetKey.of({}, ("pod",)).name == "unlabelled"


def test_target_identity_labels_are_dropped_vllm_labels_kept() -> None:
    matrix = [{"metric": {"__name__": name, "instance": "10.0.0.9:8000", "job": "vllm", "pod": "vllm-9",
                          "model_name": "m", "engine": "0"}, "values": [[10.0, "1"]]}
              for name in ("vllm:num_requests_running", "vllm:num_requests_waiting")]
    (_, text), = scrapes(matrix)
    assert "instance" not in text and "pod" not in text and "job" not in text
    assert parse(text, 10.0).model_names() == ("m",)
    assert 'engine="0"' in text
