"""Engine facts from vLLM's HTTP API next to /metrics: ``GET /v1/models`` and ``GET /version``.

Both answer without process access, so ``diagnose --url`` uses them too. With ``--api-key`` vLLM
protects /v1/*: the request is refused and max_model_len stays unknown (the key is never used).
Both are asked next to the target's /metrics: under the same path prefix when its URL has one
(``http://gateway/pool-a/metrics`` -> ``http://gateway/pool-a/v1/models``), as a vLLM behind a
path-prefix proxy (``--root-path``) serves every route.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from exporter.facts.base import MODELS_API, VERSION_API, FactValue, NoFacts
from exporter.facts.catalog import BY_NAME, convert


def _json(body: bytes) -> object:
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise NoFacts(f"not JSON ({exc.__class__.__name__})") from None


def models_facts(body: bytes) -> dict[str, FactValue]:
    """max_model_len of the served base model (LoRA adapters list a parent; skipped)."""
    data = _json(body)
    models = data.get("data") if isinstance(data, dict) else None
    if not isinstance(models, list):
        raise NoFacts("no 'data' list")
    for model in models:
        if isinstance(model, dict) and model.get("parent") is None:
            value = convert(BY_NAME["max_model_len"], model.get("max_model_len"))
            return {"max_model_len": value} if value is not None else {}
    return {}


def version_facts(body: bytes) -> dict[str, FactValue]:
    data = _json(body)
    version = data.get("version") if isinstance(data, dict) else None
    if not isinstance(version, str) or not version:
        raise NoFacts("no 'version'")
    return {"vllm_version": version}


@dataclass(frozen=True, slots=True)
class HttpFactSource:
    name: str
    path: str
    parse: Callable[[bytes], Mapping[str, FactValue]]

    def url(self, metrics_url: str) -> str:
        """The endpoint next to the target's /metrics: same scheme, host, credentials and path prefix."""
        parts = urlsplit(metrics_url)
        path = parts.path.rstrip("/")
        prefix = path[:-len("/metrics")] if path.endswith("/metrics") else ""  # another path: the API at the root
        return parts._replace(path=prefix + self.path, query="", fragment="").geturl()


HTTP_SOURCES: tuple[HttpFactSource, ...] = (
    HttpFactSource(MODELS_API, "/v1/models", models_facts),
    HttpFactSource(VERSION_API, "/version", version_facts),
)
