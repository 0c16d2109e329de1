"""How well the history finds steps: detection delay, false change points, a creep, a git bisect.

Series are built from this machine's real plugin runs: ``--record N`` runs ``pytest
--roofline-history`` N times, each its own process at default threads (so both of this VM's speed
states show up), into a history folder the analysis then reuses (``--runs DIR``, default
benchmarks/data/history-round-pairs/; the former pairing's runs are in data/history-pairs/).  The
runs cycle through :data:`CYCLE`: MobileNetV2 (``--model tiny``: the tiny CNN) and a copy
differing in one weight's value, alternating, so every run is a new identity that the plugin times
beside the previous run's model, as it does at a real model change (``history/pairing.py``: the
gate's paired run, per-round ratios, at the configured threads) — a real A/A pairing; once a
cycle, the net with an extra block (a real step's pairing, printed beside the A/A ones to check
that a step's ratio scatters as an A/A ratio does).  From those runs (resampled in blocks of 10
consecutive runs, which keeps the machine's state runs, each run with its own pairing) it builds:

* **steps**: a series with a 3 % step at a new identity: the absolute figures after it times
  1.03, and the step's pairing a real A/A pairing's session ratios times 1.03; found when a change
  point lands on it using at most 5 runs after it (target: ≥ 90 % of series), and with 1;
* **false change points**: unchanged series with the identity constant, and the worst case, a new
  identity at every run, each with its real A/A pairing (target: ≤ 1 per 1,000 points);
* **creep**: 5 commits of +1.5 % each (3 runs each, pairings times 1.015); found when a change
  point lands inside the creep;
* **per zoo model** (``--model zoo``: one test per model of ``pytest_roofline.zoo.suite``, every
  model cycling through itself, a retrained copy and its slower variant with about 3 % more MACs,
  into data/history-zoo-steady/; the first recording, before STEP_PAIRS, in data/history-zoo-pairs/):
  each model's real A/A pairings judged by the detector as they are
  (false steps) and times 1.03 (found), its real ~3 % step pairings, the three figures above per
  model, and the worst model of each;
* **git scenario**: a repository of 20 commits of MobileNetV2, two adding blocks (about +4 % and
  +7 %, sized by a paired run at default threads), the plugin run once per commit;
  ``roofline history`` must name exactly those two commits, ``roofline bisect first last
  --threshold 3`` the first in <= ceil(log2 20) + 2 steps, < 10 min.

Usage::

    python benchmarks/history_quality.py --record 200 --git-commits 0   # record real runs (hours)
    python benchmarks/history_quality.py                   # analyse them, then the git scenario
    python benchmarks/history_quality.py --series 0        # the git scenario alone
    python benchmarks/history_quality.py --series 30 --git-commits 4 --quick   # smoke run
    python benchmarks/history_quality.py --model zoo --record 10 --git-commits 0   # the zoo (1 h)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

HERE = Path(__file__).resolve().parent
#: Recordings of the current pairing (per-round ratios at the configured threads, one probe per
#: series); ``data/history-pairs`` and ``data/history-pairs-8x2s`` hold the former pairing's runs.
DEFAULT_RUNS = HERE / "data" / "history-round-pairs"
#: The zoo's recordings (``--model zoo``): one series per zoo model (``data/history-zoo-pairs`` holds
#: the first, before ``STEP_PAIRS``).
ZOO_RUNS = HERE / "data" / "history-zoo-steady"
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


#: The recording's cycle of models: two nets that differ in one weight's value (a new identity at
#: every run, as a retrained export; nothing runs slower: the plugin times each beside the one
#: before, a real A/A pairing) and, once a cycle, the same net with an extra block (a real step,
#: to check that a step's paired ratio scatters as an A/A ratio does).
CYCLE = ("a", "a2", "a", "a2", "a", "a2", "a", "a2", "slower", "a2")


#: Initializer types a retrained export changes: weights, never a quantization scale (changing a
#: per-channel scale changed EfficientNet int8's kernels: its copy ran a real 4 % slower).
WEIGHT_TYPES = (
    onnx.TensorProto.FLOAT,
    onnx.TensorProto.FLOAT16,
    onnx.TensorProto.INT8,
    onnx.TensorProto.UINT8,
)


def retrained_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with one value of its largest weight nudged (a float by 1 %, an integer by one
    step): the same work, another graph, what a retrained export is (a model without weights in its
    main graph: another doc string)."""
    import onnx.numpy_helper

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    scales = {n.input[1] for n in copy.graph.node if n.op_type == "DequantizeLinear" and len(n.input) > 1}
    weights = [
        t
        for t in copy.graph.initializer
        if t.data_type in WEIGHT_TYPES and np.prod(t.dims) >= 16 and t.name not in scales
    ]
    if not weights:
        copy.doc_string += " (retrained)"
        return copy
    weight = max(weights, key=lambda t: int(np.prod(t.dims)))
    values = onnx.numpy_helper.to_array(weight).copy()
    if np.issubdtype(values.dtype, np.integer):
        values.flat[0] = (
            values.flat[0] + 1 if values.flat[0] < np.iinfo(values.dtype).max else values.flat[0] - 1
        )
    else:
        values.flat[0] = values.flat[0] * 1.01 if values.flat[0] != 0 else 1e-3
    weight.CopyFrom(onnx.numpy_helper.from_array(values, weight.name))
    return copy


