"""Engine faults no latency or availability objective sees or names, paged from vLLM's raw series
(so fleets without the sidecar get them too): requests answered from logits with NaNs (wrong answers,
on time and counted good), and a decode instance whose KV loads from its prefill peers fail."""

from __future__ import annotations

from exporter.catalog import metrics as vllm
from exporter.render import slo
from exporter.render.promql import fmt
from exporter.render.rules._config import (
    DEFAULT_OPTIONS,
    FAULT_WINDOW,
    FOR_CORRUPTED,
    FOR_TRANSFER_FAILING,
    Options,
    _indent,
)
from exporter.render.rules.alert import _DRAIN_PEER, _PREFILL_LOCALLY, _ROLL_BACK, Alert, Mitigation, Verify, always
from exporter.render.rules.recording import RAW

MODEL = slo.MODEL_LABELS


def corrupted_requests(window: str = FAULT_WINDOW) -> str:
    """Requests with NaNs in their logits over ``window``, per model (``increase`` survives a counter reset)."""
    return f"sum by ({', '.join(MODEL)}) (increase({vllm.CORRUPTED_REQUESTS_TOTAL}[{window}]))"


def transfer_failures(window: str = FAULT_WINDOW) -> str:
    """Failed NIXL KV loads over ``window``, per replica (its data-parallel engines summed)."""
    return f"sum {RAW._without()} (increase({vllm.NIXL_NUM_FAILED_TRANSFERS_TOTAL}[{window}]))"


def transfer_failing(o: Options, window: str = FAULT_WINDOW) -> str:
    """At least ``kv_transfer_failures_min`` failed loads and a share of ``kv_transfer_failure_share`` of
    all loads (failed plus completed: the transfer histogram counts completed ones), as the sidecar's A8."""
    t = o.thresholds
    failed = transfer_failures(window)
    completed = f"sum {RAW._without()} (increase({vllm.NIXL_XFER_TIME_SECONDS}_count[{window}]))"
    share = f"{failed}\n/\n(\n  {failed}\n  +\n  ({completed} or {failed} * 0)\n)"
    # The share first: it is the alert's value.
    return (f"(\n{_indent(share)}\n) >= {fmt(t['kv_transfer_failure_share'])}\nand\n"
            f"{failed} >= {fmt(t['kv_transfer_failures_min'])}")


def fault_alerts(o: Options = DEFAULT_OPTIONS) -> list[Alert]:
    t = o.thresholds
    model_sel = '{namespace="$namespace", model_name="$model_name"}'
    where = "{{ $labels.model_name }}{{ if $labels.namespace }} (namespace {{ $labels.namespace }}){{ end }}"
    replica = "{{ $labels.pod }}{{ if $labels.instance }} ({{ $labels.instance }}){{ end }}"
    return [
        Alert(
            name="VLLMCorruptedRequests", scope="model", severity="critical", symptom="none", layer="gpu_compute",
            for_=FOR_CORRUPTED, expr=f"{corrupted_requests()} > 0",
            summary="vLLM answered requests from logits with NaNs: users get wrong answers.",
            description=(f"Model {where} finished {{{{ $value | printf \"%.0f\" }}}} requests with NaNs in their "
                         f"logits in {FAULT_WINDOW}: their answers are garbage, and no latency objective sees it."),
            meaning=(f"vLLM counts a finished request in {vllm.CORRUPTED_REQUESTS_TOTAL} when its logits held "
                     "a NaN (the counter exists only where the engine runs with VLLM_COMPUTE_NANS_IN_LOGITS=1; "
                     "without it this page is blind). Such a request is answered on time and counts as good for "
                     "every objective, yet its tokens are sampled from garbage: a correctness fault, so it pages "
                     "on the first one. Causes: numerical overflow in a quantised or fp16 checkpoint, a kernel "
                     "bug after an upgrade (attention backend, a new CUDA/driver), a faulty GPU (memory errors, "
                     f"Xid). The page lasts while the last {FAULT_WINDOW} hold a corrupted request; a counter reset "
                     "(a restart) is no new corruption."),
            verify=(Verify(f"corrupted requests per replica over {FAULT_WINDOW}",
                           f"sum without (engine) "
                           f"(increase({vllm.CORRUPTED_REQUESTS_TOTAL}{model_sel}[{FAULT_WINDOW}]))"),
                    Verify("finished requests per second per replica (the share that is corrupted)",
                           RAW.sum_rate(vllm.REQUEST_SUCCESS_TOTAL, "5m", drop=("finished_reason",)))),
            action="find what changed (image, checkpoint, quantisation, attention backend, driver) and roll it "
                   "back; if one replica alone corrupts, drain it and check its GPU (ECC/Xid errors, "
                   "`nvidia-smi -q -d ECC`); reproduce with a fixed prompt at temperature 0",
            tradeoff="a rollback loses whatever the new version brought; a drained replica is capacity lost",
            mitigations=always(_ROLL_BACK, Mitigation("drain the replicas whose counter rises (take them out of "
                                                      "the load balancer)", "less capacity meanwhile")),
        ),
        Alert(
            name="VLLMKVTransferFailing", scope="replica", severity="critical", symptom="A", layer="distributed",
            for_=FOR_TRANSFER_FAILING, expr=transfer_failing(o),
            summary="A decode instance's KV loads from its prefill peers fail: requests fail or are recomputed.",
            description=(f"Replica {replica} of model {{{{ $labels.model_name }}}}: "
                         f"{{{{ $value | humanizePercentage }}}} of its NIXL KV loads failed over {FAULT_WINDOW}."),
            meaning=(f"{vllm.NIXL_NUM_FAILED_TRANSFERS_TOTAL} counts failed transfers, handshakes and notifications "
                     "of the NIXL connector on a KV consumer. With vLLM's default kv_load_failure_policy (fail) "
                     "each failed load ends its request with an error; with recompute its prompt is prefilled on "
                     "the decode instance, at prefill cost to its first tokens and its streams. It pages from "
                     f"{fmt(t['kv_transfer_failures_min'])} failures and a share of "
                     f"{fmt(t['kv_transfer_failure_share'] * 100)} % of the loads in {FAULT_WINDOW} (the "
                     "thresholds of the sidecar's cause A8), so a lone failed handshake after a peer restarts "
                     "does not page."),
            verify=(Verify(f"failed KV loads per replica over {FAULT_WINDOW}", transfer_failures()),
                    Verify(f"completed KV loads per replica over {FAULT_WINDOW}",
                           f"sum without (engine) (increase({vllm.NIXL_XFER_TIME_SECONDS}_count[{FAULT_WINDOW}]))"),
                    Verify("requests expired on the prefill side before this instance read them",
                           f"sum without (engine) (increase({vllm.NIXL_NUM_KV_EXPIRED_REQS_TOTAL}[{FAULT_WINDOW}]))"),
                    Verify("errored requests per second (kv_load_failure_policy fail)",
                           f'sum without (engine) '
                           f'(rate({vllm.REQUEST_SUCCESS_TOTAL}{{finished_reason="error"}}[5m]))')),
            action="read both instances' logs for the connector's errors (side-channel port reachable, NIXL agent "
                   "metadata exchanged, UCX transport up) and restart or drain the failing prefill peer; set "
                   "kv_load_failure_policy to recompute to turn failed requests into local prefills",
            tradeoff="recompute moves prefill work onto the decode instance (higher TTFT, ITL disturbed)",
            mitigations=always(_DRAIN_PEER, _PREFILL_LOCALLY),
        ),
    ]
