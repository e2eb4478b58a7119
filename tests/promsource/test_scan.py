"""Range-selector answers scanned as bytes file the same series, in the same order, as the decoded JSON; what
the scan cannot vouch for is left to json, and nothing is filed twice."""

from __future__ import annotations

import json
import random
from array import array
from pathlib import Path
from typing import Any, cast

import pytest

from exporter.promsource import backfill
from exporter.promsource.batch import Split
from exporter.promsource.rebuild import TargetKey
from exporter.promsource.scan import Layout, Layouts, SteadyAnswer, scan_steady
from exporter.promsource.stored import Steady, StoredSeries, expand
from exporter.simulator import scenario_names, write_captures
from tests.promsource.test_rebuild import as_matrix

PROMETHEUS = '{{"status":"success","data":{{"resultType":"matrix","result":{}}}}}'
VICTORIA = '{{"status":"success","isPartial":false,"data":{{"resultType":"matrix","result":{}}}}}'
TARGETS = ("vllm-0:8000", "vllm-1:8000", "vllm-2:8000")  # the last is no target of this read


def body(result: list[dict[str, Any]], form: str = PROMETHEUS) -> bytes:
    return form.format(json.dumps(result, separators=(",", ":"), ensure_ascii=False)).encode()


def keys(*values: str) -> dict[tuple[str, ...], TargetKey]:
    return {(value,): TargetKey((("instance", value),)) for value in values}


def filed(by_target: dict[TargetKey, list[StoredSeries | Steady]]) -> dict[str, list[tuple[Any, ...]]]:
    return {key.name: [(s.known.name, s.known.labels, list(s.stamps), [repr(v) for v in s.values], s.raw)
                       for s in expand(series)] for key, series in by_target.items()}


def both(answers: list[bytes], targets: tuple[str, ...] = TARGETS[:2]) -> tuple[list[bool], dict[str, Any],
                                                                               dict[str, Any]]:
    """The scan's filing (json where it declines) and json's alone."""
    by_values = keys(*targets)
    scanned: dict[TargetKey, list[StoredSeries | Steady]] = {}
    decoded: dict[TargetKey, list[StoredSeries | Steady]] = {}
    scan, reference = Split(("instance",), by_values), Split(("instance",), by_values)
    took = []
    for answer in answers:
        took.append(scan.scanned(answer, scanned))
        if not took[-1]:
            scan.decoded(json.loads(answer)["data"]["result"], scanned)
        reference.decoded(json.loads(answer)["data"]["result"], decoded)
    return took, filed(scanned), filed(decoded)


@pytest.mark.parametrize("scenario", scenario_names())
def test_every_scenario_files_what_json_files(scenario: str, tmp_path: Path) -> None:
    write_captures(scenario, tmp_path, 60.0, 15.0)
    captures = backfill.folder(tmp_path, 1_700_000_000.0, 15.0)
    result = [series for value in TARGETS for series in as_matrix(captures, {"instance": value, "job": "vllm"})]
    # In the order Prometheus answers (by label set): a steady answer's series are filed in each target's order
    # of names and labels (scan.Layout.groups), which is that order.
    result.sort(key=lambda series: sorted(series["metric"].items()))
    last = [{**s, "values": cast(list[Any], s["values"])[-1:]} for s in result]  # a steady read: one new scrape
    for form in (PROMETHEUS, VICTORIA):
        took, scanned, decoded = both([body(result, form), body(last, form), body(last, form)])
        assert took == [True, True, True]
        assert scanned == decoded


def test_whole_second_stamps_and_values_that_are_no_number() -> None:
    result = [{"metric": {"__name__": "vllm:num_requests_running", "instance": TARGETS[0]},
               "values": [[1700000000, "3"], [1700000015.5, "NaN"], [1700000030.125, "+Inf"]]},
              {"metric": {"__name__": "vllm:num_requests_waiting", "instance": TARGETS[1]},
               "values": [[1700000000, "many"]]},
              {"metric": {"__name__": "vllm:num_requests_waiting", "instance": TARGETS[0]},
               "values": [[1700000000, "1e3"], [1700000015, "bad"]]}]
    took, scanned, decoded = both([body(result)])
    assert took == [True]
    assert scanned == decoded
    assert scanned["vllm-1:8000"][0][4] == ["many"]  # kept as sent: the parser fails that scrape with it


