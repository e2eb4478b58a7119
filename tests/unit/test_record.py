"""The recorder's pieces (exporter/record.py): atomic writes, names, compression, retention,
the bounded queue, failure counting, and how offline diagnose reads and skips captures."""

from __future__ import annotations

import gzip
import logging
import os
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.config import ConfigError, RecordRetention, load_settings
from exporter.offline import CaptureError, capture_problem, resolve
from exporter.publish.exposition import Exposition
from exporter.record import (
    Recorder,
    RecordStatus,
    capture_name,
    capture_timestamp,
    is_capture_name,
    read_capture,
    write_atomically,
)
from exporter.state import ScrapeHealth, TargetState, unknown_diagnosis
from tests.conftest import read_capture as fixture_text


@pytest.fixture
def steady(fixtures_dir: Path) -> str:
    return fixture_text(fixtures_dir, "steady-during")


def test_write_atomically_leaves_only_the_final_name(tmp_path: Path) -> None:
    path = tmp_path / "t-1.000.txt.gz"
    write_atomically(path, b"abc")
    assert path.read_bytes() == b"abc"
    assert [p.name for p in tmp_path.iterdir()] == ["t-1.000.txt.gz"]


def test_a_failed_rename_leaves_neither_the_capture_nor_the_temporary(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    def no_space(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device", str(dst))

    monkeypatch.setattr(os, "replace", no_space)
    with pytest.raises(OSError):
        write_atomically(tmp_path / "t-1.000.txt.gz", b"abc")
    assert list(tmp_path.iterdir()) == []


def test_names_diagnose_reads_and_ignores() -> None:
    assert capture_name("vllm-0", 1700000000.1234) == "vllm-0-1700000000.123.txt.gz"
    assert is_capture_name("vllm-0-1.000.txt.gz") and is_capture_name("capture-0001.txt")
    assert not is_capture_name(".vllm-0-1.000.txt.gz.tmp")  # the recorder's temporary
    assert not is_capture_name(".hidden.txt") and not is_capture_name("scenario.json")


def test_a_written_capture_is_compressed_and_headed_by_its_scrape_time(tmp_path: Path, steady: str) -> None:
    recorder = Recorder("vllm-0", tmp_path / "rec", RecordRetention())
    recorder.write(1700000000.25, steady)
    [path] = (tmp_path / "rec").iterdir()
    assert path.name == "vllm-0-1700000000.250.txt.gz"
    text = read_capture(path).decode()
    assert capture_timestamp(text) == 1700000000.25 and text.endswith(steady)
    assert path.stat().st_size < len(steady) / 4  # gzip: ~7x smaller on a real capture
    status = recorder.status()
    assert (status.files, status.bytes, status.written_total) == (1, path.stat().st_size, 1)


def test_a_cut_gzip_capture_is_named_as_damaged(tmp_path: Path, steady: str) -> None:
    path = tmp_path / "t-1.000.txt.gz"
    data = gzip.compress(steady.encode())
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="damaged gzip data"):
        read_capture(path)
    reason = capture_problem(path)
    assert reason is not None and reason.startswith("damaged gzip data")


def test_stale_temporaries_of_this_target_are_removed_at_start(tmp_path: Path, steady: str) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / ".vllm-0-5.000.txt.gz.tmp").write_bytes(b"half a capt")
    (rec / ".other-5.000.txt.gz.tmp").write_bytes(b"another sidecar's write in flight")
    (rec / ".vllm-0.vllm-diag.yaml.tmp").write_bytes(b"targets: [")  # its configuration, cut short
    recorder = Recorder("vllm-0", rec, RecordRetention())
    recorder.scan(10.0)
    assert sorted(p.name for p in rec.iterdir()) == [".other-5.000.txt.gz.tmp"]


def test_retention_prunes_oldest_first_by_bytes_and_by_age(tmp_path: Path, steady: str) -> None:
    rec = tmp_path / "rec"
    by_bytes = Recorder("a", rec, RecordRetention(max_bytes=40_000))
    by_age = Recorder("b", rec, RecordRetention(max_age_seconds=30))
    for i in range(20):
        by_bytes.write(1000.0 + 5 * i, steady)
        by_age.write(1000.0 + 5 * i, steady)
    a, b = by_bytes.status(), by_age.status()
    assert a.bytes <= 40_000 and a.files + a.pruned_total == 20
    assert sum(p.stat().st_size for p in rec.glob("a-*")) == a.bytes
    kept_a = sorted(capture_timestamp(read_capture(p).decode()) or 0 for p in rec.glob("a-*"))
    assert kept_a == [1000.0 + 5 * i for i in range(20 - a.files, 20)]  # the newest ones
    kept_b = sorted(capture_timestamp(read_capture(p).decode()) or 0 for p in rec.glob("b-*"))
    assert kept_b == [1000.0 + 5 * i for i in range(13, 20)] and b.pruned_total == 13  # at most 30 s older


