"""Pages on fleets, through a real Prometheus and Alertmanager: one notification per problem, with its cause.

Each case is a model served by several replicas. Every replica is a vLLM (its raw ``/metrics``,
job ``vllm``) with its sidecar (job ``vllm-diag``), both replayed from the real pipeline run offline
over 36 simulated minutes (``tests/e2e/replay.py``), served at ``SPEED`` simulated seconds per
wall second. Prometheus evaluates the generated rules with every duration divided by ``SPEED``; the
Alertmanager runs the generated example's routes and inhibitions with its timings divided likewise,
delivering to a local webhook. All cases run at once, each under its own model name.

What an on-call SRE must get (issue: pages an on-call SRE trusts):

* a queue-driven latency outage on all eight replicas: one page for the model, naming the cause;
* a fleet-wide KV crunch: one page naming KV (layer kv_cache), not one per replica;
* one replica of eight short of KV, the model's budget fine: warnings only;
* CPU contention within the objectives: no page; CPU starvation that burns the budget: one page
  naming the CPU;
* a sidecar that loses its CPU source: a warning naming the input within 45 minutes;
* a model load shorter than the startup grace, a rolling restart, a 3-minute burst: no page;
* every pod of a model deleted: exactly one page, which stays open.

The burst needs an hour of history before it (80 simulated minutes); the suite leaves it out and
``python -m lab.fleet_pages`` plays every case. The table is printed (``-s``, and
test-artifacts/fleet-pages.md) and kept in docs/alerting.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from exporter.render import rules
from tests.e2e import replay
from tests.e2e.components import (
    REPO,
    Servers,
    get_json,
    start_alertmanager,
    start_prometheus,
    wait_alertmanager_discovered,
    wait_ready,
)
from tests.helpers import free_port

pytestmark = pytest.mark.prometheus

SPEED = replay.SPEED  # one Prometheus evaluation per simulated minute
NAMESPACE = "fleet"


@dataclass(frozen=True)
class Replica:
    pod: str
    timeline: str
    down: tuple[float, float] | None = None  # simulated seconds the whole pod is gone (a restart)


@dataclass(frozen=True)
class FleetCase:
    model: str
    replicas: tuple[Replica, ...]
    pages: int  # critical notifications expected for the model
    page_layer: str | None = None  # the layer the page names
    page_within_min: float | None = None  # simulated minutes from the start
    warnings: frozenset[str] = frozenset()  # warning alerts that must be delivered
    warning_within_min: float | None = None
    stays_open: bool = False  # the page keeps firing until the case ends
    note: str = ""

    @property
    def end_s(self) -> float:
        """Simulated seconds the case lasts: its timelines' (they end together)."""
        return min(replay.VARIANTS[r.timeline].duration_s for r in self.replicas)


def _fleet(model: str, timeline: str, n: int = 8) -> tuple[Replica, ...]:
    return tuple(Replica(f"{model}-{i}", timeline) for i in range(n))


