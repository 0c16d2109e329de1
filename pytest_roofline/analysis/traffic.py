"""Bytes a kernel really touches: the ops that move less than their whole tensors.

Without a rule here a node reads every input tensor whole and writes every output whole — right
for elementwise ops, matrix products, normalizations, Concat, Transpose...  A traffic rule names
the elements a kernel touches of some inputs and outputs (by position); the others stay whole,
and a count above a tensor's size is capped at it.  :data:`BYTE_RULES` states each rule in words
(docs/cost-model.md, and the sanity guard quotes it when a layer runs above its roof).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .costs import MS, CostContext, logical_elements
from .types import TensorInfo

__all__ = ["BYTE_RULES", "Touch", "byte_rule", "lookup_traffic", "traffic"]


@dataclass(frozen=True)
class Touch:
    """Elements a kernel touches: input position -> elements read, output position -> written."""

    reads: Mapping[int, int] = field(default_factory=dict)
    writes: Mapping[int, int] = field(default_factory=dict)


TrafficRule = Callable[[CostContext], "Touch | None"]
_TRAFFIC: dict[tuple[str, str], TrafficRule] = {}

WHOLE = "every input read whole, every output written whole"
_GATHER = "the gathered elements of data (one per output element), + indices, + the output"
_SCATTER = (
    "in place when data is an intermediate only this node uses: updates + indices read, the updated "
    "elements written (read too with a reduction); else data copied: data read, output written whole, "
    "+ updates"
)
_KV = (
    "a KV buffer shared by past and present (same length): the filled part of past read, the new "
    "positions written; separate buffers: past read and present written whole (the kernel copies)"
)
BYTE_RULES: dict[str, str] = {
    **dict.fromkeys(("Gather", "GatherElements", "GatherND"), _GATHER),
    "GatherBlockQuantized": "the gathered rows of data, scales and zero points, + indices, + the output",
    "Slice": "the sliced elements of data (the output's size), + starts/ends/axes/steps, + the output",
    "Compress": "the kept elements of data (the output's size), + the condition, + the output",
    "CenterCropPad": "the input's elements inside the crop window, + the shape, + the output",
    **dict.fromkeys(("Scatter", "ScatterElements", "ScatterND", "TensorScatter"), _SCATTER),
    "EmbedLayerNormalization": (
        "one table row per looked-up token of the word, position and segment tables, + ids, gamma, beta, "
        "mask, + the outputs"
    ),
    "RotaryEmbedding": "one cos and one sin cache row per token, + the input, + the output",
    **dict.fromkeys(
        (
            "Attention",
            "MultiHeadAttention",
            "GroupQueryAttention",
            "DecoderMaskedMultiHeadAttention",
            "DecoderMaskedSelfAttention",
        ),
        f"Q, K, V, weights and masks whole; {_KV}",
    ),
}


def byte_rule(op_type: str) -> str:
    """The byte rule of ``op_type`` in words (the default rule for ops without their own)."""
    return BYTE_RULES.get(op_type, WHOLE)


def traffic(*op_types: str, domain: str = "") -> Callable[[TrafficRule], TrafficRule]:
    """Register the decorated function as the traffic rule of ``op_types`` in ``domain``."""

    def register(func: TrafficRule) -> TrafficRule:
        for op_type in op_types:
            _TRAFFIC[(domain, op_type)] = func
        return func

    return register


def lookup_traffic(domain: str, op_type: str) -> TrafficRule | None:
    """The traffic rule of an op (com.microsoft falls back to the default domain), or None."""
    domain = "" if domain in ("ai.onnx", "ai.onnx.preview") else domain
    return _TRAFFIC.get((domain, op_type)) or (_TRAFFIC.get(("", op_type)) if domain == MS else None)


# -- indexing ----------------------------------------------------------------------------------


@traffic("Gather", "GatherElements", "GatherND")
def _gather(ctx: CostContext) -> Touch:
    return Touch(reads={0: ctx.out.numel})  # each output element is one element of data


@traffic("Slice", "Compress")
def _slice(ctx: CostContext) -> Touch:
    return Touch(reads={0: ctx.out.numel})  # the kept elements (Compress reads its condition whole)


@traffic("CenterCropPad")
def _center_crop_pad(ctx: CostContext) -> Touch:
    kept = math.prod(min(a, b) for a, b in zip(ctx.tensor(0).shape, ctx.out.shape, strict=True))
    return Touch(reads={0: kept})  # a cropped axis reads its window only


@traffic("GatherBlockQuantized", domain=MS)
def _gather_block_quantized(ctx: CostContext) -> Touch:
    data = ctx.tensor(0)
    logical = logical_elements(ctx.node, 0, data)
    share = min(ctx.out.numel / logical, 1.0) if logical else 1.0
    return Touch(reads={i: math.ceil(t.numel * share) for i in (0, 2, 3) if (t := ctx.inp(i)) is not None})


@traffic("Scatter", "ScatterElements", "ScatterND")
def _scatter(ctx: CostContext) -> Touch | None:
    return _in_place_update(ctx, updates=2)


@traffic("TensorScatter")
def _tensor_scatter(ctx: CostContext) -> Touch | None:
    return _in_place_update(ctx, updates=1)


def _in_place_update(ctx: CostContext, updates: int) -> Touch | None:
    """Updates into data's own buffer when nothing else holds it; else the generic copy."""
    if 0 not in ctx.sole_use:
        return None
    written = ctx.tensor(updates).numel
    reduction = str(ctx.attr("reduction", "none")) not in ("none", "")
    return Touch(reads={0: written if reduction else 0}, writes={0: written})


