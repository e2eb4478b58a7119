"""The ``--prometheus`` flags of ``vllm-diag diagnose`` and ``vllm-diag serve``, and the settings they give.

Kept apart from ``command`` (the store's client, spans, timelines) so a ``serve`` that scrapes vLLM itself
never loads the store's side: about 0.3 MB of a sidecar's resident memory.

Credentials come from files or the configuration (``prometheus.bearer_token``, or the environment
variable ``VLLM_DIAG_PROMETHEUS__BEARER_TOKEN``), never from a flag: a command line is readable
by every user of the machine (``ps``).
"""

from __future__ import annotations

import argparse
from typing import Any

from exporter.argtypes import positive


class PromInputError(Exception):
    """A one-line reason for exit status 2 (the CLI prints it as ``vllm-diag: ...``)."""


# flag -> (dest, dotted setting); the setting names what an error line points at.
SOURCE_FLAGS: tuple[tuple[str, str, str], ...] = (
    ("--prometheus", "prometheus", "prometheus.url"),
    ("--match", "match", "prometheus.match"),
    ("--target-label", "target_label", "prometheus.target_labels"),
    ("--bearer-token-file", "bearer_token_file", "prometheus.bearer_token_file"),
    ("--basic-auth-user", "basic_auth_user", "prometheus.basic_auth.username"),
    ("--basic-auth-password-file", "basic_auth_password_file", "prometheus.basic_auth.password_file"),
    ("--ca-file", "ca_file", "prometheus.tls.ca_file"),
    ("--cert-file", "cert_file", "prometheus.tls.cert_file"),
    ("--key-file", "key_file", "prometheus.tls.key_file"),
    ("--insecure-skip-verify", "insecure_skip_verify", "prometheus.tls.insecure_skip_verify"),
    ("--tenant", "tenant", "prometheus.tenant"),
    ("--query-timeout", "query_timeout", "prometheus.timeout"),
)


def add_source_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("from Prometheus (or Thanos, Mimir, VictoriaMetrics)")
    group.add_argument("--prometheus", metavar="URL", help="base URL of the HTTP API, with any path prefix "
                       "(Mimir: http://mimir/prometheus)")
    group.add_argument("--match", metavar="SELECTOR", help="label selector of the vLLM series, e.g. '{job=\"vllm\"}'")
    group.add_argument("--target-label", action="append", metavar="LABEL",
                       help="label(s) that name one vLLM server (repeatable; default instance, e.g. pod)")
    group.add_argument("--bearer-token-file", metavar="FILE", help="file holding a bearer token")
    group.add_argument("--basic-auth-user", metavar="USER", help="basic auth user (password from the file below)")
    group.add_argument("--basic-auth-password-file", metavar="FILE", help="file holding the basic auth password")
    group.add_argument("--ca-file", metavar="FILE", help="CA bundle for the store's TLS certificate")
    group.add_argument("--cert-file", metavar="FILE", help="client certificate (mutual TLS)")
    group.add_argument("--key-file", metavar="FILE", help="client key (mutual TLS)")
    group.add_argument("--insecure-skip-verify", action="store_true", default=None,
                       help="do not verify the store's certificate (testing only)")
    group.add_argument("--tenant", metavar="ORG", help="X-Scope-OrgID header (Mimir, Cortex multi-tenancy)")
    group.add_argument("--query-timeout", type=positive, metavar="SECONDS", help="per query (default 30)")


def add_diagnose_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("time span (with --prometheus)")
    group.add_argument("--at", metavar="TIME", help="judge the window ending at TIME: RFC 3339, Unix seconds, now, "
                       "or relative like -2h")
    group.add_argument("--from", dest="from_", metavar="TIME", help="first evaluation step (same forms as --at)")
    group.add_argument("--to", metavar="TIME", help="last evaluation step (default now)")
    group.add_argument("--step", metavar="DURATION", help="between evaluation steps: 15s, 1m, 5m (default 1m)")


def add_serve_flags(parser: argparse.ArgumentParser) -> None:
    add_source_flags(parser)
    parser.add_argument("--interval", type=positive, metavar="SECONDS",
                        help="with --prometheus: seconds between diagnosis cycles (default 15)")
    parser.add_argument("--shard", type=shard_spec, metavar="I/N",
                        help="with --prometheus: diagnose only shard I of N (0-based), the targets whose target "
                             "labels hash to I modulo N, as Prometheus' hashmod does")


def shard_spec(text: str) -> tuple[int, int]:
    """``I/N`` -> (I, N), with 0 <= I < N."""
    index, _, count = text.partition("/")
    if not (index.isdigit() and count.isdigit()) or int(count) < 1 or int(index) >= int(count):
        raise argparse.ArgumentTypeError(f"{text!r}: write the shard as I/N with 0 <= I < N, e.g. 0/4")
    return int(index), int(count)


def overrides(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str]]:
    """The ``prometheus`` settings the flags give, and which flag set which setting."""
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}

    def put(path: str, value: Any, flag: str) -> None:
        node = values
        keys = path.split(".")[1:]
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value
        origins[path] = flag
        for end in range(2, len(keys) + 1):  # a section's own error (basic_auth, tls) names the flag too
            origins.setdefault(".".join(path.split(".")[:end]), flag)

    for flag, dest, path in SOURCE_FLAGS:
        value = getattr(args, dest, None)
        if value is None:
            continue
        if dest == "prometheus":
            put("prometheus.url", value, flag)
        elif dest == "target_label":
            put(path, tuple(value), flag)
        elif dest == "query_timeout":
            put(path, value, flag)
        else:
            put(path, value, flag)
    if getattr(args, "interval", None) is not None and getattr(args, "command", "") == "serve":
        put("prometheus.interval", args.interval, "--interval")
    if getattr(args, "shard", None) is not None and getattr(args, "command", "") == "serve":
        put("prometheus.shard", args.shard[0], "--shard")
        put("prometheus.shards", args.shard[1], "--shard")
    return ({"prometheus": values} if values else {}), origins


TIME_FLAGS = ("--at", "--from", "--to")


def join_relative_times(argv: list[str]) -> list[str]:
    """``--from -2h`` as ``--from=-2h``: argparse would take ``-2h`` for an option of its own."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] in TIME_FLAGS and arg.startswith("-") and arg[1:2].isdigit():
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def wanted(args: argparse.Namespace) -> bool:
    return any(getattr(args, dest, None) is not None for _, dest, _ in SOURCE_FLAGS)
