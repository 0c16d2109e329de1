"""The gate's noise model: load widens the interval by fitted floors (pure: no timing)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from pytest_roofline.device.load import MachineLoad
from pytest_roofline.gate.noise import (
    NOISE_MODEL_FILE,
    QUIET_FLOORS,
    NoiseModel,
    NoiseRecord,
    fit_floors,
    noise_model,
    packaged_noise_model,
    pressure,
)


def test_pressure_is_the_share_others_and_the_hypervisor_took():
    assert pressure(MachineLoad(1.0, 0.4, 0.1, 1.0, 2)) == pytest.approx(0.5)
    assert pressure(MachineLoad(1.0, 0.9, 0.3, 3.0, 2)) == 1.0  # clipped
    assert pressure(MachineLoad(1.0, 0.5, 0.0, 1.0, 2, available=False)) == 0.0  # unknown: no widening
    assert pressure(None) == 0.0


def test_floors_interpolate_between_knots_and_hold_past_the_ends():
    model = NoiseModel({"paired": ((0.1, 0.004), (0.5, 0.012))})
    assert model.floor("paired", 0.0) == 0.004
    assert model.floor("paired", 0.3) == pytest.approx(0.008)
    assert model.floor("paired", 0.9) == 0.012
    assert model.floor("stored", 0.5) == QUIET_FLOORS["stored"]  # a mode without knots: its quiet floor


def test_a_model_read_from_json_never_goes_below_the_quiet_floors_and_refuses_nonsense():
    data = {"modes": {"paired": [[0.5, 0.001], [0.0, 0.0]]}}
    model = NoiseModel.from_dict(data)
    assert model.knots["paired"] == ((0.0, QUIET_FLOORS["paired"]), (0.5, QUIET_FLOORS["paired"]))
    with pytest.raises(ValueError, match="out of range"):
        NoiseModel.from_dict({"modes": {"paired": [[2.0, 0.01]]}})
    assert NoiseModel.from_dict(json.loads(json.dumps(model.to_dict()))).knots == model.knots


def test_the_packaged_model_loads_and_never_narrows_with_load():
    model = packaged_noise_model()
    assert NOISE_MODEL_FILE.is_file() and model.source and "refit" in model.source
    for mode in ("paired", "stored", "layer"):
        floors = [model.floor(mode, x) for x in np.linspace(0, 1, 11)]
        assert floors[0] >= QUIET_FLOORS[mode]
        assert all(b >= a for a, b in zip(floors, floors[1:], strict=False)), (mode, floors)


def _records(mode: str, at: float, spread: float, count: int, seed: int) -> list[NoiseRecord]:
    rng = np.random.default_rng(seed)
    return [NoiseRecord(mode, at, float(x), 0.002) for x in rng.normal(0.0, spread, count)]


def test_the_fit_keeps_all_but_one_percent_of_each_bins_aa_ratios_inside_their_99_percent_interval():
    quiet = _records("paired", 0.02, 0.004, 300, 1)
    busy = _records("paired", 0.5, 0.02, 300, 2)
    thin = _records("paired", 0.9, 0.5, 5, 3)  # too few to fit: left out, not trusted
    model = fit_floors([*quiet, *busy, *thin], source="test")
    knots = model.knots["paired"]
    assert len(knots) == 3 and knots[0][0] == 0.0  # the quiet bin's knot is carried to zero load
    for records in (quiet, busy):
        at = records[0].pressure
        floor = model.floor("paired", at)
        outside = sum(abs(r.log_ratio) > 2.5758 * math.hypot(r.sigma, floor) for r in records)
        assert outside <= 3, (at, floor, outside)
    assert model.floor("paired", 0.5) > 3 * model.floor("paired", 0.02)  # load widens
    assert model.floor("paired", 1.0) == model.floor("paired", 0.5)  # held flat past the last fitted bin
    assert model.knots["stored"] == ((0.0, QUIET_FLOORS["stored"]),)  # no records: the quiet floor


def test_a_baseline_entry_keeps_the_load_it_was_measured_under():
    from _baselines import make_entry

    from pytest_roofline.gate.baseline import BaselineEntry
    from pytest_roofline.schema import SchemaError

    busy = MachineLoad(2.0, 0.45, 0.02, 1.8, 2)
    entry = make_entry()
    entry = type(entry)(**{**entry.__dict__, "load": busy})
    again = BaselineEntry.from_dict(json.loads(json.dumps(entry.to_dict())))
    assert again.load == busy and again.pressure == pytest.approx(0.47)
    assert BaselineEntry.from_dict({**entry.to_dict(), "load": None}).pressure == 0.0  # older entries
    with pytest.raises(SchemaError, match="within"):
        BaselineEntry.from_dict({**entry.to_dict(), "load": {**busy.to_dict(), "other": 1e308}})


def test_a_history_pairing_is_judged_with_the_floor_of_the_load_it_ran_under(monkeypatch):
    from pytest_roofline.gate import noise
    from pytest_roofline.history.points import Paired

    model = NoiseModel({"paired": ((0.0, 0.003), (1.0, 0.03))})
    monkeypatch.setattr(noise, "noise_model", lambda: model)
    figures = (1.031, 1.029, 1.030, 1.032, 1.028, 1.030)
    quiet, busy = Paired(figures, "before"), Paired(figures, "before", pressure=0.8)
    (ql, _), (bl, bh) = quiet.ci(), busy.ci()
    assert ql > 1.0 and bl < 1.0 < bh  # the same 3 % reads as a step only on a quiet machine
    assert Paired.from_dict(busy.to_dict()) == busy
    assert Paired.from_dict({**busy.to_dict(), "pressure": "x"}).pressure == 0.0  # a bad value: no widening


def test_a_pairings_interval_and_its_verdict_read_one_floor(monkeypatch):
    """The history looks the pairing's floor up in one place (``Paired.floor``): its interval (the
    detector's evidence) and its verdict (``judged_by_pairing``: the gate's rule at the test's
    tolerance) both widen by it, so the two can never disagree on what a load is worth."""
    from pytest_roofline.history.points import Paired

    figures = (1.061, 1.059, 1.060, 1.062, 1.058, 1.060)
    monkeypatch.setattr(Paired, "floor", property(lambda self: 0.003 + 0.05 * self.pressure))
    quiet, busy = Paired(figures, "before"), Paired(figures, "before", pressure=0.6)
    assert quiet.verdict(0.05).status == "regression" and busy.verdict(0.05).status == "inconclusive"
    assert busy.ci() == busy.verdict().ci and busy.ci()[0] < 1.0 < busy.ci()[1]


def test_load_limit_off_says_other_processes_do_not_disturb(monkeypatch):
    load = MachineLoad(1.0, 0.5, 0.02, 1.0, 2)
    monkeypatch.setenv("ROOFLINE_LOAD_LIMIT", "off")
    assert pressure(load) == pytest.approx(0.02)  # steal still counts
    monkeypatch.setenv("ROOFLINE_LOAD_LIMIT", "0.3")
    assert pressure(load) == pytest.approx(0.52)


def test_the_budget_stretches_with_the_load_only_while_the_verdict_is_open(monkeypatch) -> None:
    from types import SimpleNamespace

    from pytest_roofline.gate import sampling
    from pytest_roofline.gate.sampling import GateDesign, paired_decider, run_gate, stretched
    from pytest_roofline.gate.verdict import round_ratios

    busy = MachineLoad(1.0, 0.5, 0.0, 1.0, 2)
    assert stretched(10.0, busy) == pytest.approx(15.0)
    assert stretched(10.0, None) == 10.0
    flat = NoiseModel({mode: ((0.0, 0.005),) for mode in ("paired", "stored", "layer")})
    monkeypatch.setattr(sampling, "noise_model", lambda: flat)  # a floor that never ends sampling

    clock = [0.0]  # the gate's clock advances only while it samples: no timing in this test
    monkeypatch.setattr(sampling, "time", SimpleNamespace(perf_counter=lambda: clock[0]))

    def batches(load: MachineLoad, session_ratios: tuple[float, ...]) -> int:
        def sampler(openers, *, sessions, rounds, iterations, warmup):
            clock[0] += 0.05  # one batch: a quarter of the 0.2 s budget
            new = [[session_ratios[i % len(session_ratios)]] * rounds for i in range(sessions)]
            return [new, [[1.0] * rounds for _ in range(sessions)]]

        monkeypatch.setattr(sampling, "between", lambda start, end: load)
        run = run_gate(
            [None, None],
            paired_decider(0.05),
            GateDesign(budget=0.2, max_batches=50),
            sampler=sampler,
            figures=round_ratios,
        )
        return len(run.figures) // 4

    quiet = MachineLoad(1.0, 0.0, 0.0, 0.1, 2)
    # an open verdict (sessions at x0.8 and x1.25: noise far above the tolerance, however many)
    # samples longer with one busy process beside it on 2 cores than on a quiet machine
    assert batches(busy, (0.8, 1.25)) > batches(quiet, (0.8, 1.25))
    # a verdict that settles at the first look stops there, however busy the machine
    assert batches(busy, (1.0,)) == 1


def test_a_runners_own_noise_model_replaces_the_packaged_one(tmp_path, monkeypatch) -> None:
    from pytest_roofline.errors import OptionError
    from pytest_roofline.gate.noise import NOISE_MODEL_ENV

    own = tmp_path / "runner-noise.json"
    own.write_text(json.dumps({"modes": {"paired": [[0.0, 0.004], [1.0, 0.02]]}, "source": "our runner"}))
    monkeypatch.setenv(NOISE_MODEL_ENV, str(own))
    assert noise_model().source == "our runner"
    assert noise_model().floor("paired", 0.5) == pytest.approx(0.012)
    monkeypatch.setenv(NOISE_MODEL_ENV, str(tmp_path / "missing.json"))
    with pytest.raises(OptionError, match="ROOFLINE_NOISE_MODEL=.*missing.json: not a noise model file"):
        noise_model()
    monkeypatch.delenv(NOISE_MODEL_ENV)
    assert noise_model() is packaged_noise_model()


def test_a_pairing_timed_by_cpu_time_is_judged_with_its_own_floor(monkeypatch) -> None:
    """Issue 31: a pairing whose sessions time each run by the thread's CPU time reads the noise
    model's ``paired-thread`` floor; one timed by the wall clock keeps the wider ``paired`` one."""
    from types import SimpleNamespace

    from pytest_roofline.gate import sampling
    from pytest_roofline.gate.paired import floor_mode, paired_run
    from pytest_roofline.gate.sampling import GateDesign

    model = NoiseModel({"paired": ((0.0, 0.003), (0.5, 0.03)), "paired-thread": ((0.0, 0.006),)})
    monkeypatch.setattr(sampling, "noise_model", lambda: model)
    busy = MachineLoad(1.0, 0.5, 0.0, 1.0, 2)
    monkeypatch.setattr(sampling, "between", lambda start, end: busy)

    def sampler(openers, *, sessions, rounds, iterations, warmup):  # a +12 % change, steady
        return [[[1.12] * rounds for _ in range(sessions)], [[1.0] * rounds for _ in range(sessions)]]

    def pair(thread_timed: bool):
        opener = SimpleNamespace(backend=SimpleNamespace(thread_timed=thread_timed))
        return paired_run([opener, opener], GateDesign(budget=60, max_batches=1), 0.05, sampler=sampler)

    assert floor_mode([SimpleNamespace(backend=SimpleNamespace(thread_timed=True))]) == "paired-thread"
    timed, wall = pair(True).verdict, pair(False).verdict
    assert timed is not None and wall is not None
    assert timed.floor == pytest.approx(1.96 * 0.006) and wall.floor == pytest.approx(1.96 * 0.03)
    assert timed.status == "regression" and wall.status == "inconclusive"


