"""The ``prometheus:`` section of the configuration: where the series live and how to read them.

Part of the configuration layer (``exporter.config`` embeds it), so it reads nothing of the
promsource pipeline; the label-selector grammar its ``match`` field is checked with lives here and
``rebuild`` builds its queries from it.

Secrets (token, password) are ``SecretStr``: they never appear in a repr, a log line or an
error message; a ``*_file`` variant reads them from a mounted file instead of the YAML.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, FilePath, SecretStr, field_validator, model_validator

# Prometheus refuses a query_range of more than 11,000 points per series; range selectors have no
# such cap but load every sample into memory. Three hours per query keeps even a 1 s scrape at
# 10,800 points per series, under that limit, and the memory of one query small.
MAX_CHUNK_SECONDS = 3 * 3600.0

_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')


class SelectorError(ValueError):
    """The --match selector is not a label selector."""


def matchers(selector: str) -> list[str]:
    """The label matchers inside ``{...}``, each as written; the metric name is ours to choose."""
    text = selector.strip()
    if not (text.startswith("{") and text.endswith("}")):
        raise SelectorError(f"{selector!r} is not a label selector: write it like {{job=\"vllm\"}}")
    inner = text[1:-1].strip()
    found: list[str] = []
    pos = 0
    while pos < len(inner):
        match = _MATCHER.match(inner, pos)
        if match is None:
            raise SelectorError(f"{selector!r}: cannot read the matcher at {inner[pos:pos + 30]!r}")
        if match.group(1) == "__name__":
            raise SelectorError(f"{selector!r}: leave out __name__, vllm-diag selects the vLLM names itself")
        found.append(f'{match.group(1)}{match.group(2)}"{match.group(3)}"')
        pos = match.end()
    return found


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BasicAuth(_Strict):
    username: str = Field(min_length=1)
    password: SecretStr | None = None
    password_file: FilePath | None = None

    @model_validator(mode="after")
    def _one_password(self) -> BasicAuth:
        if (self.password is None) == (self.password_file is None):
            raise ValueError("give exactly one of password or password_file")
        return self


class Tls(_Strict):
    ca_file: FilePath | None = Field(default=None, description="CA bundle that signed the server's certificate")
    cert_file: FilePath | None = Field(default=None, description="client certificate (mutual TLS)")
    key_file: FilePath | None = Field(default=None, description="client key (mutual TLS)")
    insecure_skip_verify: bool = False

    @model_validator(mode="after")
    def _pair(self) -> Tls:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together")
        return self


class PrometheusSource(_Strict):
    """A Prometheus-compatible HTTP API (Prometheus, Thanos Query, Mimir, VictoriaMetrics)."""

    url: str = Field(description="base URL, with the store's path prefix (Mimir: .../prometheus)")
    match: str = Field(default="{}", description="label selector of the vLLM series, e.g. {job=\"vllm\"}")
    target_labels: tuple[str, ...] = Field(default=("instance",), min_length=1,
                                           description="labels that name one vLLM server (instance, or pod)")
    bearer_token: SecretStr | None = None
    bearer_token_file: FilePath | None = None
    basic_auth: BasicAuth | None = None
    tls: Tls = Tls()
    tenant: str | None = Field(default=None, description="X-Scope-OrgID header (Mimir, Cortex, Loki-style tenants)")
    timeout: float = Field(default=30.0, gt=0, le=600)
    interval: float = Field(default=15.0, gt=0, le=3600, description="serve: seconds between diagnosis cycles")
    max_concurrency: int = Field(default=4, gt=0, le=64, description="queries in flight at once")
    max_targets: int = Field(default=1000, gt=0, description="serve: targets beyond this are not diagnosed")
    grace_seconds: float = Field(default=300.0, ge=0, description="serve: keep a vanished target this long")
    chunk_seconds: float = Field(default=MAX_CHUNK_SECONDS, gt=0, le=MAX_CHUNK_SECONDS)
    shard: int = Field(default=0, ge=0, description="serve: this process' shard, 0..shards-1 (--shard i/N)")
    shards: int = Field(default=1, ge=1, le=4096,
                        description="serve: processes splitting the targets by hashmod of the target labels")
    staleness_seconds: float = Field(default=300.0, gt=0,
                                     description="no sample for this long: the target reads as down (Prometheus' "
                                                 "lookback is 5 min)")

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"{value!r} is not an http(s) URL")
        return value

    @field_validator("match")
    @classmethod
    def _match(cls, value: str) -> str:
        try:
            matchers(value)
        except SelectorError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("target_labels")
    @classmethod
    def _labels(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for label in value:
            if not label.replace("_", "a").isalnum() or label[0].isdigit() or label == "__name__":
                raise ValueError(f"{label!r} is not a label name")
        return value

    @model_validator(mode="after")
    def _shard(self) -> PrometheusSource:
        if self.shard >= self.shards:
            raise ValueError(f"shard {self.shard} of {self.shards}: shards are numbered 0..{self.shards - 1}")
        return self

    @model_validator(mode="after")
    def _one_auth(self) -> PrometheusSource:
        given = [name for name in ("bearer_token", "bearer_token_file", "basic_auth") if getattr(self, name)]
        if len(given) > 1:
            raise ValueError(f"give one way to authenticate, not {' and '.join(given)}")
        return self
