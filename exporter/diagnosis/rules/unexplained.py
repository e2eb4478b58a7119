"""Effects without a known cause, a second pass over the first pass's findings: an objective missed that no
cause of the classes explaining it (``EXPLAINED_BY``) accounts for is named as such (A0, B0: layer
``unknown``), with what was looked at."""

from __future__ import annotations

from collections.abc import Mapping

from exporter.catalog import metrics as vllm
from exporter.catalog.symptoms import CAUSE_BY_ID, EXPLAINED_BY
from exporter.diagnosis.rules.conditions import queue_starting, tail_text
from exporter.diagnosis.rules.effects import Breach, gate, itl_breach, ttft_breach
from exporter.diagnosis.rules.finding import (
    Context,
    Finding,
    abstain,
    clear,
    excess,
    explaining_rule,
    fired,
    pct,
    seconds,
)


def _unexplained(ctx: Context, findings: Mapping[str, Finding], objective: str, breach: Breach) -> Finding:
    """Fires while ``objective`` is missed and no counting cause of a class that explains it (or that says it
    does: ``Finding.explains``) fired."""
    if (early := gate(breach)) is not None:
        return early
    explaining = {cid: f for cid, f in findings.items()
                  if cid in CAUSE_BY_ID and (CAUSE_BY_ID[cid].symptom in EXPLAINED_BY[objective]
                                             or objective in f.explains)}
    active = sorted(cid for cid, f in explaining.items() if f.status == "fired" and not f.informational)
    if active:
        return clear("explained by " + ", ".join(f"{cid} ({CAUSE_BY_ID[cid].title})" for cid in active))
    looked = [breach.evidence]
    cleared = sorted(cid for cid, f in explaining.items() if f.status == "clear")
    if cleared:
        looked.append(f"clear: {', '.join(cleared)}")
    abstained = sorted((cid, f) for cid, f in explaining.items() if f.status == "abstain")
    if abstained:
        # The first input each lacked, shortened: enough to say what to configure.
        looked.append("not judged: " + "; ".join(f"{cid} (needs {_brief(f.missing)})" for cid, f in abstained))
    informational = sorted(cid for cid, f in explaining.items() if f.status == "fired" and f.informational)
    if informational:
        looked.append(f"information only: {', '.join(informational)}")
    s = ctx.signals
    if objective == "ttft" and s.latency.ttft_queue_share is not None and s.latency.ttft_mean:
        looked.append(f"queue is {pct(s.latency.ttft_queue_share)} of mean TTFT {seconds(s.latency.ttft_mean)} while "
                      f"requests wait for capacity in {pct(s.scheduler.queued_fraction or 0)} of scrapes")
    if objective == "itl" and s.latency.itl_tail_ratio is not None:
        looked.append(tail_text(s))
    if s.scheduler.deferred_fraction:
        looked.append(f"requests wait deferred in {pct(s.scheduler.deferred_fraction)} of scrapes "
                      f"({vllm.NUM_REQUESTS_WAITING_BY_REASON}, reason deferred: a LoRA adapter slot or a KV "
                      "transfer), a wait no rule attributes")
    t = ctx.thresholds
    return fired(t.unexplained_strength + t.unexplained_strength_weight * excess(breach.ratio, 1, t.burn_rate_full),
                 *looked)


def _brief(missing: tuple[str, ...]) -> str:
    first = missing[0] if missing else "an input"
    return first.split(" (", 1)[0] + (" ..." if len(missing) > 1 else "")


@explaining_rule("A0")
def rule_a0(ctx: Context, findings: Mapping[str, Finding]) -> Finding:
    finding = _unexplained(ctx, findings, "ttft", ttft_breach(ctx))
    if finding.status == "fired" and queue_starting(ctx):
        # A2 judges this queue once its wait is recorded: no "unknown cause" before that.
        return abstain(f"the queue time of the requests waiting now ({vllm.REQUEST_QUEUE_TIME_SECONDS} is "
                       "recorded when they finish)")
    return finding


@explaining_rule("B0")
def rule_b0(ctx: Context, findings: Mapping[str, Finding]) -> Finding:
    return _unexplained(ctx, findings, "itl", itl_breach(ctx))
