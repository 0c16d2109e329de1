"""An assertion on a fraction that cannot be computed fails in one line naming why (issue 21 item 5)."""

from __future__ import annotations

import json
import textwrap

import pytest

from pytest_roofline.profile import FractionUnavailable, NoFraction

PROFILES = """
from pytest_roofline.profile import Layer, ModelProfile
from pytest_roofline.roofline import DeviceRoofline
from pytest_roofline.measure.stats import LatencyStats

ROOF = DeviceRoofline(peak_flops={"float32": 1e11}, peak_bandwidth=2e10, fingerprint={})


def make(fraction, roofline=ROOF):
    conv = Layer("conv1", "Conv", ("conv1",), 1e-3, 2_000_000, 400_000, roofline_fraction=fraction)
    folded = Layer("shape", "Shape", ("shape",), 0.0, 0, 8, kind="folded")
    return ModelProfile("net", "net.onnx", "h", "onnxruntime", "1", {}, 1, {},
                        LatencyStats.from_samples([1e-3] * 5), (conv, folded), 1.0, 2_000_000, 0, 400_000,
                        roofline=roofline)
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(profiles=PROFILES)
    return pytester


def run_one(project: pytest.Pytester, body: str) -> pytest.RunResult:
    project.makepyfile(
        test_it="from profiles import make, ROOF\n\n\ndef test_it():\n" + textwrap.indent(body, "    ")
    )
    return project.runpytest()


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (
            'assert make(54.0).layer("conv1").roofline_fraction > 0.2\n',
            "roof invalid (layer 'conv1' at 5400% of its roof",
        ),
        (
            'assert make(0.5).layer("shape").roofline_fraction > 0.2\n',
            "layer not timed (folded at load time, 0 s)",
        ),
        ('assert make(None, roofline=None).layer("conv1").roofline_fraction > 0.2\n', "no device roofline"),
        (
            "assert make(54.0).efficiency > 0.1\n",
            "the efficiency of net has no roofline fraction: roof invalid",
        ),
    ],
)
def test_a_fraction_that_cannot_be_computed_fails_in_one_line_naming_why(
    project: pytest.Pytester, body: str, why: str
) -> None:
    result = run_one(project, body)
    result.assert_outcomes(failed=1)
    errors = [line for line in result.outlines if line.startswith("E ")]
    assert len(errors) == 1, result.outlines
    assert "FractionUnavailable" in errors[0] and why in errors[0]
    assert "TypeError" not in result.stdout.str()


def test_a_computable_fraction_still_compares_as_a_number(project: pytest.Pytester) -> None:
    result = run_one(
        project,
        'prof = make(0.5)\nassert prof.layer("conv1").roofline_fraction > 0.2\nassert prof.efficiency > 0.1\n'
        'assert prof.layer("conv1").roofline_fraction < 0.4\n',
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*assert 0.5 < 0.4*"])  # the usual rewritten explanation


def test_json_keeps_null_for_a_fraction_that_cannot_be_computed() -> None:
    namespace: dict[str, object] = {}
    exec(PROFILES, namespace)  # noqa: S102 - the same builder the pytester tests use
    prof = namespace["make"](54.0)  # type: ignore[operator]
    data = json.loads(json.dumps(prof.to_dict()))
    assert data["efficiency"] is None and data["layers"][0]["roofline_fraction"] == 54.0
    layer = prof.layer("conv1")
    assert isinstance(layer.roofline_fraction, NoFraction) and layer.to_dict()["roofline_fraction"] is None
    with pytest.raises(FractionUnavailable, match="roof invalid"):
        _ = layer.roofline_fraction >= 0.1