@pytest.mark.parametrize("value", ['a"b', "back\\slash", "brace } and ],[ and {\"metric\":{", "é ünïcode",
                                   '},"values":[[1,"2"]]},{"metric":{"instance":"vllm-1:8000"'])
def test_label_values_that_look_like_the_answer_s_own_syntax(value: str) -> None:
    result = [{"metric": {"__name__": "vllm:gpu_cache_usage_perc", "instance": TARGETS[0], "odd": value},
               "values": [[1700000000, "0.5"]]},
              {"metric": {"__name__": "vllm:gpu_cache_usage_perc", "odd": value, "instance": TARGETS[1]},
               "values": [[1700000000, "0.25"]]},
              {"metric": {"instance": TARGETS[0], "__name__": "vllm:num_requests_running"},
               "values": [[1700000000, "2"]]}]
    took, scanned, decoded = both([body(result), body(result)])  # the second as the labels are known
    assert took == [True, True]
    assert scanned == decoded
    assert sum(len(series) for series in scanned.values()) == 6


def test_a_target_value_with_escapes_is_left_to_json() -> None:
    targets = ('quoted"name', TARGETS[1])
    result = [{"metric": {"__name__": "vllm:num_requests_running", "instance": value}, "values": [[1.0, "1"]]}
              for value in (targets[1], targets[0], targets[1])]
    took, scanned, decoded = both([body(result)], targets)
    assert took == [False]
    assert scanned == decoded and sum(len(series) for series in scanned.values()) == 3


@pytest.mark.parametrize("answer", [
    b'{"status":"success","data":{"resultType":"matrix","result":[]},"warnings":["partial"]}',
    b'{"status": "success", "data": {"resultType": "matrix", "result": []}}',
    b'{"status":"success","isPartial":true,"data":{"resultType":"matrix","result":[]}}',
    b'{"status":"success","data":{"resultType":"vector","result":[]}}',
    b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"a","instance":"x"},'
    b'"values":[[1,"1"]]},]}}',
    b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"a","instance":"x"},'
    b'"values":[[1,"1\\u0031"]]}]}}',
    b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"a","instance":"x"},'
    b'"values":[[1,"1"]]}{"metric":{"__name__":"b","instance":"x"},"values":[[1,"1"]]}]}}',
    b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"a\xff","instance":"x"},'
    b'"values":[[1,"1"]]}]}}',
])
def test_answers_in_another_form_are_declined_with_nothing_filed(answer: bytes) -> None:
    by_target: dict[TargetKey, list[StoredSeries | Steady]] = {}
    assert not Split(("instance",), keys("x")).scanned(answer, by_target)
    assert by_target == {}


def test_an_empty_answer_files_nothing_and_several_target_labels_are_decoded() -> None:
    assert both([body([])]) == ([True], {}, {})
    by_values: dict[tuple[str, ...], TargetKey] = {("a", "b"): TargetKey((("instance", "a"), ("pod", "b")))}
    assert not Split(("instance", "pod"), by_values).scanned(body([]), {})


