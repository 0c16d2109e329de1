"""Gate quality on this machine: false alarms and detections, pytest-roofline vs pytest-benchmark.

Every repeat runs separate pytest processes on a generated project (the way CI runs), for:

* stored mode: a baseline recorded in one process, then an unchanged run and a run of a variant
  ~8 % slower (the same net with extra 1x1 conv blocks in front), each in a fresh process;
  pytest-roofline (probe-normalized, ``--roofline-tolerance 5``) beside pytest-benchmark
  (``--benchmark-compare-fail=median:5%`` against its saved run of the unchanged model);
* paired mode: ``--roofline-compare-ref HEAD`` on a git repo whose HEAD holds the unchanged
  model; working tree unchanged (false alarm?) or the ~3.5 % slower variant (detected?), at
  ``--roofline-tolerance 2``; pytest-benchmark beside it at ``median:2%`` vs its saved run.

The variants' true slowdowns are measured first, paired and interleaved in this process, and
printed.  Usage::

    python benchmarks/gate_quality.py               # MobileNetV2, 12 repeats
    python benchmarks/gate_quality.py --repeats 20
    python benchmarks/gate_quality.py --quick       # tiny CNN, 2 repeats: a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

THREADS = "1"

ROOFLINE_TEST = """
def test_model(model_profile):
    model_profile("model.onnx")
"""

BENCHMARK_TEST = """
import numpy as np
import onnxruntime as ort

def test_model(benchmark):
    options = ort.SessionOptions()
    options.intra_op_num_threads = {threads}
    session = ort.InferenceSession("model.onnx", options, providers=["CPUExecutionProvider"])
    inp = session.get_inputs()[0]
    x = np.random.default_rng(0).standard_normal([d if isinstance(d, int) else 1 for d in inp.shape])
    feeds = {{inp.name: x.astype(np.float32)}}
    benchmark(session.run, None, feeds)
"""


def base_model(quick: bool) -> onnx.ModelProto:
    """The unchanged net: MobileNetV2 (or the zoo's tiny CNN in quick mode) at batch 1."""
    from pytest_roofline.zoo import mobilenet_v2, tiny_cnn

    return tiny_cnn(batch=1) if quick else mobilenet_v2(batch=1, weights="random")


def with_extra_blocks(model: onnx.ModelProto, blocks: int) -> onnx.ModelProto:
    """The same net with ``blocks`` extra 1x1 conv blocks (channels kept) in front of it."""
    variant = onnx.ModelProto()
    variant.CopyFrom(model)
    graph = variant.graph
    inits = {i.name for i in graph.initializer}
    first = next(vi for vi in graph.input if vi.name not in inits)
    channels = first.type.tensor_type.shape.dim[1].dim_value
    rng = np.random.default_rng(7)
    prev = first.name
    new_nodes = []
    for i in range(blocks):
        weight = np.zeros((channels, channels, 1, 1), np.float32)
        for c in range(channels):
            weight[c, c, 0, 0] = 1.0
        weight += rng.standard_normal(weight.shape).astype(np.float32) * 1e-3
        graph.initializer.append(numpy_helper.from_array(weight, f"extra_w{i}"))
        out = f"extra_block{i}"
        new_nodes.append(helper.make_node("Conv", [prev, f"extra_w{i}"], [out], name=out))
        prev = out
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name == first.name:
                node.input[k] = prev
    nodes = new_nodes + list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes)
    return variant


def paired_slowdown(
    base: Path,
    variant: Path,
    sessions: int = 9,
    rounds: int = 40,
    threads: str = THREADS,
    dims: dict[str, int] | None = None,
) -> float:
    """Median over fresh sessions of p25(variant)/p25(base), interleaved (the true slowdown);
    ``dims`` binds the models' symbolic dims."""
    from pytest_roofline.backends.base import get_backend
    from pytest_roofline.gate.isolated import sampler_for
    from pytest_roofline.gate.verdict import session_ratios
    from pytest_roofline.measure.rounds import SessionOpener, sample_interleaved
    from pytest_roofline.model import ModelSpec, bind_input_shapes, load_model, make_inputs

    backend = get_backend("onnxruntime", {"intra_op_threads": threads})
    specs = [ModelSpec.create(str(p), dims=dims) for p in (variant, base)]
    model = load_model(str(base))
    feeds = make_inputs(model, bind_input_shapes(model, None, dims))
    sampler = sampler_for(backend) or sample_interleaved  # sessions sharing one pool, as the gate does
    result = sampler(
        [SessionOpener(backend, s, feeds) for s in specs],
        sessions=sessions,
        rounds=rounds,
        iterations=1,
        warmup=3,
    )
    return float(np.median(session_ratios(result[0], result[1])))


