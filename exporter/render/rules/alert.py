"""What an alert is (``Alert``), its runbook's parts (``Verify``, ``Mitigation``) and the immediate
mitigations per cause, shared by every alert family."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from exporter.catalog.symptoms import CAUSES, Cause
from exporter.render.rules._config import FOR_SYMPTOM

# ---------------------------------------------------------------------------------------------
# Alerts
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verify:
    """A query for the runbook's "how to verify" section."""

    what: str
    expr: str


@dataclass(frozen=True, slots=True)
class Mitigation:
    """An immediate mitigation (no engine restart) with what it costs."""

    what: str
    cost: str


_SCALE_OUT = Mitigation("scale out: add a replica (HPA max, `kubectl scale`), or move traffic to another pool",
                        "cost of the extra replica; it needs the model load time before it helps")
_SHED = Mitigation("shed load at the gateway: lower the rate limit or the concurrency cap for this pool, reject "
                   "batch/offline clients first", "rejected or delayed requests for the clients shed")
_CAP_TOKENS = Mitigation("cap max_tokens at the gateway (or in the client defaults) for requests that leave it unset",
                         "long answers are truncated")
_ROUTE_LONG = Mitigation("route long-context requests (large prompts) to a separate pool or replica",
                         "needs a second pool; the long requests may wait longer there")
_SPLIT_BATCH = Mitigation("move offline/batch traffic off the interactive pool (or pause it)",
                          "batch jobs finish later")
_FREE_CPU = Mitigation("move noisy neighbours off the node (cordon + evict the CPU-heavy pods) or raise the "
                       "pod's CPU limit in place where the cluster allows it", "other workloads move or get less CPU")
_NO_MITIGATION = Mitigation("nothing urgent: no user-visible effect yet; schedule the knob change below",
                            "none")
_ROLL_BACK = Mitigation("if it began with a rollout (new image, driver, quantised checkpoint, --enforce-eager), "
                        "roll back to the last good version", "loses whatever the rollout brought")
_ROUTE_PREFIX = Mitigation("route requests by prefix at the load balancer (session/prefix affinity) where it "
                           "supports it", "uneven load across replicas")
_ROUTE_OFF_SPECULATION = Mitigation("route the traffic the drafter does not fit (sampled at high temperature, "
                                    "new languages or tasks) to replicas without speculative decoding",
                                    "needs a second pool; the routed traffic loses whatever speed-up it had")
_PREFILL_LOCALLY = Mitigation("have the P/D proxy send short prompts (or all, for now) to an instance that prefills "
                              "them itself, without the KV transfer", "prefill work on decode instances: their "
                              "streams slow down while it runs")
_DRAIN_PEER = Mitigation("take the prefill instance whose transfers fail out of the P/D proxy's pool (or restart "
                         "it)", "less prefill capacity until it is back")
_ROUTE_ADAPTER = Mitigation("route the hottest adapter's requests to a replica that keeps it loaded (a second "
                            "pool, or the gateway's adapter-affinity routing)", "needs a second pool or a router "
                            "that reads the adapter name")
_DRAIN_ENGINE = Mitigation("restart the replica whose engine is the outlier (or take it out of the load balancer) "
                           "while its GPU is checked", "less capacity meanwhile; in-flight requests on it are lost")
