"""The onnxruntime backend: the runner (:mod:`.runner`), kernel → ONNX node attribution of its
profiler's trace (:mod:`.attribution`) and CUDA kernel times from CUPTI (:mod:`.cupti`).

Nothing is imported here, so reading one part (the CUPTI mapping, the trace parser) costs no
onnxruntime import.
"""
