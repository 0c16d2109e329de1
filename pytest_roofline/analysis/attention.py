"""Cost rules of attention ops: ONNX Attention, FlexAttention, LinearAttention, RotaryEmbedding and
the com.microsoft attention family, with their past (KV cache) lengths.

Every softmax attention counts, per (batch, query head, query position, key position) score,
``d_qk`` MACs for ``QK^T`` and ``d_v`` for ``softmax(.)V``, plus 5 FLOPs of softmax (and 1 for an
added mask or bias). Scores are dense: a causal mask does not halve them (kernels compute the
masked scores or pay for their blocks). The key length ``T`` of a decode step is the past length
plus the new tokens; where a graph passes it as a value (``total_sequence_length``,
``past_sequence_length`` with a shared KV buffer), the value is used when it folds, else the
``present`` output's length, else past + new.
"""

from __future__ import annotations

from .costs import MS, CostContext, OpCost, mac_cost, rule
from .types import TensorInfo

__all__ = ["ROTARY_FLOPS", "SOFTMAX_FLOPS", "scores_cost"]

SOFTMAX_FLOPS = 5  # max, sub, exp, sum, div per score
ROTARY_FLOPS = 3  # x*cos - rot(x)*sin per rotated element


def scores_cost(
    batch: int, heads: int, q_seq: int, kv_seq: int, d_qk: int, d_v: int, extra_per_score: int = 0
) -> OpCost:
    """``QK^T``, softmax and ``softmax(.)V`` of ``batch x heads x q_seq x kv_seq`` scores."""
    scores = batch * heads * q_seq * kv_seq
    return mac_cost(scores * (d_qk + d_v), (SOFTMAX_FLOPS + extra_per_score) * scores)


def _plus(a: OpCost, macs: int = 0, flops: int = 0) -> OpCost:
    return OpCost(flops=a.flops + 2 * macs + flops, macs=a.macs + macs)


def _attr_heads(ctx: CostContext, name: str = "num_heads") -> int:
    heads = int(ctx.attr(name, 0))
    if heads <= 0:
        raise ValueError(f"{ctx.node.op_type} needs a positive {name}")
    return heads


# -- ONNX ----------------------------------------------------------------------------------------


@rule("Attention")
def _onnx_attention(ctx: CostContext) -> OpCost:
    """ONNX ``Attention`` (opset 23; the dynamo exporter's ``scaled_dot_product_attention``).

    Q, K, V are 4-D (batch, heads, seq, head_size) or 3-D (batch, seq, heads * head_size) with
    ``q_num_heads``/``kv_num_heads``; ``past_key`` (input 4) extends the key sequence.
    """
    q, k, v = ctx.tensor(0), ctx.tensor(1), ctx.tensor(2)
    if len(q.shape) == 4:
        batch, heads, q_seq, head_size = q.shape
        kv_seq, v_head = k.shape[2], v.shape[3]
    else:
        batch, q_seq, q_hidden = q.shape
        heads = int(ctx.attr("q_num_heads"))
        kv_heads = int(ctx.attr("kv_num_heads", heads))
        head_size, kv_seq, v_head = q_hidden // heads, k.shape[1], v.shape[2] // kv_heads
    past = ctx.inp(4)
    kv_seq += past.shape[2] if past is not None else 0
    return scores_cost(batch, heads, q_seq, kv_seq, head_size, v_head, int(ctx.has_input(3)))


@rule("FlexAttention")
def _flex_attention(ctx: CostContext) -> OpCost:
    """``FlexAttention`` (ai.onnx.preview): scaled scores; its score_mod/prob_mod nodes cost apart."""
    q, k, v = ctx.tensor(0), ctx.tensor(1), ctx.tensor(2)
    batch, heads, q_seq, head_size = q.shape
    return scores_cost(batch, heads, q_seq, k.shape[2], head_size, v.shape[3], extra_per_score=1)


