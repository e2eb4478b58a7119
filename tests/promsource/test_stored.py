"""Stored series -> snapshots built straight from the answer: each is the snapshot the parser gives the
scrape's rebuilt text, on every simulated scenario and on the inputs the shortcut hands to the parser."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exporter.parse import ParseError, parse
from exporter.promsource import backfill
from exporter.promsource import stored as stored_module
from exporter.promsource.rebuild import scrapes
from exporter.promsource.stored import Steady, StoredSeries, snapshots
from exporter.simulator import scenario_names, write_captures
from exporter.snapshot import Snapshot
from tests.promsource.test_rebuild import as_matrix

TARGET = {"instance": "vllm-7:8000"}


def stored(matrix: list[dict[str, Any]], target_labels: tuple[str, ...] = ("instance",)) -> list[StoredSeries]:
    strip = frozenset(target_labels)
    return [StoredSeries.of(s["metric"], strip, s["values"]) for s in matrix]


def same(got: Snapshot, want: Snapshot) -> None:
    """Equal, and in the parser's order (what the window and the signals iterate over)."""
    assert got == want
    for part in ("scalars", "histograms", "info"):
        mine, theirs = getattr(got, part), getattr(want, part)
        assert list(mine) == list(theirs), part
        for name in theirs:
            assert list(mine[name]) == list(theirs[name]), (part, name)


def through_the_parser(matrix: list[dict[str, Any]], after: float | None = None) -> list[tuple[float, Snapshot]]:
    return [(at, parse(text, at)) for at, text in scrapes(matrix, after=after)]


@pytest.mark.parametrize("scenario", scenario_names())
def test_every_scenario_gives_the_parsers_snapshots(scenario: str, tmp_path: Path) -> None:
    write_captures(scenario, tmp_path, 75.0, 15.0)
    matrix = as_matrix(backfill.folder(tmp_path, 1_700_000_000.0, 15.0), {**TARGET, "job": "vllm"})
    for after in (None, 1_700_000_030.0):
        want = through_the_parser(matrix, after)
        got = snapshots(stored(matrix), TARGET, after=after)
        assert [at for at, _ in got] == [at for at, _ in want]
        for (_, mine), (_, theirs) in zip(got, want, strict=True):
            assert isinstance(mine, Snapshot), "a clean scrape is built, not referred to the parser"
            same(mine, theirs)


def series(name: str, values: list[list[object]], **labels: str) -> dict[str, Any]:
    return {"metric": {"__name__": name, **TARGET, "job": "vllm", **labels}, "values": values}


def test_nan_and_infinite_values_are_dropped_and_counted_as_the_parser_does() -> None:
    matrix = [series("vllm:num_requests_running", [[10.0, "NaN"], [25.0, "2"]]),
              series("vllm:num_requests_waiting", [[10.0, "+Inf"], [25.0, "1"]]),
              series("vllm:e2e_request_latency_seconds_bucket", [[10.0, "1"]], le="0.5"),
              series("vllm:e2e_request_latency_seconds_bucket", [[10.0, "NaN"]], le="+Inf")]
    got = snapshots(stored(matrix), TARGET)
    want = through_the_parser(matrix)
    assert got[0][1].dropped_samples == 3  # type: ignore[union-attr]
    for (_, mine), (_, theirs) in zip(got, want, strict=True):
        assert isinstance(mine, Snapshot)
        same(mine, theirs)


