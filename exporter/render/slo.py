"""Service-level indicators and error-budget burn rates, as PromQL (the SRE workbook's method).

An objective (``exporter.config.Slo``) is a threshold and a target over ``SLO_PERIOD_DAYS``: the
share ``target`` of events must be good. Events come from vLLM's own series, so the same rules
work with or without the sidecar:

- ``ttft``: first tokens (``vllm:time_to_first_token_seconds``), good when at or below the threshold,
  read at the histogram bucket whose upper edge is the threshold (a bucket edge, never interpolated);
- ``itl``: token gaps (``vllm:inter_token_latency_seconds``, older name before 0.10.2), likewise;
- ``availability``: finished requests (``vllm:request_success_total``), bad when
  ``finished_reason`` is ``error`` or ``abort``, and requests the API server refused at its admission
  gate (``vllm:admission_rejections_total``, 0.32+, HTTP 503 at ``--max-num-queued-reqs`` or
  ``--max-num-queued-tokens``): each is an event, and a bad one. Blind spot: vLLM does not count
  requests a client cancels before its first token, nor other HTTP errors raised before the engine
  sees a request.

The burn rate is the bad share over the error budget (1 - target): 1 spends the budget exactly
over the period. Pages and tickets use the workbook's multiwindow, multi-burn-rate pairs
(``BURN_ALERTS``): a long window that measures enough of the budget, a short one (1/12 of it) that
says the burn is still going on, so the alert resets minutes after the problem ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from exporter.catalog import buckets
from exporter.catalog import metrics as vllm
from exporter.catalog.metrics import BY_NAME
from exporter.catalog.thresholds import DEFAULTS
from exporter.config import SLO_PERIOD_DAYS, Slo
from exporter.render.promql import fmt

# Recording windows: every window a burn-rate alert reads.
SLI_WINDOWS: tuple[str, ...] = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")

# Labels a per-replica SLI keeps (vLLM's data-parallel `engine` and the bucket's `le` are summed
# away) and the labels the per-model SLI keeps: a model is (cluster, namespace, model_name), where
# `cluster` is the external or target label multi-cluster setups add (absent labels group as empty).
MODEL_LABELS: tuple[str, ...] = ("cluster", "namespace", "model_name")

OBJECTIVES: tuple[str, ...] = ("ttft", "itl", "availability")
OBJECTIVE_TITLE: Mapping[str, str] = {"ttft": "TTFT", "itl": "ITL", "availability": "Availability"}
# The latency histograms by objective (canonical names; older names come from the catalog's aliases).
HISTOGRAM: Mapping[str, str] = {"ttft": vllm.TIME_TO_FIRST_TOKEN_SECONDS, "itl": vllm.INTER_TOKEN_LATENCY_SECONDS}
FINISHED = vllm.REQUEST_SUCCESS_TOTAL
FAILED_REASONS = ("error", "abort")
# Requests refused at the API server's admission gate: availability events, all bad.
REJECTED = vllm.ADMISSION_REJECTIONS_TOTAL


@dataclass(frozen=True, slots=True)
class BurnAlert:
    """One multiwindow burn-rate condition: both windows above ``factor`` x the sustainable rate."""

    severity: str  # critical pages, warning tickets
    long_window: str
    short_window: str
    factor: float
    budget_share: str  # what this burn spends, for the alert text
    for_: str = ""  # the tier's own `for` (kube-prometheus'), else its alert's

# The SRE workbook's recommended pairs for a 30-day SLO, as kube-prometheus' KubeAPIErrorBudgetBurn
# tiers them: 2 % of the budget in 1 h (14.4x) and 5 % in 6 h (6x) page; 10 % in a day (3x) and in
# 3 days (1x) are tickets. Each tier is its own rule with `long`/`short` labels saying which pair fired.
BURN_ALERTS: tuple[BurnAlert, ...] = (
    # The fast-burn factor is the catalog's burn_rate_full: the sidecar's page severity and rule
    # strength read the same number.
    BurnAlert("critical", "1h", "5m", DEFAULTS["burn_rate_full"], "2 % of the 30-day error budget in 1 hour"),
    BurnAlert("critical", "6h", "30m", 6.0, "5 % of the 30-day error budget in 6 hours"),
    # A day's window needs an hour of its pair (kube-prometheus' `for`): a short outage early in the
    # window must not open a ticket under the page it already raised.
    BurnAlert("warning", "1d", "2h", 3.0, "10 % of the 30-day error budget in 1 day", "1h"),
    BurnAlert("warning", "3d", "6h", 1.0, "10 % of the 30-day error budget in 3 days"),
)
PAGES: tuple[BurnAlert, ...] = tuple(a for a in BURN_ALERTS if a.severity == "critical")
TICKETS: tuple[BurnAlert, ...] = tuple(a for a in BURN_ALERTS if a.severity == "warning")
# Low-traffic models (under slo_min_requests events an hour): the bad share of the few events over a
# longer window, with a minimum count (the SRE workbook's advice for low-traffic services).
LOW_TRAFFIC_PAGE_WINDOW = "30m"
LOW_TRAFFIC_TICKET_WINDOW = "6h"
assert SLO_PERIOD_DAYS == 30, "the burn factors above are the workbook's for a 30-day period"


def wire_names(name: str) -> tuple[str, ...]:
    """The family's wire names, newest first (the catalog's aliases for older vLLM versions)."""
    return (name, *BY_NAME[name].aliases) if name in BY_NAME else (name,)


def le_matcher(edge: float) -> str:
    """A matcher for the bucket ``le`` label of ``edge``, as any Prometheus writes it: vLLM prints
    floats (``2.5``, ``1.0``), Prometheus 3 normalises them on ingestion (``1``)."""
    forms = dict.fromkeys((repr(float(edge)), f"{edge:g}"))
    escaped = "|".join(f.replace(".", "\\\\.") for f in forms)
    return f'le=~"{escaped}"'


def off_edge_thresholds(slo: Slo, edges: Mapping[str, tuple[float, ...]]) -> list[str]:
    """One line per latency objective whose threshold is not an edge of its histogram: the rules count
    good events at the bucket whose upper edge is the threshold, so there must be one."""
    problems = []
    for name, objective in slo.objectives().items():
        family = buckets.FAMILY_OF_OBJECTIVE[name]
        family_edges = edges.get(family, buckets.DEFAULT_EDGES[family])
        if any(abs(e - objective.threshold_seconds) <= 1e-9 * max(1.0, e) for e in family_edges):
            continue
        below, above = buckets.nearest_edges(objective.threshold_seconds, family_edges)
        near = " or ".join(f"{e:g} s" for e in (below, above) if e is not None)
        problems.append(f"slo.{name}.threshold_seconds {objective.threshold_seconds:g} is not an edge of vLLM's "
                        f"{family} buckets: use {near}, or give vLLM (0.32+) the edge with "
                        f"--custom-histogram-buckets and pass the same JSON to `vllm-diag render "
                        f"--histogram-buckets`")
    return problems


# -- per-replica SLIs: events and bad events per second ----------------------------------------


def _sum(expr: str, drop: tuple[str, ...] = ()) -> str:
    return f"sum without ({', '.join(('engine', *drop))}) ({expr})"


def latency_events(objective: str, window: str) -> str:
    """Events per second of a latency objective, per replica (every wire-name generation, `or`)."""
    return "\nor\n".join(_sum(f"rate({n}_count[{window}])") for n in wire_names(HISTOGRAM[objective]))


def latency_bad_events(objective: str, threshold: float, window: str) -> str:
    """Events over the threshold per second: all events minus those in the bucket at the threshold."""
    parts = [f"{_sum(f'rate({n}_count[{window}])')}\n-\n"
             f"{_sum(f'rate({n}_bucket{{{le_matcher(threshold)}}}[{window}])', ('le',))}"
             for n in wire_names(HISTOGRAM[objective])]
    return "\nor\n".join(f"(\n{p}\n)" for p in parts)


def rejections(window: str) -> str:
    """Requests refused at admission per second, per replica (no `engine` label: the API server's)."""
    return _sum(f"rate({REJECTED}[{window}])", ("reason",))


def availability_events(window: str) -> str:
    # `or` joins the two families' series (their label sets differ: finished_reason, reason) before the
    # sum, so a replica without the admission family (before 0.32) counts its finished requests alone.
    return _sum(f"rate({FINISHED}[{window}])\nor\nrate({REJECTED}[{window}])", ("finished_reason", "reason"))


def availability_bad_events(window: str) -> str:
    reasons = "|".join(FAILED_REASONS)
    return _sum(f'rate({FINISHED}{{finished_reason=~"{reasons}"}}[{window}])\nor\nrate({REJECTED}[{window}])',
                ("finished_reason", "reason"))


def events(objective: str, window: str) -> str:
    return availability_events(window) if objective == "availability" else latency_events(objective, window)


def speculating(window: str) -> str:
    """Replicas whose engines run speculative decoding: vLLM registers these counters only then."""
    return _sum(f"rate({vllm.SPEC_DECODE_NUM_DRAFTS_TOTAL}[{window}])")


def itl_bad_events(threshold: float, window: str) -> str:
    """ITL events over the threshold, except on replicas that run speculative decoding: there vLLM's
    histogram observes one gap per output event of several tokens, a per-event share is never below
    the per-token one, and PromQL cannot divide the bucket edges by the tokens per event. Counting
    those gaps would page on healthy speculative serving (a false page); their ITL SLI counts no bad
    event, and the sidecar judges the objective per token (symptom B, docs/speculative.md)."""
    per_event = latency_bad_events("itl", threshold, window)
    return (f"(\n{per_event}\n)\nunless\n{speculating(window)}\n"
            f"or\n(\n({latency_events('itl', window)}) * 0\n)\nand\n{speculating(window)}")


def bad_events(objective: str, slo: Slo, window: str) -> str:
    if objective == "availability":
        return availability_bad_events(window)
    if objective == "itl":
        return itl_bad_events(slo.objectives()[objective].threshold_seconds, window)
    return latency_bad_events(objective, slo.objectives()[objective].threshold_seconds, window)


def error_budget(objective: str, slo: Slo) -> float:
    return slo.availability.error_budget if objective == "availability" else slo.objectives()[objective].error_budget


def target(objective: str, slo: Slo) -> float:
    return slo.availability.target if objective == "availability" else slo.objectives()[objective].target


# -- recording rule names (level:metric:operations) ----------------------------------------------


def pod_events(window: str) -> str:
    return f"pod:vllm_sli_events:rate{window}"


def pod_bad_events(window: str) -> str:
    return f"pod:vllm_sli_bad_events:rate{window}"


def model_events(window: str) -> str:
    return f"namespace_model:vllm_sli_events:rate{window}"


def model_bad_events(window: str) -> str:
    return f"namespace_model:vllm_sli_bad_events:rate{window}"


def pod_burn(window: str) -> str:
    return f"pod:vllm_slo_burn:ratio_rate{window}"


def model_burn(window: str) -> str:
    return f"namespace_model:vllm_slo_burn:ratio_rate{window}"


ERROR_BUDGET_RECORD = "vllm_slo:error_budget:ratio"
THRESHOLD_RECORD = "vllm_slo:threshold:seconds"


def burn(bad: str, total: str) -> str:
    """Bad share over the objective's error budget, matched on ``objective``."""
    return (f"(\n  {bad}\n  /\n  ({total} > 0)\n)\n"
            f"/ on (objective) group_left ()\n{ERROR_BUDGET_RECORD}")


def model_sum(record: str) -> str:
    return f"sum by ({', '.join((*MODEL_LABELS, 'objective'))}) ({record})"


def burn_condition(alert: BurnAlert, *, level: str = "model") -> str:
    """Both windows of one pair above its factor; the value is the long window's burn rate."""
    rec = model_burn if level == "model" else pod_burn
    return (f"{rec(alert.long_window)} > {fmt(alert.factor)}\n"
            f"and\n{rec(alert.short_window)} > {fmt(alert.factor)}")


def page_condition(*, level: str = "model") -> str:
    """Any paging pair holds (the value is the burn rate of the pair that holds)."""
    return "\nor\n".join(f"(\n{burn_condition(a, level=level)}\n)" for a in PAGES)


def window_seconds(window: str) -> int:
    """A Prometheus duration of one unit as seconds: 30m -> 1800."""
    return int(window[:-1]) * {"m": 60, "h": 3600, "d": 86400}[window[-1]]


def bad_share(window: str, *, level: str = "model") -> str:
    """The bad share of the events over ``window`` (absent without events)."""
    bad, total = ((model_bad_events, model_events) if level == "model" else (pod_bad_events, pod_events))
    return f"{bad(window)}\n/\n({total(window)} > 0)"
