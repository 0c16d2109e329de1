"""Benchmark the calibration against independent references, and check its budgets.

Prints, in one run:
- peak FLOP/s from ``calibrate`` vs the best of numpy sgemm (np.matmul float32) and a bare
  onnxruntime MatMul session (target: ≥ 0.9 × the better reference);
- DRAM bandwidth from ``calibrate`` vs a numpy copy of a 256 MiB array (target ≥ 0.9 ×); both count
  bytes the same way: inputs read + outputs written (a copy moves 2 × 256 MiB per call);
- uncached calibration time (target ≤ 10 s) and cached time (target ≤ 50 ms, in-process call);
- spread of the peak (and bandwidth) over N fresh calibrations, one process each (target ≤ 5 %).

Usage: ``python benchmarks/calibration.py [--runs 5] [--backend onnxruntime] [--option K=V]...``

OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE may be set on some machines (older OpenBLAS builds need them);
they slow a current numpy.  numpy is measured as-is and, when they are set, also with both unset
(in a child process only), and the better figure is the reference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

NUMPY_GEMM_SIZES = (1024, 2048, 3072)
ORT_GEMM_SIZES = (512, 1024, 2048)
COPY_BYTES = 256 * 1024 * 1024

CHILD_NUMPY = r"""
import json, statistics, time, numpy as np
best = 0.0
for n in %(sizes)r:
    a = np.random.default_rng(0).random((n, n), dtype=np.float32); b = a.T.copy(); out = np.empty_like(a)
    np.matmul(a, b, out=out)
    samples = []
    start = time.perf_counter()
    while time.perf_counter() - start < 0.6 or len(samples) < 3:
        t = time.perf_counter(); np.matmul(a, b, out=out); samples.append(time.perf_counter() - t)
    best = max(best, 2.0 * n ** 3 / statistics.median(samples))
src = np.ones(%(copy)d // 4, np.float32); dst = np.empty_like(src); np.copyto(dst, src)
samples = []
for _ in range(10):
    t = time.perf_counter(); np.copyto(dst, src); samples.append(time.perf_counter() - t)
copy_bw = 2.0 * src.nbytes / statistics.median(samples)  # read + write, the probes' convention
config = np.show_config(mode="dicts")["Build Dependencies"]["blas"].get("openblas configuration", "")
print(json.dumps({"sgemm": best, "copy": copy_bw, "blas": config}))
"""

CHILD_CALIBRATE = r"""
import json, sys, time
from pytest_roofline.backends.base import get_backend
from pytest_roofline.roofline.calibrate import calibrate
backend = get_backend(sys.argv[1], json.loads(sys.argv[2]))
start, cpu = time.perf_counter(), time.process_time()
roof = calibrate(backend, force=True, cache_dir=sys.argv[3])
uncached, cpu = time.perf_counter() - start, time.process_time() - cpu
cached = []
for _ in range(20):
    t = time.perf_counter(); calibrate(backend, cache_dir=sys.argv[3]); cached.append(time.perf_counter() - t)
print(json.dumps({"peak": roof.peak, "bandwidth": roof.peak_bandwidth, "uncached": uncached, "cpu": cpu,
                  "cached": sorted(cached)[len(cached) // 2], "theoretical": roof.theoretical_peak_flops,
                  "peaks": roof.peak_flops, "spread": roof.spread, "warnings": list(roof.warnings),
                  "probe": max((p for p in roof.probes if p.kind == "compute" and p.dtype == "float32"),
                               key=lambda p: p.value).name}))
"""


def bare_ort_matmul(threads: int) -> float:
    """Best median FLOP/s of a plain onnxruntime MatMul session over a few sizes."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper

    best = 0.0
    for n in ORT_GEMM_SIZES:
        vi = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [n, n]) for x in ("A", "B", "Y")]
        graph = helper.make_graph([helper.make_node("MatMul", ["A", "B"], ["Y"])], "mm", vi[:2], vi[2:])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        a = np.random.default_rng(0).random((n, n), dtype=np.float32)
        feeds = {"A": a, "B": a.T.copy()}
        session.run(None, feeds)
        samples: list[float] = []
        start = time.perf_counter()
        while time.perf_counter() - start < 0.6 or len(samples) < 3:
            t = time.perf_counter()
            session.run(None, feeds)
            samples.append(time.perf_counter() - t)
        best = max(best, 2.0 * n**3 / statistics.median(samples))
    return best