def record_models(folder: Path, model: str) -> dict[str, Path]:
    """The recording's models in ``folder``: ``a``, ``a2`` (other weight values), ``slower``."""
    sys.path.insert(0, str(HERE))
    from gate_quality import base_model, with_extra_blocks

    base = base_model(model == "tiny")
    paths = {name: folder / f"{name}.onnx" for name in ("a", "a2", "slower")}
    onnx.save(base, str(paths["a"]))
    onnx.save(retrained_copy(base), str(paths["a2"]))
    onnx.save(with_extra_blocks(base, 1), str(paths["slower"]))
    return paths


def record(runs: int, store: Path, budget: float, model: str) -> None:
    """``runs`` plugin runs, one pytest process each, cycling through :data:`CYCLE` into ``store``."""
    import shutil

    with tempfile.TemporaryDirectory(prefix="history-record-") as tmp:
        project = Path(tmp)
        (project / "models").mkdir()
        paths = record_models(project / "models", model)
        (project / "test_model.py").write_text(TEST)
        _record_runs(
            project, runs, store, budget, lambda name: shutil.copy(paths[name], project / "model.onnx")
        )


#: The zoo recording's step: the slower variant duplicates heavy nodes until they add this share of
#: the MACs (``zoo.suite.slower_variant``): about the 3 % step the targets inject.
ZOO_STEP_MACS = 0.03


def record_zoo(runs: int, store: Path, budget: float) -> None:
    """``runs`` plugin runs of a project with one test per zoo model, cycling every model through
    :data:`CYCLE` (itself, a retrained copy, its slower variant) into ``store``: one series per model."""
    import json

    sys.path.insert(0, str(HERE))
    from zoo_gate import ROOFLINE_TEST, put_models, save_like

    from pytest_roofline.zoo import suite

    with tempfile.TemporaryDirectory(prefix="history-zoo-") as tmp:
        work, project = Path(tmp), Path(tmp) / "project"
        print("writing the zoo and its variants", flush=True)
        originals = suite.write_zoo(work / "zoo")
        variants: dict[str, dict[str, Path]] = {"a": originals, "a2": {}, "slower": {}}
        for name, path in originals.items():
            model = onnx.load(str(path))
            for kind, changed in (
                ("a2", retrained_copy(model)),
                ("slower", suite.slower_variant(model, at_least=ZOO_STEP_MACS)),
            ):
                variants[kind][name] = work / kind / name / path.name
                save_like(changed, variants[kind][name])
        (project / "models").mkdir(parents=True)
        dims = {entry.name: dict(entry.dims) for entry in suite.ZOO}
        models = {n: [f"models/{n}/{p.name}", dims[n]] for n, p in originals.items()}
        (project / "models.json").write_text(json.dumps(models, indent=1))
        (project / "test_zoo.py").write_text(ROOFLINE_TEST)
        _record_runs(project, runs, store, budget, lambda name: put_models(project, variants[name]))


