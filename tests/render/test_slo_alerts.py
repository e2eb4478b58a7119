"""The error-budget pages on fleets, with the real promtool: one page per model with its cause.

The promtool unit tests are built here rather than written by hand: a fleet is eight replicas of
the same series, and each case is a few lines of traffic shape. Every series is one vLLM (and, where
a case says so, its sidecar) exports; the rules are the generated alert_rules/ files. Each case
checks both sides of its `for` and the neighbour that must stay quiet.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.config import Slo
from exporter.render import rules
from exporter.render.rules.slo_pages import CAUSE_RECORD

pytestmark = pytest.mark.slow  # promtool over hours to days of evaluations

REPO = Path(__file__).resolve().parents[2]
RULE_FILES = [str(REPO / rules.RECORDING_FILE), str(REPO / rules.RAW_ALERTS_FILE), str(REPO / rules.ALERTS_FILE)]
SLO = Slo()
TTFT_EDGE = f"{SLO.ttft.threshold_seconds:g}"
RATE_PER_MIN = 600.0  # first tokens per minute per replica (10/s)
# Alerts of one model; a burn's cause is an annotation read from the majority-cause record, so the
# check joins the record on (namespace, model_name, objective) to say which cause the page names.
BURNS = "VLLMErrorBudgetBurn|VLLMErrorBudgetBurnSlow|VLLMLowTrafficBurn"
_CAUSE_JOIN = ('(ALERTS{{alertstate="firing", model_name="{model}", alertname=~"' + BURNS + '"}}\n'
               '  * on (namespace, model_name, objective) group_left ({labels}) ' + CAUSE_RECORD + ')')
_OTHERS = 'ALERTS{{alertstate="firing", model_name="{model}", alertname!~"' + BURNS + '"}}'
FIRING = ("count by (alertname, severity, model_name, cause) " + _CAUSE_JOIN.replace("{labels}", "cause")
          + "\nor count by (alertname, severity, model_name) (" + _OTHERS + ")")
# The same with the cause's layer and symptom, for a case whose layer is the point.
FIRING_LAYER = ("count by (alertname, severity, model_name, cause, layer, symptom) "
                + _CAUSE_JOIN.replace("{labels}", "cause, layer, symptom"))


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: run scripts/install-test-infra.sh")
    return path


def counter(segments: list[tuple[float, int]]) -> str:
    """promtool's expanding notation for a counter growing by ``per_step`` for ``steps`` steps, per segment."""
    out, value = [], 0.0
    for i, (per_step, steps) in enumerate(segments):
        start = value if i == 0 else value + per_step
        n = steps if i == 0 else steps - 1
        if per_step == 0:
            # A flat segment is written `a x n` (promtool reads `+0x39` as the hexadecimal 0x39), a hair
            # above the value promtool accumulated, which a rounded print could put below it: a reset.
            start = float(f"{start * (1 + 1e-9) + 1e-9:.12g}")
            out.append(f"{start:.12g}x{n}")
        else:
            out.append(f"{start:g}+{per_step:g}x{n}")
        value = start + per_step * n
    return " ".join(out)


