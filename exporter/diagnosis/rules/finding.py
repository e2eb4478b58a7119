"""What a rule returns (``Finding``), what it reads (``Context``), and the words its evidence is written in.

A rule fires (with a strength 0..1 and evidence carrying the numbers), clears, or abstains (naming what it
lacked). A fired finding may be *informational*: shown, never a verdict or an alert. ``@rule`` registers a
cause's function under its catalog id (``exporter.catalog.symptoms``); ``exporter.diagnosis.rules`` runs
them in the catalog's order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import wraps
from typing import Any, Literal, TypeVar

from exporter.catalog.symptoms import CAUSE_BY_ID
from exporter.catalog.thresholds import Thresholds
from exporter.config import EngineFacts, Slo
from exporter.frozen import replace
from exporter.signals import Signals

_F = TypeVar("_F", bound=Callable[..., "Finding"])
_T = TypeVar("_T")


Status = Literal["fired", "clear", "abstain"]


@dataclass(frozen=True, slots=True)
class Finding:
    status: Status
    strength: float = 0.0
    evidence: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    informational: bool = False  # shown as a finding; never counts towards a layer score or an alert
    # The cause's own evidence has ended (none over the recent_evaluations horizon) while its effect is still
    # in the window: the finding holds its layer, marked recovering, until the effect leaves the window.
    recovering: bool = False
    # Objectives this finding explains beyond those of its symptom class (EXPLAINED_BY): F/F6 claim the token
    # gaps held by the prefill of the prefixes they miss, where they show that cost.
    explains: frozenset[str] = frozenset()
    # Knobs of the cause's actions a witness showed are not the lever here: withheld, with a note.
    withheld: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Context:
    signals: Signals
    facts: EngineFacts
    thresholds: Thresholds
    slo: Slo
    # What several rules start from (the objectives as breaches, the B rules' gate, ...), worked out once per
    # evaluation by ``per_context``: each is a pure function of the context, as a rule is.
    memo: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)


def per_context(function: Callable[[Context], _T]) -> Callable[[Context], _T]:
    """``function(ctx)`` worked out once per context, however many rules read it."""
    @wraps(function)
    def once(ctx: Context) -> _T:
        memo = ctx.memo
        if function in memo:
            return memo[function]
        value = memo[function] = function(ctx)
        return value
    return once


def fired(strength: float, *evidence: str) -> Finding:
    return Finding("fired", max(0.0, min(1.0, strength)), tuple(evidence))


def info(ctx: Context, *evidence: str) -> Finding:
    """A finding worth showing that has no user-visible effect behind it (capacity, saturation)."""
    return Finding("fired", ctx.thresholds.info_strength, tuple(evidence), informational=True)


def recovering(finding: Finding, evidence: str) -> Finding:
    """The finding of a cause that has ended, whose effect the window still holds."""
    return replace(finding, recovering=True, evidence=(*finding.evidence, evidence))


def clear(*evidence: str) -> Finding:
    return Finding("clear", 0.0, tuple(evidence))


def abstain(*missing: str) -> Finding:
    return Finding("abstain", 0.0, (), tuple(missing))


def unknown_fact(name: str) -> str:
    """What to do about an engine fact neither configured nor discovered (vLLM does not export it)."""
    return (f"engine.{name} (not on /metrics: configure it, or run the sidecar in vLLM's PID namespace "
            "so it reads vLLM's command line)")


def excess(value: float, threshold: float, full: float) -> float:
    """0 at threshold, 1 at full (either direction)."""
    if full == threshold:
        return 1.0
    return max(0.0, min(1.0, (value - threshold) / (full - threshold)))


def pct(value: float) -> str:
    return f"{value * 100:.0f}%"


def seconds(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def recent_horizon(ctx: Context) -> str:
    return f"the last {ctx.thresholds.recent_evaluations:g} scrapes"


Rule = Callable[[Context], Finding]
ExplainingRule = Callable[[Context, Mapping[str, Finding]], Finding]
# Filled by @rule and @explaining_rule as the class modules load; exporter.diagnosis.rules orders them.
REGISTERED: dict[str, Rule] = {}
REGISTERED_EXPLAINING: dict[str, ExplainingRule] = {}


def _register(cause: str, registry: dict[str, _F], function: _F) -> _F:
    if cause not in CAUSE_BY_ID:
        raise LookupError(f"rule for {cause}: no such cause in exporter/catalog/symptoms.py (add its entry there)")
    if cause in REGISTERED or cause in REGISTERED_EXPLAINING:
        raise LookupError(f"two rules for cause {cause}")
    registry[cause] = function
    return function


def rule(cause: str) -> Callable[[Rule], Rule]:
    """Register the function deciding ``cause`` (its id in the catalog, which holds its title, layer, symptom,
    actions and their costs); it reads the window's signals and the target's facts and nothing else."""
    return lambda function: _register(cause, REGISTERED, function)


def explaining_rule(cause: str) -> Callable[[ExplainingRule], ExplainingRule]:
    """Register a second-pass rule: it reads the first pass's findings as well (A0, B0)."""
    return lambda function: _register(cause, REGISTERED_EXPLAINING, function)
