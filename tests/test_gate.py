"""The pure gate: verdicts on synthetic per-session figures (no timing)."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_roofline.gate.verdict import (
    LayerDelta,
    Verdict,
    bootstrap_ratio_ci,
    compare,
    judge_ratio,
    session_ratios,
    verdict_table,
)


def _sessions(center: float, spread: float, n: int = 5, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(center * (1 + spread * rng.standard_normal(n)))


def test_session_ratios_are_p25_over_p25_per_session():
    subject = [[2.0, 2.0, 4.0, 9.0], [3.0, 3.0, 3.0]]
    control = [[1.0, 1.0, 1.0, 5.0], [1.5, 1.5, 8.0]]
    assert session_ratios(subject, control) == pytest.approx([2.0, 2.0])


def test_session_ratios_skip_empty_sessions():
    assert session_ratios([[1.0], []], [[2.0], [1.0]]) == [0.5]


def test_identical_figures_pass_with_ratio_one():
    base = _sessions(25.0, 0.005)
    verdict = compare(base, base, tolerance=0.05)
    assert verdict.status == "pass"
    assert verdict.ratio == pytest.approx(1.0)
    assert verdict.ci[0] < 1.0 < verdict.ci[1]


def test_clear_slowdown_is_a_regression():
    verdict = compare(_sessions(27.5, 0.005, seed=1), _sessions(25.0, 0.005), tolerance=0.05)
    assert verdict.status == "regression"
    assert verdict.ratio == pytest.approx(1.1, rel=0.01)
    assert verdict.ci[0] > 1.0
    assert verdict.failed


def test_slowdown_within_tolerance_passes():
    verdict = compare(_sessions(25.5, 0.003, seed=1), _sessions(25.0, 0.003), tolerance=0.05)
    assert verdict.status == "pass"


def test_noise_above_tolerance_is_inconclusive():
    verdict = compare(_sessions(25.0, 0.2, seed=1), _sessions(25.0, 0.2), tolerance=0.05)
    assert verdict.status == "inconclusive"
    assert verdict.noise > 0.05
    assert "noise" in verdict.message


def test_huge_slowdown_is_a_regression_even_when_noisy():
    verdict = compare(_sessions(60.0, 0.15, seed=1), _sessions(25.0, 0.15), tolerance=0.05)
    assert verdict.status == "regression"


def test_clear_speedup_is_improved():
    verdict = compare(_sessions(20.0, 0.005, seed=1), _sessions(25.0, 0.005), tolerance=0.05)
    assert verdict.status == "improved"


def test_no_baseline_is_new():
    verdict = compare([1.0, 1.1], None, tolerance=0.05)
    assert verdict.status == "new"
    assert verdict.baseline is None and verdict.ratio is None
    assert verdict.current == pytest.approx(1.05)


def test_paired_mode_compares_ratios_with_one():
    same = compare(_sessions(1.0, 0.003), None, tolerance=0.02, mode="paired")
    slower = compare(_sessions(1.035, 0.003), None, tolerance=0.02, mode="paired")
    assert same.status == "pass" and same.mode == "paired"
    assert slower.status == "regression"
    assert slower.ratio == pytest.approx(1.035, rel=0.005)


def test_drift_floor_widens_the_interval():
    figures = _sessions(1.0, 0.0001)
    narrow = compare(figures, None, tolerance=0.05, mode="paired", drift=0.0)
    wide = compare(figures, None, tolerance=0.05, mode="paired", drift=0.02)
    assert wide.noise > narrow.noise
    assert wide.ci[0] < narrow.ci[0]


def test_compare_is_deterministic():
    a, b = _sessions(26.0, 0.02, seed=3), _sessions(25.0, 0.02, seed=4)
    assert compare(a, b, tolerance=0.05) == compare(a, b, tolerance=0.05)


def test_bootstrap_ci_contains_the_point_ratio():
    cur, base = _sessions(11.0, 0.02, seed=5), _sessions(10.0, 0.02, seed=6)
    low, high = bootstrap_ratio_ci(cur, base)
    point = float(np.median(cur) / np.median(base))
    assert low <= point <= high


def test_bad_arguments_raise():
    with pytest.raises(ValueError):
        compare([1.0], [1.0], tolerance=0.05, mode="nonsense")
    with pytest.raises(ValueError):
        compare([1.0], [1.0], tolerance=-1)
    with pytest.raises(ValueError):
        compare([], None, tolerance=0.05, mode="paired")


def test_verdict_round_trips_and_table_names_every_column():
    verdict = compare(
        _sessions(30.0, 0.005, seed=1),
        _sessions(25.0, 0.005),
        tolerance=0.05,
        raw={"baseline": 0.01, "current": 0.012},
        layers=[LayerDelta("conv1", 0.001, 0.0015, 1.5)],
    )
    assert Verdict.from_dict(verdict.to_dict()) == verdict
    text = "\n".join(verdict_table(verdict))
    for word in ("metric", "baseline", "current", "ratio", "95% CI", "noise", "raw seconds", "conv1"):
        assert word in text


def test_new_baseline_with_noisy_sessions_asks_for_more_samples():
    from pytest_roofline.gate.verdict import needs_more, new_verdict

    steady = new_verdict(_sessions(25.0, 0.002), tolerance=0.05)
    noisy = new_verdict(_sessions(25.0, 0.3), tolerance=0.05)
    assert steady.noise < 0.01 and not needs_more(steady)
    assert noisy.noise > 0.025 and needs_more(noisy)
    assert needs_more(compare(_sessions(25.0, 0.2, seed=1), _sessions(25.0, 0.2), tolerance=0.05))
    assert not needs_more(compare(_sessions(25.0, 0.002, seed=1), _sessions(25.0, 0.002), tolerance=0.05))


# -- the decision rule, one clause per test (docs/plugin.md, "Decision"; issue 24 item 7) ---------


def test_rule_regression_ratio_above_tolerance_ci_above_one_noise_within():
    # a paired 3 % tolerance: ratio +4.6 %, CI 1.022-1.070 (noise ±2.3 %) is a regression
    assert judge_ratio(1.046, (1.022, 1.070), 0.023, 0.03) == "regression"


def test_rule_regression_whole_ci_above_tolerance_however_noisy():
    assert judge_ratio(1.6, (1.2, 2.0), 0.25, 0.05) == "regression"


def test_rule_ratio_above_tolerance_but_ci_reaching_one_is_inconclusive():
    assert judge_ratio(1.04, (0.995, 1.085), 0.043, 0.03) == "inconclusive"


def test_rule_ci_above_one_with_noise_above_tolerance_is_inconclusive():
    # the figures, CI 1.013-1.079 at 3 %: the interval is ±3.2 %, wider than the tolerance
    assert judge_ratio(1.046, (1.013, 1.079), 0.0316, 0.03) == "inconclusive"


def test_rule_significant_slowdown_within_tolerance_is_not_a_regression():
    assert judge_ratio(1.02, (1.01, 1.03), 0.01, 0.05) == "pass"


def test_rule_improved_needs_ratio_below_tolerance_and_ci_below_one():
    assert judge_ratio(0.90, (0.88, 0.92), 0.02, 0.05) == "improved"
    assert judge_ratio(0.96, (0.93, 0.99), 0.03, 0.05) == "pass"  # faster, within the tolerance


def test_rule_improved_whole_ci_below_tolerance_however_noisy():
    # the mirror of a regression's second clause: a 20x slower baseline read x0.050 at noise
    # +-11.6 %, and an improvement whose whole 99 % interval is below 1 - tol is not 'inconclusive'
    assert judge_ratio(0.05, (0.045, 0.056), 0.116, 0.05) == "improved"
    assert judge_ratio(0.90, (0.75, 1.08), 0.09, 0.05) == "inconclusive"  # noisy, reaching 1


def test_rule_pass_needs_the_slowdown_beyond_tolerance_ruled_out():
    assert judge_ratio(1.0, (0.98, 1.02), 0.02, 0.05) == "pass"
    # 1.03 + 1.645/1.96 * 0.03 * 1.03 = 1.056 > 1.05: a slowdown beyond 5 % is not ruled out
    assert judge_ratio(1.03, (1.0, 1.06), 0.03, 0.05) == "inconclusive"


def test_stored_paired_and_rejudgement_decide_by_the_one_rule(monkeypatch):
    import pytest_roofline.gate.verdict as verdict_module

    calls = []

    def spy(ratio, ci, noise, tolerance):
        calls.append(tolerance)
        return "inconclusive"

    monkeypatch.setattr(verdict_module, "judge_ratio", spy)
    fast = _sessions(10.0, 0.001)
    assert compare(_sessions(20.0, 0.001), fast, tolerance=0.05).status == "inconclusive"
    assert compare([2.0, 2.0, 2.0], None, tolerance=0.03, mode="paired").status == "inconclusive"
    assert calls == [0.05, 0.03]


def test_docs_state_the_rule_once():
    """README points to the one statement of the rule in docs/plugin.md instead of its own."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text(encoding="utf-8")
    plugin = (root / "docs" / "plugin.md").read_text(encoding="utf-8")
    assert "interval lies above `1 + tolerance`" not in readme
    assert "docs/plugin.md#decision" in readme
    rule = plugin.split("### Decision", 1)[1]
    assert (
        "the ratio is above `1 + tol` and its 99 % interval (`ratio · exp(±2.576 σ)`) above 1, "
        "with the noise within the tolerance" in rule
    )
    assert "or that whole interval above `1 + tol`, however noisy" in rule