@dataclass
class Replica:
    pod: str
    bad_share: list[tuple[float, int]]  # (share of events bad, minutes)
    model: str = "m"
    namespace: str = "ns"
    causes: tuple[tuple[str, str, str], ...] = ()  # (cause, layer, symptom) the sidecar names throughout
    rate_per_min: float = RATE_PER_MIN
    objective: str = "ttft"  # ttft: first tokens over the threshold; availability: failed requests
    running: bool = False  # vLLM's running-requests gauge (the inventory's ready replicas)
    sidecar: bool = False  # a sidecar watching it: vllm_diag_up and its signals
    gone_at: int | None = None  # minute from which vLLM's series stop (a deleted or crashed pod)
    # (cause, layer, symptom, from minute, to minute) the sidecar names for a while
    cause_spans: tuple[tuple[str, str, str, int, int], ...] = ()
    edges: tuple[str, ...] = (TTFT_EDGE,)  # the TTFT histogram's bucket edges this vLLM exports

    def series(self, minutes: int) -> list[dict[str, str]]:
        labels = f'namespace="{self.namespace}", pod="{self.pod}", model_name="{self.model}", engine="0"'
        end = minutes if self.gone_at is None else self.gone_at
        rate = self.rate_per_min
        good = [(rate * (1 - share), n) for share, n in self.bad_share]
        bad = [(rate * share, n) for share, n in self.bad_share]
        total = counter([(rate, end)])
        if not rate:  # the case gives vLLM's event series itself (`extra`)
            out = []
        elif self.objective == "availability":
            out = [{"series": f'vllm:request_success_total{{{labels}, finished_reason="stop"}}',
                    "values": counter(good)},
                   {"series": f'vllm:request_success_total{{{labels}, finished_reason="error"}}',
                    "values": counter(bad)}]
        else:
            out = [{"series": f"vllm:time_to_first_token_seconds_count{{{labels}}}", "values": total}]
            out += [{"series": f'vllm:time_to_first_token_seconds_bucket{{{labels}, le="{edge}"}}',
                     "values": counter(good) if edge == TTFT_EDGE else total} for edge in self.edges]
        if self.running:
            # A serving vLLM exports every SLI family (the page's inputs are watched): the running gauge,
            # and token gaps and finished requests, all good, beside the case's objective.
            out.append({"series": f"vllm:num_requests_running{{{labels}}}", "values": f"1x{end}"})
            out += [{"series": f"vllm:inter_token_latency_seconds_count{{{labels}}}", "values": total},
                    {"series": f'vllm:inter_token_latency_seconds_bucket{{{labels}, le="0.1"}}', "values": total}]
            if self.objective != "availability":
                out.append({"series": f'vllm:request_success_total{{{labels}, finished_reason="stop"}}',
                            "values": total})
        ident = f'namespace="{self.namespace}", pod="{self.pod}", target="{self.pod}"'
        if self.sidecar:
            out.append({"series": f'vllm_diag_up{{job="vllm-diag", {ident}}}',
                        "values": f"1x{end}" + (f" 0x{minutes - end}" if end < minutes else "")})
            out.append({"series": (f'vllm_diag_requests{{job="vllm-diag", {ident}, model_name="{self.model}", '
                                   'state="running"}'), "values": f"1x{end}"})
        for cause, layer, symptom in self.causes:
            out.append({"series": (f'vllm_diag_cause_active{{{ident}, model_name="{self.model}", cause="{cause}", '
                                   f'layer="{layer}", symptom="{symptom}"}}'),
                        "values": f"1x{minutes}"})
        for cause, layer, symptom, start, stop in self.cause_spans:
            out.append({"series": (f'vllm_diag_cause_active{{{ident}, model_name="{self.model}", cause="{cause}", '
                                   f'layer="{layer}", symptom="{symptom}"}}'),
                        "values": f"0x{start - 1} 1x{stop - start} 0x{minutes - stop}"})
        return out


@dataclass
class Case:
    name: str
    replicas: list[Replica]
    minutes: int
    checks: list[tuple[int, list[tuple[dict[str, str], int]]]]  # (minute, [(labels, value)]) of FIRING
    extra: list[dict[str, str]] = field(default_factory=list)
    firing: str = FIRING  # the query each check compares with
    exprs: list[dict[str, Any]] = field(default_factory=list)  # further promql_expr_test entries

    def series(self) -> list[dict[str, str]]:
        return [s for r in self.replicas for s in r.series(self.minutes)] + self.extra

    def expr_tests(self) -> list[dict[str, Any]]:
        """Checks on this case's model alone, so cases share one promtool run without seeing each other."""
        model = self.replicas[0].model
        return [{"expr": self.firing.format(model=model), "eval_time": f"{minute}m",
                 "exp_samples": [{"labels": "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(lbl.items())) + "}",
                                  "value": value} for lbl, value in expect]}
                for minute, expect in self.checks] + self.exprs


