"""pytest-benchmark JSON: same keys as a real --benchmark-json file, same statistics, loadable."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _report_data import results_of, sample_run

from pytest_roofline.report import benchmark_json

pytest.importorskip("pytest_benchmark")


@pytest.mark.parametrize("n", [1, 2, 5, 6, 7, 9, 40, 61])
def test_statistics_match_pytest_benchmark(n: int) -> None:
    from pytest_benchmark.stats import Stats

    samples = list(np.random.default_rng(n).lognormal(-4, 0.3, n))
    reference = Stats()
    for sample in samples:
        reference.update(sample)
    ours = benchmark_json.benchmark_stats(samples)
    for field in Stats.fields:
        expected = getattr(reference, field)
        if isinstance(expected, str):
            assert ours[field] == expected, field
        else:
            assert ours[field] == pytest.approx(expected, rel=1e-12, abs=1e-15), field


def _keys(obj: dict) -> set[str]:
    return set(obj)


def test_keys_match_a_real_benchmark_json(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # pytest-benchmark disables itself under xdist
    pytester.makepyfile("def test_sum(benchmark):\n    benchmark(sum, range(50))\n")
    real_path = tmp_path / "real.json"
    pytester.runpytest("-p", "no:xdist", f"--benchmark-json={real_path}").assert_outcomes(passed=1)
    real = json.loads(real_path.read_text())
    ours = benchmark_json.to_benchmark_json(results_of(sample_run(6)))
    assert _keys(real) <= _keys(ours)
    assert _keys(real["machine_info"]) <= _keys(ours["machine_info"])
    assert _keys(real["commit_info"]) <= _keys(ours["commit_info"])
    real_bench, our_bench = real["benchmarks"][0], ours["benchmarks"][0]
    assert _keys(real_bench) <= _keys(our_bench)
    assert _keys(real_bench["stats"]) <= _keys(our_bench["stats"])
    # options carry the fields every pytest-benchmark version writes
    common_options = {"disable_gc", "timer", "min_rounds", "max_time", "min_time", "warmup"}
    assert common_options <= _keys(our_bench["options"])


def test_entries_carry_latency_samples_and_roofline_figures() -> None:
    run = sample_run(6)
    doc = benchmark_json.to_benchmark_json(results_of(run))
    assert len(doc["benchmarks"]) == 3
    assert len({b["fullname"] for b in doc["benchmarks"]}) == 3
    first, profile = doc["benchmarks"][0], run["results"][0]["profile"]
    assert first["stats"]["data"] == profile["latency"]["samples"]
    assert first["stats"]["median"] == pytest.approx(profile["latency"]["median"])
    assert first["extra_info"]["flops"] == profile["total"]["flops"]
    assert first["extra_info"]["efficiency"] == profile["efficiency"]
    assert first["extra_info"]["verdict"] == "regression"
    assert doc["commit_info"]["id"] == run["commit"]


def test_summary_only_profiles_still_give_stats() -> None:
    run = sample_run(4)
    latency = run["results"][0]["profile"]["latency"]
    latency["samples"] = []
    stats = benchmark_json.to_benchmark_json(results_of(run))["benchmarks"][0]["stats"]
    assert stats["median"] == latency["median"] and stats["rounds"] == latency["n"] and stats["data"] == []


def test_pytest_benchmark_compare_loads_it(tmp_path: Path) -> None:
    cli = shutil.which("pytest-benchmark", path=str(Path(sys.executable).parent))
    if cli is None:
        pytest.skip("pytest-benchmark command not installed")
    path = tmp_path / "0001_roofline.json"
    benchmark_json.write(results_of(sample_run(4)), path)
    done = subprocess.run([cli, "compare", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "test_resnet[b1][resnet-b1]" in done.stdout and "test_tiny[b1][tiny-b1]" in done.stdout