def test_a_steady_answer_is_filed_per_target_and_its_label_blocks_worked_out_once(tmp_path: Path) -> None:
    write_captures("healthy", tmp_path, 45.0, 15.0)
    captures = backfill.folder(tmp_path, 1_700_000_000.0, 15.0)
    result = [series for value in TARGETS for series in as_matrix(captures, {"instance": value, "job": "vllm"})]
    result.sort(key=lambda series: sorted(series["metric"].items()))  # as Prometheus answers
    layouts: dict[str, Layout] = {}
    split = Split(("instance",), keys(*TARGETS[:2]), layouts)
    seen = []
    for step in range(3):
        one = [{**s, "values": cast(list[Any], s["values"])[step:step + 1]} for s in result]
        answer = body([s for s in one if s["values"]])
        filed_here: dict[TargetKey, list[StoredSeries | Steady]] = {}
        assert split.scanned(answer, filed_here, "q")
        assert all(isinstance(item, tuple) for items in filed_here.values() for item in items)
        assert filed(filed_here) == both([answer])[2]
        seen.append(layouts["q"])
    assert seen[1] is seen[2]  # the same label blocks: worked out once
    # Declined, nothing filed: several samples a series, a value float() does not read (the other paths decide).
    for answer in (result, [{**s, "values": [[1.0, "many"]]} for s in result]):
        into: dict[TargetKey, list[StoredSeries | Steady]] = {}
        assert not scan_steady(body(answer), "instance", {t: TargetKey((("instance", t),)) for t in TARGETS[:2]},
                               into, {}, {}, "q")
        assert into == {}
        took, scanned, decoded = both([body(answer)])
        assert took == [True] and scanned == decoded
    # A target's series at several times: filed one by one, as scan files them.
    apart = body([{**s, "values": [[1.0 + i, "1"]]} for i, s in enumerate(result)])
    into = {}
    assert scan_steady(apart, "instance", {t: TargetKey((("instance", t),)) for t in TARGETS[:2]}, into, {}, {}, "q")
    assert all(isinstance(item, StoredSeries) for items in into.values() for item in items)
    assert filed(into) == both([apart])[2]


def test_a_read_of_steady_answers_joined_files_what_they_file_one_by_one(tmp_path: Path) -> None:
    write_captures("healthy", tmp_path, 30.0, 15.0)
    captures = backfill.folder(tmp_path, 1_700_000_000.0, 15.0)
    result = [{**s, "values": cast(list[Any], s["values"])[-1:]}
              for value in TARGETS for s in as_matrix(captures, {"instance": value, "job": "vllm"})]
    names = sorted({s["metric"]["__name__"] for s in result})
    answers = [body([s for s in result if s["metric"]["__name__"] == name]) for name in names]  # one per family
    split = Split(("instance",), keys(*TARGETS[:2]), Layouts())
    read = [split.steady(answer, name) for answer, name in zip(answers, names, strict=True)]
    assert all(read)
    joined = split.joined(cast(list[SteadyAnswer], read))
    assert joined is not None and all(len(items) == 1 for items in joined.values())  # one Steady a target
    one_by_one: dict[TargetKey, list[StoredSeries | Steady]] = {}
    for answer in answers:
        assert split.scanned(answer, one_by_one, "another")
    assert filed(joined) == filed(one_by_one)
    # One target's series at two times across the answers: not joined (the answers are filed one by one).
    later = [{**s, "values": [[s["values"][0][0] + 15, s["values"][0][1]]]} for s in result]
    moved = [body([s for s in later if s["metric"]["__name__"] == names[0]]), *answers[1:]]
    reread = [split.steady(answer, name) for answer, name in zip(moved, names, strict=True)]
    assert all(reread) and split.joined(cast(list[SteadyAnswer], reread)) is None


