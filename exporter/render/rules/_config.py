"""The rules' ``_config``: file names, selectors, ``for:`` durations and the render options.

Every alert family (``slo_pages``, ``symptoms``, ``ops``, ``inputs``) and the recording rules read
their job names, label sets and durations from here, kubernetes-mixin style: what a deployment may
change at render time is ``Options`` (`vllm-diag render rules --config/--sidecar-job/--severity-labels/
--runbook-url/--raw-only`); the rest is declared once with the reason for its value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from exporter.catalog import buckets
from exporter.catalog.symptoms import RUNBOOK_BASE_URL
from exporter.catalog.thresholds import DEFAULTS
from exporter.config import Settings, Slo
from exporter.render import slo

# ---------------------------------------------------------------------------------------------
# Settings (declared once; each says what it controls)
# ---------------------------------------------------------------------------------------------

ALERTS_FILE = "alert_rules/vllm-diag-alerts.yml"
RECORDING_FILE = "alert_rules/vllm-diag-recording.yml"
RAW_ALERTS_FILE = "alert_rules/vllm-diag-raw-alerts.yml"
ALERTMANAGER_FILE = "deploy/alertmanager/alertmanager.yml"
ALERTMANAGER_CONFIG_FILE = "deploy/kubernetes/alertmanagerconfig.yaml"

RUNBOOK_DIR = "docs/runbooks"

# Rate window of the recording rules: 5m spans >= 4 scrapes at Prometheus' common 15-60 s
# intervals, so rate() survives one missed scrape. It is part of the rule names (`:rate5m`).
RATE_WINDOW = "5m"

# Labels that tell one replica's alerts from another's: Kubernetes ServiceMonitors add namespace and
# pod, static configs add instance; `target` is the sidecar's name for the vLLM it watches (the pod
# name by default in deploy/kubernetes). Every join keeps them, and Alertmanager's inhibition
# `equal` and `group_by` include them, so one replica's alerts never silence or merge with another's.
# (A label absent on both sides compares equal in Alertmanager and in `on (...)`.)
IDENTITY: tuple[str, ...] = ("namespace", "pod", "instance", "job", "target")
INHIBIT_EQUAL: tuple[str, ...] = ("namespace", "pod", "instance", "target")
# A model is (cluster, namespace, model_name): pages group on it, so a fleet-wide problem on N replicas
# is one notification; tickets and context also split by alert name.
MODEL_EQUAL: tuple[str, ...] = slo.MODEL_LABELS
PAGE_GROUP_BY: tuple[str, ...] = slo.MODEL_LABELS
GROUP_BY: tuple[str, ...] = ("alertname", *slo.MODEL_LABELS)

# Severities (kube-prometheus-stack / most routing trees): critical pages, warning tickets, info is
# context. `render rules --severity-labels critical=P1,...` renames them at render time.
SEVERITIES: tuple[str, ...] = ("critical", "warning", "info")

# `for:` durations. Chosen from the streaks measured on the simulator's scenarios (docs/alerting.md,
# tests/e2e/test_alert_matrix.py prints them): the smoothed symptom condition of each symptom's own
# scenario holds for 14-25 minutes without a break, its shortest streak on the scenarios expected to
# show the symptom is >= 8 minutes, and on the healthy-like scenarios it never holds at all. So `for:`
# only has to outlast evaluation jitter and short bursts, not the flapping of the raw 0/1 gauge.
# Symptoms wait 5 minutes longer than the root causes that explain them (FOR_ROOT_CAUSE): a root
# cause's 5m average crosses its bar up to ~3 minutes after the symptoms' 10m share does (case 3:
# 4.3 vs 1.5 min), and it must reach Alertmanager first to inhibit them. 10m still fires well inside
# the shortest expected streak (14.9 min at the shipped window).
FOR_SYMPTOM: Mapping[str, str] = {"critical": "10m", "warning": "10m", "info": "15m"}
# Root-cause alerts are warnings that name the layer (the page is the model's burn, which carries
# the cause itself), so they need not race the symptoms: 5m, like the symptoms, outlasts a burst.
FOR_ROOT_CAUSE = "5m"
# Burn-rate pages: the windows already demand a sustained burn (a 3-minute burst at 50 % bad spends
# 2.5 % of an hour: 2.5x, far below 14.4x); `for` only rides out one evaluation's jitter.
FOR_BURN = "2m"
FOR_BURN_SLOW = "30m"
# A low-traffic model: its bad share over 30 minutes needs >= 15 minutes of mostly bad events to cross
# half; 5 more minutes ride out a short run of slow requests among few.
FOR_LOW_TRAFFIC = "5m"
# A stalled engine: running requests and no token in STALL_WINDOW, for one more minute.
STALL_WINDOW = "5m"
FOR_STALLED = "1m"
# kube-prometheus' TargetDown: a share of the targets down for 10 minutes is a warning.
FOR_TARGETS_DOWN = "10m"
# A model in the inventory with no ready replica for 5 minutes pages: long enough for a pod to be
# replaced, short enough to page within 15 minutes of the last replica going away.
FOR_MODEL_DOWN = "5m"
# How long the inventory remembers a model that served (and so how long a vanished one pages).
INVENTORY_WINDOW = "3d"
# An input a cause alert needs, missing this long, is a warning (a rename after an upgrade).
FOR_INPUT_MISSING = "30m"
ERRORS_WINDOW = "15m"
# Engine faults the objectives cannot see or name (rules/faults.py). A corrupted answer pages for as
# long as the window still holds it (one request with NaNs in its logits is a wrong answer, so no
# minimum); `for` rides out one evaluation. KV transfer failures count over the same window against
# the catalog's minimum count and share, so a lone failed handshake after a peer restart stays quiet.
FAULT_WINDOW = "15m"
FOR_CORRUPTED = "1m"
FOR_TRANSFER_FAILING = "5m"


def smoothing(o: Options) -> str:
    """The range root-cause conditions average the sidecar's gauges over, the symptoms' one
    (`alert_smoothing_seconds`): preemptions come in bursts and the per-window ratio dips between
    them, and a root cause that resolved between bursts would lift its inhibition (no rule relies
    on keep_firing_for to bridge that)."""
    return duration(o.thresholds["alert_smoothing_seconds"])
# One replica down: context that inhibits its stale alerts (not a page).
FOR_TARGET_DOWN = "3m"
FOR_OPERATIONS = "10m"

# The Prometheus job that scrapes the sidecar itself (`render rules --sidecar-job NAME`). Exact: a
# Prometheus that loads these rules but scrapes no sidecar must not alert about one.
SIDECAR_JOB = "vllm-diag"



def duration(seconds: float) -> str:
    """Seconds as a Prometheus duration: 900 -> 15m, 90 -> 90s."""
    seconds = int(round(seconds))
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@dataclass(frozen=True, slots=True)
class Options:
    """What a deployment may change at render time (`vllm-diag render rules --config FILE ...`)."""

    slo: Slo = Slo()
    thresholds: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULTS))
    sidecar_job: str = SIDECAR_JOB
    # Where runbook_url points (`render rules --runbook-url BASE`): BASE/<alertname lowercase>.md.
    runbook_base_url: str = RUNBOOK_BASE_URL
    # False: a fleet Prometheus scrapes without vllm-diag sidecars (`render rules --raw-only`): no
    # alert about a missing sidecar.
    sidecars: bool = True
    severity_labels: Mapping[str, str] = field(default_factory=lambda: {s: s for s in SEVERITIES})

    # The engines' histogram edges per --custom-histogram-buckets family (vLLM's defaults unless the
    # deployment replaced a family): every objective's threshold must be one of them.
    histogram_edges: Mapping[str, tuple[float, ...]] = field(default_factory=lambda: dict(buckets.DEFAULT_EDGES))

    def __post_init__(self) -> None:
        problems = slo.off_edge_thresholds(self.slo, self.histogram_edges)
        if problems:
            raise ValueError("; ".join(problems))

    @classmethod
    def from_settings(cls, settings: Settings, **extra: Any) -> Options:
        return cls(slo=settings.slo, thresholds=settings.resolved_thresholds().as_dict(), **extra)

    def severity(self, name: str) -> str:
        return self.severity_labels[name]


DEFAULT_OPTIONS = Options()
T = DEFAULTS  # catalog threshold defaults by key (runbook texts read the defaults)


def _on(*extra: str) -> str:
    return f"on ({', '.join((*IDENTITY, *extra))})"



def _indent(text: str, prefix: str = "  ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


MODEL: tuple[str, ...] = slo.MODEL_LABELS
