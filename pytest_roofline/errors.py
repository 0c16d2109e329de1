"""The one error type users can cause, and its kinds.

Every error a user can provoke (bad path, bad model, bad option, corrupt baseline, missing backend)
is a :class:`RooflineError` whose message is one line saying what is wrong and what to do.  The CLI
prints it without a traceback and exits with 2; the pytest plugin turns it into a test failure.
"""

from __future__ import annotations

__all__ = [
    "BackendError",
    "BackendUnavailable",
    "BaselineError",
    "ModelError",
    "OptionError",
    "RooflineError",
    "ShapeError",
]


class RooflineError(Exception):
    """An error the user can fix; ``str(err)`` is a single line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


class ModelError(RooflineError):
    """The model file is missing, unreadable, not ONNX or uses an unsupported opset."""


class ShapeError(RooflineError):
    """A dimension is still unknown after binding, or a binding names nothing."""


class OptionError(RooflineError):
    """A command-line option, ini key or ``--option K=V`` value is invalid."""


class BackendError(RooflineError):
    """A backend failed to load, compile or run the model."""


class BackendUnavailable(BackendError):
    """A backend is not installed; the message names the extra to install."""


class BaselineError(RooflineError):
    """A baseline file is corrupt, of an unknown schema, or cannot be written."""
