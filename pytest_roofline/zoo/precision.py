"""fp16 models as ``model.half()`` exports look: weights and activations in float16.

onnxruntime's CPU provider has no fp16 kernel for most of their ops, so it runs them in fp32 and
inserts the Casts between (``InsertedPrecisionFreeCast_*``), reorders NCHWc convolutions and
inlines a fp16 Softmax from its function body (ReduceMax/Sub/Exp/ReduceSum/Div): the models for
checking that all of that is attributed to the ONNX nodes it serves.  Weights seeded random.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["convnext_fp16", "llama_fp16"]

H = TensorProto.FLOAT16


class _Half:
    """Nodes named like the legacy exporter (``/stage/Op``), fp16 initializers."""

    def __init__(self, seed: int = 0) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.rng = np.random.default_rng(seed)

    def weight(self, name: str, *shape: int, scale: float | None = None) -> str:
        std = scale if scale is not None else 1.0 / math.sqrt(shape[-1] if len(shape) > 1 else 1)
        array = (self.rng.standard_normal(shape) * std).astype(np.float16)
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def const(self, name: str, value: float | list[int], dtype: type = np.float16) -> str:
        if any(init.name == name for init in self.inits):
            return name
        kind = np.int64 if isinstance(value, list) else dtype
        self.inits.append(numpy_helper.from_array(np.array(value, kind), name))
        return name

    def op(self, op_type: str, inputs: list[str], name: str, **attrs: Any) -> str:
        output = f"{name}_output_0"
        self.nodes.append(helper.make_node(op_type, inputs, [output], name=name, **attrs))
        return output

    def linear(self, x: str, fan_in: int, fan_out: int, name: str, bias: bool = True) -> str:
        y = self.op("MatMul", [x, self.weight(f"{name}.weight", fan_in, fan_out)], f"/{name}/MatMul")
        if bias:
            y = self.op("Add", [y, self.weight(f"{name}.bias", fan_out, scale=0.01)], f"/{name}/Add")
        return y

    def model(
        self, name: str, inputs: list[onnx.ValueInfoProto], output: str, shape: list[int]
    ) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, name, inputs, [helper.make_tensor_value_info(output, H, shape)], self.inits
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        return model


def convnext_fp16(batch: int = 1, size: int = 32, dims: tuple[int, ...] = (16, 32)) -> onnx.ModelProto:
    """ConvNeXt-like: 4x4 patchify stem, per stage a block (depthwise 7x7 conv, channels-last
    LayerNorm, 1x1 convs as MatMul+Add around an erf GELU, layer scale, residual), 2x2
    downsampling convs, global pooling and a Gemm head."""
    b = _Half()

    def conv(x: str, cin: int, cout: int, k: int, stride: int, groups: int, name: str) -> str:
        w = b.weight(
            f"{name}.weight", cout, cin // groups, k, k, scale=1.0 / math.sqrt(cin // groups * k * k)
        )
        bias = b.weight(f"{name}.bias", cout, scale=0.01)
        pads = [k // 2] * 4 if stride == 1 else [0] * 4
        return b.op(
            "Conv",
            [x, w, bias],
            f"/{name}/Conv",
            kernel_shape=[k, k],
            strides=[stride] * 2,
            pads=pads,
            group=groups,
        )

    def channels_last_norm(x: str, dim: int, name: str) -> str:
        gamma, beta = b.weight(f"{name}.weight", dim, scale=1.0), b.weight(f"{name}.bias", dim, scale=0.01)
        return b.op(
            "LayerNormalization", [x, gamma, beta], f"/{name}/LayerNormalization", axis=-1, epsilon=1e-6
        )

    def block(x: str, dim: int, name: str) -> str:
        y = b.op(
            "Transpose",
            [conv(x, dim, dim, 7, 1, dim, f"{name}.dwconv")],
            f"/{name}/Transpose",
            perm=[0, 2, 3, 1],
        )
        y = b.linear(channels_last_norm(y, dim, f"{name}.norm"), dim, 4 * dim, f"{name}.pwconv1")
        erf = b.op(
            "Erf",
            [b.op("Div", [y, b.const(f"{name}.sqrt2", math.sqrt(2))], f"/{name}/act/Div")],
            f"/{name}/act/Erf",
        )
        one_plus = b.op("Add", [erf, b.const(f"{name}.one", 1.0)], f"/{name}/act/Add")
        y = b.op(
            "Mul",
            [b.op("Mul", [y, one_plus], f"/{name}/act/Mul"), b.const(f"{name}.half", 0.5)],
            f"/{name}/act/Mul_1",
        )
        y = b.linear(y, 4 * dim, dim, f"{name}.pwconv2")
        y = b.op("Mul", [b.weight(f"{name}.gamma", dim, scale=0.1), y], f"/{name}/Mul")
        return b.op(
            "Add", [x, b.op("Transpose", [y], f"/{name}/Transpose_1", perm=[0, 3, 1, 2])], f"/{name}/Add"
        )

    x = conv("pixels", 3, dims[0], 4, 4, 1, "stem")
    for stage, dim in enumerate(dims):
        if stage:
            x = conv(x, dims[stage - 1], dim, 2, 2, 1, f"down{stage}")
        x = block(x, dim, f"stage{stage}")
    pooled = b.op("ReduceMean", [x], "/pool/ReduceMean", axes=[2, 3], keepdims=0)
    head = b.weight("head.weight", 10, dims[-1])
    logits = b.op("Gemm", [pooled, head, b.weight("head.bias", 10, scale=0.01)], "/head/Gemm", transB=1)
    inputs = [helper.make_tensor_value_info("pixels", H, [batch, 3, size, size])]
    return b.model("convnext_fp16", inputs, logits, [batch, 10])


def llama_fp16(
    seq: int = 16, hidden: int = 64, heads: int = 4, kv_heads: int = 2, layers: int = 1, vocab: int = 128
) -> onnx.ModelProto:
    """Llama-like decoder over a prompt: RMSNorm, rotary embedding, grouped-query attention with
    an additive causal mask and a fp16 Softmax, SwiGLU MLP, tied LM head."""
    b = _Half()
    head_dim = hidden // heads
    inv = 1.0 / (10000 ** (np.arange(0, head_dim, 2) / head_dim))
    angles = np.outer(np.arange(seq), inv)
    angles = np.concatenate([angles, angles], axis=-1)
    b.inits += [
        numpy_helper.from_array(np.cos(angles).astype(np.float16), "rope.cos"),
        numpy_helper.from_array(np.sin(angles).astype(np.float16), "rope.sin"),
        numpy_helper.from_array(np.triu(np.full((seq, seq), -1e4), 1).astype(np.float16), "causal_mask"),
    ]

    def rms_norm(x: str, name: str) -> str:
        x32 = b.op("Cast", [x], f"/{name}/Cast", to=TensorProto.FLOAT)
        mean = b.op("ReduceMean", [b.op("Mul", [x32, x32], f"/{name}/Mul")], f"/{name}/ReduceMean", axes=[-1])
        eps = b.op("Add", [mean, b.const(f"{name}.eps", 1e-6, np.float32)], f"/{name}/Add")
        scale = b.op("Reciprocal", [b.op("Sqrt", [eps], f"/{name}/Sqrt")], f"/{name}/Reciprocal")
        normed = b.op("Cast", [b.op("Mul", [x32, scale], f"/{name}/Mul_1")], f"/{name}/Cast_1", to=H)
        return b.op("Mul", [b.weight(f"{name}.weight", hidden, scale=1.0), normed], f"/{name}/Mul_2")

    def heads_of(x: str, count: int, name: str) -> str:
        shape = b.const(f"{name}.shape", [1, seq, count, head_dim])
        return b.op(
            "Transpose",
            [b.op("Reshape", [x, shape], f"/{name}/Reshape")],
            f"/{name}/Transpose",
            perm=[0, 2, 1, 3],
        )

    def rotary(x: str, name: str) -> str:
        half = head_dim // 2
        first = b.op(
            "Slice",
            [x, b.const(f"{name}.s0", [0]), b.const(f"{name}.s1", [half]), b.const(f"{name}.ax", [3])],
            f"/{name}/Slice",
        )
        second = b.op(
            "Slice",
            [x, b.const(f"{name}.s1", [half]), b.const(f"{name}.s2", [head_dim]), b.const(f"{name}.ax", [3])],
            f"/{name}/Slice_1",
        )
        rotated = b.op("Concat", [b.op("Neg", [second], f"/{name}/Neg"), first], f"/{name}/Concat", axis=-1)
        return b.op(
            "Add",
            [
                b.op("Mul", [x, "rope.cos"], f"/{name}/Mul"),
                b.op("Mul", [rotated, "rope.sin"], f"/{name}/Mul_1"),
            ],
            f"/{name}/Add",
        )

    def layer(x: str, name: str) -> str:
        h = rms_norm(x, f"{name}.input_norm")
        q = rotary(
            heads_of(b.linear(h, hidden, hidden, f"{name}.q", bias=False), heads, f"{name}.q"),
            f"{name}.q_rot",
        )
        k = rotary(
            heads_of(
                b.linear(h, hidden, kv_heads * head_dim, f"{name}.k", bias=False), kv_heads, f"{name}.k"
            ),
            f"{name}.k_rot",
        )
        v = heads_of(b.linear(h, hidden, kv_heads * head_dim, f"{name}.v", bias=False), kv_heads, f"{name}.v")
        repeats = b.const(f"{name}.repeats", [1, heads // kv_heads, 1, 1])
        k = b.op("Tile", [k, repeats], f"/{name}/k/Tile")  # kv heads repeated (as a grouped layout)
        v = b.op("Tile", [v, repeats], f"/{name}/v/Tile")
        kt = b.op("Transpose", [k], f"/{name}/k/Transpose_1", perm=[0, 1, 3, 2])
        scores = b.op(
            "Div",
            [b.op("MatMul", [q, kt], f"/{name}/attn/MatMul"), b.const(f"{name}.scale", math.sqrt(head_dim))],
            f"/{name}/attn/Div",
        )
        probs = b.op(
            "Softmax",
            [b.op("Add", [scores, "causal_mask"], f"/{name}/attn/Add")],
            f"/{name}/attn/Softmax",
            axis=-1,
        )
        context = b.op(
            "Transpose",
            [b.op("MatMul", [probs, v], f"/{name}/attn/MatMul_1")],
            f"/{name}/attn/Transpose",
            perm=[0, 2, 1, 3],
        )
        merged = b.op(
            "Reshape", [context, b.const(f"{name}.merged", [1, seq, hidden])], f"/{name}/attn/Reshape"
        )
        x = b.op("Add", [x, b.linear(merged, hidden, hidden, f"{name}.o", bias=False)], f"/{name}/Add")
        h = rms_norm(x, f"{name}.post_norm")
        gate = b.linear(h, hidden, 2 * hidden, f"{name}.gate", bias=False)
        silu = b.op("Mul", [gate, b.op("Sigmoid", [gate], f"/{name}/mlp/Sigmoid")], f"/{name}/mlp/Mul")
        up = b.op(
            "Mul", [silu, b.linear(h, hidden, 2 * hidden, f"{name}.up", bias=False)], f"/{name}/mlp/Mul_1"
        )
        return b.op(
            "Add", [x, b.linear(up, 2 * hidden, hidden, f"{name}.down", bias=False)], f"/{name}/Add_1"
        )

    x = b.op("Gather", [b.weight("embed.weight", vocab, hidden, scale=1.0), "input_ids"], "/embed/Gather")
    for index in range(layers):
        x = layer(x, f"layers.{index}")
    logits = b.linear(rms_norm(x, "norm"), hidden, vocab, "lm_head", bias=False)
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq])]
    return b.model("llama_fp16", inputs, logits, [1, seq, vocab])