def test_what_the_parser_must_decide_goes_to_it_as_text() -> None:
    alias = [series("vllm:gpu_cache_usage_perc", [[10.0, "0.5"], [25.0, "0.6"]]),
             series("vllm:kv_cache_usage_perc", [[10.0, "0.7"]])]  # both generations in the scrape at 10
    got = snapshots(stored(alias), TARGET)
    assert isinstance(got[0][1], str) and isinstance(got[1][1], Snapshot)
    for (_, mine), (_, theirs) in zip(got, through_the_parser(alias), strict=True):
        same(mine if isinstance(mine, Snapshot) else parse(mine, 10.0), theirs)
    # A value that is no number: the parser fails that scrape with its words, as it fails a live one.
    (at, text), = snapshots(stored([series("vllm:num_requests_running", [[10.0, "1,5"]])]), TARGET)
    assert isinstance(text, str)
    with pytest.raises(ParseError, match="'1,5' is not a number"):
        parse(text, at)
    # A bucket bound that is no number.
    bad = [series("vllm:e2e_request_latency_seconds_bucket", [[10.0, "1"]], le="fast"),
           series("vllm:num_requests_running", [[10.0, "1"]])]
    (_, text), = snapshots(stored(bad), TARGET)
    assert isinstance(text, str)


def test_a_target_with_one_series_keeps_its_labels_as_the_parser_sees_them() -> None:
    one = [series("vllm:num_requests_running", [[10.0, "3"]], model_name="m")]
    (_, mine), = snapshots(stored(one), TARGET)
    (_, theirs), = through_the_parser(one)
    assert isinstance(mine, Snapshot)
    same(mine, theirs)
    assert ("instance", "vllm-7:8000") in next(iter(mine.scalars["vllm:num_requests_running"]))


def test_a_target_label_vllm_means_stays_a_label() -> None:
    """``--target-label engine``: the engine label names the target and still reaches the rules."""
    matrix = [{"metric": {"__name__": name, "engine": "0", "job": "vllm"}, "values": [[10.0, "1"]]}
              for name in ("vllm:num_requests_running", "vllm:num_requests_waiting")]
    (_, mine), = snapshots(stored(matrix, ("engine",)), {"engine": "0"})
    (_, theirs), = through_the_parser(matrix)
    assert isinstance(mine, Snapshot)
    same(mine, theirs)
    assert next(iter(mine.scalars["vllm:num_requests_running"])) == (("engine", "0"),)


def steady(matrix: list[dict[str, Any]], sizes: tuple[int, ...]) -> list[Steady]:
    """A steady read's one scrape of a target as ``scan_steady`` files it: its series in blocks (one per
    answer) of ``sizes`` series, the last block taking the rest."""
    held = stored(matrix)
    out: list[Steady] = []
    begin = 0
    for size in (*sizes, len(held)):
        block, begin = held[begin:begin + size], begin + size
        if block:
            out.append((tuple(s.known for s in block), block[0].stamps[0], tuple(s.values[0] for s in block)))
    return out


@pytest.mark.parametrize("scenario", scenario_names())
def test_a_steady_scrape_assembled_by_its_layout_is_the_parsers_snapshot(scenario: str, tmp_path: Path) -> None:
    write_captures(scenario, tmp_path, 45.0, 15.0)
    matrix = as_matrix(backfill.folder(tmp_path, 1_700_000_000.0, 15.0), {**TARGET, "job": "vllm"})
    for step in range(3):  # the same layout, other values: the assembly worked out once serves each
        one = [{**s, "values": s["values"][step:step + 1]} for s in matrix if len(s["values"]) > step]
        (at, theirs), = through_the_parser(one)
        for sizes in ((1, 5, 40), (len(one),)):
            (when, mine), = snapshots(steady(one, sizes), TARGET)
            assert when == at and isinstance(mine, Snapshot)
            same(mine, theirs)
        assert snapshots(steady(one, (7,)), TARGET, after=at) == []


