"""A real Prometheus 2.42 for the ``--prometheus`` tests: loaded with backfilled blocks
(``promtool tsdb create-blocks-from openmetrics``) or scraping, bound to 127.0.0.1, stopped by PID."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.helpers import free_port

PROMETHEUS_BIN = "/usr/bin/prometheus"
PROMTOOL_BIN = "/usr/bin/promtool"


def backfill(openmetrics: Path, storage: Path) -> None:
    """Blocks from an OpenMetrics file into ``storage`` (fails loudly with promtool's own words)."""
    done = subprocess.run([PROMTOOL_BIN, "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(storage)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"promtool failed: {done.stderr[-2000:]}"


@contextmanager
def serving(what: str, argv: list[str], ready: str, log_path: Path) -> Iterator[None]:
    """Run a server until the block ends (stopped by its PID); wait until ``ready`` answers 200 first."""
    log = log_path.open("w")
    process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(ready, timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert process.poll() is None, f"{what} exited: {log_path.read_text()}"
            assert time.monotonic() < deadline, f"{what} not ready after 60 s"
            time.sleep(0.2)
        yield
    finally:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(5)
        log.close()


@contextmanager
def prometheus(storage: Path, config: str = "global:\n  scrape_interval: 15s\n",
               extra_flags: tuple[str, ...] = ()) -> Iterator[str]:
    """A Prometheus on a free 127.0.0.1 port over ``storage``; yields its base URL."""
    port = free_port()
    config_file = storage.parent / f"prometheus-{port}.yml"
    config_file.write_text(config)
    url = f"http://127.0.0.1:{port}"
    argv = [PROMETHEUS_BIN, f"--config.file={config_file}", f"--web.listen-address=127.0.0.1:{port}",
            f"--storage.tsdb.path={storage}", "--storage.tsdb.retention.time=30d", "--web.enable-lifecycle",
            *extra_flags]
    with serving("prometheus", argv, f"{url}/-/ready", storage.parent / f"prometheus-{port}.log"):
        yield url


VICTORIA_METRICS_BIN = "/usr/bin/victoria-metrics"


@contextmanager
def victoria_metrics(storage: Path) -> Iterator[str]:
    """A single-node VictoriaMetrics (Debian's package) on a free 127.0.0.1 port over ``storage``.

    ``-search.latencyOffset=0s``: its default hides the newest 30 s from queries (samples still being
    ingested), which would make a replayed clock read a different window than Prometheus does.
    ``-maxLabelsPerTimeseries=64``: its default of 30 drops labels of ``vllm:cache_config_info`` (about 37).
    """
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [VICTORIA_METRICS_BIN, f"-httpListenAddr=127.0.0.1:{port}", f"-storageDataPath={storage}",
            "-retentionPeriod=10y", "-search.latencyOffset=0s", "-search.disableCache", "-maxLabelsPerTimeseries=64"]
    with serving("victoria-metrics", argv, f"{url}/health", storage.parent / f"victoria-metrics-{port}.log"):
        yield url


def vm_import(url: str, body: str) -> None:
    """Samples in the Prometheus text format (millisecond timestamps) through VictoriaMetrics' own import
    path, then flushed so that queries see them at once."""
    request = urllib.request.Request(f"{url}/api/v1/import/prometheus", data=body.encode(), method="POST")
    with urllib.request.urlopen(request, timeout=120) as response:
        assert response.status == 204, response.status
    with urllib.request.urlopen(f"{url}/internal/force_flush", timeout=30) as response:
        assert response.status == 200