def tune_variant(
    model: onnx.ModelProto, target: float, work: Path, name: str, threads: str = THREADS
) -> tuple[Path, float]:
    """A variant whose paired slowdown is about ``target`` (e.g. 0.08) at ``threads`` intra-op
    threads ("0": onnxruntime's default), and its measured slowdown."""
    base = work / "base.onnx"
    blocks, measured = 2, 0.0
    for _ in range(3):
        path = work / f"{name}.onnx"
        onnx.save(with_extra_blocks(model, blocks), str(path))
        measured = paired_slowdown(base, path, threads=threads) - 1.0
        per_block = max(measured / blocks, 1e-4)
        wanted = max(1, round(target / per_block))
        if wanted == blocks or abs(measured - target) < 0.15 * target:
            break
        blocks = wanted
    print(
        f"  variant {name}: {blocks} extra blocks, paired slowdown {measured * 100:+.2f}% (target "
        f"{target * 100:.1f}%)",
        flush=True,
    )
    return work / f"{name}.onnx", measured


def pytest_run(
    project: Path, *args: str, env: Mapping[str, str] | None = None
) -> tuple[int, dict | None, float, str]:
    """Run pytest in ``project`` (in ``env``, default this process's); returns (exit code,
    results JSON or None, seconds, stdout)."""
    report = project / "results.json"
    if report.exists():
        report.unlink()
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=900,
        env=None if env is None else dict(env),
    )
    seconds = time.perf_counter() - start
    data = json.loads(report.read_text()) if report.exists() else None
    if proc.returncode not in (0, 1):
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
    return proc.returncode, data, seconds, proc.stdout


def roofline_verdict(project: Path, *args: str) -> tuple[str, float, float, float]:
    """(status, ratio, measuring seconds, noise) of one pytest-roofline run of the project's test."""
    code, data, _, _ = pytest_run(
        project,
        "--roofline-backend",
        "onnxruntime",
        "--roofline-option",
        f"intra_op_threads={THREADS}",
        "--roofline-report",
        "results.json",
        "--roofline-retime",  # the timed gate's quality, not the identity step's
        *args,
    )
    if not data or not data["results"]:
        return f"error({code})", float("nan"), float("nan"), float("nan")
    item = data["results"][0]
    gate = item["profile"]["extra"].get("gate", {})
    verdict = item["verdict"]
    noise = verdict.get("noise")
    return (
        verdict["status"],
        verdict.get("ratio") or float("nan"),
        gate.get("seconds", 0.0),
        float("nan") if noise is None else noise,
    )


def benchmark_alarm(project: Path, threshold: str) -> bool:
    """One pytest-benchmark compare run: True when its gate failed the session."""
    code, _, _, _ = pytest_run(
        project,
        "--benchmark-storage",
        str(project / ".benchmarks"),
        "--benchmark-compare",
        f"--benchmark-compare-fail=median:{threshold}",
    )
    return code != 0