def test_a_restarted_recorder_counts_what_the_folder_already_holds(tmp_path: Path, steady: str) -> None:
    first = Recorder("t", tmp_path, RecordRetention(max_bytes=40_000))
    for i in range(3):
        first.write(100.0 + i, steady)
    again = Recorder("t", tmp_path, RecordRetention(max_bytes=40_000))
    again.scan(103.0)
    assert (again.status().files, again.status().bytes) == (3, first.status().bytes)


def test_a_full_queue_drops_and_counts_without_blocking(tmp_path: Path, steady: str,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    recorder = Recorder("t", tmp_path, RecordRetention(), queue_size=2)  # not started: nothing drains the queue
    with caplog.at_level(logging.INFO, logger="exporter.record"):
        results = [recorder.submit(float(i), steady) for i in range(5)]
    assert results == [True, True, False, False, False]
    assert recorder.status().errors_total["queue_full"] == 3
    assert len([r for r in caplog.records if "falls behind" in r.getMessage()]) == 1  # logged once


def test_the_writer_thread_writes_what_is_submitted(tmp_path: Path, steady: str) -> None:
    recorder = Recorder("t", tmp_path / "rec", RecordRetention())
    recorder.start()
    for i in range(3):
        assert recorder.submit(100.0 + i, steady)
    recorder.close()
    assert sorted(p.name for p in (tmp_path / "rec").iterdir()) == [f"t-{100 + i}.000.txt.gz" for i in range(3)]


def test_an_unwritable_folder_is_counted_logged_once_and_recording_resumes(
        tmp_path: Path, steady: str, caplog: pytest.LogCaptureFixture) -> None:
    rec = tmp_path / "rec"
    recorder = Recorder("t", rec, RecordRetention())
    recorder.write(1.0, steady)
    for path in rec.iterdir():
        path.unlink()
    rec.rmdir()
    rec.write_text("a file where the folder was")  # fails as root too, unlike chmod 0555
    with caplog.at_level(logging.INFO, logger="exporter.record"):
        for i in range(2, 6):
            recorder.write(float(i), steady)
        status = recorder.status()
        assert status.failing and status.errors_total["write_failed"] == 4 and status.last_error
        rec.unlink()
        recorder.write(6.0, steady)
    status = recorder.status()
    assert not status.failing and status.files == 1 and (rec / "t-6.000.txt.gz").is_file()
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if "failing" in m]) == 1, messages
    assert len([m for m in messages if "resumed" in m]) == 1, messages