def test_a_noisy_ratio_has_a_positive_interval():
    """Heavy noise once printed "ratio ... (95% CI -0.178-1.402)": the CI is formed in log space."""
    rng = np.random.default_rng(7)
    noisy = list(np.exp(rng.normal(0.0, 0.9, size=6)))  # sessions spread over a factor of ~10
    for verdict in (
        compare(noisy, None, tolerance=0.05, mode="paired", extra_noise=0.8),
        compare(noisy, [0.4, 1.0, 2.5, 0.7], tolerance=0.05, extra_noise=0.8),
        compare([0.61, 0.62], [1.0, 1.01], tolerance=0.05, drift=0.6),
    ):
        assert verdict.ci is not None and verdict.ratio is not None
        low, high = verdict.ci
        assert 0.0 < low <= verdict.ratio <= high
        assert verdict.status == "inconclusive"
        assert "-" not in f"{low:.3f}"


def test_configured_threads_note_never_prints_a_negative_bound():
    from pytest_roofline.gate.runner import with_configured

    one_thread = compare(_sessions(1.0, 0.3, seed=1), _sessions(1.0, 0.3), tolerance=0.05)
    configured = compare([0.7, 1.4, 0.2, 2.5], None, tolerance=0.05, mode="paired", extra_noise=0.9)
    verdict = with_configured(one_thread, configured)
    note = next(r for r in verdict.reasons if "at the configured threads ratio" in r)
    low = float(note.split("95% CI ")[1].split("-")[0])
    assert low > 0.0 and "CI -" not in note
