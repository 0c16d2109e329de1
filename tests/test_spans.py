"""Application spans: named wall-clock samples → LatencyStats."""

from __future__ import annotations

import pytest

from pytest_roofline.measure.spans import Spans


def test_repeated_spans_give_stats_per_name_in_first_run_order():
    spans = Spans()
    for _ in range(4):
        with spans("preprocess"):
            sum(range(100))
        with spans("postprocess"):
            pass
    stats = spans.stats()
    assert list(stats) == ["preprocess", "postprocess"]
    assert stats["preprocess"].n == 4 and stats["postprocess"].n == 4
    assert all(s.min >= 0 for s in stats.values())


def test_span_is_recorded_when_the_block_raises():
    spans = Spans()
    with pytest.raises(RuntimeError), spans("decode"):
        raise RuntimeError("boom")
    assert spans.stats()["decode"].n == 1


def test_record_and_truthiness():
    spans = Spans()
    assert not spans
    spans.record("io", 0.25)
    assert spans and spans.stats()["io"].median == 0.25


def test_empty_name_is_rejected():
    with pytest.raises(ValueError), Spans()(""):
        pass
