"""A stand-in ``trtexec`` that replays real exports (tests/data/trtexec) for tests without a GPU.

Run as ``python fake_trtexec.py ARGS...`` (tests wrap it in an executable script).  Environment:

* ``FAKE_TRT_VERSION``: the banner's number, e.g. ``7103``, ``8001``, ``8601`` (default),
  ``100300``, ``110100``.  The export formats and accepted flags follow that version:
  7.1 times keys, 8.0 ``endToEndMs``, no ``medianMs`` before 8.5, no ``--exportLayerInfo``
  before 8.4, ``Metadata`` from 10, and TensorRT 11's removed precision flags.
* ``FAKE_TRT_MODE``: ``ok`` (default), ``fail`` (exit 1 with errors), ``hang`` (sleep forever),
  ``kill`` (SIGKILL itself), ``nofiles`` (exit 0 without writing exports).
* ``FAKE_TRT_LOG``: a file each invocation appends its argv to (one JSON list per line).
* ``FAKE_TRT_DATA``: the directory of recorded exports (default: tests/data/trtexec).

Its console prints the memory lines TensorRT logs, in TensorRT's formats (``[MemUsageChange]`` at
INFO, the context's byte counts at ``--verbose``, ``Total ... Memory`` when it builds): the weight
bytes are those of the recorded layer information (``Weights``/``Bias`` counts × their type's
size), the activation and persistent bytes the fake's own fixed numbers (:data:`ACTIVATION_BYTES`).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

DATA = Path(os.environ.get("FAKE_TRT_DATA", Path(__file__).parent / "data" / "trtexec"))
REMOVED_IN_11 = ("--fp16", "--int8", "--best", "--bf16", "--fp8", "--int4")
ACTIVATION_BYTES = 51_380_224  # the fake's own: two 32x64x112x112 fp16 tensors
PERSISTENT_BYTES = 5632
TYPE_BYTES = {"Half": 2, "Float": 4, "Int8": 1, "Int32": 4}


def weight_bytes() -> int:
    """Bytes of the weights and biases the recorded layer information lists."""
    info = json.loads((DATA / "resnet.onnx.engine.graph.json").read_text())
    return sum(
        layer[key]["Count"] * TYPE_BYTES[layer[key]["Type"]]
        for layer in info["Layers"]
        for key in ("Weights", "Bias")
        if isinstance(layer.get(key), dict)
    )


def _memory_lines(version: tuple[int, int, int], options: dict[str, str]) -> list[str]:
    """The memory lines TensorRT logs for a build (when asked) and a context, in its formats."""
    mib = 1 << 20
    weights = weight_bytes()
    lines = []
    if "--saveEngine" in options:
        lines.append(f"[I] [TRT] Total Activation Memory: {ACTIVATION_BYTES}")
        if version >= (8, 6, 0):
            lines.append(f"[I] [TRT] Total Weights Memory: {weights}")
    held = -(-weights // mib)
    lines.append(
        "[I] [TRT] [MemUsageChange] TensorRT-managed allocation in engine deserialization: "
        f"CPU +0, GPU +{held}, now: CPU 0, GPU {held} (MiB)"
    )
    if "--verbose" in options:
        lines.append(f"[V] [TRT] Total per-runner device persistent memory is {PERSISTENT_BYTES}")
        lines.append(f"[V] [TRT] Allocated activation device memory of size {ACTIVATION_BYTES}")
    context = -(-(ACTIVATION_BYTES + PERSISTENT_BYTES) // mib)
    lines.append(
        "[I] [TRT] [MemUsageChange] TensorRT-managed allocation in IExecutionContext creation: "
        f"CPU +0, GPU +{context}, now: CPU 0, GPU {held + context} (MiB)"
    )
    return lines


def _version() -> tuple[int, int, int]:
    code = int(os.environ.get("FAKE_TRT_VERSION", "8601"))
    if code >= 100000:
        return code // 10000, (code // 100) % 100, code % 100
    return code // 1000, (code // 100) % 10, code % 100


def _options(argv: list[str]) -> dict[str, str]:
    options = {}
    for arg in argv:
        key, _, value = arg.partition("=")
        options[key] = value
    return options


def _unknown(flag: str) -> int:
    print(f"[E] Unknown option: {flag}")
    print("&&&& FAILED TensorRT.trtexec")
    return 1


def _times(version: tuple[int, int, int], count: int) -> list[dict[str, float]]:
    recorded = json.loads((DATA / "resnet.onnx.engine.timing.first20.json").read_text())
    records = []
    for i in range(count):
        rec = dict(recorded[i % len(recorded)])
        if version[:2] == (7, 1):
            rec = {
                "startInMs": rec["startH2dMs"],
                "endInMs": rec["endH2dMs"],
                "startComputeMs": rec["startComputeMs"],
                "endComputeMs": rec["endComputeMs"],
                "startOutMs": rec["startD2hMs"],
                "endOutMs": rec["endD2hMs"],
                "inMs": rec["h2dMs"],
                "computeMs": rec["computeMs"],
                "outMs": rec["d2hMs"],
                "latencyMs": rec["latencyMs"],
                "endToEndMs": rec["latencyMs"],
            }
        elif version[:2] == (8, 0):
            rec["endToEndMs"] = rec["latencyMs"]
        records.append(rec)
    return records


def _profile(version: tuple[int, int, int]) -> list[dict[str, float | str]]:
    rows = json.loads((DATA / "resnet.onnx.engine.profile.json").read_text())
    if version[:2] < (8, 5):
        rows = [{k: v for k, v in row.items() if k != "medianMs"} for row in rows]
    return rows


def _layer_info(version: tuple[int, int, int], detailed: bool) -> dict[str, object]:
    info = json.loads((DATA / "resnet.onnx.engine.graph.json").read_text())
    if not detailed:
        return {"Layers": [layer["Name"] for layer in info["Layers"]], "Bindings": info["Bindings"]}
    if version[0] >= 10:
        for layer in info["Layers"]:
            if not layer["Name"].startswith(("Reformatting", "reshape_")):
                parts = layer["Name"].split(" + ")
                layer["Metadata"] = "\x1f".join(f"[ONNX Layer: {p}]" for p in parts)
                layer["Name"] = f"/fused/{len(parts)}/{parts[0]}"  # names carry nothing: Metadata must
    return info


def main(argv: list[str]) -> int:
    version = _version()
    code = os.environ.get("FAKE_TRT_VERSION", "8601")
    print(f"&&&& RUNNING TensorRT.trtexec [TensorRT v{code}] # trtexec {' '.join(argv)}")
    log = os.environ.get("FAKE_TRT_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(argv) + "\n")
    mode = os.environ.get("FAKE_TRT_MODE", "ok")
    if "--help" in argv:
        print("=== Model Options ===")
        return 0
    options = _options(argv)
    if version[0] >= 11:
        for flag in REMOVED_IN_11:
            if flag in options:
                return _unknown(flag)
    if version[:2] < (8, 4) and "--exportLayerInfo" in options:
        return _unknown("--exportLayerInfo")
    if mode == "hang":
        time.sleep(3600)
    if mode == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "fail":
        print(
            "[E] Error[4]: [network.cpp::validate::2925] Error Code 4: Internal Error (Network has dynamic "
            "or shape inputs, but no optimization profile has been defined.)"
        )
        print("[E] Engine could not be created from network")
        sys.stderr.write("Segmentation fault in the fake\n")
        print("&&&& FAILED TensorRT.trtexec")
        return 1
    if "--loadEngine" in options and not Path(options["--loadEngine"]).exists():
        print(f"[E] Error opening engine file: {options['--loadEngine']}")
        return 1
    if "--saveEngine" in options:
        if "--onnx" not in options or not Path(options["--onnx"]).exists():
            print("[E] Could not open the ONNX file")
            return 1
        Path(options["--saveEngine"]).write_bytes(b"fake engine\n")
    print("\n".join(_memory_lines(version, options)))
    if mode == "nofiles":
        return 0
    profiling = "--exportProfile" in options
    separate = version[0] >= 11 or "--separateProfileRun" in options
    if "--exportTimes" in options and (separate or not profiling):
        count = int(options.get("--iterations", "10"))
        Path(options["--exportTimes"]).write_text(json.dumps(_times(version, count), indent=1))
    if profiling:
        Path(options["--exportProfile"]).write_text(json.dumps(_profile(version), indent=1))
    if "--exportLayerInfo" in options:
        detailed = options.get("--profilingVerbosity") == "detailed" or "--loadEngine" in options
        Path(options["--exportLayerInfo"]).write_text(json.dumps(_layer_info(version, detailed)))
    print("&&&& PASSED TensorRT.trtexec")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