def _record_runs(
    project: Path, runs: int, store: Path, budget: float, place: Callable[[str], object]
) -> None:
    """The recording loop: ``place`` puts :data:`CYCLE`'s next models in ``project``, then one
    pytest process runs it into the history ``store``; each run logged in ``store/record.log``."""
    env = {
        **os.environ,
        "ROOFLINE_CACHE_DIR": os.environ.get("ROOFLINE_CACHE_DIR", str(project / "cache")),
    }
    env.pop("ROOFLINE_HISTORY", None)
    store.mkdir(parents=True, exist_ok=True)
    log = store / "record.log"
    for index in range(runs):
        name = CYCLE[index % len(CYCLE)]
        place(name)
        started = time.monotonic()
        load = os.getloadavg()[0]
        done = pytest_history(project, env, f"--roofline-history={store}", budget)
        took = time.monotonic() - started
        status = "ok" if done.returncode == 0 else f"exit {done.returncode}"
        with log.open("a") as handle:
            handle.write(f"{time.time():.0f} {name} load1={load:.2f} {status} {took:.1f}s\n")
        print(f"run {index + 1}/{runs} ({name}, load {load:.1f}): {status} in {took:.1f} s", flush=True)
        if done.returncode:
            sys.stderr.write(done.stdout[-1500:])


@dataclass(frozen=True)
class Recorded:
    """The recorded runs: absolute figures of the unchanged model, real A/A pairings, real step pairings."""

    figures: np.ndarray  # the unchanged model's figures in time order (both copies)
    same: list[Any]  # Paired records of a copy against the other copy (nothing slower)
    step: list[Any]  # Paired records of the slower net against the unchanged one
    back: list[Any]  # ... of the unchanged one against the slower net
    order: list[Any]  # per unchanged point in time order: its A/A pairing or None
    first: str = ""  # the identity of the first recorded model (``a`` of :data:`CYCLE`)
    probes: int = 0  # distinct control probes the unchanged points were normalized with
    unprobed: int = 0  # unchanged points that recorded no probe (recorded before the series' probe)

    def outdated(self) -> list[str]:
        """Why these recordings do not measure the current pairing and figure (empty: they do)."""
        from pytest_roofline.history.points import ROUND_RATIOS

        why = []
        kinds = {p.figure for p in (*self.same, *self.step, *self.back)}
        if kinds - {ROUND_RATIOS}:
            why.append(
                "their pairings hold per-session p25 ratios at one thread, not the gate's per-round "
                "ratios at the configured threads"
            )
        if self.unprobed:
            why.append(
                f"{self.unprobed} of {len(self.figures)} absolute figures were normalized by a control "
                "probe fitted anew each run, not the series' one probe"
            )
        return why


def load_series(store: Path) -> dict[str, Recorded]:
    """The recorded runs of :func:`record` / :func:`record_zoo` per series (test name), read back
    from the history."""
    from pytest_roofline.history.points import series_of
    from pytest_roofline.history.store import JsonLinesStore

    grouped = series_of(JsonLinesStore(store).points())
    if not grouped:
        raise SystemExit(f"no recorded runs in {store}: run with --record N first")
    return {points[0].test.rsplit("[", 1)[-1].rstrip("]"): recorded_of(points) for points in grouped.values()}


def recorded_of(points: list[Any]) -> Recorded:
    """One series' recorded runs (in time order), sorted by what ran."""
    slower = _slower_identity(points)
    figures: list[float] = []
    same: list[Any] = []
    step: list[Any] = []
    back: list[Any] = []
    order: list[Any] = []
    for point in points:
        pair = point.paired
        if point.identity == slower:
            if pair is not None:
                step.append(pair)
            continue
        figures.append(point.value)
        if pair is not None and pair.against == slower:
            back.append(pair)
            order.append(None)
        else:
            if pair is not None:
                same.append(pair)
            order.append(pair)
    unchanged = [p for p in points if p.identity != slower]
    probes = {tuple(sorted(p.probe.items())) for p in unchanged if p.probe}
    unprobed = sum(1 for p in unchanged if not p.probe)
    first = points[0].identity if points else ""
    return Recorded(np.asarray(figures, dtype=float), same, step, back, order, first, len(probes), unprobed)


def _slower_identity(points: list[Any]) -> str:
    """The identity of the slower net: of the three recorded, the one run least often (once a cycle
    of :data:`CYCLE`; the absolute figures cannot tell it on a busy machine)."""
    by: dict[str, int] = {}
    for point in points:
        by[point.identity] = by.get(point.identity, 0) + 1
    if len(by) < 3:
        return ""
    return min(by, key=lambda k: (by[k], k))


