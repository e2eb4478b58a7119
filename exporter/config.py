"""Configuration: one pydantic-settings model, from a YAML file, then VLLM_DIAG_* env, then flags.

Invalid configuration fails at start with one line per bad field: where the value came from
(``FILE:LINE:COL``, the environment variable or the flag), its dotted location and the reason.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, YamlConfigSettingsSource

from exporter.catalog import thresholds as threshold_catalog
from exporter.promsource.settings import PrometheusSource

# 9100-9999 is fully allocated on Prometheus' default-port wiki page; this port is the project's own pick.
DEFAULT_PORT = 9863
DEFAULT_LISTEN = f"0.0.0.0:{DEFAULT_PORT}"
_NAME = re.compile(r"^[A-Za-z0-9*?][A-Za-z0-9_.:*?-]{0,62}$")  # * and ?: a pattern for --prometheus targets


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EngineFacts(_Strict):
    """Engine facts: configured here (always wins) or discovered (exporter/facts); rules needing an
    unknown fact abstain."""

    max_num_batched_tokens: int | None = Field(default=None, gt=0)
    max_num_seqs: int | None = Field(default=None, gt=0)
    tensor_parallel_size: int | None = Field(default=None, gt=0)
    pipeline_parallel_size: int | None = Field(default=None, gt=0)
    data_parallel_size: int | None = Field(default=None, gt=0)
    gpu: str | None = None
    cpu_cores: float | None = Field(default=None, gt=0)
    # Weights of the served model (all GPUs together); with ``gpu`` it tells whether TP/PP was needed
    # for the model to fit or only added for KV room (G).
    model_weight_bytes: float | None = Field(default=None, gt=0)
    max_model_len: int | None = Field(default=None, gt=0)
    block_size: int | None = Field(default=None, gt=0)
    num_gpu_blocks: int | None = Field(default=None, gt=0)
    kv_cache_memory_bytes: int | None = Field(default=None, gt=0)
    kv_cache_size_tokens: int | None = Field(default=None, gt=0)
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    kv_cache_dtype: str | None = None
    dtype: str | None = None
    performance_mode: str | None = None
    model: str | None = None
    # --speculative-config: its drafter and draft tokens per step (None: not known; the spec-decode
    # counters on /metrics tell whether speculation is on)
    speculative_method: str | None = None
    num_speculative_tokens: int | None = Field(default=None, gt=0)
    # --kv-transfer-config: its connector, role and load-failure policy; --kv-offloading-size/-backend (None: not
    # known; the connector's families and vllm:num_requests_kv_fetch_by_stage on /metrics tell a consumer too)
    kv_connector: str | None = None
    kv_role: str | None = None
    kv_load_failure_policy: str | None = None
    kv_offloading_size: float | None = Field(default=None, gt=0)
    kv_offloading_backend: str | None = None
    # LoRA (--enable-lora, --max-loras, --max-lora-rank) and sleep mode (--enable-sleep-mode); vLLM's
    # lora_requests_info gauge carries max_lora too.
    enable_lora: bool | None = None
    max_loras: int | None = Field(default=None, gt=0)
    max_lora_rank: int | None = Field(default=None, gt=0)
    enable_sleep_mode: bool | None = None
    vllm_version: str | None = None
    platform: str | None = None


class CpuSource(_Strict):
    """Where the sidecar can see the vLLM processes: exactly one of pid, cgroup or match."""

    pid: int | None = Field(default=None, gt=0)
    cgroup: str | None = None
    match: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _exactly_one(self) -> CpuSource:
        given = [k for k in ("pid", "cgroup", "match") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of pid, cgroup or match")
        return self


def redact(url: str, mark: str | None = "***") -> str:
    """The URL without its credentials: ``mark@`` in their place for logs and pages, or nothing with ``mark``
    None (a URL to request, whose credentials travel in a header). The one place credentials are stripped."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=host if mark is None else f"{mark}@{host}"))


def _check_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{value!r} is not an http(s) URL")
    return value


# SLOs are judged over a rolling period of this many days (the SRE workbook's 30): the error budget
# is (1 - target) of the period's events, and the burn-rate alerts' factors (14.4, 6, 1) are read
# against it.
SLO_PERIOD_DAYS = 30


