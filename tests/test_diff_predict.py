"""The roofline's prediction of a latency change: roofs, efficiencies, profiles, assumptions."""

from __future__ import annotations

import json
import statistics

import pytest
from _diff_models import Variant, conv_net

from pytest_roofline.api import profile_model
from pytest_roofline.diff import (
    DEFAULT_EFFICIENCY,
    NodeSummary,
    Prediction,
    diff_summaries,
    predict,
    roof_time,
    summarize,
)
from pytest_roofline.diff.match import signature
from pytest_roofline.diff.predict import efficiency_table
from pytest_roofline.measure.stats import LatencyStats
from pytest_roofline.profile import Layer, ModelProfile
from pytest_roofline.roofline import DeviceRoofline

ROOF = DeviceRoofline(peak_flops={"float32": 1e11, "float16": 5e10}, peak_bandwidth=1e10, fingerprint={})


@pytest.fixture(scope="module")
def base_profile() -> ModelProfile:
    """A real onnxruntime profile of the base network (one thread, few iterations)."""
    return profile_model(
        conv_net(),
        options={"intra_op_threads": "1"},
        roofline=ROOF,
        sessions=1,
        rounds=3,
        profile_iterations=5,
    )


def _node(flops: int, nbytes: int, shapes: str = "1x4") -> NodeSummary:
    return NodeSummary("n", "MatMul", "", "0", (0,), (1,), shapes, "", flops, nbytes)


def test_roof_time_is_the_slower_of_compute_and_memory_at_the_nodes_dtype() -> None:
    assert roof_time(_node(10**9, 10**6), ROOF) == (pytest.approx(0.01), "compute")
    assert roof_time(_node(10**6, 10**8), ROOF) == (pytest.approx(0.01), "memory")
    assert roof_time(_node(0, 10**8), ROOF) == (pytest.approx(0.01), "memory")
    assert roof_time(_node(10**9, 10**6, "float16:1x4"), ROOF) == (pytest.approx(0.02), "compute")


def test_without_a_roofline_there_is_no_prediction_and_it_says_why() -> None:
    prediction = predict(
        diff_summaries(summarize(conv_net()), summarize(conv_net(Variant(blocks=(3, 2))))), None
    )
    assert not prediction.available and prediction.fraction is None
    assert "no device roofline" in prediction.reason


def test_without_a_profile_each_node_runs_at_the_default_efficiency_of_its_bound() -> None:
    old, new = summarize(conv_net()), summarize(conv_net(Variant(blocks=(3, 2))))
    prediction = predict(diff_summaries(old, new), ROOF)

    def cost(node: NodeSummary) -> float:
        seconds, bound = roof_time(node, ROOF)
        return seconds / DEFAULT_EFFICIENCY[bound]

    added = sum(cost(n) for n in new.nodes) - sum(cost(n) for n in old.nodes)  # one block more
    assert prediction.efficiency_source == "default"
    assert prediction.time_change == pytest.approx(added)
    assert prediction.fraction == pytest.approx(added / sum(cost(n) for n in old.nodes))
    assert {n.basis for n in prediction.nodes} == {"default"}
    assert any("default efficiencies" in text for text in prediction.assumptions)


def test_an_added_block_identical_to_a_measured_one_costs_what_that_one_measured(
    base_profile: ModelProfile,
) -> None:
    old, new = summarize(conv_net()), summarize(conv_net(Variant(blocks=(3, 2))))
    diff = diff_summaries(old, new)
    prediction = predict(diff, ROOF, base_profile)
    table = efficiency_table(base_profile, old, ROOF)
    twins: dict[str, list[float]] = {}
    for index, node in enumerate(old.nodes):
        twins.setdefault(signature(old, index), []).append(table.node_time.get(node.name, 0.0))
    expected = sum(statistics.median_high(twins[signature(new, c.new_index)]) for c in diff.added)
    assert {n.basis for n in prediction.nodes} == {"twin"}
    assert prediction.time_change == pytest.approx(expected)
    assert prediction.baseline_time == pytest.approx(base_profile.kernel_time)
    assert 0.05 < (prediction.fraction or 0) < 0.6  # one of five blocks, cheap stem and head
    assert prediction.efficiency_source == "profile"
    assert any("baseline profile" in text for text in prediction.assumptions)


