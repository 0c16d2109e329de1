"""Analysis time of a BERT-base-size graph (target < 1 s after load) and a 100k-node chain (< 10 s).

Run: ``python benchmarks/analysis_speed.py [--repeats 3]``. Prints the median of the repeats.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import onnx

from pytest_roofline import zoo
from pytest_roofline.analysis import analyze
from pytest_roofline.model import load_model


def _time(func, repeats: int) -> float:  # noqa: ANN001
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        func()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> int:
    """Print the timings; exit 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bert_base.onnx"
        onnx.save(zoo.bert_base(external_data=True), path)  # weightless: references a missing .data
        load_s = _time(lambda: load_model(path), args.repeats)
        bert = load_model(path)
        bert_s = _time(lambda: analyze(bert, batch=1), args.repeats)
        result = analyze(bert, batch=1)
        print(
            f"bert_base seq 128: {len(result.nodes)} nodes, shape_method {result.shape_method}: "
            f"load {1e3 * load_s:.1f} ms, analyze {bert_s:.3f} s (target < 1 s)"
        )
        ok &= bert_s < 1.0
    chain = zoo.synthetic_chain(100_000)
    chain_s = _time(lambda: analyze(chain, batch=1), args.repeats)
    print(f"synthetic_chain: {len(chain.graph.node)} nodes: analyze {chain_s:.3f} s (target < 10 s)")
    ok &= chain_s < 10.0
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