ROLLING_DOWN_S = 120.0  # each pod restarts in 2 minutes, one after the other
VANISH_AT_S = 720.0  # the minute a model's pods are all deleted
ALL_CASES: tuple[FleetCase, ...] = (
    FleetCase("outage", _fleet("outage", "fleet-queue"), pages=1, page_layer="scheduler", page_within_min=20,
              note="queue-backlog on 8 replicas: ~96 % of first tokens over 2.5 s, no KV or CPU cause"),
    FleetCase("kvcrunch", _fleet("kvcrunch", "fleet-kv"), pages=1, page_layer="kv_cache", page_within_min=20,
              note="kv-pressure on 8 replicas"),
    FleetCase("onekv", (Replica("onekv-0", "fleet-kv"), *_fleet("onekv", "fleet-healthy")[1:]), pages=0,
              warnings=frozenset({"VLLMKVCachePressure"}),
              note="kv-pressure on 1 of 8 replicas: the model's burn stays under the paging rates"),
    FleetCase("cpuok", _fleet("cpuok", "fleet-cpu-contended", 2), pages=0,
              note="run-queue wait 60 % beside a healthy engine: objectives met"),
    FleetCase("cpuburn", _fleet("cpuburn", "fleet-cpu-starved", 2), pages=1, page_layer="cpu", page_within_min=20,
              note="cpu-starved on 2 replicas"),
    FleetCase("cpulost", _fleet("cpulost", "fleet-cpu-lost", 2), pages=0,
              warnings=frozenset({"VLLMDiagInputMissing"}), warning_within_min=1 + 45,
              note="the CPU source becomes unreadable at minute 1"),
    FleetCase("slowstart", _fleet("slowstart", "fleet-slow-start", 4), pages=0,
              note="a 15-minute model load (grace 20 minutes)"),
    FleetCase("rolling", tuple(Replica(f"rolling-{i}", "fleet-healthy", (600.0 + i * 180, 600.0 + i * 180
                                                                        + ROLLING_DOWN_S)) for i in range(4)),
              pages=0, note="a rolling restart: each of 4 pods gone for 2 minutes, one after the other"),
    # Every pod of a model deleted (a bad rollout of a Recreate Deployment): its targets answer nothing
    # any more, and the inventory remembers the model.
    FleetCase("vanish", tuple(Replica(f"vanish-{i}", "fleet-healthy", (VANISH_AT_S, float("inf"))) for i in range(4)),
              pages=1, page_within_min=VANISH_AT_S / 60 + 15, stays_open=True,
              note=f"all 4 pods deleted at minute {VANISH_AT_S / 60:.0f}: one page, still open at the end"),
    FleetCase("burst", _fleet("burst", "fleet-burst"), pages=0,
              note=f"a 3-minute burst of 8k-token prompts at minute {replay.BURST_AT_S / 60:.0f} on 8 replicas: "
                   "~3 minutes of first tokens over 2.5 s, ~7x over the hour"),
)
# The suite plays the 36-minute cases (36 s of playback); the burst's 80 minutes (and its replay, the
# longest) run with `python -m lab.fleet_pages`, which plays every case.
CASES: tuple[FleetCase, ...] = tuple(
    c for c in ALL_CASES if all(r.timeline in replay.fleet_variant_names() for r in c.replicas))


def _scaled(duration: str) -> str:
    return replay._scaled(duration, SPEED)


@dataclass
class Notification:
    receiver: str
    group: dict[str, str]
    status: str
    alerts: list[dict[str, Any]]
    at: float


@dataclass
class Hook:
    """Every webhook POST as one notification (Alertmanager sends one per group flush)."""

    posts: list[Notification] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        return app

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.posts.append(Notification(body.get("receiver", ""), dict(body.get("groupLabels", {})),
                                       body.get("status", ""), list(body.get("alerts", [])), time.time()))
        return web.Response(text="ok")


class FleetPlayback:
    """Serves each replica's vLLM and sidecar expositions at SPEED; a pod that is down answers 503."""

    def __init__(self, timelines: dict[tuple[str, str], replay.Timeline], replicas: dict[str, Replica]) -> None:
        self.timelines = timelines  # (pod, "raw"|"diag") -> timeline
        self.replicas = replicas
        self.started: float | None = None

    def sim(self) -> float:
        return 0.0 if self.started is None else (time.time() - self.started) * SPEED

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{pod}/{kind}/metrics", self._metrics)
        return app

    async def _metrics(self, request: web.Request) -> web.Response:
        pod, kind = request.match_info["pod"], request.match_info["kind"]
        now = self.sim()
        down = self.replicas[pod].down
        if down is not None and down[0] <= now < down[1]:
            return web.Response(status=503, text="restarting")
        timeline = self.timelines[(pod, kind)]
        if now >= len(timeline.bodies) * replay.SIM_INTERVAL_S:
            return web.Response(status=503, text="case over")
        body = timeline.raw_at(now) if kind == "raw" else timeline.at(now)
        if body is None:
            return web.Response(status=503, text="loading")
        return web.Response(body=body, content_type="text/plain", charset="utf-8")


def _prometheus_config(playback: str, alertmanager: str, rule_files: list[Path]) -> dict[str, Any]:
    def job(name: str, kind: str) -> dict[str, Any]:
        return {
            "job_name": name,
            "static_configs": [{"targets": [playback], "labels": {
                "__metrics_path__": f"/{r.pod}/{kind}/metrics", "namespace": NAMESPACE, "pod": r.pod}}
                for case in CASES for r in case.replicas],
            "relabel_configs": [{"source_labels": ["pod"], "target_label": "instance",
                                 "replacement": f"$1:{8000 if kind == 'raw' else 9863}"}],
        }
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [job("vllm", "raw"), job(rules.SIDECAR_JOB, "diag")],
    }


