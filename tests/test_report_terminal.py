"""The terminal summary: remedies that fit the run, and what ``--roofline-update`` wrote."""

from __future__ import annotations

import dataclasses

from _baselines import make_entry
from _report_data import model_profile, result, results_of, run_results

from pytest_roofline.report.terminal import summary_lines


def _inconclusive(options: dict[str, str]) -> list[str]:
    profile = dataclasses.replace(model_profile(6, name="edgenet"), options=options)
    item = result(profile, "inconclusive")
    item["verdict"]["message"] = "latency: noise ±7% is above the 5% tolerance"
    return summary_lines(results_of(run_results(item)))


def test_inconclusive_remedy_never_advises_an_option_already_set():
    said = "\n".join(_inconclusive({"intra_op_threads": "1"}))
    assert "INCONCLUSIVE" in said and "measure on a quieter runner" in said
    assert "intra_op_threads=1" not in said


def test_inconclusive_remedy_advises_one_thread_where_it_is_not_set():
    said = "\n".join(_inconclusive({}))
    assert "or set --roofline-option=intra_op_threads=1" in said


def test_after_update_the_summary_says_what_was_written():
    item = result(model_profile(6, name="edgenet"), "incomparable")
    item["verdict"].update(
        message="latency: baseline recorded under other conditions (intra_op_threads 0 → 1); "
        "accept them with --roofline-update",
        reasons=["intra_op_threads 0 → 1"],
    )
    item["entry"] = None
    document = run_results(item)
    plain = results_of(document)
    entry_record = dataclasses.replace(plain.records[0], entry=make_entry())
    accepted = dataclasses.replace(plain.with_records([entry_record]), accepted=True)
    said = "\n".join(summary_lines(accepted, baseline_files=[".roofline/test_perf.json"]))
    assert "accept them with --roofline-update" not in said
    assert "ACCEPTED" in said
    assert "written as the baseline under this run's conditions" in said
    assert "intra_op_threads 0 → 1" in said
    assert "baseline written: .roofline/test_perf.json" in said
    # without --roofline-update the advice stands
    advised = summary_lines(plain.with_records([entry_record]))
    assert "accept them with --roofline-update" in "\n".join(advised)


def test_the_examples_readme_shows_the_summary_a_run_prints():
    """Issue 24 item 2: examples/README.md showed another table than a run prints, and the README
    must not show a remedy that repeats the suite's own pytest.ini setting."""
    from pathlib import Path

    from pytest_roofline.gate.verdict import STATUSES

    examples = Path(__file__).resolve().parents[1] / "examples"
    readme = (examples / "README.md").read_text(encoding="utf-8")
    assert "intra_op_threads=1" in (examples / "pytest.ini").read_text(encoding="utf-8")
    assert "or set --roofline-option=intra_op_threads=1" not in readme
    block = readme.split("Run it from the repository root:", 1)[1].split("```\n", 3)[2]
    lines = block.splitlines()
    header = next(line for line in lines if line.startswith("test "))
    assert header.split() == ["test", "model", "median", "efficiency", "verdict", "vs", "baseline"]
    rows = [line.split() for line in lines if line.startswith("test_") and " :: " not in line]
    assert rows and all(row[-2] in STATUSES and row[2].startswith("b") for row in rows)  # "edgenet b1"
