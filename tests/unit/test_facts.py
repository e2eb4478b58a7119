"""Engine-fact discovery: command lines, vLLM config files, environment, cache_config_info
generations, the HTTP API, version defaults and the precedence that merges them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.config import EngineFacts
from exporter.facts import cache_info, cmdline, defaults, environ, http_api
from exporter.facts.base import (
    CMDLINE,
    CONFIG,
    DEFAULTS,
    ENVIRONMENT,
    METRICS,
    MODELS_API,
    VERSION_API,
    VLLM_CONFIG_FILE,
    Fact,
    NoFacts,
)
from exporter.facts.resolve import engine_facts, resolve
from exporter.parse import parse

GIB = 2**30
SECRET = "sk-live-0123456789abcdef"

# (argv, facts set by the command line, port). Every form vLLM accepts that we read.
COMMAND_LINES = [
    pytest.param(["vllm", "serve", "/models/llama", "--max-num-batched-tokens", "4096", "--max-num-seqs", "64"],
                 {"model": "/models/llama", "max_num_batched_tokens": 4096, "max_num_seqs": 64}, 8000,
                 id="vllm-serve-flag-space-value"),
    pytest.param(["/venv/bin/python3", "/venv/bin/vllm", "serve", "m", "--max-num-batched-tokens=4096",
                  "--max_num_seqs=64", "--port=8001"],
                 {"model": "m", "max_num_batched_tokens": 4096, "max_num_seqs": 64}, 8001,
                 id="console-script-equals-and-underscores"),
    pytest.param(["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "org/m", "-tp", "2",
                  "--pipeline-parallel-size", "2", "-dp=2", "--port", "9000"],
                 {"model": "org/m", "tensor_parallel_size": 2, "pipeline_parallel_size": 2, "data_parallel_size": 2},
                 9000, id="python-m-api-server"),
    pytest.param(["python", "-m", "vllm.entrypoints.cli.main", "serve", "m", "--block-size", "32"],
                 {"model": "m", "block_size": 32}, 8000, id="python-m-cli-main-serve"),
    pytest.param(["/bin/sh", "-c", f"exec vllm serve 'my model' --max-num-seqs 8 --api-key '{SECRET} x'"],
                 {"model": "my model", "max_num_seqs": 8}, 8000, id="shell-wrapper-with-quoting"),
    pytest.param(["bash", "-c", "cd /srv && vllm serve m --max-model-len 4096 --port 8123 | tee log"],
                 {"model": "m", "max_model_len": 4096}, 8123, id="shell-pipeline"),
    pytest.param(["vllm", "serve", "m", "--foo", "bar", "--trust-remote-code", "--max-num-seqs", "12",
                  "--compilation-config.level", "3", "--hf-overrides", '{"a": 1}', "-O3", "--api-key", SECRET],
                 {"model": "m", "max_num_seqs": 12}, 8000, id="unknown-flags-and-secrets-skipped"),
    pytest.param(["vllm", "serve", "--enforce-eager", "m", "--no-enable-prefix-caching", "--enable-chunked-prefill"],
                 {"model": "m", "enable_prefix_caching": False, "enable_chunked_prefill": True}, 8000,
                 id="booleans-and-model-after-a-switch"),
    pytest.param(["vllm", "serve", "m", "--max-model-len", "32k", "--kv-cache-memory-bytes", "2G",
                  "--gpu-memory-utilization", "0.85", "--kv-cache-dtype", "fp8", "--dtype", "bfloat16"],
                 {"model": "m", "max_model_len": 32000, "kv_cache_memory_bytes": 2 * GIB,
                  "gpu_memory_utilization": 0.85, "kv_cache_dtype": "fp8", "dtype": "bfloat16"}, 8000,
                 id="human-readable-numbers"),
    pytest.param(["vllm", "serve", "m", "--max-num-seqs", "8", "--max-num-seqs", "16", "--max-model-len", "auto"],
                 {"model": "m", "max_num_seqs": 16}, 8000, id="last-wins-and-auto-is-unknown"),
    pytest.param(["vllm", "serve", "https://user:pw@models.example/m", "--max-num-seqs", "4"],
                 {"model": "https://***@models.example/m", "max_num_seqs": 4}, 8000,
                 id="model-url-credentials-redacted"),
    pytest.param(["vllm", "serve", f"s3://bucket/m?X-Amz-Signature={SECRET}#x"],
                 {"model": "s3://bucket/m"}, 8000, id="model-url-query-token-dropped"),
]


@pytest.mark.parametrize("argv, expected, port", COMMAND_LINES)
def test_command_line_forms(argv: list[str], expected: dict, port: int) -> None:
    invocation = cmdline.parse(argv)
    assert invocation is not None
    assert dict(invocation.flags) == expected
    assert invocation.port == port
    assert SECRET not in repr(invocation)


@pytest.mark.parametrize("argv", [
    ["python", "-m", "http.server", "8000"],
    ["vllm", "bench", "serve", "--max-num-seqs", "4"],
    ["python", "-m", "pytest", "tests"],
    ["sh", "-c", "echo 'unbalanced"],
    [],
])
def test_other_processes_are_not_vllm(argv: list[str]) -> None:
    assert cmdline.parse(argv) is None


def test_config_file_values_yield_to_flags(tmp_path: Path) -> None:
    config = tmp_path / "vllm.yaml"
    config.write_text("max-num-batched-tokens: 1024\nmax_num_seqs: 32\nenable-prefix-caching: false\n"
                      "port: 9100\napi-key: " + SECRET + "\ncompilation-config: {level: 3}\n")
    argv = ["vllm", "serve", "m", "--config", str(config), "--max-num-batched-tokens", "2048"]
    invocation = cmdline.parse(argv, lambda path: Path(path).read_text())
    assert invocation is not None
    assert dict(invocation.flags) == {"model": "m", "max_num_batched_tokens": 2048}
    assert dict(invocation.config_file) == {"max_num_seqs": 32, "enable_prefix_caching": False}
    assert invocation.port == 9100 and invocation.config_path == str(config)
    assert SECRET not in repr(invocation)


def test_unreadable_config_file_leaves_the_flags() -> None:
    invocation = cmdline.parse(["vllm", "serve", "m", "--config", "/nope.yaml", "--max-num-seqs", "3"],
                               lambda path: None)
    assert invocation is not None and dict(invocation.flags) == {"model": "m", "max_num_seqs": 3}
    assert dict(invocation.config_file) == {}


def _fixture_cache_row() -> dict[str, str]:
    text = (Path(__file__).parents[1] / "fixtures/vllm-0.32-cpu/snapshot-idle.txt").read_text()
    return dict(parse(text, 0.0).info["vllm:cache_config_info"][0])


# The 0.33.0 label set as printed by vLLM (vllm/v1/metrics/loggers.py, 0.33.0).
V033 = dict(item.split("=") for item in (
    "_block_size_resolved=True block_size=16 cache_dtype=auto cache_hit_alignment_tokens=None "
    "effective_attention_block_size=None enable_mamba_shared_prefix_checkpoint=False enable_prefix_caching=True "
    "engine=0 gpu_memory_utilization=0.9 hash_block_size=None is_attention_free=False kv_cache_dtype_skip_layers=[] "
    "kv_cache_layout=None kv_cache_max_concurrency=53.49 kv_cache_memory_bytes=None kv_cache_size_tokens=438176 "
    "kv_offloading_backend=native kv_offloading_size=None kv_sharing_fast_prefill=False mamba_block_size=None "
    "mamba_cache_dtype=auto mamba_cache_mode=none mamba_page_size_padded=None mamba_ssm_cache_dtype=auto "
    "num_cpu_blocks=None num_gpu_blocks=27386 num_gpu_blocks_override=None prefix_cache_retention_interval=0 "
    "prefix_caching_hash_algo=sha256 prefix_match_unit=None replayssm_buffer_len=16 "
    "simple_cpu_offload_num_blocks=None skip_page_size_padded=None sliding_window=None swa_bounded_replay=True "
    "use_kda_recoverssm=False use_replayssm=False user_specified_block_size=False").split())

# 0.34.0's CacheConfig adds enable_extensible_kv_cache (and its private resolved flag); gpu_memory_utilization is
# None unless given (vllm/config/cache.py, 0.34.0: the default depends on the sizing mode), the block size 64.
V034 = {**V033, "enable_extensible_kv_cache": "True", "_extensible_kv_cache_resolved": "True", "block_size": "64",
        "gpu_memory_utilization": "None"}

# Older label sets, from CacheConfig's fields per release (reference: label-set history).
V06 = {"block_size": "16", "gpu_memory_utilization": "0.9", "swap_space_bytes": "4294967296", "cache_dtype": "auto",
       "is_attention_free": "False", "num_gpu_blocks_override": "None", "sliding_window": "None",
       "enable_prefix_caching": "False", "cpu_offload_gb": "0", "num_gpu_blocks": "7000", "num_cpu_blocks": "2048"}
V08 = {**V06, "calculate_kv_scales": "False", "prefix_caching_hash_algo": "builtin", "enable_prefix_caching": "True",
       "num_gpu_blocks": "None"}  # early V1: blocks not yet reported
V09_CPU = {**{k: v for k, v in V08.items() if k != "swap_space_bytes"}, "engine": "0", "swap_space": "4",
           "cpu_kvcache_space_bytes": "4294967296", "num_gpu_blocks": "2048", "block_size": "128"}
V010 = {**V09_CPU, "cpu_kvcache_space_bytes": "None", "kv_cache_memory_bytes": "8589934592",
        "mamba_page_size_padded": "None"}
V024 = {**V010, "_block_size_resolved": "True", "user_specified_block_size": "False", "kv_cache_size_tokens": "131072",
        "kv_cache_max_concurrency": "4.0", "hash_block_size": "None", "kv_offloading_backend": "native",
        "kv_cache_dtype_skip_layers": "[]"}
V024.pop("cpu_kvcache_space_bytes")

CACHE_GENERATIONS = [
    pytest.param(V06, "0.6", {"block_size": 16, "num_gpu_blocks": 7000, "gpu_memory_utilization": 0.9,
                              "enable_prefix_caching": False, "kv_cache_dtype": "auto"}, id="0.6-v0"),
    pytest.param(V08, "0.8", {"block_size": 16, "gpu_memory_utilization": 0.9, "enable_prefix_caching": True,
                              "kv_cache_dtype": "auto"}, id="0.8-v1-blocks-None"),
    pytest.param(V09_CPU, "0.9", {"block_size": 128, "num_gpu_blocks": 2048, "gpu_memory_utilization": 0.9,
                                  "kv_cache_memory_bytes": 4 * GIB, "enable_prefix_caching": True,
                                  "kv_cache_dtype": "auto"}, id="0.9-cpu-kvcache-space"),
    pytest.param(V010, "0.10", {"block_size": 128, "num_gpu_blocks": 2048, "gpu_memory_utilization": 0.9,
                                "kv_cache_memory_bytes": 8 * GIB, "enable_prefix_caching": True,
                                "kv_cache_dtype": "auto"}, id="0.10-kv-cache-memory-bytes"),
    pytest.param(V024, "0.24", {"block_size": 128, "num_gpu_blocks": 2048, "gpu_memory_utilization": 0.9,
                                "kv_cache_memory_bytes": 8 * GIB, "kv_cache_size_tokens": 131072,
                                "enable_prefix_caching": True, "kv_cache_dtype": "auto"}, id="0.24-size-tokens"),
    pytest.param(_fixture_cache_row(), "0.32", {"block_size": 32, "num_gpu_blocks": 96, "gpu_memory_utilization": 0.92,
                                                "kv_cache_memory_bytes": 3145728, "kv_cache_size_tokens": 3072,
                                                "enable_prefix_caching": True, "kv_cache_dtype": "auto"},
                 id="0.32-real-capture"),
    pytest.param(V033, "0.33", {"block_size": 16, "num_gpu_blocks": 27386, "gpu_memory_utilization": 0.9,
                                "kv_cache_size_tokens": 438176, "enable_prefix_caching": True,
                                "kv_cache_dtype": "auto"}, id="0.33"),
    pytest.param(V034, "0.34+", {"block_size": 64, "num_gpu_blocks": 27386, "kv_cache_size_tokens": 438176,
                                 "enable_prefix_caching": True, "kv_cache_dtype": "auto"}, id="0.34-extensible"),
]


@pytest.mark.parametrize("labels, release, expected", CACHE_GENERATIONS)
def test_cache_config_info_of_each_generation(labels: dict, release: str, expected: dict) -> None:
    assert cache_info.facts([labels]) == {**expected, "vllm_version": release}


def test_cache_config_info_absent_gives_nothing() -> None:
    assert cache_info.facts([]) == {}


def test_models_api_gives_max_model_len_of_the_base_model() -> None:
    body = json.dumps({"object": "list", "data": [
        {"id": "sql-lora", "parent": "tiny", "max_model_len": 99},
        {"id": "tiny", "root": "/m", "parent": None, "max_model_len": 1024}]}).encode()
    assert http_api.models_facts(body) == {"max_model_len": 1024}
    assert http_api.version_facts(b'{"version": "0.32.0"}') == {"vllm_version": "0.32.0"}
    with pytest.raises(NoFacts):
        http_api.models_facts(b"vllm:num_requests_running 1\n")
    source = http_api.HTTP_SOURCES[0]
    assert source.url("http://u:p@127.0.0.1:8000/metrics?x=1") == "http://u:p@127.0.0.1:8000/v1/models"


@pytest.mark.parametrize("metrics_url, models_url", [
    ("http://gateway/pool-a/metrics", "http://gateway/pool-a/v1/models"),  # vLLM --root-path behind a proxy
    ("https://gateway/pool-a/metrics/", "https://gateway/pool-a/v1/models"),
    ("http://127.0.0.1:8000/scenarios/healthy/metrics", "http://127.0.0.1:8000/scenarios/healthy/v1/models"),
    ("http://127.0.0.1:9400/vllm-stats", "http://127.0.0.1:9400/v1/models"),  # no /metrics: the API at the root
])
def test_the_http_api_is_asked_next_to_metrics_under_its_path_prefix(metrics_url: str, models_url: str) -> None:
    models, version = http_api.HTTP_SOURCES
    assert models.url(metrics_url) == models_url
    assert version.url(metrics_url) == models_url.removesuffix("/v1/models") + "/version"


def test_cpu_kv_space_variable_overrides_the_flag_on_the_cpu_build_only() -> None:
    over, under = environ.facts({"VLLM_CPU_KVCACHE_SPACE": "2", "HF_TOKEN": SECRET}, "cpu")
    assert over == {"kv_cache_memory_bytes": 2 * GIB} and under == {}
    assert environ.facts({"VLLM_CPU_KVCACHE_SPACE": "2"}, None) == ({}, {})
    assert environ.facts({"VLLM_CPU_KVCACHE_SPACE": ""}, "cpu") == ({}, {})


@pytest.mark.parametrize("version, known, expected", [
    ("0.32.0", {"platform": "cpu"}, {"max_num_batched_tokens": 2048, "max_num_seqs": 128}),
    ("0.32.1", {"platform": "cpu", "tensor_parallel_size": 2}, {"max_num_batched_tokens": 4096, "max_num_seqs": 256}),
    ("0.32", {"platform": "cpu", "performance_mode": "throughput"},
     {"max_num_batched_tokens": 4096, "max_num_seqs": 256}),
    ("0.32.0", {"platform": "cpu", "enable_chunked_prefill": False, "max_model_len": 8192},
     {"max_num_batched_tokens": 8192, "max_num_seqs": 128}),
    ("0.32.0", {"platform": "cpu", "enable_chunked_prefill": False}, {"max_num_seqs": 128}),
    ("0.32.0", {"gpu": "NVIDIA H100 80GB HBM3"}, {"max_num_batched_tokens": 8192, "max_num_seqs": 1024}),
    ("0.32.0", {"gpu": "A100-SXM4-80GB"}, {"max_num_batched_tokens": 2048, "max_num_seqs": 256}),
    ("0.32.0", {"gpu": "B200"}, {"max_num_batched_tokens": 16384, "max_num_seqs": 1024}),
    ("0.32.0", {}, {}),  # platform unknown: no batch defaults
    ("0.32.0", {"platform": "cpu", "data_parallel_size": 2}, {}),
])
def test_version_defaults(version: str, known: dict, expected: dict) -> None:
    got = defaults.defaults(version, known)
    for name in ("max_num_batched_tokens", "max_num_seqs"):
        assert got.get(name) == expected.get(name), name
    assert got.get("block_size") == (128 if known.get("platform") == "cpu" else None)
    assert got["tensor_parallel_size"] == 1 and got["gpu_memory_utilization"] == 0.92


def test_unknown_version_has_no_defaults() -> None:
    assert defaults.defaults("0.31.0", {"platform": "cpu"}) == {}
    assert defaults.defaults(None, {"platform": "cpu"}) == {}


def test_precedence_config_then_cmdline_then_file_env_api_metrics_defaults() -> None:
    observed = {
        CMDLINE: {"max_num_batched_tokens": 512, "block_size": 32},
        VLLM_CONFIG_FILE: {"max_num_seqs": 24, "block_size": 64},
        ENVIRONMENT: {"kv_cache_memory_bytes": GIB},
        VERSION_API: {"vllm_version": "0.32.0"},
        MODELS_API: {"max_model_len": 2048},
        METRICS: {"block_size": 16, "num_gpu_blocks": 96, "kv_cache_memory_bytes": 5, "vllm_version": "0.32"},
        "process": {"platform": "cpu"},
    }
    resolved = resolve(EngineFacts(max_num_seqs=300), observed)
    assert resolved["max_num_seqs"] == Fact(300, CONFIG)
    assert resolved["max_num_batched_tokens"] == Fact(512, CMDLINE)
    assert resolved["block_size"] == Fact(32, CMDLINE)
    assert resolved["kv_cache_memory_bytes"] == Fact(GIB, ENVIRONMENT)
    assert resolved["vllm_version"] == Fact("0.32.0", VERSION_API)
    assert resolved["max_model_len"] == Fact(2048, MODELS_API)
    assert resolved["num_gpu_blocks"] == Fact(96, METRICS)
    assert resolved["tensor_parallel_size"] == Fact(1, DEFAULTS)
    facts = engine_facts(resolved)
    assert (facts.max_num_seqs, facts.max_num_batched_tokens, facts.block_size) == (300, 512, 32)


def test_defaults_need_the_command_line() -> None:
    # Without the command line a missing flag may be set anyway: defaults would be guesses.
    resolved = resolve(EngineFacts(), {METRICS: {"vllm_version": "0.32"}, "process": {"platform": "cpu"}})
    assert "max_num_batched_tokens" not in resolved and "tensor_parallel_size" not in resolved


def test_an_invalid_discovered_value_is_dropped_not_fatal() -> None:
    facts = engine_facts({"gpu_memory_utilization": Fact(3.0, METRICS), "max_num_seqs": Fact(8, CMDLINE)})
    assert facts.gpu_memory_utilization is None and facts.max_num_seqs == 8


def test_speculative_config_gives_its_drafter_and_draft_tokens_only() -> None:
    config = json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4,
                         "model": "/secret/path/drafter"})
    inv = cmdline.parse(["vllm", "serve", "m", "--speculative-config", config])
    assert inv is not None and inv.flags == {"speculative_method": "ngram", "num_speculative_tokens": 3, "model": "m"}
    dotted = cmdline.parse(["vllm", "serve", "m", "--speculative-config.method", "eagle",
                            "--speculative_config.num_speculative_tokens=2"])
    assert dotted is not None and dotted.flags["speculative_method"] == "eagle"
    assert dotted.flags["num_speculative_tokens"] == 2
    from_file = cmdline.config_file_facts("speculative_config:\n  method: mtp\n  num_speculative_tokens: 1\n")
    assert from_file == {"speculative_method": "mtp", "num_speculative_tokens": 1}
    broken = cmdline.parse(["vllm", "serve", "m", "--speculative-config", "{not json"])
    assert broken is not None and "speculative_method" not in broken.flags
    assert EngineFacts(**{k: v for k, v in inv.flags.items() if k != "model"}).num_speculative_tokens == 3


def test_kv_transfer_config_gives_connector_role_and_failure_policy_only():
    config = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_consumer",
                         "kv_load_failure_policy": "recompute",
                         "kv_connector_extra_config": {"backends": ["UCX"], "secret": "x"}, "kv_ip": "10.0.0.1"})
    inv = cmdline.parse(["vllm", "serve", "m", "--kv-transfer-config", config, "--kv-offloading-size", "80"])
    assert inv is not None and inv.flags == {"kv_connector": "NixlConnector", "kv_role": "kv_consumer",
                                             "kv_load_failure_policy": "recompute", "kv_offloading_size": 80.0,
                                             "model": "m"}
    dotted = cmdline.parse(["vllm", "serve", "m", "--kv-transfer-config.kv_role", "kv_producer"])
    assert dotted is not None and dotted.flags["kv_role"] == "kv_producer"
    from_file = cmdline.config_file_facts("kv_transfer_config:\n  kv_connector: LMCacheConnectorV1\n"
                                          "  kv_role: kv_both\n")
    assert from_file == {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
    facts = EngineFacts(**{k: v for k, v in inv.flags.items() if k != "model"})
    assert facts.kv_role == "kv_consumer" and facts.kv_offloading_size == 80.0
