"""Zero configuration against a real vLLM: every engine fact found, with its source.

The session's real `vllm serve` (CPU build) runs with non-default batch, sequence, block and
KV-cache sizes. A sidecar whose config has no `engine` section finds the process on the target's
port: each fact equals the flag and says so, and the rules that abstain without the facts now
judge. The per-version defaults table is checked against the installed vLLM's own code. (Secrets
on a command line and in an environment: tests/integration/test_engine_facts.py.)
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.config import load_settings
from exporter.facts import defaults as version_defaults

from .harness import RealVLLM, start_phase, vllm_venv
from .sidecar import RunningSidecar

pytestmark = pytest.mark.realvllm

# Tight objectives so the outcome gates pass and the rules reach the facts they need.
SLO = {"ttft_p95_seconds": 0.001, "itl_p95_seconds": 0.001}
FACT_NEEDS = ("engine.max_num_batched_tokens", "engine.max_num_seqs")


def _lacking_facts(doc: dict) -> dict[str, list[str]]:
    return {cause: needs for cause, needs in doc["abstained"].items()
            if any(need.startswith(FACT_NEEDS) for need in needs)}


def _flags(vllm: RealVLLM) -> dict[str, int]:
    return {"max_num_batched_tokens": vllm.max_num_batched_tokens, "max_num_seqs": vllm.max_num_seqs,
            "block_size": vllm.block_size, "kv_cache_memory_bytes": vllm.kv_cache_memory_bytes,
            "max_model_len": vllm.max_model_len}


async def test_facts_come_from_the_command_line_and_the_rules_judge(
        real_vllm: RealVLLM, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # The session's vLLM (started anyway for the other real-vLLM tests) runs with non-default sizes.
    flags = _flags(real_vllm)
    cpu_defaults = version_defaults.defaults("0.32.0", {"platform": "cpu"})
    assert all(flags[name] != cpu_defaults[name] for name in ("max_num_batched_tokens", "max_num_seqs", "block_size"))
    caplog.set_level(logging.DEBUG)
    record = tmp_path / "captures"
    settings = load_settings(overrides={"listen": "127.0.0.1:1", "window_seconds": 12, "slo": SLO, "targets": [
        {"name": "real-vllm", "url": real_vllm.metrics_url, "scrape_interval": 1.0, "timeout": 1.0,
         "record_dir": str(record)}]})  # no engine section
    async with RunningSidecar(settings) as sidecar:
        await start_phase(real_vllm.base_url, "steady", duration_s=12)
        doc = await sidecar.doc()
        pages = {}
        assert sidecar.session is not None
        for path in ("/metrics", "/api/v1/diagnosis", "/", "/api/v1/diagnosis.txt"):
            async with sidecar.session.get(sidecar.url + path) as response:
                pages[path] = await response.text()

    engine = doc["engine"]
    for fact, value in flags.items():
        assert engine[fact] == {"value": value, "source": "cmdline"}, (fact, engine)
    assert engine["enable_prefix_caching"] == {"value": True, "source": "cmdline"}
    assert engine["platform"] == {"value": "cpu", "source": "process"}
    assert engine["vllm_version"] == {"value": "0.32.0", "source": "version_api"}
    assert engine["tensor_parallel_size"] == {"value": 1, "source": "defaults"}
    # What vLLM reports running with agrees with the flags.
    blocks = engine["num_gpu_blocks"]
    assert blocks["source"] == "metrics"
    assert blocks["value"] * flags["block_size"] == engine["kv_cache_size_tokens"]["value"]
    assert f'block_size="{flags["block_size"]}"' in real_vllm.fetch_metrics()
    assert (f'vllm_diag_engine_fact{{fact="max_num_seqs",source="cmdline",target="real-vllm"}} '
            f'{float(flags["max_num_seqs"])}') in pages["/metrics"]
    assert "max_num_batched_tokens: " + str(flags["max_num_batched_tokens"]) + " (cmdline)" \
        in pages["/api/v1/diagnosis.txt"]

    assert doc["state"] == "ok", doc["scrape"]
    judged = {cause: needs for cause, needs in doc["abstained"].items() if cause in ("A4", "B2")}
    assert judged == {}, judged
    assert _lacking_facts(doc) == {}, doc["abstained"]

    # The recording keeps the target's configuration beside its captures (TARGET.vllm-diag.yaml: the engine
    # facts as resolved), so the same scrapes diagnosed offline judge A4 and B2 with the same batch budget.
    files = sorted(record.iterdir())
    configs = [f for f in files if f.name.endswith(".vllm-diag.yaml")]
    assert len(configs) == 1, files
    captures = [f for f in files if f not in configs]

    def offline(paths: list[Path]) -> dict:
        run = subprocess.run([sys.executable, "-m", "exporter.cli", "diagnose", *map(str, paths), "--interval", "1",
                              "--window", "12", "--format", "json"], capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout)["targets"][0]

    recorded = offline(files)
    assert not {"A4", "B2"} & set(_lacking_facts(recorded)), recorded["abstained"]
    assert recorded["engine"]["max_num_batched_tokens"]["value"] == flags["max_num_batched_tokens"]
    # The captures alone, without process access or the recorded configuration: the budget is unknown.
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in captures:
        (bare / f.name).write_bytes(f.read_bytes())
    before = offline(sorted(bare.iterdir()))
    assert {"A4", "B2"} <= set(_lacking_facts(before)), before["abstained"]
    assert before["engine"]["block_size"] == {"value": flags["block_size"], "source": "metrics"}

    # Nothing of the command line but the known facts leaves the sidecar (secrets: tests/integration).
    for text in [*pages.values(), caplog.text]:
        assert "--max-num-seqs" not in text and "enforce-eager" not in text


VLLM_DEFAULTS = r"""
import dataclasses, inspect, json, re
from vllm.engine.arg_utils import EngineArgs
from vllm.platforms import current_platform
from vllm.platforms.cpu import CpuPlatform
from vllm.usage.usage_lib import UsageContext
API = UsageContext.OPENAI_API_SERVER
out = {"cpu": {w: [d[API] for d in EngineArgs.get_batch_defaults(w)] for w in (1, 2)}}
source = inspect.getsource(CpuPlatform.check_and_update_config)
# VLLM_CPU_KVCACHE_SPACE (GiB) replaces kv_cache_memory_bytes, flag or not (exporter/facts/environ.py).
out["cpu_env_kv"] = bool(re.search(
    r'env_key = "VLLM_CPU_KVCACHE_SPACE"\s*if env_key in os.environ and os.environ\[env_key\] != "":\s*'
    r'kv_cache_space = int\(os.environ\[env_key\]\)\s*'
    r'cache_config.kv_cache_memory_bytes = kv_cache_space \* GiB_bytes', source))