def group(name: str, cases: list[Case], interval: str) -> dict[str, Any]:
    """One promtool test group for several cases on distinct models: one evaluation run for all."""
    return {"name": name, "interval": interval, "input_series": [x for c in cases for x in c.series()],
            "promql_expr_test": [t for c in cases for t in c.expr_tests()]}


def page(model: str, cause: str = "unknown") -> dict[str, str]:
    return {"alertname": "VLLMErrorBudgetBurn", "severity": "critical", "model_name": model, "cause": cause}


# Six hours at 0.1 % bad (a tenth of the budget's rate) before each case, so the 6h window is full.
HEALTHY = (0.001, 360)
H = 360  # minute at which a case's event starts
FLEET = 8


def fleet(model: str, bad: list[tuple[float, int]], causes: tuple[tuple[str, str, str], ...] = ()) -> list[Replica]:
    return [Replica(f"{model}-{i}", bad, model=model, causes=causes) for i in range(FLEET)]


CASES = [
    # A queue outage on every replica, no sidecar cause: half of the first tokens over the threshold
    # from minute H. The 1h window reaches 14.4x after ~17 minutes at 50 % bad: one page for the
    # model (not eight), cause unknown, within 20 minutes; none before.
    Case("fleet latency outage pages once per model within 20 minutes", fleet("outage", [HEALTHY, (0.5, 40)]),
         H + 40, [(H, []), (H + 15, []), (H + 20, [(page("outage"), 1)]), (H + 39, [(page("outage"), 1)])]),
    # The same outage where every sidecar names KV pressure: the one page carries the cause.
    Case("fleet-wide KV crunch: one page naming the cause",
         fleet("kv", [HEALTHY, (0.5, 40)], causes=(("D", "kv_cache", "D"),)), H + 40,
         [(H + 15, []), (H + 20, [(page("kv", "D"), 1)])]),
    # Every sidecar sees the first tokens miss with no cause it knows (two LoRA adapters waiting for one
    # slot): the page names the effect, A0 with layer `unknown`, not a bare `unknown`.
    Case("an effect without a known cause: the page names A0, layer unknown",
         fleet("lora", [HEALTHY, (0.5, 40)], causes=(("A0", "unknown", "A"),)), H + 40,
         [(H + 15, []), (H + 20, [({**page("lora", "A0"), "layer": "unknown", "symptom": "A"}, 1)])],
         firing=FIRING_LAYER),
    # One replica of eight burns: the model's share stays 1/8 of it (6.25x over 1h: no page); the
    # replica alone is a warning.
    Case("one bad replica of eight is a warning, not a page",
         [Replica("one-0", [HEALTHY, (0.5, 40)], model="one"), *fleet("one", [HEALTHY, (0.001, 40)])[1:]], H + 40,
         [(H + 15, []), (H + 22, [({"alertname": "VLLMReplicaErrorBudgetBurn", "severity": "warning",
                                   "model_name": "one"}, 1)])]),
    # A 3-minute burst at 90 % bad spends 4.5 % of an hour: 4.5x, no page, no ticket.
    Case("a 3-minute burst does not page", fleet("burst", [HEALTHY, (0.9, 3), (0.001, 37)]), H + 40,
         [(H + 2, []), (H + 5, []), (H + 10, []), (H + 39, [])]),
    # A steady 5 % bad is 5x (the budget would last 6 days): below both paging factors. A ticket once
    # both the 3d and 6h windows are over 1x for the ticket's `for` (~H + 81 + 30 here, the 3d window
    # holding only this test's hours).
    Case("a slow burn is a ticket, not a page", fleet("slow", [HEALTHY, (0.05, 130)]), H + 130,
         [(H + 20, []), (H + 60, []), (H + 125, [({"alertname": "VLLMErrorBudgetBurnSlow", "severity": "warning",
                                   "model_name": "slow", "cause": "unknown"}, 1)])]),
    # A hung engine (a TP collective, a dead worker): requests running, no token for 5 minutes. The
    # latency SLIs cannot see it (stuck requests record nothing); it pages on its own. Its neighbour
    # generates tokens and stays quiet.
    Case("a stalled engine pages", [Replica("stall", [HEALTHY, (0.001, 30)], model="stall", running=True),
                                    Replica("busy", [HEALTHY, (0.001, 30)], model="stall", running=True)], H + 30,
         [(H + 4, []), (H + 8, [({"alertname": "VLLMEngineStalled", "severity": "critical",
                                  "model_name": "stall"}, 1)])],
         extra=[{"series": 'vllm:generation_tokens_total{namespace="ns", pod="stall", model_name="stall", engine="0"}',
                 "values": f"0+600x{H} {600 * H}x30"},
                {"series": 'vllm:generation_tokens_total{namespace="ns", pod="busy", model_name="stall", engine="0"}',
                 "values": f"0+600x{H + 30}"}]),
    # A sleeping engine (/sleep, mode keep) holds its requests and generates nothing on purpose: vLLM's
    # engine_sleep_state says so, and nothing pages.
    Case("a sleeping engine does not page as stalled",
         [Replica("nap", [HEALTHY, (0.001, 30)], model="nap", running=True)],
         H + 30, [(H + 8, []), (H + 20, [])],
         extra=[{"series": 'vllm:generation_tokens_total{namespace="ns", pod="nap", model_name="nap", engine="0"}',
                 "values": f"0+600x{H} {600 * H}x30"},
                {"series": 'vllm:engine_sleep_state{namespace="ns", pod="nap", model_name="nap", engine="0", '
                           'sleep_state="awake"}', "values": f"1x{H} 0x30"},
                {"series": 'vllm:engine_sleep_state{namespace="ns", pod="nap", model_name="nap", engine="0", '
                           'sleep_state="weights_offloaded"}', "values": f"0x{H} 1x30"}]),
    # A single replica is its model: its outage pages as the model.
    Case("a single-replica model pages on its own burn", [Replica("solo", [HEALTHY, (0.5, 40)], model="solo")],
         H + 40, [(H + 15, []), (H + 22, [(page("solo"), 1)])]),
]


