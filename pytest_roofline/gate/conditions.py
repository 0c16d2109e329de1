"""The conditions a stored figure depends on, and the differences that make a comparison unfair.

Figures normalized by another control probe, measured at other threads (one thread vs the
configured ones: a multi-threaded CPU configuration is judged on its one-thread figure,
docs/plugin.md), or timed by another clock (a one-thread CPU figure is timed by its thread's CPU
time, which a neighbour's scheduler slices do not reach; an entry written before that read the wall
clock) cannot be compared: such a run is ``incomparable`` and names each difference.
A changed backend setting (threads, execution mode, optimization level, providers, OpenVINO's
device and compile config, trtexec's precision and build arguments, session config entries, any
other ``--roofline-option``) or backend release is a legitimate question ("did the upgrade slow
us?"): the stored figures are compared and the verdict names the change (:meth:`Conditions.changes`).

The device class and the backend name are part of the baseline key (another device or backend is
another baseline), and the model's hash is what the gate judges, so neither is a condition.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_roofline.schema import SchemaError, read_str, read_str_map

__all__ = ["CLOCKS", "FIGURES", "SETTING_KEYS", "Conditions", "settings_of"]

#: What a figure was measured at: the configured threads, or one thread beside them.
FIGURES = {"configured": "the configured threads", "one-thread": "one thread"}
#: What timed each run of a figure: the wall clock, or the running thread's CPU time
#: (``Backend.thread_timed_copy``).  An entry without the key was timed by the wall clock.
CLOCKS = {"wall": "the wall clock", "thread": "its thread's CPU time"}

#: Fingerprint keys that are settings (what the user chose), not identity (what the device is).
SETTING_KEYS = (
    "providers",
    "intra_op_threads",
    "inter_op_threads",
    "execution_mode",
    "graph_optimization_level",
    "device",
    "config",
    "precision",
    "workspace_mib",
    "args",
    "imported",
)


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(_text(v) for v in value)
    if isinstance(value, Mapping):
        return ",".join(f"{k}={_text(v)}" for k, v in sorted(value.items()))
    return str(value)


def settings_of(fingerprint: Mapping[str, Any], options: Mapping[str, str]) -> dict[str, str]:
    """The settings behind a figure: the fingerprint's setting keys, then the options not in it.

    The fingerprint holds the backend's resolved value (``intra_op_threads`` 0 when not given),
    so a default and an explicit option compare by what ran.
    """
    settings = {key: _text(fingerprint[key]) for key in SETTING_KEYS if key in fingerprint}
    for key, value in options.items():
        settings.setdefault(key, str(value))
    return dict(sorted(settings.items()))


def _release(version: str) -> tuple[str, ...]:
    """``"1.32.0"`` → ("1", "32"): the part of a version that changes kernels."""
    return tuple(re.findall(r"\d+", version)[:2]) or (version,)


@dataclass(frozen=True)
class Conditions:
    """Backend version, settings and control probe of one figure."""

    backend_version: str
    settings: dict[str, str] = field(default_factory=dict, hash=False)
    control: str = ""
    figure: str = "configured"  # the threads the gate's figure is measured at: configured | one-thread
    clock: str = "wall"  # what timed each run of the figure: wall | thread (:data:`CLOCKS`)

    def differences(self, current: Conditions) -> list[str]:
        """Each difference that makes ``current`` incomparable with ``self``, as one phrase: another
        control probe, a figure measured at other threads (one thread vs the configured ones), or
        timed by another clock (a wall-clock figure carries the slices a neighbour held the core,
        a thread-CPU one does not: under load they differ by more than any tolerance)."""
        out = []
        if self.control and current.control and self.control != current.control:
            out.append(f"control probe {self.control} → {current.control}")
        if self.figure != current.figure:
            out.append(f"gate figure at {FIGURES[self.figure]} → at {FIGURES[current.figure]}")
        if self.clock != current.clock:
            out.append(f"gate figure timed by {CLOCKS[self.clock]} → by {CLOCKS[current.clock]}")
        return out

    def changes(self, current: Conditions) -> list[str]:
        """Each change that is compared all the same, naming it: the backend's release, a setting."""
        out = []
        if _release(self.backend_version) != _release(current.backend_version):
            out.append(f"backend version {self.backend_version} → {current.backend_version}")
        for key in sorted(set(self.settings) | set(current.settings)):
            before, after = self.settings.get(key, "(unset)"), current.settings.get(key, "(unset)")
            if before != after:
                out.append(f"{key} {before} → {after}")
        return out

    def notes(self, current: Conditions) -> list[str]:
        """The changes compared all the same (:meth:`changes`; a patch release is one too)."""
        out = [f"compared across a change: {text}" for text in self.changes(current)]
        if self.backend_version != current.backend_version and not out:
            out.append(f"backend version {self.backend_version} → {current.backend_version} (patch release)")
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "backend_version": self.backend_version,
            "settings": dict(self.settings),
            "control": self.control,
            "figure": self.figure,
            "clock": self.clock,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Conditions:
        """Inverse of :meth:`to_dict` (strict: raises SchemaError)."""
        return cls(
            backend_version=read_str(data, "backend_version", ""),
            settings=read_str_map(data, "settings"),
            control=read_str(data, "control", ""),
            figure=_figure(read_str(data, "figure", "configured")),
            clock=_clock(read_str(data, "clock", "wall")),
        )


def _figure(name: str) -> str:
    if name not in FIGURES:
        raise SchemaError(f"'figure' must be one of {', '.join(FIGURES)}, got {name!r}")
    return name


def _clock(name: str) -> str:
    if name not in CLOCKS:
        raise SchemaError(f"'clock' must be one of {', '.join(CLOCKS)}, got {name!r}")
    return name