def child(code: str, args: list[str] | None = None, env: dict[str, str] | None = None) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", code, *(args or [])],
        capture_output=True,
        text=True,
        env=env or dict(os.environ),
        timeout=600,
        check=False,
    )
    if out.returncode:
        raise SystemExit(f"child failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def verdict(ok: bool) -> str:
    return "OK  " if ok else "MISS"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="rounds, each a fresh calibration (default 5)")
    parser.add_argument("--backend", default="onnxruntime")
    parser.add_argument("--option", action="append", default=[], metavar="K=V")
    args = parser.parse_args()
    options = dict(item.split("=", 1) for item in args.option)
    threads = int(options.get("intra_op_threads", "0"))
    blas_env = {k: v for k, v in os.environ.items() if k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    numpy_code = CHILD_NUMPY % {"sizes": NUMPY_GEMM_SIZES, "copy": COPY_BYTES}
    envs = {"as-is": dict(os.environ)}
    if blas_env:  # unset in the child only, never here
        envs["OPENBLAS_* unset"] = {k: v for k, v in os.environ.items() if k not in blas_env}

    # Each round measures the references and then one fresh calibration back to back, so the
    # ratios compare figures taken under the same machine load (a shared machine drifts).
    rounds = []
    with tempfile.TemporaryDirectory(prefix="roofline-bench-") as cache_dir:
        for index in range(args.runs):
            numpy_refs = {label: child(numpy_code, env=env) for label, env in envs.items()}
            ort_peak = bare_ort_matmul(threads) if args.backend == "onnxruntime" else 0.0
            run = child(CHILD_CALIBRATE, [args.backend, json.dumps(options), cache_dir])
            run["numpy"], run["ort"] = numpy_refs, ort_peak
            run["reference"] = max([ort_peak] + [ref["sgemm"] for ref in numpy_refs.values()])
            run["copy"] = max(ref["copy"] for ref in numpy_refs.values())
            rounds.append(run)
            refs = ", ".join(
                f"numpy {label} {ref['sgemm'] / 1e9:.0f} GFLOP/s / copy {ref['copy'] / 1e9:.1f} GB/s"
                for label, ref in numpy_refs.items()
            )
            print(
                f"round {index + 1}/{args.runs}: calibrate peak {run['peak'] / 1e9:.1f} GFLOP/s "
                f"({run['probe']}), "
                f"DRAM {run['bandwidth'] / 1e9:.1f} GB/s, uncached {run['uncached']:.2f} s "
                f"(CPU {run['cpu']:.2f} s), cached {run['cached'] * 1e3:.3f} ms | bare ORT "
                f"{ort_peak / 1e9:.0f} GFLOP/s, {refs}",
                flush=True,
            )
            spread = ", ".join(f"{k} {v:.1%}" for k, v in sorted(run["spread"].items()))
            print(
                f"    stored with it: spread of two sessions {spread}; {run['warnings'] or 'no load warning'}"
            )
        start = time.perf_counter()
        cli = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from pytest_roofline.cli import main; sys.exit(main())",
                "calibrate",
                "--format",
                "json",
                "--backend",
                args.backend,
                "--cache-dir",
                cache_dir,
                *[f"--option={o}" for o in args.option],
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        cli_wall = time.perf_counter() - start

    peaks = [r["peak"] for r in rounds]
    bands = [r["bandwidth"] for r in rounds]
    peak_ratio = statistics.median(r["peak"] / r["reference"] for r in rounds)
    band_ratio = statistics.median(r["bandwidth"] / r["copy"] for r in rounds)
    uncached = max(r["uncached"] for r in rounds)
    cached = max(r["cached"] for r in rounds)
    spread_peak = (max(peaks) - min(peaks)) / statistics.median(peaks)
    spread_band = (max(bands) - min(bands)) / statistics.median(bands)
    theory = rounds[0]["theoretical"].get("float32")

    print()
    print(
        f"backend {args.backend} options {options or '{}'}; OPENBLAS env: {blas_env or 'not set'}; "
        f"numpy BLAS: {rounds[0]['numpy']['as-is']['blas']}"
    )
    median_peak = statistics.median(peaks)
    print(
        f"{verdict(peak_ratio >= 0.9)} peak / best(numpy sgemm, bare ORT MatMul), median of per-round "
        f"ratios: {peak_ratio:.2f} (median peak {median_peak / 1e9:.1f} GFLOP/s"
        + (f", {median_peak / theory:.0%} of theoretical {theory / 1e9:.0f})" if theory else ")")
    )
    others = ", ".join(f"{k} {v / 1e9:.0f} G/s" for k, v in rounds[-1]["peaks"].items())
    print(f"     roofs by dtype (last round; int8 in OP/s): {others}")
    print(
        f"{verdict(band_ratio >= 0.9)} DRAM bandwidth / numpy 256 MiB copy (both read+write bytes), median "
        f"of per-round ratios: {band_ratio:.2f} (median {statistics.median(bands) / 1e9:.1f} GB/s)"
    )
    print(f"{verdict(uncached <= 10)} uncached calibration, worst of {len(rounds)}: {uncached:.2f} s wall")
    print(
        f"{verdict(cached <= 0.05)} cached calibrate() call, worst median: {cached * 1e3:.3f} ms "
        f"(fresh process 'roofline calibrate --format json' from cache: {cli_wall:.2f} s wall, "
        f"exit {cli.returncode}, mostly interpreter and package import)"
    )
    print(
        f"{verdict(spread_peak <= 0.05)} spread (max-min)/median of peak over {len(rounds)} fresh "
        f"processes: {spread_peak:.1%} (bandwidth: {spread_band:.1%})"
    )


if __name__ == "__main__":
    main()