def unavailable(model: str) -> dict[str, str]:
    return {"alertname": "VLLMModelUnavailable", "severity": "critical", "model_name": model}


def low_traffic(model: str, severity: str = "critical") -> dict[str, str]:
    return {"alertname": "VLLMLowTrafficBurn", "severity": severity, "model_name": model, "cause": "unknown"}


def outlier(model: str) -> dict[str, str]:
    return {"alertname": "VLLMReplicaErrorBudgetBurn", "severity": "warning", "model_name": model}


LONG = 120  # minutes an outage lasts in the cases that must keep paging
SHIFT = 30  # minute of the outage at which its cause changes
CASES += [
    # Every pod of a model is deleted (a bad rollout of a Recreate Deployment): its series go away, and
    # the inventory remembers the model: critical within 15 minutes, still firing 2 hours later.
    Case("all pods of a model vanish: a page within 15 minutes that stays",
         [Replica(f"vanish-{i}", [HEALTHY], model="vanish", running=True, gone_at=H) for i in range(4)], H + LONG + 5,
         [(H + 3, []), (H + 15, [(unavailable("vanish"), 1)]), (H + LONG, [(unavailable("vanish"), 1)])]),
    # Down in place: the pods stay, vLLM stops answering, the sidecars say so (vllm_diag_up 0) and publish
    # no signal any more. The page is held by the inventory, not by the sidecars' last hour.
    Case("a model down in place keeps paging",
         [Replica(f"down-{i}", [HEALTHY], model="down", sidecar=True, gone_at=H) for i in range(2)], H + LONG + 5,
         # (VLLMTargetsDown fires too for the first hour; Alertmanager holds it back under the page)
         [(H + 3, []), (H + 15, [(unavailable("down"), 1), ({"alertname": "VLLMTargetsDown", "severity": "warning",
                                                              "model_name": "down"}, 1)]),
          (H + 70, [(unavailable("down"), 1)]), (H + LONG, [(unavailable("down"), 1)])]),
    # One request a minute, too few for a burn rate (100 an hour): every first token late, or every
    # request failing, from minute H. Over half of >= 10 events in 30 minutes bad: a page within 30 minutes.
    Case("one request a minute, all slow: a low-traffic page within 30 minutes",
         [Replica("lowslow-0", [HEALTHY, (1.0, 40)], model="lowslow", rate_per_min=1.0)], H + 40,
         [(H + 10, []), (H + 30, [(low_traffic("lowslow"), 1)])]),
    Case("one request a minute, all failing: a low-traffic page within 30 minutes",
         [Replica("lowfail-0", [HEALTHY, (1.0, 40)], model="lowfail", rate_per_min=1.0, objective="availability")],
         H + 40, [(H + 10, []), (H + 30, [(low_traffic("lowfail"), 1)])]),
    # The cause changes mid-outage (a queue that becomes a KV crunch): the page keeps one identity, firing
    # throughout (its ALERTS_FOR_STATE, the time it became active, never changes), while the cause it
    # names (the majority-cause record its annotations read) moves from A2 to D.
    Case("a cause change mid-outage updates one page",
         [Replica(f"shift-{i}", [HEALTHY, (0.5, 60)], model="shift",
                     cause_spans=(("A2", "scheduler", "A", H, H + SHIFT), ("D", "kv_cache", "D", H + SHIFT, H + 60)))
             for i in range(FLEET)], H + 60,
         [(H + 20, [(page("shift", "A2"), 1)]), (H + 40, [(page("shift", "D"), 1)])],
         exprs=[{"expr": ('changes(ALERTS_FOR_STATE{alertname="VLLMErrorBudgetBurn", model_name="shift", '
                          'long="1h"}[25m])'),
                 "eval_time": f"{H + 45}m",
                 "exp_samples": [{"labels": '{alertname="VLLMErrorBudgetBurn", long="1h", model_name="shift", '
                                            'namespace="ns", objective="ttft", severity="critical", short="5m"}',
                                  "value": 0}]},
                {"expr": 'count_over_time(ALERTS{alertstate="firing", alertname="VLLMErrorBudgetBurn", '
                         'model_name="shift", long="1h"}[25m]) >= bool 25', "eval_time": f"{H + 45}m",
                 "exp_samples": [{"labels": '{alertname="VLLMErrorBudgetBurn", alertstate="firing", long="1h", '
                                            'model_name="shift", namespace="ns", objective="ttft", '
                                            'severity="critical", short="5m"}', "value": 1}]}]),
    # One replica of eight fails every first token while its siblings miss 12 %: the model pages (23 %
    # bad, 14.4x over the hour after ~37 minutes), and the outlier, named with its pod within 30
    # minutes, stays named for as long as it lasts.
    Case("the bad replica is named while the model pages",
         [Replica("worst-0", [HEALTHY, (1.0, LONG)], model="worst"),
          *(Replica(f"worst-{i}", [HEALTHY, (0.12, LONG)], model="worst") for i in range(1, FLEET))], H + LONG,
         [(H + 10, []), (H + 30, [(outlier("worst"), 1)]), (H + 45, [(page("worst"), 1), (outlier("worst"), 1)]),
          # later the 6h/30m pair pages too: one more rule of the same page, in the same notification
          (H + LONG - 1, [(page("worst"), 2), (outlier("worst"), 1)])],
         exprs=[{"expr": 'count by (pod) (ALERTS{alertstate="firing", alertname="VLLMReplicaErrorBudgetBurn", '
                         'model_name="worst"})', "eval_time": f"{H + 60}m",
                 "exp_samples": [{"labels": '{pod="worst-0"}', "value": 1}]}]),
    # The objective's threshold (2.5 s) is not an edge of this vLLM's buckets (custom edges 2 and 5): the
    # bad-events series vanishes, which would silence the page; the input alert says so.
    Case("a threshold off the bucket edges raises the input alert",
         [Replica("offedge-0", [HEALTHY], model="offedge", running=True, edges=("2", "5"))], H,
         [(20, []), (H - 5, [({"alertname": "VLLMDiagInputMissing", "severity": "warning",
                               "model_name": "offedge"}, 1)])],
         exprs=[{"expr": 'count by (input) (ALERTS{alertstate="firing", alertname="VLLMDiagInputMissing", '
                         'model_name="offedge"})', "eval_time": f"{H - 5}m",
                 "exp_samples": [{"labels": '{input="ttft_bucket_edge"}', "value": 1}]}],
)
]
# The one bad replica of eight stays named for as long as it lasts.
CASES[3].checks.append((H + 39, [({"alertname": "VLLMReplicaErrorBudgetBurn", "severity": "warning",
                                   "model_name": "one"}, 1)]))


