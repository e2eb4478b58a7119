"""Acceptance 1: every scenario speaks exactly vLLM 0.32's exposition format.

The reference is a real ``vllm serve`` capture (``fixtures/vllm-0.32-cpu/snapshot-steady.txt``):
same families in the same order with the same TYPE and HELP lines, the same label names per
series, the same ``le`` lists per histogram (the request_tokens family depends on
max_model_len, so it is checked against vLLM's 1-2-5 formula, which is itself checked
against the capture). Plus: prometheus_client parses the output, histograms are consistent,
the idle exposition matches the idle capture, captures on disk are deterministic.
"""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.simulator import SCENARIOS, main, write_captures
from exporter.simulator.buckets import request_token_buckets
from exporter.simulator.exposition import render_dcgm, render_vllm

START = 1_800_000_000.0
SIM_SECONDS = 120.0  # long enough for every scenario to finish some requests
REQUEST_TOKEN_FAMILIES = {
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
    "vllm:request_max_num_generation_tokens",
    "vllm:request_params_max_tokens",
    "vllm:request_prefill_kv_computed_tokens",
}

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass
class Exposition:
    """The structure of an exposition text: what acceptance 1 compares."""

    types: list[tuple[str, str]] = field(default_factory=list)
    helps: dict[str, str] = field(default_factory=dict)
    label_names: dict[str, set[tuple[str, ...]]] = field(default_factory=dict)
    les: dict[str, list[str]] = field(default_factory=dict)  # per histogram family (first child)
    values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)


def parse(text: str) -> Exposition:
    out = Exposition()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            out.types.append((name, kind))
        elif line.startswith("# HELP "):
            _, _, name, help_text = line.split(" ", 3)
            out.helps[name] = help_text
        elif line:
            match = _SAMPLE.match(line)
            assert match, f"not a sample line: {line!r}"
            name, block, value = match.groups()
            labels = tuple(_LABEL.findall(block or ""))
            names = tuple(k for k, _ in labels)
            assert list(names) == sorted(names), f"labels not sorted as prometheus_client prints: {line}"
            out.label_names.setdefault(name, set()).add(names)
            out.values[(name, labels)] = float(value)
            if name.endswith("_bucket"):
                family = name[: -len("_bucket")]
                le = dict(labels)["le"]
                if family not in out.les or out.les[family][-1] != "+Inf":
                    out.les.setdefault(family, []).append(le)
    return out


@cache
def scenario_text(name: str) -> str:
    engine = SCENARIOS[name].build()
    engine.advance_to(SIM_SECONDS)
    return render_vllm(engine, start_unix=START)


@pytest.fixture(scope="module")
def steady(fixtures_dir: Path) -> Exposition:
    return parse((fixtures_dir / "snapshot-steady.txt").read_text())


def test_request_token_formula_matches_the_capture(steady: Exposition) -> None:
    # The capture's server ran with --max-model-len 1024.
    expected = [str(b) for b in request_token_buckets(1024)] + ["+Inf"]
    assert steady.les["vllm:request_prompt_tokens"] == expected
    # Worked examples of vLLM's bucket lists (vllm/v1/metrics/buckets.py).
    assert request_token_buckets(8192)[-1] == 5000
    assert request_token_buckets(32768)[-1] == 20000
    assert request_token_buckets(131072)[-1] == 100000


@pytest.fixture(scope="module")
def speculative(fixtures_dir: Path) -> Exposition:
    """A real capture of an engine started with n-gram --speculative-config (3 draft tokens)."""
    return parse((fixtures_dir / "snapshot-speculative-end.txt").read_text())


# KV connector families (NIXL, native offload, the consumer's fetch-stage gauge): from vLLM's source; the CPU
# build registers none of them, so they are left out where a scenario is compared with a capture.
CONNECTOR_PREFIXES = ("vllm:nixl_", "vllm:kv_offload_", "vllm:num_requests_kv_fetch_by_stage")


def without_prefixes(sim: Exposition, prefixes: tuple[str, ...]) -> Exposition:
    """The exposition without the families whose names start with ``prefixes``."""
    return Exposition(types=[(n, k) for n, k in sim.types if not n.startswith(prefixes)],
                      helps={n: h for n, h in sim.helps.items() if not n.startswith(prefixes)},
                      label_names={n: v for n, v in sim.label_names.items() if not n.startswith(prefixes)},
                      les={n: v for n, v in sim.les.items() if not n.startswith(prefixes)}, values=sim.values)


@pytest.fixture(scope="module")
def lora_capture(fixtures_dir: Path) -> Exposition:
    """A real capture of an engine started with --enable-lora --max-loras 1 and two adapters."""
    return parse((fixtures_dir / "snapshot-lora.txt").read_text())


