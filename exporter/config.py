"""Configuration: one pydantic-settings model, from a YAML file, then VLLM_DIAG_* env, then flags.

Invalid configuration fails at start with one line per bad field (dotted location and reason).
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, YamlConfigSettingsSource

from exporter.catalog import thresholds as threshold_catalog

# 9100-9999 is fully allocated on Prometheus' default-port wiki page; this port is the project's own pick.
DEFAULT_PORT = 9863
DEFAULT_LISTEN = f"0.0.0.0:{DEFAULT_PORT}"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EngineFacts(_Strict):
    """Engine configuration vLLM does not export on /metrics; rules needing a missing fact abstain."""

    max_num_batched_tokens: int | None = Field(default=None, gt=0)
    max_num_seqs: int | None = Field(default=None, gt=0)
    tensor_parallel_size: int | None = Field(default=None, gt=0)
    pipeline_parallel_size: int | None = Field(default=None, gt=0)
    data_parallel_size: int | None = Field(default=None, gt=0)
    gpu: str | None = None
    cpu_cores: float | None = Field(default=None, gt=0)


class CpuSource(_Strict):
    """Where the sidecar can see the vLLM processes: exactly one of pid, cgroup or match."""

    pid: int | None = Field(default=None, gt=0)
    cgroup: str | None = None
    match: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _exactly_one(self) -> "CpuSource":
        given = [k for k in ("pid", "cgroup", "match") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of pid, cgroup or match")
        return self


def redact(url: str) -> str:
    """The URL without its credentials, for logs and pages."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return parts._replace(netloc=f"***@{host}").geturl()


def _check_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{value!r} is not an http(s) URL")
    return value


class Slo(_Strict):
    ttft_p95_seconds: float = Field(default=2.0, gt=0)
    itl_p95_seconds: float = Field(default=0.1, gt=0)


# Set from the downward API (metadata.name) in deploy/kubernetes: each replica's sidecar names its
# target after its own pod, so alerts of two replicas never share a `target` label.
POD_NAME_ENV = "POD_NAME"


def default_target_name(url: str) -> str:
    """The pod name where the downward API provides one, else host:port of the URL."""
    import os

    pod = os.environ.get(POD_NAME_ENV, "").strip()
    if pod:
        return pod[:63]
    parts = urlsplit(url)
    return re.sub(r"[^A-Za-z0-9_.:-]", "-", parts.netloc or url)[:63] or "vllm"


class Target(_Strict):
    name: str
    url: str
    scrape_interval: float = Field(default=5.0, gt=0, le=3600)
    timeout: float = Field(default=3.0, gt=0)
    max_bytes: int = Field(default=16 * 1024 * 1024, gt=0, description="payload cap after decompression")
    engine: EngineFacts = EngineFacts()
    cpu: CpuSource | None = None
    dcgm_url: str | None = None
    record_dir: Path | None = Field(default=None, description="save every raw scrape here, for offline diagnose")
    max_series_per_family: int = Field(default=2000, gt=0,
                                       description="cardinality cap: series beyond it are dropped and counted")
    slo: Slo | None = Field(default=None, description="this target's objectives; the global slo when unset")

    @model_validator(mode="before")
    @classmethod
    def _default_name(cls, data: Any) -> Any:
        if isinstance(data, dict) and "name" not in data and isinstance(data.get("url"), str):
            return {**data, "name": default_target_name(data["url"])}
        return data

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError("use 1-63 characters of letters, digits, '_', '.', ':' or '-'")
        return value

    @field_validator("url", "dcgm_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return None if value is None else _check_url(value)

    @property
    def safe_url(self) -> str:
        return redact(self.url)

    @model_validator(mode="after")
    def _timeout_fits(self) -> "Target":
        if self.timeout > self.scrape_interval:
            raise ValueError(f"timeout {self.timeout:g}s exceeds scrape_interval {self.scrape_interval:g}s")
        return self


_YAML_FILE: ContextVar[Path | None] = ContextVar("vllm_diag_yaml_file", default=None)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="VLLM_DIAG_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    listen: str = DEFAULT_LISTEN
    window_seconds: float = Field(default=60.0, gt=0)
    slo: Slo = Slo()
    thresholds: dict[str, float] = Field(default_factory=dict)
    targets: list[Target] = Field(default_factory=list)
    log_level: str = "INFO"
    web_config_file: Path | None = Field(default=None, description="exporter-toolkit web config: TLS, basic auth")

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        host, sep, port = value.rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{value!r} is not HOST:PORT")
        return value

    @field_validator("thresholds")
    @classmethod
    def _thresholds(cls, value: dict[str, float]) -> dict[str, float]:
        return {k: threshold_catalog.validate(k, v) for k, v in value.items()}

    @field_validator("log_level")
    @classmethod
    def _level(cls, value: str) -> str:
        if value.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ValueError("use DEBUG, INFO, WARNING or ERROR")
        return value.upper()

    @model_validator(mode="after")
    def _targets(self) -> "Settings":
        names = [t.name for t in self.targets]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate target names: {', '.join(duplicates)}")
        for target in self.targets:
            if self.window_seconds < 2 * target.scrape_interval:
                raise ValueError(
                    f"window_seconds {self.window_seconds:g} must hold at least two scrapes of "
                    f"{target.name} (scrape_interval {target.scrape_interval:g})"
                )
        return self

    @property
    def listen_host(self) -> str:
        return self.listen.rpartition(":")[0].strip("[]") or "0.0.0.0"

    @property
    def listen_port(self) -> int:
        return int(self.listen.rpartition(":")[2])

    def slo_for(self, target: Target) -> Slo:
        """The objectives the rules compare ``target`` with: its own fields over the global ones."""
        if target.slo is None:
            return self.slo
        return self.slo.model_copy(update=target.slo.model_dump(exclude_unset=True))

    def resolved_thresholds(self) -> threshold_catalog.Thresholds:
        return threshold_catalog.Thresholds(self.thresholds)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Priority left to right: flags (init kwargs) > environment > YAML file.
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        yaml_file = _YAML_FILE.get()
        if yaml_file is not None:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=yaml_file))
        return tuple(sources)


class ConfigError(ValueError):
    """Invalid configuration; ``lines`` holds one 'location: reason' per bad field."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


def target_from_url(url: str, **fields: Any) -> dict[str, Any]:
    """A target entry for ``--target URL``: named after host and port."""
    return {"name": default_target_name(url), "url": url, **fields}


def load_settings(config_file: str | Path | None = None, overrides: Mapping[str, Any] | None = None) -> Settings:
    """Build settings from file, environment and flag overrides; raise ConfigError on bad input."""
    path = Path(config_file) if config_file is not None else None
    if path is not None and not path.is_file():
        raise ConfigError([f"config: file {str(path)!r} does not exist"])
    token = _YAML_FILE.set(path)
    try:
        return Settings(**dict(overrides or {}))
    except ValidationError as exc:
        lines = []
        for error in exc.errors():
            location = ".".join(str(part) for part in error["loc"]) or "config"
            message = error["msg"].removeprefix("Value error, ")
            lines.append(f"{location}: {message}")
        raise ConfigError(lines) from None
    except (OSError, ValueError) as exc:  # unreadable or malformed YAML
        raise ConfigError([f"config: {exc}"]) from None
    finally:
        _YAML_FILE.reset(token)