@rule("LinearAttention")
@rule("LinearAttention", domain=MS)
def _linear_attention(ctx: CostContext) -> OpCost:
    """Recurrent linear attention: per token, a ``d_k x d_v`` state update per KV head and a read per
    query head (``delta`` rules read the state once more, ``gated`` ones decay it)."""
    q, v = ctx.tensor(0), ctx.tensor(2)
    q_heads, kv_heads = _attr_heads(ctx, "q_num_heads"), _attr_heads(ctx, "kv_num_heads")
    batch, tokens = q.shape[0], q.shape[1]
    d_k, d_v = q.shape[2] // q_heads, v.shape[2] // kv_heads
    state = batch * tokens * kv_heads * d_k * d_v  # one element of every state per token and KV head
    rule_name = str(ctx.attr("update_rule", "gated_delta"))  # the schema's default
    macs = state + batch * tokens * q_heads * d_k * d_v  # k ⊗ v into the state, q^T S out of it
    flops = batch * tokens * q_heads * d_v  # scale
    if "delta" in rule_name:
        macs += state  # S^T k
        flops += 2 * batch * tokens * kv_heads * d_v  # v - S^T k, times beta
    if "gated" in rule_name:
        flops += state + batch * tokens * kv_heads * d_k  # exp(g) * S (and the exp)
    return mac_cost(macs, flops)


