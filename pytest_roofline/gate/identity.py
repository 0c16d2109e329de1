"""The identity of what runs: model bytes, inputs, backend build, options, backend env vars, device class.

The gate decides in this order (docs/plugin.md, "Decision order"): a run whose identity matches its
baseline's is ``unchanged`` without a timed comparison; a changed model is timed against the
baseline's model (paired); anything else compares stored figures.  :class:`RunIdentity` is what a
baseline entry keeps (its ``identity`` block) and :meth:`RunIdentity.changes` names each difference.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_roofline.gate.model_store import content_hash
from pytest_roofline.schema import SchemaError, read_str, read_str_map

if TYPE_CHECKING:
    import numpy as np

    from pytest_roofline.backends.base import Backend

__all__ = [
    "ENV_PREFIXES",
    "Change",
    "RunIdentity",
    "backend_env",
    "content_hash",
    "graph_hash",
    "inputs_identity",
]

#: Environment variables a backend (or the math libraries under it) reads: thread pools, allocators,
#: kernels.  A change in any of them changes what runs.
ENV_PREFIXES = (
    "OMP_",
    "KMP_",
    "GOMP_",
    "MKL_",
    "OPENBLAS_",
    "DNNL_",
    "ONEDNN_",
    "TBB_",
    "ORT_",
    "ONNXRUNTIME_",
    "OV_",
    "OPENVINO_",
    "CUDA_",
    "TRT_",
    "TENSORRT_",
)


def graph_hash(path: str | os.PathLike[str]) -> str:
    """SHA-256 (hex) of what the model computes: nodes, edges, attributes, weight values, shapes and
    opsets, without names of nodes, doc strings, producer or metadata, and wherever its weights
    are stored (inline or external): a re-saved model of the same graph has the same hash."""
    import onnx
    from onnx import numpy_helper

    from pytest_roofline.model import walk_nodes

    model = onnx.load(str(path), load_external_data=True)
    for name in ("producer_name", "producer_version", "domain", "doc_string"):
        model.ClearField(name)
    model.ClearField("model_version")
    del model.metadata_props[:]
    model.graph.ClearField("name")
    model.graph.ClearField("doc_string")
    for node in walk_nodes(model.graph):
        node.ClearField("name")
        node.ClearField("doc_string")
    initializers = sorted(model.graph.initializer, key=lambda t: t.name)
    canonical = [numpy_helper.from_array(numpy_helper.to_array(t), t.name) for t in initializers]
    del model.graph.initializer[:]
    model.graph.initializer.extend(canonical)
    return hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()


def backend_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment variables a backend reads (:data:`ENV_PREFIXES`), sorted."""
    environ = os.environ if environ is None else environ
    return {k: environ[k] for k in sorted(environ) if k.startswith(ENV_PREFIXES)}


def inputs_identity(
    arrays: Mapping[str, np.ndarray], given: bool, seed: int = 0
) -> tuple[dict[str, str], str]:
    """Each input's ``dtype[shape]``, and what its values are: ``sha256:...`` of given arrays, or
    ``seed=0`` for the generated ones (the same seed gives the same arrays)."""
    import numpy as np

    signature = {name: f"{a.dtype}{list(a.shape)}" for name, a in sorted(arrays.items())}
    if not given:
        return signature, f"seed={seed}"
    digest = hashlib.sha256()
    for name, array in sorted(arrays.items()):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(array).tobytes())
    return signature, "sha256:" + digest.hexdigest()


@dataclass(frozen=True)
class Change:
    """One difference between a baseline's identity and this run's: what kind, and the phrase."""

    kind: str  # model | inputs | backend | options | env | device
    text: str


@dataclass(frozen=True)
class RunIdentity:
    """What runs in one measurement; equal identities run the same thing on the same kind of device."""

    model: str  # content hash (model file and its external data)
    graph: str = ""  # graph hash (what a re-saved copy shares); "" when not computed
    inputs: dict[str, str] = field(default_factory=dict, hash=False)  # name -> dtype[shape]
    values: str = ""  # sha256:... of given arrays, or seed=N
    backend: str = ""
    build: str = ""  # the backend's full version
    settings: dict[str, str] = field(default_factory=dict, hash=False)  # every option reaching the session
    env: dict[str, str] = field(default_factory=dict, hash=False)
    device_class: str = ""

    @classmethod
    def of(
        cls,
        model: str,
        engine: Backend,
        arrays: Mapping[str, np.ndarray],
        *,
        given_inputs: bool,
        device_class: str,
        extra: Mapping[str, str] | None = None,
        graph: str = "",
    ) -> RunIdentity:
        """The identity of ``engine`` running ``arrays`` through the model of content hash ``model``;
        ``extra`` holds further settings that change the work (Loop trip counts)."""
        from pytest_roofline.gate.conditions import settings_of

        signature, values = inputs_identity(arrays, given_inputs)
        settings = settings_of(engine.fingerprint(), engine.options)
        settings.update({k: str(v) for k, v in (extra or {}).items()})
        return cls(
            model=model,
            graph=graph,
            inputs=signature,
            values=values,
            backend=engine.name,
            build=engine.version(),
            settings=dict(sorted(settings.items())),
            env=backend_env(),
            device_class=device_class,
        )

    def changes(self, current: RunIdentity) -> list[Change]:
        """Each difference from ``self`` (the baseline's) to ``current``, as a kind and a phrase."""
        out = []
        if self.model != current.model:
            out.append(Change("model", f"model {self.model[:12]} → {current.model[:12]}"))
        if self.inputs != current.inputs:
            out.append(Change("inputs", f"inputs {_pairs(self.inputs)} → {_pairs(current.inputs)}"))
        elif self.values != current.values:
            out.append(Change("inputs", f"input values {self.values[:19]} → {current.values[:19]}"))
        if self.backend != current.backend or self.build != current.build:
            out.append(
                Change("backend", f"backend {self.backend} {self.build} → {current.backend} {current.build}")
            )
        out.extend(Change("options", text) for text in _map_changes(self.settings, current.settings))
        out.extend(Change("env", text) for text in _map_changes(self.env, current.env))
        if self.device_class != current.device_class:
            out.append(Change("device", f"device class {self.device_class} → {current.device_class}"))
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (an entry's ``identity`` block)."""
        return {
            "model": self.model,
            "graph": self.graph,
            "inputs": dict(self.inputs),
            "values": self.values,
            "backend": self.backend,
            "build": self.build,
            "settings": dict(self.settings),
            "env": dict(self.env),
            "device_class": self.device_class,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunIdentity:
        """Strict inverse of :meth:`to_dict` (raises SchemaError)."""
        model = read_str(data, "model")
        if not model:
            raise SchemaError("identity 'model' is empty")
        return cls(
            model=model,
            graph=read_str(data, "graph", ""),
            inputs=read_str_map(data, "inputs"),
            values=read_str(data, "values", ""),
            backend=read_str(data, "backend", ""),
            build=read_str(data, "build", ""),
            settings=read_str_map(data, "settings"),
            env=read_str_map(data, "env"),
            device_class=read_str(data, "device_class", ""),
        )


def _pairs(mapping: Mapping[str, str]) -> str:
    return ",".join(f"{k}:{v}" for k, v in mapping.items()) or "(none)"


def _map_changes(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    out = []
    for key in sorted(set(before) | set(after)):
        old, new = before.get(key, "(unset)"), after.get(key, "(unset)")
        if old != new:
            out.append(f"{key} {old} → {new}")
    return out
