"""The parser's layout plans: a scrape laid out as one parsed before is read by that layout's plan, and gives
exactly the Snapshot the full parse gives (dict order included), or the full parse's error."""

from __future__ import annotations

import re

import pytest

import exporter.parse as parser
from exporter.parse import ParseError, parse
from tests.conftest import read_capture

VALUE = re.compile(r"(?m)^([^#\n]\S*(?:\{[^}]*\})?) (\S+)$")


def _full(text: str) -> str | object:
    """What the full parse makes of ``text`` (no plan kept from before): the Snapshot's repr, or the error."""
    parser._PLANS.clear()
    parser._SEEN.clear()
    try:
        return repr(parse(text, 5.0))
    except ParseError as exc:
        return ParseError, str(exc)


def _planned(layout: str, text: str) -> str | object:
    """What a parse of ``text`` makes of it once ``layout`` (the same lines, other values) has its plan."""
    parser._PLANS.clear()
    parser._SEEN.clear()
    parse(layout, 1.0)
    parse(layout, 2.0)  # seen twice: the layout has its plan
    assert parser._PLANS, "no plan was made"
    try:
        return repr(parse(text, 5.0))
    except ParseError as exc:
        return ParseError, str(exc)


def _moved(text: str, change) -> str:
    """``text`` with the value of each sample line replaced by ``change(n, name, value)`` (n counts the lines)."""
    count = iter(range(10 ** 6))
    return VALUE.sub(lambda m: f"{m.group(1)} {change(next(count), m.group(1), m.group(2))}", text)


@pytest.mark.parametrize("capture", ["steady-during", "pressure-during"])
def test_a_planned_scrape_is_the_full_parse(fixtures_dir, capture):
    layout = read_capture(fixtures_dir, capture)
    moved = _moved(layout, lambda n, name, value: float(value) + n % 7)
    assert moved != layout
    hits = []
    read = parser._Plan.read

    def counted(plan, values, timestamp):
        snapshot = read(plan, values, timestamp)
        hits.append(snapshot is not None)
        return snapshot

    parser._Plan.read = counted  # type: ignore[method-assign]
    try:
        planned = _planned(layout, moved)
    finally:
        parser._Plan.read = read  # type: ignore[method-assign]
    assert hits == [True]
    assert planned == _full(moved)


@pytest.mark.parametrize("value", ["nan", "+Inf", "-Inf", "x", "1e400", "0x10", "1_0", "", "1\t2"])
@pytest.mark.parametrize("family", [
    "vllm:num_requests_running{",  # a gauge
    "vllm:request_success_total{",  # a counter
    "vllm:time_to_first_token_seconds_bucket{",  # a bucket
    "vllm:time_to_first_token_seconds_sum{",  # a histogram's sum
    "vllm:cache_config_info{",  # info: the value is read as a number, not kept
    "python_gc_objects_collected_total{",  # a family not kept: one token
])
def test_a_value_the_plan_cannot_vouch_for_gets_the_full_parse(fixtures_dir, value, family):
    layout = read_capture(fixtures_dir, "steady-during")
    first = []

    def change(n: int, name: str, old: str) -> str:
        if name.startswith(family) and not first:
            first.append(n)
            return value
        return old

    text = _moved(layout, change)
    assert first, family
    assert _planned(layout, text) == _full(text)


def test_a_one_word_comment_stays_a_comment_only_while_it_is_the_same_word():
    layout = '# HELP\nvllm:num_requests_running{model_name="m",engine="0"} 1\n# NOTE\n'
    for text in (layout.replace("1\n", "2\n"), layout.replace("# NOTE", "# EOF"), layout.replace("# HELP", "# EOF")):
        assert _planned(layout, text) == _full(text)
    assert _full(layout.replace("# HELP", "# EOF"))[0] is ParseError  # content after # EOF
