"""Markdown summary for $GITHUB_STEP_SUMMARY and PR comments."""

from __future__ import annotations

from _report_data import model_profile, result, results_of, run_results, sample_run

from pytest_roofline.report import markdown


def test_verdict_table_regressions_first_with_worst_layers() -> None:
    run = sample_run(12)
    run["artifacts"] = {"html": "roofline-report.html"}
    text = markdown.render(results_of(run))
    rows = [line for line in text.splitlines() if line.startswith("| ") and "tests/" in line]
    assert [row.split("|")[1].strip() for row in rows] == ["REGRESSION", "PASS", "PASS"]
    first = rows[0]
    median = run["results"][0]["profile"]["latency"]["median"]
    assert f"{median * 1e3:.3g} ms" in first and "1.120x" in first and "1.090x – 1.160x" in first
    assert "regressed: latency 1.12x the baseline" in text
    assert "| layer_0/conv |" in text and "1.500x" in text  # the one layer that grew
    assert text.rstrip().endswith("roofline-report.html")
    assert "3 result(s): 2 pass, 1 regression." in text


def test_status_words_not_emoji_and_cells_are_safe() -> None:
    profile = model_profile(4, name="a|b<script>", layer_prefix="x|y")
    text = markdown.render(results_of(run_results(result(profile))), artifact="https://ci.example/artifact/1")
    assert "a\\|b&lt;script&gt;" in text and "<script>" not in text
    assert "x\\|y_0" in text
    assert all(ord(ch) < 0x2600 for ch in text)  # no emoji or pictographs
    assert "https://ci.example/artifact/1" in text


def test_no_results_and_no_artifact() -> None:
    text = markdown.render(results_of({"schema_version": 1, "results": [], "stale": ["k1"]}))
    assert "0 result(s): none." in text and "1 baseline entr" in text and "Full report" not in text
