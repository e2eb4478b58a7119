"""The sidecar's process metrics and value formatting without prometheus_client (exporter/publish/process.py,
``go_float``) are byte for byte what the library writes, and a sidecar that scrapes vLLM never imports the
library, the advisor's model, the simulator or the capture reader (lazy imports: lab/README.md's RSS)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST as LIBRARY_CONTENT_TYPE
from prometheus_client.utils import floatToGoString

from exporter.publish.exposition import go_float
from exporter.publish.process import ProcessMetrics
from exporter.server import CONTENT_TYPE_LATEST

# /proc/<pid>/stat of a process whose name holds a space and a parenthesis, as the kernel writes it.
STAT = (b"4242 (vllm-diag (x) y) S 1 4242 4242 0 -1 4194560 21785 0 0 0 1234 567 0 0 20 0 3 0 "
        b"987654 1234567890 23456 18446744073709551615 1 1 0 0 0 0 0 16781312 17922 0 0 0 17 1 0 0 0 0 0\n")
LIMITS = (b"Limit                     Soft Limit           Hard Limit           Units     \n"
          b"Max cpu time              unlimited            unlimited            seconds   \n"
          b"Max open files            1048576              1048576              files     \n")


def _proc(root: Path, fds: int = 7, limits: bytes | None = LIMITS) -> Path:
    (root / "stat").write_bytes(b"cpu  1 2 3\nbtime 1765000000\nprocesses 10\n")
    pid = root / "4242"
    (pid / "fd").mkdir(parents=True)
    (pid / "stat").write_bytes(STAT)
    if limits is not None:
        (pid / "limits").write_bytes(limits)
    for fd in range(fds):
        (pid / "fd" / str(fd)).write_text("")
    return root


def _library(root: Path, namespace: str) -> bytes:
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(namespace=namespace, pid=lambda: "4242", proc=str(root), registry=registry)
    return generate_latest(registry)


def test_process_metrics_are_the_collectors_bytes(tmp_path: Path) -> None:
    root = _proc(tmp_path)
    for namespace in ("vllm_diag", ""):
        ours = ProcessMetrics(namespace, proc=str(root), pid="4242").render()
        assert ours == _library(root, namespace)
    assert b"vllm_diag_process_open_fds 7.0\n" in ProcessMetrics("vllm_diag", proc=str(root), pid="4242").render()


def test_unreadable_proc_files_leave_their_families_out_as_the_collector_does(tmp_path: Path) -> None:
    root = _proc(tmp_path, limits=None)  # no limits file: no fd families
    assert ProcessMetrics("vllm_diag", proc=str(root), pid="4242").render() == _library(root, "vllm_diag")
    assert b"open_fds" not in ProcessMetrics("vllm_diag", proc=str(root), pid="4242").render()
    assert ProcessMetrics("vllm_diag", proc=str(tmp_path / "none"), pid="4242").render() == b""


def test_the_live_process_reads_the_same_families() -> None:
    text = ProcessMetrics("vllm_diag").render().decode()
    names = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert names == [f"vllm_diag_process_{n}" for n in ("virtual_memory_bytes", "resident_memory_bytes",
                                                        "start_time_seconds", "cpu_seconds_total", "open_fds",
                                                        "max_fds")]


@given(st.floats(allow_nan=True, allow_infinity=True) | st.integers(-2**60, 2**60)
       | st.sampled_from([0.0, -0.0, 1e6, 1e7, 12345678.9, 1.5e300, 5e-324, math.nan, math.inf, -math.inf]))
def test_go_float_is_the_librarys_rule(value: float) -> None:
    assert go_float(value) == floatToGoString(value)


def test_content_type_is_the_librarys() -> None:
    assert CONTENT_TYPE_LATEST == LIBRARY_CONTENT_TYPE


def test_a_sidecar_imports_neither_the_advisors_model_nor_what_it_does_not_use() -> None:
    """What ``vllm-diag serve`` imports to poll vLLM (the advisor worker's bookkeeping included) leaves out what
    only other paths use; each loads where it is needed (tests of those paths cover them)."""
    code = ("import sys, exporter.cli, exporter.server, exporter.hostcpu, exporter.advisor.worker\n"
            "print('\\n'.join(sorted(sys.modules)))")
    loaded = set(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                                text=True).stdout.split())
    assert "exporter.server" in loaded and "exporter.advisor.track" in loaded
    left_out = ("prometheus_client", "exporter.simulator", "exporter.advisor.calibrate", "exporter.advisor.model",
                "exporter.offline", "exporter.promsource.central", "isal", "bcrypt", "jinja2")
    assert not {m for m in loaded if m.split(".")[0] in left_out or m in left_out or
                any(m.startswith(p + ".") for p in left_out)}


def test_the_advisors_first_answer_brings_the_engine_model_alone() -> None:
    """Unpickling an answer in the sidecar imports the model's classes, and through them the simulator's engine;
    the simulator's scenarios, wire format and capture writer stay out (exporter/simulator/__init__.py)."""
    code = ("import sys, exporter.server, exporter.advisor.result\n"
            "print('\\n'.join(sorted(sys.modules)))")
    loaded = set(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                                text=True).stdout.split())
    assert {"exporter.advisor.calibrate", "exporter.simulator.engine"} <= loaded
    assert not loaded & {"exporter.simulator.scenarios", "exporter.simulator.exposition", "exporter.simulator.capture",
                         "exporter.simulator.dcgm", "exporter.simulator.dataparallel", "prometheus_client"}