def block_resample(
    recorded: Recorded, length: int, rng: np.random.Generator, block: int = 10
) -> tuple[np.ndarray, list[Any]]:
    """``length`` consecutive real runs drawn in blocks (the machine's state runs kept), each with its
    real A/A pairing (a random one where its own paired against the slower net, or none was timed)."""
    values: list[float] = []
    pairs: list[Any] = []
    figures = recorded.figures
    while len(values) < length:
        start = int(rng.integers(0, max(len(figures) - block, 1)))
        values.extend(figures[start : start + block])
        pairs.extend(recorded.order[start : start + block])
    pairs = [p if p is not None else recorded.same[int(rng.integers(len(recorded.same)))] for p in pairs]
    return np.asarray(values[:length], dtype=float), pairs[:length]


def step_detection(
    recorded: Recorded, series: int, rng: np.random.Generator, step: float = 0.03
) -> tuple[float, float]:
    """Shares of series whose step (a new model, its real A/A pairing times 1 + ``step``) is found
    with at most 5 runs after it, and with 1 run after it."""
    from pytest_roofline.history.changepoints import detect

    found = first = 0
    for _ in range(series):
        at = int(rng.integers(15, 40))
        values, pairs = block_resample(recorded, at + 5, rng)
        values[at:] *= 1 + step
        hashes = ["a"] * at + ["b"] * 5
        paired = [None] * at + [pairs[at].scaled(1 + step)] + [None] * 4
        steps, _ = detect(values, hashes, paired=paired)
        found += any(s[0] == at for s in steps)
        steps, _ = detect(values[: at + 1], hashes[: at + 1], paired=paired[: at + 1])
        first += any(s[0] == at for s in steps)
    return found / series, first / series


def false_points(recorded: Recorded, points: int, rng: np.random.Generator, per_run_identity: bool) -> float:
    """False change points per 1,000 unchanged points (series of 100); with a new identity at every
    run each point carries its real A/A pairing against the one before."""
    from pytest_roofline.history.changepoints import detect

    false, total = 0, 0
    while total < points:
        values, pairs = block_resample(recorded, 100, rng)
        hashes = [str(i) for i in range(100)] if per_run_identity else ["a"] * 100
        paired = [None, *pairs[1:]] if per_run_identity else []
        steps, _ = detect(values, hashes, paired=paired)
        false += len(steps)
        total += 100
    return false * 1000 / total


def creep(recorded: Recorded, series: int, rng: np.random.Generator) -> tuple[float, float]:
    """5 commits of +1.5 % (3 runs each): the share of series with a change point inside the creep,
    and the mean share of the 5 commits named."""
    from pytest_roofline.history.changepoints import detect

    found, named = 0, 0.0
    for _ in range(series):
        before, per, after = 30, 3, 10
        values, pairs = block_resample(recorded, before + 5 * per + after, rng)
        hashes = ["c0"] * before
        paired: list[Any] = [None] * len(values)
        for k in range(5):
            start = before + k * per
            values[start:] *= 1.015
            hashes += [f"c{k + 1}"] * per
            paired[start] = pairs[start].scaled(1.015)
        hashes += ["c5"] * after
        steps, _ = detect(values, hashes, paired=paired)
        at = {s[0] for s in steps if before <= s[0] < before + 5 * per}
        found += bool(at)
        named += len(at & {before + k * per for k in range(5)}) / 5
    return found / series, named / series


