"""What the attribution benchmarks share: profile a zoo model and sum up how its kernels map.

Imported by ``benchmarks/ort_attribution.py`` and ``benchmarks/openvino_attribution.py`` (run as
scripts, so this folder is on ``sys.path``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import onnx

from pytest_roofline.analysis import analyze
from pytest_roofline.backends.base import KernelProfile, get_backend
from pytest_roofline.model import ModelSpec, bind_input_shapes, make_inputs
from pytest_roofline.profile import Layer, build_layers

__all__ = ["Attribution", "profile_attribution"]


@dataclass(frozen=True)
class Attribution:
    """Attribution figures of one profiled model."""

    fraction: float  # attributed_fraction from build_layers
    layers: tuple[Layer, ...]
    kernels: KernelProfile
    total_flops: int  # the analyzer's model total
    folded_flops: int  # FLOPs of the ONNX nodes the backend folded at load
    seconds: float  # wall time of profiling + analysis

    @property
    def compute(self) -> list[Layer]:
        return [la for la in self.layers if la.kind == "compute"]

    @property
    def named(self) -> int:
        """Compute layers naming at least one ONNX node."""
        return sum(1 for la in self.compute if la.onnx_nodes)

    @property
    def summed_flops(self) -> int:
        """FLOPs of the compute layers together."""
        return sum(la.flops for la in self.compute)

    @property
    def layer_flops(self) -> int:
        """FLOPs of every layer, folded ones included: the model total when none is lost or doubled."""
        return sum(la.flops for la in self.layers)

    def kind(self, kind: str) -> list[str]:
        """Names of the layers of ``kind`` ("unattributed", "layout")."""
        return [la.name for la in self.layers if la.kind == kind]


def profile_attribution(
    name: str,
    backend: str,
    options: Mapping[str, str],
    batch: int,
    dims: Mapping[str, int],
    iterations: int,
    model: onnx.ModelProto | None = None,
) -> Attribution:
    """Profile zoo model ``name`` (or ``model``) on ``backend`` and attribute its kernels."""
    from pytest_roofline import zoo

    if model is None:
        model = getattr(zoo, name)()
    dims = dict(dims)
    shapes = bind_input_shapes(model, batch, dims)
    start = time.perf_counter()
    engine = get_backend(backend, dict(options))
    with engine.open(ModelSpec.create(model, batch, dims), make_inputs(model, shapes)) as session:
        kernels = session.profile(iterations)
    analysis = analyze(model, batch=batch, dims=dims)
    layers, fraction = build_layers(analysis, kernels)
    known = {node.name for node in analysis.nodes}
    folded_flops = sum(analysis.node(n).flops for n in kernels.folded if n in known)
    return Attribution(
        fraction=fraction,
        layers=tuple(layers),
        kernels=kernels,
        total_flops=analysis.total.flops,
        folded_flops=folded_flops,
        seconds=time.perf_counter() - start,
    )
