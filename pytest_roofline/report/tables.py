"""The ``roofline`` command's text tables, one renderer per table (the CLI prints what they return).

* :func:`analysis_table` — ``roofline analyze``: totals, top nodes by FLOPs, by op type;
* :func:`calibration_table` — ``roofline calibrate``: the roofs beside the theoretical ones, probes;
* :func:`check_table` — ``roofline check``: the cross-backend output comparisons;
* :func:`diff_table` — ``roofline diff``: blocks, nodes, the prediction and the measurement;
* :func:`profile_table` — ``roofline profile``: end-to-end statistics, then the top layers.

Pure functions of typed values; heavy imports (the static analysis) sit inside the renderer.
"""

from __future__ import annotations

import math
import textwrap
from typing import TYPE_CHECKING, Any

from pytest_roofline.fmt import (
    elide_names,
    fmt_bytes_fixed,
    fmt_pct,
    fmt_rate,
    fmt_seconds,
    plural,
    printable,
    text_table,
)
from pytest_roofline.fmt import fmt_seconds_fixed as _ms
from pytest_roofline.report.view import overhead_line
from pytest_roofline.roofline.probes import ALL_DTYPES, size_label

if TYPE_CHECKING:
    from pytest_roofline.analysis import ModelAnalysis
    from pytest_roofline.check import CheckResult
    from pytest_roofline.diff import Explanation, GraphDiff, Prediction
    from pytest_roofline.gate.verdict import Verdict
    from pytest_roofline.memory import MemoryProfile
    from pytest_roofline.profile import Layer, ModelProfile
    from pytest_roofline.roofline import DeviceRoofline

__all__ = [
    "CONVENTION",
    "analysis_table",
    "calibration_table",
    "check_table",
    "diff_table",
    "memory_levels_line",
    "profile_table",
]

# --- roofline analyze -----------------------------------------------------------------------------

CONVENTION = (
    "FLOPs = 2 x MACs (+1 per bias/elementwise op); bytes = inputs read + outputs written;"
    " totals count every execution of Loop/Scan bodies and the costed If branch"
)


def analysis_table(result: ModelAnalysis, top: int = 15) -> str:
    """Totals, the top nodes by FLOPs, an aggregate by op type, shape method, uncosted ops."""
    from pytest_roofline.analysis import by_op_type, published_macs

    total = result.total
    inputs = ", ".join(f"{k}[{'x'.join(map(str, v))}]" for k, v in result.input_shapes.items())
    lines = [
        f"model {result.model_name}  inputs {inputs}  shapes resolved by: {result.shape_method}",
        f"total: {total.flops / 1e9:.3f} GFLOPs, {total.macs / 1e9:.3f} GMACs "
        f"(conv+gemm+matmul {published_macs(result) / 1e9:.3f} GMACs, the published-table convention), "
        f"{total.params / 1e6:.3f} M params, {fmt_bytes_fixed(total.bytes)} moved, {len(result.nodes)} nodes",
        f"coverage: {result.coverage.describe()}",
        *(f"warning: {line}" for line in result.warnings),
        f"convention: {CONVENTION}",
        "",
    ]
    nodes = sorted(result.nodes, key=lambda n: (-n.total_flops, -n.total_bytes))[:top]
    if nodes:
        lines.append(f"top {len(nodes)} nodes by FLOPs")
        rows = [
            (
                n.name,
                n.op_type,
                f"{n.total_flops / 1e6:.2f}",
                f"{n.total_macs / 1e6:.2f}",
                fmt_bytes_fixed(n.total_bytes),
                f"{n.intensity:.1f}",
                f"{n.params}",
            )
            for n in nodes
        ]
        lines += text_table(("node", "op", "MFLOPs", "MMACs", "bytes", "FLOP/B", "params"), rows, left=2)
        lines.append("")
    lines.append("by op type")
    op_rows = [
        (
            op,
            str(count),
            f"{t.flops / 1e6:.2f}",
            f"{100 * t.flops / total.flops if total.flops else 0:.1f}%",
            f"{t.macs / 1e6:.2f}",
            fmt_bytes_fixed(t.bytes),
        )
        for op, (count, t) in by_op_type(result).items()
    ]
    lines += text_table(("op", "nodes", "MFLOPs", "share", "MMACs", "bytes"), op_rows)
    if result.uncosted:
        lines += [
            "",
            "no cost rule (bytes only): " + ", ".join(f"{op} x{count}" for op, count in result.uncosted),
        ]
    if result.unresolved:
        lines.append(
            "a rule but not costed (bytes only): "
            + ", ".join(f"{op} x{count} ({reason})" for op, reason, count in result.unresolved)
        )
    return "\n".join(map(printable, lines)) + "\n"  # node and input names come from the model


