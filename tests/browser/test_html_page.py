"""The HTML page, loaded by a real headless Chromium from a running sidecar."""

from __future__ import annotations

import asyncio
import base64
import re
import shutil
import tempfile
from datetime import UTC, datetime
from itertools import count
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from exporter import demo
from exporter.catalog.symptoms import LAYERS, SYMPTOMS
from exporter.config import load_settings
from exporter.poll import fetch
from exporter.server import SIDECAR, create_app
from exporter.simulator.server import SIMS, build_app
from tests.browser.cdp import Chromium
from tests.conftest import read_capture
from tests.helpers import free_port

pytestmark = pytest.mark.browser
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
HOSTILE = '<script>document.title="pwned"</script><b>m</b>'


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("chromium is not installed (scripts/install-test-infra.sh installs it)")
    return path


async def _chromium_run(*args: str) -> str:
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        proc = await asyncio.create_subprocess_exec(
            _chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
            "--disable-quic", f"--user-data-dir={profile}", *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout=90)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    return out.decode("utf-8", "replace")


@pytest.fixture
async def hostile_upstream(fixtures_dir):
    """A vLLM whose model name is hostile markup, moving through a KV-pressure episode."""
    phases = ["chunked", "pressure-during", "pressure-peak-waiting", "pressure"]
    hostile_label = 'model_name="' + HOSTILE.replace('"', '\\"') + '"'
    texts = [read_capture(fixtures_dir, p).replace('model_name="tiny"', hostile_label) for p in phases]
    served = count()

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=texts[min(next(served), len(texts) - 1)])

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    yield f"http://127.0.0.1:{server.port}/metrics"
    await server.close()


async def test_page_shows_verdict_and_evidence_and_escapes_labels(hostile_upstream):
    settings = load_settings(overrides={
        "window_seconds": 30,
        "targets": [{"name": "vllm-0", "url": hostile_upstream, "scrape_interval": 0.25, "timeout": 0.2}],
    })
    server = TestServer(create_app(settings), host="127.0.0.1")
    await server.start_server()
    try:
        await asyncio.sleep(1.5)  # four scrapes: the pressure episode is in the window
        url = f"http://127.0.0.1:{server.port}/"
        dom = await _chromium_run("--virtual-time-budget=2000", "--dump-dom", url)
        ARTIFACTS.mkdir(exist_ok=True)
        shot = ARTIFACTS / "diagnosis-page.png"
        await _chromium_run("--window-size=1200,1800", f"--screenshot={shot}", url)
    finally:
        await server.close()

    assert 'data-verdict="kv_cache"' in dom
    assert "Frequent preemption" in dom and "per admitted request" in dom  # D and its evidence numbers
    assert "raise gpu_memory_utilization" in dom and "less headroom" in dom  # action and its cost
    # The hostile model name is text: escaped in the DOM, never parsed as an element.
    assert "&lt;script&gt;" in dom and "pwned" not in dom.split("<title>")[1].split("</title>")[0]
    assert "<b>m</b>" not in dom
    assert shot.is_file() and shot.stat().st_size > 10_000


