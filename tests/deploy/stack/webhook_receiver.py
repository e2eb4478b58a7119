"""Webhook receiver inside the test compose stack (service `webhook`): records Alertmanager's POSTs.

Runs with the base image's python3 (standard library only). Every alert of every POST is kept as
{path, receiver, status, labels, received_at}; GET /deliveries returns them as JSON, so the test
reads what Alertmanager delivered inside the stack through the receiver's published port.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DELIVERIES: list[dict[str, object]] = []
BAD_POSTS: list[str] = []
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length))
            alerts, receiver = body["alerts"], body.get("receiver", "")
        except (ValueError, KeyError, TypeError) as exc:
            with LOCK:
                BAD_POSTS.append(f"{self.path}: {exc}")
            self._reply(400, b"bad payload\n")
            return
        now = time.time()
        with LOCK:
            DELIVERIES.extend({"path": self.path, "receiver": receiver, "status": a.get("status", ""),
                               "labels": a.get("labels", {}), "received_at": now} for a in alerts)
        self._reply(200, b"ok\n")

    def do_GET(self) -> None:  # noqa: N802
        if self.path != "/deliveries":
            self._reply(404, b"not found\n")
            return
        with LOCK:
            body = json.dumps({"deliveries": DELIVERIES, "bad_posts": BAD_POSTS}).encode()
        self._reply(200, body, "application/json")

    def _reply(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 5001
    # PID 1 in its container: without a handler SIGTERM is ignored and `docker stop` waits its timeout
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    ThreadingHTTPServer(("0.0.0.0", port), Handler).serve_forever()
