"""pytest11 entry point of pytest-roofline: options, ini keys, marker, fixtures, hooks, thin hooks.

Hooks delegate to :class:`~pytest_roofline.pytest.session.RooflineSession`, kept in ``config.stash``.
See https://docs.pytest.org/en/stable/reference/reference.html#hooks for each hook.  Importing
this module imports neither onnx nor numpy: they load when a fixture is first used.
"""

from __future__ import annotations

import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from pytest_roofline.pytest.fixtures import (
    SESSION_KEY,
    SPANS_KEY,
    device_roofline,
    model_load,
    model_profile,
    roofline_span,
)
from pytest_roofline.pytest.options import OPTIONS, parse_bool, settings_from_config
from pytest_roofline.pytest.session import RooflineSession, narrowed_modules
from pytest_roofline.report.benchmark_bridge import new_benchmark_storage, remove_if_empty

__all__ = ["device_roofline", "model_load", "model_profile", "roofline_span"]

MARKER = (
    "roofline(tolerance=None, metrics=['latency'], budget=None, retime=False): per-test gate settings; "
    "tolerance in percent, metrics 'latency', 'memory' or 'layer:<name>', budget in seconds, "
    "retime=True times and compares even when nothing that runs changed"
)
LIST_OPTIONS = ("option", "report")
BENCHMARK_STORAGE = pytest.StashKey["Path | None"]()
#: the plugin's notes written while a test file's progress line was open: shown in the summary
DEFERRED_NOTES = pytest.StashKey[list[str]]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """Register pytest-roofline's own hooks (:mod:`pytest_roofline.pytest.hookspec`)."""
    from pytest_roofline.pytest import hookspec

    pluginmanager.add_hookspecs(hookspec)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Register ``--roofline-*`` options and their ``roofline_*`` ini keys."""
    group = parser.getgroup("roofline", "roofline performance regression testing")
    for name, (parse, _default, help_text) in OPTIONS.items():
        flag = "--roofline-" + name.replace("_", "-")
        if name == "history":  # --roofline-history alone: the embedded store
            group.addoption(
                flag,
                nargs="?",
                const="",
                default=None,
                metavar="URL",
                dest=f"roofline_{name}",
                help=help_text + "; a URL only as --roofline-history=URL",
            )
            group.addoption(
                flag + "-url",
                default=None,
                metavar="URL",
                dest=f"roofline_{name}_url",
                help="the history store (a folder or postgresql://...): --roofline-history=URL spelled apart",
            )
        elif parse is parse_bool:
            group.addoption(flag, action="store_true", default=False, dest=f"roofline_{name}", help=help_text)
        elif name in LIST_OPTIONS:
            group.addoption(
                flag,
                action="append",
                type=parse,
                default=None,
                dest=f"roofline_{name}",
                metavar="K=V" if name == "option" else "PATH",
                help=help_text,
            )
        else:
            group.addoption(flag, type=parse, default=None, dest=f"roofline_{name}", help=help_text)
        if name in LIST_OPTIONS:
            parser.addini(f"roofline_{name}", help_text, type="linelist")
        else:
            parser.addini(f"roofline_{name}", help_text, type="string")


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker; create the run's session and register its hooks."""
    config.addinivalue_line("markers", MARKER)
    worker = hasattr(config, "workerinput")

    def device_class(fingerprint: Any) -> str:
        from pytest_roofline.device import device_class as default

        return config.hook.pytest_roofline_device_class(fingerprint=fingerprint) or default(fingerprint)

    deferred = config.stash[DEFERRED_NOTES] = []

    def write_line(line: str) -> None:
        """A note now, or in the roofline summary when it would cut a file's progress line."""
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        if getattr(reporter, "currentfspath", None) is not None:
            deferred.append(line)
        else:
            reporter.write_line(line)

    from pytest_roofline.roofline.progress import terminal_progress

    session = RooflineSession(
        settings_from_config(config),
        Path(str(config.rootpath)),
        is_worker=worker,
        device_class=device_class,
        progress=terminal_progress(write_line, verbose=config.getoption("verbose") > 0),
    )
    config.stash[SESSION_KEY] = session
    config.stash[BENCHMARK_STORAGE] = new_benchmark_storage(config)
    config.pluginmanager.register(RooflinePlugin(config, session), "roofline-session")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the ``.benchmarks/`` folder pytest-benchmark made in this run if it stayed empty."""
    remove_if_empty(config.stash.get(BENCHMARK_STORAGE, None))


class RooflinePlugin:
    """The hooks of one run, bound to its :class:`RooflineSession`."""

    def __init__(self, config: pytest.Config, session: RooflineSession) -> None:
        self.config = config
        self.session = session

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Remember every collected test (before deselection) to find stale baselines."""
        self.session.collected.update(item.nodeid for item in items)
        asked = narrowed_modules(self.config.args, self.config.invocation_params.dir, items)
        self.session.narrowed.update(asked)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, Any, Any]:
        """Fail the test in its own call phase when its gate found a regression."""
        try:
            result = yield
        finally:
            spans = item.stash.get(SPANS_KEY, None)
            if spans:
                self.session.attach_spans(item.nodeid, spans.stats())
            failures = self.session.take_failures(item.nodeid)
        if failures:
            pytest.fail("\n\n".join(failures), pytrace=False)
        return result

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Track each test's outcome for the results."""
        self.session.note_outcome(report.nodeid, report.when, report.outcome)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """xdist controller: take a finished worker's records."""
        payload = getattr(node, "workeroutput", {}).get("roofline")
        if payload:
            self.session.merge_worker(payload)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Workers hand their records over; the controller writes baselines and reports once.

        A baseline or report that could not be written makes an otherwise green run exit 1: a
        CI gate must not pass while losing what it was asked to record.
        """
        from pytest_roofline.backends.bounded import set_exit_status

        if self.session.is_worker:
            self.config.workeroutput["roofline"] = self.session.worker_payload()  # type: ignore[attr-defined]
            self.session.release_models()
            set_exit_status(int(session.exitstatus))
            return
        hook = self.config.hook.pytest_roofline_update_results
        try:
            self.session.finish(lambda results: hook(config=self.config, results=results))
            self.session.release_models()  # after the baselines' models went in
        except KeyboardInterrupt:  # Ctrl-C while writing: say in one line that nothing is torn
            reporter = self.config.pluginmanager.get_plugin("terminalreporter")
            line = (
                "roofline: interrupted while writing baselines and reports; every file is either as it "
                "was or completely written (writes are atomic)"
            )
            if reporter is not None:
                reporter.ensure_newline()
                reporter.write_line(line)
            else:
                sys.stderr.write(line + "\n")
            session.exitstatus = pytest.ExitCode.INTERRUPTED
            return
        if self.session.errors and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        set_exit_status(int(session.exitstatus))  # the status kept if an abandoned measurement outlives us

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """One line per profiled model, verdict reasons, stale entries, files written."""
        lines = [*self.config.stash.get(DEFERRED_NOTES, []), *self.session.summary()]
        if lines:
            terminalreporter.write_sep("-", "roofline")
            for line in lines:
                terminalreporter.write_line(line)


def pytest_assertrepr_compare(
    config: pytest.Config, op: str, left: object, right: object
) -> list[str] | None:
    """Explain comparisons involving layers, profiles and latency statistics."""
    from pytest_roofline.assertions import explain_compare

    return explain_compare(op, left, right)