def pair_spread(pairs: list[Any]) -> str:
    """Median ratio and the p5-p95 of the pairings' median ratios."""
    if not pairs:
        return "none recorded"
    ratios = np.asarray([p.ratio for p in pairs])
    low, mid, high = np.percentile(ratios, [5, 50, 95])
    return (
        f"{len(pairs)}: median {mid:.4f}, p5-p95 {low:.4f}-{high:.4f} ({(high / low - 1) * 100:.1f} % wide)"
    )


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def scenario_repo(
    work: Path, repo: Path, commits: int, quick: bool, after_commit: Callable[[int], object] | None = None
) -> tuple[list[str], dict[int, Path]]:
    """The git scenario's repository in ``repo`` (models built in ``work``): ``commits`` commits of
    MobileNetV2 (the tiny CNN when ``quick``), two of them adding blocks (about +4 % and +7 %,
    sized by a paired run at default threads); ``after_commit(index)`` runs after each commit.

    Returns the commits' shas (oldest first) and the step commits' indices with their models."""
    import shutil

    import onnx

    sys.path.insert(0, str(HERE))
    from gate_quality import base_model, paired_slowdown, with_extra_blocks

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
    for index in range(commits):
        model = steps_at.get(index, model)
        shutil.copy(model, repo / "model.onnx")
        (repo / "CHANGES.txt").write_text(f"commit {index}\n")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-qm", f"commit {index}")
        shas.append(_git(repo, "rev-parse", "HEAD"))
        if after_commit is not None:
            after_commit(index)
    return shas, steps_at


def run_bisect(repo: Path, env: dict[str, str], good: str, bad: str, *more: str) -> tuple[Any, float, str]:
    """``roofline bisect GOOD BAD --test test_model.py::test_model --threshold 3`` in ``repo``:
    its JSON result, the seconds it took, and its error (empty when it exited 0)."""
    import json

    command = [ROOFLINE, "bisect", good, bad, "--test", "test_model.py::test_model", "--threshold", "3"]
    started = time.monotonic()
    done = subprocess.run(
        [*command, *more, "--format", "json"], cwd=repo, env=env, capture_output=True, text=True, check=False
    )
    took = time.monotonic() - started
    return json.loads(done.stdout or "{}"), took, done.stderr.strip() if done.returncode else ""