def test_a_history_pairing_timed_by_cpu_time_is_judged_with_the_gates_own_floor(monkeypatch) -> None:
    """Issue 31 item 5: the history judged every pairing with the wall clock's ``paired`` floor,
    also one timed by CPU time, which the gate judges with ``paired-thread`` (wider than the wall
    clock's under light load): the same figures could be a step to the history and inconclusive to the gate.
    A pairing keeps the mode it was judged with (its own run's, or the gate's), stored with it."""
    from types import SimpleNamespace

    from pytest_roofline.gate import noise, sampling
    from pytest_roofline.gate.paired import paired_run
    from pytest_roofline.gate.sampling import GateDesign
    from pytest_roofline.history.pairing import _gate_mode
    from pytest_roofline.history.points import Paired

    model = NoiseModel({"paired": ((0.0, 0.003), (1.0, 0.03)), "paired-thread": ((0.0, 0.044),)})
    monkeypatch.setattr(noise, "noise_model", lambda: model)
    monkeypatch.setattr(sampling, "noise_model", lambda: model)

    def sampler(openers, *, sessions, rounds, iterations, warmup):
        return [[[1.06] * rounds for _ in range(sessions)], [[1.0] * rounds for _ in range(sessions)]]

    opener = SimpleNamespace(backend=SimpleNamespace(thread_timed=True))
    run = paired_run(
        [opener, opener], GateDesign(budget=60, max_batches=1), 0.05, sampler=sampler, watch_load=False
    )
    assert run.floor_mode == "paired-thread" and run.verdict is not None
    figures = (1.061, 1.059, 1.060, 1.062, 1.058, 1.060)
    timed = Paired(figures, "before", pressure=0.2, mode=run.floor_mode)
    wall = Paired(figures, "before", pressure=0.2)
    assert timed.floor == pytest.approx(0.044) and wall.floor == pytest.approx(0.003 + 0.027 * 0.2)
    assert timed.verdict(0.0).status == "inconclusive" and wall.verdict(0.0).status == "regression"
    assert Paired.from_dict(timed.to_dict()) == timed
    assert Paired.from_dict({**timed.to_dict(), "mode": None}) == wall  # stored before round four
    gate = SimpleNamespace(profile=SimpleNamespace(extra={"gate": {"floor_mode": "paired-thread"}}))
    assert _gate_mode(gate) == "paired-thread"  # type: ignore[arg-type]


def test_the_cpu_time_floor_falls_back_to_the_wall_clocks_until_it_is_fitted():
    """A runner's own fit made before the thread clock existed has no ``paired-thread`` knots: the
    pairing is then judged with the wall clock's (wider) floor, never the quiet constant; a fit
    with no CPU-time records leaves the mode out, and one measured only under load holds its
    lowest fitted floor down to no load."""
    old = NoiseModel({"paired": ((0.0, 0.003), (0.5, 0.03))})
    assert old.floor("paired-thread", 0.5) == 0.03
    wall = _records("paired", 0.5, 0.02, 300, 4)
    assert "paired-thread" not in fit_floors(wall).knots
    fitted = fit_floors([*wall, *_records("paired-thread", 0.9, 0.05, 300, 5)])
    knots = fitted.knots["paired-thread"]
    assert knots[0][0] == 0.0 and knots[0][1] == knots[1][1] > QUIET_FLOORS["paired-thread"]
    calm = fit_floors([*wall, *_records("paired-thread", 0.9, 0.005, 300, 5)]).knots["paired-thread"]
    assert calm[0][1] == calm[1][1] == QUIET_FLOORS["paired-thread"]  # never below the least
