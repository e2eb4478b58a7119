"""``--shard i/N`` owns the targets a real Prometheus' ``hashmod`` relabelling gives shard i.

A Prometheus with 40 static targets computes ``hashmod`` of each address with modulus 4 in its
relabelling; its target list (no scrape needs to succeed) says which shard each one falls in, and
:func:`exporter.promsource.batch.shard_of` must agree for every one of them.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from exporter.promsource.batch import NARROWING_MAX_CHARS, _narrowing, _narrowings, owned, shard_of
from exporter.promsource.flags import shard_spec
from exporter.promsource.rebuild import TargetKey
from exporter.promsource.settings import PrometheusSource
from tests.promsource.conftest import PROMTOOL_BIN, prometheus

SHARDS = 4
# Loopback only: Prometheus may try to scrape them (nothing listens on those ports).
ADDRESSES = [f"127.0.{i // 8}.{i % 8 + 1}:{9 + i}" for i in range(40)] + ["localhost:9", "localhost:10"]


@pytest.mark.prometheus
def test_shard_of_agrees_with_prometheus_hashmod(tmp_path: Path) -> None:
    config = {
        "global": {"scrape_interval": "1h"},
        "scrape_configs": [{
            "job_name": "shards",
            "static_configs": [{"targets": ADDRESSES}],
            "relabel_configs": [
                {"source_labels": ["__address__"], "modulus": SHARDS, "target_label": "__tmp_hash",
                 "action": "hashmod"},
                {"source_labels": ["__tmp_hash"], "target_label": "shard", "action": "replace"},
            ],
        }],
    }
    (tmp_path / "tsdb").mkdir()
    with prometheus(tmp_path / "tsdb", yaml.safe_dump(config)) as url:
        deadline = time.monotonic() + 30
        while True:
            with urllib.request.urlopen(f"{url}/api/v1/targets", timeout=5) as response:
                active = json.loads(response.read())["data"]["activeTargets"]
            if len(active) == len(ADDRESSES) or time.monotonic() > deadline:
                break
            time.sleep(0.3)
    theirs = {t["labels"]["instance"]: int(t["labels"]["shard"]) for t in active}
    assert len(theirs) == len(ADDRESSES)
    ours = {address: shard_of(TargetKey((("instance", address),)), SHARDS) for address in ADDRESSES}
    assert ours == theirs
    assert len(set(ours.values())) == SHARDS  # the sample reaches every shard: the test can fail


def test_owned_splits_keys_into_disjoint_shards() -> None:
    keys = [TargetKey((("instance", f"h{i}"), ("pod", f"p{i}"))) for i in range(200)]
    parts = [owned(keys, shard, SHARDS) for shard in range(SHARDS)]
    assert sorted(k.labels for part in parts for k in part) == sorted(k.labels for k in keys)
    assert all(parts)  # 200 keys over 4 shards: none empty
    assert owned(keys, 0, 1) == keys


def test_shard_flag_and_setting_refuse_an_index_out_of_range() -> None:
    assert shard_spec("2/4") == (2, 4)
    for bad in ("4/4", "1", "a/b", "0/0", "-1/2"):
        with pytest.raises(Exception, match="I/N"):
            shard_spec(bad)
    with pytest.raises(ValueError, match="numbered 0..1"):
        PrometheusSource(url="http://127.0.0.1:9", shard=2, shards=2)


DOCS = Path(__file__).resolve().parents[2] / "docs" / "prometheus-source.md"


def documented_shard_alert() -> dict:
    """The alert docs/prometheus-source.md gives for engines no shard diagnoses, as written there."""
    text = DOCS.read_text(encoding="utf-8")
    block = text.split("- alert: VllmDiagShardTargetsUndiagnosed", 1)[1].split("```", 1)[0]
    rules = yaml.safe_load("- alert: VllmDiagShardTargetsUndiagnosed" + block)
    assert isinstance(rules, list) and len(rules) == 1
    return rules[0]


@pytest.mark.prometheus
def test_documented_alert_reports_the_engines_of_a_killed_shard(tmp_path: Path) -> None:
    """Two shards of a 10-engine fleet; shard 1 (4 engines) dies at 5 m: promtool evaluates the documented
    alert, which stays quiet while both run and then fires with the 4 engines nobody diagnoses."""
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "shards",
                                                                     "rules": [documented_shard_alert()]}]}))
    fleet, diagnosed = "vllm_diag_prometheus_fleet_targets", "vllm_diag_prometheus_targets_diagnosed"
    tests = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": f'{fleet}{{instance="shard-0"}}', "values": "10x30"},
                {"series": f'{diagnosed}{{instance="shard-0"}}', "values": "6x30"},
                {"series": f'{fleet}{{instance="shard-1"}}', "values": "10x5"},  # killed after 5 m
                {"series": f'{diagnosed}{{instance="shard-1"}}', "values": "4x5"},
            ],
            "alert_rule_test": [
                {"eval_time": "8m", "alertname": "VllmDiagShardTargetsUndiagnosed", "exp_alerts": []},
                {"eval_time": "25m", "alertname": "VllmDiagShardTargetsUndiagnosed", "exp_alerts": [{
                    "exp_labels": {},
                    "exp_annotations": {"summary": "4 vLLM engines are diagnosed by no shard (a central diagnoser "
                                                   "shard is down or failing)"},
                }]},
            ],
        }],
    }
    (tmp_path / "tests.yml").write_text(yaml.safe_dump(tests))
    done = subprocess.run([PROMTOOL_BIN, "test", "rules", "tests.yml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_shard_asks_the_store_for_its_own_targets_only() -> None:
    source = PrometheusSource(url="http://127.0.0.1:9", shard=1, shards=2)
    keys = [TargetKey((("instance", "10.0.0.1:8000"),)), TargetKey((("instance", "pod a"),))]
    # RE2 literals: dots escaped, a space left alone (RE2 refuses "\ "), backslashes doubled for PromQL.
    assert _narrowing(source, keys, everything=False) == 'instance=~"10\\\\.0\\\\.0\\\\.1:8000|pod a"'
    assert _narrowing(source, keys, everything=True) == ""
    two_labels = PrometheusSource(url="http://127.0.0.1:9", target_labels=("namespace", "pod"))
    assert _narrowing(two_labels, keys, everything=False) == ""  # read all, keep its own client-side


def test_a_large_shard_names_its_targets_in_matchers_a_store_accepts() -> None:
    """VictoriaMetrics refuses queries over 16 KB: 2,500 targets' names go in several matchers, each under the
    cap, and together they name every target once."""
    source = PrometheusSource(url="http://127.0.0.1:9", shard=0, shards=4)
    keys = [TargetKey((("instance", f"vllm-{i:05d}.example:8000"),)) for i in range(2500)]
    matchers = _narrowings(source, keys, everything=False)
    assert len(matchers) > 1 and all(len(m) <= NARROWING_MAX_CHARS + 20 for m in matchers)
    named = [name for m in matchers for name in m.removeprefix('instance=~"').removesuffix('"').split("|")]
    assert named == [_narrowing(source, [key], everything=False).removeprefix('instance=~"').removesuffix('"')
                     for key in keys]