class Objective(_Strict):
    """A latency objective: the share ``target`` of events complete within ``threshold_seconds``.

    Events are vLLM's histogram observations (first tokens for TTFT, token gaps for ITL), counted
    from the bucket whose upper edge is the threshold, so the threshold should be a bucket edge of
    the engine's histogram (the sidecar says so at runtime when it is not).
    """

    threshold_seconds: float = Field(gt=0)
    target: float = Field(gt=0, lt=1)

    @property
    def error_budget(self) -> float:
        """The share of events allowed over the threshold."""
        return 1.0 - self.target


class Availability(_Strict):
    """Finished requests that did not fail (finished_reason error or abort) or get rejected at admission."""

    target: float = Field(default=0.999, gt=0, lt=1)

    @property
    def error_budget(self) -> float:
        return 1.0 - self.target


# Defaults: TTFT and ITL thresholds sit on vLLM's default bucket edges (2.5 s, 0.1 s), so the share
# of good events is counted exactly, never interpolated inside a bucket.
DEFAULT_OBJECTIVES: Mapping[str, Objective] = {
    "ttft": Objective(threshold_seconds=2.5, target=0.99),
    "itl": Objective(threshold_seconds=0.1, target=0.99),
}
# The form before objectives had targets: a p95 objective, i.e. target 0.95 at that threshold.
LEGACY_SLO_KEYS: Mapping[str, str] = {"ttft_p95_seconds": "ttft", "itl_p95_seconds": "itl"}
LEGACY_TARGET = 0.95


class Slo(_Strict):
    """The deployment's objectives: TTFT and ITL latency, and availability, over SLO_PERIOD_DAYS."""

    ttft: Objective = DEFAULT_OBJECTIVES["ttft"]
    itl: Objective = DEFAULT_OBJECTIVES["itl"]
    availability: Availability = Availability()

    @model_validator(mode="before")
    @classmethod
    def _legacy_and_partial(cls, data: Any) -> Any:
        """``ttft_p95_seconds: X`` is ``ttft: {threshold_seconds: X, target: 0.95}``; an objective
        given in part takes the rest from its default."""
        if not isinstance(data, Mapping):
            return data
        out = dict(data)
        for legacy, name in LEGACY_SLO_KEYS.items():
            if legacy in out:
                if name in out:
                    raise ValueError(f"give either {legacy} or {name}, not both")
                out[name] = {"threshold_seconds": out.pop(legacy), "target": LEGACY_TARGET}
        for name, default in DEFAULT_OBJECTIVES.items():
            given = out.get(name)
            if isinstance(given, Mapping):
                out[name] = {**default.model_dump(), **given}
        return out

    def objectives(self) -> dict[str, Objective]:
        """The latency objectives by name (``ttft``, ``itl``)."""
        return {"ttft": self.ttft, "itl": self.itl}


