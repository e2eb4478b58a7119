"""Optional TLS and basic auth for the sidecar's endpoints, in the Prometheus exporter-toolkit
web-config format, so the file an operator already has for node_exporter works here too:

    tls_server_config: {cert_file: server.crt, key_file: server.key}
    basic_auth_users: {prometheus: $2y$10$...}   # bcrypt hashes, never plain passwords

Passwords are compared against bcrypt hashes; a verified (user, password) pair is remembered
by its SHA-256 so Prometheus' every scrape does not pay for bcrypt again.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ssl
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

# Liveness and readiness answer without credentials: orchestrators probe them, and they reveal nothing.
OPEN_PATHS = frozenset({"/healthz", "/readyz"})


class WebConfigError(ValueError):
    pass


@dataclass
class WebConfig:
    cert_file: Path | None = None
    key_file: Path | None = None
    users: dict[str, bytes] = field(default_factory=dict)
    _verified: set[bytes] = field(default_factory=set, repr=False)

    def ssl_context(self) -> ssl.SSLContext | None:
        if self.cert_file is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise WebConfigError(f"tls_server_config: cannot load {self.cert_file}: {exc}") from None
        return context

    def check(self, header: str | None) -> bool:
        if not self.users:
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        hashed = self.users.get(user)
        if hashed is None:
            return False
        token = hashlib.sha256(f"{user}\0{password}".encode()).digest()
        if any(hmac.compare_digest(token, seen) for seen in self._verified):
            return True
        import bcrypt  # loaded with the first password to check: most sidecars have none

        if bcrypt.checkpw(password.encode(), hashed):
            self._verified.add(token)
            return True
        return False

    def middleware(self) -> Middleware:
        @web.middleware
        async def basic_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
            if request.path in OPEN_PATHS or self.check(request.headers.get("Authorization")):
                return await handler(request)
            return web.Response(status=401, text="Unauthorized\n",
                                headers={"WWW-Authenticate": 'Basic realm="vllm-diag"'})

        return basic_auth


def load_web_config(path: str | Path) -> WebConfig:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise WebConfigError(f"web config {path}: {exc}") from None
    if not isinstance(raw, dict):
        raise WebConfigError(f"web config {path}: expected a mapping")
    unknown = set(raw) - {"tls_server_config", "basic_auth_users", "http_server_config"}
    if unknown:
        raise WebConfigError(f"web config {path}: unknown keys {sorted(unknown)}")
    config = WebConfig()
    tls = raw.get("tls_server_config") or {}
    if tls:
        if "cert_file" not in tls or "key_file" not in tls:
            raise WebConfigError("tls_server_config: cert_file and key_file are both required")
        base = path.parent
        config.cert_file = base / tls["cert_file"]
        config.key_file = base / tls["key_file"]
    for user, hashed in (raw.get("basic_auth_users") or {}).items():
        value = str(hashed).encode()
        if not value.startswith((b"$2a$", b"$2b$", b"$2y$")):
            raise WebConfigError(f"basic_auth_users.{user}: not a bcrypt hash (never put a plain password here)")
        config.users[str(user)] = value
    config.ssl_context()  # fail at start, not at the first TLS handshake
    return config
