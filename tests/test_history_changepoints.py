"""Change points: steps at a model change are found and sized; the machine's state jumps are not."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from _history_data import series

from pytest_roofline.history.changepoints import detect, find_changes, robust_noise
from pytest_roofline.history.pairing import Paired
from pytest_roofline.history.points import HistoryPoint

pytest.importorskip("ruptures")


def noisy(n: int, seed: int, noise: float = 0.005) -> np.ndarray:
    return 1.0 + np.random.default_rng(seed).normal(0.0, noise, n)


def test_robust_noise_ignores_a_step() -> None:
    values = noisy(60, 1, 0.01)
    stepped = values.copy()
    stepped[30:] *= 1.2
    assert robust_noise(values) == pytest.approx(0.01, rel=0.4)
    assert robust_noise(stepped) < 2 * robust_noise(values)
    short = np.array([1.0, 1.01, 0.99, 1.3, 1.31, 1.29])  # few runs: the step's difference would weigh
    assert robust_noise(short, skip=[3]) < robust_noise(short)


def test_step_at_a_model_change_is_found_and_sized() -> None:
    values = noisy(40, 2)
    values[25:] *= 1.05
    hashes = ["a"] * 25 + ["b"] * 15
    steps, machine = detect(values, hashes)
    assert [s[0] for s in steps] == [25]
    index, before, after, change, low, high = steps[0]
    assert change == pytest.approx(0.05, abs=0.01)
    assert low < change < high and low > 0
    assert machine == []


def test_step_found_with_three_runs_after_it() -> None:
    values = noisy(23, 3)
    values[20:] *= 1.03
    steps, _ = detect(values, ["a"] * 20 + ["b"] * 3)
    assert [s[0] for s in steps] == [20]


def test_step_near_a_model_change_snaps_onto_it() -> None:
    values = noisy(40, 4)
    values[21:] *= 1.06  # the series moved one run after the model changed (a slow first run)
    steps, _ = detect(values, ["a"] * 20 + ["b"] * 20)
    assert [s[0] for s in steps] == [20]


def test_machine_state_jump_with_the_same_model_is_not_a_change_point() -> None:
    """This VM's speed jumps between two states for minutes: same model both sides, no blame."""
    values = noisy(60, 5)
    values[20:35] *= 1.08  # the slow state for 15 runs, then back
    steps, machine = detect(values, ["same"] * 60)
    assert steps == []
    assert machine  # seen, and put down to the machine


def test_unchanged_series_with_a_new_model_hash_every_run_has_no_change_point() -> None:
    for seed in range(10):
        values = noisy(100, 10 + seed)
        steps, _ = detect(values, [str(i) for i in range(100)])
        assert steps == [], seed


def test_without_hashes_steps_are_kept_where_found() -> None:
    values = noisy(40, 6)
    values[20:] *= 1.1
    steps, _ = detect(values)
    assert [s[0] for s in steps] == [20]


def test_change_point_names_commit_layers_and_runs_after() -> None:
    values = noisy(30, 7)
    values[18:] *= 1.07
    hashes = ["a"] * 18 + ["b"] * 12
    points = series(values, hashes)
    points = [
        p.__class__(
            **{**p.__dict__, "layers": {"MatMul_83": 0.3 * (1.21 if i >= 18 else 1.0), "Relu_1": 0.1}}
        )
        for i, p in enumerate(points)
    ]
    found = find_changes(points, layer_series=True)
    assert len(found.changes) == 1
    change = found.changes[0]
    assert change.commit == points[18].commit and change.previous_commit == points[17].commit
    assert change.runs_after == 12
    assert [m.name for m in change.layers] == ["MatMul_83"]
    assert change.layers[0].change == pytest.approx(0.21, abs=0.01)
    text = change.describe("test_x")
    assert text.startswith("test_x: +") and f"since {points[18].commit[:7]}, 12 runs after" in text
    assert text.endswith("layer MatMul_83 +21 %")
    assert "MatMul_83" in found.layer_changes


