"""How well ``roofline diff`` names what changed and predicts what it costs, on real exports.

Pairs: a residual CNN and a transformer encoder exported by PyTorch (``benchmarks/diff_exports.py``,
run in a side environment with torch), each as a base, the base exported again, and three
variants (one block added, one layer widened, one block in float16), with both exporters.

Targets (issue 16):

1. the diff names exactly the changed blocks, and the re-exported base reads as unchanged;
2. the predicted latency change is within 3 percentage points of the paired measurement
   (onnxruntime CPU, ``intra_op_threads=1``; the default-threads figure is reported too).

Run (exports into a temp folder with the given torch interpreter, or reuse ``--exports``)::

    python benchmarks/diff_quality.py --torch-python /work/venv-torch-b/bin/python
    python benchmarks/diff_quality.py --exports /tmp/roofline-diff --sessions 10 --rounds 30
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_roofline.api import profile_model
from pytest_roofline.backends.base import get_backend
from pytest_roofline.diff import diff_summaries, predict, summarize
from pytest_roofline.diff.explain import agreement
from pytest_roofline.gate.paired import measure_change
from pytest_roofline.roofline.calibrate import calibrate

TARGET_PP = 3.0
#: A measurement whose 95 % CI half-width exceeds this cannot judge a 3-point target.
PRECISE_PP = 2.0
HERE = Path(__file__).resolve().parent


def export(torch_python: str, out: Path) -> dict[str, Any]:
    """Run the export script in the torch environment; returns the manifest."""
    command = [torch_python, str(HERE / "diff_exports.py"), "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        sys.exit(f"export failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    return json.loads((out / "manifest.json").read_text())


def structure(manifest: dict[str, Any]) -> int:
    """Target 1: blocks named exactly; the re-export unchanged.  Returns the number of misses."""
    print("== structure: blocks the diff names vs the blocks changed in the source ==")
    print(f"{'family':<12} {'variant':<8} {'exporter':<8} {'nodes':>5} {'renamed':>7} {'ms':>5}  result")
    misses = 0
    for pair in manifest["pairs"]:
        start = time.perf_counter()
        old, new = summarize(pair["old"]), summarize(pair["new"])
        diff = diff_summaries(old, new)
        took = (time.perf_counter() - start) * 1e3
        got = [[b.kind, b.name] for b in diff.blocks]
        expected = pair["expected"]
        ok = got == expected and diff.is_unchanged == (not expected) and not diff.rewired
        misses += not ok
        said = diff.headline() if ok else f"MISS: got {got}, expected {expected}"
        print(
            f"{pair['family']:<12} {pair['variant']:<8} {pair['exporter']:<8} {len(new.nodes):>5} "
            f"{diff.renamed:>7} {took:>5.0f}  {'ok  ' if ok else ''}{said}"
        )
    print(f"structure: {len(manifest['pairs']) - misses}/{len(manifest['pairs'])} pairs named exactly")
    return misses


def timing(
    manifest: dict[str, Any], threads: str, exporters: list[str], sessions: int, rounds: int
) -> list[float]:
    """Target 2 for one thread setting: predicted vs paired measured change.

    Returns the gaps (pp) of the pairs measured precisely enough to judge (CI half-width within
    :data:`PRECISE_PP`); on a busy machine most are not, and the table says so.
    """
    options = {"intra_op_threads": threads} if threads != "default" else {}
    backend = get_backend("onnxruntime", options)
    roofline = calibrate(backend)
    print(f"\n== prediction vs paired measurement: onnxruntime CPU, threads={threads} ==")
    print(
        f"{'family':<12} {'variant':<8} {'exporter':<8} {'FLOPs':>7} {'default':>8} {'predicted':>9} "
        f"{'measured':>8} {'95% CI':>17} {'gap pp':>6}  agreement, target"
    )
    gaps = []
    bases: dict[tuple[str, str], Any] = {}
    for pair in manifest["pairs"]:
        if pair["exporter"] not in exporters:
            continue
        key = (pair["family"], pair["exporter"])
        if key not in bases:
            profile = profile_model(pair["old"], backend=backend, roofline=roofline, profile_iterations=20)
            bases[key] = (summarize(pair["old"]), profile)
        old, profile = bases[key]
        diff = diff_summaries(old, summarize(pair["new"]))
        predicted = predict(diff, roofline, profile).fraction or 0.0
        no_profile = predict(diff, roofline).fraction or 0.0
        verdict = measure_change(pair["old"], pair["new"], backend, sessions=sessions, rounds=rounds)
        measured = (verdict.ratio or 1.0) - 1
        ci = (verdict.ci[0] - 1, verdict.ci[1] - 1) if verdict.ci else None
        gap = (predicted - measured) * 100
        precise = ci is not None and (ci[1] - ci[0]) * 50 <= PRECISE_PP
        if precise:
            gaps.append(gap)
        said, _ = agreement(predicted, measured, ci)
        target = (
            ("within 3 pp" if abs(gap) <= TARGET_PP else "BEYOND 3 pp") if precise else "too noisy to judge"
        )
        ci_text = f"[{ci[0] * 100:+.1f}, {ci[1] * 100:+.1f}]" if ci else "-"
        flops = diff.flops_change or 0.0
        print(
            f"{pair['family']:<12} {pair['variant']:<8} {pair['exporter']:<8} {flops * 100:>+6.1f}% "
            f"{no_profile * 100:>+7.1f}% {predicted * 100:>+8.1f}% {measured * 100:>+7.1f}% {ci_text:>17} "
            f"{gap:>+6.1f}  {said}, {target}"
        )
    within = sum(abs(g) <= TARGET_PP for g in gaps)
    worst = max((abs(g) for g in gaps), default=0.0)
    print(
        f"threads={threads}: {within}/{len(gaps)} within {TARGET_PP:.0f} pp among the pairs measured to "
        f"±{PRECISE_PP:.0f} pp, worst gap {worst:.1f} pp"
    )
    return gaps


def main() -> int:
    """Export (or reuse) the pairs, check the structure, then time them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-python", default="/work/venv-torch-b/bin/python", help="python with torch")
    parser.add_argument("--exports", help="reuse this folder of exports (with manifest.json)")
    parser.add_argument("--threads", default="1,default", help="intra_op_threads settings to time")
    parser.add_argument("--timing-exporters", default="legacy,dynamo", help="exporters whose pairs are timed")
    parser.add_argument("--sessions", type=int, default=8, help="paired session pairs per measurement")
    parser.add_argument("--rounds", type=int, default=25, help="rounds per session pair")
    parser.add_argument("--no-timing", action="store_true", help="structure only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="roofline-diff-") as tmp:
        if args.exports and (Path(args.exports) / "manifest.json").exists():
            manifest = json.loads((Path(args.exports) / "manifest.json").read_text())
        else:
            out = Path(args.exports or tmp)
            print(f"exporting with {args.torch_python} into {out} ...", flush=True)
            manifest = export(args.torch_python, out)
        if manifest.get("failed"):
            print("exports that failed:", *manifest["failed"], sep="\n  ")
        misses = structure(manifest)
        if args.no_timing:
            return 1 if misses else 0
        exporters = args.timing_exporters.split(",")
        for threads in args.threads.split(","):
            timing(manifest, threads, exporters, args.sessions, args.rounds)
    return 1 if misses else 0


if __name__ == "__main__":
    raise SystemExit(main())
