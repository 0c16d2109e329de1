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
    assert "Tests: 1 failed, 2 passed. Gate verdicts: 2 pass, 1 regression." in text


def test_status_words_not_emoji_and_cells_are_safe() -> None:
    profile = model_profile(4, name="a|b<script>", layer_prefix="x|y")
    text = markdown.render(results_of(run_results(result(profile))), artifact="https://ci.example/artifact/1")
    assert "a\\|b&lt;script&gt;" in text and "<script>" not in text
    assert "x\\|y_0" in text
    assert all(ord(ch) < 0x2600 for ch in text)  # no emoji or pictographs
    assert "https://ci.example/artifact/1" in text


def test_no_results_and_no_artifact() -> None:
    text = markdown.render(results_of({"schema_version": 1, "results": [], "stale": ["k1"]}))
    assert "Tests: none. Gate verdicts: none." in text
    assert "1 baseline entr" in text and "Full report" not in text


def test_failing_tests_are_counted_and_listed_first() -> None:
    """Issue 24: "3 result(s): 3 inconclusive" for a run whose tests failed."""
    items = [
        result(model_profile(4, seed=i, name=name), "inconclusive", test=f"tests/test_m.py::test_{name}")
        for i, name in enumerate(("ok", "asserts", "layer"))
    ]
    items[1]["outcome"] = "failed"  # an assertion after the gate
    items[2]["outcome"] = "failed"  # a wrong layer name
    document = run_results(*items)
    document["outcomes"] = {
        "tests/test_m.py::test_ok": "passed",
        "tests/test_m.py::test_asserts": "failed",
        "tests/test_m.py::test_layer": "failed",
        "tests/test_m.py::test_missing_at_ref": "error",  # failed before any model was profiled
        "tests/test_m.py::test_gpu": "skipped",
    }
    text = markdown.render(results_of(document))
    assert "Tests: 2 failed, 1 error, 1 passed, 1 skipped. Gate verdicts: 3 inconclusive." in text
    listed = text.split("test(s) failed:**", 1)[1].split("\n\n", 1)[0]
    assert "`tests/test_m.py::test_missing_at_ref` error (no gate verdict)" in listed
    assert "`tests/test_m.py::test_asserts` failed (gate: INCONCLUSIVE)" in listed
    assert text.index("test(s) failed") < text.index("| Status |")  # failures before the table
    rows = [line for line in text.splitlines() if line.startswith("| INCONCLUSIVE")]
    assert [row.split("|")[3].strip() for row in rows] == ["failed", "failed", "passed"]


def test_after_update_the_summary_says_what_was_written() -> None:
    from dataclasses import replace

    from _baselines import make_entry

    item = result(model_profile(4, name="edgenet"), "incomparable")
    item["verdict"].update(
        message="latency: baseline recorded under other conditions (intra_op_threads 0 → 1); "
        "accept them with --roofline-update",
        reasons=["intra_op_threads 0 → 1"],
    )
    document = run_results(item)
    document.update(accepted=True, baselines_written=[".roofline/test_perf.json"])
    results = results_of(document)
    results = results.with_records([replace(results.records[0], entry=make_entry())])
    text = markdown.render(results)
    assert "accept them with --roofline-update" not in text
    assert "this run's figures were written to `.roofline/test_perf.json`" in text
    assert "accepted: latency: written as the baseline under this run's conditions" in text
