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
* **creep**: 5 commits of +1.5 % each; found when a change point lands inside the creep;
* **git scenario**: a repository of 20 commits of MobileNetV2, two adding blocks (about +4 % and
  +7 %), the plugin run once per commit; ``roofline history`` must name exactly those two commits,
  ``roofline bisect first last --threshold 3`` the first in <= ceil(log2 20) + 2 steps, < 10 min.

Usage::

    python benchmarks/history_quality.py --record 200      # record real runs (minutes)
    python benchmarks/history_quality.py                   # analyse them
    python benchmarks/history_quality.py --series 30 --git-commits 8 --quick   # smoke run
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
DEFAULT_RUNS = HERE / "data" / "history-runs"
ROOFLINE = str(Path(sys.executable).parent / "roofline")

TEST = """
def test_model(model_profile):
    model_profile("model.onnx")
"""


def pytest_history(project: Path, env: dict[str, str], history: str, budget: float) -> Any:
    """One plugin run of ``project`` into a history, its own process (the completed process)."""
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        history,
        f"--roofline-budget={budget}",
    ]
    return subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, check=False)


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
            done = pytest_history(project, env, f"--roofline-history={store}", budget)
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


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def git_scenario(commits: int, budget: float, quick: bool) -> None:
    """A repository of ``commits`` commits of MobileNetV2; two add blocks (about +4 % and +7 %).

    The plugin runs once per commit into an embedded history; then ``roofline history`` must name
    exactly those two commits and ``roofline bisect first last --threshold 3`` the first of them in
    at most ceil(log2 commits) + 2 steps and under 10 minutes.
    """
    import json
    import math
    import shutil

    import onnx

    sys.path.insert(0, str(HERE))
    from gate_quality import base_model, paired_slowdown, with_extra_blocks

    with tempfile.TemporaryDirectory(prefix="history-git-") as tmp:
        work, repo = Path(tmp) / "work", Path(tmp) / "repo"
        work.mkdir()
        repo.mkdir()
        base = base_model(quick)  # MobileNetV2; the tiny CNN in quick mode (one block ~ +10 %)
        onnx.save(base, str(work / "base.onnx"))
        onnx.save(with_extra_blocks(base, 2), str(work / "probe.onnx"))
        per_block = max((paired_slowdown(work / "base.onnx", work / "probe.onnx", threads="0") - 1) / 2, 1e-3)
        first_blocks = max(1, round(0.04 / per_block))
        second_blocks = first_blocks + max(1, round(0.07 / per_block))
        print(
            f"  one extra block: {per_block * 100:+.2f} %; steps of {first_blocks} and "
            f"{second_blocks - first_blocks} blocks",
            flush=True,
        )
        onnx.save(with_extra_blocks(base, first_blocks), str(work / "first.onnx"))
        onnx.save(with_extra_blocks(base, second_blocks), str(work / "second.onnx"))
        steps_at = {commits // 3: work / "first.onnx", 2 * commits // 3: work / "second.onnx"}
        _git(repo, "init", "-q")
        _git(repo, "config", "user.email", "bench@example.com")
        _git(repo, "config", "user.name", "bench")
        (repo / "test_model.py").write_text(TEST)
        (repo / ".gitignore").write_text(".roofline/\n__pycache__/\n")
        shas, model = [], work / "base.onnx"
        env = {**os.environ, "ROOFLINE_CACHE_DIR": os.environ.get("ROOFLINE_CACHE_DIR", str(work / "cache"))}
        env.pop("ROOFLINE_HISTORY", None)
        for index in range(commits):
            model = steps_at.get(index, model)
            shutil.copy(model, repo / "model.onnx")
            (repo / "CHANGES.txt").write_text(f"commit {index}\n")
            _git(repo, "add", "-A")
            _git(repo, "commit", "-qm", f"commit {index}")
            shas.append(_git(repo, "rev-parse", "HEAD"))
            pytest_history(repo, env, "--roofline-history", budget)
            print(f"  commit {index + 1}/{commits} measured", flush=True)
        listed = subprocess.run(
            [ROOFLINE, "history", "--format", "json"],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        view = json.loads(listed.stdout or "{}")
        found = [c["commit"] for s in view.get("series", []) for c in s["change_points"]]
        for series in view.get("series", []):
            figures = ", ".join(f"{p['value']:.4g}" for p in series["points"])
            print(f"  series {series['key']}: {len(series['points'])} points: {figures}")
        expected = [shas[i] for i in sorted(steps_at)]
        print(
            f"roofline history names {len(found)} change point(s); the two block commits: "
            f"{'exactly' if found == expected else 'NOT exactly'} "
            f"(found at commits {[shas.index(c) for c in found if c in shas]}, expected {sorted(steps_at)})"
        )
        started = time.monotonic()
        bisected = subprocess.run(
            [
                ROOFLINE,
                "bisect",
                shas[0],
                shas[-1],
                "--test",
                "test_model.py::test_model",
                "--threshold",
                "3",
                "--format",
                "json",
            ],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        took = time.monotonic() - started
        result = json.loads(bisected.stdout or "{}")
        culprit = result.get("culprit")
        limit = math.ceil(math.log2(commits)) + 2
        print(
            f"roofline bisect first last --threshold 3: culprit at commit "
            f"{shas.index(culprit) if culprit in shas else culprit} (expected {min(steps_at)}), "
            f"{result.get('steps')} steps (limit {limit}), {took:.0f} s (limit 600)"
            + (f"; error: {bisected.stderr.strip()}" if bisected.returncode else "")
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", type=int, default=0, metavar="N", help="record N real runs first")
    parser.add_argument("--runs", type=Path, default=DEFAULT_RUNS, help="history folder of recorded runs")
    parser.add_argument("--budget", type=float, default=2.0, help="gate budget per recorded run, seconds")
    parser.add_argument("--series", type=int, default=200, help="series per figure (default 200)")
    parser.add_argument("--points", type=int, default=20000, help="unchanged points for the false rate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="git scenario on the tiny CNN (smoke)")
    parser.add_argument(
        "--git-commits", type=int, default=20, help="commits of the git scenario (0: skip it)"
    )
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
    if args.git_commits:
        print(f"git scenario: {args.git_commits} commits, the plugin run once per commit", flush=True)
        git_scenario(args.git_commits, args.budget, args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
