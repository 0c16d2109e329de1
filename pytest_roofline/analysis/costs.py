"""Per-operator cost rules: FLOPs and MACs from resolved shapes.

A rule is one small decorated function::

    @rule("Conv", "ConvInteger")
    def _conv(ctx: CostContext) -> OpCost:
        return mac_cost(ctx.out.numel * prod(ctx.tensor(1).shape[1:]))

Conventions (see docs/cost-model.md): FLOPs = 2 x MACs for multiply-accumulate work, plus one
FLOP per output element for a bias add; elementwise ops count FLOPs per output element from
:data:`ELEMENTWISE_FLOPS`; data movement costs 0 FLOPs but its bytes; views cost nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from .types import TensorInfo
from .views import VIEW_OPS

__all__ = [
    "CONTAINER_OPS",
    "ELEMENTWISE_FLOPS",
    "MAC_OP_TYPES",
    "VIEW_OPS",
    "CostContext",
    "OpCost",
    "logical_elements",
    "lookup",
    "mac_cost",
    "prod",
    "rnn_cost",
    "rule",
    "wanted_values",
]

MS = "com.microsoft"


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
        "GroupQueryAttention",
        "DecoderMaskedMultiHeadAttention",
        "DecoderMaskedSelfAttention",
        "PackedAttention",
        "PackedMultiHeadAttention",
        "QAttention",
        "FlexAttention",
        "LinearAttention",
        "DeformConv",
        "NhwcConv",
        "NhwcFusedConv",
        "GemmFastGelu",
        "MatMulBnb4",
        "MatMulInteger16",
        "TransposeMatMul",
        "FusedMatMulActivation",
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
    "SequenceConstruct", "SequenceAt", "SequenceInsert", "SequenceErase", "SequenceLength",
    "SequenceEmpty", "Optional", "OptionalHasElement", "OptionalGetElement", "CenterCropPad",
    "BitCast", "TensorScatter", "MaxUnpool", "Multinomial",
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
    values: dict[int, np.ndarray] = field(default_factory=dict)  # known values of the inputs asked for
    sole_use: frozenset[int] = frozenset()  # inputs no other node, graph output or caller holds

    def tensor(self, index: int) -> TensorInfo:
        """Input ``index``, which the rule needs (a missing one makes the node uncosted)."""
        info = self.inp(index)
        if info is None:
            raise ValueError(f"input {index} of {self.node.op_type} is absent or unresolved")
        return info

    def value(self, index: int) -> int | None:
        """Input ``index`` as an integer when its value is known (see ``rule(values=...)``)."""
        value = self.values.get(index)
        if value is None or value.size != 1:
            return None
        return int(value.reshape(()).item())

    def output(self, index: int) -> TensorInfo | None:
        """Output ``index``, or None when absent."""
        return self.outputs[index] if index < len(self.outputs) else None

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
_VALUE_INPUTS: dict[tuple[str, str], tuple[int, ...]] = {}
_DOMAIN_ALIASES = {"ai.onnx": "", "ai.onnx.preview": ""}


def rule(*op_types: str, domain: str = "", values: tuple[int, ...] = ()) -> Callable[[Rule], Rule]:
    """Register the decorated function as the cost rule of ``op_types`` in ``domain``.

    ``values`` lists inputs whose values the rule reads through :meth:`CostContext.value` when
    they fold without input data (a past sequence length, ``total_sequence_length``).
    """

    def register(func: Rule) -> Rule:
        for op_type in op_types:
            _RULES[(domain, op_type)] = func
            if values:
                _VALUE_INPUTS[(domain, op_type)] = values
        return func

    return register


def lookup(domain: str, op_type: str) -> Rule | None:
    """The rule for an op, falling back from com.microsoft to the default domain."""
    domain = _DOMAIN_ALIASES.get(domain, domain)
    return _RULES.get((domain, op_type)) or (_RULES.get(("", op_type)) if domain == MS else None)


def wanted_values(node: onnx.NodeProto) -> tuple[str, ...]:
    """The input tensors of ``node`` whose values its rule reads."""
    domain = _DOMAIN_ALIASES.get(node.domain, node.domain)
    positions = _VALUE_INPUTS.get((domain, node.op_type), ())
    return tuple(node.input[i] for i in positions if i < len(node.input) and node.input[i])


def logical_elements(node: onnx.NodeProto, index: int, tensor: TensorInfo) -> int:
    """Elements a weight input holds: packed 4-bit weights count elements, not bytes.

    ``MatMulNBits``/``MatMulBnb4`` store ``N x K`` weights (and MatMulNBits' zero points) as
    bytes holding two (or 8/bits) elements; ``GatherBlockQuantized`` does the same with ``bits``.
    ONNX ``INT4``/``UINT4`` tensors already declare their element count.
    """
    if node.domain != MS or node.op_type not in ("MatMulNBits", "MatMulBnb4", "GatherBlockQuantized"):
        return tensor.numel
    attrs = {a.name: a.i for a in node.attribute if a.type == onnx.AttributeProto.INT}
    if node.op_type == "GatherBlockQuantized":
        bits = attrs.get("bits", 4)
        packed = index in (0, 2) and tensor.dtype == "uint8" and bits < 8
        return tensor.numel * (8 // bits) if packed else tensor.numel
    n, k = attrs.get("N", 0), attrs.get("K", 0)
    if index == 1 and n and k:
        return n * k
    if node.op_type == "MatMulNBits" and index == 3 and tensor.dtype == "uint8" and attrs.get("block_size"):
        return n * -(-k // attrs["block_size"])
    return tensor.numel


# -- convolution -------------------------------------------------------------------------------


def _conv_like(ctx: CostContext, weight: int, bias: int | None, activation: int = 0) -> OpCost:
    w = ctx.tensor(weight)
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
    macs = ctx.tensor(0).numel * prod(ctx.tensor(1).shape[1:])
    return mac_cost(macs, ctx.out.numel if ctx.has_input(2) else 0)


# -- matrix products ---------------------------------------------------------------------------


def _matmul_k(a: TensorInfo, trans: bool = False) -> int:
    if len(a.shape) == 1:
        return a.shape[0]
    return a.shape[-2] if trans else a.shape[-1]


@rule("MatMul", "MatMulInteger")
def _matmul(ctx: CostContext) -> OpCost:
    return mac_cost(ctx.out.numel * _matmul_k(ctx.tensor(0)))


@rule("QLinearMatMul")
def _qlinear_matmul(ctx: CostContext) -> OpCost:
    return mac_cost(ctx.out.numel * _matmul_k(ctx.tensor(0)))


@rule("FusedMatMul", domain=MS)
def _fused_matmul(ctx: CostContext) -> OpCost:
    k = _matmul_k(ctx.tensor(0), bool(ctx.attr("transA", 0)))
    scale = ctx.out.numel if ctx.attr("alpha", 1.0) != 1.0 else 0
    return mac_cost(ctx.out.numel * k, scale)


def _gemm_like(ctx: CostContext, bias: int, activation: int = 0) -> OpCost:
    a = ctx.tensor(0)
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
    return mac_cost(ctx.out.numel * _matmul_k(ctx.tensor(0)), ctx.out.numel)  # + rescale


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
    x, w, r = ctx.tensor(0), ctx.tensor(1), ctx.tensor(2)
    seq, batch = (x.shape[1], x.shape[0]) if ctx.attr("layout", 0) else (x.shape[0], x.shape[1])
    directions, gates_hidden, input_size = w.shape
    peepholes = op == "LSTM" and ctx.has_input(7)
    return rnn_cost(op, directions * seq * batch, input_size, r.shape[-1], ctx.has_input(3), peepholes)


def rnn_cost(
    op: str, steps: int, input_size: int, hidden: int, bias: bool, peepholes: bool = False
) -> OpCost:
    """``steps`` (directions x seq x batch) cell updates of an RNN, GRU or LSTM cell."""
    gates_hidden = _RNN_GATES[op] * hidden
    macs = steps * gates_hidden * (input_size + hidden)
    bias_flops = steps * 2 * gates_hidden if bias else 0
    peephole_flops = steps * 3 * hidden * 2 if peepholes else 0
    return mac_cost(macs, bias_flops + peephole_flops + steps * hidden * _RNN_POINTWISE[op])


# -- normalization -----------------------------------------------------------------------------


@rule("BatchNormalization")
def _batch_norm(ctx: CostContext) -> OpCost:
    return OpCost(flops=2 * ctx.out.numel)  # inference: y = x * scale' + shift'


@rule("LayerNormalization", "GroupNormalization", "InstanceNormalization", "MeanVarianceNormalization")
def _norm(ctx: CostContext) -> OpCost:
    return OpCost(flops=NORM_FLOPS * ctx.tensor(0).numel)


@rule("RMSNormalization", "SimplifiedLayerNormalization")
def _rms_norm(ctx: CostContext) -> OpCost:
    return OpCost(flops=4 * ctx.tensor(0).numel)  # square, sum, normalize, scale


@rule("SkipLayerNormalization", "SkipSimplifiedLayerNormalization", domain=MS)
def _skip_layer_norm(ctx: CostContext) -> OpCost:
    n = ctx.tensor(0).numel
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
    return OpCost(flops=5 * ctx.tensor(0).numel)  # min, max, then quantize


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
    return OpCost(flops=factor * ctx.tensor(0).numel + extra * ctx.out.numel)


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
        flops=_REDUCE_PER_INPUT[op] * ctx.tensor(0).numel + _REDUCE_PER_OUTPUT.get(op, 0) * ctx.out.numel
    )


@rule("Resize", "Upsample")
def _resize(ctx: CostContext) -> OpCost:
    mode = ctx.attr("mode", "nearest")
    if mode == "nearest":
        return OpCost(flops=0)
    resized = sum(a != b for a, b in zip(ctx.tensor(0).shape, ctx.out.shape, strict=False)) or 1
    taps = (4 if mode == "cubic" else 2) ** resized
    return OpCost(flops=2 * taps * ctx.out.numel)  # one multiply-add per tap


# -- newer and rarer ONNX ops --------------------------------------------------------------------


@rule("DeformConv")
def _deform_conv(ctx: CostContext) -> OpCost:
    """Conv MACs plus a bilinear sample (4 taps, 8 FLOPs; +1 with a mask) per im2col element."""
    w = ctx.tensor(1)
    per_output = prod(w.shape[1:])  # Cin/g * prod(kernel)
    samples = ctx.out.numel // w.shape[0] * per_output * int(ctx.attr("group", 1))
    extra = samples * (8 + int(ctx.has_input(4))) + (ctx.out.numel if ctx.has_input(3) else 0)
    return mac_cost(ctx.out.numel * per_output, extra)


@rule("GridSample")
def _grid_sample(ctx: CostContext) -> OpCost:
    taps = {"nearest": 0, "bilinear": 4, "linear": 4, "bicubic": 16, "cubic": 16}
    spatial = max(len(ctx.out.shape) - 2, 1)
    mode_taps = taps.get(str(ctx.attr("mode", "linear")), 4)
    return OpCost(flops=2 * (mode_taps ** (spatial / 2) if mode_taps else 0) * ctx.out.numel // 1)


@rule("CumProd")
def _cum_prod(ctx: CostContext) -> OpCost:
    return OpCost(flops=ctx.out.numel)


@rule("LpNormalization")
def _lp_norm(ctx: CostContext) -> OpCost:
    return OpCost(flops=3 * ctx.out.numel)  # square (or abs), sum, divide


@rule("Col2Im")
def _col2im(ctx: CostContext) -> OpCost:
    return OpCost(flops=ctx.tensor(0).numel)  # one add per column element


@rule("NegativeLogLikelihoodLoss")
def _nll_loss(ctx: CostContext) -> OpCost:
    return OpCost(flops=2 * ctx.tensor(1).numel)  # gather, weight, reduce


@rule("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy(ctx: CostContext) -> OpCost:
    return OpCost(flops=6 * ctx.tensor(0).numel)  # log-softmax + the loss per element


@rule("HannWindow", "HammingWindow", "BlackmanWindow")
def _window(ctx: CostContext) -> OpCost:
    return OpCost(flops=4 * ctx.out.numel)  # cos, scale, offset (twice for Blackman: ~)


@rule("DFT", "STFT")
def _dft(ctx: CostContext) -> OpCost:
    """A radix-2 FFT: 5 n log2(n) FLOPs per transform of n points."""
    n = ctx.out.shape[-2] if len(ctx.out.shape) >= 2 else 1
    transforms = ctx.out.numel // max(n * ctx.out.shape[-1], 1)
    return OpCost(flops=int(5 * transforms * n * max(math.log2(n), 1)) if n else 0)


# -- zero-FLOP ops -----------------------------------------------------------------------------


@rule(*DATA_MOVEMENT_OPS, *VIEW_OPS, *CONTAINER_OPS)
def _no_arithmetic(ctx: CostContext) -> OpCost:
    return OpCost(flops=0)
