"""Write the model zoo (``pytest_roofline.zoo.suite``) and print a smoke table of it.

Run: ``python benchmarks/build_zoo.py --out DIR [--models a,b] [--seconds 1] [--openvino]``.

Per model: name, tags, file size, GMACs (``pytest_roofline.analysis`` at the entry's dims) and
the median latency of onnxruntime's CPU provider at default threads over about ``--seconds`` of
back-to-back runs after a warm-up (a quick look, not a measurement: nothing else is controlled).
``--openvino`` adds OpenVINO's CPU median the same way, or why it cannot run the model.
Ends with the time the zoo took to write.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_roofline.analysis import analyze
from pytest_roofline.model import bind_input_shapes, load_model, make_inputs
from pytest_roofline.zoo.suite import ZOO, write_zoo, zoo_model


def median_latency(run: Callable[[], Any], seconds: float) -> float:
    """Median seconds of ``run()`` over about ``seconds`` of runs (at least 5) after 2 warm-ups."""
    for _ in range(2):
        run()
    times: list[float] = []
    stop = time.perf_counter() + seconds
    while len(times) < 5 or time.perf_counter() < stop:
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def onnxruntime_latency(path: Path, feeds: dict[str, Any], seconds: float) -> float:
    """onnxruntime CPU provider, default options."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return median_latency(lambda: session.run(None, feeds), seconds)


def openvino_latency(path: Path, feeds: dict[str, Any], seconds: float) -> float | str:
    """OpenVINO CPU, default options; the first line of its error when it cannot compile the model."""
    try:
        import openvino as ov

        compiled = ov.Core().compile_model(str(path), "CPU")
        request = compiled.create_infer_request()
        return median_latency(lambda: request.infer(feeds), seconds)
    except Exception as error:  # noqa: BLE001 - report any failure in one cell
        return f"n/a: {(str(error).strip().splitlines() or [type(error).__name__])[0][:60]}"


def fmt_ms(value: float | str) -> str:
    return value if isinstance(value, str) else f"{value * 1e3:.3f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for <name>.onnx")
    parser.add_argument("--models", default="", help="comma-separated zoo names (default: all)")
    parser.add_argument("--seconds", type=float, default=1.0, help="timing per model and runtime")
    parser.add_argument("--openvino", action="store_true", help="also time OpenVINO's CPU plugin")
    args = parser.parse_args(argv)
    names = [n for n in args.models.split(",") if n] or [entry.name for entry in ZOO]
    start = time.perf_counter()
    paths = write_zoo(args.out, names)
    written = time.perf_counter() - start
    header = f"{'model':<18} {'tags':<42} {'size MB':>8} {'GMACs':>8} {'onnxruntime':>12}"
    print(header + (f"  {'openvino':>12}" if args.openvino else ""))
    for name in names:
        entry, path = zoo_model(name), paths[name]
        model = load_model(path)
        gmacs = analyze(model, dims=entry.dims).total.macs / 1e9
        feeds = make_inputs(model, bind_input_shapes(model, 1, entry.dims))
        row = (
            f"{name:<18} {','.join(entry.tags):<42} {path.stat().st_size / 1e6:>8.1f} {gmacs:>8.3f} "
            f"{fmt_ms(onnxruntime_latency(path, feeds, args.seconds)):>12}"
        )
        if args.openvino:
            row += f"  {fmt_ms(openvino_latency(path, feeds, args.seconds)):>12}"
        print(row, flush=True)
    print(f"zoo of {len(names)} models written to {args.out} in {written:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
