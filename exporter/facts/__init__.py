"""Engine facts vLLM does not export, discovered per target, each with its source.

One module per source behind a small interface (node_exporter collectors): ``cmdline`` (argv of
the process serving the target's port, with its ``--config`` YAML), ``environ`` (the variables vLLM
reads a setting from), ``cache_info`` (``vllm:cache_config_info`` labels), ``http_api``
(``/v1/models``, ``/version``) and ``defaults`` (per vLLM release). ``resolve`` merges them by
precedence (the user's config always wins) into the ``EngineFacts`` the rules read.
"""

from exporter.facts.base import PRECEDENCE, Fact, NoFacts
from exporter.facts.resolve import engine_facts, resolve

__all__ = ["PRECEDENCE", "Fact", "NoFacts", "engine_facts", "resolve"]
