"""The structural diff: matching by structure where names shift, blocks, costs, stored mode."""

from __future__ import annotations

import json

import pytest
from _diff_models import Variant, conv_net

from pytest_roofline import zoo
from pytest_roofline.analysis import analyze
from pytest_roofline.diff import (
    GraphDiff,
    ModelSummary,
    NodeSummary,
    diff_models,
    diff_summaries,
    match_nodes,
    summarize,
)


@pytest.mark.parametrize("scoped", [False, True])
def test_a_re_export_of_the_same_network_reads_unchanged(scoped: bool) -> None:
    diff = diff_models(conv_net(scoped=scoped, seed=1), conv_net(scoped=scoped, seed=2))
    assert diff.is_unchanged and diff.headline() == "graph unchanged"
    assert diff.blocks == () and diff.flops_change == 0.0


def test_one_block_inserted_early_reads_as_one_block_although_every_later_name_shifted() -> None:
    old, new = conv_net(), conv_net(Variant(blocks=(3, 2)))
    diff = diff_models(old, new)
    assert diff.renamed > 10  # Conv_7 is now Conv_10: names alone would say everything changed
    assert [(b.kind, b.added, b.ops) for b in diff.blocks] == [("added", 5, "Conv x2, Relu x2, Add")]
    assert not diff.changed and not diff.removed and not diff.rewired
    old_flops, new_flops = analyze(old).total.flops, analyze(new).total.flops
    assert diff.flops_change == pytest.approx(new_flops / old_flops - 1)
    assert sum(c.flops_after for c in diff.added) == new_flops - old_flops


def test_scoped_names_name_the_block_and_the_appended_block_is_the_last_one() -> None:
    diff = diff_models(conv_net(scoped=True), conv_net(Variant(blocks=(2, 3)), scoped=True))
    assert [(b.kind, b.name) for b in diff.blocks] == [("added", "stage1.2")]
    assert diff.headline().startswith("graph changed: +1 block (stage1.2), +")


def test_a_removed_block_is_one_removed_block() -> None:
    diff = diff_models(conv_net(Variant(blocks=(3, 2)), scoped=True), conv_net(scoped=True))
    assert [(b.kind, b.name, b.removed) for b in diff.blocks] == [("removed", "stage0.2", 5)]
    assert diff.flops_change is not None and diff.flops_change < 0


@pytest.mark.parametrize("scoped", [False, True])
def test_a_widened_layer_is_one_changed_block_not_an_added_and_a_removed_one(scoped: bool) -> None:
    diff = diff_models(conv_net(scoped=scoped), conv_net(Variant(widen=(1, 0)), scoped=scoped))
    assert [(b.kind, b.changed, b.added, b.removed) for b in diff.blocks] == [("changed", 3, 0, 0)]
    conv1, relu, conv2 = diff.changed
    assert conv1.what == ("output shape", "weights")
    assert conv1.before == "out 1x16x8x8; w 16x16x3x3,16" and conv1.after == "out 1x32x8x8; w 32x16x3x3,32"
    assert relu.what == ("output shape", "input shape") and conv2.what == ("input shape", "weights")
    assert conv1.flops_after == 2 * conv1.flops_before
    if scoped:
        assert diff.blocks[0].name == "stage1.0"


def test_a_block_in_float16_is_one_changed_block_with_its_casts() -> None:
    diff = diff_models(conv_net(scoped=True), conv_net(Variant(fp16=(0, 1)), scoped=True))
    assert [(b.kind, b.name, b.added, b.changed) for b in diff.blocks] == [("changed", "stage0.1", 2, 5)]
    assert {c.op_type for c in diff.added} == {"Cast"}
    assert all("dtype" in c.what for c in diff.changed)
    assert diff.flops_change == 0.0 and diff.bytes_change is not None and diff.bytes_change < 0


def test_a_replaced_op_is_one_block_of_one_removed_and_one_added_node() -> None:
    diff = diff_models(conv_net(), conv_net(Variant(sigmoid=(1, 1))))
    assert [(b.kind, b.removed, b.added, b.ops) for b in diff.blocks] == [("changed", 1, 1, "Sigmoid, Relu")]


def test_a_moved_skip_connection_is_reported_as_rewired() -> None:
    diff = diff_models(conv_net(), conv_net(Variant(skip_from_stage_input=(0, 1))))
    assert len(diff.rewired) == 1 and not diff.added and not diff.removed and not diff.changed
    assert not diff.is_unchanged and "1 node rewired" in diff.headline()


def test_stored_mode_a_diff_of_stored_summaries_equals_the_diff_of_the_models() -> None:
    old, new = conv_net(Variant(blocks=(2, 3))), conv_net(Variant(blocks=(3, 3), widen=(1, 2)))
    stored = ModelSummary.from_dict(json.loads(json.dumps(summarize(old).to_dict(packed=True))))
    from_models = diff_models(old, new)
    from_stored = diff_summaries(stored, summarize(new))
    assert from_stored.to_dict() == from_models.to_dict()
    assert GraphDiff.from_dict(json.loads(json.dumps(from_stored.to_dict()))) == from_stored
    assert [b.kind for b in from_stored.blocks] == ["added", "changed"]


def test_a_transformer_with_one_more_layer_reads_as_one_added_block() -> None:
    old = summarize(zoo.tiny_transformer(layers=2), batch=1, dims={"seq": 16})
    new = summarize(zoo.tiny_transformer(layers=3), batch=1, dims={"seq": 16})
    diff = diff_summaries(old, new)
    assert [b.kind for b in diff.blocks] == ["added"]
    assert len(diff.added) == len(new.nodes) - len(old.nodes)
    assert diff.flops_change is not None and diff.flops_change > 0.3


def _chain(scopes: list[str]) -> ModelSummary:
    """Identical Relu nodes in a chain, each in its own module scope, renumbered names."""
    nodes = tuple(
        NodeSummary(f"Relu_{i}", "Relu", scope, "0", (i,), (i + 1,), "1x4", "", 0, 32)
        for i, scope in enumerate(scopes)
    )
    return ModelSummary("chain", {"x": (1, 4)}, (("x", 0, "1x4"),), (len(scopes),), nodes)


def test_among_identical_nodes_module_scopes_decide_which_one_is_new() -> None:
    matching = match_nodes(_chain(["a", "b", "c"]), _chain(["x", "a", "b", "c"]))
    assert matching.added == (0,) and matching.pairs == ((0, 1), (1, 2), (2, 3))
    matching = match_nodes(_chain(["a", "b", "c"]), _chain(["a", "b", "c", "x"]))
    assert matching.added == (3,)