def test_new_layer_is_named() -> None:
    values = noisy(20, 8)
    values[10:] *= 1.1
    points = series(values, ["a"] * 10 + ["b"] * 10)
    points = [
        p.__class__(**{**p.__dict__, "layers": {"Conv_9": 0.2} if i >= 10 else {}})
        for i, p in enumerate(points)
    ]
    change = find_changes(points).changes[0]
    assert [m.describe() for m in change.layers] == ["Conv_9 new"]


def test_short_series_has_no_change_point() -> None:
    assert detect([1.0, 1.0, 2.0, 2.0]) == ([], [])


def pair(ratio: float, n: int = 12, noise: float = 0.004, seed: int = 0) -> Paired:
    """A paired record of ``n`` session pairs around ``ratio``."""
    figures = ratio * (1.0 + np.random.default_rng(seed).normal(0.0, noise, n))
    return Paired(tuple(float(f) for f in figures), against="before")


def test_paired_ratio_finds_a_step_at_the_first_run_after_it() -> None:
    values = noisy(21, 11, noise=0.05)  # absolute figures far too noisy for a 3 % step
    values[20] *= 1.03
    pairs: list[Paired | None] = [None] * 20 + [pair(1.03)]
    steps, _ = detect(values, ["a"] * 20 + ["b"], paired=pairs)
    assert [s[0] for s in steps] == [20]
    index, before, after, change, low, high = steps[0]
    assert change == pytest.approx(0.03, abs=0.005)
    assert 0 < low < change < high
    assert after == pytest.approx(before * 1.03, rel=0.01)


def test_paired_ratio_of_one_overrules_a_machine_jump_at_a_model_change() -> None:
    """The machine went slow exactly when the model changed: the pair timed in one process says no."""
    values = noisy(40, 12)
    values[20:] *= 1.10
    pairs: list[Paired | None] = [None] * 20 + [pair(1.0, seed=3)] + [None] * 19
    steps, machine = detect(values, ["a"] * 20 + ["b"] * 20, paired=pairs)
    assert steps == []
    without, _ = detect(values, ["a"] * 20 + ["b"] * 20)  # the absolute figure alone blames the model
    assert [s[0] for s in without] == [20]


def test_paired_step_below_the_minimum_change_or_too_noisy_is_not_a_change_point() -> None:
    values = noisy(30, 13)
    hashes = ["a"] * 10 + ["b"] * 10 + ["c"] * 10
    pairs: list[Paired | None] = (
        [None] * 10 + [pair(1.005, seed=1)] + [None] * 9 + [pair(1.05, noise=0.2)] + [None] * 9
    )
    steps, _ = detect(values, hashes, paired=pairs)
    assert steps == []


def test_a_pair_of_too_few_sessions_leaves_the_decision_to_the_absolute_figure() -> None:
    values = noisy(40, 16)
    values[20:] *= 1.05
    hashes = ["a"] * 20 + ["b"] * 20
    few: list[Paired | None] = [None] * 20 + [pair(1.0, n=3)] + [None] * 19
    assert [s[0] for s in detect(values, hashes, paired=few)[0]] == [20]  # the pair is not evidence
    enough: list[Paired | None] = [None] * 20 + [pair(1.0, n=4)] + [None] * 19  # the gate's batch
    assert detect(values, hashes, paired=enough)[0] == []


