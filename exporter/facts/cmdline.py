"""Engine facts from the ``vllm serve`` command line (argv as in /proc/<pid>/cmdline).

Understands ``vllm serve MODEL``, ``python -m vllm.entrypoints.openai.api_server --model M``,
``--flag value``, ``--flag=value``, underscores for dashes, ``--no-<flag>`` booleans, the short
``-tp/-pp/-dp`` forms, a shell wrapper (``sh -c "vllm serve ..."``) and ``--config FILE.yaml``,
whose values the command line overrides (as in vLLM). Only the facts of the catalog are kept:
the rest of the command line (API keys, tokens) is never stored.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any
from urllib.parse import urlsplit

import yaml

from exporter.config import redact
from exporter.facts.base import FactValue
from exporter.facts.catalog import BY_FLAG, BY_NAME, convert

DEFAULT_PORT = 8000  # vLLM's default --port
_SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh"})
_ENTRY_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")
# vLLM flags that take no value: the token after them is not their value (it may be the model).
_NO_VALUE = frozenset({
    "enforce-eager", "trust-remote-code", "disable-log-stats", "disable-log-requests", "enable-log-requests",
    "enable-prefix-caching", "enable-chunked-prefill", "enable-lora", "disable-frontend-multiprocessing",
    "enable-auto-tool-choice", "disable-fastapi-docs", "enable-prompt-tokens-details", "headless",
    "enable-expert-parallel", "enable-sleep-mode", "disable-uvicorn-access-log", "skip-tokenizer-init",
    "enable-mfu-metrics", "kv-cache-metrics", "enable-server-load-tracking", "async-scheduling",
})

ReadFile = Callable[[str], str | None]


@dataclass(frozen=True, slots=True)
class Invocation:
    """A recognised vLLM server command line: the facts it sets, by where they were set."""

    flags: Mapping[str, FactValue] = field(default_factory=dict)  # from the command line itself
    config_file: Mapping[str, FactValue] = field(default_factory=dict)  # from --config FILE.yaml
    port: int = DEFAULT_PORT
    config_path: str | None = None


def _vllm_args(argv: Sequence[str]) -> list[str] | None:
    """The arguments after ``serve`` or the api_server module; None if argv is not a vLLM server."""
    for index, token in enumerate(argv):
        name = PurePath(token).name
        if name == "vllm" and index + 1 < len(argv) and argv[index + 1] == "serve":
            return list(argv[index + 2:])
        if token == "-m" and index + 1 < len(argv):
            module = argv[index + 1]
            if module in _ENTRY_MODULES:
                return list(argv[index + 2:])
            if module.startswith("vllm.entrypoints.cli") and argv[index + 2:index + 3] == ["serve"]:
                return list(argv[index + 3:])
        if name in _SHELLS:
            rest = argv[index + 1:]
            if "-c" in rest and rest.index("-c") + 1 < len(rest):
                return _from_script(rest[rest.index("-c") + 1])
    return None


def _from_script(script: str) -> list[str] | None:
    """``sh -c '... vllm serve ...'``: the vLLM command among the script's simple commands."""
    try:
        words = shlex.split(script)
    except ValueError:  # unbalanced quotes: not something we can read reliably
        return None
    command: list[str] = []
    for word in [*words, ";"]:
        if word in (";", "&&", "||", "|", "&"):
            found = _vllm_args(command) if command and PurePath(command[0]).name not in _SHELLS else None
            if found is not None:
                return found
            command = []
        elif not (word == "exec" and not command):
            command.append(word)
    return None


def _pairs(args: Sequence[str]) -> tuple[str | None, list[tuple[str, str | None]]]:
    """(positional model, [(normalised option name, value or None)]) in command-line order."""
    model = None
    pairs: list[tuple[str, str | None]] = []
    index = 0
    while index < len(args):
        token = args[index]
        index += 1
        if token.startswith("--") and len(token) > 2:
            name, eq, value = token[2:].partition("=")
            # vLLM accepts underscores and dashes up to the first '.' (dotted JSON keys follow).
            head, dot, rest = name.partition(".")
            name = head.replace("_", "-") + dot + rest
            if eq:
                pairs.append((name, value))
            elif name in _NO_VALUE or name.startswith("no-") or index >= len(args) or _is_option(args[index]):
                pairs.append((name, None))
            else:
                pairs.append((name, args[index]))
                index += 1
        elif token.startswith("-") and len(token) > 1 and not _is_number(token):
            short, eq, value = token.partition("=")
            if short in BY_FLAG and eq:
                pairs.append((short, value))
            elif short in BY_FLAG and index < len(args):
                pairs.append((short, args[index]))
                index += 1
            # other short options (-O3, -q, ...) carry nothing we read
        elif model is None:
            model = token  # the positional model (vLLM moves a --model value here too)
    return model, pairs


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _is_option(token: str) -> bool:
    return token.startswith("-") and not _is_number(token)