# --- roofline calibrate ---------------------------------------------------------------------------


def calibration_table(roofline: DeviceRoofline) -> str:
    """Roofs beside the theoretical ones, ridge point, validity, cache levels, probes."""
    fp = roofline.fingerprint
    lines = [f"Device roofline: {fp.get('backend', '?')} {fp.get('version', '')} on {_device(fp)}", ""]
    lines += _roof_lines(roofline)
    if roofline.spread:
        spread = ", ".join(f"{k} {fmt_pct(v)}" for k, v in sorted(roofline.spread.items()))
        lines.append(f"  spread between two sessions: {spread}")
    for warning in roofline.warnings:
        lines.append(f"  WARNING: {warning}; re-measure on a quiet machine (--force)")
    if roofline.clock or roofline.threads:
        clock = f"{roofline.clock / 1e9:.2f} GHz (max boost: cpufreq or measured)" if roofline.clock else "-"
        lines.append(f"  threads {roofline.threads or '-'}, theoretical clock {clock}")
    if roofline.cache_levels:
        lines += [
            "",
            "  cache levels (bandwidth plateaus seen through the backend; capacity for the threads)",
        ]
        for level in roofline.cache_levels:
            size = f"<= {size_label(level.size)}" if level.size else "beyond caches"
            held = f"holds {size_label(level.capacity)}" if level.capacity else ""
            lines.append(
                f"    {level.name:<5} {size:<15} {fmt_rate(level.bandwidth, 'B/s'):>12}  {held}".rstrip()
            )
    lines += ["", f"  {'probe':<34} {'kind':<8} {'dtype':<8} {'figure':>14} {'per run':>10}"]
    for probe in roofline.probes:
        unit = {"memory": "B/s", "dispatch": "kernel/s"}.get(
            probe.kind, "OP/s" if probe.dtype == "int8" else "FLOP/s"
        )
        lines.append(
            f"  {probe.name:<34} {probe.kind:<8} {probe.dtype:<8} {fmt_rate(probe.value, unit):>14} "
            f"{fmt_seconds(probe.seconds):>10}"
        )
    lines += ["", f"  measured {roofline.measured_at} in {roofline.duration:.1f} s"]
    return "\n".join(map(printable, lines)) + "\n"  # the fingerprint may come from a cache file


def _device(fp: dict[str, Any]) -> str:
    """The device a calibration measured: the GPU with its identity (and host), or the CPU."""
    gpu = fp.get("gpu")
    if not isinstance(gpu, dict):
        return f"{fp.get('cpu_model', '?')} ({fp.get('cpu_cores', '?')} cores)"
    memory = gpu.get("memory")
    size = f", {memory / 1024**3:.0f} GiB" if isinstance(memory, int) and memory else ""
    parts = (
        ("compute capability {}", gpu.get("compute_capability")),
        ("{} SMs", gpu.get("sm_count")),
        ("max {} MHz", gpu.get("max_sm_clock_mhz")),
        ("driver {}", gpu.get("driver")),
        ("CUDA {}", gpu.get("cuda")),
    )
    details = ", ".join(text.format(value) for text, value in parts if value)
    return f"{gpu.get('name', '?')}{size} ({details}); host {fp.get('cpu_model', '?')}"


