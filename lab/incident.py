"""The incident walk-through of docs/prometheus-source.md, reproducible: ``python -m lab.incident``.

A simulated vllm-3 serves light chat from 02:58 UTC today; at 03:02 a client starts long
generations (the kv-pressure scenario's traffic on its squeezed KV cache) and stops at 03:17.
The captures (15 s apart) are backfilled into a real Prometheus 2.42 with promtool, and the
commands of the walk-through run against it; their output is printed as the document quotes it.
"""

from __future__ import annotations

import calendar
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import yaml

from exporter.promsource import backfill
from exporter.simulator import get_scenario, write_captures
from exporter.simulator.workload import Arrivals, LengthDist, RequestClass, Workload
from lab.fleet import start_prometheus, stop

INTERVAL = 15.0


def scenario(incident_from: float, incident_to: float):
    storm = get_scenario("kv-pressure")
    long_generations = storm.workload.classes[0]
    light = RequestClass("chat", Arrivals("steady", rate=0.3), LengthDist("lognormal", 300, 0.6, 10, 4000),
                         LengthDist("lognormal", 200, 0.6, 5, 1000), long_generations.prefix, 512)
    burst = replace(long_generations, name="long-generations",
                    arrivals=replace(long_generations.arrivals, start_s=incident_from, stop_s=incident_to))
    return replace(storm, name="vllm-3", workload=Workload(classes=(light, burst)))


def main() -> int:
    day = time.gmtime()
    start = calendar.timegm((day.tm_year, day.tm_mon, day.tm_mday, 2, 58, 0)) - INTERVAL  # first capture 02:58:00
    if start > time.time() - 3600:
        start -= 86400  # before 04:00 UTC: use yesterday's night
    with tempfile.TemporaryDirectory(prefix="vllm-diag-incident-") as tmp:
        root = Path(tmp)
        sc = scenario(4 * 60 + INTERVAL, 19 * 60 + INTERVAL)  # simulated seconds: 03:02 to 03:17
        write_captures(sc, root / "vllm-3", 40 * 60, INTERVAL)
        rows = [(at, text, {"instance": "vllm-3", "job": "vllm", "namespace": "llm"})
                for at, text in backfill.folder(root / "vllm-3", start, INTERVAL)]
        with (root / "vllm-3.om").open("w") as out:
            backfill.write(out, rows)
        subprocess.run(["/usr/bin/promtool", "tsdb", "create-blocks-from", "openmetrics", str(root / "vllm-3.om"),
                        str(root / "tsdb")], check=True, capture_output=True)
        config = root / "vllm-diag.yaml"
        facts = yaml.safe_load((root / "vllm-3" / "vllm-diag.yaml").read_text())["targets"][0]["engine"]
        config.write_text(yaml.safe_dump({"targets": [{"name": "vllm-*", "url": "http://unused/metrics",
                                                       "engine": facts}]}))
        process, url = start_prometheus(root, root / "tsdb")
        day_text = time.strftime("%Y-%m-%d", time.gmtime(start + 60))
        try:
            for argv in (
                ["--from", f"{day_text}T02:58:00Z", "--to", f"{day_text}T03:30:00Z", "--step", "1m"],
                ["--at", f"{day_text}T03:10:00Z"],
            ):
                command = ["vllm-diag", "diagnose", "--prometheus", "http://prometheus:9090", "--match",
                           '{job="vllm"}', *argv, "--config", "vllm-diag.yaml"]
                print("$ " + " ".join(c if " " not in c and "{" not in c else f"'{c}'" for c in command))
                done = subprocess.run([sys.executable, "-m", "exporter.cli", *command[1:3], url, *command[4:-1],
                                       str(config)], capture_output=True, text=True, check=False)
                print(done.stdout.replace(url, "http://prometheus:9090") + done.stderr)
        finally:
            stop(process)
    return 0


if __name__ == "__main__":
    sys.exit(main())