def _alertmanager_config(webhook: str) -> dict[str, Any]:
    """The generated example, its receivers pointed at the webhook and its timings divided by SPEED."""
    config = yaml.safe_load((REPO / rules.ALERTMANAGER_FILE).read_text())

    def scale(route: dict[str, Any]) -> None:
        for key in ("group_wait", "group_interval", "repeat_interval"):
            if key in route:
                route[key] = _scaled(route[key])
        for sub in route.get("routes", []):
            scale(sub)
    scale(config["route"])
    for receiver in config["receivers"]:
        # Resolved notifications too: a page is a notification that opens an incident (a group that was
        # not firing), and only a resolution closes one.
        receiver["webhook_configs"] = [{"url": f"{webhook}/{receiver['name']}", "send_resolved": True}]
    return config


def _sidecar_timeline(timeline: replay.Timeline, pod: str, model: str) -> replay.Timeline:
    # The sidecar in a pod names its target after the pod (the downward API default).
    return replay.renamed(timeline, pod, pod, model)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("fleet")
    t0 = time.monotonic()
    needed = sorted({r.timeline for case in CASES for r in case.replicas})
    base = replay.run_all(needed)
    replay_s = time.monotonic() - t0
    timelines, replicas = {}, {}
    for case in CASES:
        for r in case.replicas:
            t = _sidecar_timeline(base[r.timeline], r.pod, case.model)
            timelines[(r.pod, "raw")] = timelines[(r.pod, "diag")] = t
            replicas[r.pod] = r

    servers = Servers()
    hook, playback = Hook(), FleetPlayback(timelines, replicas)
    play_port, hook_port, am_port, prom_port = (free_port() for _ in range(4))
    prom_url, am_url = f"http://127.0.0.1:{prom_port}", f"http://127.0.0.1:{am_port}"
    try:
        servers.serve(playback.app(), play_port)
        servers.serve(hook.app(), hook_port)
        alertmanager = start_alertmanager(servers, tmp, _alertmanager_config(f"http://127.0.0.1:{hook_port}"),
                                          am_port)
        (tmp / "rules").mkdir()
        rule_files = []
        for source in sorted((REPO / "alert_rules").glob("*.yml")):
            path = tmp / "rules" / source.name
            path.write_text(replay.scale_rules(source.read_text(), SPEED))
            rule_files.append(path)
        prometheus = start_prometheus(servers, tmp, _prometheus_config(
            f"127.0.0.1:{play_port}", f"127.0.0.1:{am_port}", rule_files), prom_port)
        wait_ready(alertmanager, am_url, servers.report)
        wait_ready(prometheus, prom_url, servers.report)
        wait_alertmanager_discovered(prom_url, servers.report)
        playback.started = time.time()
        fired: dict[str, set[str]] = {}
        polls: list[tuple[float, dict[str, set[str]]]] = []  # (simulated minute, model -> critical alerts)
        end = playback.started + max(c.end_s for c in CASES) / SPEED
        while time.time() < end:
            try:
                critical: dict[str, set[str]] = {}
                for a in get_json(f"{prom_url}/api/v1/alerts")["data"]["alerts"]:
                    if a["state"] == "firing":
                        fired.setdefault(a["labels"].get("model_name", ""), set()).add(a["labels"]["alertname"])
                        if a["labels"].get("severity") == "critical":
                            critical.setdefault(a["labels"].get("model_name", ""), set()).add(a["labels"]["alertname"])
                polls.append(((time.time() - playback.started) * SPEED / 60, critical))
            except Exception:  # noqa: BLE001 - a slow poll is skipped
                pass
            time.sleep(1.0)
        time.sleep(2.0)
        yield {"hook": hook, "started": playback.started, "fired": fired, "polls": polls, "replay_s": replay_s,
               "report": servers.report}
    finally:
        servers.stop()


def _minutes(fleet: dict[str, Any], at: float) -> float:
    return (at - fleet["started"]) * SPEED / 60


def _model_of(n: Notification) -> str:
    models = {a["labels"].get("model_name", "") for a in n.alerts}
    return models.pop() if len(models) == 1 else ",".join(sorted(models))


def _during(fleet: dict[str, Any], case: FleetCase) -> list[Notification]:
    """Notifications while the case's timelines play (a case that ends earlier than the longest goes
    dark: what its end raises is not part of it)."""
    return [n for n in fleet["hook"].posts if _minutes(fleet, n.at) <= case.end_s / 60]


def _page_posts(fleet: dict[str, Any], case: FleetCase) -> list[Notification]:
    return [n for n in _during(fleet, case) if n.receiver == "page" and _model_of(n) == case.model]


