"""`vllm-diag diagnose` as a user runs it: offline captures, a live URL, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count

import pytest

from tests.conftest import read_capture

CLI = [sys.executable, "-m", "exporter.cli"]


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout)


def test_offline_text_report_puts_the_verdict_first(fixtures_dir):
    files = [str(fixtures_dir / f"snapshot-{p}.txt") for p in ("chunked", "pressure-during", "pressure")]
    proc = run("diagnose", *files, "--interval", "10")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[2].startswith("verdict: kv_cache")
    evidence = next(i for i, line in enumerate(lines) if "evidence:" in line)
    action = next(i for i, line in enumerate(lines) if "action:" in line)
    assert evidence < action and "cost:" in lines[action + 1]


@pytest.mark.slow  # watches a live URL for seconds, by design
def test_live_url_one_shot(fixtures_dir):
    pages = [read_capture(fixtures_dir, p) for p in ("chunked", "pressure-during", "pressure-peak-waiting", "pressure")]
    served = count()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            body = pages[min(next(served), len(pages) - 1)].encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        proc = run("diagnose", "--url", url, "--duration", "2", "--interval", "0.5", "--format", "json")
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc.stderr
    target = json.loads(proc.stdout)["targets"][0]
    assert target["state"] == "ok" and target["signals"]["scrapes"] >= 4
    assert target["signals"]["preemptions"] > 0


@pytest.mark.slow
def test_live_url_that_refuses_is_reported_not_crashed():
    proc = run("diagnose", "--url", "http://127.0.0.1:1/metrics", "--duration", "1", "--interval", "0.5",
               "--format", "json")
    assert proc.returncode == 0, proc.stderr
    target = json.loads(proc.stdout)["targets"][0]
    assert target["state"] == "down" and target["verdict"]["layer"] == "unknown"
    assert target["scrape"]["errors_total"]["connect"] >= 1


def diagnose_json(capsys, *args: str) -> dict:
    """`vllm-diag diagnose ... --format json` in this process (no interpreter start per call)."""
    from exporter.cli import main

    assert main(["diagnose", *args, "--format", "json"]) == 0
    out, err = capsys.readouterr()
    return json.loads(out)["targets"][0]


def comparable(target: dict) -> dict:
    return {k: target[k] for k in ("target", "state", "verdict", "layer_scores", "symptoms", "signals", "missing")}


def test_diagnose_a_simulate_out_folder_uses_its_config_and_dcgm(tmp_path, capsys):
    from exporter.simulator import get_scenario, write_captures

    folder = tmp_path / "caps"
    write_captures("cpu-starved", folder, 240, 15)
    explicit = diagnose_json(capsys, *sorted(str(p) for p in folder.glob("capture-*.txt")), "--interval", "15",
                             "--config", str(folder / "vllm-diag.yaml"), "--dcgm", str(folder / "dcgm"))
    assert explicit["verdict"]["layer"] == get_scenario("cpu-starved").expected.verdict
    assert explicit["signals"]["gpu_utilization"] is not None  # the DCGM captures were read
    # The folder alone, and the shell's DIR/* (captures, dcgm/, vllm-diag.yaml, scenario.json), say the same.
    assert comparable(diagnose_json(capsys, str(folder))) == comparable(explicit)
    assert comparable(diagnose_json(capsys, *sorted(str(p) for p in folder.iterdir()))) == comparable(explicit)
    # Flags win over what the folder holds: a window of 60 s judges less than the captures hold.
    assert diagnose_json(capsys, str(folder), "--window", "60")["signals"]["window_seconds"] <= 60


def test_diagnose_a_folder_with_another_config_keeps_the_folders_interval_and_facts(tmp_path, capsys):
    """--config X judges by X's objectives, while how the captures were taken (30 s apart, not the default 15)
    and the engine they came from (its facts) are the folder's."""
    from exporter.simulator import write_captures

    folder = tmp_path / "caps"
    write_captures("cpu-starved", folder, 300, 30)  # 10 captures 30 s apart: 270 s of traffic
    own = diagnose_json(capsys, str(folder))
    objectives = tmp_path / "objectives.yaml"
    objectives.write_text("slo:\n  ttft_p95_seconds: 9\n")
    judged = diagnose_json(capsys, str(folder), "--config", str(objectives))
    assert own["signals"]["window_seconds"] == judged["signals"]["window_seconds"] == 270  # not 9 x 15 s
    assert judged["signals"]["requests_per_second"] == own["signals"]["requests_per_second"]
    assert judged["objectives"]["ttft"]["threshold_seconds"] == 9  # --config's objectives
    facts = {k: v["value"] for k, v in judged["engine"].items() if v["source"] == "config"}
    assert facts == {k: v["value"] for k, v in own["engine"].items() if v["source"] == "config"}
    assert facts["max_num_batched_tokens"] == 8192 and facts["gpu"] == "H100"  # the folder's engine