def test_paired_interval_is_the_gates_so_a_few_low_sessions_do_not_hide_a_step() -> None:
    """16 session figures, 13 near 1.05 and 3 below 1 (a busy moment): the order-statistic interval
    of the median at 99 % (the 3rd smallest) reached 1 and the step was missed; the gate's interval
    (bootstrap of the median, widened in log space) excludes 1."""
    figures = (0.99, 0.995, 0.998, *(1.05 + 0.002 * np.sin(np.arange(13.0))))
    pair16 = Paired(tuple(float(f) for f in figures), against="before")
    from pytest_roofline.gate.verdict import compare
    from pytest_roofline.measure.stats import median_ci

    assert median_ci(np.asarray(figures), 0.99)[0] < 1.0  # the former rule's interval reaches 1
    assert len(pair16.judged) == 16 and pair16.judged != pair16.figures  # its opening order out
    verdict = compare(pair16.judged, None, tolerance=0.0, mode="paired")
    assert pair16.ci() == verdict.ci  # the gate's own 95 % interval
    low99, high99 = pair16.ci(0.99) or (0.0, 0.0)
    assert 1.0 < low99 <= verdict.ci[0] and high99 >= verdict.ci[1]  # wider than the 95 %, above 1
    values = noisy(21, 21, noise=0.05)
    steps, _ = detect(values, ["a"] * 20 + ["b"], paired=[None] * 20 + [pair16])
    assert [s[0] for s in steps] == [20]
    assert steps[0][4] == pytest.approx(verdict.ci[0] - 1.0)  # the reported CI is the gate's 95 %


def test_a_pairing_is_judged_with_its_opening_order_taken_out() -> None:
    """Session pairs open their sessions in alternating orders, and the first opened ran 3 % slower
    (MoE on the 2-core VM): a 3 % step's 16 figures alternate 1.07 and 0.99.  Their median's
    interval reached 1 and the step was missed; with the order divided out the step is found at
    its size."""
    from pytest_roofline.gate.verdict import compare

    noise = np.random.default_rng(5).normal(0.0, 0.003, 16)
    order = np.where(np.arange(16) % 2 == 0, 1.04, 1 / 1.04)
    alternating = Paired(tuple(float(f) for f in 1.03 * order * (1.0 + noise)), against="before")
    raw = compare(alternating.figures, None, tolerance=0.0, mode="paired")
    assert raw.ci is not None and raw.ci[0] < 1.0  # the session figures: no evidence of the step
    assert alternating.ratio == pytest.approx(1.03, abs=0.004)
    assert max(alternating.judged) / min(alternating.judged) < 1.03  # the order's +-4 % is out
    values = noisy(21, 22, noise=0.05)
    steps, _ = detect(values, ["a"] * 20 + ["b"], paired=[None] * 20 + [alternating])
    assert [s[0] for s in steps] == [20] and steps[0][3] == pytest.approx(0.03, abs=0.005)


def test_a_short_odd_or_older_pairing_is_judged_on_its_session_figures() -> None:
    from pytest_roofline.history.points import SESSION_RATIOS

    for figures in ((1.01, 1.02, 1.0, 1.03), tuple(1.0 + 0.001 * i for i in range(9))):
        assert Paired(figures, against="before").judged == figures  # 2 of each order; an odd count
    older = Paired(tuple(1.0 + 0.01 * (i % 2) for i in range(8)), against="before", figure=SESSION_RATIOS)
    assert older.judged == older.figures  # per-session p25 ratios: no opening order to take out
    taken_out = Paired(older.figures, against="before").judged  # its 1 % opening order, divided out
    assert max(taken_out) / min(taken_out) == pytest.approx(1.0)


def test_paired_record_keeps_its_figure_kind() -> None:
    """New pairings hold the gate's per-round-ratio medians; points recorded before say theirs."""
    from pytest_roofline.history.points import ROUND_RATIOS, SESSION_RATIOS

    fresh = pair(1.02)
    assert fresh.figure == ROUND_RATIOS
    assert Paired.from_dict(fresh.to_dict()) == fresh
    old = {k: v for k, v in fresh.to_dict().items() if k != "figure"}
    assert (Paired.from_dict(old) or fresh).figure == SESSION_RATIOS
    assert fresh.scaled(1.03).figure == ROUND_RATIOS


