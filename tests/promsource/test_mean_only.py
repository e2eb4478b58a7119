"""The central read leaves out the finite buckets of the histograms only ever read as means
(``batch.MEAN_ONLY``): every scenario of the simulator, fed to the sidecar's own pipeline once whole and
once with those buckets cut from every scrape as the store's matcher cuts them, gives the same state
document at every step. A reader that starts taking a quantile or a bucket of one of them fails here."""

from __future__ import annotations

import json
import re

import pytest

from exporter.catalog.metrics import BY_NAME
from exporter.config import load_settings
from exporter.pipeline import TargetPipeline
from exporter.poll import ScrapeResult
from exporter.promsource.batch import FAMILY_MATCHERS, FINITE_BUCKETS_LEFT_OUT, MEAN_ONLY
from exporter.simulator import SCENARIOS
from tests.scenario_captures import capture_files, shared_captures

INTERVAL = 15.0
DURATION = 420.0  # the scenario suite's captures: a full 180 s window, then the steps after it
WINDOW = 180.0

# The matcher as the stores read it (RE2, anchored): a finite bound ends in a digit.
_LEFT_OUT = re.compile(FINITE_BUCKETS_LEFT_OUT.split('"')[1])
_LE = re.compile(r'le="([^"]*)"')


def cut(text: str) -> str:
    """``text`` with the finite buckets of the mean-only histograms left out, as their query leaves them."""
    names = tuple(f"{name}_bucket" for family in MEAN_ONLY for name in (family, *BY_NAME[family].aliases))
    kept = []
    for line in text.splitlines(keepends=True):
        if line.startswith(names):
            bound = _LE.search(line)
            assert bound is not None, line
            if _LEFT_OUT.fullmatch(bound.group(1)):
                continue
        kept.append(line)
    return "".join(kept)


def documents(texts: list[str]) -> list[str]:
    settings = load_settings(None, {"window_seconds": WINDOW,
                                    "targets": [{"name": "t", "url": "http://127.0.0.1:9/metrics",
                                                 "scrape_interval": INTERVAL}]})
    pipeline = TargetPipeline(settings.targets[0], settings)
    out = []
    for index, text in enumerate(texts):
        state = pipeline.ingest(ScrapeResult(started_at=1_700_000_000.0 + index * INTERVAL, duration=0.0,
                                             body=text.encode()))
        out.append(json.dumps(state.to_dict(), sort_keys=True))
    return out


def test_the_matcher_is_on_the_mean_only_histograms_only() -> None:
    assert MEAN_ONLY and all(BY_NAME[family].kind == "histogram" for family in MEAN_ONLY)
    assert sum(1 for matcher in FAMILY_MATCHERS if matcher) == len(MEAN_ONLY)
    for bound in ("0.001", "10", "2.5e-05", "1e+06", "100.0"):
        assert _LEFT_OUT.fullmatch(bound), bound
    for kept in ("+Inf", "Inf", "inf", ""):  # the +Inf bucket in any spelling; sum and count have no le
        assert not _LEFT_OUT.fullmatch(kept), kept


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_judges_the_same_without_those_buckets(
        name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    texts = [path.read_text() for path in capture_files(shared_captures(tmp_path_factory, name, DURATION, INTERVAL))]
    cuts = [cut(text) for text in texts]
    assert sum(map(len, cuts)) < sum(map(len, texts)), "the scenario has buckets to leave out: the test can fail"
    whole, without = documents(texts), documents(cuts)
    assert len(whole) == len(texts)
    for index, (a, b) in enumerate(zip(whole, without, strict=True)):
        assert a == b, f"{name}: scrape {index} judged otherwise without the mean-only histograms' finite buckets"
