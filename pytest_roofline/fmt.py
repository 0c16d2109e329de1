"""Text formatting of units and tables, shared by every CLI verb, the terminal summary, the gate's
tables, the assertion messages and the reports.

Two styles of seconds exist on purpose: :func:`fmt_seconds` (three significant figures, reports)
and :func:`fmt_seconds_fixed` (three decimals in ms/s, terminal and CLI tables).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from typing import Any

__all__ = [
    "csv_cell",
    "elide_names",
    "is_finite",
    "fmt_bytes",
    "fmt_bytes_fixed",
    "fmt_count",
    "fmt_pct",
    "fmt_rate",
    "fmt_ratio",
    "fmt_seconds",
    "fmt_seconds_fixed",
    "plural",
    "printable",
    "text_table",
]

_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def is_finite(value: Any) -> bool:
    """A real, finite number (bools, None, NaN and strings are not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _si(value: Any, unit: str, digits: int = 3) -> str:
    if not is_finite(value):
        return "–"
    magnitude = abs(value)
    for scale, prefix in _PREFIXES:
        if magnitude >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"


def fmt_seconds(value: Any) -> str:
    """``0.01234`` → ``12.3 ms`` (``–`` when missing)."""
    if not is_finite(value):
        return "–"
    magnitude = abs(value)
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if magnitude >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns" if value else "0 s"


def fmt_seconds_fixed(value: float | None) -> str:
    """``0.01234`` → ``12.340 ms``; below a millisecond ``123.4 us`` (``-`` when missing)."""
    if value is None or not math.isfinite(value):
        return "-"
    if value >= 1:
        return f"{value:.3f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.3f} ms"
    return f"{value * 1e6:.1f} us"


def fmt_count(value: Any, unit: str = "") -> str:
    """``4.1e9`` → ``4.1 G`` (FLOPs, MACs, params)."""
    return _si(value, unit).rstrip()


def fmt_rate(value: Any, unit: str = "FLOP/s") -> str:
    """``1.2e11`` → ``120 GFLOP/s``."""
    return _si(value, unit)


def fmt_bytes(value: Any) -> str:
    """Decimal bytes, three significant figures: ``25e6`` → ``25 MB``."""
    return _si(value, "B")


def fmt_bytes_fixed(count: int) -> str:
    """Decimal bytes, two decimals: ``25e6`` → ``25.00 MB``; below a kB ``512 B``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.2f} {unit}"
    return f"{count} B"


def fmt_pct(value: Any, digits: int = 1, *, missing: str = "–", trim: bool = False) -> str:
    """``0.123`` → ``12.3%``; ``trim`` drops trailing zeros (``0.05`` → ``5%``)."""
    if not is_finite(value):
        return missing
    text = f"{100 * value:.{digits}f}"
    if trim and "." in text:
        text = text.rstrip("0").rstrip(".")
    return f"{text}%"


def plural(count: int, noun: str) -> str:
    """``1 session``, ``3 sessions``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def fmt_ratio(value: Any) -> str:
    """``1.083`` → ``1.083x``."""
    return f"{value:.3f}x" if is_finite(value) else "–"


# Unicode categories a terminal must never receive raw: controls (C0, DEL, C1: ESC starts every
# CSI/OSC sequence, CR/LF/TAB break lines and columns), format characters (bidi overrides such as
# U+202E, isolates, zero-width joiners), line/paragraph separators and lone surrogates.
_UNPRINTABLE = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: Any) -> str:
    r"""``text`` safe to write to a terminal: every control, bidi or invisible format character
    becomes a visible escape (ESC → ``\x1b``, newline → ``\x0a``, RTL override → ``\u202e``).

    Names come from models and tests a user may not have written (node, graph, test and span
    names): written raw, an ESC/OSC sequence could recolour, retitle or rewrite the terminal and an
    RTL override could make one name read as another.  Plain text passes through unchanged.
    """
    text = str(text)
    if text.isprintable():  # the common case: nothing to escape (isprintable is False for Cc/Cf/Z*)
        return text
    return "".join(_escape(c) if unicodedata.category(c) in _UNPRINTABLE else c for c in text)