def hourly(points: int, step_min: int) -> str:
    """A counter that grows by one an hour, sampled every ``step_min`` minutes."""
    per_hour = 60 // step_min
    return " ".join(f"{k}x{per_hour - 1}" for k in range(points // per_hour + 1))


# Long horizons, evaluated every 5 minutes: three healthy days (the ticket's whole window) are silent,
# also for a model with one request an hour (the low-traffic path needs mostly bad events).
DAYS_MIN = 3 * 1440
_QUIET = 'namespace="ns", pod="quiet-0", model_name="quiet", engine="0"'
LONG_CASES = [
    Case("three healthy days are silent", fleet("calm", [(0.001, DAYS_MIN)]), DAYS_MIN,
         [(m, []) for m in (60, 360, 1440, 2880, DAYS_MIN - 5)]),
    Case("one request an hour for three days is silent", [Replica("quiet-0", [(0.0, DAYS_MIN)], model="quiet",
                                                                   rate_per_min=0.0, running=True)], DAYS_MIN,
         [(m, []) for m in (60, 360, 1440, 2880, DAYS_MIN - 5)],
         extra=[{"series": f"vllm:time_to_first_token_seconds_count{{{_QUIET}}}", "values": hourly(DAYS_MIN // 5, 5)},
                {"series": f'vllm:time_to_first_token_seconds_bucket{{{_QUIET}, le="{TTFT_EDGE}"}}',
                 "values": hourly(DAYS_MIN // 5, 5)},
                {"series": f'vllm:request_success_total{{{_QUIET}, finished_reason="stop"}}',
                 "values": hourly(DAYS_MIN // 5, 5)}]),
]


@pytest.mark.parametrize(("cases", "interval"), [(CASES, "1m"), (LONG_CASES, "5m")], ids=["fleet", "long"])
def test_fleet_cases_with_promtool(tmp_path: Path, cases: list[Case], interval: str) -> None:
    spec = {"rule_files": RULE_FILES, "evaluation_interval": interval, "group_eval_order": list(rules.GROUP_EVAL_ORDER),
            "tests": [group("cases", cases, interval)]}
    path = tmp_path / "slo_test.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = subprocess.run([_promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]


def test_a_wrong_expectation_fails(tmp_path: Path) -> None:
    """Guard against a vacuous pass: the outage case with its page expected too early must fail."""
    broken = Case("broken", fleet("early", [(0.001, 60), (0.5, 10)]), 70, [(65, [(page("early"), 1)])])
    spec = {"rule_files": RULE_FILES, "evaluation_interval": "1m", "group_eval_order": list(rules.GROUP_EVAL_ORDER),
            "tests": [group("broken", [broken], "1m")]}
    path = tmp_path / "broken_test.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = subprocess.run([_promtool(), "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0


def test_counter_notation() -> None:
    assert counter([(10, 3)]) == "0+10x3"
    assert counter([(10, 2), (5, 2)]) == "0+10x2 25+5x1"
    flat = counter([(10, 2), (0, 3)])
    assert flat.startswith("0+10x2 20.0000000") and flat.endswith("x2")
