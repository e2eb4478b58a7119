"""The fleet experiment's HPA (lab/scaling/hpa.py) follows Kubernetes' documented algorithm."""

from __future__ import annotations

from exporter.render.scaling import DEFAULT
from lab.scaling.hpa import Hpa


def test_ratio_with_tolerance() -> None:
    hpa = Hpa(DEFAULT, target=1.0)
    assert hpa.recommend(4.3, 4) == 4  # within 10 %: no change
    assert hpa.recommend(4.5, 4) == 5  # ceil(4.5 / 1)
    assert hpa.recommend(2.1, 4) == 3


def test_scale_up_is_bounded_by_the_policies_and_max() -> None:
    hpa = Hpa(DEFAULT, target=1.0)
    assert hpa.step(0.0, 20.0, 2) == 6  # max(4 pods, 100 %) per minute from 2: +4
    assert hpa.step(15.0, 20.0, 6) == 6  # the minute's budget is spent
    assert hpa.step(60.0, 20.0, 6) == 8  # a new minute: up to max_replicas (8)


def test_scale_down_waits_for_the_stabilisation_window_and_goes_one_a_minute() -> None:
    hpa = Hpa(DEFAULT, target=1.0)
    n = hpa.step(0.0, 6.0, 6)
    for t in range(15, 300, 15):
        n = hpa.step(float(t), 2.0, n)
    assert n == 6  # the 6 of t=0 is still in the 300 s window
    n = hpa.step(315.0, 2.0, n)
    assert n == 5  # then one replica ...
    assert hpa.step(330.0, 2.0, n) == 5  # ... per minute
    assert hpa.step(375.0, 2.0, 5) == 4