out["cpu_block_size"] = int(re.search(
    r"not cache_config.user_specified_block_size:\s*cache_config.block_size = (\d+)", source).group(1))
gib = 1 << 30
out["gpu"] = {}
current_platform.is_cpu = lambda: False
for name, memory in (("NVIDIA B200", 192 * gib), ("NVIDIA H100 80GB HBM3", 80 * gib),
                     ("NVIDIA A100-SXM4-80GB", 80 * gib), ("NVIDIA L4", 24 * gib)):
    current_platform.get_device_total_memory = lambda *a, m=memory: m
    current_platform.get_device_name = lambda *a, n=name: n
    out["gpu"][name] = [d[API] for d in EngineArgs.get_batch_defaults(1)]
fields = {f.name: f.default for f in dataclasses.fields(EngineArgs)}
names = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "gpu_memory_utilization",
         "kv_cache_dtype", "dtype")
out["common"] = {name: fields[name] for name in names}
print(json.dumps(out))
"""


def test_defaults_table_matches_the_installed_vllm() -> None:
    proc = subprocess.run([str(vllm_venv() / "bin" / "python"), "-c", VLLM_DEFAULTS], capture_output=True, text=True,
                          timeout=300, env={"VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    real = json.loads(proc.stdout.strip().splitlines()[-1])
    assert real["common"] == version_defaults.COMMON["0.32"]
    assert real["cpu_env_kv"], "vLLM's CPU platform no longer sets the KV size from VLLM_CPU_KVCACHE_SPACE as modelled"
    for world, (tokens, seqs) in real["cpu"].items():
        got = version_defaults.defaults("0.32.0", {"platform": "cpu", "tensor_parallel_size": int(world)})
        assert (got["max_num_batched_tokens"], got["max_num_seqs"]) == (tokens, seqs), world
        assert got["block_size"] == real["cpu_block_size"]
    for gpu, (tokens, seqs) in real["gpu"].items():
        got = version_defaults.defaults("0.32.0", {"gpu": gpu})
        assert (got["max_num_batched_tokens"], got["max_num_seqs"]) == (tokens, seqs), gpu
