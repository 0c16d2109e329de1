"""Cost rules of com.microsoft ops that onnxruntime's quantization, transformer optimizer and model
builders emit (attention ops are in :mod:`.attention`).

Quantized ops count like their float forms plus a requantization of 3 FLOPs per output element
(scale, round, zero point); fused normalizations count their skip and bias adds on top of the
norm's 7 (LayerNorm) or 4 (RMSNorm) FLOPs per element.
"""

from __future__ import annotations

from . import attention  # noqa: F401  (registers the attention rules)
from .costs import (
    ELEMENTWISE_FLOPS,
    MS,
    NORM_FLOPS,
    CostContext,
    OpCost,
    mac_cost,
    prod,
    rnn_cost,
    rule,
)

__all__ = ["REQUANTIZE_FLOPS"]

REQUANTIZE_FLOPS = 3  # x / scale, round, + zero point
_ACTIVATION = {0: 0, 1: ELEMENTWISE_FLOPS["Swish"]}  # GroupNorm's activation attribute: none, SiLU


@rule("DynamicQuantizeLSTM", domain=MS)
def _dynamic_quantize_lstm(ctx: CostContext) -> OpCost:
    """An LSTM with int8 weights W (dirs, input, 4H) and R (dirs, H, 4H): the LSTM's arithmetic plus
    quantizing its input and hidden state at every step."""
    x, r = ctx.tensor(0), ctx.tensor(2)
    seq, batch, input_size = x.shape
    directions, hidden = r.shape[0], r.shape[1]
    steps = directions * seq * batch
    cost = rnn_cost("LSTM", steps, input_size, hidden, ctx.has_input(3), ctx.has_input(7))
    return OpCost(flops=cost.flops + REQUANTIZE_FLOPS * steps * (input_size + hidden), macs=cost.macs)


@rule("QLinearGlobalAveragePool", domain=MS)
def _qlinear_global_average_pool(ctx: CostContext) -> OpCost:
    return OpCost(
        flops=ctx.tensor(0).numel + (1 + REQUANTIZE_FLOPS) * ctx.out.numel
    )  # sum, divide, requantize


@rule("QLinearAveragePool", domain=MS)
def _qlinear_average_pool(ctx: CostContext) -> OpCost:
    window = prod(ctx.attr("kernel_shape", []))
    return OpCost(flops=(window + 1 + REQUANTIZE_FLOPS) * ctx.out.numel)


@rule("QLinearReduceMean", domain=MS)
def _qlinear_reduce_mean(ctx: CostContext) -> OpCost:
    return OpCost(flops=ctx.tensor(0).numel + (1 + REQUANTIZE_FLOPS) * ctx.out.numel)


@rule("QLinearSoftmax", domain=MS)
def _qlinear_softmax(ctx: CostContext) -> OpCost:
    return OpCost(flops=(5 + REQUANTIZE_FLOPS) * ctx.out.numel)


@rule("QLinearConcat", "QLinearWhere", domain=MS)
def _qlinear_requantize(ctx: CostContext) -> OpCost:
    return OpCost(flops=REQUANTIZE_FLOPS * ctx.out.numel)


@rule("NhwcConv", domain=MS)
def _nhwc_conv(ctx: CostContext) -> OpCost:
    macs = ctx.out.numel * prod(ctx.tensor(1).shape[1:])
    return mac_cost(macs, ctx.out.numel if ctx.has_input(2) else 0)


@rule("NhwcFusedConv", domain=MS)
def _nhwc_fused_conv(ctx: CostContext) -> OpCost:
    cost = _nhwc_conv(ctx)
    activation = ELEMENTWISE_FLOPS.get(ctx.attr("activation", ""), 1)
    extra = ctx.out.numel * (activation + (1 if ctx.has_input(3) else 0))  # activation, residual add
    return OpCost(flops=cost.flops + extra, macs=cost.macs)


@rule("MatMulInteger16", "TransposeMatMul", "FusedMatMulActivation", domain=MS)
def _matmul_like(ctx: CostContext) -> OpCost:
    a = ctx.tensor(0)
    transposed = bool(ctx.attr("transA", 0)) and len(a.shape) > 1
    k = a.shape[-2] if transposed else a.shape[-1]
    activation = ELEMENTWISE_FLOPS.get(ctx.attr("activation", ""), 0)
    return mac_cost(ctx.out.numel * k, activation * ctx.out.numel)


@rule("MatMulBnb4", domain=MS)
def _matmul_bnb4(ctx: CostContext) -> OpCost:
    return mac_cost(ctx.out.numel * int(ctx.attr("K")), ctx.out.numel)  # + dequantize per output


@rule("GemmFastGelu", domain=MS)
def _gemm_fast_gelu(ctx: CostContext) -> OpCost:
    k = ctx.tensor(0).shape[-1]
    bias = ctx.out.numel if ctx.has_input(2) else 0
    return mac_cost(ctx.out.numel * k, bias + ELEMENTWISE_FLOPS["FastGelu"] * ctx.out.numel)


@rule("GatherBlockQuantized", domain=MS)
def _gather_block_quantized(ctx: CostContext) -> OpCost:
    return OpCost(flops=2 * ctx.out.numel)  # dequantize what is gathered


@rule("EmbedLayerNormalization", domain=MS)
def _embed_layer_norm(ctx: CostContext) -> OpCost:
    """Word + position (+ segment) embeddings summed, then LayerNorm."""
    adds = 2 if ctx.has_input(4) else 1
    return OpCost(flops=(adds + NORM_FLOPS) * ctx.out.numel)


@rule("GroupNorm", "SkipGroupNorm", domain=MS)
def _group_norm(ctx: CostContext) -> OpCost:
    skip = 0
    if ctx.node.op_type == "SkipGroupNorm":
        skip = 1 + int(ctx.has_input(4))  # skip add (+ bias add)
    activation = _ACTIVATION.get(int(ctx.attr("activation", 0)), 0)
    return OpCost(flops=(NORM_FLOPS + skip + activation) * ctx.tensor(0).numel)


@rule("BiasSplitGelu", domain=MS)
def _bias_split_gelu(ctx: CostContext) -> OpCost:
    return OpCost(flops=(2 + ELEMENTWISE_FLOPS["Gelu"] + 1) * ctx.out.numel)  # bias on both halves, gelu, mul


@rule("BiasSoftmax", domain=MS)
def _bias_softmax(ctx: CostContext) -> OpCost:
    return OpCost(flops=6 * ctx.out.numel)  # bias add + softmax


@rule("BiasDropout", domain=MS)
def _bias_dropout(ctx: CostContext) -> OpCost:
    return OpCost(flops=(1 + int(ctx.has_input(2))) * ctx.out.numel)  # bias (+ residual) add


@rule("SwiGLU", domain=MS)
@rule("SwiGLU")
def _swiglu(ctx: CostContext) -> OpCost:
    return OpCost(flops=(ELEMENTWISE_FLOPS["Swish"] + 1) * ctx.out.numel)  # silu(gate) * up


@rule("ScaledSiLU", domain=MS)
def _scaled_silu(ctx: CostContext) -> OpCost:
    return OpCost(flops=(ELEMENTWISE_FLOPS["Swish"] + 1) * ctx.out.numel)


@rule("RelativePositionBias", "GatedRelativePositionBias", "RemovePadding", "RestorePadding", domain=MS)
def _bias_tables(ctx: CostContext) -> OpCost:
    return OpCost(flops=ctx.out.numel if ctx.node.op_type == "GatedRelativePositionBias" else 0)