def test_diagnose_a_record_dir_orders_by_scrape_time_and_matches_the_live_sidecar(tmp_path, capsys, fixtures_dir,
                                                                                   capture_times):
    """Captures written by the sidecar's record_dir, renamed so that name order is not time order."""
    from exporter.config import load_settings
    from exporter.pipeline import TargetPipeline
    from exporter.poll import ScrapeResult
    from exporter.record import Recorder

    recorded = tmp_path / "recorded"
    phases = ["steady", "chunked", "pressure-during", "pressure", "abort"]  # distinct scrape times
    settings = load_settings(overrides={"window_seconds": 3600, "targets": [
        {"name": "vllm-0", "url": "http://127.0.0.1:8000/metrics", "scrape_interval": 60, "timeout": 3,
         "record_dir": str(recorded)}]})
    live = TargetPipeline(settings.targets[0], settings)
    live.recorder = Recorder("vllm-0", recorded, settings.targets[0].record_retention)  # as the sidecar sets it
    live.recorder.start()
    for phase in phases:
        body = read_capture(fixtures_dir, phase).encode()
        state = live.ingest(ScrapeResult(started_at=capture_times[phase], duration=0.01, body=body))
    live.recorder.close()  # the writer thread drains its queue
    files = sorted(recorded.glob("vllm-0-*"), key=lambda p: p.name)  # beside them: vllm-0.vllm-diag.yaml
    assert len(files) == len(phases)
    for index, path in enumerate(reversed(files)):  # the latest capture gets the first name
        path.rename(recorded / f"capture-{index}.txt.gz")

    offline = diagnose_json(capsys, str(recorded), "--window", "3600")
    assert offline["target"] == "vllm-0"  # named in the capture headers
    assert offline["signals"] == {k: v for k, v in state.to_dict()["signals"].items()}
    assert offline["verdict"]["layer"] == state.diagnosis.verdict.layer != "unknown"


def test_a_record_dir_holds_the_targets_objectives_and_facts_and_diagnose_reads_them(tmp_path, capsys, fixtures_dir,
                                                                                      capture_times):
    """The sidecar's recorder writes the target's configuration beside its captures: `diagnose DIR` alone judges
    them against the deployment's objectives and engine facts, as the sidecar did, not the defaults."""
    from exporter.config import load_settings
    from exporter.poll import ScrapeResult
    from exporter.server import Sidecar

    recorded = tmp_path / "recorded"
    settings = load_settings(overrides={"window_seconds": 3600, "targets": [
        {"name": "vllm-0", "url": "http://user:secret@127.0.0.1:8000/metrics", "scrape_interval": 60, "timeout": 3,
         "record_dir": str(recorded), "slo": {"ttft_p95_seconds": 0.25, "itl_p95_seconds": 0.025},
         "engine": {"max_num_batched_tokens": 2048, "gpu": "H100"}}]})
    sidecar = Sidecar(settings, read_processes=False)
    pipeline = sidecar.pipelines["vllm-0"]
    assert pipeline.recorder is not None
    pipeline.recorder.start()
    for phase in ("steady", "chunked", "pressure-during", "pressure"):
        body = read_capture(fixtures_dir, phase).encode()
        state = pipeline.ingest(ScrapeResult(started_at=capture_times[phase], duration=0.01, body=body))
    pipeline.recorder.close()
    config = recorded / "vllm-0.vllm-diag.yaml"
    assert config.is_file() and "secret" not in config.read_text()  # credentials stay in the configuration

    offline = diagnose_json(capsys, str(recorded), "--window", "3600")
    assert offline["objectives"]["ttft"]["threshold_seconds"] == 0.25  # the deployment's, not the default 2.5
    assert offline["objectives"]["itl"]["threshold_seconds"] == 0.025
    assert offline["objectives"] == state.to_dict()["objectives"]
    assert offline["engine"]["max_num_batched_tokens"]["value"] == 2048
    # discovered by the sidecar (cache_config_info), recorded: configured for diagnose
    assert offline["engine"]["block_size"]["value"] == state.to_dict()["engine"]["block_size"]["value"]
    assert offline["verdict"]["layer"] == state.diagnosis.verdict.layer
    # The shell's DIR/* passes the configuration as one more file: recognised by its name, not a capture.
    each = diagnose_json(capsys, *sorted(str(p) for p in recorded.iterdir()), "--window", "3600")
    assert each["objectives"] == offline["objectives"] and each["engine"] == offline["engine"]


def test_diagnose_never_writes_even_with_record_dir_configured(tmp_path, capsys, fixtures_dir):
    record = tmp_path / "must-not-exist"
    config = tmp_path / "vllm-diag.yaml"
    config.write_text(f"targets:\n  - name: vllm-0\n    url: http://127.0.0.1:8000/metrics\n"
                      f"    record_dir: {record}\n")
    files = [str(fixtures_dir / f"snapshot-{p}.txt") for p in ("chunked", "pressure-during", "pressure")]
    assert diagnose_json(capsys, *files, "--config", str(config))["state"] == "ok"
    assert not record.exists()


def test_help_documents_every_flag_in_plain_text():
    from exporter.cli import build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command").choices
    for name, sub in [("vllm-diag", parser), *subparsers.items()]:
        text = sub.format_help()
        assert "``" not in text, name
        undocumented = [a.option_strings or a.dest for a in sub._actions if not a.help]
        assert not undocumented, (name, undocumented)
