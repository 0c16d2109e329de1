"""Issue 31/35's stored-mode false alarm, reproduced: record a tiny MatMul model's baseline beside
busy processes, re-time it (``--roofline-retime``) against that baseline beside fewer, and print what
the gate decided each time.  The model is unchanged, so every ``regression`` is a false alarm.

    python benchmarks/stored_retime_loop.py --loops 6 --record-spinners 2 --retime-spinners 1

It runs ``pytest`` as ``tests/test_plugin_real.py::test_a_run_beside_a_busy_process_records_its_
baseline_with_the_load`` does (one intra-op thread, a fixed calibration, the tests' flat noise
model unless ``--packaged-noise``), in a fresh temporary project per loop; spinners are
``python3 -c 'while True: pass'`` started beside each run and killed after it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

ORT = ("--roofline-backend", "onnxruntime", "--roofline-option", "intra_op_threads=1")


def _pytest(project: Path, env: dict[str, str], spinners: int, *args: str) -> dict:
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(spinners)]
    try:
        time.sleep(0.3 if spin else 0.0)
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_perf.py", *ORT, *args],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
        )
    finally:
        for s in spin:
            s.kill()
            s.wait()
    report = project / args[args.index("--roofline-report") + 1]
    if not report.exists():
        raise SystemExit(f"pytest wrote no report (rc {done.returncode}):\n{done.stdout[-3000:]}")
    return json.loads(report.read_text())["results"][0]


def _line(label: str, result: dict, entry: dict | None = None) -> str:
    verdict = result["verdict"]
    gate = result["profile"]["extra"].get("gate", {})
    ci = verdict.get("ci")
    ci_text = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "-"
    ratio = verdict.get("ratio")
    load = (entry or {}).get("load") or {}
    figures = gate.get("figures") or []
    spread = (max(figures) / min(figures) - 1) if figures and min(figures) > 0 else float("nan")
    ratio_text = "-" if ratio is None else f"{ratio:.3f}"
    subject, control = gate.get("subject_p25", float("nan")), gate.get("control_p25", float("nan"))
    clock = (entry or {}).get("conditions", {}).get("clock", "wall") if entry else ""
    reasons = "; ".join(r for r in verdict.get("reasons", []) if "load" in r or "clock" in r)
    return (
        f"{label:7} {verdict['status']:12} ratio {ratio_text:6} ci {ci_text:16} "
        f"noise {verdict.get('noise') or 0:.3f} figures {len(figures)} spread {spread:+.1%} "
        f"subject_p25 {subject * 1e6:.2f}us control_p25 {control * 1e6:.2f}us"
        + (f" entry load other {load.get('other', 0):.2f} clock {clock}" if entry else "")
        + f" | {reasons[:200]}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loops", type=int, default=5)
    parser.add_argument("--record-spinners", type=int, default=2)
    parser.add_argument("--retime-spinners", type=int, default=1)
    parser.add_argument("--blocks", type=int, default=3, help="MatMul+Relu blocks of the 64x64 model")
    parser.add_argument(
        "--packaged-noise", action="store_true", help="the packaged noise model, not the tests'"
    )
    args = parser.parse_args()

    from _plugin_helpers import fixed_calibration, matmul_chain

    env = {k: v for k, v in os.environ.items() if k != "ROOFLINE_LOAD_LIMIT"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if not args.packaged_noise:
        env["ROOFLINE_NOISE_MODEL"] = str(ROOT / "tests" / "data" / "noise_model_flat.json")
    false = 0
    print(f"load average at start: {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        env["ROOFLINE_CACHE_DIR"] = str(fixed_calibration(Path(tmp), {"intra_op_threads": "1"}))
        for loop in range(args.loops):
            project = Path(tmp) / f"p{loop}"
            project.mkdir()
            matmul_chain(project / "mm.onnx", args.blocks)
            (project / "test_perf.py").write_text(
                'def test_mm(model_profile):\n    model_profile("mm.onnx", batch_size=4)\n'
            )
            first = _pytest(project, env, args.record_spinners, "--roofline-report", "r.json")
            (entry,) = json.loads((project / ".roofline" / "test_perf.json").read_text())["entries"].values()
            second = _pytest(
                project, env, args.retime_spinners, "--roofline-retime", "--roofline-report", "r2.json"
            )
            false += second["verdict"]["status"] == "regression"
            print(f"loop {loop} (load average {os.getloadavg()[0]:.2f})")
            print("  " + _line("record", first, entry))
            print("  " + _line("retime", second))
            sys.stdout.flush()
    print(f"false regressions: {false}/{args.loops}; load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
