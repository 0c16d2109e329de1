"""How well the history finds steps: detection delay, false change points, a creep.

Series are built from this machine's real per-run figures: ``--record N`` runs an unchanged tiny
CNN N times, each its own ``pytest --roofline-history`` process at default threads (so both of
this VM's speed states show up), into a history folder the analysis then reuses
(``--runs DIR``, default benchmarks/data/history-runs/).  From those figures (resampled in blocks
of consecutive runs, which keeps the machine's state runs intact) it builds:

* **steps**: a series with a 3 % step at a model change; found when a change point lands on it
  using at most 5 runs after it (target: ≥ 90 % of series);
* **false change points**: unchanged series in two settings — the model hash constant (the
  machine can never be blamed on the model), and the worst case, a new model hash at every run
  (a re-export at every commit that changes nothing) (target: ≤ 1 per 1,000 points);
* **creep**: 5 commits of +1.5 % each; found when a change point lands inside the creep.

Usage::

    python benchmarks/history_quality.py --record 200      # record real runs (minutes)
    python benchmarks/history_quality.py                   # analyse them
    python benchmarks/history_quality.py --series 30       # smaller smoke run
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

HERE = Path(__file__).resolve().parent
DEFAULT_RUNS = HERE / "data" / "history-runs"

TEST = """
def test_model(model_profile):
    model_profile("model.onnx")
"""


def record(runs: int, store: Path, budget: float) -> None:
    """Run the unchanged tiny CNN ``runs`` times, one pytest process each, into ``store``."""
    import onnx

    from pytest_roofline.zoo import tiny_cnn

    with tempfile.TemporaryDirectory(prefix="history-record-") as tmp:
        project = Path(tmp)
        onnx.save(tiny_cnn(batch=1), str(project / "model.onnx"))
        (project / "test_model.py").write_text(TEST)
        env = {
            **os.environ,
            "ROOFLINE_CACHE_DIR": os.environ.get("ROOFLINE_CACHE_DIR", str(project / "cache")),
        }
        for index in range(runs):
            started = time.monotonic()
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    f"--roofline-history={store}",
                    f"--roofline-budget={budget}",
                ],
                cwd=project,
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            status = "ok" if done.returncode == 0 else f"exit {done.returncode}"
            print(f"run {index + 1}/{runs}: {status} in {time.monotonic() - started:.1f} s", flush=True)


def load_figures(store: Path) -> np.ndarray:
    """The recorded figures in time order."""
    from pytest_roofline.history.store import JsonLinesStore

    points = JsonLinesStore(store).points()
    if not points:
        raise SystemExit(f"no recorded runs in {store}: run with --record N first")
    return np.asarray([p.value for p in points], dtype=float)


def block_resample(figures: np.ndarray, length: int, rng: np.random.Generator, block: int = 10) -> np.ndarray:
    """A series of ``length`` real figures: consecutive blocks drawn at random (state runs kept)."""
    out: list[float] = []
    while len(out) < length:
        start = int(rng.integers(0, max(len(figures) - block, 1)))
        out.extend(figures[start : start + block])
    return np.asarray(out[:length], dtype=float)


def step_detection(figures: np.ndarray, series: int, rng: np.random.Generator, step: float = 0.03) -> float:
    """Share of series whose step is found with at most 5 runs after it."""
    from pytest_roofline.history.changepoints import detect

    found = 0
    for _ in range(series):
        at = int(rng.integers(15, 40))
        values = block_resample(figures, at + 5, rng)
        values[at:] *= 1 + step
        hashes = ["a"] * at + ["b"] * 5
        steps, _ = detect(values, hashes)
        found += any(s[0] == at for s in steps)
    return found / series


def false_points(figures: np.ndarray, points: int, rng: np.random.Generator, per_run_hash: bool) -> float:
    """False change points per 1,000 unchanged points (series of 100)."""
    from pytest_roofline.history.changepoints import detect

    false, total = 0, 0
    while total < points:
        values = block_resample(figures, 100, rng)
        hashes = [str(i) for i in range(100)] if per_run_hash else ["a"] * 100
        steps, _ = detect(values, hashes)
        false += len(steps)
        total += 100
    return false * 1000 / total


def creep(figures: np.ndarray, series: int, rng: np.random.Generator) -> float:
    """Share of series where 5 commits of +1.5 % (3 runs each) yield a change point inside the creep."""
    from pytest_roofline.history.changepoints import detect

    found = 0
    for _ in range(series):
        before, per, after = 30, 3, 10
        values = block_resample(figures, before + 5 * per + after, rng)
        hashes = ["c0"] * before
        for k in range(5):
            start = before + k * per
            values[start:] *= 1.015
            hashes += [f"c{k + 1}"] * per
        hashes += ["c5"] * after
        steps, _ = detect(values, hashes)
        found += any(before <= s[0] <= before + 5 * per for s in steps)
    return found / series


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", type=int, default=0, metavar="N", help="record N real runs first")
    parser.add_argument("--runs", type=Path, default=DEFAULT_RUNS, help="history folder of recorded runs")
    parser.add_argument("--budget", type=float, default=2.0, help="gate budget per recorded run, seconds")
    parser.add_argument("--series", type=int, default=200, help="series per figure (default 200)")
    parser.add_argument("--points", type=int, default=20000, help="unchanged points for the false rate")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.record:
        record(args.record, args.runs, args.budget)
    figures = load_figures(args.runs)
    rng = np.random.default_rng(args.seed)
    spread = float(np.percentile(figures, 95) / np.percentile(figures, 5) - 1)
    print(f"recorded runs: {len(figures)} (figure p5-p95 spread {spread * 100:.1f} %), from {args.runs}")
    started = time.monotonic()
    print(
        f"3 % step found within 5 runs after it: {step_detection(figures, args.series, rng) * 100:.1f} % of "
        f"{args.series} series (target >= 90 %)"
    )
    print(
        f"false change points per 1,000 unchanged points, model hash constant: "
        f"{false_points(figures, args.points, rng, False):.2f} (target <= 1)"
    )
    print(
        f"false change points per 1,000 unchanged points, new model hash every run: "
        f"{false_points(figures, args.points, rng, True):.2f} (target <= 1)"
    )
    print(
        f"creep of 5 x +1.5 % found: {creep(figures, args.series, rng) * 100:.1f} % of {args.series} series"
    )
    print(f"analysis took {time.monotonic() - started:.1f} s")
    print("20-commit git scenario: not built in this script yet (see docs/history.md)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