def test_a_widened_layer_keeps_the_efficiency_it_measured(base_profile: ModelProfile) -> None:
    old, new = summarize(conv_net()), summarize(conv_net(Variant(widen=(1, 0))))
    prediction = predict(diff_summaries(old, new), ROOF, base_profile)
    convs = [n for n in prediction.nodes if n.op_type == "Conv"]
    assert len(convs) == 2 and {n.basis for n in convs} == {"measured"}
    for conv in convs:
        assert conv.time_after / conv.time_before == pytest.approx(conv.roof_after / conv.roof_before)
    assert prediction.time_change is not None and prediction.time_change > 0


def test_a_removed_block_saves_its_measured_time(base_profile: ModelProfile) -> None:
    old_model = conv_net()
    old, new = summarize(old_model), summarize(conv_net(Variant(blocks=(1, 2))))
    diff = diff_summaries(old, new)
    prediction = predict(diff, ROOF, base_profile)
    table = efficiency_table(base_profile, old, ROOF)
    saved = sum(table.node_time.get(c.name, 0.0) for c in diff.removed)
    assert prediction.time_change == pytest.approx(-saved)
    assert all(n.time_after == 0.0 for n in prediction.nodes)


def test_the_efficiency_table_splits_fused_kernels_by_roof_time_and_charges_layout_kernels() -> None:
    summary = summarize(conv_net())
    conv, relu = summary.nodes[0], summary.nodes[1]
    layers = (
        Layer("fused", "FusedConv", (conv.name, relu.name), 1e-3, conv.flops, conv.bytes),
        Layer("reorder", "ReorderOutput", (), 2e-4, 0, 0, kind="layout", serves="fused"),
        Layer("folded", "Flatten", (summary.nodes[-3].name,), 0.0, 0, 0, kind="folded"),
    )
    profile = _profile(layers)
    table = efficiency_table(profile, summary, ROOF)
    roofs = [roof_time(conv, ROOF)[0], roof_time(relu, ROOF)[0]]
    share = roofs[0] / sum(roofs)
    assert table.node_time[conv.name] == pytest.approx(1.2e-3 * share)
    assert table.node_time[conv.name] + table.node_time[relu.name] == pytest.approx(1.2e-3)
    assert table.by_op["Conv"] == pytest.approx(roofs[0] / (1.2e-3 * share))
    assert "Flatten" in table.folded_ops and "Conv" not in table.folded_ops
    assert table.latency == pytest.approx(1.2e-3)


def test_prediction_round_trips_through_json(base_profile: ModelProfile) -> None:
    diff = diff_summaries(summarize(conv_net()), summarize(conv_net(Variant(widen=(0, 1)))))
    prediction = predict(diff, ROOF, base_profile)
    again = Prediction.from_dict(json.loads(json.dumps(prediction.to_dict())))
    assert again == prediction and again.fraction == prediction.fraction
    assert set(prediction.block_deltas()) == {0}


def test_float16_convs_on_a_slower_float16_roof_have_no_prediction(base_profile: ModelProfile) -> None:
    """onnxruntime's CPU runs them in float32 after casts, without NCHWc (docs/diff.md: +2 %
    predicted, about +40 % measured before this rule)."""
    diff = diff_summaries(summarize(conv_net()), summarize(conv_net(Variant(fp16=(0, 1)))))
    prediction = predict(diff, ROOF, base_profile)
    assert not prediction.available and "float16 nodes run in float32" in prediction.reason
    again = Prediction.from_dict(json.loads(json.dumps(prediction.to_dict())))
    assert again == prediction


def _profile(layers: tuple[Layer, ...]) -> ModelProfile:
    return ModelProfile(
        model_name="conv_net",
        model_path=None,
        model_hash="",
        backend="onnxruntime",
        backend_version="",
        options={},
        batch=1,
        input_shapes={"input": (1, 3, 16, 16)},
        latency=LatencyStats.from_samples([2e-3, 2e-3]),
        layers=layers,
        attributed_fraction=1.0,
        total_flops=0,
        total_macs=0,
        total_bytes=0,
    )
