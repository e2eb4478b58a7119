"""``exporter.frozen.replace`` gives what ``dataclasses.replace`` gives, for every frozen dataclass the evaluation
copies and for the kinds it leaves to ``dataclasses.replace``."""

from __future__ import annotations

import dataclasses
from dataclasses import InitVar, dataclass, field

import pytest

from exporter import frozen, state
from exporter.diagnosis.rules import Finding
from exporter.signals import model
from exporter.state import ScrapeHealth, Verdict

COPIED = [cls for module in (model, state) for cls in vars(module).values()
          if isinstance(cls, type) and dataclasses.is_dataclass(cls) and cls.__module__ == module.__name__]


def _sample(cls: type) -> object:
    """An instance with a distinct value in every field (objects, not just defaults)."""
    return cls(**{f.name: [f.name] for f in dataclasses.fields(cls)})


@pytest.mark.parametrize("cls", COPIED, ids=lambda cls: cls.__name__)
def test_every_field_copied_and_each_change_set(cls: type) -> None:
    obj = _sample(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for name in (names[0], names[-1]):
        mine, theirs = frozen.replace(obj, **{name: ("changed",)}), dataclasses.replace(obj, **{name: ("changed",)})
        assert type(mine) is cls and mine is not obj
        assert [getattr(mine, n) for n in names] == [getattr(theirs, n) for n in names]
        assert all(getattr(mine, n) is getattr(obj, n) for n in names if n != name)  # the same objects, as replace
    assert [getattr(frozen.replace(obj), n) for n in names] == [getattr(obj, n) for n in names]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(frozen.replace(obj, **{names[0]: 1}), names[0], 2)


def test_the_evaluations_copies_take_the_slot_path() -> None:
    for cls in (ScrapeHealth, Verdict, model.Latency, model.Signals, state.TargetState):
        frozen.replace(_sample(cls))
        assert frozen._PLANS[cls] is not None, cls


@dataclass(frozen=True)
class _Checked:
    a: int
    b: int = 0

    def __post_init__(self) -> None:
        if self.a < 0:
            raise ValueError("a < 0")


@dataclass(frozen=True, slots=True)
class _WithInitVar:
    a: int
    scale: InitVar[int] = 1
    b: int = field(init=False, default=0)


def test_what_the_slot_path_cannot_vouch_for_goes_through_dataclasses_replace() -> None:
    with pytest.raises(ValueError, match="a < 0"):  # __post_init__ runs
        frozen.replace(_Checked(1), a=-1)
    assert frozen._PLANS[_Checked] is None
    with pytest.raises(ValueError, match="init=False"):
        frozen.replace(_WithInitVar(1), b=2)
    assert frozen._PLANS[_WithInitVar] is None
    with pytest.raises(TypeError):  # a change naming no field
        frozen.replace(ScrapeHealth(), nothing=1)
    found = Finding("A1", 0.5, ("x",))
    assert frozen.replace(found, strength=0.7) == dataclasses.replace(found, strength=0.7)