SPECULATIVE_FLAG = "speculative-config"
KV_TRANSFER_FLAG = "kv-transfer-config"
# Flags whose value is a JSON object, and what of each is kept: the drafter and its draft tokens per step of
# --speculative-config, the connector, role and load-failure policy of --kv-transfer-config. Nothing else of
# them (a drafter's model path, a connector's addresses or extra config) is ever stored.
JSON_FLAGS: Mapping[str, Mapping[str, str]] = {
    SPECULATIVE_FLAG: {"method": "speculative_method", "num_speculative_tokens": "num_speculative_tokens"},
    KV_TRANSFER_FLAG: {"kv_connector": "kv_connector", "kv_role": "kv_role",
                       "kv_load_failure_policy": "kv_load_failure_policy"},
}


def json_flag_facts(flag: str, value: object) -> dict[str, FactValue]:
    """The facts in the value of a JSON-valued flag (``JSON_FLAGS``): a JSON object (command line) or a
    mapping (config file)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if not isinstance(value, dict):
        return {}
    out: dict[str, FactValue] = {}
    for key, fact in JSON_FLAGS[flag].items():
        converted = convert(BY_NAME[fact], value.get(key))
        if converted is not None:
            out[fact] = converted
    return out


def _facts(pairs: list[tuple[str, str | None]]) -> dict[str, FactValue]:
    """The catalog facts among option pairs; the last occurrence wins, as with argparse."""
    out: dict[str, FactValue] = {}
    for name, raw in pairs:
        if name in JSON_FLAGS:
            out.update(json_flag_facts(name, raw))
            continue
        head, _, key = name.partition(".")  # vLLM's dotted form: --speculative-config.method ngram
        if head in JSON_FLAGS and key in JSON_FLAGS[head]:
            out.update(json_flag_facts(head, {key: raw}))
            continue
        negated = name.startswith("no-") and name[3:] in BY_FLAG
        spec = BY_FLAG.get(name[3:] if negated else name)
        if spec is None:
            continue
        if spec.kind is bool:
            if raw is None:
                out[spec.name] = not negated
            continue
        value = convert(spec, raw)
        if value is not None:
            out[spec.name] = value
        else:
            out.pop(spec.name, None)  # a later 'auto' undoes an earlier value
    return out


def config_file_facts(text: str) -> dict[str, FactValue]:
    """Facts from a vLLM ``--config`` YAML (flat keys, dashes or underscores; nested values ignored)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return {}
    if not isinstance(data, dict):
        return {}
    pairs: list[tuple[str, str | None]] = []
    structured: dict[str, FactValue] = {}
    for key, value in data.items():
        name = str(key).replace("_", "-")
        if name in JSON_FLAGS:
            structured.update(json_flag_facts(name, value))
            continue
        spec = BY_FLAG.get(name)
        if spec is None or isinstance(value, (dict, list)):
            continue
        if spec.kind is bool:
            if isinstance(value, bool):
                pairs.append((name if value else f"no-{name}", None))
        else:
            pairs.append((name, None if isinstance(value, bool) else str(value)))
    return {**_facts(pairs), **structured}


def parse(argv: Sequence[str], read_file: ReadFile | None = None) -> Invocation | None:
    """The facts a vLLM server command line sets, or None if argv is not a vLLM server."""
    args = _vllm_args(list(argv))
    if args is None:
        return None
    config_path = None
    config: dict[str, FactValue] = {}
    if "--config" in args:  # vLLM only honours the two-token form
        at = args.index("--config")
        if at + 1 < len(args):
            config_path = args[at + 1]
            text = read_file(config_path) if read_file is not None else None
            config = config_file_facts(text) if text is not None else {}
        args = args[:at] + args[at + 2:]
    model, pairs = _pairs(args)
    flags = _facts(pairs)
    if model is not None and "model" not in flags:
        flags["model"] = model
    for facts in (flags, config):
        if isinstance(facts.get("model"), str):
            facts["model"] = _safe_model(str(facts["model"]))
    port = _port(pairs, config_path, read_file)
    return Invocation(flags=flags, config_file={k: v for k, v in config.items() if k not in flags}, port=port,
                      config_path=config_path)


def _safe_model(model: str) -> str:
    """A model URL without what may be a credential: user info, query (presigned tokens), fragment."""
    if "://" not in model:
        return model
    return urlsplit(redact(model))._replace(query="", fragment="").geturl()


def _port(pairs: list[tuple[str, str | None]], config_path: str | None, read_file: ReadFile | None) -> int:
    """The port vLLM listens on (to match a process to a target); not a published fact."""
    port: Any = None
    if config_path is not None and read_file is not None:
        try:
            loaded = yaml.safe_load(read_file(config_path) or "")
            port = loaded.get("port") if isinstance(loaded, dict) else None
        except yaml.YAMLError:
            port = None
    for name, value in pairs:
        if name == "port" and value is not None:
            port = value
    try:
        return int(port) if port is not None else DEFAULT_PORT
    except ValueError:
        return DEFAULT_PORT


__all__ = ["DEFAULT_PORT", "Invocation", "config_file_facts", "parse"]