@pytest.fixture(scope="module")
def kv_metrics_capture(fixtures_dir: Path) -> Exposition:
    """A real 0.32 capture of an engine started with --kv-cache-metrics (the engine-witness captures: python_*
    families and _created twins left out)."""
    folder = fixtures_dir.parent / "vllm-0.32-witnesses" / "kv-thrash"
    text = gzip.decompress((folder / "kv-thrash-00032.txt.gz").read_bytes()).decode()
    return parse("\n".join(line for line in text.splitlines() if not line.startswith("# vllm-diag capture")))


def without_created_and_python(sim: Exposition) -> Exposition:
    """The exposition as the engine-witness captures keep it."""
    def kept(name: str) -> bool:
        return not name.startswith("python_") and not name.endswith("_created")
    return Exposition(types=[(n, k) for n, k in sim.types if kept(n)],
                      helps={n: h for n, h in sim.helps.items() if kept(n)},
                      label_names={n: v for n, v in sim.label_names.items() if kept(n)}, les=sim.les,
                      values=sim.values)


# vLLM 0.34's API-server render histogram (vllm/renderers/metrics.py): the 0.32 captures cannot have it.
RENDER = "vllm:request_render_duration_seconds"


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_same_families_labels_and_buckets_as_vllm_032(name: str, steady: Exposition, speculative: Exposition,
                                                      lora_capture: Exposition,
                                                      kv_metrics_capture: Exposition) -> None:
    if SCENARIOS[name].engine.num_speculative_tokens:
        steady = speculative  # the spec-decode families come first, then the same as any engine
    if SCENARIOS[name].engine.enable_lora:
        steady = lora_capture  # lora_requests_info before cache_config_info, the rest as any engine
    sim = without_prefixes(parse(scenario_text(name)), (*CONNECTOR_PREFIXES, RENDER))
    if SCENARIOS[name].engine.kv_cache_metrics_sample:
        steady = kv_metrics_capture  # the kv_block_* histograms after the request histograms
        sim = without_created_and_python(sim)
    assert sim.types == steady.types  # names, types and order
    assert sim.helps == steady.helps  # HELP lines verbatim (trailing spaces included)
    assert sim.label_names == steady.label_names
    max_model_len = SCENARIOS[name].engine.max_model_len
    token_les = [str(b) for b in request_token_buckets(max_model_len)] + ["+Inf"]
    assert set(sim.les) == set(steady.les)
    for family, les in steady.les.items():
        if family in REQUEST_TOKEN_FAMILIES:
            assert sim.les[family] == token_les, family
        else:
            assert sim.les[family] == les, family


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_exposition_is_consistent(name: str) -> None:
    text = scenario_text(name)
    families = {f.name: f for f in text_string_to_metric_families(text)}  # parses at all
    assert "vllm:num_preemptions" in families
    sim = parse(text)
    v = sim.values
    base = (("engine", "0"), ("model_name", SCENARIOS[name].engine.model_name))

    def one(metric: str, *extra: tuple[str, str]) -> float:
        return v[(metric, tuple(sorted(base + extra)))]

    # Histograms: cumulative buckets ending in +Inf == _count.
    for family in sim.les:
        rows = [(labels, value) for (n, labels), value in v.items() if n == f"{family}_bucket"]
        by_child: dict[tuple[tuple[str, str], ...], list[float]] = {}
        for labels, value in rows:
            child = tuple(kv for kv in labels if kv[0] != "le")
            by_child.setdefault(child, []).append(value)
        for child, counts in by_child.items():
            assert counts == sorted(counts), family
            assert counts[-1] == v[(f"{family}_count", child)], family
    # vLLM's own identities, as seen in the real captures.
    assert one("vllm:prompt_tokens_total") == (
        one("vllm:prompt_tokens_by_source_total", ("source", "local_compute"))
        + one("vllm:prompt_tokens_by_source_total", ("source", "local_cache_hit"))
        + one("vllm:prompt_tokens_by_source_total", ("source", "external_kv_transfer"))
    )
    assert one("vllm:prefix_cache_hits_total") == one(
        "vllm:prompt_tokens_cached_by_source_total", ("source", "device")
    )
    assert one("vllm:external_prefix_cache_hits_total") <= one("vllm:external_prefix_cache_queries_total")
    assert one("vllm:prefix_cache_hits_total") <= one("vllm:prefix_cache_queries_total")
    # Every waiting request waits for one reason: capacity, or deferred (a LoRA adapter without a slot).
    assert one("vllm:num_requests_waiting") == sum(
        one("vllm:num_requests_waiting_by_reason", ("reason", r)) for r in ("capacity", "deferred"))
    if not any(c.lora for c in SCENARIOS[name].workload.classes) and not SCENARIOS[name].engine.kv_consumer:
        assert one("vllm:num_requests_waiting_by_reason", ("reason", "deferred")) == 0
    assert 0.0 <= one("vllm:kv_cache_usage_perc") <= 1.0
    finished = sum(
        one("vllm:request_success_total", ("finished_reason", r)) for r in ("stop", "length")
    )
    assert finished > 0, "scenario finished no request in its first two minutes"
    assert one("vllm:e2e_request_latency_seconds_count") == finished
    assert one("vllm:request_num_preemptions_sum") <= one("vllm:num_preemptions_total")
    posted = (("handler", "/v1/chat/completions"), ("method", "POST"), ("status", "2xx"))
    assert v[("http_requests_total", posted)] == finished