AWAKE = 'sleep_state="awake"'  # vllm:engine_sleep_state's awake bit: 0 while the engine sleeps
# Immediate mitigations per cause: what buys time before a knob change and a restart.
IMMEDIATE_BY_CAUSE: Mapping[str, tuple[Mitigation, ...]] = {
    "A7": (_PREFILL_LOCALLY, _SCALE_OUT), "A8": (_DRAIN_PEER, _PREFILL_LOCALLY),
    "A0": (_ROLL_BACK, _SCALE_OUT), "B0": (_ROLL_BACK, _SCALE_OUT),
    "A1": (_ROUTE_LONG, _SCALE_OUT), "A2": (_SCALE_OUT, _SHED), "A3": (_FREE_CPU, _SCALE_OUT),
    "A4": (_ROUTE_LONG, _SCALE_OUT), "A5": (_NO_MITIGATION,),
    "B1": (_SPLIT_BATCH, _ROUTE_LONG), "B2": (_SPLIT_BATCH, _ROUTE_LONG), "B3": (_SHED, _SCALE_OUT),
    "B4": (_ROLL_BACK, _SCALE_OUT), "B5": (_ROUTE_OFF_SPECULATION, _ROLL_BACK, _SCALE_OUT),
    "C1": (_FREE_CPU, _SCALE_OUT), "C2": (_NO_MITIGATION,), "C3": (_CAP_TOKENS, _SHED, _SCALE_OUT),
    "D": (_CAP_TOKENS, _SHED, _SCALE_OUT, _ROUTE_LONG), "E": (_CAP_TOKENS, _SCALE_OUT),
    "F": (_NO_MITIGATION,), "F1": (_NO_MITIGATION,), "F6": (_ROUTE_PREFIX, _SCALE_OUT), "G": (_SCALE_OUT,),
    # issue 29: LoRA adapter slots, data-parallel engines
    "A6": (_ROUTE_ADAPTER, _SCALE_OUT), "G2": (_DRAIN_ENGINE, _SCALE_OUT),
}


def cause_mitigations(causes: Sequence[Cause]) -> tuple[tuple[str, Mitigation], ...]:
    """(when, mitigation) rows: each cause's immediate mitigations, labelled with the cause."""
    return tuple((f"{c.id}: {c.title}", m) for c in causes for m in IMMEDIATE_BY_CAUSE[c.id])


def always(*items: Mitigation) -> tuple[tuple[str, Mitigation], ...]:
    return tuple(("any cause", m) for m in items)


@dataclass(frozen=True, slots=True)
class Alert:
    name: str
    expr: str
    severity: str
    symptom: str  # A-G, or "none" for alerts that are not a symptom class
    layer: str  # a catalog layer, or "unknown" when the alert does not attribute one
    summary: str  # static
    description: str  # Go template: {{ $value }}, {{ $labels.target }}
    meaning: str  # runbook: what it means
    causes: tuple[Cause, ...] = ()
    verify: tuple[Verify, ...] = ()
    action: str = ""  # when empty, derived from the causes' catalog actions
    tradeoff: str = ""
    for_: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)  # extra/overrides, e.g. runbook_url
    # Which labels identify what the alert is about (runbook queries are scoped to them): one sidecar
    # target, one replica of raw series, a whole model, or a namespace.
    scope: str = "target"
    # Runbook: what on-call can do right now, without a restart (before the knobs that need one).
    mitigations: tuple[tuple[str, Mitigation], ...] = ()  # (when: a cause, or "any cause"; mitigation)
    extra_labels: Mapping[str, str] = field(default_factory=dict)
    # Several rules under one name (kube-prometheus' burn-rate tiers): (labels, expr) each; the labels
    # may override `severity` and `for` for that rule. Empty: one rule, ``expr``.
    tiers: tuple[tuple[Mapping[str, str], str], ...] = ()

    @property
    def duration(self) -> str:
        return self.for_ or FOR_SYMPTOM[self.severity]

    def actions_text(self) -> tuple[str, str]:
        """(action, tradeoff) annotations from the catalog.

        One cause: all its actions, each with its cost. Several: each cause's first (primary)
        action, prefixed with the cause id; the runbook lists the rest.
        """
        if self.action:
            return self.action, self.tradeoff
        if len(self.causes) == 1:
            acts = self.causes[0].actions
            return "; ".join(a.action for a in acts), "; ".join(f"{a.action}: {a.cost}" for a in acts)
        firsts = [(c.id, c.actions[0]) for c in self.causes]
        return (" | ".join(f"{cid}: {a.action}" for cid, a in firsts),
                " | ".join(f"{cid}: {a.cost}" for cid, a in firsts))


def _causes_of(symptom: str) -> tuple[Cause, ...]:
    return tuple(c for c in CAUSES if c.symptom == symptom)