def test_a_full_disk_still_prunes_so_the_folder_frees_itself(tmp_path: Path, steady: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write fails (the disk is full): the captures past max_age_seconds still go, else the folder that
    filled the disk would hold it full for good."""
    rec = tmp_path / "rec"
    recorder = Recorder("t", rec, RecordRetention(max_age_seconds=30))
    for i in range(4):
        recorder.write(1000.0 + 5 * i, steady)

    def disk_full(path: Path, data: bytes, durable: bool = False) -> None:
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr("exporter.record.write_atomically", disk_full)
    recorder.write(1032.0, steady)  # the capture of 1000 is now past 30 s
    status = recorder.status()
    assert status.failing and status.errors_total["write_failed"] == 1 and "No space left" in (status.last_error or "")
    assert status.pruned_total == 1 and status.files == 3
    recorder.write(1100.0, steady)  # long after: every capture has aged out while no write succeeds
    assert recorder.status().files == 0 and not list(rec.glob("t-*")) and recorder.status().pruned_total == 4


def test_retention_settings_are_validated() -> None:
    target = {"name": "t", "url": "http://127.0.0.1:8000/metrics", "record_dir": "/tmp/x"}
    settings = load_settings(overrides={"targets": [target]})
    assert settings.targets[0].record_retention == RecordRetention(max_age_seconds=86400, max_bytes=1024 ** 3)
    with pytest.raises(ConfigError, match="max_bytes"):
        load_settings(overrides={"targets": [{**target, "record_retention": {"max_bytes": 0}}]})
    with pytest.raises(ConfigError, match="max_age"):
        load_settings(overrides={"targets": [{**target, "record_retention": {"max_age_seconds": -1}}]})


def test_resolve_orders_gzip_and_plain_captures_by_header_and_skips_damaged_ones(
        tmp_path: Path, fixtures_dir: Path, steady: str) -> None:
    rec = tmp_path / "rec"
    recorder = Recorder("t", rec, RecordRetention())
    for i, stamp in enumerate((30.0, 10.0, 20.0, 40.0)):
        recorder.write(stamp, steady if i % 2 else fixture_text(fixtures_dir, "steady"))
    plain = rec / "t-20.000.txt"  # an older sidecar's plain capture beside the compressed ones
    plain.write_bytes(read_capture(rec / "t-20.000.txt.gz"))
    (rec / "t-20.000.txt.gz").unlink()
    whole = read_capture(rec / "t-40.000.txt.gz")
    (rec / "t-40.000.txt.gz").write_bytes(gzip.compress(whole)[:500])  # cut
    (rec / ".t-50.000.txt.gz.tmp").write_bytes(b"in flight")
    found = resolve([str(rec)])
    assert [p.name for p in found.files] == ["t-10.000.txt.gz", "t-20.000.txt", "t-30.000.txt.gz"]
    assert found.stamps == (10.0, 20.0, 30.0)
    assert [s.file.name for s in found.skipped] == ["t-40.000.txt.gz"]
    assert found.skipped[0].reason.startswith("damaged gzip data")


def test_nothing_readable_is_one_error(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("<html>login</html>\n")
    (tmp_path / "b.txt").write_text("# HELP up x\n# TYPE up gauge\nup 1\n")
    with pytest.raises(CaptureError, match=r"no readable capture: all 2 were skipped \(first, .*a.txt: line 1"):
        resolve([str(tmp_path)])
    with pytest.raises(CaptureError, match=r"a.txt:1: not a sample line"):
        resolve([str(tmp_path / "a.txt")])


def test_record_families_are_exported_per_recording_target() -> None:
    status = RecordStatus(directory="/rec", bytes=1234, files=2, pruned_total=5,
                          errors_total={"write_failed": 3, "queue_full": 1})
    state = TargetState(target="t", url="http://x/metrics", status="insufficient_evidence", window_seconds=60,
                        evaluated_at=0.0, health=ScrapeHealth(), diagnosis=unknown_diagnosis(0.0), recording=status)
    quiet = TargetState(target="u", url="http://y/metrics", status="insufficient_evidence", window_seconds=60,
                        evaluated_at=0.0, health=ScrapeHealth(), diagnosis=unknown_diagnosis(0.0))
    text = Exposition(None).render([state, quiet]).decode()  # what /metrics serves
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples[("vllm_diag_record_bytes", (("target", "t"),))] == 1234
    assert samples[("vllm_diag_record_pruned_total", (("target", "t"),))] == 5
    assert samples[("vllm_diag_record_errors_total", (("reason", "write_failed"), ("target", "t")))] == 3
    assert not any(labels == (("target", "u"),) for name, labels in samples if name.startswith("vllm_diag_record"))
    assert state.to_dict()["recording"] == {"dir": "/rec", "bytes": 1234, "files": 2, "written_total": 0,
                                            "pruned_total": 5, "errors_total": {"write_failed": 3, "queue_full": 1},
                                            "failing": False, "last_error": None}
    assert "recording" not in quiet.to_dict()


def test_the_page_shows_a_recording_line_only_for_recording_targets() -> None:
    from exporter.publish import document, html

    failing = RecordStatus(directory="/var/lib/rec", bytes=3 * 1024 ** 2, files=40, pruned_total=7,
                           errors_total={"write_failed": 2, "queue_full": 0}, failing=True,
                           last_error="No space left on device: /var/lib/rec/.t-1.000.txt.gz.tmp")
    states = [TargetState(target=name, url="http://x/metrics", status="insufficient_evidence", window_seconds=60,
                          evaluated_at=0.0, health=ScrapeHealth(), diagnosis=unknown_diagnosis(0.0), recording=rec)
              for name, rec in (("rec", failing), ("plain", None))]
    page = html.render(document.build(states, now=0.0))
    assert page.count('class="recording') == 1
    assert "recording: 40 captures, 3 MiB in /var/lib/rec, 7 pruned by the retention" in page
    assert "failing: No space left on device" in page