def test_render_duration_is_exported_from_vllm_034_only() -> None:
    """vLLM 0.34 registers its render histogram at the first rendered request (after every other family), with
    model_name and request_type and no engine label; a 0.32 engine has none."""
    assert RENDER not in scenario_text("cpu-starved")
    sim = parse(scenario_text("cpu-starved-0.34"))
    families = [n for n, _ in sim.types]
    assert families[-2:] == [RENDER, f"{RENDER}_created"]
    assert (RENDER, "histogram") in sim.types
    assert sim.helps[RENDER] == ("Time spent rendering a request, including chat templating, tokenization, and "
                                 "multimodal preprocessing.")
    assert sim.label_names[f"{RENDER}_count"] == {("model_name", "request_type")}
    assert sim.les[RENDER] == ["0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05",
                               "0.1", "0.25", "0.5", "1.0", "2.5", "5.0", "10.0", "+Inf"]
    engine = SCENARIOS["cpu-starved-0.34"].build()
    engine.advance_to(SIM_SECONDS)
    labels = (("model_name", engine.cfg.model_name), ("request_type", "chat"))
    rendered = sim.values[(f"{RENDER}_count", labels)]
    assert rendered == engine.stats.render_duration.count > 0
    # The frontend's work per request at its CPU share: the heavy template of cpu-starved, ~100 ms or more.
    assert sim.values[(f"{RENDER}_sum", labels)] / rendered > 0.05


def test_idle_exposition_matches_the_idle_capture(fixtures_dir: Path) -> None:
    """Right after start-up there are no HTTP children yet, exactly as in a real vLLM."""
    idle = parse((fixtures_dir / "snapshot-idle.txt").read_text())
    engine = SCENARIOS["healthy"].build()
    sim = parse(render_vllm(engine, start_unix=START))
    assert sim.types == idle.types
    assert sim.label_names == idle.label_names


def test_cache_config_info_carries_the_simulated_values() -> None:
    sc = SCENARIOS["kv-pressure"]
    engine = sc.build()
    sim = parse(render_vllm(engine, start_unix=START))
    [(labels, value)] = [(dict(lb), val) for (n, lb), val in sim.values.items() if n == "vllm:cache_config_info"]
    assert value == 1.0
    assert labels["num_gpu_blocks"] == str(engine.num_gpu_blocks)
    assert labels["block_size"] == str(sc.engine.block_size)
    assert labels["kv_cache_size_tokens"] == str(engine.num_gpu_blocks * sc.engine.block_size)
    assert labels["gpu_memory_utilization"] == str(sc.engine.gpu_memory_utilization)


@pytest.mark.parametrize("name", [n for n, sc in SCENARIOS.items() if sc.dcgm])
def test_dcgm_series_per_gpu(name: str) -> None:
    sc = SCENARIOS[name]
    engine = sc.build()
    engine.advance_to(30.0)
    text = render_dcgm(engine)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    util = families["DCGM_FI_DEV_GPU_UTIL"].samples
    assert len(util) == sc.engine.tensor_parallel_size * sc.engine.pipeline_parallel_size
    assert {s.labels["gpu"] for s in util} == {str(i) for i in range(len(util))}
    assert all(0 <= s.value <= 100 for s in util)
    assert "DCGM_FI_DEV_FB_USED" in families and "DCGM_FI_PROF_GR_ENGINE_ACTIVE" in families


def test_gpu_utilisation_follows_the_load() -> None:
    def util(name: str) -> float:
        engine = SCENARIOS[name].build()
        engine.advance_to(300.0)
        return engine.stats.gpu_busy_s / engine.now

    sparse, starved, healthy = util("sparse-traffic"), util("cpu-starved"), util("healthy")
    assert sparse < 0.35 and starved < 0.55 < healthy, (sparse, starved, healthy)


