"""The small HTML page at ``/``: jinja2 with autoescaping, no external assets, self-refreshing."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from exporter.publish.text import KEY_SIGNALS, _fmt, abstentions, fact_value


@lru_cache(maxsize=1)
def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("exporter", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmt"] = _fmt
    env.filters["fact"] = fact_value
    env.globals["abstentions"] = abstentions
    return env


def render(document: dict[str, Any], refresh_seconds: int = 5) -> str:
    template = _environment().get_template("index.html.j2")
    return template.render(doc=document, refresh=refresh_seconds, key_signals=KEY_SIGNALS)