def _rotary(ctx: CostContext, x: TensorInfo, cos: TensorInfo | None) -> OpCost:
    """3 FLOPs per rotated element; ``rotary_embedding_dim`` (or the cos cache) bounds the rotated part."""
    heads = int(ctx.attr("num_heads", 0))
    head_size = x.shape[-1] if len(x.shape) == 4 else (x.shape[-1] // heads if heads else 0)
    rotary = int(ctx.attr("rotary_embedding_dim", 0)) or (2 * cos.shape[-1] if cos is not None else head_size)
    if not head_size:
        head_size = rotary
    fraction_num, fraction_den = min(rotary, head_size), head_size
    return OpCost(flops=ROTARY_FLOPS * x.numel * fraction_num // fraction_den)


@rule("RotaryEmbedding")
def _onnx_rotary(ctx: CostContext) -> OpCost:
    """ONNX ``RotaryEmbedding`` (opset 23): X, cos_cache, sin_cache, position_ids."""
    return _rotary(ctx, ctx.tensor(0), ctx.inp(1))


# -- com.microsoft -------------------------------------------------------------------------------


def _fused_attention(ctx: CostContext, past_index: int, past_length_index: int) -> OpCost:
    """com.microsoft ``Attention`` family: input projection, then attention over past + new keys.

    ``past`` is (2, batch, heads, past_len, head_size); ``present`` (output 1) holds past + new.
    With ``past_present_share_buffer`` the buffers have the maximum length and
    ``past_sequence_length`` says how much of it is filled.
    """
    x, w = ctx.tensor(0), ctx.tensor(1)
    batch, seq, hidden_in = x.shape
    projected = w.shape[1]
    q_hidden, k_hidden, v_hidden = ctx.attr("qkv_hidden_sizes") or [projected // 3] * 3
    heads = _attr_heads(ctx)
    kv_seq = seq
    past, present = ctx.inp(past_index), ctx.output(1)
    filled = ctx.value(past_length_index)
    if filled is not None and (
        ctx.attr("past_present_share_buffer", 0) or ctx.node.op_type.startswith("Decoder")
    ):
        kv_seq = filled + seq
    elif present is not None and len(present.shape) == 5:
        kv_seq = present.shape[3]
    elif past is not None and len(past.shape) == 5:
        kv_seq = past.shape[3] + seq
    projection = batch * seq * hidden_in * projected
    bias = batch * seq * projected if ctx.has_input(2) else 0
    cost = scores_cost(batch, heads, seq, kv_seq, q_hidden // heads, v_hidden // heads)
    return _plus(cost, macs=projection, flops=bias)


@rule("Attention", "DecoderMaskedSelfAttention", domain=MS, values=(6,))
def _ms_attention(ctx: CostContext) -> OpCost:
    return _fused_attention(ctx, past_index=4, past_length_index=6)


@rule("QAttention", domain=MS)
def _q_attention(ctx: CostContext) -> OpCost:
    return _fused_attention(ctx, past_index=8, past_length_index=-1)


def _key_length(
    ctx: CostContext, key: TensorInfo | None, new: int, past_index: int, length_index: int
) -> int:
    """Keys attended: a 4-D key is complete (cross attention); else past + new."""
    if key is not None and len(key.shape) == 4:
        return key.shape[2]
    filled = ctx.value(length_index)
    if filled is not None:
        return filled + new
    present = ctx.output(1)
    if present is not None and len(present.shape) == 4:
        return present.shape[2]
    past = ctx.inp(past_index)
    return new + (past.shape[2] if past is not None and len(past.shape) == 4 else 0)


@rule("MultiHeadAttention", domain=MS, values=(8,))
def _multi_head_attention(ctx: CostContext) -> OpCost:
    """com.microsoft ``MultiHeadAttention``: projected Q/K/V (3-D, or packed 5-D), past_key/past_value."""
    q, k = ctx.tensor(0), ctx.inp(1)
    heads = _attr_heads(ctx)
    batch, seq = q.shape[0], q.shape[1]
    if len(q.shape) == 5:  # packed QKV: (B, S, N, 3, H)
        d_qk = d_v = q.shape[2] * q.shape[4]
        new = seq
    elif k is not None and len(k.shape) == 5:  # packed KV: (B, L, N, 2, H)
        d_qk, d_v, new = q.shape[-1], k.shape[2] * k.shape[4], k.shape[1]
    else:
        d_qk, d_v = q.shape[-1], ctx.out.shape[-1]
        new = seq if k is None else (k.shape[1] if len(k.shape) == 3 else k.shape[2])
    kv_seq = _key_length(ctx, k, new, past_index=6, length_index=8)
    bias = ctx.inp(3)
    bias_flops = batch * seq * bias.numel if bias is not None else 0
    cost = scores_cost(batch, heads, seq, kv_seq, d_qk // heads, d_v // heads, int(ctx.has_input(5)))
    return _plus(cost, flops=bias_flops)


@rule("DecoderMaskedMultiHeadAttention", domain=MS, values=(7,))
def _decoder_masked_mha(ctx: CostContext) -> OpCost:
    """One decode step against a KV buffer filled up to ``past_sequence_length``."""
    q, k = ctx.tensor(0), ctx.inp(1)
    heads = _attr_heads(ctx)
    batch, seq, d_qk = q.shape[0], q.shape[1], q.shape[-1]
    kv_seq = _key_length(ctx, k, seq, past_index=5, length_index=7)
    return scores_cost(batch, heads, seq, kv_seq, d_qk // heads, ctx.out.shape[-1] // heads)


@rule("GroupQueryAttention", domain=MS, values=(6,))
def _group_query_attention(ctx: CostContext) -> OpCost:
    """Grouped-query attention with a KV cache: ``total_sequence_length`` keys per query.

    The key length is ``total_sequence_length`` when it folds, else ``present_key``'s length,
    else past + new; ``local_window_size`` caps it; ``do_rotary`` adds the rotation of Q and K.
    """
    q = ctx.tensor(0)
    heads, kv_heads = _attr_heads(ctx), _attr_heads(ctx, "kv_num_heads")
    batch, seq, hidden = q.shape
    packed = not ctx.has_input(1)
    head_size = hidden // (heads + 2 * kv_heads) if packed else hidden // heads
    total = ctx.value(6)
    if total is None:
        total = _key_length(ctx, None, seq, past_index=3, length_index=-1)
    window = int(ctx.attr("local_window_size", -1))
    if window > 0:
        total = min(total, window)
    cost = scores_cost(batch, heads, seq, total, head_size, head_size, int(ctx.has_input(10)))
    rotary = ROTARY_FLOPS * batch * seq * (heads + kv_heads) * head_size if ctx.attr("do_rotary", 0) else 0
    return _plus(cost, flops=rotary)


@rule("PackedAttention", domain=MS)
def _packed_attention(ctx: CostContext) -> OpCost:
    """Padding-free Attention: tokens packed; (batch, seq) from ``token_offset`` (scores dense per batch)."""
    x, w, offsets = ctx.tensor(0), ctx.tensor(1), ctx.tensor(3)
    tokens, hidden_in = x.shape
    projected = w.shape[1]
    q_hidden, _, v_hidden = ctx.attr("qkv_hidden_sizes") or [projected // 3] * 3
    heads = _attr_heads(ctx)
    batch, seq = offsets.shape
    cost = scores_cost(batch, heads, seq, seq, q_hidden // heads, v_hidden // heads)
    return _plus(cost, macs=tokens * hidden_in * projected, flops=tokens * projected)


@rule("PackedMultiHeadAttention", domain=MS)
def _packed_mha(ctx: CostContext) -> OpCost:
    q, offsets = ctx.tensor(0), ctx.tensor(4)
    heads = _attr_heads(ctx)
    batch, seq = offsets.shape
    d = q.shape[1] * q.shape[3] if len(q.shape) == 4 else q.shape[-1]  # packed (T, N, 3, H) or (T, D)
    return scores_cost(batch, heads, seq, seq, d // heads, d // heads)


@rule("RotaryEmbedding", domain=MS)
def _ms_rotary(ctx: CostContext) -> OpCost:
    """com.microsoft ``RotaryEmbedding``: input, position_ids, cos_cache, sin_cache."""
    return _rotary(ctx, ctx.tensor(0), ctx.inp(2))
