"""The backend registry: built-ins, third-party entry points, unknown and missing backends."""

from __future__ import annotations

import textwrap

import pytest

from pytest_roofline.backends.base import available_backends, backend_class, get_backend
from pytest_roofline.errors import BackendUnavailable, OptionError

THIRD_PARTY = """
from pytest_roofline.backends.base import Backend


class EchoBackend(Backend):
    name = "echo"
    extra = "echo"
    options_help = {"device": "which device"}

    @classmethod
    def available(cls):
        return True

    def version(self):
        return "1.0"

    def fingerprint(self):
        return {"backend": "echo"}

    def open(self, spec, inputs):
        raise NotImplementedError


class MissingBackend(EchoBackend):
    name = "missing"
    extra = "missing-runtime"

    @classmethod
    def available(cls):
        return False
"""


@pytest.fixture
def third_party(tmp_path, monkeypatch):
    """A distribution on sys.path registering two backends through the entry point group."""
    (tmp_path / "echo_backend.py").write_text(THIRD_PARTY)
    dist = tmp_path / "echo_backend-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-backend\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        textwrap.dedent("""
        [pytest_roofline.backends]
        echo = echo_backend:EchoBackend
        missing = echo_backend:MissingBackend
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_builtins_are_listed_without_importing_their_runtimes():
    assert {"onnxruntime", "openvino", "trtexec"} <= set(available_backends())


def test_a_third_party_backend_registers_through_the_entry_point_group(third_party):
    assert {"echo", "missing"} <= set(available_backends())
    backend = get_backend("echo", {"device": "x"})
    assert type(backend).__name__ == "EchoBackend" and backend.options == {"device": "x"}
    assert backend_class("echo") is type(backend)


def test_a_backend_that_is_not_installed_names_the_extra(third_party):
    with pytest.raises(BackendUnavailable) as info:
        get_backend("missing")
    assert str(info.value) == (
        "backend 'missing' is not installed; install it with: "
        'pip install "pytest-roofline[missing-runtime]"'
    )


def test_unknown_backend_and_option_are_one_line_errors(third_party):
    with pytest.raises(OptionError, match=r"unknown backend 'nope'; choose one of: .*echo.*onnxruntime"):
        get_backend("nope")
    with pytest.raises(OptionError, match=r"backend 'echo' has no option 'colour' \(options: device\)"):
        get_backend("echo", {"colour": "red"})
