"""Configuration: file, environment and flags, and one clear line per bad field."""

from __future__ import annotations

import subprocess
import sys

import pytest

from exporter.config import ConfigError, load_settings, redact

GOOD = """
listen: "127.0.0.1:9999"
window_seconds: 60
slo: {ttft_p95_seconds: 1.5, itl_p95_seconds: 0.05}
thresholds: {kv_usage_high: 0.95}
advisor: {enabled: true, interval: 300}
targets:
  - name: vllm-0
    url: http://127.0.0.1:8000/metrics
    scrape_interval: 5
    timeout: 3
    engine: {max_num_batched_tokens: 8192, max_num_seqs: 256, tensor_parallel_size: 1,
             pipeline_parallel_size: 1, gpu: H100, cpu_cores: 8}
    cpu: {match: "vllm serve"}
"""


def test_yaml_then_env_then_flags(tmp_path, monkeypatch):
    path = tmp_path / "c.yaml"
    path.write_text(GOOD)
    settings = load_settings(path)
    assert settings.slo.ttft.threshold_seconds == 1.5 and settings.slo.ttft.target == 0.95
    assert settings.targets[0].engine.max_num_seqs == 256
    assert settings.resolved_thresholds().kv_usage_high == 0.95
    assert settings.advisor.enabled and settings.advisor.interval == 300
    assert settings.advisor.cpu_budget_seconds == 3.0  # 1 % of a core over the interval
    monkeypatch.setenv("VLLM_DIAG_WINDOW_SECONDS", "120")
    assert load_settings(path).window_seconds == 120
    assert load_settings(path, {"window_seconds": 90}).window_seconds == 90


@pytest.mark.parametrize(
    "patch, fragment",
    [
        (("timeout: 3", "timeout: -1"), "targets.0.timeout"),
        (("timeout: 3", "timeout: 30"), "exceeds scrape_interval"),
        (("url: http://127.0.0.1:8000/metrics", "url: ftp://x"), "targets.0.url"),
        (("kv_usage_high: 0.95", "kv_usage_hihg: 0.95"), "unknown threshold 'kv_usage_hihg'"),
        (("kv_usage_high: 0.95", "kv_usage_high: 7"), "out of range"),
        (("kv_usage_high: 0.95", "advice_interval_seconds: 300"), "is gone: the advisor's interval is the setting "
                                                                  "advisor.interval"),
        (('cpu: {match: "vllm serve"}', "cpu: {pid: 1, match: x}"), "exactly one"),
        (("max_num_seqs: 256", "max_num_seqs: zero"), "targets.0.engine.max_num_seqs"),
        (("name: vllm-0", "name: vllm-*"), "patterns over the targets of --prometheus"),
        (("interval: 300", "interval: 900"), "advisor.interval 900 s: use 60-555 s (advice while a symptom lasts "
                                             "must never be older than 600 s"),
        (("interval: 300", "interval: 10"), "advisor.interval 10 s: use 60-555 s"),
        (("enabled: true", "enabled: perhaps"), "advisor.enabled"),
        (("advisor: {", "advisor: {every: 5, "), "advisor.every"),
    ],
)
def test_invalid_config_names_field_and_reason(tmp_path, patch, fragment):
    path = tmp_path / "c.yaml"
    path.write_text(GOOD.replace(*patch))
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert fragment in str(info.value)


def test_cli_exits_non_zero_with_the_field(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(GOOD.replace("timeout: 3", "timeout: -1"))
    proc = subprocess.run([sys.executable, "-m", "exporter.cli", "serve", "--config", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "targets.0.timeout" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("url", "shown", "requested"), [
    ("http://u:p@[::1]:8000/metrics", "http://***@[::1]:8000/metrics", "http://[::1]:8000/metrics"),
    ("http://u:p@[fd00::2]/metrics", "http://***@[fd00::2]/metrics", "http://[fd00::2]/metrics"),
    ("https://user:secret@vllm.internal:8443/metrics?x=1", "https://***@vllm.internal:8443/metrics?x=1",
     "https://vllm.internal:8443/metrics?x=1"),
    ("https://token@prom.example/", "https://***@prom.example/", "https://prom.example/"),
    ("http://[::1]:8000/metrics", "http://[::1]:8000/metrics", "http://[::1]:8000/metrics"),
])
def test_credentials_are_stripped_by_one_function_keeping_ipv6_brackets(url, shown, requested):
    """Logs and pages show that credentials were there (***@); a URL to request has none (they go in a header).
    An IPv6 literal keeps its brackets, else the port reads as part of the address."""
    assert redact(url) == shown
    assert redact(url, mark=None) == requested
    assert "secret" not in redact(url) and "u:p" not in redact(url)
