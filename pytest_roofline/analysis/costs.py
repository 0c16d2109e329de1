"""Per-operator cost rules: FLOPs and MACs from resolved shapes.

A rule is one small decorated function::

    @rule("Conv", "ConvInteger")
    def _conv(ctx: CostContext) -> OpCost:
        return mac_cost(ctx.out.numel * prod(ctx.inp(1).shape[1:]))

Conventions (see docs/cost-model.md): FLOPs = 2 x MACs for multiply-accumulate work, plus one
FLOP per output element for a bias add; elementwise ops count FLOPs per output element from
:data:`ELEMENTWISE_FLOPS`; data movement costs 0 FLOPs but its bytes; views cost nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import onnx

from .types import TensorInfo

__all__ = [
    "CONTAINER_OPS",
    "ELEMENTWISE_FLOPS",
    "MAC_OP_TYPES",
    "VIEW_OPS",
    "CostContext",
    "OpCost",
    "lookup",
    "mac_cost",
    "prod",
    "rule",
]

MS = "com.microsoft"

#: Ops that only reinterpret metadata: 0 FLOPs and 0 bytes (no data moves).
VIEW_OPS = frozenset(
    {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Shape", "Size", "Constant", "Dropout"}
)

#: Op types whose MACs the published model tables count (torchvision: conv + linear [+ matmul]).
MAC_OP_TYPES = frozenset(
    {
        "Conv",
        "ConvTranspose",
        "ConvInteger",
        "QLinearConv",
        "FusedConv",
        "Gemm",
        "MatMul",
        "MatMulInteger",
        "QLinearMatMul",
        "FusedMatMul",
        "FusedGemm",
        "Einsum",
        "QGemm",
        "MatMulNBits",
        "MatMulIntegerToFloat",
        "DynamicQuantizeMatMul",
        "Attention",
        "MultiHeadAttention",  # fused QK^T and softmax(.)V matmuls (+ projections)
    }
)

#: FLOPs per output element of elementwise ops (composite activations count their primitives).
# fmt: off
ELEMENTWISE_FLOPS: dict[str, int] = {
    **dict.fromkeys(
        (
            "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean",
            "And", "Or", "Xor", "Not", "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual",
            "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot",
            "Abs", "Neg", "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Sqrt", "Exp", "Log",
            "Erf", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh",
            "Atanh", "Tanh", "IsNaN", "IsInf", "Relu", "Clip", "ThresholdedRelu", "BiasAdd",
        ),
        1,
    ),
    **dict.fromkeys(("LeakyRelu", "PRelu", "Shrink"), 2),
    **dict.fromkeys(("Sigmoid", "HardSigmoid", "Softplus", "Softsign", "Elu"), 3),
    **dict.fromkeys(("HardSwish", "Selu", "Celu", "Swish", "QuickGelu"), 4),
    **dict.fromkeys(("Gelu", "Mish"), 5),
    "FastGelu": 8,  # tanh approximation: 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3)))
    "BiasGelu": 6,  # bias add + erf Gelu
}

#: Ops with no arithmetic: 0 FLOPs, bytes of every input and output.
DATA_MOVEMENT_OPS = (
    "Transpose", "Concat", "Split", "Slice", "Gather", "GatherElements", "GatherND", "Scatter",
    "ScatterElements", "ScatterND", "Pad", "Tile", "Expand", "Where", "Cast", "CastLike",
    "DepthToSpace", "SpaceToDepth", "Compress", "NonZero", "OneHot", "ConstantOfShape", "Range",
    "Trilu", "ReverseSequence", "EyeLike", "SplitToSequence", "ConcatFromSequence",
    "SequenceConstruct", "SequenceAt",
)
# fmt: on

#: Control-flow containers: their subgraph nodes carry the cost, the container itself none.
CONTAINER_OPS = frozenset({"If", "Loop", "Scan"})

NORM_FLOPS = 7  # mean, sub, square, var-sum, normalize, scale, shift per element (as MegEngine)


@dataclass(frozen=True)
class OpCost:
    """The arithmetic of one node; MACs only for multiply-accumulate work."""

    flops: int
    macs: int = 0


def mac_cost(macs: int, extra_flops: int = 0) -> OpCost:
    """Cost of ``macs`` multiply-accumulates (2 FLOPs each) plus ``extra_flops`` (bias, activation)."""
    return OpCost(flops=2 * macs + extra_flops, macs=macs)


def prod(values: Any) -> int:
    """Product of integers (1 for an empty sequence)."""
    return math.prod(int(v) for v in values)


@dataclass(frozen=True)
class CostContext:
    """What a rule sees: the node, its resolved tensors (None for omitted inputs), attributes."""

    node: onnx.NodeProto
    inputs: tuple[TensorInfo | None, ...]
    outputs: tuple[TensorInfo | None, ...]
    attrs: dict[str, Any] = field(default_factory=dict)

    def inp(self, index: int) -> TensorInfo | None:
        """Input ``index``, or None when absent."""
        return self.inputs[index] if index < len(self.inputs) else None

    @property
    def out(self) -> TensorInfo:
        """The first output."""
        return self.outputs[0]  # type: ignore[return-value]

    def attr(self, name: str, default: Any = None) -> Any:
        """Attribute value, or ``default`` when the node does not set it."""
        return self.attrs.get(name, default)

    def has_input(self, index: int) -> bool:
        """Whether optional input ``index`` is given."""
        return self.inp(index) is not None


Rule = Callable[[CostContext], OpCost]
_RULES: dict[tuple[str, str], Rule] = {}


def rule(*op_types: str, domain: str = "") -> Callable[[Rule], Rule]:
    """Register the decorated function as the cost rule of ``op_types`` in ``domain``."""

    def register(func: Rule) -> Rule:
        for op_type in op_types:
            _RULES[(domain, op_type)] = func
        return func

    return register


def lookup(domain: str, op_type: str) -> Rule | None:
    """The rule for an op, falling back from com.microsoft to the default domain."""
    domain = "" if domain == "ai.onnx" else domain
    return _RULES.get((domain, op_type)) or (_RULES.get(("", op_type)) if domain == MS else None)


# -- convolution -------------------------------------------------------------------------------


def _conv_like(ctx: CostContext, weight: int, bias: int | None, activation: int = 0) -> OpCost:
    w = ctx.inp(weight)
    macs = ctx.out.numel * prod(w.shape[1:])  # Cout*spatial_out * (Cin/g * prod(kernel))
    extra = ctx.out.numel if bias is not None and ctx.has_input(bias) else 0
    return mac_cost(macs, extra + activation * ctx.out.numel)


@rule("Conv")
def _conv(ctx: CostContext) -> OpCost:
    return _conv_like(ctx, 1, 2)


@rule("ConvInteger")
def _conv_integer(ctx: CostContext) -> OpCost:
    return _conv_like(ctx, 1, None)


@rule("QLinearConv")
def _qlinear_conv(ctx: CostContext) -> OpCost:
    return _conv_like(ctx, 3, 8)


@rule("FusedConv", domain=MS)
def _fused_conv(ctx: CostContext) -> OpCost:
    return _conv_like(ctx, 1, 2, activation=ELEMENTWISE_FLOPS.get(ctx.attr("activation", ""), 1))


@rule("ConvTranspose")
def _conv_transpose(ctx: CostContext) -> OpCost:
    # every input element meets every weight of its group: X.numel * (Cout/g * prod(kernel))
    macs = ctx.inp(0).numel * prod(ctx.inp(1).shape[1:])
    return mac_cost(macs, ctx.out.numel if ctx.has_input(2) else 0)


# -- matrix products ---------------------------------------------------------------------------


def _matmul_k(a: TensorInfo, trans: bool = False) -> int:
    if len(a.shape) == 1:
        return a.shape[0]
    return a.shape[-2] if trans else a.shape[-1]


@rule("MatMul", "MatMulInteger")
def _matmul(ctx: CostContext) -> OpCost:
    return mac_cost(ctx.out.numel * _matmul_k(ctx.inp(0)))


@rule("QLinearMatMul")
def _qlinear_matmul(ctx: CostContext) -> OpCost:
    return mac_cost(ctx.out.numel * _matmul_k(ctx.inp(0)))


@rule("FusedMatMul", domain=MS)
def _fused_matmul(ctx: CostContext) -> OpCost:
    k = _matmul_k(ctx.inp(0), bool(ctx.attr("transA", 0)))
    scale = ctx.out.numel if ctx.attr("alpha", 1.0) != 1.0 else 0
    return mac_cost(ctx.out.numel * k, scale)


def _gemm_like(ctx: CostContext, bias: int, activation: int = 0) -> OpCost:
    a = ctx.inp(0)
    k = a.shape[0] if ctx.attr("transA", 0) else a.shape[1]
    bias_flops = ctx.out.numel if ctx.has_input(bias) and ctx.attr("beta", 1.0) != 0.0 else 0
    return mac_cost(ctx.out.numel * k, bias_flops + activation * ctx.out.numel)


@rule("Gemm")
def _gemm(ctx: CostContext) -> OpCost:
    return _gemm_like(ctx, 2)


@rule("FusedGemm", domain=MS)
def _fused_gemm(ctx: CostContext) -> OpCost:
    return _gemm_like(ctx, 2, activation=ELEMENTWISE_FLOPS.get(ctx.attr("activation", ""), 1))


@rule("QGemm", domain=MS)
def _qgemm(ctx: CostContext) -> OpCost:
    return _gemm_like(ctx, 6)


@rule("MatMulIntegerToFloat", "DynamicQuantizeMatMul", domain=MS)
def _matmul_to_float(ctx: CostContext) -> OpCost:
    return mac_cost(ctx.out.numel * _matmul_k(ctx.inp(0)), ctx.out.numel)  # + rescale


@rule("MatMulNBits", domain=MS)
def _matmul_nbits(ctx: CostContext) -> OpCost:
    return mac_cost(ctx.out.numel * int(ctx.attr("K")), ctx.out.numel)  # + dequantize per output


@rule("Einsum")
def _einsum(ctx: CostContext) -> OpCost:
    extents = einsum_extents(ctx.attr("equation"), [t.shape for t in ctx.inputs if t is not None])
    total = prod(extents.values())
    operands = sum(t is not None for t in ctx.inputs)
    if operands < 2:  # a reduction or transpose of one operand: one add per element visited
        return OpCost(flops=total)
    return mac_cost(total * (operands - 1))


def einsum_extents(equation: str, shapes: list[tuple[int, ...]]) -> dict[str, int]:
    """Extent of every index of an Einsum ``equation`` (ellipsis dims become indices ``0``..``9``)."""
    lhs = equation.replace(" ", "").split("->")[0]
    extents: dict[str, int] = {}
    for term, shape in zip(lhs.split(","), shapes, strict=False):
        if "..." in term:
            head, tail = term.split("...")
            n_ell = len(shape) - len(head) - len(tail)
            term = head + "".join(str(9 - i) for i in range(n_ell))[::-1] + tail
        for label, size in zip(term, shape, strict=False):
            extents[label] = max(extents.get(label, 1), int(size))
    return extents


# -- recurrent ---------------------------------------------------------------------------------

_RNN_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_RNN_POINTWISE = {"RNN": 1, "GRU": 8, "LSTM": 9}  # activations and state updates per hidden unit


@rule("RNN", "GRU", "LSTM")
def _rnn(ctx: CostContext) -> OpCost:
    op = ctx.node.op_type
    x, w, r = ctx.inp(0), ctx.inp(1), ctx.inp(2)
    seq, batch = (x.shape[1], x.shape[0]) if ctx.attr("layout", 0) else (x.shape[0], x.shape[1])
    directions, gates_hidden, input_size = w.shape
    hidden = r.shape[-1]
    steps = directions * seq * batch
    macs = steps * gates_hidden * (input_size + hidden)
    bias = steps * 2 * gates_hidden if ctx.has_input(3) else 0
    peepholes = steps * 3 * hidden * 2 if op == "LSTM" and ctx.has_input(7) else 0
    return mac_cost(macs, bias + peepholes + steps * hidden * _RNN_POINTWISE[op])


# -- attention (com.microsoft) -----------------------------------------------------------------


@rule("Attention", domain=MS)
def _attention(ctx: CostContext) -> OpCost:
    x, w = ctx.inp(0), ctx.inp(1)
    batch, seq, hidden_in = x.shape
    projected = w.shape[1]
    qkv = ctx.attr("qkv_hidden_sizes") or [projected // 3] * 3
    proj = batch * seq * hidden_in * projected
    scores = batch * seq * seq * qkv[0] + batch * seq * seq * qkv[2]  # QK^T and softmax(.)V
    heads = ctx.attr("num_heads", 1)
    softmax = 5 * batch * heads * seq * seq
    return mac_cost(proj + scores, (batch * seq * projected if ctx.has_input(2) else 0) + softmax)


@rule("Attention")
def _onnx_attention(ctx: CostContext) -> OpCost:
    """ONNX ``Attention`` (opset 23; the dynamo exporter's ``scaled_dot_product_attention``).

    Q, K, V are 4-D (batch, heads, seq, head_size) or 3-D (batch, seq, heads * head_size) with
    ``q_num_heads``/``kv_num_heads``; ``past_key`` (input 4) extends the key sequence.
    """
    q, k, v = ctx.inp(0), ctx.inp(1), ctx.inp(2)
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
    scores = batch * heads * q_seq * kv_seq
    mask = scores if ctx.has_input(3) else 0
    return mac_cost(scores * (head_size + v_head), 5 * scores + mask)


@rule("MultiHeadAttention", domain=MS)
def _multi_head_attention(ctx: CostContext) -> OpCost:
    q, k = ctx.inp(0), ctx.inp(1)
    batch, seq = q.shape[0], q.shape[1]
    heads = ctx.attr("num_heads", 1)
    if k is None or len(q.shape) == 5:  # packed QKV: query is (B, S, N, 3, H)
        kv_seq, d_qk, d_v = seq, q.shape[2] * q.shape[-1], q.shape[2] * q.shape[-1]
    else:
        kv_seq = k.shape[1] if len(k.shape) == 3 else k.shape[2]
        d_qk, d_v = q.shape[-1], ctx.out.shape[-1]
    macs = batch * seq * kv_seq * (d_qk + d_v)
    return mac_cost(macs, 5 * batch * heads * seq * kv_seq)


# -- normalization -----------------------------------------------------------------------------


@rule("BatchNormalization")
def _batch_norm(ctx: CostContext) -> OpCost:
    return OpCost(flops=2 * ctx.out.numel)  # inference: y = x * scale' + shift'


@rule("LayerNormalization", "GroupNormalization", "InstanceNormalization", "MeanVarianceNormalization")
def _norm(ctx: CostContext) -> OpCost:
    return OpCost(flops=NORM_FLOPS * ctx.inp(0).numel)


@rule("RMSNormalization", "SimplifiedLayerNormalization")
def _rms_norm(ctx: CostContext) -> OpCost:
    return OpCost(flops=4 * ctx.inp(0).numel)  # square, sum, normalize, scale


@rule("SkipLayerNormalization", "SkipSimplifiedLayerNormalization", domain=MS)
def _skip_layer_norm(ctx: CostContext) -> OpCost:
    n = ctx.inp(0).numel
    per_elem = 1 + (1 if ctx.has_input(4) else 0)
    norm = 4 if ctx.node.op_type.startswith("SkipSimplified") else NORM_FLOPS
    return OpCost(flops=(per_elem + norm) * n)


@rule("LRN")
def _lrn(ctx: CostContext) -> OpCost:
    return OpCost(flops=(ctx.attr("size", 1) + 4) * ctx.out.numel)


@rule("Softmax", "LogSoftmax")
def _softmax(ctx: CostContext) -> OpCost:
    return OpCost(flops=5 * ctx.out.numel)  # max, sub, exp, sum, div (or log-sub)


# -- elementwise -------------------------------------------------------------------------------


@rule(*ELEMENTWISE_FLOPS)
def _elementwise(ctx: CostContext) -> OpCost:
    op = ctx.node.op_type
    operands = sum(t is not None for t in ctx.inputs)
    per_elem = ELEMENTWISE_FLOPS[op]
    if op in ("Sum", "Mean", "Max", "Min"):  # variadic: n-1 ops per element (+1 divide for Mean)
        per_elem = max(operands - 1, 1) + (op == "Mean")
    return OpCost(flops=per_elem * ctx.out.numel)


@rule("QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu", domain=MS)
def _qlinear_elementwise(ctx: CostContext) -> OpCost:
    return OpCost(flops=5 * ctx.out.numel)  # dequantize operands, op, requantize


@rule("DequantizeLinear")
def _dequantize(ctx: CostContext) -> OpCost:
    return OpCost(flops=2 * ctx.out.numel)  # (x - zero_point) * scale


@rule("QuantizeLinear")
def _quantize(ctx: CostContext) -> OpCost:
    return OpCost(flops=3 * ctx.out.numel)  # x / scale, round, + zero_point (saturate)


@rule("DynamicQuantizeLinear")
def _dynamic_quantize(ctx: CostContext) -> OpCost:
    return OpCost(flops=5 * ctx.inp(0).numel)  # min, max, then quantize


# -- pooling, reductions, resize ---------------------------------------------------------------


@rule("MaxPool", "AveragePool", "LpPool")
def _pool(ctx: CostContext) -> OpCost:
    window = prod(ctx.attr("kernel_shape", []))
    per_window = {"MaxPool": window, "AveragePool": window + 1, "LpPool": 2 * window + 1}
    return OpCost(flops=per_window[ctx.node.op_type] * ctx.out.numel)


@rule("GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool")
def _global_pool(ctx: CostContext) -> OpCost:
    extra = {"GlobalMaxPool": 0, "GlobalAveragePool": 1, "GlobalLpPool": 1}[ctx.node.op_type]
    factor = 2 if ctx.node.op_type == "GlobalLpPool" else 1
    return OpCost(flops=factor * ctx.inp(0).numel + extra * ctx.out.numel)


# fmt: off
_REDUCE_PER_INPUT = {
    "ReduceSum": 1, "ReduceMean": 1, "ReduceMax": 1, "ReduceMin": 1, "ReduceProd": 1,
    "ReduceL1": 2, "ReduceL2": 2, "ReduceSumSquare": 2, "ReduceLogSum": 1, "ReduceLogSumExp": 3,
    "ArgMax": 1, "ArgMin": 1, "TopK": 1, "CumSum": 1, "Hardmax": 1,
}
# fmt: on
_REDUCE_PER_OUTPUT = {"ReduceMean": 1, "ReduceL2": 1, "ReduceLogSum": 1, "ReduceLogSumExp": 1}


@rule(*_REDUCE_PER_INPUT)
def _reduce(ctx: CostContext) -> OpCost:
    op = ctx.node.op_type
    return OpCost(
        flops=_REDUCE_PER_INPUT[op] * ctx.inp(0).numel + _REDUCE_PER_OUTPUT.get(op, 0) * ctx.out.numel
    )


@rule("Resize", "Upsample")
def _resize(ctx: CostContext) -> OpCost:
    mode = ctx.attr("mode", "nearest")
    if mode == "nearest":
        return OpCost(flops=0)
    resized = sum(a != b for a, b in zip(ctx.inp(0).shape, ctx.out.shape, strict=False)) or 1
    taps = (4 if mode == "cubic" else 2) ** resized
    return OpCost(flops=2 * taps * ctx.out.numel)  # one multiply-add per tap


# -- zero-FLOP ops -----------------------------------------------------------------------------


@rule(*DATA_MOVEMENT_OPS, *VIEW_OPS, *CONTAINER_OPS)
def _no_arithmetic(ctx: CostContext) -> OpCost:
    return OpCost(flops=0)
