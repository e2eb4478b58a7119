"""``dataclasses.replace`` for the frozen, slotted dataclasses an evaluation copies with a change (its
signals' parts, the scrape health, the target's state: about 16 copies a target and evaluation).

``dataclasses.replace`` reads every field by name into keyword arguments and calls the class, whose
frozen ``__init__`` sets each field through ``object.__setattr__``: 6-35 us a copy for these classes,
about a tenth of a central diagnoser's evaluation. Here a class that adds nothing to that (frozen, its
fields in its own slots, every one an ``__init__`` argument, no ``__post_init__``) is copied slot by
slot, the changes set over the copy: the same object ``replace`` gives. Any other class, and a change
naming no field, go through ``dataclasses.replace`` as before.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar

T = TypeVar("T")

# A class -> how its copies are made: every field's value at once, each slot's setter, and a field's setter
# by name (None: the class goes through dataclasses.replace).
_Plan = tuple[Callable[[Any], tuple[Any, ...]], tuple[Callable[[Any, Any], None], ...],
              dict[str, Callable[[Any, Any], None]]]
_PLANS: dict[type, _Plan | None] = {}


def _plan(cls: type) -> _Plan | None:
    params = getattr(cls, "__dataclass_params__", None)
    declared = getattr(cls, "__dataclass_fields__", None)
    if params is None or declared is None or not params.frozen or hasattr(cls, "__post_init__"):
        return None
    names = [f.name for f in dataclasses.fields(cls)]  # ClassVar pseudo-fields left out, as replace leaves them
    initvars = [f for f in declared.values() if repr(getattr(f, "_field_type", None)) == "_FIELD_INITVAR"]
    if len(names) < 2 or initvars or not all(f.init for f in dataclasses.fields(cls)):
        return None  # one field: attrgetter gives it bare; an InitVar or a field __init__ sets: the generic path
    members: list[Any] = [cls.__dict__.get(name) for name in names]
    if not all(type(member).__name__ == "member_descriptor" for member in members):
        return None  # a field not in this class's own slots
    setters = tuple(member.__set__ for member in members)
    return attrgetter(*names), setters, dict(zip(names, setters, strict=True))


def replace(obj: T, /, **changes: Any) -> T:
    """``dataclasses.replace(obj, **changes)``."""
    cls = type(obj)
    if cls in _PLANS:
        plan = _PLANS[cls]
    else:
        plan = _PLANS[cls] = _plan(cls)
    if plan is None or not changes.keys() <= plan[2].keys():
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    values, setters, by_name = plan
    new = object.__new__(cls)
    for setter, value in zip(setters, values(obj)):
        setter(new, value)
    for name, value in changes.items():
        by_name[name](new, value)
    return new
