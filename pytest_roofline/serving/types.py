"""What a serving scenario was asked to do, and what LoadGen reported for it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from pytest_roofline.errors import OptionError

__all__ = ["SCENARIOS", "ScenarioResult", "ScenarioSettings", "TAIL_PERCENTILES"]

#: The CLI's scenario names and LoadGen's.
SCENARIOS: dict[str, str] = {
    "single-stream": "SingleStream",
    "multi-stream": "MultiStream",
    "server": "Server",
    "offline": "Offline",
}
#: The tail percentile LoadGen's early stopping bounds, per scenario (Offline has none).
TAIL_PERCENTILES: dict[str, float | None] = {
    "single-stream": 0.90,
    "multi-stream": 0.99,
    "server": 0.99,
    "offline": None,
}


@dataclass(frozen=True)
class ScenarioSettings:
    """One scenario's settings: short by default so tests and gates stay fast.

    ``target_qps``: the Server's Poisson arrival rate (queries/s).  ``p99_bound``: seconds; the
    Server's target latency (LoadGen judges it at ``server_target_latency_percentile``), a plain
    p99 check elsewhere.  ``concurrency``: worker threads, one backend session each.
    """

    scenario: str = "single-stream"
    target_qps: float | None = None
    p99_bound: float | None = None
    min_duration: float = 2.0  # seconds
    min_query_count: int = 64
    max_duration: float = 20.0  # seconds: LoadGen stops issuing there
    concurrency: int = 1
    samples_per_query: int = 8  # MultiStream
    seed: int = 0  # LoadGen's schedule / sample-index seeds: the same seed, the same query schedule

    def __post_init__(self) -> None:
        if self.scenario not in SCENARIOS:
            raise OptionError(f"scenario {self.scenario!r} is not one of {', '.join(SCENARIOS)}")
        if self.scenario == "server" and not self.target_qps and not self.p99_bound:
            raise OptionError("the server scenario needs --qps Q, --p99 S (search the highest QPS), or both")
        for name, value in (("qps", self.target_qps), ("p99", self.p99_bound)):
            if value is not None and not 0 < value < 1e9:
                raise OptionError(f"--{name} must be positive, got {value:g}")
        if not 0 < self.min_duration <= self.max_duration:
            raise OptionError(f"--duration must be positive and at most {self.max_duration:g} s")
        if self.min_query_count < 1 or self.concurrency < 1 or self.samples_per_query < 1:
            raise OptionError("query count, concurrency and samples per query must be at least 1")

    @property
    def loadgen_scenario(self) -> str:
        """LoadGen's name of the scenario (``TestScenario`` member)."""
        return SCENARIOS[self.scenario]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScenarioSettings:
        """Inverse of :meth:`to_dict` (unknown keys ignored)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class ScenarioResult:
    """LoadGen's figures for one scenario run, in seconds and queries per second.

    The latencies are LoadGen's own percentiles (MultiStream: per query of
    ``samples_per_query`` samples).  ``achieved_qps`` is LoadGen's completed samples per second
    (SingleStream: with LoadGen's overhead; None for MultiStream, whose summary reports none).
    ``early_stopping_estimate`` bounds the scenario's tail percentile (``tail_percentile``) from
    this run's length (None when the run was too short for one).  ``constraint_met``: the Server's
    latency constraint as LoadGen judged it, elsewhere p99 <= ``settings.p99_bound``; None without
    a bound.  ``searched``: a QPS search's (qps, met) steps, in order.  ``unrun_samples``: samples
    answered unrun past the run's time budget.
    """

    scenario: str
    model: str
    backend: str
    settings: ScenarioSettings
    p50: float
    p90: float
    p99: float
    p999: float
    mean: float
    query_count: int
    achieved_qps: float | None
    tail_percentile: float | None
    early_stopping_estimate: float | None
    early_stopping_met: bool
    constraint_met: bool | None
    valid: bool
    invalid_reason: str
    summary_log: str
    detail_log: str
    searched: tuple[tuple[float, bool], ...] = field(default=())
    #: each sample's time from LoadGen's issue call to its completion, as the workers timed it, at
    #: the percentiles 0, 1, ..., 100 (seconds): the report's latency distribution (LoadGen's own
    #: percentiles are the fields above)
    latency_quantiles: tuple[float, ...] = field(default=())
    #: samples completed per second in equal steps of ``timeline_step`` seconds over the run
    timeline: tuple[float, ...] = field(default=())
    timeline_step: float = 0.0
    #: samples the workers answered without running them, the run's budget spent (their latencies
    #: in LoadGen's figures are not the model's): 0 in a run that fitted its budget
    unrun_samples: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        data = asdict(self)
        data["settings"] = self.settings.to_dict()
        data["searched"] = [list(step) for step in self.searched]
        data["latency_quantiles"], data["timeline"] = list(self.latency_quantiles), list(self.timeline)
        if not self.latency_quantiles and not self.timeline:  # a stored result: LoadGen's figures only
            for name in ("latency_quantiles", "timeline", "timeline_step"):
                del data[name]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScenarioResult:
        """Inverse of :meth:`to_dict`."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["settings"] = ScenarioSettings.from_dict(data["settings"])
        values["searched"] = tuple((float(q), bool(m)) for q, m in data.get("searched", ()))
        values["latency_quantiles"] = tuple(float(x) for x in data.get("latency_quantiles", ()))
        values["timeline"] = tuple(float(x) for x in data.get("timeline", ()))
        return cls(**values)

    def stored(self) -> ScenarioResult:
        """This result as a baseline entry keeps it: LoadGen's figures, without this run's log
        paths or the report's series."""
        bare = replace(self, summary_log="", detail_log="", latency_quantiles=(), timeline=())
        return replace(bare, timeline_step=0.0)
