"""Merge what every source said into one value per fact, by precedence, each with its source."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from pydantic import ValidationError

from exporter.config import EngineFacts
from exporter.facts import defaults as version_defaults
from exporter.facts.base import CMDLINE, CONFIG, DEFAULTS, PRECEDENCE, Fact, FactValue
from exporter.facts.catalog import FACTS

log = logging.getLogger(__name__)

Observed = Mapping[str, Mapping[str, FactValue]]  # source -> fact -> value


def configured(engine: EngineFacts) -> dict[str, FactValue]:
    """The facts the user wrote in the target's ``engine`` section."""
    return {name: value for name, value in engine.model_dump().items() if value is not None}


def resolve(engine: EngineFacts, observed: Observed) -> dict[str, Fact]:
    """One fact per name: config, then command line / vLLM config file / environment, then
    metrics and HTTP API, then the version's defaults (only when the command line was read, so
    that an absent flag is known to be absent)."""
    layers: list[tuple[str, Mapping[str, FactValue]]] = [(CONFIG, configured(engine))]
    layers += [(source, observed[source]) for source in PRECEDENCE if source in observed and source != CONFIG]
    chosen: dict[str, Fact] = {}
    for source, values in layers:
        for name, value in values.items():
            chosen.setdefault(name, Fact(value, source))
    if CMDLINE in observed:
        known = {name: fact.value for name, fact in chosen.items()}
        version = known.get("vllm_version")
        for name, value in version_defaults.defaults(str(version) if version else None, known).items():
            chosen.setdefault(name, Fact(value, DEFAULTS))
    order = {spec.name: index for index, spec in enumerate(FACTS)}
    return dict(sorted(chosen.items(), key=lambda item: order.get(item[0], len(order))))


def engine_facts(resolved: Mapping[str, Fact]) -> EngineFacts:
    """The resolved facts as the rules read them; a discovered value that fails validation is dropped."""
    values = {name: fact.value for name, fact in resolved.items() if name in EngineFacts.model_fields}
    while True:
        try:
            return EngineFacts.model_validate(values)
        except ValidationError as exc:
            bad = {str(error["loc"][0]) for error in exc.errors() if error["loc"]}
            if not bad & values.keys():
                return EngineFacts()
            for name in bad & values.keys():
                log.warning("ignoring engine fact %s=%r from %s: invalid", name, values[name], resolved[name].source)
                values.pop(name)
