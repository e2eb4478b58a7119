"""lab.scaling.drain: the forced scale-out comes at the moment it names, through the HPA's metric, for one minute."""

from __future__ import annotations

from types import SimpleNamespace

from lab.scaling.drain import FORCE_S, _override
from lab.scaling.fleet import Experiment

X = Experiment()
END = next(e.stop_s for e in X.episodes if e.kind == "template")


def _serving(*reasons: str) -> list:
    return [SimpleNamespace(reason=r) for r in reasons]


def test_none_forces_nothing() -> None:
    assert _override("none", X, 6) is None


def test_fixed_raises_the_metric_for_a_minute_from_the_template_episodes_end() -> None:
    metric = _override("fixed", X, 6)
    assert metric is not None
    held = _serving("configuration", "configuration", "configuration")
    assert metric(END - 15.0, held, 3.0) == 3.0  # during the episode: as read
    assert metric(END, held, 3.0) == 6.0  # the repair: whatever the sidecars still say
    assert metric(END + FORCE_S - 15.0, held, 3.0) == 6.0
    assert metric(END + FORCE_S, held, 3.0) == 3.0
    assert metric(END, held, None) is None  # no metric read: the HPA keeps its count


def test_cleared_waits_for_the_first_sync_no_sidecar_holds() -> None:
    metric = _override("cleared", X, 6)
    assert metric is not None
    assert metric(END, _serving("configuration", "queue"), 3.0) == 3.0
    assert metric(END + 540.0, _serving("prefix_breakage", "queue"), 3.0) == 3.0
    assert metric(END + 555.0, _serving("queue", "queue"), 3.0) == 6.0  # the cause cleared on every replica
    assert metric(END + 600.0, _serving("configuration"), 3.0) == 6.0  # the minute runs from the first clear sync
    assert metric(END + 555.0 + FORCE_S, _serving("queue"), 3.0) == 3.0