def test_an_answer_in_another_order_each_cycle_is_filed_in_one_order(tmp_path: Path) -> None:
    """VictoriaMetrics answers a range selector in the order its workers finish: each answer's blocks are found
    by their hashes in the layout the first answer left, so each target's series are filed in one order (of their
    names and labels, the same on targets alike) and the layout is worked out once."""
    write_captures("healthy", tmp_path, 45.0, 15.0)
    captures = backfill.folder(tmp_path, 1_700_000_000.0, 15.0)
    result = [series for value in TARGETS for series in as_matrix(captures, {"instance": value, "job": "vllm"})]
    answers = []
    for step, seed in enumerate((4, 1, 2, 3)):
        one = [{**s, "values": cast(list[Any], s["values"])[step - 1:step] if step else s["values"][:1]}
               for s in result]
        if seed is not None:
            random.Random(seed).shuffle(one)
        answers.append(body(one))
    layouts = Layouts()
    split = Split(("instance",), keys(*TARGETS[:2]), layouts)
    orders, seen = [], []
    for answer in answers:
        into: dict[TargetKey, list[StoredSeries | Steady]] = {}
        assert split.scanned(answer, into, "q")
        mine, theirs = filed(into), both([answer])[2]
        assert {k: sorted(v) for k, v in mine.items()} == {k: sorted(v) for k, v in theirs.items()}
        orders.append({k: [(name, labels) for name, labels, *_ in v] for k, v in mine.items()})
        seen.append(layouts["q"])
    assert orders[0] == orders[1] == orders[2] == orders[3]
    assert seen[0] is seen[1] is seen[2] is seen[3] and len(seen[0].keys) == seen[0].series
    # Targets alike (the same series) in one order, whatever order the store gave each: one plan for both.
    assert orders[0][TARGETS[0]] == orders[0][TARGETS[1]]


def test_blocks_the_layout_does_not_hold_are_worked_out_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A block the layout does not hold (a label changed), or keys that do not fit the blocks, have the answer's
    blocks worked out again; blocks alike in hash are never known again by it, and every answer is still filed as
    json files it."""
    write_captures("healthy", tmp_path, 75.0, 15.0)
    captures = backfill.folder(tmp_path, 1_700_000_000.0, 15.0)
    result = [series for value in TARGETS for series in as_matrix(captures, {"instance": value, "job": "vllm"})]

    def answer(step: int, seed: int, series: list[dict[str, Any]] = result) -> bytes:
        one = [{**s, "values": cast(list[Any], s["values"])[step:step + 1]} for s in series]
        random.Random(seed).shuffle(one)
        return body(one, VICTORIA)

    layouts = Layouts()
    split = Split(("instance",), keys(*TARGETS[:2]), layouts)

    def read(answer: bytes) -> dict[str, list[tuple[Any, ...]]]:
        into: dict[TargetKey, list[StoredSeries | Steady]] = {}
        assert split.scanned(answer, into, "q")
        mine, theirs = filed(into), both([answer])[2]
        assert {k: sorted(v) for k, v in mine.items()} == {k: sorted(v) for k, v in theirs.items()}
        return mine

    first = read(answer(0, 1))
    layout = layouts["q"]
    orders = [first, read(answer(1, 2)), read(answer(2, 3))]
    assert layouts["q"] is layout  # found by the hashes: the same layout, each target's series in one order
    assert [{k: [s[:2] for s in v] for k, v in o.items()} for o in orders] == [
        {k: [s[:2] for s in v] for k, v in first.items()}] * 3
    # A label changed on one series (as many blocks as the layout, one of them new): worked out again.
    renamed = [dict(s) for s in result]
    renamed[0] = {**renamed[0], "metric": {**renamed[0]["metric"], "extra": "1"}}
    read(answer(3, 5, renamed))
    again = layouts["q"]
    assert again is not layout
    read(answer(3, 8, renamed))  # found by the hashes
    assert layouts["q"] is again
    # Keys that do not fit the blocks: worked out again, the blocks' hashes kept.
    kept = again.keys
    again.keys = array("q", [0] * len(kept))
    read(answer(4, 7, renamed))
    assert layouts["q"] is not again and sorted(layouts["q"].keys) == sorted(kept)
    # Blocks alike in hash: no keys kept, each answer's blocks worked out again, each filed as json files it.
    monkeypatch.setattr("exporter.promsource.scan.hash", lambda block: 7, raising=False)
    read(answer(4, 9, renamed))
    alike = layouts["q"]
    assert len(alike.keys) == 0
    read(answer(4, 10, renamed))
    assert layouts["q"] is not alike
