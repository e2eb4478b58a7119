"""Issue 30: recorded captures survive crashes, never fill the disk, and a damaged one never
blocks a diagnosis.

Every server here binds 127.0.0.1; every process started is stopped by its PID.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from exporter.cli import main
from exporter.config import RecordRetention, load_settings
from exporter.offline import capture_problem
from exporter.record import Recorder, is_capture_name, read_capture
from exporter.server import create_app
from tests.conftest import read_capture as fixture_text
from tests.helpers import free_port, wait_for_port

VLLM_DIAG = str(Path(sys.executable).with_name("vllm-diag"))


def _diagnose(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict, list[str]]:
    """``vllm-diag diagnose ARGS --format json`` in-process: exit code, the JSON, the stderr lines."""
    capsys.readouterr()
    code = main(["diagnose", *args, "--format", "json"])
    out, err = capsys.readouterr()
    return code, json.loads(out) if code == 0 else {}, err.splitlines()


def _verdict(doc: dict) -> tuple[str, list[str]]:
    target = doc["targets"][0]
    return target["verdict"]["layer"], sorted(s["id"] for s in target["symptoms"])


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Sixty consecutive scrapes of the simulator's healthy scenario, 5 s apart."""
    out = tmp_path_factory.mktemp("simulated")
    subprocess.run([VLLM_DIAG, "simulate", "--scenario", "healthy", "--out", str(out), "--duration", "300",
                    "--interval", "5"], check=True, capture_output=True, timeout=120)
    files = sorted(out.glob("capture-*.txt"))
    assert len(files) == 60
    return [path.read_text(encoding="utf-8") for path in files]