def csv_cell(value: Any) -> Any:
    """A CSV cell that a spreadsheet will not run as a formula (OWASP "CSV injection") and that
    no reader splits: the one escape of text written to CSV.

    The text is kept as data (the writer quotes a newline), except a carriage return, which
    becomes the visible ``\\x0d``: a writer whose line terminator is ``\\n`` does not quote it, and a
    reader would start a new row there, one that could begin ``=1+1``.  Text starting with ``=``,
    ``+``, ``-``, ``@`` or a tab gets a leading single quote (the spreadsheet shows the text, not a
    formula's result).  Numbers, and text that is a plain number (``-0.5``, ``+3``), are unchanged.
    """
    if not isinstance(value, str) or not value:
        return value
    value = value.replace("\r", "\\x0d")
    if value[0] not in _FORMULA_START:
        return value
    try:
        float(value)
    except ValueError:
        return "'" + value
    return value


_FORMULA_START = frozenset("=+-@\t\r")
# Characters that make inline Markdown structure: links and images ``![x](url)`` (both need a
# bracket, so the brackets are escaped and messages keep their plain parentheses), emphasis (``*``;
# an underscore inside a name emphasizes nothing), tables' pipes, raw HTML and entities.  Each gets a
# backslash (``<``, ``>`` and ``&`` their entity).  Backticks stay: a code span renders nothing
# inside it, and the project's messages quote commands in them (`roofline calibrate --force`).
_MARKDOWN_ESCAPE = {c: "\\" + c for c in "\\*[]|"}  # no bracket, no link: "(" and "!" stay plain
_MARKDOWN_ESCAPE.update({"<": "&lt;", ">": "&gt;", "&": "&amp;"})


def markdown_text(text: Any) -> str:
    """``text`` as inert inline Markdown (GitHub's): the one escape of names written to Markdown.

    Whitespace runs (newlines too) become one space, control characters visible escapes, and
    every character that starts a link, image, emphasis, table cell or HTML tag is escaped, so a
    parametrize id ``![x](http://host/x.png)`` shows as text and fetches nothing.
    """
    flat = printable(" ".join(str(text).split()))
    return "".join(_MARKDOWN_ESCAPE.get(c, c) for c in flat)


def markdown_code(text: Any) -> str:
    """``text`` as a Markdown code span that nothing inside can end early: fenced by one more
    backtick than its longest run of them (nothing renders inside a code span: no link, no HTML).
    A pipe still splits a table row, so it is escaped (GitHub reads ``\\|`` as ``|`` there too), and
    ``<``/``>`` are written as entities, as every Markdown cell of the project was (no renderer
    that ignores code spans can then see a tag)."""
    flat = printable(" ".join(str(text).split()))
    flat = flat.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
    fence = "`" * (max((len(run) for run in re.findall("`+", flat)), default=0) + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def elide_names(names: Sequence[str], width: int = 60) -> list[str]:
    """Display forms of ``names`` at most ``width`` characters wide, cut in the middle.

    Both ends survive (``/encoder/layer.1...attention/MatMul_1``): exporters put the scope first
    and the op with its index last, and either may be what tells two layers apart.  Names that
    would look identical once cut are shown in full, so two different names never read the same.
    """
    head = max(1, (width - 3) // 3)
    tail = max(1, width - 3 - head)
    shown = [name if len(name) <= width else f"{name[:head]}...{name[-tail:]}" for name in names]
    count: dict[str, set[str]] = {}
    for name, display in zip(names, shown, strict=True):
        count.setdefault(display, set()).add(name)
    return [display if len(count[display]) == 1 else name for name, display in zip(names, shown, strict=True)]


def text_table(header: Sequence[Any], rows: Sequence[Sequence[Any]], left: int = 1) -> list[str]:
    """Lines of an aligned table: columns two spaces apart, padded to their widest cell.

    The first ``left`` columns are left-aligned, the rest right-aligned (pass ``len(header)``
    for an all-left table); trailing spaces are dropped.  Every cell goes through
    :func:`printable`, so no name can inject terminal sequences or break the layout.
    """
    cells = [[printable(cell) for cell in row] for row in (header, *rows)]
    widths = [max(len(cell) for cell in column) for column in zip(*cells, strict=False)]

    def line(row: Sequence[str]) -> str:
        pairs = enumerate(zip(row, widths, strict=True))
        return "  ".join(cell.ljust(w) if i < left else cell.rjust(w) for i, (cell, w) in pairs).rstrip()

    return [line(row) for row in cells]