def test_a_steady_scrape_the_layout_cannot_vouch_for_takes_the_general_path() -> None:
    clean = [series("vllm:num_requests_running", [[10.0, "2"]]),
             series("vllm:e2e_request_latency_seconds_bucket", [[10.0, "1"]], le="0.5"),
             series("vllm:e2e_request_latency_seconds_bucket", [[10.0, "3"]], le="+Inf")]
    cases = [
        [series("vllm:num_requests_waiting", [[10.0, "NaN"]]), *clean],  # dropped and counted by the parser
        [series("vllm:gpu_cache_usage_perc", [[10.0, "0.5"]]),  # both generations: the parser's order decides
         series("vllm:kv_cache_usage_perc", [[10.0, "0.7"]]), *clean],
    ]
    for matrix, built in zip(cases, (True, False), strict=True):
        (at, mine), = snapshots(steady(matrix, (1,)), TARGET)
        (_, theirs), = through_the_parser(matrix)
        assert isinstance(mine, Snapshot) is built
        same(mine if isinstance(mine, Snapshot) else parse(mine, at), theirs)
    (_, nan), = snapshots(steady(cases[0], (2,)), TARGET)
    assert isinstance(nan, Snapshot) and nan.dropped_samples == 1
    # A bucket bound that is no number: the parser fails the scrape, as it fails a live one.
    bad = [series("vllm:e2e_request_latency_seconds_bucket", [[10.0, "1"]], le="fast"), *clean]
    (at, text), = snapshots(steady(bad, (1,)), TARGET)
    assert isinstance(text, str)
    with pytest.raises(ParseError, match="'fast' is not a number"):
        parse(text, at)
    # Series of one target at two times in one read (no steady read files that, but it is decided right).
    two = [series("vllm:num_requests_running", [[10.0, "2"]]), series("vllm:num_requests_waiting", [[25.0, "1"]])]
    got = snapshots(steady(two, (1,)), TARGET)
    want = through_the_parser(two)
    assert [at for at, _ in got] == [10.0, 25.0] == [at for at, _ in want]
    for (_, mine), (_, theirs) in zip(got, want, strict=True):
        assert isinstance(mine, Snapshot)
        same(mine, theirs)


def test_a_steady_histogram_is_assembled_as_the_parser_assembles_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The layout's own assembly of histograms (bounds in order, the sum and the count found by position) gives the
    parser's samples, its default count and sum where the series has none, and drops and counts a series whose
    buckets go down (parse.histogram decides both); a series with no +Inf bucket leaves the scrape to the parser's
    assembly, which drops it and counts it."""
    def histogram(values: dict[str, str], sum_and_count: bool = True) -> list[dict[str, Any]]:
        name = "vllm:e2e_request_latency_seconds"
        out = [series(f"{name}_bucket", [[10.0, value]], le=le) for le, value in values.items()]
        if sum_and_count:
            out += [series(f"{name}_sum", [[10.0, "4.5"]]), series(f"{name}_count", [[10.0, "3"]])]
        return [series("vllm:num_requests_running", [[10.0, "2"]]), *out]

    cases = [
        (histogram({"10": "3", "0.5": "1", "+Inf": "3", "2.5": "2"}), 0),  # bounds out of order in the answer
        (histogram({"0.5": "1", "+Inf": "3"}, sum_and_count=False), 0),  # the count from +Inf, the sum NaN
        (histogram({"0.5": "2", "2.5": "1", "+Inf": "3"}), 1),  # goes down: dropped and counted
        (histogram({"0.5": "1", "2.5": "2"}), 1),  # no +Inf bucket: dropped and counted
    ]
    direct = stored_module._Assembly._direct
    made: list[bool] = []

    def counted(self: Any, at: float, values: Any, scalars: Any) -> Snapshot:
        made.append(True)
        return direct(self, at, values, scalars)

    monkeypatch.setattr(stored_module._Assembly, "_direct", counted)
    for matrix, dropped in cases:
        for sizes in ((1,), (len(matrix),)):
            made.clear()
            (_, mine), = snapshots(steady(matrix, sizes), TARGET)
            (_, theirs), = through_the_parser(matrix)
            assert isinstance(mine, Snapshot) and theirs.dropped_samples == dropped
            same(mine, theirs)
            assert mine.dropped_samples == dropped
            assert made == ([True] if "+Inf" in str(matrix) else [])
