"""The central diagnoser's cycle and Python's cyclic garbage collector: paused through a cycle, what survives it
moved to the oldest generation unexamined, a full collection every ``FULL_COLLECTION_CYCLES`` cycles."""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

import pytest

from exporter.config import load_settings
from exporter.promsource import central as central_module
from exporter.promsource.central import CentralDiagnoser, CycleStats
from exporter.promsource.settings import PrometheusSource


class _Node:
    def __init__(self) -> None:
        self.other: Any = None


def test_a_cycle_leaves_no_young_objects_and_the_full_collection_frees_reference_cycles(
        monkeypatch: pytest.MonkeyPatch) -> None:
    source = PrometheusSource(url="http://store.invalid:9090")
    central = CentralDiagnoser(load_settings(None, {"prometheus": source.model_dump()}), source)
    kept: list[Any] = []
    garbage: list[weakref.ref[_Node]] = []
    during: list[bool] = []

    async def cycle(now: float | None) -> CycleStats:
        during.append(gc.isenabled())
        kept.extend({"survivor": i} for i in range(5000))  # what a cycle leaves: new states and windows
        a, b = _Node(), _Node()
        a.other, b.other = b, a  # a reference cycle, garbage as the cycle ends
        garbage.append(weakref.ref(a))
        return CycleStats()

    monkeypatch.setattr(central, "_cycle", cycle)
    monkeypatch.setattr(central_module, "FULL_COLLECTION_CYCLES", 3)
    assert gc.isenabled()
    for _ in range(2):
        asyncio.run(central.cycle(now=0.0))
        assert gc.isenabled() and gc.get_count()[0] < 700  # the survivors are not left for a young collection
    assert during == [False, False]
    gc.disable()  # no automatic collection in between: only the cycle's own full one
    try:
        assert all(ref() is not None for ref in garbage)  # unexamined: the reference cycles still there
        gc.enable()
        asyncio.run(central.cycle(now=0.0))  # the third: a full collection
        assert all(ref() is None for ref in garbage) and gc.isenabled()
    finally:
        gc.enable()
