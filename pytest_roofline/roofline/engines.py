"""The run's backends and their device rooflines: each backend made with the run's options, each
roofline calibrated once per backend and options (cached on disk, spot-checked when read back),
each fingerprint named by its device class.

Free of pytest: the plugin's session (:mod:`pytest_roofline.pytest.session`) holds one for the run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_roofline.backends.base import Backend
    from pytest_roofline.roofline import DeviceRoofline

__all__ = ["Engines"]


class Engines:
    """Backends by name and their rooflines for one run.

    ``default`` is the run's backend; ``options_for(name)`` the run's options for it (they apply to
    the run's backend only); ``recalibrate`` measures the first roofline again instead of reading
    the cache; ``device_class`` names a fingerprint's device class (None: the built-in rule).
    """

    def __init__(
        self,
        default: str,
        options_for: Callable[[str], dict[str, str]],
        *,
        recalibrate: bool = False,
        progress: Callable[[str], None] | None = None,
        device_class: Callable[[Mapping[str, Any]], str] | None = None,
    ) -> None:
        self.default = default
        self._options_for = options_for
        self._recalibrate = recalibrate
        self._progress = progress
        self._device_class = device_class
        self.rooflines: dict[str, DeviceRoofline | None] = {}

    def backend(self, name: str | None, options: Mapping[str, str] | None) -> tuple[str, Backend]:
        """The backend a test asked for (the run's options apply to the run's backend)."""
        from pytest_roofline.backends.base import get_backend

        chosen = name or self.default
        merged = self._options_for(chosen) if chosen == self.default else {}
        merged.update(options or {})
        return chosen, get_backend(chosen, merged)

    def roofline_for(self, name: str, backend: Backend) -> DeviceRoofline | None:
        """The device roofline through ``backend``, calibrated once per run (cached on disk)."""
        ident = f"{name}|{sorted(backend.options.items())}"
        if ident not in self.rooflines:
            from pytest_roofline.roofline.calibrate import calibrate

            force = self._recalibrate and not any(self.rooflines.values())
            # a cached calibration is spot-checked (<= 0.5 s) and measured again when it is off
            self.rooflines[ident] = calibrate(
                backend, force=force, spot_check=not force, progress=self._progress
            )
        return self.rooflines[ident]

    def device_class(self, fingerprint: Mapping[str, Any]) -> str:
        """The device class that keys baselines (the hook's answer, else the built-in rule)."""
        if self._device_class is not None:
            return self._device_class(fingerprint)
        from pytest_roofline.device import device_class

        return device_class(fingerprint)