# -- a capture cut in half ------------------------------------------------------------------------
def test_a_capture_cut_in_half_is_skipped_with_one_warning_and_the_rest_diagnosed(
        tmp_path: Path, simulated: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    rec = tmp_path / "rec"
    recorder = Recorder("t", rec, RecordRetention())
    for i, text in enumerate(simulated[:12]):
        recorder.write(1_700_000_000.0 + 5 * i, text)
    code, intact, _ = _diagnose(capsys, str(rec))
    assert code == 0 and intact["skipped_captures"] == []

    # One plain capture (as an older sidecar wrote them) cut in the middle of a label block, one
    # compressed capture cut in half: both skipped, each named once, the other ten diagnosed.
    plain = rec / "t-1700000020.000.txt"
    whole = read_capture(rec / "t-1700000020.000.txt.gz").decode()
    (rec / "t-1700000020.000.txt.gz").unlink()
    plain.write_text(whole[: whole.index("{", len(whole) // 2) + 5], encoding="utf-8")
    squeezed = rec / "t-1700000040.000.txt.gz"
    squeezed.write_bytes(squeezed.read_bytes()[: squeezed.stat().st_size // 2])

    code, doc, err = _diagnose(capsys, str(rec))
    assert code == 0, err
    assert len(err) == 2, err
    assert err[0].startswith(f"vllm-diag: warning: skipped {plain}: line ") and "label" in err[0], err
    assert err[1].startswith(f"vllm-diag: warning: skipped {squeezed}: damaged gzip data"), err
    assert [s["file"] for s in doc["skipped_captures"]] == [str(plain), str(squeezed)]
    assert doc["targets"][0]["signals"]["scrapes"] == 10
    assert doc["targets"][0]["state"] == "ok"
    assert _verdict(doc) == _verdict(intact)


def test_a_folder_with_nothing_readable_is_one_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("t-1.000.txt.gz", "t-2.000.txt.gz"):
        (tmp_path / name).write_bytes(b"\x1f\x8b\x08\x00garbage")
    code, _, err = _diagnose(capsys, str(tmp_path))
    assert code == 2
    assert len(err) == 1 and err[0].startswith("vllm-diag: no readable capture: all 2 were skipped"), err


# -- retention over a long run --------------------------------------------------------------------
def test_retention_holds_the_folder_under_its_limit_over_a_long_run_and_diagnose_reads_it(
        tmp_path: Path, simulated: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    limit = 120_000  # about 17 compressed captures of ~7 KB
    rec = tmp_path / "rec"
    recorder = Recorder("t", rec, RecordRetention(max_bytes=limit, max_age_seconds=86400))
    start = 1_700_000_000.0
    writes = 240  # 20 minutes of scrapes at 5 s, driven directly (no waiting)
    for i in range(writes):
        recorder.write(start + 5 * i, simulated[i % len(simulated)])
        on_disk = sum(p.stat().st_size for p in rec.iterdir())
        assert on_disk <= limit, f"after write {i}: {on_disk} bytes"
        assert recorder.status().bytes == on_disk
    status = recorder.status()
    assert status.files + status.pruned_total == writes and status.pruned_total > 200
    names = sorted(p.name for p in rec.iterdir())
    assert all(name.endswith(".txt.gz") for name in names)
    assert names[-1] == f"t-{start + 5 * (writes - 1):.3f}.txt.gz"  # the newest are kept

    code, doc, err = _diagnose(capsys, str(rec))
    assert code == 0 and err == [] and doc["skipped_captures"] == []
    assert doc["targets"][0]["target"] == "t" and doc["targets"][0]["signals"]["scrapes"] == status.files


def test_a_full_disk_is_counted_and_recording_resumes_when_space_returns(tmp_path: Path, simulated: list[str]) -> None:
    """A real ENOSPC on a 64 KiB tmpfs, where this sandbox allows mounting one (root)."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        recorder = Recorder("t", mount / "rec", RecordRetention(max_bytes=10 ** 9))  # the disk is the limit
        for i in range(20):
            recorder.write(1000.0 + i, simulated[i])
        status = recorder.status()
        assert status.failing and status.errors_total["write_failed"] > 0
        assert "No space left on device" in (status.last_error or "")
        assert not [p for p in (mount / "rec").iterdir() if p.name.startswith(".")]  # no temporary left behind
        assert all(capture_problem(p) is None for p in (mount / "rec").iterdir())  # and nothing partial
        for path in (mount / "rec").iterdir():
            path.unlink()
        recorder.write(2000.0, simulated[0])
        assert not recorder.status().failing
        assert (mount / "rec" / "t-2000.000.txt.gz").is_file()
    finally:
        subprocess.run(["umount", str(mount)], check=True)


# -- a crash at the worst moments, made certain ------------------------------------------------------
CRASHING_WRITER = """
import os, signal, sys
from pathlib import Path
import exporter.record as record
from exporter.config import RecordRetention

folder, moment, text = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]).read_text()
recorder = record.Recorder("t", folder, RecordRetention())
recorder.write(1.0, text)  # one whole capture first
real_open, real_replace = open, os.replace

class HalfThenDie:  # the process dies with half of the capture written to the temporary file
    def __init__(self, fh): self.fh = fh
    def __enter__(self): return self
    def __exit__(self, *exc): return False
    def write(self, data):
        self.fh.write(data[: len(data) // 2]); self.fh.flush(); os.kill(os.getpid(), signal.SIGKILL)

def die_before_rename(src, dst):  # the whole temporary file written, the rename never happens
    os.kill(os.getpid(), signal.SIGKILL)

if moment == "mid-write":
    record.open = lambda path, mode: HalfThenDie(real_open(path, mode))
else:
    record.os.replace = die_before_rename
recorder.write(2.0, text)
"""


@pytest.mark.parametrize("moment", ["mid-write", "before-rename"])
def test_a_process_killed_in_the_middle_of_a_write_leaves_no_partial_capture(
        tmp_path: Path, moment: str, fixtures_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = tmp_path / "rec"
    text = fixtures_dir / "snapshot-steady-during.txt"
    done = subprocess.run([sys.executable, "-c", CRASHING_WRITER, str(rec), moment, str(text)],
                          capture_output=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()
    assert sorted(p.name for p in rec.iterdir()) == [".t-2.000.txt.gz.tmp", "t-1.000.txt.gz"]
    code, doc, err = _diagnose(capsys, str(rec), "--interval", "5")  # the temporary is no capture
    assert code == 0 and err == [] and doc["skipped_captures"] == []
    restarted = Recorder("t", rec, RecordRetention())
    restarted.scan(3.0)  # what the writer thread does first after a start
    assert sorted(p.name for p in rec.iterdir()) == ["t-1.000.txt.gz"]
    assert restarted.status().files == 1


# -- the sidecar with a folder that cannot be written ---------------------------------------------
def _metric(text: str, name: str, **labels: str) -> float | None:
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{") and line.split("{", 1)[1].split("}", 1)[0] == wanted:
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.mark.slow  # polls a live target for seconds, by design
async def test_the_sidecar_keeps_serving_while_its_folder_cannot_be_written(
        tmp_path: Path, fixtures_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="exporter.record")
    capture = fixture_text(fixtures_dir, "steady-during")

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=capture)

    upstream_app = web.Application()
    upstream_app.router.add_get("/metrics", metrics)
    upstream = TestServer(upstream_app, host="127.0.0.1")
    await upstream.start_server()
    rec = tmp_path / "rec"
    settings = load_settings(overrides={"listen": "127.0.0.1:1", "window_seconds": 10, "targets": [
        {"name": "t", "url": f"http://127.0.0.1:{upstream.port}/metrics", "scrape_interval": 0.1, "timeout": 0.1,
         "record_dir": str(rec)}]})
    client = TestClient(TestServer(create_app(settings), host="127.0.0.1"))
    await client.start_server()
    try:
        await _until(lambda: rec.is_dir() and len(list(rec.iterdir())) >= 3)
        rec.rename(tmp_path / "moved-away")  # atomic: the writer may be in the middle of a write
        rec.write_text("a file where the folder was")  # every write fails, as root too
        await asyncio.sleep(0.6)
        body = await (await client.get("/metrics")).text()
        doc = await (await client.get("/api/v1/diagnosis")).json()
        page = await (await client.get("/")).text()
        assert _metric(body, "vllm_diag_up", target="t") == 1.0
        assert (_metric(body, "vllm_diag_record_errors_total", target="t", reason="write_failed") or 0) >= 2
        recording = doc["targets"][0]["recording"]
        assert recording["failing"] and recording["last_error"], recording
        assert "recording" in page and "failing" in page
        rec.unlink()
        await _until(lambda: rec.is_dir() and len(list(rec.iterdir())) >= 2)
        await asyncio.sleep(0.3)
        doc = await (await client.get("/api/v1/diagnosis")).json()
        assert not doc["targets"][0]["recording"]["failing"]
        assert all(capture_problem(p) is None for p in rec.iterdir() if is_capture_name(p.name))
    finally:
        await client.close()
        await upstream.close()
    messages = [r.getMessage() for r in caplog.records if r.name == "exporter.record"]
    assert len([m for m in messages if "failing" in m]) == 1, messages  # once when it starts
    assert len([m for m in messages if "resumed" in m]) == 1, messages  # once when it ends


async def _until(condition: object, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail("condition not met in time")
        await asyncio.sleep(0.05)


# -- SIGKILL in a loop of writes ------------------------------------------------------------------

def _watch_for_a_temporary(folders: list[Path], seconds: float) -> bool:
    """Return as soon as one of the folders holds a temporary file (a write under way)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for folder in folders:
            try:
                if any(name.startswith(".") for name in os.listdir(folder)):
                    return True
            except FileNotFoundError:
                pass
    return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)


@pytest.mark.slow  # restarts a real sidecar ten times, by design
@pytest.mark.timeout(120)
def test_sigkill_at_random_moments_never_leaves_a_partial_capture(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sim_port = free_port()
    simulator = subprocess.Popen([VLLM_DIAG, "simulate", "--scenario", "healthy", "--port", str(sim_port),
                                  "--speed", "20"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Six targets, each with its own folder: six writer threads make a kill mid-write likelier.
    folders = [tmp_path / "rec" / f"t{i}" for i in range(6)]
    targets = "".join(f"  - name: t{i}\n    url: http://127.0.0.1:{sim_port}/metrics\n    scrape_interval: 0.2\n"
                      f"    timeout: 0.2\n    record_dir: {folder}\n" for i, folder in enumerate(folders))
    config = tmp_path / "vllm-diag.yaml"
    config.write_text(f"window_seconds: 60\ntargets:\n{targets}", encoding="utf-8")
    chance = random.Random(30)
    kills, temporaries_seen = 10, 0  # five at a random moment, five mid-write
    log = (tmp_path / "sidecar.log").open("wb")  # a file, not a pipe nobody reads: a full pipe would block it
    try:
        wait_for_port(sim_port, simulator)
        for kill in range(kills):
            port = free_port()
            sidecar = subprocess.Popen([VLLM_DIAG, "serve", "--config", str(config), "--listen", f"127.0.0.1:{port}"],
                                       stdout=subprocess.DEVNULL, stderr=log)
            try:
                wait_for_port(port, sidecar)
                if kill % 2:
                    time.sleep(chance.uniform(0.3, 1.2))  # some writes, then a kill at a random moment
                else:
                    _watch_for_a_temporary(folders, seconds=3.0)  # a kill the moment a write is under way
            finally:
                _stop(sidecar)
            for folder in folders:
                names = os.listdir(folder) if folder.is_dir() else []
                temporaries_seen += sum(1 for name in names if name.startswith("."))
                damaged = {name: capture_problem(folder / name) for name in names if is_capture_name(name)}
                assert not {name: why for name, why in damaged.items() if why is not None}
    finally:
        _stop(simulator)
        log.close()
    rec = folders[0]
    captures = sorted(name for name in os.listdir(rec) if is_capture_name(name))
    assert len(captures) >= kills  # every run recorded
    with capsys.disabled():  # -s shows how many kills landed in the middle of a write
        print(f"\n{kills} kills, {len(captures)} captures of t0, {temporaries_seen} temporaries left by a kill")

    # The folder, with whatever temporaries the last kill left, against a copy of the captures alone.
    intact = tmp_path / "intact"
    intact.mkdir()
    for name in captures:
        shutil.copy(rec / name, intact / name)
    code, doc, err = _diagnose(capsys, str(rec))
    assert code == 0 and err == [] and doc["skipped_captures"] == [], err
    _, reference, _ = _diagnose(capsys, str(intact))
    assert _verdict(doc) == _verdict(reference)
    assert doc["targets"][0]["signals"] == reference["targets"][0]["signals"]
    for name in captures:  # every capture is whole: gzip's own CRC and length check passed
        assert gzip.decompress((rec / name).read_bytes())
