"""vLLM command-line flags the actions name, with the releases that have them.

Checked against each release's published source (``vllm/engine/arg_utils.py`` and the OpenAI
server's argument code) from 0.1.0 to 0.32.0: the first release whose CLI accepts the flag, and
the release that removed it. Runbooks print the range next to every action that names a flag, so
an operator on an older vLLM knows before a restart whether the flag exists there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Flag:
    since: str  # first release that accepts it
    removed: str | None = None  # first release that no longer does
    note: str = ""

    def versions(self) -> str:
        return f"{self.since}-{self.removed} (removed)" if self.removed else f"{self.since}+"


FLAGS: Mapping[str, Flag] = {
    "--gpu-memory-utilization": Flag("0.1.0"),
    "--max-num-seqs": Flag("0.1.0"),
    "--max-num-batched-tokens": Flag("0.1.0"),
    "--max-model-len": Flag("0.2.0"),
    "--tensor-parallel-size": Flag("0.1.0"),
    "--pipeline-parallel-size": Flag("0.1.0", note="values above 1 work for online serving since 0.5"),
    "--data-parallel-size": Flag("0.8.3"),
    "--kv-cache-dtype": Flag("0.3.0", note="the value fp8 since 0.4.1"),
    "--kv-cache-memory-bytes": Flag("0.10.2"),
    "--enable-prefix-caching": Flag("0.4.0"),
    "--enable-chunked-prefill": Flag("0.4.0"),
    "--api-server-count": Flag("0.9.1"),
    "--max-num-queued-reqs": Flag("0.29.0"),
    "--max-num-queued-tokens": Flag("0.29.0"),
    "--kv-offloading-size": Flag("0.11.1"),
    "--kv-offloading-backend": Flag("0.11.1"),
    "--kv-transfer-config": Flag("0.6.5"),
    "--custom-histogram-buckets": Flag("0.32.0"),
    # KV block residency (lifetime, idle before eviction, reuse gaps), sampled: the block witness.
    "--kv-cache-metrics": Flag("0.12.0"),
    "--kv-cache-metrics-sample": Flag("0.12.0", note="default 0.01 (one block in a hundred)"),
    "--disable-log-stats": Flag("0.1.0"),
    "--enforce-eager": Flag("0.2.6"),
    "--performance-mode": Flag("0.17.0"),
    "--long-prefill-token-threshold": Flag("0.7.3"),
    "--max-num-partial-prefills": Flag("0.7.3", removed="0.27.0"),
    "--scheduling-policy": Flag("0.6.3"),
    "--cpu-offload-gb": Flag("0.5.3"),
    "--swap-space": Flag("0.1.0", removed="0.18.0"),
    "--num-gpu-blocks-override": Flag("0.4.1"),
    "--block-size": Flag("0.1.0"),
    "--speculative-config": Flag("0.8.2"),
    "--enable-lora": Flag("0.3.0"),
    "--max-loras": Flag("0.3.0"),
    # LoRA slot memory and adapter placement, and data parallelism (issue 29: LoRA, data parallel, sleep).
    "--max-lora-rank": Flag("0.3.0"),
    "--max-cpu-loras": Flag("0.3.0"),
    "--enable-sleep-mode": Flag("0.7.0"),
}


def flag_of_knob(knob: str) -> str:
    """An engine argument in snake case (an action's knob) as its flag."""
    return "--" + knob.replace("_", "-")


def versions_of(text: str, knob: str | None = None) -> str:
    """The vLLM releases that have every flag an action names (its knob, and `--flags` in its text);
    empty when it names none."""
    import re

    names = dict.fromkeys([*([flag_of_knob(knob)] if knob else []), *re.findall(r"--[a-z][a-z0-9-]+", text)])
    known = [(n, FLAGS[n]) for n in names if n in FLAGS]
    return "; ".join(f"`{n}` {f.versions()}{f' ({f.note})' if f.note else ''}" for n, f in known)