def _roof_lines(roofline: DeviceRoofline) -> list[str]:
    """One line per roof: measured, theoretical and the share reached; memory roof; ridge point."""
    theory = roofline.theoretical_peak_flops
    on_gpu = isinstance(roofline.fingerprint.get("gpu"), dict)
    lines = []
    for dtype in sorted(roofline.peak_flops, key=_dtype_order):
        peak, paper = roofline.peak_flops[dtype], theory.get(dtype)
        label = dtype
        if dtype == "float32" and roofline.float32_mode == "tf32":
            label, paper = "float32 (runs as TF32)", theory.get("tf32", paper)
        elif dtype == "float32" and roofline.float32_mode == "fp32":
            label = "float32 (strict fp32)"
        unit = "OP/s" if dtype == "int8" else "FLOP/s"
        probes = [p for p in roofline.probes if p.kind == "compute" and p.dtype == dtype]
        best = max(probes, key=lambda p: p.value, default=None)
        if not on_gpu and paper and best is not None and best.value < peak and math.isclose(peak, paper):
            # a CPU's roof is the FMA peak when no probe reaches it: "reached 100 %" would be the
            # roof's share of itself; what a probe reached is the best probe's share
            share = f"best probe {best.name} {fmt_rate(best.value, unit)}, {fmt_pct(best.value / peak)} of it"
            roof = f"{fmt_rate(peak, unit):>14}   the theoretical (FMA) peak"
            lines.append(f"  compute roof {label:<22} {roof}; {share}")
            continue
        lines.append(
            f"  compute roof {label:<22} {fmt_rate(peak, unit):>14}{_reached(peak, paper, unit, on_gpu)}"
        )
    if on_gpu and "float8" in theory:
        lines.append(f"  on paper only: float8 {fmt_rate(theory['float8'], 'FLOP/s')} (no float8 probe)")
    paper_bw = roofline.theoretical_peak_bandwidth or None
    reached = _reached(roofline.peak_bandwidth, paper_bw, "B/s", on_gpu)
    lines.append(f"  memory roof  {'DRAM':<22} {fmt_rate(roofline.peak_bandwidth, 'B/s'):>14}{reached}")
    lines.append(f"  ridge point  {'':<22} {roofline.ridge_point:>10.1f} FLOP/B ({roofline.dtype})")
    if roofline.dispatch_floor:
        floor = fmt_seconds(roofline.dispatch_floor)
        probe = next((p.name for p in roofline.probes if p.kind == "dispatch"), "no recorded probe")
        lines.append(f"  dispatch floor {'':<20} {floor:>14}   the least time of one kernel ({probe})")
    return lines


def _reached(measured: float, paper: float | None, unit: str, on_gpu: bool) -> str:
    if not paper:
        return ""
    text = f"   theoretical {fmt_rate(paper, unit)}, reached {fmt_pct(measured / paper)}"
    if measured > paper:
        why = (
            "the clocks run faster than NVML reports"
            if on_gpu
            else "the clock ran faster while the roof was measured than while the clock was"
        )
        text += f" (above: {why})"
    return text


def _dtype_order(dtype: str) -> int:
    return ALL_DTYPES.index(dtype) if dtype in ALL_DTYPES else len(ALL_DTYPES)


# --- roofline check -------------------------------------------------------------------------------


def check_table(result: CheckResult) -> str:
    """The comparisons as an aligned text table under a one-line heading."""
    header = ("candidate", "output", "max abs err", "max rel err", "mismatched", "result")
    rows = [
        (
            c.candidate,
            c.output,
            f"{c.max_abs_error:.3g}",
            f"{c.max_rel_error:.3g}",
            f"{c.mismatched}/{c.elements}",
            "ok" if c.passed else "MISMATCH",
        )
        for c in result.comparisons
    ]
    title = f"{result.model}: reference {result.backends[0]}, rtol={result.rtol:g}, atol={result.atol:g}"
    return "\n".join([printable(title), *text_table(header, rows, left=2)])


# --- roofline diff --------------------------------------------------------------------------------

WIDTH = 100  # the table fits a terminal this wide


SHORT = {"op attributes": "attrs", "output shape": "out", "input shape": "in", "weights": "w"}


