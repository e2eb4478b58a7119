"""A local stand-in for vLLM's /metrics (127.0.0.1 only) for the process benchmarks.

Serves the steady sequence of real captures (counters increasing); every distinct
``path?query`` is its own target with its own position in the sequence. ``/stats`` returns
how many scrapes each path prefix (``/s/`` sidecar, ``/b/`` baseline) has been served.
``--captures PREFIX=DIR`` serves the captures of DIR (``vllm-diag simulate --out``, in file
order, replayed the same way) under ``/PREFIX/metrics`` instead.

    python -m lab.target_server --port N [--count 240] [--hosts K] [--captures PREFIX=DIR ...]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from aiohttp import web

from lab.payloads import steady_sequence


def build_app(count: int, captures: dict[str, Path] | None = None) -> web.Application:
    bodies = [t.encode("utf-8") for t in steady_sequence(count)]
    by_prefix = {prefix: [t.encode("utf-8") for t in steady_sequence(
        count, [f.read_text(encoding="utf-8") for f in sorted(folder.glob("capture-*.txt"))])]
        for prefix, folder in (captures or {}).items()}
    position: Counter[str] = Counter()
    served: Counter[str] = Counter()

    async def metrics(request: web.Request) -> web.Response:
        key = request.path_qs
        i = position[key]
        position[key] += 1
        prefix = request.path.split("/")[1]
        served[prefix] += 1
        sequence = by_prefix.get(prefix, bodies)
        return web.Response(body=sequence[min(i, len(sequence) - 1)],
                            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def stats(request: web.Request) -> web.Response:
        return web.Response(text=json.dumps(dict(served)), content_type="application/json")

    app = web.Application()
    app.router.add_get("/stats", stats)
    app.router.add_get("/{prefix}/metrics", metrics)
    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--count", type=int, default=240)
    parser.add_argument("--hosts", type=int, default=1,
                        help="also listen on 127.0.0.2..127.0.0.N (loopback), so many targets are many hosts")
    parser.add_argument("--captures", action="append", default=[], metavar="PREFIX=DIR",
                        help="serve DIR's capture-*.txt under /PREFIX/metrics")
    args = parser.parse_args()
    hosts = [f"127.0.0.{k}" for k in range(1, args.hosts + 1)]
    captures = {prefix: Path(folder) for prefix, _, folder in (c.partition("=") for c in args.captures)}
    web.run_app(build_app(args.count, captures), host=hosts, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
