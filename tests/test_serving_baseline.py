"""Scenario results in the baseline entry: an optional block, older entries still read."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
from _baselines import make_entry
from _serving_data import RESULT

from pytest_roofline.gate.baseline import BaselineEntry
from pytest_roofline.schema import SchemaError

SERVER = RESULT  # a QPS search's result, with the report's series


def test_an_entry_keeps_its_scenario_results() -> None:
    entry = dataclasses.replace(make_entry(), scenarios=(SERVER,))
    data = entry.to_dict()
    assert data["scenarios"][0]["p99"] == 0.004
    assert BaselineEntry.from_dict(data) == entry
    assert BaselineEntry.from_dict(data).scenarios == (SERVER,)


def test_an_entry_without_scenarios_reads_and_writes_as_before() -> None:
    old = make_entry().to_dict()
    assert "scenarios" not in old  # older files rewrite byte for byte
    assert BaselineEntry.from_dict(old).scenarios == ()


@pytest.mark.parametrize(
    "bad",
    [{"scenario": "server"}, {**SERVER.to_dict(), "settings": {"scenario": "batch"}}, "p99"],
)
def test_a_malformed_scenario_result_is_a_schema_error(bad: object) -> None:
    with pytest.raises(SchemaError):
        BaselineEntry.from_dict({**make_entry().to_dict(), "scenarios": [bad]})


def test_the_gate_does_not_load_serving_to_read_an_entry() -> None:
    code = (
        "import sys; from pytest_roofline.gate import baseline, store; "
        "print(sorted(m for m in sys.modules if m.startswith('pytest_roofline.serving')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