class RecordRetention(_Strict):
    """How much of a target's record_dir to keep; the oldest captures go first."""

    max_age_seconds: float = Field(default=86400.0, gt=0, description="drop captures scraped longer ago than this")
    max_bytes: int = Field(default=1024 ** 3, gt=0, description="keep this target's captures under this many bytes")


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
    discover: bool = Field(default=True, description="read vLLM's command line and HTTP API for engine facts")
    cpu: CpuSource | None = None
    dcgm_url: str | None = None
    record_dir: Path | None = Field(default=None, description="save every raw scrape here, for offline diagnose "
                                                             "(and the advisor's kept window, NAME.advisor.json)")
    record_retention: RecordRetention = Field(default_factory=RecordRetention,
                                              description="what record_dir keeps: one day, under 1 GiB, by default")
    max_series_per_family: int = Field(default=2000, gt=0,
                                       description="cardinality cap: series beyond it are dropped and counted")
    slo: Slo | None = Field(default=None, description="this target's objectives; the global slo when unset")
    step_profile: Path | None = Field(default=None, description="the engine's step cost from `vllm-diag profile` "
                                      "(the advisor uses it where a window does not identify the split)")

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
            raise ValueError("use 1-63 characters of letters, digits, '_', '.', ':' or '-' "
                             "(with --prometheus, * and ? make it a pattern over the discovered targets)")
        return value

    @field_validator("url", "dcgm_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return None if value is None else _check_url(value)

    @property
    def safe_url(self) -> str:
        return redact(self.url)

    @model_validator(mode="after")
    def _timeout_fits(self) -> Target:
        if self.timeout > self.scrape_interval:
            raise ValueError(f"timeout {self.timeout:g}s exceeds scrape_interval {self.scrape_interval:g}s")
        return self


# The sidecar's what-if advisor (exporter/advisor/worker.py). While a symptom lasts, the advice a
# target publishes is never older than ADVICE_MAX_AGE_SECONDS (older advice is withdrawn); the worker
# looks for targets due every ADVISOR_TICK_SECONDS and spends at most ADVISOR_CORE_SHARE of a core per
# symptomatic target (its CPU budget per run is that share of the interval).
ADVICE_MAX_AGE_SECONDS = 600.0
ADVISOR_TICK_SECONDS = 15.0
ADVISOR_CORE_SHARE = 0.01
ADVISOR_MIN_INTERVAL_SECONDS = 60.0
ADVISOR_RUN_SECONDS = 30.0  # what one run may take, wall time, on a loaded machine
ADVISOR_MAX_INTERVAL_SECONDS = ADVICE_MAX_AGE_SECONDS - ADVISOR_TICK_SECONDS - ADVISOR_RUN_SECONDS


class Advisor(_Strict):
    """The what-if advisor in the sidecar: on while a symptom is active, nothing while healthy."""

    enabled: bool = Field(default=True, description="run the what-if advisor for targets with an active symptom")
    interval: float = Field(default=540.0, description="seconds between two advice runs of one symptomatic "
                            f"target ({ADVISOR_MIN_INTERVAL_SECONDS:g}-{ADVISOR_MAX_INTERVAL_SECONDS:g}: "
                            f"advice is never older than {ADVICE_MAX_AGE_SECONDS:g} s)")

    @field_validator("interval")
    @classmethod
    def _interval(cls, value: float) -> float:
        # A run starts at most one tick after it is due and takes up to its CPU budget (a share of the
        # interval): the advice must be replaced before it is ADVICE_MAX_AGE_SECONDS old.
        if not ADVISOR_MIN_INTERVAL_SECONDS <= value <= ADVISOR_MAX_INTERVAL_SECONDS:
            raise ValueError(f"advisor.interval {value:g} s: use {ADVISOR_MIN_INTERVAL_SECONDS:g}-"
                             f"{ADVISOR_MAX_INTERVAL_SECONDS:g} s (advice while a symptom lasts must never be older "
                             f"than {ADVICE_MAX_AGE_SECONDS:g} s; a run starts up to {ADVISOR_TICK_SECONDS:g} s after "
                             f"it is due and may take {ADVISOR_RUN_SECONDS:g} s)")
        return value

    @property
    def cpu_budget_seconds(self) -> float:
        """CPU time one run may spend on one target: ADVISOR_CORE_SHARE of a core over the interval."""
        return ADVISOR_CORE_SHARE * self.interval


_YAML_FILE: ContextVar[Path | None] = ContextVar("vllm_diag_yaml_file", default=None)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="VLLM_DIAG_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    listen: str = DEFAULT_LISTEN
    window_seconds: float = Field(default=180.0, gt=0)
    slo: Slo = Slo()
    thresholds: dict[str, float] = Field(default_factory=dict)
    targets: list[Target] = Field(default_factory=list)
    log_level: str = "INFO"
    web_config_file: Path | None = Field(default=None, description="exporter-toolkit web config: TLS, basic auth")
    runbook_base_url: str | None = Field(default=None, description="where the page links runbooks: "
                                         "<base>/<alertname lowercased>.md (default: the alert rules' base)")
    prometheus: PrometheusSource | None = Field(default=None, description="diagnose from a Prometheus-compatible "
                                                "store instead of scraping (serve/diagnose --prometheus)")
    advisor: Advisor = Field(default_factory=Advisor, description="the what-if advisor in the sidecar: "
                             "enabled, interval (seconds); it runs only while a symptom is active")

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
        checked = {k: threshold_catalog.validate(k, v) for k, v in value.items()}
        problems = threshold_catalog.check_consistency({**threshold_catalog.DEFAULTS, **checked})
        if problems:
            raise ValueError("; ".join(problems))
        return checked

    @field_validator("log_level")
    @classmethod
    def _level(cls, value: str) -> str:
        if value.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ValueError("use DEBUG, INFO, WARNING or ERROR")
        return value.upper()

    @model_validator(mode="after")
    def _targets(self) -> Settings:
        names = [t.name for t in self.targets]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate target names: {', '.join(duplicates)}")
        patterns = sorted(n for n in names if any(c in n for c in "*?"))
        if patterns and self.prometheus is None:
            # A scraped target's name labels its series: a pattern there would be a literal '*'.
            raise ValueError(f"target names with * or ? are patterns over the targets of --prometheus; "
                             f"without it, name each target: {', '.join(patterns)}")
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
        return Slo.model_validate({**self.slo.model_dump(), **target.slo.model_dump(exclude_unset=True)})

    def resolved_thresholds(self) -> threshold_catalog.Thresholds:
        return threshold_catalog.Thresholds.of(self.thresholds)

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


def load_settings(config_file: str | Path | None = None, overrides: Mapping[str, Any] | None = None,
                  origins: Mapping[str, str] | None = None) -> Settings:
    """Build settings from file, environment and flag overrides; raise ConfigError on bad input.

    Each error line names where the bad value came from: ``origins`` maps a dotted location
    (``"listen"``, ``"targets"``) to the flag that set it, else the environment variable, else
    ``FILE:LINE:COLUMN`` in the YAML file.
    """
    path = Path(config_file) if config_file is not None else None
    if path is not None and not path.is_file():
        raise ConfigError([f"{path}: no such configuration file"])
    tree = _yaml_tree(path) if path is not None else None
    token = _YAML_FILE.set(path)
    try:
        return Settings(**dict(overrides or {}))
    except ValidationError as exc:
        lines = []
        for error in exc.errors():
            location = ".".join(str(part) for part in error["loc"]) or "config"
            message = error["msg"].removeprefix("Value error, ")
            flag = _flag(error["loc"], origins or {})
            if flag is not None:  # the user typed a flag: name it, not the internal field it fills
                lines.append(f"{flag}: {message}")
            else:
                lines.append(f"{_origin(error['loc'], error['type'], path, tree)}{location}: {message}")
        raise ConfigError(lines) from None
    except (OSError, ValueError) as exc:  # unreadable file
        raise ConfigError([f"{path}: {exc}"]) from None
    finally:
        _YAML_FILE.reset(token)


def _yaml_tree(path: Path) -> yaml.Node | None:
    """The YAML file's node tree (for line and column of each field); one-line errors for bad YAML."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"{path}: cannot read: {exc}"]) from None
    try:
        tree = yaml.compose(text, Loader=yaml.SafeLoader)
        yaml.safe_load(text)  # composes, but also catches bad tags and values
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = " ".join(part for part in (exc.context, exc.problem) if part)
        raise ConfigError([f"{where}: invalid YAML: {problem}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: invalid YAML: {' '.join(str(exc).split())}"]) from None
    if tree is not None and not isinstance(tree, yaml.MappingNode):
        kind = "a list" if isinstance(tree, yaml.SequenceNode) else f"the single value {tree.value!r}"
        raise ConfigError([f"{path}:{tree.start_mark.line + 1}:{tree.start_mark.column + 1}: expected a mapping "
                           f"of settings (listen, window_seconds, slo, targets, ...), found {kind}"])
    return tree


def _flag(loc: tuple[Any, ...], origins: Mapping[str, str]) -> str | None:
    """The flag that set the value at ``loc`` (or one of its parents), if any."""
    parts = [str(part) for part in loc]
    for end in range(len(parts), 0, -1):
        flag = origins.get(".".join(parts[:end]))
        if flag is not None:
            return flag
    return None


def _origin(loc: tuple[Any, ...], kind: str, path: Path | None, tree: yaml.Node | None) -> str:
    """Where a bad value came from, as a prefix: its environment variable, else FILE:LINE:COL."""
    parts = [str(part) for part in loc]
    environ = {name.upper() for name in os.environ}
    for end in range(len(parts), 0, -1):  # the environment overrides the file, as the sources' priority says
        name = "VLLM_DIAG_" + "__".join(parts[:end]).upper()
        if name in environ:
            return f"{name}: "
    if path is None or tree is None:
        return ""
    node, key_node = _locate(tree, parts)
    # A missing or unknown field points at its key (or parent); a bad value points at the value.
    mark = (key_node if key_node is not None and kind in ("extra_forbidden", "missing") else node).start_mark
    return f"{path}:{mark.line + 1}:{mark.column + 1}: "


def _locate(tree: yaml.Node, parts: list[str]) -> tuple[yaml.Node, yaml.Node | None]:
    """The deepest node along ``parts`` (and the key node naming it), for an error's position."""
    node, key_node = tree, None
    for part in parts:
        found: tuple[yaml.Node | None, yaml.Node] | None  # (key node, value node)
        if isinstance(node, yaml.MappingNode):
            found = next(((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == part), None)
        elif isinstance(node, yaml.SequenceNode) and part.isdigit() and int(part) < len(node.value):
            found = (None, node.value[int(part)])
        else:
            found = None
        if found is None:
            break
        key_node, node = found
    return node, key_node