# -- embeddings and rotary caches ----------------------------------------------------------------


@traffic("EmbedLayerNormalization", domain=MS)
def _embed_layer_norm(ctx: CostContext) -> Touch:
    tokens = ctx.tensor(0).numel
    positions = ctx.inp(8).numel if ctx.inp(8) is not None else tokens  # type: ignore[union-attr]
    reads = {}
    for index, lookups in ((2, tokens), (3, positions), (4, tokens)):
        table = ctx.inp(index)
        if table is not None and table.shape:
            reads[index] = lookups * table.shape[-1]
    return Touch(reads=reads)


def _tokens(x: TensorInfo) -> int:
    """Tokens of a (batch, seq, hidden) or (batch, heads, seq, head) tensor."""
    return x.shape[0] * x.shape[2] if len(x.shape) == 4 else x.shape[0] * x.shape[1]


def _cache_rows(ctx: CostContext, tokens: int, *caches: int) -> dict[int, int]:
    return {i: tokens * t.shape[-1] for i in caches if (t := ctx.inp(i)) is not None and len(t.shape) == 2}


@traffic("RotaryEmbedding", domain=MS)
def _ms_rotary(ctx: CostContext) -> Touch:
    return Touch(reads=_cache_rows(ctx, _tokens(ctx.tensor(0)), 2, 3))


@traffic("RotaryEmbedding")
def _onnx_rotary(ctx: CostContext) -> Touch | None:
    if not ctx.has_input(3):  # no position_ids: the caches are (batch, seq, rot/2), read whole
        return None
    return Touch(reads=_cache_rows(ctx, _tokens(ctx.tensor(0)), 1, 2))


# -- KV caches of decode steps -------------------------------------------------------------------


def _kv_cache(ctx: CostContext, pairs: tuple[tuple[int, int], ...], filled: int | None, new: int) -> Touch:
    """Past/present pairs that share one buffer (same length): read the filled part, write the new."""
    reads: dict[int, int] = {}
    writes: dict[int, int] = {}
    for past_index, present_index in pairs:
        past, present = ctx.inp(past_index), ctx.output(present_index)
        if past is None or present is None or len(past.shape) < 3 or past.shape != present.shape:
            continue  # separate buffers: the kernel copies past into present, both whole
        length = present.shape[-2]
        if not length:
            continue
        per_position = present.numel // length
        if filled is not None:
            reads[past_index] = min(filled, length) * per_position
        writes[present_index] = min(new, length) * per_position
    return Touch(reads=reads, writes=writes)


@traffic("Attention", "DecoderMaskedSelfAttention", domain=MS)
def _ms_attention(ctx: CostContext) -> Touch:
    return _kv_cache(ctx, ((4, 1),), ctx.value(6), ctx.tensor(0).shape[1])


@traffic("MultiHeadAttention", domain=MS)
def _multi_head_attention(ctx: CostContext) -> Touch:
    key = ctx.inp(1)
    new = ctx.tensor(0).shape[1] if key is None or len(key.shape) != 3 else key.shape[1]
    return _kv_cache(ctx, ((6, 1), (7, 2)), ctx.value(8), new)


@traffic("DecoderMaskedMultiHeadAttention", domain=MS)
def _decoder_masked_mha(ctx: CostContext) -> Touch:
    return _kv_cache(ctx, ((5, 1), (6, 2)), ctx.value(7), ctx.tensor(0).shape[1])


@traffic("GroupQueryAttention", domain=MS)
def _group_query_attention(ctx: CostContext) -> Touch:
    q = ctx.tensor(0)
    new = q.shape[1]
    total = ctx.value(6)
    touch = _kv_cache(ctx, ((3, 1), (4, 2)), None if total is None else max(total - new, 0), new)
    if not ctx.attr("do_rotary", 0):
        return touch
    return Touch(reads={**touch.reads, **_cache_rows(ctx, q.shape[0] * new, 7, 8)}, writes=touch.writes)