@pytest.mark.slow  # ten simulated minutes, twice
def test_captures_are_written_fast_and_deterministically(tmp_path: Path) -> None:
    a = write_captures("case4-peak-jitter", tmp_path / "a", duration_s=600, interval_s=15, seed=3)
    b = write_captures("case4-peak-jitter", tmp_path / "b", duration_s=600, interval_s=15, seed=3)
    c = write_captures("case4-peak-jitter", tmp_path / "c", duration_s=60, interval_s=15, seed=4)
    assert [p.name for p in a] == [f"capture-{i:04d}.txt" for i in range(40)]
    assert all(pa.read_bytes() == pb.read_bytes() for pa, pb in zip(a, b))
    assert a[3].read_bytes() != c[3].read_bytes()
    assert (tmp_path / "a" / "dcgm" / "capture-0039.txt").is_file()
    assert (tmp_path / "a" / "scenario.json").is_file() and (tmp_path / "a" / "vllm-diag.yaml").is_file()
    # Captures are taken every interval of simulated time: counters move between them.
    first, last = parse(a[0].read_text()), parse(a[-1].read_text())
    key = ("vllm:generation_tokens_total", (("engine", "0"), ("model_name", "meta-llama/Llama-3.1-8B-Instruct")))
    assert last.values[key] > first.values[key] > 0


def test_cli_lists_and_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--list"]) == 0
    assert "kv-pressure" in capsys.readouterr().out
    assert main(["--scenario", "healthy", "--out", str(tmp_path), "--duration", "60", "--interval", "15"]) == 0
    assert sorted(p.name for p in tmp_path.glob("capture-*.txt")) == [f"capture-{i:04d}.txt" for i in range(4)]
    assert main(["--scenario", "no-such-scenario", "--out", str(tmp_path)]) == 2


def test_docs_table_matches_the_registry() -> None:
    """docs/scenarios.md is the one documented table; it must say what the registry says."""
    doc = Path(__file__).resolve().parents[2] / "docs" / "scenarios.md"
    rows: dict[str, list[str]] = {}
    for line in doc.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 8 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells

    def ids(values: tuple[str, ...]) -> str:
        return ", ".join(values) if values else "—"

    assert list(rows) == list(SCENARIOS)
    for name, sc in SCENARIOS.items():
        _, _, case, verdict, symptoms, causes, also, _ = rows[name]
        e = sc.expected
        assert (case, verdict, symptoms, causes, also) == (
            sc.case, f"`{e.verdict}`", ids(e.symptoms), ids(e.causes), ids(e.also_possible)
        ), name


def test_a_decode_instance_exports_the_connector_families_vllm_registers(fixtures_dir: Path) -> None:
    """A NIXL kv_consumer: NIXL's families after the spec-decode position, the fetch-stage gauge after the
    waiting-by-reason gauge (as in a real kv_consumer's capture, HELP and labels included), with vLLM's
    bucket edges (nixl/stats.py); a plain engine exports none of them."""
    sim = parse(scenario_text("pd-decode-slow-transfer"))
    real = parse((fixtures_dir / "snapshot-kv-consumer.txt").read_text())
    fetch = "vllm:num_requests_kv_fetch_by_stage"
    assert sim.helps[fetch] == real.helps[fetch] and sim.label_names[fetch] == real.label_names[fetch]
    real_names = [n for n, _ in real.types]
    assert real_names.index(fetch) == real_names.index("vllm:num_requests_waiting_by_reason") + 1
    names = [n for n, _ in sim.types if not n.endswith("_created")]
    nixl = [n for n in names if n.startswith("vllm:nixl_")]
    assert nixl == ["vllm:nixl_xfer_time_seconds", "vllm:nixl_post_time_seconds", "vllm:nixl_bytes_transferred",
                    "vllm:nixl_num_descriptors", "vllm:nixl_num_failed_transfers_total",
                    "vllm:nixl_num_failed_notifications_total", "vllm:nixl_num_kv_expired_reqs_total"]
    assert names.index("vllm:num_requests_kv_fetch_by_stage") == names.index("vllm:num_requests_waiting_by_reason") + 1
    assert sim.les["vllm:nixl_xfer_time_seconds"][0] == "0.005" and sim.les["vllm:nixl_xfer_time_seconds"][-2] == "5.0"
    assert sim.les["vllm:nixl_bytes_transferred"][0] == "2048.0"
    assert sim.les["vllm:nixl_bytes_transferred"][-2] == "8.589934592e+09"
    plain = parse(scenario_text("healthy"))
    assert not [n for n, _ in plain.types if n.startswith(CONNECTOR_PREFIXES)]
