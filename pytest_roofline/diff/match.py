"""Which node of the old graph is which node of the new one.

Exporters renumber names (``Conv_12`` becomes ``Conv_17`` once a block is inserted before it; the
dynamo exporter's ``node_conv2d_4`` likewise), so names cannot be the key.  The nodes of both
graphs are aligned as sequences in their (topological) order by a global alignment
(Needleman-Wunsch, free gaps) that scores each pair of nodes of the same op:

* full signature equal (op, attributes and small constants, output, input and weight shapes): 20;
* op and attributes equal (a widened layer: other shapes): 12;
* op alone: 6;

plus 2 when their module scopes agree and 1 when their names do, which decides between
alignments that are structurally as good (a block appended to a stage of identical blocks reads
as the last one of that stage).  The best alignment pairs a changed layer with its old self
rather than calling it one block added and another removed, which a longest-common-block
matcher does among repeated blocks.  Runs of identical nodes at both ends whose names or scopes
agree are paired first; very large remainders are cut at long identical runs.

Nodes left over whose full signatures agree are then paired out of order (a node the exporter
emitted elsewhere).  Everything else is added or removed.
"""

from __future__ import annotations

from dataclasses import dataclass
from difflib import SequenceMatcher

import numpy as np

from .summary import ModelSummary

__all__ = ["MAX_CELLS", "Matching", "match_nodes", "signature"]

#: Above this many cells (old x new nodes) one alignment is cut at long identical runs first.
MAX_CELLS = 4_000_000
_EXACT, _ATTRS, _OP, _SCOPE, _NAME = 20, 12, 6, 2, 1
_NONE = -(1 << 40)


@dataclass(frozen=True)
class Matching:
    """Pairs ``(old index, new index)`` in new-graph order; the nodes of neither side left over."""

    pairs: tuple[tuple[int, int], ...]
    removed: tuple[int, ...]  # old indices
    added: tuple[int, ...]  # new indices


def signature(summary: ModelSummary, index: int) -> str:
    """The full structural signature of node ``index``: two nodes with equal signatures do the
    same work on the same shapes."""
    node = summary.nodes[index]
    return "|".join((node.op_type, node.attrs, node.shapes, node.weights, summary.input_shapes_of(index)))


@dataclass(frozen=True)
class _Codes:
    """Integer codes of each node's tokens (equal code = equal token), one array per side."""

    exact: np.ndarray
    attrs: np.ndarray
    op: np.ndarray
    scope: np.ndarray  # 0: no scope
    name: np.ndarray


def match_nodes(old: ModelSummary, new: ModelSummary) -> Matching:
    """Align the nodes of ``old`` and ``new`` (see the module docstring)."""
    a, b = _codes(old, new)
    n, m = len(old.nodes), len(new.nodes)
    pairs: list[tuple[int, int]] = []
    lo = 0
    while lo < min(n, m) and a.exact[lo] == b.exact[lo] and _agree(a, b, lo, lo):
        pairs.append((lo, lo))
        lo += 1
    end = 0
    while (
        end < min(n, m) - lo
        and a.exact[n - 1 - end] == b.exact[m - 1 - end]
        and _agree(a, b, n - 1 - end, m - 1 - end)
    ):
        pairs.append((n - 1 - end, m - 1 - end))
        end += 1
    for (o_lo, o_hi), (n_lo, n_hi) in _segments(a, b, (lo, n - end), (lo, m - end)):
        pairs += _align(a, b, o_lo, o_hi, n_lo, n_hi)
    pairs += _pair_leftovers(pairs, a.exact, b.exact, a.name, b.name)
    pairs.sort(key=lambda pair: pair[1])
    matched_old = {o for o, _ in pairs}
    matched_new = {j for _, j in pairs}
    return Matching(
        pairs=tuple(pairs),
        removed=tuple(i for i in range(n) if i not in matched_old),
        added=tuple(j for j in range(m) if j not in matched_new),
    )


def _codes(old: ModelSummary, new: ModelSummary) -> tuple[_Codes, _Codes]:
    table: dict[tuple[str, str], int] = {}

    def code(kind: str, token: str) -> int:
        return table.setdefault((kind, token), len(table) + 1)

    def side(summary: ModelSummary) -> _Codes:
        nodes = summary.nodes
        return _Codes(
            exact=np.array([code("x", signature(summary, i)) for i in range(len(nodes))], dtype=np.int64),
            attrs=np.array([code("a", f"{n.op_type}|{n.attrs}") for n in nodes], dtype=np.int64),
            op=np.array([code("o", n.op_type) for n in nodes], dtype=np.int64),
            scope=np.array([code("s", n.scope) if n.scope else 0 for n in nodes], dtype=np.int64),
            name=np.array([code("n", n.name) for n in nodes], dtype=np.int64),
        )

    return side(old), side(new)


