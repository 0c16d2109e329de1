"""View ops: ops that move no data, in one set with named subsets.

* :data:`ALIAS_OPS` — a runtime may hand out the input's buffer as the output (onnxruntime does);
  the attribution of onnxruntime kernels treats a kernel of these types as a view of its node.
* :data:`ELIDED_OPS` — removed at load time for inference (``Identity``, ``Dropout``).
* :data:`SHAPE_OPS` — read metadata or hold a constant; runtimes fold them.
* :data:`RUNTIME_VIEW_OPS` — the view ops that may still run as a kernel (all but ``Constant``):
  the physical-sanity guard exempts their layers.
* :data:`VIEW_OPS` — every one of them: the cost model prices them at 0 FLOPs and 0 bytes.
"""

from __future__ import annotations

__all__ = ["ALIAS_OPS", "ELIDED_OPS", "RUNTIME_VIEW_OPS", "SHAPE_OPS", "VIEW_OPS"]

ALIAS_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
ELIDED_OPS = frozenset({"Identity", "Dropout"})
SHAPE_OPS = frozenset({"Shape", "Size", "Constant"})
VIEW_OPS = ALIAS_OPS | ELIDED_OPS | SHAPE_OPS
RUNTIME_VIEW_OPS = VIEW_OPS - {"Constant"}
