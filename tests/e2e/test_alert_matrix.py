"""The alert matrix: every simulated scenario through real Prometheus and Alertmanager, in one run.

Each scenario of the simulator's catalog (``exporter.simulator.SCENARIOS``, so scenarios added
there join the matrix by themselves), two rollout timelines and a pair of replicas that are both
called ``vllm-0`` become one sidecar endpoint each (``tests/e2e/replay.py``: the real pipeline run
offline over 21 simulated minutes, served at 60x). One Prometheus scrapes them all (job
``vllm-diag``, ``instance`` per endpoint, as a sidecar per pod would be) and evaluates the
generated rules with every duration divided by 60; one Alertmanager runs the generated example
(routes and inhibitions unchanged, receivers pointed at a local webhook, group_wait 0.5 s).

Assertions, per endpoint:

* delivered alerts == the expected set of ``EXPECTED`` (derived from the scenario catalog's expected
  symptoms and verdict, see ``expected``), within the alerts the catalog allows to co-fire;
* healthy-like scenarios (expected verdict ``none``) deliver nothing;
* every symptom a scenario expects fires its alert in Prometheus (delivered, or held back by the
  root-cause inhibition);
* each delivery comes within ``for`` + 2 evaluation intervals of the alert's onset (``activeAt``);
* rollout: a target that takes 10 minutes to come up never pages, one that was up and goes away
  pages (VLLMTargetDown) within ``for`` + 2 intervals;
* replicas: starvation on ``replica-a`` neither inhibits nor groups ``replica-b``'s alerts
  (Alertmanager API: alerts and groups), although both targets are named ``vllm-0``.

The measured matrix is printed (``-s``) and kept in docs/alerting.md. Runtime: the offline replay
takes about 2 minutes of two cores (started in the background when the session starts, see
tests/conftest.py), the playback 21 s.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from exporter.catalog.symptoms import SYMPTOM_BY_ID
from exporter.render import rules
from exporter.simulator import SCENARIOS
from tests.e2e import replay
from tests.e2e.components import (
    REPO,
    Servers,
    Webhook,
    alertmanager_config,
    get_json,
    poll,
    start_alertmanager,
    start_prometheus,
    wait_alertmanager_discovered,
    wait_ready,
)
from tests.helpers import free_port

pytestmark = pytest.mark.prometheus

EVAL_INTERVAL_S = 1.0
GROUP_WAIT = "500ms"
PLAYBACK_S = replay.DURATION_S / replay.SPEED
REPLICAS = {"replica-a": "cpu-starved", "replica-b": "itl-stutter"}  # both named vllm-0
ROLLOUT_EXPECTED = {"rollout-slow-start": frozenset(), "rollout-crash": frozenset({"VLLMTargetDown"})}
# A replay starts cold. kv-offload-eviction's GPU prefix cache and offload tier start empty, so for its first
# ~200 s every ~3000-token prompt is prefilled and decode stutters for real (B1/B2, before and after the
# recent-horizon rules alike); whether that outlasts the stutter alert's `for:` depends on Prometheus'
# evaluation timing. Its steady state (what the scenario expects) raises nothing.
COLD_START_ALLOWED = {"kv-offload-eviction": frozenset({"VLLMStutteringStream"})}

# ---------------------------------------------------------------------------------------------
# The expected table: one place, derived from the scenario catalog
# ---------------------------------------------------------------------------------------------


def _inhibited_by(sources: set[str]) -> set[str]:
    return {t for src, targets, _ in rules.INHIBITIONS if src in sources for t in targets}


@dataclass(frozen=True)
class Expectation:
    delivered: frozenset[str]  # exactly these must be delivered ...
    allowed: frozenset[str] = frozenset()  # ... plus any of these (what the catalog lets co-fire)
    fired: frozenset[str] = frozenset()  # must fire in Prometheus (delivered or inhibited)


def expected(name: str) -> Expectation:
    """What an endpoint must deliver.

    * each expected symptom's alert fires; the root causes the catalog implies fire too: KV pressure
      where D is expected, CPU starvation where the verdict is ``cpu`` (VLLMCPUStarvation: the
      replay reads the simulated engines' run-queue wait, the host evidence that alert needs);
    * delivered = those, minus what the root causes inhibit;
    * allowed = the alerts of the catalog's "may also fire" symptoms (with KV pressure where D may
      fire, and then what it inhibits becomes optional to deliver); healthy-like scenarios deliver
      nothing at all. The matrix serves the sidecars alone: the error-budget pages, which read vLLM's
      own series, are measured on fleets in tests/e2e/test_fleet_pages.py.
    """
    if name in ROLLOUT_EXPECTED:
        return Expectation(ROLLOUT_EXPECTED[name])
    exp = SCENARIOS[REPLICAS.get(name, name)].expected
    symptom_alerts = {SYMPTOM_BY_ID[s].alert for s in exp.symptoms}
    roots = ({"VLLMKVCachePressure"} if "D" in exp.symptoms else set()) | (
        {"VLLMCPUStarvation"} if exp.verdict == "cpu" else set())
    silenced = _inhibited_by(roots)
    if exp.verdict == "none":
        return Expectation(frozenset(), allowed=COLD_START_ALLOWED.get(name, frozenset()))
    maybe = {SYMPTOM_BY_ID[s].alert for s in exp.also_possible if s in SYMPTOM_BY_ID}
    # A "may also fire" D brings its root cause along; what that root cause inhibits may then be
    # held back instead of delivered (it must still fire).
    maybe_roots = {"VLLMKVCachePressure"} if "D" in exp.also_possible else set()
    maybe |= maybe_roots
    optional = _inhibited_by(maybe_roots)
    return Expectation(delivered=frozenset((symptom_alerts | roots) - silenced - optional),
                       allowed=frozenset((maybe | ((symptom_alerts | roots) & optional)) - silenced),
                       fired=frozenset(symptom_alerts | roots))


def endpoints() -> list[str]:
    return [*SCENARIOS, *replay.ROLLOUTS, *REPLICAS]


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------


def _ts(value: str) -> float:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


@dataclass
class Observed:
    """Everything seen during the playback, per endpoint (instance label)."""

    fired: dict[str, set[str]] = field(default_factory=dict)  # endpoint -> alerts seen firing in Prometheus
    active_at: dict[tuple[str, str], list[float]] = field(default_factory=dict)  # (endpoint, alert) -> onsets
    for_s: dict[str, float] = field(default_factory=dict)  # alert -> scaled `for` in seconds
    replica_checks: list[str] = field(default_factory=list)


def _endpoint(labels: dict[str, str]) -> str:
    return labels.get("instance", "").rsplit(":", 1)[0]


class Playback:
    """Serves every timeline at SPEED from a start instant; before it, the first exposition."""

    def __init__(self, timelines: dict[str, replay.Timeline]) -> None:
        self.timelines = timelines
        self.started: float | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/timelines/{name}/metrics", self._metrics)
        return app

    async def _metrics(self, request: web.Request) -> web.Response:
        timeline = self.timelines[request.match_info["name"]]
        sim = 0.0 if self.started is None else (time.time() - self.started) * replay.SPEED
        return web.Response(body=timeline.at(sim), content_type="text/plain", charset="utf-8")


def _prometheus_config(playback: str, alertmanager: str, rule_files: list[Path], names: list[str]) -> dict[str, Any]:
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [{
            "job_name": rules.SIDECAR_JOB,
            "static_configs": [{"targets": [playback], "labels": {"__metrics_path__": f"/timelines/{n}/metrics"}}
                               for n in names],
            "relabel_configs": [{"source_labels": ["__metrics_path__"], "regex": "/timelines/([^/]+)/metrics",
                                 "target_label": "instance", "replacement": "$1:9863"}],
        }],
    }


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("matrix")
    t0 = time.monotonic()
    base = [*SCENARIOS, *replay.ROLLOUTS]
    timelines = replay.run_all(base)
    for replica, scenario in REPLICAS.items():
        timelines[replica] = replay.renamed(timelines[scenario], "vllm-0", replica)
    replay_s = time.monotonic() - t0
    names = endpoints()

    servers = Servers()
    webhook, playback = Webhook(), Playback(timelines)
    play_port, hook_port, am_port, prom_port = (free_port() for _ in range(4))
    prom_url, am_url = f"http://127.0.0.1:{prom_port}", f"http://127.0.0.1:{am_port}"
    try:
        servers.serve(playback.app(), play_port)
        servers.serve(webhook.app(), hook_port)
        am_config, _ = alertmanager_config(f"http://127.0.0.1:{hook_port}")
        route = am_config["route"]
        for r in (route, *route.get("routes", [])):
            for key, value in (("group_wait", GROUP_WAIT), ("group_interval", "1s")):
                if key in r or r is route:
                    r[key] = value
        alertmanager = start_alertmanager(servers, tmp, am_config, am_port)

        rule_files = []
        (tmp / "rules").mkdir()
        for source in sorted((REPO / "alert_rules").glob("*.yml")):
            path = tmp / "rules" / source.name
            path.write_text(replay.scale_rules(source.read_text()))
            rule_files.append(path)
        observed = Observed()
        for path in rule_files:
            for group in yaml.safe_load(path.read_text())["groups"]:
                for rule in group["rules"]:
                    if "alert" in rule:
                        observed.for_s[rule["alert"]] = replay.seconds(rule["for"])
        prometheus = start_prometheus(servers, tmp, _prometheus_config(
            f"127.0.0.1:{play_port}", f"127.0.0.1:{am_port}", rule_files, names), prom_port)
        wait_ready(alertmanager, am_url, servers.report)
        wait_ready(prometheus, prom_url, servers.report)
        wait_alertmanager_discovered(prom_url, servers.report)
        poll(lambda: len([t for t in get_json(f"{prom_url}/api/v1/targets")["data"]["activeTargets"]
                          if t["health"] == "up"]) == len(names), timeout=30, what="every endpoint scraped",
             diagnostics=servers.report)

        playback.started = time.time()
        end = playback.started + PLAYBACK_S
        while time.time() < end:
            _observe(prom_url, am_url, observed)
            time.sleep(0.5)
        time.sleep(2 * EVAL_INTERVAL_S + 1.0)
        _observe(prom_url, am_url, observed)
        yield {"timelines": timelines, "observed": observed, "webhook": webhook, "started": playback.started,
               "replay_s": replay_s, "playback_s": PLAYBACK_S, "report": servers.report}
    finally:
        servers.stop()


def _observe(prom_url: str, am_url: str, observed: Observed) -> None:
    try:
        alerts = get_json(f"{prom_url}/api/v1/alerts")["data"]["alerts"]
        am_alerts = get_json(f"{am_url}/api/v2/alerts")
        groups = get_json(f"{am_url}/api/v2/alerts/groups")
    except Exception:  # noqa: BLE001 - a slow poll is skipped, the next one catches up
        return
    for a in alerts:
        key = (_endpoint(a["labels"]), a["labels"]["alertname"])
        onsets = observed.active_at.setdefault(key, [])
        at = _ts(a["activeAt"])
        if at not in onsets:
            onsets.append(at)
        if a["state"] == "firing":
            observed.fired.setdefault(key[0], set()).add(key[1])
    # Replicas: whenever replica-a's CPU alert and replica-b's stutter alert are both in Alertmanager,
    # b's is not suppressed, and no group holds alerts of both.
    by_key = {(_endpoint(a["labels"]), a["labels"]["alertname"]): a for a in am_alerts}
    a_cpu = [a for (e, n), a in by_key.items() if e == "replica-a" and n.startswith("VLLMCPUStarvation")]
    b_stutter = by_key.get(("replica-b", "VLLMStutteringStream"))
    if a_cpu and b_stutter:
        state = b_stutter["status"]
        mixed = [g["labels"] for g in groups
                 if {_endpoint(a["labels"]) for a in g["alerts"]} >= {"replica-a", "replica-b"}]
        observed.replica_checks.append(json.dumps({"b_state": state["state"], "inhibitedBy": state["inhibitedBy"],
                                                   "mixed_groups": mixed}))


def _deliveries(matrix: dict[str, Any]) -> dict[str, dict[str, float]]:
    """endpoint -> alert -> first firing delivery time."""
    out: dict[str, dict[str, float]] = {}
    for d in matrix["webhook"].deliveries():
        if d.status != "firing":
            continue
        first = out.setdefault(_endpoint(d.labels), {})
        first.setdefault(d.alertname, d.received_at)
    return out


def _matrix_rows(matrix: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    observed: Observed = matrix["observed"]
    delivered = _deliveries(matrix)
    rows = []
    for name in endpoints():
        exp = expected(name)
        got = delivered.get(name, {})
        timing = []
        for alert, at in sorted(got.items()):
            onset = max((t for t in observed.active_at.get((name, alert), []) if t <= at), default=None)
            delay = "?" if onset is None else f"{(at - onset) * replay.SPEED / 60:.1f}"
            timing.append(f"{alert} {delay}/{observed.for_s.get(alert, 0) * replay.SPEED / 60:g}")
        held = sorted(observed.fired.get(name, set()) - set(got))
        rows.append((name, ", ".join(sorted(exp.delivered)) or "-", ", ".join(timing) or "-",
                     ", ".join(held) or "-", ", ".join(sorted(exp.allowed)) or "-"))
    return rows


def test_print_the_matrix(matrix: dict[str, Any]) -> None:
    """The measured matrix (kept in docs/alerting.md): delivered alerts with onset->delivery/for in
    simulated minutes, alerts that fired but were held back (inhibited), and what was allowed."""
    lines = ["| scenario | expected delivered | delivered (onset->delivery / for, sim. min) | fired, not delivered "
             "(inhibited) | may also deliver |", "|---|---|---|---|---|"]
    lines += [f"| `{r[0]}` | {r[1]} | {r[2]} | {r[3]} | {r[4]} |" for r in _matrix_rows(matrix)]
    report = f"replay {matrix['replay_s']:.0f} s, playback {matrix['playback_s']:.0f} s\n\n" + "\n".join(lines)
    print("\n" + report)
    artifacts = Path(__file__).resolve().parents[2] / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    (artifacts / "alert-matrix.md").write_text(report + "\n", encoding="utf-8")
    assert len(lines) == 2 + len(endpoints())


@pytest.mark.parametrize("name", endpoints())
def test_delivered_alerts_match_the_table(matrix: dict[str, Any], name: str) -> None:
    exp = expected(name)
    got = set(_deliveries(matrix).get(name, {}))
    missing, extra = exp.delivered - got, got - exp.delivered - exp.allowed
    assert not missing and not extra, (
        f"{name}: delivered {sorted(got)}; missing {sorted(missing)}, unexpected {sorted(extra)}; fired in "
        f"Prometheus {sorted(matrix['observed'].fired.get(name, set()))}; symptoms per 5 s (every 10th): "
        f"{matrix['timelines'][name].symptoms[::10]}")
    assert exp.fired <= matrix["observed"].fired.get(name, set()), f"{name}: expected to fire {sorted(exp.fired)}"


def test_every_delivery_within_for_plus_two_evaluation_intervals(matrix: dict[str, Any]) -> None:
    observed: Observed = matrix["observed"]
    late = []
    for name, alerts in _deliveries(matrix).items():
        for alert, at in alerts.items():
            onsets = [t for t in observed.active_at.get((name, alert), []) if t <= at]
            assert onsets, f"{alert} on {name} delivered without an onset seen in Prometheus"
            delay = at - max(onsets)
            if delay > observed.for_s[alert] + 2 * EVAL_INTERVAL_S:
                late.append((name, alert, round(delay, 2), observed.for_s[alert]))
    assert not late, f"(endpoint, alert, onset->delivery s, for s), wall seconds: {late}"


def test_each_symptom_alert_fires_on_its_own_scenario(matrix: dict[str, Any]) -> None:
    fired = matrix["observed"].fired
    for sid, symptom in SYMPTOM_BY_ID.items():
        own = [n for n, sc in SCENARIOS.items() if sid in sc.expected.symptoms]
        assert own, f"no scenario expects symptom {sid}"
        assert any(symptom.alert in fired.get(n, set()) for n in own), f"{symptom.alert} fired on none of {own}"


def test_rollout_slow_start_never_pages_and_a_crash_pages(matrix: dict[str, Any]) -> None:
    delivered = _deliveries(matrix)
    fired = matrix["observed"].fired
    assert not delivered.get("rollout-slow-start") and not fired.get("rollout-slow-start"), (
        delivered.get("rollout-slow-start"), fired.get("rollout-slow-start"))
    assert "VLLMTargetDown" in delivered.get("rollout-crash", {})
    crash_at = matrix["started"] + replay.CRASH_AT_S / replay.SPEED
    delay = delivered["rollout-crash"]["VLLMTargetDown"] - crash_at
    # onset = the first failed scrape Prometheus sees: at most one scrape interval after the crash
    assert delay <= matrix["observed"].for_s["VLLMTargetDown"] + 3 * EVAL_INTERVAL_S, delay


def test_replicas_neither_inhibit_nor_group_each_other(matrix: dict[str, Any]) -> None:
    checks = [json.loads(c) for c in matrix["observed"].replica_checks]
    assert checks, "replica-a's CPU alert and replica-b's stutter alert were never in Alertmanager together"
    for c in checks:
        assert c["b_state"] == "active" and not c["inhibitedBy"] and not c["mixed_groups"], c
    assert "VLLMStutteringStream" in _deliveries(matrix).get("replica-b", {})
