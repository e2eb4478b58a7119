"""lab.scaling --write: a held-out seed is recorded once; a tuning seed replaces its last score."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from lab.scaling.__main__ import _record
from lab.scaling.fleet import Experiment, Score


def _score(policy: str, burn: int, hours: float, added: int = 0) -> Score:
    return Score(policy, burn, hours, added, 3, 1, 6, [(0.0, 2)], {}, burning=list(range(burn)))


SCORES = {"queue": _score("queue", 54, 11.9, 9), "kv": _score("kv", 51, 8.9, 5),
          "diagnosis": _score("diagnosis", 50, 8.5)}


def test_a_validation_seed_is_recorded_once_and_a_tuning_seed_replaces_its_score(tmp_path: Path) -> None:
    path = tmp_path / "scaling.json"
    _record(path, replace(Experiment(), seed=2), "validation", "abc1234", SCORES)
    run = json.loads(path.read_text())["runs"][0]
    assert (run["seed"], run["split"], run["better"]) == (2, "validation", "kv")
    assert run["checks"] == {"replica_hours": True, "burn_minutes": True, "added": True, "flapping": True}
    assert sum(run["policies"]["kv"]["burn_by_episode"].values()) == 51
    with pytest.raises(SystemExit, match="validation seed 2 is spent"):
        _record(path, replace(Experiment(), seed=2), "validation", "def5678", SCORES)
    worse = {**SCORES, "diagnosis": _score("diagnosis", 60, 8.5, 1)}
    for commit in ("aaa", "bbb"):
        _record(path, replace(Experiment(), seed=0), "tuning", commit, worse)
    runs = json.loads(path.read_text())["runs"]
    assert [(r["seed"], r["commit"]) for r in runs] == [(2, "abc1234"), (0, "bbb")]
    assert runs[1]["checks"] == {"replica_hours": True, "burn_minutes": False, "added": False, "flapping": True}
