"""Language and speech models as exporters emit them: a GPT-2-style decoder (prefill, and one
decode step against a KV cache), a LLaMA-style decoder (RMSNorm, rotary, grouped-query attention,
SwiGLU; fp32 or with int4 ``com.microsoft.MatMulNBits`` projections), a T5-style encoder-decoder
(relative position bias, cross-attention) and a Whisper-like speech model (Conv1d front end,
encoder, decoder). Weights seeded random; token tables keep real vocabulary sizes so the embedding
Gather reads a few rows of a large table, as in the exports.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto

from .builder import GraphBuilder
from .layers import gelu_erf, layer_norm

__all__ = ["gpt2", "llama", "t5", "whisper_tiny"]

I64 = TensorProto.INT64


def _proj(b: GraphBuilder, x: str, fan_in: int, fan_out: int, prefix: str, bias: bool = True) -> str:
    """``x @ W (+ b)``: MatMul (+ Add), as a 3-D ``nn.Linear`` exports."""
    y = b.op("MatMul", [x, b.weight(f"{prefix}.weight", [fan_in, fan_out], fan_in=fan_in)])
    return b.op("Add", [y, b.weight(f"{prefix}.bias", [fan_out], fan_in=fan_out * 100)]) if bias else y


def _int4_proj(b: GraphBuilder, x: str, fan_in: int, fan_out: int, prefix: str, block: int = 32) -> str:
    """``com.microsoft.MatMulNBits`` (4 bits, blocks of ``block``, symmetric: zero point 8) of a
    seeded random ``fan_in x fan_out`` weight, packed as onnxruntime's model builder packs it."""
    w = b.random((fan_out, fan_in)) / math.sqrt(fan_in)
    blocks = w.reshape(fan_out, fan_in // block, block)
    scales = np.maximum(np.abs(blocks).max(axis=-1), 1e-8) / 7.0
    q = np.clip(np.rint(blocks / scales[..., None]) + 8, 0, 15).astype(np.uint8)
    packed = q[..., 0::2] | (q[..., 1::2] << 4)
    return b.op(
        "MatMulNBits",
        [x, b.tensor(f"{prefix}.qweight", packed), b.tensor(f"{prefix}.scales", scales.reshape(-1))],
        domain="com.microsoft",
        K=fan_in,
        N=fan_out,
        bits=4,
        block_size=block,
        accuracy_level=4,
    )


def _heads(b: GraphBuilder, x: str, heads: int, head_dim: int, prefix: str) -> str:
    """(1, S, heads * head_dim) -> (1, heads, S, head_dim)."""
    shape = b.const(f"{prefix}.heads_shape", [0, 0, heads, head_dim])
    return b.op("Transpose", [b.op("Reshape", [x, shape])], perm=[0, 2, 1, 3])


def _merge(b: GraphBuilder, context: str, hidden: int, prefix: str) -> str:
    """(1, heads, S, head_dim) -> (1, S, hidden)."""
    merged = b.op("Transpose", [context], perm=[0, 2, 1, 3])
    return b.op("Reshape", [merged, b.const(f"{prefix}.merged_shape", [0, 0, hidden])])


def _attend(
    b: GraphBuilder, q: str, k: str, v: str, head_dim: int | None, bias: str | None = None, keep: str = ""
) -> str:
    """softmax(q k^T [/ sqrt(head_dim)] [+ bias] [where keep]) v on (1, heads, S, head_dim)."""
    scores = b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])])
    if head_dim is not None:
        scores = b.op("Div", [scores, b.const(f"scale{head_dim}", math.sqrt(head_dim))])
    if bias is not None:
        scores = b.op("Add", [scores, bias])
    if keep:
        scores = b.op("Where", [keep, scores, b.const("mask_value", -3.4028234663852886e38)])
    return b.op("MatMul", [b.op("Softmax", [scores], axis=-1), v])