def diff_table(
    diff: GraphDiff,
    prediction: Prediction,
    verdict: Verdict | None,
    explanation: Explanation,
    top: int = 12,
) -> str:
    """The diff as text for a 100-column terminal: totals, blocks, nodes, prediction, measurement."""
    lines = [*_wrap(explanation.text, WIDTH, "  "), ""]
    nodes = f"{len(diff.added)} added, {len(diff.removed)} removed, {len(diff.changed)} changed"
    nodes += f", {diff.unchanged} unchanged ({diff.renamed} renamed)"
    if diff.rewired:
        nodes += f", {len(diff.rewired)} rewired"
    lines += [
        f"old {diff.old_model}: {diff.flops_before / 1e6:.2f} MFLOPs, {fmt_bytes_fixed(diff.bytes_before)}",
        f"new {diff.new_model}: {diff.flops_after / 1e6:.2f} MFLOPs, {fmt_bytes_fixed(diff.bytes_after)}",
        f"FLOPs {_pct(diff.flops_change)}, bytes {_pct(diff.bytes_change)}; nodes: {nodes}",
    ]
    deltas = prediction.block_deltas() if prediction.available else {}
    if diff.blocks:
        rows = [
            (
                block.kind,
                block.name,  # whole: a name cut in the middle names nothing
                _clip(block.ops, 24),
                f"{block.flops_before / 1e6:.2f}",
                f"{block.flops_after / 1e6:.2f}",
                _signed_ms(deltas.get(number)),
            )
            for number, block in enumerate(diff.blocks)
        ]
        lines += ["", "blocks"]
        lines += text_table(("kind", "block", "ops", "MFLOPs old", "new", "predicted"), rows, left=3)
    if diff.nodes:
        by_name = {(n.kind, n.name): n for n in prediction.nodes}
        ranked = sorted(
            diff.nodes,
            key=lambda c: -abs(by_name[(c.kind, c.name)].delta) if (c.kind, c.name) in by_name else 0.0,
        )
        node_rows = []
        for change in ranked[:top] if top else ranked:
            priced = by_name.get((change.kind, change.name))
            node_rows.append(
                (
                    {"added": "+", "removed": "-"}.get(change.kind, "~"),
                    change.name,
                    _clip(change.op_type, 12),
                    _clip(",".join(SHORT.get(w, w) for w in change.what) or change.kind, 16),
                    f"{(change.flops_after - change.flops_before) / 1e6:+.2f}",
                    _signed_ms(priced.delta if priced else None),
                    priced.basis if priced else "",
                )
            )
        lines += ["", f"nodes ({len(node_rows)} of {len(diff.nodes)}, largest predicted change first)"]
        header = ("", "node", "op", "what", "MFLOPs", "predicted", "basis")
        lines += text_table(header, node_rows, left=4)
    lines.append("")
    if prediction.available:
        source = "the baseline profile" if prediction.efficiency_source == "profile" else "defaults"
        lines.append(
            f"predicted: {_pct(prediction.fraction)} ({_signed_ms(prediction.time_change)} of "
            f"{_signed_ms(prediction.baseline_time).lstrip('+')}; efficiencies from {source})"
        )
    else:
        lines += _wrap(f"predicted: unavailable ({prediction.reason})", WIDTH, "  ")
    if verdict is not None and verdict.ratio is not None:
        ci = f"95% CI {_pct(verdict.ci[0] - 1)} .. {_pct(verdict.ci[1] - 1)}" if verdict.ci else "no CI"
        lines.append(
            f"measured:  {_pct(verdict.ratio - 1)} ({ci}; paired, {verdict.sessions} session pairs; "
            f"{explanation.agreement})"
        )
    if prediction.assumptions:
        lines += ["", "assumptions:"]
        for text in prediction.assumptions:
            lines += _wrap(f"- {text}", WIDTH, "  ")
    return "\n".join(lines) + "\n"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.1f} %"


def _signed_ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:+.3f} ms"


