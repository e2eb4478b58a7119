"""CPU readers on fixture trees (a fake /proc and cgroupfs), and the probe's window shares."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.dcgm import gpu_utilization
from exporter.hostcpu.base import NoData
from exporter.hostcpu.cgroup import cgroup_dirs_for, find_throttle_reader
from exporter.hostcpu.probe import HostProbe
from exporter.hostcpu.processes import descendants
from exporter.hostcpu.psi import PsiReader


def _proc(root: Path, pid: int, ppid: int, comm: str = "python") -> Path:
    d = root / str(pid)
    (d / "task").mkdir(parents=True)
    (d / "stat").write_text(f"{pid} ({comm} (x) y) S {ppid} 1 1 0 -1\n")
    (d / "cmdline").write_bytes(b"vllm\0serve\0")
    return d


def _schedstat(proc_dir: Path, tid: int, run: int, wait: int) -> None:
    t = proc_dir / "task" / str(tid)
    t.mkdir(exist_ok=True)
    (t / "schedstat").write_text(f"{run} {wait} 10\n")


def test_descendants_follow_ppid_with_odd_comm(tmp_path):
    _proc(tmp_path, 10, 1)
    _proc(tmp_path, 11, 10, comm="VLLM::EngineCore")
    _proc(tmp_path, 12, 11)
    _proc(tmp_path, 20, 1)
    assert sorted(descendants(10, tmp_path)) == [10, 11, 12]
    with pytest.raises(NoData):
        descendants(99, tmp_path)


def test_probe_wait_share_over_the_window_survives_thread_exit(tmp_path):
    p = _proc(tmp_path, 10, 1)
    probe = HostProbe(lambda: [10], 60, proc=tmp_path, psi_path=tmp_path / "no-psi")
    _schedstat(p, 10, 0, 0)
    _schedstat(p, 11, 0, 0)
    probe(0.0)
    _schedstat(p, 10, 600, 400)
    _schedstat(p, 11, 300, 700)
    inputs = probe(10.0)
    assert inputs.cpu_wait_share == pytest.approx(1100 / 2000)
    # thread 11 exits; its totals must not make the sum go backwards
    (p / "task" / "11" / "schedstat").unlink()
    (p / "task" / "11").rmdir()
    _schedstat(p, 10, 1600, 400)
    inputs = probe(20.0)
    assert inputs.cpu_wait_share == pytest.approx(1100 / 3000)
    assert "schedstat" in inputs.sources


def test_cgroup_v1_and_v2_throttling(tmp_path):
    proc = tmp_path / "proc"
    _proc(proc, 10, 1)
    (proc / "10" / "cgroup").write_text("12:cpu,cpuacct:/test/vllm\n0::/user.slice\n")
    root = tmp_path / "cg"
    v1 = root / "cpu,cpuacct" / "test" / "vllm"
    v1.mkdir(parents=True)
    (v1 / "cpu.stat").write_text("nr_periods 100\nnr_throttled 40\nthrottled_time 123\n")
    dirs = cgroup_dirs_for(10, proc, root)
    assert dirs[0] == root / "user.slice"  # v2 first, but it has no cpu.stat here
    reader = find_throttle_reader(10, proc, root)
    assert reader.read() == {"nr_periods": 100.0, "nr_throttled": 40.0}


def test_psi_total(tmp_path):
    path = tmp_path / "cpu"
    path.write_text("some avg10=1.00 avg60=0.50 avg300=0.10 total=123456\nfull avg10=0 avg60=0 avg300=0 total=0\n")
    assert PsiReader(path).read() == {"some_us": 123456.0}
    with pytest.raises(NoData):
        PsiReader(tmp_path / "missing").read()


def test_dcgm_gpu_utilization():
    text = ('# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="a"} 30\n'
            'DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="b"} 50\nDCGM_FI_DEV_FB_USED{gpu="0"} 1000\n')
    assert gpu_utilization(text) == pytest.approx(0.4)
    assert gpu_utilization("nothing here\n") is None


def test_dcgm_payload_goes_through_the_exposition_parser():
    """Timestamps and OpenMetrics are read like vLLM's; out-of-range and NaN readings are left out."""
    text = ('DCGM_FI_DEV_GPU_UTIL{gpu="0"} 20 1700000000000\nDCGM_FI_DEV_GPU_UTIL{gpu="1"} 60\n'
            'DCGM_FI_DEV_GPU_UTIL{gpu="2"} 140\nDCGM_FI_DEV_GPU_UTIL{gpu="3"} NaN\n# EOF\n')
    assert gpu_utilization(text) == pytest.approx(0.4)
    assert gpu_utilization('DCGM_FI_DEV_FB_USED{gpu="0"} 1000\n') is None  # the family is absent


def test_dcgm_payload_that_is_not_an_exposition_gives_no_reading():
    # The sidecar counts this as a parse error of the dcgm source rather than trusting half a payload.
    assert gpu_utilization('DCGM_FI_DEV_GPU_UTIL{gpu="0"} 30\nDCGM_FI_DEV_GPU_UTIL{gpu="1" 50\n') is None