def _rms_norm(b: GraphBuilder, x: str, hidden: int, prefix: str) -> str:
    """RMSNorm as LLaMA/T5 export it: Pow, ReduceMean, Add eps, Sqrt, Div, Mul weight."""
    mean = b.op("ReduceMean", [b.op("Pow", [x, b.const("rms.two", 2.0)])], axes=[-1])
    rms = b.op("Sqrt", [b.op("Add", [mean, b.const("rms.eps", 1e-6)])])
    gamma = b.weight(f"{prefix}.weight", [hidden], fan_in=1)
    return b.op("Mul", [gamma, b.op("Div", [x, rms])])


def _gelu_tanh(b: GraphBuilder, x: str) -> str:
    """GPT-2's ``gelu_new``: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    cube = b.op("Mul", [b.op("Pow", [x, b.const("gelu.three", 3.0)]), b.const("gelu.c", 0.044715)])
    inner = b.op("Mul", [b.op("Add", [x, cube]), b.const("gelu.k", math.sqrt(2.0 / math.pi))])
    one_plus = b.op("Add", [b.op("Tanh", [inner]), b.const("gelu.one", 1.0)])
    return b.op("Mul", [b.op("Mul", [x, b.const("gelu.half", 0.5)]), one_plus])


def gpt2(
    *,
    kv_cache: bool = False,
    hidden: int = 256,
    heads: int = 4,
    layers: int = 4,
    vocab: int = 50257,
    positions: int = 1024,
) -> onnx.ModelProto:
    """GPT-2 (pre-LayerNorm, fused ``c_attn``, tanh GELU, tied LM head) at batch 1.

    Without ``kv_cache``: a prompt of ``sequence_length`` tokens, the causal mask sliced from a
    ``positions x positions`` bool table (Slice + Where, as Hugging Face's export), logits of the
    last token. With ``kv_cache``: one new token against ``past_key_values.<i>.key/value`` of
    ``past_sequence_length`` tokens, ``present.<i>.key/value`` out; positions from the cache length.
    Both share weights (the same seed).
    """
    head_dim = hidden // heads
    b = GraphBuilder("gpt2_kv" if kv_cache else "gpt2")
    seq: int | str = 1 if kv_cache else "sequence_length"
    ids = b.input("input_ids", [1, seq], I64)
    wte = b.weight("transformer.wte.weight", [vocab, hidden], fan_in=hidden)
    wpe = b.weight("transformer.wpe.weight", [positions, hidden], fan_in=hidden)
    cache_shape: list[int | str] = [1, heads, "past_sequence_length", head_dim]
    pasts = []
    if kv_cache:
        for index in range(layers):
            pasts.append(
                (
                    b.input(f"past_key_values.{index}.key", cache_shape),
                    b.input(f"past_key_values.{index}.value", cache_shape),
                )
            )
        past_len = b.op("Gather", [b.op("Shape", [pasts[0][0]]), b.const("axis2", 2)], axis=0)
        start, stop = past_len, b.op("Add", [past_len, b.const("one", 1)])
    else:
        start = b.const("zero", 0)
        stop = b.op("Gather", [b.op("Shape", [ids]), b.const("one", 1)], axis=0)
    position_ids = b.op("Range", [start, stop, b.const("one", 1)])
    x = b.op("Add", [b.op("Gather", [wte, ids], axis=0), b.op("Gather", [wpe, position_ids], axis=0)])
    keep = ""
    if not kv_cache:
        table = np.tril(np.ones((positions, positions), dtype=bool))
        b.tensor("transformer.h.attn.bias", table)
        length = b.op("Unsqueeze", [stop, b.const("axes0", [0])])
        zeros = b.const("starts00", [0, 0])
        ends = b.op("Concat", [length, length], axis=0)
        keep = b.op("Slice", ["transformer.h.attn.bias", zeros, ends, b.const("axes01", [0, 1])])
    for index in range(layers):
        prefix = f"transformer.h.{index}"
        h = layer_norm(b, x, hidden, f"{prefix}.ln_1", decomposed=False)
        qkv = _proj(b, h, hidden, 3 * hidden, f"{prefix}.attn.c_attn")
        q, k, v = b.op_multi("Split", [qkv, b.const("split3", [hidden] * 3)], 3, axis=-1)
        q, k, v = (_heads(b, t, heads, head_dim, "attn") for t in (q, k, v))
        if kv_cache:
            k = b.op("Concat", [pasts[index][0], k], axis=2)
            v = b.op("Concat", [pasts[index][1], v], axis=2)
            total: list[int | str] = [1, heads, "total_sequence_length", head_dim]
            b.output(k, f"present.{index}.key", total)
            b.output(v, f"present.{index}.value", total)
        context = _merge(b, _attend(b, q, k, v, head_dim, keep=keep), hidden, "attn")
        x = b.op("Add", [x, _proj(b, context, hidden, hidden, f"{prefix}.attn.c_proj")])
        h = layer_norm(b, x, hidden, f"{prefix}.ln_2", decomposed=False)
        h = _gelu_tanh(b, _proj(b, h, hidden, 4 * hidden, f"{prefix}.mlp.c_fc"))
        x = b.op("Add", [x, _proj(b, h, 4 * hidden, hidden, f"{prefix}.mlp.c_proj")])
    x = layer_norm(b, x, hidden, "transformer.ln_f", decomposed=False)
    last = b.op("Gather", [x, b.const("last", -1)], axis=1)
    b.output(b.op("Gemm", [last, wte], transB=1), "logits", [1, vocab])
    return b.build()


def _rotary(b: GraphBuilder, x: str, cos: str, sin: str, head_dim: int) -> str:
    """``x * cos + rotate_half(x) * sin`` with rotate_half as Slice/Neg/Concat."""
    half = head_dim // 2
    axis = b.const("rope.axis", [3])
    first = b.op("Slice", [x, b.const("rope.s0", [0]), b.const("rope.s1", [half]), axis])
    second = b.op("Slice", [x, b.const("rope.s1", [half]), b.const("rope.s2", [head_dim]), axis])
    rotated = b.op("Concat", [b.op("Neg", [second]), first], axis=-1)
    return b.op("Add", [b.op("Mul", [x, cos]), b.op("Mul", [rotated, sin])])


def _repeat_kv(b: GraphBuilder, x: str, kv_heads: int, groups: int, seq: int, head_dim: int) -> str:
    """Hugging Face ``repeat_kv``: (1, kv, S, d) -> Unsqueeze, Expand, Reshape -> (1, kv*groups, S, d)."""
    if groups == 1:
        return x
    expanded = b.op(
        "Expand",
        [
            b.op("Unsqueeze", [x, b.const("axes2", [2])]),
            b.const("repeat.shape", [1, kv_heads, groups, seq, head_dim]),
        ],
    )
    return b.op("Reshape", [expanded, b.const("repeat.merged", [1, kv_heads * groups, seq, head_dim])])


def llama(
    *,
    seq: int = 64,
    hidden: int = 256,
    heads: int = 8,
    kv_heads: int = 4,
    layers: int = 4,
    ffn: int = 704,
    vocab: int = 32000,
    int4: bool = False,
) -> onnx.ModelProto:
    """A LLaMA-style decoder over a ``seq``-token prompt at batch 1, fp32: RMSNorm, rotary embedding
    (cos/sin caches gathered at the positions), grouped-query attention with a causal mask, SwiGLU
    MLP, untied LM head on the last token. ``int4``: every projection of the layers is a
    ``com.microsoft.MatMulNBits`` (4 bits, block 32); embedding and LM head stay fp32."""
    head_dim = hidden // heads
    b = GraphBuilder("llama_int4" if int4 else "llama")
    ids = b.input("input_ids", [1, seq], I64)

    def proj(x: str, fan_in: int, fan_out: int, prefix: str) -> str:
        if int4:
            return _int4_proj(b, x, fan_in, fan_out, prefix)
        return _proj(b, x, fan_in, fan_out, prefix, bias=False)

    inv = 1.0 / (10000 ** (np.arange(0, head_dim, 2) / head_dim))
    angles = np.outer(np.arange(2048), inv)
    angles = np.concatenate([angles, angles], axis=-1).astype(np.float32)
    b.const("rope.cos_cache", np.cos(angles))
    b.const("rope.sin_cache", np.sin(angles))
    position_ids = b.op("Range", [b.const("zero", 0), b.const("seq", seq), b.const("one", 1)])
    cos = b.op("Gather", ["rope.cos_cache", position_ids], axis=0)
    sin = b.op("Gather", ["rope.sin_cache", position_ids], axis=0)
    causal = b.const("causal_mask", np.triu(np.full((seq, seq), -1e9, np.float32), 1))
    x = b.op("Gather", [b.weight("model.embed_tokens.weight", [vocab, hidden], fan_in=1), ids], axis=0)
    groups = heads // kv_heads
    for index in range(layers):
        prefix = f"model.layers.{index}"
        h = _rms_norm(b, x, hidden, f"{prefix}.input_layernorm")
        q = _heads(b, proj(h, hidden, hidden, f"{prefix}.self_attn.q_proj"), heads, head_dim, "q")
        k = _heads(
            b, proj(h, hidden, kv_heads * head_dim, f"{prefix}.self_attn.k_proj"), kv_heads, head_dim, "kv"
        )
        v = _heads(
            b, proj(h, hidden, kv_heads * head_dim, f"{prefix}.self_attn.v_proj"), kv_heads, head_dim, "kv"
        )
        q, k = _rotary(b, q, cos, sin, head_dim), _rotary(b, k, cos, sin, head_dim)
        k = _repeat_kv(b, k, kv_heads, groups, seq, head_dim)
        v = _repeat_kv(b, v, kv_heads, groups, seq, head_dim)
        context = _merge(b, _attend(b, q, k, v, head_dim, bias=causal), hidden, "attn")
        x = b.op("Add", [x, proj(context, hidden, hidden, f"{prefix}.self_attn.o_proj")])
        h = _rms_norm(b, x, hidden, f"{prefix}.post_attention_layernorm")
        gate = proj(h, hidden, ffn, f"{prefix}.mlp.gate_proj")
        silu = b.op("Mul", [gate, b.op("Sigmoid", [gate])])
        up = b.op("Mul", [silu, proj(h, hidden, ffn, f"{prefix}.mlp.up_proj")])
        x = b.op("Add", [x, proj(up, ffn, hidden, f"{prefix}.mlp.down_proj")])
    x = _rms_norm(b, x, hidden, "model.norm")
    last = b.op("Gather", [x, b.const("last", -1)], axis=1)
    head = b.weight("lm_head.weight", [vocab, hidden], fan_in=hidden)
    b.output(b.op("Gemm", [last, head], transB=1), "logits", [1, vocab])
    return b.build()


def _t5_buckets(
    q_len: int, k_len: int, bidirectional: bool, buckets: int = 32, max_distance: int = 128
) -> np.ndarray:
    """T5's ``_relative_position_bucket`` of every (query, key) pair, int64 (q_len, k_len)."""
    relative = np.arange(k_len)[None, :] - np.arange(q_len)[:, None]
    offset = np.zeros_like(relative)
    if bidirectional:
        buckets //= 2
        offset = (relative > 0).astype(np.int64) * buckets
        distance = np.abs(relative)
    else:
        distance = -np.minimum(relative, 0)
    exact = buckets // 2
    scaled = np.log(np.maximum(distance, 1) / exact) / math.log(max_distance / exact) * (buckets - exact)
    large = np.minimum(exact + scaled.astype(np.int64), buckets - 1)
    return (offset + np.where(distance < exact, distance, large)).astype(np.int64)


def t5(
    *,
    enc_seq: int = 64,
    dec_seq: int = 16,
    hidden: int = 256,
    heads: int = 4,
    layers: int = 2,
    ffn: int = 1024,
    vocab: int = 32128,
) -> onnx.ModelProto:
    """A T5-style encoder-decoder at batch 1: shared token embedding, RMSNorm, no attention scaling,
    relative position bias (Gather of a bucket table, shared across layers), ReLU MLP; the decoder
    has causal self-attention and cross-attention to the encoder; tied LM head on every position."""
    head_dim = hidden // heads
    b = GraphBuilder("t5")
    ids = b.input("input_ids", [1, enc_seq], I64)
    dec_ids = b.input("decoder_input_ids", [1, dec_seq], I64)
    shared = b.weight("shared.weight", [vocab, hidden], fan_in=1)

    def position_bias(stack: str, q_len: int, k_len: int, bidirectional: bool) -> str:
        table = b.weight(
            f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight", [32, heads], fan_in=1
        )
        index = b.const(f"{stack}.buckets", _t5_buckets(q_len, k_len, bidirectional))
        bias = b.op("Transpose", [b.op("Gather", [table, index], axis=0)], perm=[2, 0, 1])
        return b.op("Unsqueeze", [bias, b.const("axes0", [0])])

    def attention(x: str, memory: str, prefix: str, bias: str | None) -> str:
        q = _heads(b, _proj(b, x, hidden, hidden, f"{prefix}.q", bias=False), heads, head_dim, "attn")
        k = _heads(b, _proj(b, memory, hidden, hidden, f"{prefix}.k", bias=False), heads, head_dim, "attn")
        v = _heads(b, _proj(b, memory, hidden, hidden, f"{prefix}.v", bias=False), heads, head_dim, "attn")
        context = _merge(b, _attend(b, q, k, v, None, bias=bias), hidden, "attn")
        return _proj(b, context, hidden, hidden, f"{prefix}.o", bias=False)

    def mlp(x: str, prefix: str) -> str:
        h = b.op("Relu", [_proj(b, x, hidden, ffn, f"{prefix}.DenseReluDense.wi", bias=False)])
        return _proj(b, h, ffn, hidden, f"{prefix}.DenseReluDense.wo", bias=False)

    x = b.op("Gather", [shared, ids], axis=0)
    bias = position_bias("encoder", enc_seq, enc_seq, True)
    for index in range(layers):
        prefix = f"encoder.block.{index}.layer"
        h = _rms_norm(b, x, hidden, f"{prefix}.0.layer_norm")
        x = b.op("Add", [x, attention(h, h, f"{prefix}.0.SelfAttention", bias)])
        x = b.op("Add", [x, mlp(_rms_norm(b, x, hidden, f"{prefix}.1.layer_norm"), f"{prefix}.1")])
    memory = _rms_norm(b, x, hidden, "encoder.final_layer_norm")
    causal = b.const("decoder.causal_mask", np.triu(np.full((dec_seq, dec_seq), -1e9, np.float32), 1))
    self_bias = b.op("Add", [position_bias("decoder", dec_seq, dec_seq, False), causal])
    y = b.op("Gather", [shared, dec_ids], axis=0)
    for index in range(layers):
        prefix = f"decoder.block.{index}.layer"
        h = _rms_norm(b, y, hidden, f"{prefix}.0.layer_norm")
        y = b.op("Add", [y, attention(h, h, f"{prefix}.0.SelfAttention", self_bias)])
        h = _rms_norm(b, y, hidden, f"{prefix}.1.layer_norm")
        y = b.op("Add", [y, attention(h, memory, f"{prefix}.1.EncDecAttention", None)])
        y = b.op("Add", [y, mlp(_rms_norm(b, y, hidden, f"{prefix}.2.layer_norm"), f"{prefix}.2")])
    y = b.op("Mul", [_rms_norm(b, y, hidden, "decoder.final_layer_norm"), b.const("rescale", hidden**-0.5)])
    logits = b.op("MatMul", [y, b.op("Transpose", [shared], perm=[1, 0])])
    b.output(logits, "logits", [1, dec_seq, vocab])
    return b.build()


def whisper_tiny(
    *,
    frames: int = 200,
    tokens: int = 8,
    mels: int = 80,
    hidden: int = 384,
    heads: int = 6,
    layers: int = 2,
    vocab: int = 51865,
) -> onnx.ModelProto:
    """A Whisper-tiny-like speech model at batch 1 (``frames`` mel frames, 2 s at 100 frames/s):
    two Conv1d + GELU (the second strided), sinusoidal positions, pre-LN encoder layers; a decoder
    over ``tokens`` tokens with learned positions, causal self-attention, cross-attention to the
    encoder and a tied LM head on every position."""
    head_dim = hidden // heads
    b = GraphBuilder("whisper_tiny")
    features = b.input("input_features", [1, mels, frames])

    def conv1d(x: str, cin: int, stride: int, prefix: str) -> str:
        w = b.weight(f"{prefix}.weight", [hidden, cin, 3], fan_in=cin * 3)
        bias = b.weight(f"{prefix}.bias", [hidden], fan_in=hidden * 100)
        y = b.op("Conv", [x, w, bias], kernel_shape=[3], strides=[stride], pads=[1, 1])
        return gelu_erf(b, y, "gelu")

    def attention(x: str, memory: str, prefix: str, bias: str | None) -> str:
        q = _heads(b, _proj(b, x, hidden, hidden, f"{prefix}.q_proj"), heads, head_dim, "attn")
        k = _heads(
            b, _proj(b, memory, hidden, hidden, f"{prefix}.k_proj", bias=False), heads, head_dim, "attn"
        )
        v = _heads(b, _proj(b, memory, hidden, hidden, f"{prefix}.v_proj"), heads, head_dim, "attn")
        context = _merge(b, _attend(b, q, k, v, head_dim, bias=bias), hidden, "attn")
        return _proj(b, context, hidden, hidden, f"{prefix}.out_proj")

    def mlp(x: str, prefix: str) -> str:
        h = gelu_erf(b, _proj(b, x, hidden, 4 * hidden, f"{prefix}.fc1"), "gelu")
        return _proj(b, h, 4 * hidden, hidden, f"{prefix}.fc2")

    x = conv1d(conv1d(features, mels, 1, "model.encoder.conv1"), hidden, 2, "model.encoder.conv2")
    x = b.op("Transpose", [x], perm=[0, 2, 1])
    length = (frames + 1) // 2
    timescales = np.exp(-math.log(10000) / (hidden // 2 - 1) * np.arange(hidden // 2))
    scaled = np.arange(length)[:, None] * timescales[None, :]
    sinusoids = np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1).astype(np.float32)
    x = b.op("Add", [x, b.const("model.encoder.embed_positions.weight", sinusoids)])
    for index in range(layers):
        prefix = f"model.encoder.layers.{index}"
        h = layer_norm(b, x, hidden, f"{prefix}.self_attn_layer_norm", decomposed=False)
        x = b.op("Add", [x, attention(h, h, f"{prefix}.self_attn", None)])
        h = layer_norm(b, x, hidden, f"{prefix}.final_layer_norm", decomposed=False)
        x = b.op("Add", [x, mlp(h, prefix)])
    memory = layer_norm(b, x, hidden, "model.encoder.layer_norm", decomposed=False)
    ids = b.input("decoder_input_ids", [1, tokens], I64)
    table = b.weight("model.decoder.embed_tokens.weight", [vocab, hidden], fan_in=1)
    positions = b.weight("model.decoder.embed_positions.weight", [448, hidden], fan_in=1)
    used = b.op(
        "Slice", [positions, b.const("starts0", [0]), b.const("tokens", [tokens]), b.const("axes0", [0])]
    )
    y = b.op("Add", [b.op("Gather", [table, ids], axis=0), used])
    causal = b.const("decoder.causal_mask", np.triu(np.full((tokens, tokens), -1e9, np.float32), 1))
    for index in range(layers):
        prefix = f"model.decoder.layers.{index}"
        h = layer_norm(b, y, hidden, f"{prefix}.self_attn_layer_norm", decomposed=False)
        y = b.op("Add", [y, attention(h, h, f"{prefix}.self_attn", causal)])
        h = layer_norm(b, y, hidden, f"{prefix}.encoder_attn_layer_norm", decomposed=False)
        y = b.op("Add", [y, attention(h, memory, f"{prefix}.encoder_attn", None)])
        h = layer_norm(b, y, hidden, f"{prefix}.final_layer_norm", decomposed=False)
        y = b.op("Add", [y, mlp(h, prefix)])
    y = layer_norm(b, y, hidden, "model.decoder.layer_norm", decomposed=False)
    logits = b.op("MatMul", [y, b.op("Transpose", [table], perm=[1, 0])])
    b.output(logits, "logits", [1, tokens, vocab])
    return b.build()
