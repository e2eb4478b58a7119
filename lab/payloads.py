"""Deterministic benchmark payloads.

* ``steady_sequence``: the real vLLM 0.32 captures in their chronological order, replayed in
  rounds with every counter and histogram series offset by round x its value in the last capture,
  so counters keep increasing across rounds (a steady state, no false restarts).
* ``synthetic``: one capture's families replicated over many ``engine`` values and model names,
  plus ``vllm:lora_requests_info`` rows naming many LoRA adapters, grown to a target size.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

# The real captures ship with the tests; VLLM_DIAG_FIXTURES overrides them.
FIXTURES = Path(os.environ.get("VLLM_DIAG_FIXTURES",
                               Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "vllm-0.32-cpu"))
# Chronological order of the real-vLLM harness phases (see the fixtures' README).
ORDER = (
    "idle", "steady-during", "steady", "prefix-during", "prefix", "chunked-during", "chunked",
    "pressure-during", "pressure-peak-waiting", "pressure", "abort", "final",
)
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?( )(\S+)(.*)$")
_TYPE = re.compile(r"^# TYPE (\S+) (\S+)")


def real_captures(directory: Path = FIXTURES) -> list[str]:
    texts = []
    for phase in ORDER:
        path = directory / f"snapshot-{phase}.txt"
        if path.is_file():
            texts.append(path.read_text(encoding="utf-8"))
    if not texts:
        raise SystemExit(f"no captures in {directory}")
    return texts


def _cumulative_families(text: str) -> set[str]:
    families = set()
    for line in text.split("\n"):
        m = _TYPE.match(line)
        if m and m.group(2) in ("counter", "histogram"):
            families.add(m.group(1))
    return families


def _is_cumulative(name: str, families: set[str]) -> bool:
    if name.endswith("_created"):
        return False
    for suffix in ("", "_total", "_bucket", "_sum", "_count"):
        if suffix and not name.endswith(suffix):
            continue
        base = name[: len(name) - len(suffix)] if suffix else name
        if base in families:
            return True
    return False


def _values(text: str, families: set[str]) -> dict[tuple[str, str], float]:
    out = {}
    for line in text.split("\n"):
        if not line or line[0] == "#":
            continue
        m = _SAMPLE.match(line)
        if m and _is_cumulative(m.group(1), families):
            out[(m.group(1), m.group(2) or "")] = float(m.group(4))
    return out


def _offset(text: str, families: set[str], offsets: dict[tuple[str, str], float], factor: int) -> str:
    if factor == 0:
        return text
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if not line or line[0] == "#":
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        extra = offsets.get((m.group(1), m.group(2) or ""))
        if extra:
            lines[i] = f"{m.group(1)}{m.group(2) or ''} {float(m.group(4)) + factor * extra!r}{m.group(5)}"
    return "\n".join(lines)


def steady_sequence(count: int, captures: list[str] | None = None) -> list[str]:
    """``count`` different captures with monotonically increasing counters."""
    captures = captures or real_captures()
    families = _cumulative_families(captures[-1])
    offsets = _values(captures[-1], families)
    return [_offset(captures[i % len(captures)], families, offsets, i // len(captures)) for i in range(count)]


def synthetic(text: str, target_bytes: int = 1 << 20, *, models_per_engine: int = 4, adapters: int = 64) -> str:
    """A multi-engine, multi-model exposition of about ``target_bytes``, from one real capture.

    Every ``vllm:`` family (HELP/TYPE once, as in a real exposition) carries one series per
    (engine, model_name) pair; engines are added until the size is reached. Non-vLLM families
    (python_*, process_*, http_*) appear once, as the API server exports them once.
    """
    header: dict[str, list[str]] = {}
    samples: dict[str, list[str]] = {}
    order: list[str] = []
    other: list[str] = []
    current = None
    for line in text.split("\n"):
        if not line:
            continue
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            current = line.split(" ", 3)[2]
            if current.startswith("vllm:"):
                if current not in header:
                    header[current] = []
                    samples[current] = []
                    order.append(current)
                header[current].append(line)
                continue
            other.append(line)
            continue
        if current is not None and current.startswith("vllm:") and line.startswith("vllm:"):
            samples[current].append(line)
        else:
            other.append(line)

    def block(engine: int, model: str) -> dict[str, list[str]]:
        out = {}
        for fam in order:
            out[fam] = [
                s.replace('engine="0"', f'engine="{engine}"').replace('model_name="tiny"', f'model_name="{model}"')
                for s in samples[fam]
            ]
        return out

    per_pair = sum(len(s) + 1 for fam in order for s in samples[fam])
    fixed = sum(len(s) + 1 for s in other) + sum(len(h) + 1 for fam in order for h in header[fam])
    pairs = max(1, (target_bytes - fixed - adapters * 80) // max(1, per_pair))
    engines = max(1, -(-pairs // models_per_engine))
    pair_list = [(e, f"model-{m}") for e in range(engines) for m in range(models_per_engine)][:pairs]
    blocks = [block(e, model) for e, model in pair_list]
    out = list(other)
    for fam in order:
        out.extend(header[fam])
        seen: set[str] = set()  # series without an engine label exist once per model, not per engine
        for b in blocks:
            for line in b[fam]:
                key = line.rsplit(" ", 1)[0]
                if key not in seen:
                    seen.add(key)
                    out.append(line)
    # LoRA: vLLM exports adapter state as vllm:lora_requests_info (value: last update time).
    out.append("# HELP vllm:lora_requests_info Running stats on lora requests.")
    out.append("# TYPE vllm:lora_requests_info gauge")
    names = [f"adapter-{i:03d}" for i in range(adapters)]
    for e in range(engines):
        running = ",".join(names[(e * 3 + k) % adapters] for k in range(4))
        waiting = ",".join(names[(e * 5 + k) % adapters] for k in range(2))
        out.append(
            f'vllm:lora_requests_info{{engine="{e}",max_lora="8",running_lora_adapters="{running}",'
            f'waiting_lora_adapters="{waiting}"}} 1.7959955e+09'
        )
    return "\n".join(out) + "\n"