async def test_page_ranks_worst_first_explains_itself_and_links_out():
    """A fleet as the demo shows it (simulated history fed through the real pipeline), one target
    that refuses connections and one whose verdict is held by hysteresis, read by Chromium."""
    names = ["healthy", "rag-shared-prefix", "template-instability", "itl-stutter", "kv-pressure"]
    unused = f"http://127.0.0.1:{free_port()}"  # nothing listens: a scrape of it is refused
    base = demo.settings_for(names, unused, "127.0.0.1:9863", 2.0)
    targets = [t.model_dump() for t in base.targets]
    targets.append({"name": "gone", "url": f"{unused}/metrics", "scrape_interval": 2.0, "timeout": 1.0})
    settings = load_settings(overrides={"window_seconds": demo.WINDOW_SECONDS, "targets": targets,
                                        "runbook_base_url": RUNBOOKS})
    app = create_app(settings, start_polling=False)  # no scheduler: the state below is what the page shows
    sidecar = app[SIDECAR]
    demo.prime(sidecar, build_app(names, warmup_s=demo.WINDOW_SECONDS, background_interval_s=None)[SIMS],
               demo.WINDOW_SECONDS, demo.WINDOW_SECONDS)
    async with aiohttp.ClientSession() as session:  # one real, refused scrape
        sidecar.pipelines["gone"].ingest(await fetch(session, f"{unused}/metrics", timeout=1.0, max_bytes=1 << 20))
    # itl-stutter's verdict was kv_cache until now (as after a change of traffic): the scheduler
    # symptoms lead, but hysteresis holds the old verdict for now.
    held = sidecar.pipelines["itl-stutter"]
    at = held.state.last_scrape_at
    for _ in range(10):
        if held.tracker.layer == "kv_cache":
            break
        held.tracker.update({layer: 0.9 if layer == "kv_cache" else 0.0 for layer in LAYERS}, held.thresholds, at)
    held.evaluate(at)
    sidecar.states = {name: pipeline.state for name, pipeline in sidecar.pipelines.items()}

    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with Chromium(f"http://127.0.0.1:{server.port}/") as page:
            seen = await page.evaluate(PAGE_FACTS)
            shot = await page.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
            dom = await page.evaluate("document.documentElement.outerHTML")
    finally:
        await server.close()
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "diagnosis-page-fleet.png").write_bytes(base64.b64decode(shot["data"]))
    (ARTIFACTS / "diagnosis-page-fleet.html").write_text(dom, encoding="utf-8")

    doc = {t["target"]: t for t in seen["json"]["targets"]}
    order, shown = seen["order"], seen["targets"]
    # Worst first: the critical preemption storm, then the target we cannot read, then warning-level
    # work, then an informational finding; the healthy target last (config order was the reverse).
    assert order[0] == "kv-pressure" and order[1] == "gone" and order[-1] == "healthy", order
    assert order.index("itl-stutter") < order.index("rag-shared-prefix"), order
    assert order.index("template-instability") < order.index("rag-shared-prefix"), order
    assert shown["gone"]["severity"] == "down" and doc["gone"]["state"] == "down"
    # Colours follow severity: red only for a critical verdict, never for an informational one.
    assert shown["kv-pressure"]["colour"] == RED
    assert shown["template-instability"]["severity"] == "warning"
    # RAG within its objectives: prefix reuse is low but bounded by the documents; information only.
    assert doc["rag-shared-prefix"]["verdict"]["layer"] == "none"
    assert shown["rag-shared-prefix"]["severity"] == "info" and shown["rag-shared-prefix"]["colour"] != RED
    assert shown["healthy"]["colour"] == GREEN
    # The held verdict says what is pending, and only there.
    assert doc["itl-stutter"]["verdict"]["layer"] == "kv_cache"
    assert shown["itl-stutter"]["pending"] == "scheduler" and "hysteresis" in shown["itl-stutter"]["pendingText"]
    assert [n for n in order if shown[n]["pending"]] == ["itl-stutter"]
    # Timestamps: when the verdict was reached and when the last scrape happened, in UTC.
    now = seen["now"] / 1000
    for name in names:
        since, last = (iso_seconds(shown[name][k]) for k in ("since", "last"))
        assert since <= last <= now + 1 and now - last < demo.WINDOW_SECONDS, (name, since, last, now)
    # Links: the JSON and /metrics answer; every runbook link names an existing runbook file.
    assert seen["status"] == {"json": 200, "metrics": 200, "text": 200}
    assert seen["runbooks"] and all(url.startswith(RUNBOOKS + "/") for url in seen["runbooks"])
    assert all((ROOT / "docs" / "runbooks" / url.rsplit("/", 1)[1]).is_file() for url in seen["runbooks"])
    assert RUNBOOKS + "/vllmfrequentpreemption.md" in seen["runbooks"]
    # The legend explains layers, symptom classes, score and strength.
    legend = seen["legend"]
    assert all(layer in legend for layer in LAYERS)
    assert all(f"{s.id}\n" in legend and s.title in legend for s in SYMPTOMS)
    assert "score" in legend and "strength" in legend and "hysteresis" in legend
    # Numbers read as numbers: no exponent notation, no comparison of two equal-looking values.
    assert not re.search(r"\d(\.\d+)?e[+-]?\d", seen["text"]), re.search(r".{40}\de[+-]?\d.{10}", seen["text"])
    assert not re.search(r"(?<![\d.])(\d+(?:\.\d+)?%?) [<>] \1(?![\d.])", seen["text"])
    assert shown["kv-pressure"]["signals"]["generation_tokens_per_second"].endswith("/s")


RUNBOOKS = "https://runbooks.example/vllm-diag"
RED, GREEN = "rgb(180, 35, 24)", "rgb(26, 127, 55)"
ROOT = Path(__file__).resolve().parents[2]

# Facts the browser computed: the order of the sections, each verdict's computed colour, the
# pending notes, the timestamps, the legend's text, and the status of the page's own links.
PAGE_FACTS = """(async () => {
  const sections = [...document.querySelectorAll("section.target")];
  const targets = {};
  for (const s of sections) {
    const verdict = s.querySelector(".verdict"), pending = s.querySelector(".pending");
    const signals = {};
    for (const cell of s.querySelectorAll("td[data-signal]")) signals[cell.dataset.signal] = cell.innerText;
    targets[s.dataset.target] = {
      severity: s.dataset.severity, colour: getComputedStyle(verdict).color,
      pending: pending ? pending.dataset.pending : null, pendingText: pending ? pending.innerText : "",
      since: s.querySelector("time.since")?.getAttribute("datetime") ?? null,
      last: s.querySelector("time.last-scrape")?.getAttribute("datetime") ?? null, signals,
    };
  }
  const links = {json: "#link-json", metrics: "#link-metrics", text: "#link-text"};
  const status = {};
  for (const [key, selector] of Object.entries(links)) {
    status[key] = (await fetch(document.querySelector(selector).href)).status;
  }
  const json = await (await fetch(document.querySelector("#link-json").href)).json();
  return {order: sections.map(s => s.dataset.target), targets, status, json, now: Date.now(),
          runbooks: [...new Set([...document.querySelectorAll("a.runbook")].map(a => a.href))],
          legend: document.querySelector("#legend").innerText, text: document.body.innerText};
})()"""


def iso_seconds(value: str) -> float:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
