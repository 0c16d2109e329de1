"""The shared unit formatters and text table (pytest_roofline.fmt)."""

from __future__ import annotations

import math

from pytest_roofline.fmt import (
    fmt_bytes,
    fmt_bytes_fixed,
    fmt_pct,
    fmt_seconds,
    fmt_seconds_fixed,
    text_table,
)


def test_seconds_styles() -> None:
    assert fmt_seconds(0.01234) == "12.3 ms"
    assert fmt_seconds(None) == "–"
    assert fmt_seconds_fixed(0.01234) == "12.340 ms"
    assert fmt_seconds_fixed(2.5) == "2.500 s"
    assert fmt_seconds_fixed(12e-6) == "12.0 us"
    assert fmt_seconds_fixed(math.nan) == "-"


def test_bytes_and_percent() -> None:
    assert fmt_bytes(25e6) == "25 MB"
    assert fmt_bytes_fixed(25_000_000) == "25.00 MB"
    assert fmt_bytes_fixed(512) == "512 B"
    assert fmt_pct(0.123) == "12.3%"
    assert fmt_pct(None, missing="-") == "-"
    assert fmt_pct(0.05, 2, trim=True) == "5%"
    assert fmt_pct(-0.0312, 2, trim=True) == "-3.12%"


def test_text_table_aligns_and_strips() -> None:
    lines = text_table(("name", "n"), [("a", "10"), ("bbbbbb", "2")])
    assert lines == ["name     n", "a       10", "bbbbbb   2"]
    left = text_table(("name", "n"), [("a", "10")], left=2)
    assert left == ["name  n", "a     10"]
