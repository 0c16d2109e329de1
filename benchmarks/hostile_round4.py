"""Issue 36's performance targets, printed: the history over 1,000 runs x 20 layers, a baseline write
beside a 40k-layer entry, and a history URL whose server never answers.

    PYTHONPATH=. python benchmarks/hostile_round4.py [--runs 1000] [--layers 20]

Each figure is wall time on this machine as it is (a shared 2-core VM: say the load beside it).
The synthetic history has one step of the model (+8 %, a new model hash at run 500) and one of a
layer, so the analysis does its real work (PELT, bootstrap, layer moves).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from pytest_roofline.history.points import HistoryPoint
from pytest_roofline.history.store import JsonLinesStore


def synthetic_history(runs: int, layers: int, seed: int = 1) -> list[HistoryPoint]:
    """One series of ``runs`` points with ``layers`` layers; the model steps +8 % halfway."""
    rng = np.random.default_rng(seed)
    points = []
    for i in range(runs):
        changed = i >= runs // 2
        value = (1.08 if changed else 1.0) * float(np.exp(rng.normal(0, 0.01)))
        step = [1.3 if changed and j == 3 else 1.0 for j in range(layers)]
        times = {f"layer_{j:02d}": 1e-4 * (1 + j) * step[j] for j in range(layers)}
        points.append(
            HistoryPoint(
                id=f"run-{i}",
                test="tests/test_m.py::test_model",
                key="tests/test_m.py::test_model|m.onnx|b1|onnxruntime|CPU x2",
                device_class="CPU x2",
                conditions="c0ffee",
                commit=f"{i:040x}",
                time=f"2026-01-{1 + i // 1440:02d}T{i // 60 % 24:02d}:{i % 60:02d}:00+00:00",
                value=value,
                median=value * 1e-3,
                sessions=(value,),
                scale=1.0,
                layers={k: t * float(np.exp(rng.normal(0, 0.02))) for k, t in times.items()},
                verdict="pass",
                mode="stored",
                model="m.onnx",
                model_hash="m1" if changed else "m0",
                backend="onnxruntime",
            )
        )
    return points


def time_history(runs: int, layers: int) -> float:
    """Seconds of ``roofline history --format json --no-explain`` over the synthetic store."""
    with tempfile.TemporaryDirectory() as folder:
        JsonLinesStore(Path(folder) / "h").append(synthetic_history(runs, layers))
        cli = "import sys; from pytest_roofline.cli import main; sys.exit(main())"
        argv = [sys.executable, "-c", cli, "history", "--store", str(Path(folder) / "h"), "--format", "json"]
        start = time.perf_counter()
        done = subprocess.run([*argv, "--no-explain"], capture_output=True, text=True, check=False)
        took = time.perf_counter() - start
        if done.returncode != 0:
            raise SystemExit(f"roofline history failed: {done.stderr.strip()}")
        return took


def time_baseline_write(layers: int) -> float:
    """Seconds of ``--roofline-update``'s write (read, merge, dump under the lock) of one entry into
    a module file that holds an entry of ``layers`` layers."""
    import dataclasses

    from pytest_roofline.gate.baseline import BaselineEntry, LayerRecord
    from pytest_roofline.gate.store import BaselineStore

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from _baselines import make_entry

    big: BaselineEntry = make_entry("tests/test_m.py::test_big")
    records = {
        f"/encoder/layer.{i}/MatMul": LayerRecord(1e-6 * (1 + i % 7), 0.3, "MatMul", (f"n{i}",))
        for i in range(layers)
    }
    with tempfile.TemporaryDirectory() as folder:
        store = BaselineStore(Path(folder))
        store.write([dataclasses.replace(big, layers=records)])
        start = time.perf_counter()
        BaselineStore(Path(folder)).write([make_entry("tests/test_m.py::test_small")])
        return time.perf_counter() - start


def time_silent_server(opens: int) -> tuple[float, str]:
    """Seconds ``opens`` PostgreSQL opens cost against a server that accepts and never answers."""
    import psycopg  # noqa: F401 - imported before the clock: any PostgreSQL use pays it, not the wait

    from pytest_roofline.errors import RooflineError
    from pytest_roofline.history.store import PostgresStore

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from _servers import silent_server

    message = ""
    with silent_server() as port:
        url = f"postgresql://u@127.0.0.1:{port}/db?sslmode=disable"
        start = time.perf_counter()
        for _ in range(opens):
            try:
                PostgresStore(url)
            except RooflineError as exc:
                message = str(exc)
        took = time.perf_counter() - start
    return took, message


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--layers", type=int, default=20)
    args = parser.parse_args()
    print(f"load average beside it: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    took = time_history(args.runs, args.layers)
    print(f"roofline history, {args.runs} runs x {args.layers} layers: {took:.2f} s (target <= 10 s)")
    for layers in (10_000, 20_000, 40_000):
        took = time_baseline_write(layers)
        print(f"--roofline-update's write beside a {layers}-layer entry: {took:.2f} s (target <= 2 s at 40k)")
    took, message = time_silent_server(3)
    print(f"3 opens of a history URL that never answers (psycopg loaded first): {took:.2f} s (target <= 5 s)")
    print(f"  said once: {message}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