def git_scenario(commits: int, budget: float, quick: bool) -> None:
    """A repository of ``commits`` commits of MobileNetV2; two add blocks (about +4 % and +7 %).

    The plugin runs once per commit into an embedded history; then ``roofline history`` must name
    exactly those two commits and ``roofline bisect first last --threshold 3`` the first of them in
    at most ceil(log2 commits) + 2 steps and under 10 minutes.
    """
    import json
    import math

    with tempfile.TemporaryDirectory(prefix="history-git-") as tmp:
        work, repo = Path(tmp) / "work", Path(tmp) / "repo"
        work.mkdir()
        repo.mkdir()
        env = {**os.environ, "ROOFLINE_CACHE_DIR": os.environ.get("ROOFLINE_CACHE_DIR", str(work / "cache"))}
        env.pop("ROOFLINE_HISTORY", None)
        measured = 0.0

        def run_plugin(index: int) -> None:
            nonlocal measured
            started = time.monotonic()
            done = pytest_history(repo, env, "--roofline-history", budget)
            measured += time.monotonic() - started
            status = "" if done.returncode == 0 else f" (pytest exit {done.returncode})"
            print(f"  commit {index + 1}/{commits} measured{status}", flush=True)

        shas, steps_at = scenario_repo(work, repo, commits, quick, run_plugin)
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
            for change in series["change_points"]:
                where = shas.index(change["commit"]) if change["commit"] in shas else change["commit"]
                ci = change["ci"] or [math.nan, math.nan]
                print(
                    f"  change point at commit {where}: {change['change'] * 100:+.1f} % "
                    f"(95 % CI {ci[0] * 100:+.1f} to {ci[1] * 100:+.1f} %)"
                )
        from pytest_roofline.history.store import JsonLinesStore

        for point in sorted(JsonLinesStore(repo / ".roofline" / "history").points(), key=lambda p: p.order):
            if point.paired is not None:
                low, high = point.paired.ci() or (math.nan, math.nan)
                strict = point.paired.ci(0.99) or (math.nan, math.nan)
                print(
                    f"  paired at commit {shas.index(point.commit) if point.commit in shas else '?'}: "
                    f"ratio {point.paired.ratio:.4f} (95 % CI {low:.4f}-{high:.4f}, 99 % "
                    f"{strict[0]:.4f}-{strict[1]:.4f}, {len(point.paired.figures)} session pairs, "
                    f"{point.paired.figure})"
                )
        print(f"  {commits} plugin runs took {measured:.0f} s")
        expected = [shas[i] for i in sorted(steps_at)]
        print(
            f"roofline history names {len(found)} change point(s); the two block commits: "
            f"{'exactly' if found == expected else 'NOT exactly'} "
            f"(found at commits {[shas.index(c) for c in found if c in shas]}, expected {sorted(steps_at)})"
        )
        result, took, error = run_bisect(repo, env, shas[0], shas[-1])
        culprit = result.get("culprit")
        limit = math.ceil(math.log2(commits)) + 2
        print(
            f"roofline bisect first last --threshold 3: culprit at commit "
            f"{shas.index(culprit) if culprit in shas else culprit} (expected {min(steps_at)}), "
            f"{result.get('steps')} steps (limit {limit}), {took:.0f} s (limit 600)"
            + (f"; error: {error}" if error else "")
        )
        for verdict in result.get("verdicts", []):
            at = shas.index(verdict["commit"]) if verdict["commit"] in shas else verdict["commit"]
            print(f"  bisect: commit {at} {verdict['status']} (ratio {verdict['ratio']:.4f})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", type=int, default=0, metavar="N", help="record N real runs first")
    parser.add_argument(
        "--runs", type=Path, help=f"history folder of recorded runs (default {DEFAULT_RUNS}; zoo: {ZOO_RUNS})"
    )
    parser.add_argument("--budget", type=float, default=2.0, help="gate budget per plugin run, seconds")
    parser.add_argument(
        "--model",
        choices=("mobilenet", "tiny", "zoo"),
        default="mobilenet",
        help="the recorded net (default MobileNetV2); zoo: one test per zoo model, their own series",
    )
    parser.add_argument(
        "--series", type=int, default=200, help="series per figure (default 200; 0: git scenario only)"
    )
    parser.add_argument("--points", type=int, default=20000, help="unchanged points for the false rate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="git scenario on the tiny CNN (smoke)")
    parser.add_argument(
        "--git-commits", type=int, default=20, help="commits of the git scenario (0: skip it)"
    )
    args = parser.parse_args(argv)
    args.runs = (args.runs or (ZOO_RUNS if args.model == "zoo" else DEFAULT_RUNS)).resolve()
    if args.record and args.model == "zoo":
        record_zoo(args.record, args.runs, args.budget)
    elif args.record:
        record(args.record, args.runs, args.budget, args.model)
    if args.series > 0:
        analyse(args)
    if args.git_commits:
        print(f"git scenario: {args.git_commits} commits, the plugin run once per commit", flush=True)
        git_scenario(args.git_commits, args.budget, args.quick)
    return 0


def analyse(args: argparse.Namespace) -> None:
    """The injected-step figures from the recorded runs: one series, or per zoo model and the worst."""
    series = load_series(args.runs)
    if len(series) == 1:
        analyse_one(next(iter(series.values())), args)
    else:
        analyse_zoo(series, args)


def _outdated(recorded: Recorded) -> None:
    for why in recorded.outdated():
        print(
            f"  OUTDATED RECORDING: {why}; these figures do not measure the current history: "
            f"re-record them (--record N --runs DIR) before reading its figures",
            flush=True,
        )


def analyse_one(recorded: Recorded, args: argparse.Namespace) -> None:
    """The figures of one recorded series (MobileNetV2 or the tiny CNN)."""
    figures = recorded.figures
    rng = np.random.default_rng(args.seed)
    spread = float(np.percentile(figures, 95) / np.percentile(figures, 5) - 1)
    print(
        f"recorded runs of the unchanged net: {len(figures)} "
        f"(figure p5-p95 spread {spread * 100:.1f} %, {recorded.probes} control probe(s)), from {args.runs}"
    )
    _outdated(recorded)
    print(f"  A/A pairings (a copy beside the other copy): {pair_spread(recorded.same)}")
    print(f"  real step pairings (the net + one block beside the net): {pair_spread(recorded.step)}")
    print(f"  ... and back (the net beside the net + one block): {pair_spread(recorded.back)}")
    if len(recorded.same) < 5:
        raise SystemExit("too few A/A pairings recorded to build series: record more runs")
    started = time.monotonic()
    within, first = step_detection(recorded, args.series, rng)
    print(
        f"3 % step found within 5 runs after it: {within * 100:.1f} % of {args.series} series "
        f"(target >= 90 %); at the first run after it: {first * 100:.1f} %"
    )
    print(
        f"false change points per 1,000 unchanged points, the same identity throughout: "
        f"{false_points(recorded, args.points, rng, False):.2f} (target <= 1)"
    )
    print(
        f"false change points per 1,000 unchanged points, a new identity every run (each paired): "
        f"{false_points(recorded, args.points, rng, True):.2f} (target <= 1)"
    )
    found, named = creep(recorded, args.series, rng)
    print(
        f"creep of 5 x +1.5 % found: {found * 100:.1f} % of {args.series} series; "
        f"{named * 100:.1f} % of its 5 commits named"
    )
    print(f"analysis took {time.monotonic() - started:.1f} s")


def paired_step(pair: Any) -> bool:
    """Whether the history's detector calls ``pair`` (a new model beside the previous) a step."""
    from pytest_roofline.history.changepoints import detect

    steps, _ = detect([1.0, 1.0], ["before", "after"], paired=[None, pair])
    return bool(steps)


@dataclass(frozen=True)
class ModelFigures:
    """One zoo model's history figures from its recorded runs."""

    name: str
    runs: int
    spread: float  # p5-p95 of the unchanged figures, a fraction
    pairs: int  # real A/A pairings
    flagged: int  # ... the detector called a step (false)
    found_3: int  # ... times 1.03 that it called a step
    steps: str  # the real step pairings: ratio, called a step or not
    within: float  # share of series whose 3 % step is found within 5 runs
    false_rate: float  # per 1,000 unchanged points, a new identity every run
    creep: float  # share of series whose creep is found
    false_steps: tuple[str, ...] = ()  # the A/A pairings called a step: ratio, 99 % interval, pairs
    differ: float | None = None  # the copies' real difference (a2 over a - 1) where every pairing saw it
    session_pairs: float = 0.0  # median session pairs of an A/A pairing
    half: float = 0.0  # median 99 % log half-width of an A/A pairing, as judged (its opening order out)
    half_sessions: float = 0.0  # ... judged on its session figures instead


def model_figures(name: str, recorded: Recorded, args: argparse.Namespace) -> ModelFigures:
    rng = np.random.default_rng(args.seed)
    figures = recorded.figures
    series = max(50, args.series // 4)
    steps = ", ".join(f"{p.ratio:.3f} {'found' if paired_step(p) else 'missed'}" for p in recorded.step)
    flagged = [p for p in recorded.same if paired_step(p)]
    oriented = [p.ratio if p.against == recorded.first else 1 / p.ratio for p in recorded.same]
    # every pairing a step, both directions agreeing: the two copies really differ in speed
    differ = (
        float(np.exp(np.mean(np.log(oriented)))) - 1
        if len(flagged) == len(oriented) >= 3 and (min(oriented) > 1 or max(oriented) < 1)
        else None
    )
    return ModelFigures(
        name=name,
        runs=len(figures) + len(recorded.step),
        spread=float(np.percentile(figures, 95) / np.percentile(figures, 5) - 1),
        pairs=len(recorded.same),
        flagged=len(flagged),
        found_3=sum(paired_step(p.scaled(1.03)) for p in recorded.same),
        steps=steps or "none",
        within=step_detection(recorded, series, rng)[0],
        false_rate=false_points(recorded, max(2000, args.points // 10), rng, True),
        creep=creep(recorded, series, rng)[0],
        false_steps=tuple(describe_pair(p) for p in flagged),
        differ=differ,
        session_pairs=float(np.median([len(p.figures) for p in recorded.same])),
        half=float(np.median([half_width(p) for p in recorded.same])),
        half_sessions=float(np.median([half_width(p, order_out=False) for p in recorded.same])),
    )


def half_width(pair: Any, order_out: bool = True) -> float:
    """The 99 % log half-width of ``pair``'s interval: as judged, its opening order taken out
    (``Paired.judged``), or on its session figures as they are (judged as the older per-session
    kind, whose order is not taken out)."""
    import dataclasses

    from pytest_roofline.history.points import SESSION_RATIOS

    judged = pair if order_out else dataclasses.replace(pair, figure=SESSION_RATIOS)
    low, high = judged.ci(0.99) or (float("nan"), float("nan"))
    return float(np.log(high / low) / 2.0)


def describe_pair(pair: Any) -> str:
    """``1.020 (99 % 1.010-1.031, 8 pairs)``."""
    low, high = pair.ci(0.99) or (float("nan"), float("nan"))
    return f"{pair.ratio:.3f} (99 % {low:.3f}-{high:.3f}, {len(pair.figures)} pairs)"


def false_bound(flagged: int, pairs: int) -> float:
    """The exact (Clopper-Pearson) one-sided 95 % upper bound of a rate seen ``flagged`` times in
    ``pairs``: what ``pairs`` real A/A pairings can show at most (0 of 150 bounds it at 2 %)."""
    import math

    def at_most(rate: float) -> float:  # P(X <= flagged) for X ~ Binomial(pairs, rate)
        return sum(math.comb(pairs, k) * rate**k * (1 - rate) ** (pairs - k) for k in range(flagged + 1))

    low, high = 0.0, 1.0
    for _ in range(60):
        low, high = ((low + high) / 2, high) if at_most((low + high) / 2) > 0.05 else (low, (low + high) / 2)
    return high


def analyse_zoo(series: dict[str, Recorded], args: argparse.Namespace) -> None:
    """Per zoo model: its real A/A pairings judged as they are and times 1.03, its real ~3 % step
    pairings, and the injected-series figures; then the worst model of each."""
    print(f"recorded zoo runs: {len(series)} models, from {args.runs}")
    _outdated(next(iter(series.values())))
    started = time.monotonic()
    rows: list[ModelFigures] = []
    for name, recorded in sorted(series.items()):
        if len(recorded.same) < 2:
            print(f"  {name}: only {len(recorded.same)} A/A pairing(s) recorded: left out")
            continue
        rows.append(model_figures(name, recorded, args))
    print(
        f"{'model':<20} {'runs':>4} {'spread':>7} {'A/A':>4} {'false':>5} {'x1.03':>6} "
        f"{'in 5':>6} {'false/1k':>8} {'creep':>6} {'pairs':>5} {'±99%':>6} {'(sess)':>6}  "
        "real ~3 % step pairings"
    )
    for r in rows:
        print(
            f"{r.name:<20} {r.runs:>4} {r.spread * 100:>6.1f}% {r.pairs:>4} {r.flagged:>5} "
            f"{r.found_3:>3}/{r.pairs:<2} {r.within * 100:>5.0f}% {r.false_rate:>8.2f} "
            f"{r.creep * 100:>5.0f}% {r.session_pairs:>5.0f} {r.half * 100:>5.2f}% "
            f"{r.half_sessions * 100:>5.2f}%  {r.steps}"
        )
    differing = [r for r in rows if r.differ is not None]
    for r in differing:
        print(
            f"  {r.name}: its two copies differ: every one of its {r.pairs} pairings a step, both "
            f"directions agreeing, the copy {(r.differ or 0) * 100:+.1f} %: real steps, left out of "
            "the A/A figures below"
        )
    rows = [r for r in rows if r.differ is None]
    pairs = sum(r.pairs for r in rows)
    for r in rows:
        for text in r.false_steps:
            print(f"  A/A pairing called a step: {r.name} {text}")
    flagged = sum(r.flagged for r in rows)
    print(
        f"A/A pairings called a step (false): {flagged} of {pairs} (95 % upper bound of the rate per "
        f"pairing: {false_bound(flagged, pairs) * 1000:.0f} per 1,000); times 1.03 called a step: "
        f"{sum(r.found_3 for r in rows)} of {pairs}"
    )
    worst = min(rows, key=lambda r: r.within)
    print(
        f"3 % step found within 5 runs: worst model {worst.name} {worst.within * 100:.1f} % "
        f"(target >= 90 %); mean {np.mean([r.within for r in rows]) * 100:.1f} %"
    )
    worst = max(rows, key=lambda r: r.false_rate)
    print(
        f"false change points per 1,000 points (a new identity every run): worst model {worst.name} "
        f"{worst.false_rate:.2f} (target <= 1); mean {np.mean([r.false_rate for r in rows]):.2f}"
    )
    worst = min(rows, key=lambda r: r.creep)
    print(
        f"creep of 5 x +1.5 % found: worst model {worst.name} {worst.creep * 100:.1f} %; "
        f"mean {np.mean([r.creep for r in rows]) * 100:.1f} %"
    )
    print(f"analysis took {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    raise SystemExit(main())