def test_a_pair_where_nothing_changed_is_ignored() -> None:
    """Evidence counts only where what runs changed (a pair under the same identity is a bug's)."""
    values = noisy(30, 14)
    pairs: list[Paired | None] = [None] * 15 + [pair(1.2)] + [None] * 14
    steps, _ = detect(values, ["a"] * 30, paired=pairs)
    assert steps == []


def test_find_changes_reads_each_points_identity_and_pair() -> None:
    values = noisy(12, 15, noise=0.05)
    points = series(values, ["m"] * 12)  # the same model file, but the backend build changed at 8
    points = [
        replace(p, identity="id1" if i < 8 else "id2", paired=pair(1.08) if i == 8 else None)
        for i, p in enumerate(points)
    ]
    found = find_changes(points)
    assert [c.index for c in found.changes] == [8]
    assert found.changes[0].describe("t").endswith("since " + points[8].commit[:7] + ", 4 runs after")
    point = points[8]
    assert HistoryPoint.from_dict(point.to_dict()) == point


def test_a_slow_models_pairing_trades_rounds_for_session_pairs() -> None:
    """STEP_PAIRS session pairs fit the pairing's budget: ViT-B/16 (0.3 s a run) had 4 pairs of 10
    rounds in its 60 s; a model of a few milliseconds keeps the gate's 10 rounds."""
    from pytest_roofline.gate.sampling import FEW_ROUNDS, GateDesign, paired_budget
    from pytest_roofline.history.pairing import PAIR_TOLERANCE, STEP_PAIRS, pair_rounds

    assert pair_rounds(GateDesign(budget=10.0)) == 10  # no run estimate: the gate's design
    assert pair_rounds(GateDesign(budget=10.0, run_estimate=0.007)) == 10
    assert pair_rounds(GateDesign(budget=10.0, run_estimate=0.3)) == FEW_ROUNDS
    bert = GateDesign(budget=10.0, run_estimate=0.185)
    rounds = pair_rounds(bert)
    assert FEW_ROUNDS < rounds < 10
    budget = paired_budget(bert.budget, bert.run_estimate, PAIR_TOLERANCE, bert)
    assert STEP_PAIRS * (rounds + bert.warmup) * 2 * 0.185 <= budget


@pytest.mark.parametrize(("other", "threads"), [(0.02, "default"), (0.6, "1")])
def test_a_pairing_beside_other_processes_runs_at_one_thread(monkeypatch, other, threads) -> None:
    """As the gate's paired mode, the history's pairing runs at the configured threads on a quiet
    machine and at one thread per session when others share the CPUs: beside a loaded machine two
    2-thread sessions read A/A ratios of 0.70-1.07 on the zoo, and the paired floor the pairing is
    judged with was fitted on one-thread pairings."""
    from _plugin_helpers import live_module

    from pytest_roofline.backends.base import get_backend
    from pytest_roofline.gate.sampling import GateRun

    load, paired = live_module("pytest_roofline.device.load"), live_module("pytest_roofline.gate.paired")
    pairing = live_module("pytest_roofline.history.pairing")
    window = load.MachineLoad(0.5, other, 0.0, 3.0, 2)
    monkeypatch.setattr(pairing, "LOAD_WINDOW", 0.0, raising=False)
    monkeypatch.setattr(load, "between", lambda start, end: window)
    used: list[str] = []

    def timed(openers, design, tolerance, **kwargs):
        used.extend(str(o.backend.options.get("intra_op_threads", "default")) for o in openers)
        return GateRun((1.01, 0.99), 1e-3, 1e-3, 0.1, window)

    monkeypatch.setattr(paired, "paired_run", timed)
    engine = get_backend("onnxruntime", {})
    figures, busy, _ = pairing.time_pairing(engine, "new", "old", {}, run_estimate=1e-3)  # type: ignore[arg-type]
    assert used == [threads, threads]
    assert figures == (1.01, 0.99) and busy == pytest.approx(other)