def _clip(text: str, width: int) -> str:
    """``text`` cut in the middle to ``width`` characters."""
    if len(text) <= width:
        return text
    keep = width - 3
    return text[: keep // 2] + "..." + text[len(text) - (keep - keep // 2) :]


def _wrap(text: str, width: int, indent: str) -> list[str]:
    return textwrap.wrap(text, width, subsequent_indent=indent) or [""]


# --- roofline profile -----------------------------------------------------------------------------


def _sorted_layers(profile: ModelProfile, key: str) -> list[Layer]:
    layers = [la for la in profile.layers if la.kind != "folded"]
    if key == "flops":
        return sorted(layers, key=lambda la: (-la.flops, -la.time))
    if key == "fraction":
        return sorted(layers, key=lambda la: (la.roofline_fraction is None, la.roofline_fraction or 0.0))
    if key == "name":
        return sorted(layers, key=lambda la: la.name)
    return sorted(layers, key=lambda la: -la.time)


def memory_line(memory: MemoryProfile) -> str:
    """``memory: peak ... (weights ..., activations ...), requested ..., static estimate ... (±x %)``."""
    from pytest_roofline.fmt import fmt_bytes

    text = (
        f"memory: peak {fmt_bytes(memory.peak)} (weights {fmt_bytes(memory.weights)}, activations "
        f"{fmt_bytes(memory.peak_activations)})"
    )
    if memory.requested_peak:
        text += f", requested {fmt_bytes(memory.requested_peak)}"
    if memory.arena_held:
        text += f", arena held {fmt_bytes(memory.arena_held)}"
    error = memory.predicted_error
    if error is not None:
        text += f"; static estimate {fmt_bytes(memory.predicted_peak)} ({error * 100:+.1f} %)"
    return text + f"; from the {memory.source}"


def profile_table(profile: ModelProfile, top: int = 15, sort: str = "time", by_type: bool = False) -> str:
    """End-to-end statistics, then the top layers (or op types) with roofline figures."""
    lat = profile.latency
    inputs = ", ".join(f"{k}[{'x'.join(map(str, v))}]" for k, v in profile.input_shapes.items())
    folded = [la for la in profile.layers if la.kind == "folded"]
    unattributed = [la for la in profile.layers if la.kind == "unattributed"]
    lines = [
        f"model {profile.model_name}  backend {profile.backend} {profile.backend_version}  "
        f"batch {profile.batch}{' (default)' if profile.extra.get('batch_default') else ''}  "
        f"inputs {inputs}  precision {profile.precision}",
        f"latency: median {_ms(lat.median)}  p90 {_ms(lat.p90)}  p99 {_ms(lat.p99)}  mean {_ms(lat.mean)}  "
        f"min {_ms(lat.min)}  std {_ms(lat.std)}  ({plural(lat.n, 'sample')}, "
        f"{plural(len(lat.session_medians), 'session')}, "
        f"95% CI of median {_ms(lat.ci_low)}-{_ms(lat.ci_high)})",
        f"throughput {profile.throughput:.1f}/s  total {profile.total_flops / 1e9:.3f} GFLOPs "
        f"{profile.total_macs / 1e9:.3f} GMACs  achieved {profile.achieved_flops / 1e9:.2f} GFLOP/s",
    ]
    if profile.roofline is not None:
        roof = profile.roofline
        check = profile.roofline_check
        from pytest_roofline.profile import known_fraction

        eff = known_fraction(profile.efficiency)
        lines.append(
            f"roofline: peak {roof.peak / 1e9:.1f} GFLOP/s, {roof.peak_bandwidth / 1e9:.1f} GB/s, ridge "
            f"{roof.ridge_point:.1f} FLOP/B; efficiency {'-' if eff is None else f'{100 * eff:.1f}%'}, "
            f"headroom {_ms(profile.headroom)}"
        )
        lines.append(memory_levels_line(roof))
        overhead = overhead_line(profile)
        if overhead:
            lines.append(overhead)
        if not check.valid:
            lines.append(check.message())
        elif check.calibration:  # fractions judged against an unsettled roof say so
            lines.append(f"roofline calibration not settled: {check.calibration}")
    else:
        lines.append("roofline: none (run `roofline calibrate`, or drop --no-roofline)")
    lines.append(
        f"profiled kernel time {_ms(profile.kernel_time)} over {len(profile.layers) - len(folded)} layers; "
        f"attributed {100 * profile.attributed_fraction:.1f}%"
        + (f", {len(unattributed)} unattributed" if unattributed else "")
        + f"; {len(folded)} ONNX nodes folded at load ({sum(la.flops for la in folded) / 1e6:.2f} MFLOPs)"
    )
    if profile.memory is not None:
        lines.append(memory_line(profile.memory))
    lines.append("")
    if by_type:
        type_rows = [
            (
                s.op_type,
                str(s.count),
                _ms(s.time),
                f"{100 * s.share:.1f}%",
                f"{s.flops / 1e6:.2f}",
                f"{s.achieved_flops / 1e9:.2f}",
                fmt_bytes_fixed(s.bytes),
            )
            for s in profile.by_op_type()
        ]
        lines.append("by op type")
        lines += text_table(("op", "layers", "time", "share", "MFLOPs", "GFLOP/s", "bytes"), type_rows)
        return "\n".join(map(printable, lines)) + "\n"
    layers = _sorted_layers(profile, sort)
    valid = profile.roofline_check.status != "invalid"  # impossible fractions are not printed
    shown = layers if top == 0 else layers[:top]
    rows, cumulative = [], 0.0
    names = elide_names([printable(layer.name) for layer in layers])  # unique among all, not just shown
    for layer, name in zip(shown, names, strict=False):
        cumulative += layer.share
        nodes = ",".join(layer.onnx_nodes)
        if layer.kind == "layout":
            nodes = f"layout->{layer.serves or '?'}"
        # read 0 on its timer: ran under one step, so its rates and fraction are at least those at the step
        below = layer.time_below if layer.time <= 0 else 0.0
        seconds, at_least = (below, ">=") if below else (layer.time, "")
        rows.append(
            (
                name,
                layer.op_type,
                nodes[:48] + ("..." if len(nodes) > 48 else ""),
                f"<{_ms(below)}" if below else _ms(layer.time),
                "-" if below else f"{100 * layer.share:.1f}%",
                "-" if below else f"{100 * cumulative:.1f}%",
                f"{layer.flops / 1e6:.2f}",
                f"{at_least}{layer.flops / seconds / 1e9:.2f}"
                if below
                else f"{layer.achieved_flops / 1e9:.2f}",
                fmt_bytes_fixed(layer.bytes),
                f"{at_least}{layer.bytes / seconds / 1e9:.2f}"
                if below
                else f"{layer.achieved_bandwidth / 1e9:.2f}",
                f"{layer.intensity:.1f}",
                "-"
                if layer.roofline_fraction is None or not valid
                else f"{at_least}{100 * layer.roofline_fraction:.1f}%",
                layer.bound or ("-" if layer.kind == "compute" else layer.kind),
                layer.memory_level or "-",
            )
        )
    lines.append(f"{'top ' + str(len(shown)) if top else 'all'} layers by {sort}")
    lines += text_table(
        (
            "layer",
            "op",
            "onnx nodes",
            "time",
            "share",
            "cum",
            "MFLOPs",
            "GFLOP/s",
            "bytes",
            "GB/s",
            "FLOP/B",
            "fraction",
            "bound",
            "level",
        ),
        rows,
        left=3,
    )
    return "\n".join(map(printable, lines)) + "\n"


def memory_levels_line(roof: DeviceRoofline) -> str:
    """The memory roofs layers are placed on (their ``level`` column), or why there is only DRAM."""
    levels = roof.levels
    if len(levels) == 1:
        return (
            f"memory levels: DRAM only, {roof.peak_bandwidth / 1e9:.1f} GB/s (this calibration has no "
            "cache levels: every layer is judged against DRAM; `roofline calibrate --force` measures them)"
        )
    shown = []
    for lvl in levels:
        size = f" {fmt_bytes_fixed(lvl.holds).strip()}" if lvl.holds else ""
        shown.append(f"{lvl.name}{size} {lvl.bandwidth / 1e9:.1f} GB/s")
    return "memory levels: " + ", ".join(shown) + " (a layer's level: where its weights and activations live)"