def _agree(a: _Codes, b: _Codes, i: int, j: int) -> bool:
    """Whether node ``i`` of the old graph and ``j`` of the new are the same module's node: same
    scope where they have scopes (names may be renumbered), else the same name."""
    if a.scope[i] or b.scope[j]:
        return bool(a.scope[i] == b.scope[j])
    return bool(a.name[i] == b.name[j])


def _segments(
    a: _Codes, b: _Codes, old: tuple[int, int], new: tuple[int, int]
) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """The ranges to align; a range too large for one alignment is cut at long identical runs
    (themselves returned as ranges of equal length, aligned on their diagonal)."""
    (o_lo, o_hi), (n_lo, n_hi) = old, new
    if (o_hi - o_lo) * (n_hi - n_lo) <= MAX_CELLS:
        return [(old, new)]
    matcher = SequenceMatcher(None, a.exact[o_lo:o_hi].tolist(), b.exact[n_lo:n_hi].tolist(), autojunk=False)
    cuts = [blk for blk in matcher.get_matching_blocks() if blk.size >= 16]
    found = []
    i, j = o_lo, n_lo
    for blk in cuts:
        found.append(((i, o_lo + blk.a), (j, n_lo + blk.b)))
        found.append(((o_lo + blk.a, o_lo + blk.a + blk.size), (n_lo + blk.b, n_lo + blk.b + blk.size)))
        i, j = o_lo + blk.a + blk.size, n_lo + blk.b + blk.size
    found.append(((i, o_hi), (j, n_hi)))
    return [seg for seg in found if seg[0][1] > seg[0][0] and seg[1][1] > seg[1][0]]


def _align(a: _Codes, b: _Codes, o_lo: int, o_hi: int, n_lo: int, n_hi: int) -> list[tuple[int, int]]:
    """The best-scoring monotone pairing of old[o_lo:o_hi] with new[n_lo:n_hi] (free gaps)."""
    n, m = o_hi - o_lo, n_hi - n_lo
    if not n or not m:
        return []
    new = slice(n_lo, n_hi)
    score = np.zeros((n + 1, m + 1), dtype=np.int64)
    for i in range(n):
        k = o_lo + i
        pair = np.where(b.exact[new] == a.exact[k], _EXACT, np.where(b.attrs[new] == a.attrs[k], _ATTRS, _OP))
        pair = np.where(b.op[new] == a.op[k], pair, _NONE)
        if a.scope[k]:
            pair = pair + _SCOPE * (b.scope[new] == a.scope[k])
        pair = pair + _NAME * (b.name[new] == a.name[k])
        best = np.maximum(score[i, 1:], score[i, :-1] + pair)
        score[i + 1, 1:] = np.maximum.accumulate(best)
    pairs = []
    i, j = n, m
    while i > 0 and j > 0:
        if score[i, j] == score[i, j - 1]:
            j -= 1
        elif score[i, j] == score[i - 1, j]:
            i -= 1
        else:
            pairs.append((o_lo + i - 1, n_lo + j - 1))
            i -= 1
            j -= 1
    return pairs


def _pair_leftovers(
    pairs: list[tuple[int, int]],
    old_exact: np.ndarray,
    new_exact: np.ndarray,
    old_names: np.ndarray,
    new_names: np.ndarray,
) -> list[tuple[int, int]]:
    """Unmatched nodes of equal full signature, paired out of order: same name first, then in
    order of appearance."""
    matched_old = {o for o, _ in pairs}
    matched_new = {j for _, j in pairs}
    waiting: dict[int, list[int]] = {}
    for i, token in enumerate(old_exact.tolist()):
        if i not in matched_old:
            waiting.setdefault(token, []).append(i)
    found = []
    for j, token in enumerate(new_exact.tolist()):
        candidates = waiting.get(token)
        if j in matched_new or not candidates:
            continue
        same = [i for i in candidates if old_names[i] == new_names[j]]
        chosen = same[0] if same else candidates[0]
        candidates.remove(chosen)
        found.append((chosen, j))
    return found