def new_project(root: Path, name: str, test: str, model: Path) -> Path:
    project = root / name
    if project.exists():
        shutil.rmtree(project)
    project.mkdir()
    (project / "test_model.py").write_text(test)
    shutil.copy(model, project / "model.onnx")
    return project


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=12, help="pytest processes per cell (default 12)")
    parser.add_argument("--quick", action="store_true", help="tiny CNN, 2 repeats (smoke run)")
    parser.add_argument("--stored-target", type=float, default=8.0, help="stored-mode slowdown, percent")
    parser.add_argument("--paired-target", type=float, default=3.5, help="paired-mode slowdown, percent")
    parser.add_argument("--skip-benchmark", action="store_true", help="leave pytest-benchmark out")
    args = parser.parse_args(argv)
    repeats = 2 if args.quick and args.repeats == 12 else args.repeats
    has_benchmark = not args.skip_benchmark and shutil.which(sys.executable) is not None
    try:
        import pytest_benchmark  # noqa: F401
    except ImportError:
        has_benchmark = False
        print("pytest-benchmark is not installed: its column is left out (pip install pytest-benchmark)")

    with tempfile.TemporaryDirectory(prefix="gate-quality-") as tmp:
        work = Path(tmp)
        os.environ.setdefault("ROOFLINE_CACHE_DIR", str(work / "cache"))
        model = base_model(args.quick)
        onnx.save(model, str(work / "base.onnx"))
        print(
            f"model: {'tiny_cnn' if args.quick else 'mobilenet_v2'}, repeats {repeats}, {THREADS} thread(s)",
            flush=True,
        )
        stored_variant, stored_true = tune_variant(model, args.stored_target / 100, work, "stored")
        paired_variant, paired_true = tune_variant(model, args.paired_target / 100, work, "paired")

        rows: dict[str, dict[str, list]] = {}

        def note(cell: str, kind: str, value: object) -> None:
            rows.setdefault(cell, {}).setdefault(kind, []).append(value)

        for r in range(repeats):
            # stored mode: fresh baseline, unchanged run, slower run, each its own process
            project = new_project(work, "stored", ROOFLINE_TEST, work / "base.onnx")
            roofline_verdict(project, "--roofline-update")
            result = roofline_verdict(project, "--roofline-tolerance", "5")
            note("stored", "unchanged", result)
            shutil.copy(stored_variant, project / "model.onnx")
            result = roofline_verdict(project, "--roofline-tolerance", "5")
            note("stored", "slower", result)
            # paired mode
            project = new_project(work, "paired", ROOFLINE_TEST, work / "base.onnx")
            for cmd in (["init", "-q"], ["add", "model.onnx"], ["commit", "-qm", "model"]):
                subprocess.run(
                    ["git", "-c", "user.email=b@b", "-c", "user.name=b", *cmd],
                    cwd=project,
                    check=True,
                    capture_output=True,
                )
            result = roofline_verdict(project, "--roofline-compare-ref", "HEAD", "--roofline-tolerance", "2")
            note("paired", "unchanged", result)
            shutil.copy(paired_variant, project / "model.onnx")
            result = roofline_verdict(project, "--roofline-compare-ref", "HEAD", "--roofline-tolerance", "2")
            note("paired", "slower", result)
            if has_benchmark:
                test = BENCHMARK_TEST.format(threads=THREADS)
                project = new_project(work, "bench", test, work / "base.onnx")
                pytest_run(
                    project, "--benchmark-storage", str(project / ".benchmarks"), "--benchmark-save=base"
                )
                note("bench5", "unchanged", benchmark_alarm(project, "5%"))
                note("bench2", "unchanged", benchmark_alarm(project, "2%"))
                shutil.copy(stored_variant, project / "model.onnx")
                note("bench5", "slower", benchmark_alarm(project, "5%"))
                shutil.copy(paired_variant, project / "model.onnx")
                note("bench2", "slower", benchmark_alarm(project, "2%"))
            last = [
                f"{c}/{k}={v[-1][0] if isinstance(v[-1], tuple) else v[-1]}"
                for c, kinds in rows.items()
                for k, v in kinds.items()
            ]
            print(f"  repeat {r + 1}/{repeats}: " + ", ".join(last), flush=True)

        print()
        print(
            f"true slowdowns (paired, interleaved): stored variant {stored_true * 100:+.2f}%, "
            f"paired variant {paired_true * 100:+.2f}%"
        )
        print(f"{'gate':<48}{'false alarms':>14}{'inconclusive':>14}{'detections':>12}{'measure s':>11}")
        labels = {
            "stored": f"pytest-roofline stored, tol 5%, slowdown {stored_true * 100:.1f}%",
            "paired": f"pytest-roofline paired, tol 2%, slowdown {paired_true * 100:.1f}%",
            "bench5": f"pytest-benchmark median:5%, slowdown {stored_true * 100:.1f}%",
            "bench2": f"pytest-benchmark median:2%, slowdown {paired_true * 100:.1f}%",
        }
        for cell, kinds in rows.items():
            same, slow = kinds.get("unchanged", []), kinds.get("slower", [])
            if cell in ("stored", "paired"):
                alarms = sum(s[0] == "regression" for s in same)
                unsure = sum(s[0] == "inconclusive" for s in same + slow)
                hits = sum(s[0] == "regression" for s in slow)
                secs = float(np.nanmedian([s[2] for s in same + slow]))
                print(
                    f"{labels[cell]:<48}{alarms:>9}/{len(same):<4}{unsure:>10}/{len(same) + len(slow):<3}"
                    f"{hits:>8}/{len(slow):<3}{secs:>9.1f}"
                )
                ratios = ", ".join(f"{s[1]:.3f}" for s in same)
                print(f"    unchanged ratios: {ratios}")
                print(f"    slower ratios:    {', '.join(f'{s[1]:.3f}' for s in slow)}")
                print(f"    noise (CI half-width): {', '.join(f'{s[3] * 100:.1f}%' for s in same + slow)}")
            else:
                print(
                    f"{labels[cell]:<48}{sum(same):>9}/{len(same):<4}{'-':>10}    "
                    f"{sum(slow):>8}/{len(slow):<3}{'-':>9}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