def _pages(fleet: dict[str, Any], case: FleetCase) -> list[Notification]:
    """The notifications that open an incident: the group's first firing one, or the first after it
    resolved. Further firing notifications of an open group update it (an alert of another burn tier
    joined, annotations changed): receivers such as PagerDuty dedupe them by the group key."""
    opening, open_ = [], False
    for n in _page_posts(fleet, case):
        if n.status == "firing" and not open_:
            opening.append(n)
        open_ = n.status == "firing"
    return opening


def _warnings(fleet: dict[str, Any], case: FleetCase) -> dict[str, float]:
    """Warning alert -> first delivery (simulated minutes) for the model."""
    out: dict[str, float] = {}
    model = case.model
    for n in _during(fleet, case):
        if n.receiver != "ticket":
            continue
        for a in n.alerts:
            if a.get("status") != "firing":
                continue
            if a["labels"].get("model_name") == model or a["labels"].get("target", "").startswith(f"{model}-"):
                out.setdefault(a["labels"]["alertname"], _minutes(fleet, n.at))
    return out


def test_print_the_fleet_table(fleet: dict[str, Any]) -> None:
    lines = ["| case | replicas | pages (incidents opened) | page names | first page (sim. min) | warnings delivered |",
             "|---|---|---|---|---|---|"]
    for case in CASES:
        pages = _pages(fleet, case)
        names = sorted({f"{a['labels']['alertname']} {a['labels'].get('objective', '')} cause "
                        f"{a['annotations'].get('cause', '-')} ({a['annotations'].get('layer', '-')})"
                        for n in pages for a in n.alerts})
        first = f"{_minutes(fleet, pages[0].at):.1f}" if pages else "-"
        warnings = ", ".join(f"{k} {v:.0f}" for k, v in sorted(_warnings(fleet, case).items())) or "-"
        lines.append(f"| `{case.model}`: {case.note} | {len(case.replicas)} | {len(pages)} | "
                     f"{'; '.join(names) or '-'} | {first} | {warnings} |")
    playback_s = max(c.end_s for c in CASES) / SPEED
    table = f"replay {fleet['replay_s']:.0f} s, playback {playback_s:.0f} s\n\n" + "\n".join(lines)
    print("\n" + table)
    artifacts = REPO / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    (artifacts / "fleet-pages.md").write_text(table + "\n", encoding="utf-8")
    assert len(lines) == 2 + len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.model for c in CASES])
def test_one_page_per_problem_naming_its_cause(fleet: dict[str, Any], case: FleetCase) -> None:
    pages = _pages(fleet, case)
    detail = (f"{case.model}: pages {[(n.group, [a['labels'] for a in n.alerts]) for n in pages]}; fired in "
              f"Prometheus {sorted(fleet['fired'].get(case.model, set()))}")
    assert len(pages) == case.pages, detail
    if case.pages:
        first = pages[0]
        assert _minutes(fleet, first.at) <= case.page_within_min, detail
        if case.page_layer is not None:
            # The cause and its layer are annotations (the page's identity never changes with them).
            layers = {a["annotations"].get("layer") for a in first.alerts}
            assert case.page_layer in layers, detail
        # One notification carries the whole model: never a group per replica.
        assert set(first.group) <= {"cluster", "namespace", "model_name"}, detail


@pytest.mark.parametrize("case", [c for c in CASES if c.stays_open], ids=[c.model for c in CASES if c.stays_open])
def test_a_vanished_model_pages_until_the_case_ends(fleet: dict[str, Any], case: FleetCase) -> None:
    """Once the page fires it stays firing in Prometheus for every poll until the case ends."""
    assert not [n for n in _page_posts(fleet, case) if n.status == "resolved"], "the page resolved"
    first = next(m for m, critical in fleet["polls"] if case.model in critical)
    held = [("VLLMModelUnavailable" in critical.get(case.model, set()), m) for m, critical in fleet["polls"]
            if first <= m <= case.end_s / 60 - 0.5]
    assert held and all(ok for ok, _ in held), [m for ok, m in held if not ok]


@pytest.mark.parametrize("case", [c for c in CASES if c.warnings], ids=[c.model for c in CASES if c.warnings])
def test_expected_warnings_are_delivered(fleet: dict[str, Any], case: FleetCase) -> None:
    got = _warnings(fleet, case)
    missing = case.warnings - set(got)
    assert not missing, f"{case.model}: missing {sorted(missing)}; delivered {got}"
    if case.warning_within_min is not None:
        late = {k: v for k, v in got.items() if k in case.warnings and v > case.warning_within_min}
        assert not late, late
