"""Measuring: robust latency statistics (:mod:`.stats`), the sampling design of fresh sessions and
interleaved rounds (:mod:`.rounds`) and application spans (:mod:`.spans`).

Nothing is imported here, so the statistics and the spans load without numpy.
"""
