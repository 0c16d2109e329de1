"""Root conftest: pytest's own ``pytester`` for the plugin tests.

The plugin imports onnx, numpy and onnxruntime only when a fixture first needs them; pytester's
in-process runs forget modules first imported inside them, and a native module (onnxruntime)
cannot be imported twice in one process.  So the test session imports them up front.
"""

import numpy  # noqa: F401
import onnx  # noqa: F401
import onnxruntime  # noqa: F401

pytest_plugins = ["pytester"]
