"""The one error type users can cause, and its kinds.

Every error a user can provoke (bad path, bad model, bad option, corrupt baseline, missing backend)
is a :class:`RooflineError` whose message is one line saying what is wrong and what to do.  The CLI
prints it without a traceback and exits with 2; the pytest plugin turns it into a test failure.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BackendError",
    "BackendUnavailable",
    "BaselineError",
    "ModelError",
    "OptionError",
    "RooflineError",
    "ShapeError",
    "UnboundDim",
]


class RooflineError(Exception):
    """An error the user can fix; ``str(err)`` is a single line, safe to print on a terminal.

    Messages quote names from models and tests: whitespace runs (newlines included) become one
    space and control or bidi characters visible escapes (:func:`pytest_roofline.fmt.printable`).
    """

    def __init__(self, message: str) -> None:
        from .fmt import printable

        super().__init__(printable(" ".join(str(message).split())))

    def for_pytest(self) -> str:
        """The message as a test author reads it (Python syntax where the CLI's names options)."""
        return str(self)


class ModelError(RooflineError):
    """The model file is missing, unreadable, not ONNX or uses an unsupported opset."""


@dataclass(frozen=True)
class UnboundDim:
    """An input dim that nothing bound: input ``input``'s axis ``index``, symbolic ``name`` (or "")."""

    input: str
    index: int
    name: str


class ShapeError(RooflineError):
    """A dimension is still unknown after binding, or a binding names nothing.

    ``unbound`` (a dim left unknown) or ``unused`` (a dims key naming no symbolic dim, with the
    model's ``known`` symbolic dims) let each front end phrase its own hint: ``str(err)`` speaks
    the command line's ``--dim seq=VALUE``, :meth:`for_pytest` the fixture's ``dims={"seq": ...}``.
    """

    def __init__(
        self,
        message: str,
        *,
        unbound: UnboundDim | None = None,
        unused: str | None = None,
        known: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.unbound, self.unused, self.known = unbound, unused, known

    def for_pytest(self) -> str:
        """``model_profile(..., dims={'seq': VALUE})`` instead of ``--dim seq=VALUE``."""
        if self.unbound is not None:
            dim = self.unbound
            if dim.name:
                how = f"bind it with model_profile(..., dims={{{dim.name!r}: VALUE}})"
                label = repr(dim.name)
            else:
                key = f"{dim.input}[{dim.index}]"
                how = (
                    f"bind it with model_profile(..., dims={{{key!r}: VALUE}}), "
                    f"shapes={{{dim.input!r}: (...)}} or inputs=..."
                )
                label = "(unnamed)"
            return f"input {dim.input!r} dim {dim.index} {label} is unknown; {how}"
        if self.unused is not None:
            known = ", ".join(self.known) or "none"
            where = f"names no symbolic dim of the model's inputs (symbolic dims: {known})"
            return f"dims={{{self.unused!r}: ...}} {where}"
        return str(self)


class OptionError(RooflineError):
    """A command-line option, ini key or ``--option K=V`` value is invalid."""


class BackendError(RooflineError):
    """A backend failed to load, compile or run the model."""


class BackendUnavailable(BackendError):
    """A backend is not installed; the message names the extra to install."""


class ModelUnsupported(BackendUnavailable):
    """The backend is installed but cannot read this model (an op, domain or type it lacks);
    another backend may run it. Skipped like a missing backend: the message names what it lacks."""


class BaselineError(RooflineError):
    """A baseline file is corrupt, of an unknown schema, or cannot be written."""
