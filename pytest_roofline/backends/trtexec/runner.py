"""TensorRT through the ``trtexec`` binary: cached engines, exported JSON, version-aware flags.

Two modes:

* run: ``trtexec`` (on PATH or ``--option trtexec=PATH``) builds an engine per model, bound shapes,
  precision and workspace (``--profilingVerbosity=detailed``), cached in the user cache dir
  (``$ROOFLINE_CACHE_DIR/engines`` or ``platformdirs.user_cache_dir("pytest-roofline")/engines``).
  ``time(n)`` reads ``--exportTimes``; ``profile(n)`` reads ``--exportProfile`` and
  ``--exportLayerInfo`` and runs at ``--verbose``, its console log kept for the memory room.
* import: ``--option profile=P layer_info=L times=T [log=LOG]`` reads exports made elsewhere (a
  Jetson, a CI GPU box) and gives the same profile without running anything.

Times and layers come only from the files trtexec exports; of its console output the version banner
is read here, and the profiled run's log is handed on whole (``KernelProfile.console_log``) for
``memory.trtexec_log``: the exports carry no memory, TensorRT's log lines do.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_roofline.backends.attribution import GraphIndex
from pytest_roofline.backends.base import Backend, BackendSession, KernelProfile
from pytest_roofline.backends.trtexec.formats import (
    TrtVersion,
    attribute_layers,
    build_command,
    parse_banner,
    parse_layer_info,
    parse_profile,
    parse_times,
    read_json,
)
from pytest_roofline.errors import BackendError, BackendUnavailable, OptionError
from pytest_roofline.files import atomic_write_text, file_lock, read_document
from pytest_roofline.model import graph_inputs, load_model, model_hash

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import numpy as np

    from pytest_roofline.model import ModelSpec

__all__ = ["TrtexecBackend", "TrtexecSession", "engine_cache_dir", "engine_stem", "run_trtexec"]

_PRECISIONS = ("fp32", "fp16", "int8", "best")
_IMPORT_KEYS = ("profile", "layer_info", "times", "log")
_VERBOSE = ("--verbose",)


def engine_cache_dir() -> Path:
    """Where built engines are kept: ``$ROOFLINE_CACHE_DIR/engines`` or the user cache dir."""
    root = os.environ.get("ROOFLINE_CACHE_DIR")
    if not root:
        import platformdirs

        root = platformdirs.user_cache_dir("pytest-roofline")
    return Path(root) / "engines"


def engine_stem(name: str, limit: int = 64) -> str:
    """A readable file-name stem for a model's engine: one path component, never a path.

    The name of a model given as a proto is its graph name, which anyone who wrote the model chose
    (``../../escaped/evil``, ``/tmp/x/evil``).  Everything but letters and digits (any script),
    ``.``, ``_`` and ``-`` becomes ``_``, leading dots and separators go, the length is capped; the
    engine's key digest follows it in the file name, so two models never share an engine.
    """
    stem = re.sub(r"[^\w.-]", "_", name).lstrip("._-")[:limit]
    return stem or "model"


def _failure_detail(out: str, err: str, lines: int = 3) -> str:
    """trtexec's ``[E]`` lines (it logs errors on stdout), then the last lines of stderr."""
    errors = [line.strip() for line in out.splitlines() if "[E]" in line]
    tail = [line.strip() for line in err.splitlines() if line.strip()]
    parts = errors[-lines:] + [f"stderr: {line}" for line in tail[-lines:]]
    if not parts:
        parts = [line.strip() for line in out.splitlines() if line.strip()][-lines:]
    return " | ".join(parts)[:600] or "no output"


def run_trtexec(cmd: Sequence[str], timeout: float) -> str:
    """Run trtexec in its own process group; returns stdout.

    Raises:
        BackendError: non-zero exit (with the last error lines), timeout (the whole group is
            killed), or a binary that cannot be started.
    """
    try:
        proc = subprocess.Popen(
            list(cmd),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,
        )
    except OSError as exc:
        raise BackendError(f"cannot run {cmd[0]}: {exc.strerror or exc}") from None
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise BackendError(
            f"trtexec did not finish within {timeout:g} s and was killed; raise --option timeout=SECONDS"
        ) from None
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name if -proc.returncode in signal.valid_signals() else ""
        detail = _failure_detail(out, err)
        raise BackendError(f"trtexec was killed by signal {name or -proc.returncode}: {detail}")
    if proc.returncode != 0:
        detail = _failure_detail(out, err)
        raise BackendError(f"trtexec failed with exit status {proc.returncode}: {detail}")
    return out


class _ClassOrInstance:
    """A method that is a classmethod on the class and a plain method on instances."""

    def __init__(self, on_class: Any, on_instance: Any) -> None:
        self.on_class, self.on_instance = on_class, on_instance
        self.__doc__ = "Whether trtexec can run (or, in import mode, is not needed)."

    def __get__(self, obj: Any, owner: type) -> Any:
        if obj is None:
            return self.on_class.__get__(owner, type(owner))
        return self.on_instance.__get__(obj, owner)


class TrtexecBackend(Backend):
    """TensorRT via ``trtexec`` (``pip install "pytest-roofline[tensorrt]"`` + TensorRT itself)."""

    name = "trtexec"
    extra = "tensorrt"
    options_help = {
        "trtexec": "path of the trtexec binary (default: found on PATH)",
        "precision": "fp32 (default), fp16, int8 or best; ignored by TensorRT 11 (strongly typed)",
        "workspace": "builder workspace in MiB",
        "timeout": "seconds before a trtexec run is killed (default 600)",
        "metric": "what time() returns: compute (GPU compute time, default) or latency (with copies)",
        "args": "extra trtexec arguments, shell-quoted",
        "chunk": "inferences timed per trtexec run, served to later time() calls (default 100)",
        "profile": "import mode: an existing --exportProfile JSON",
        "layer_info": "import mode: an existing --exportLayerInfo JSON",
        "times": "import mode: an existing --exportTimes JSON",
        "log": "import mode: trtexec's console log of that run (its memory lines: prof.memory)",
    }

    def __init__(self, options: Mapping[str, str] | None = None) -> None:
        super().__init__(options)
        self.precision = self.options.get("precision", "fp32").lower()
        if self.precision not in _PRECISIONS:
            raise OptionError(f"trtexec option precision={self.precision!r}: choose {', '.join(_PRECISIONS)}")
        self.metric = self.options.get("metric", "compute")
        if self.metric not in ("compute", "latency"):
            raise OptionError(f"trtexec option metric={self.metric!r}: choose compute or latency")
        self.timeout = self._number("timeout", 600.0)
        workspace = self._number("workspace", 0.0)
        self.workspace = int(workspace) or None
        try:
            self.extra_args = tuple(shlex.split(self.options.get("args", "")))
        except ValueError as exc:
            raise OptionError(f"trtexec option args: {exc}") from None
        self.imports = {k: self.options[k] for k in _IMPORT_KEYS if k in self.options}
        if self.imports and "profile" not in self.imports and "times" not in self.imports:
            raise OptionError(
                "trtexec import mode needs profile=FILE or times=FILE (layer_info or log alone has no times)"
            )
        self.chunk = int(self._number("chunk", 100.0))
        self._version: TrtVersion | None = None
        self._imported: list[float] | None = None
        self._cursor = 0

    def imported_times(self, iterations: int) -> list[float]:
        """The next ``iterations`` samples of the imported ``--exportTimes`` file, cycling."""
        if "times" not in self.imports:
            raise BackendError("import mode without times=FILE has no end-to-end times")
        if self._imported is None:
            self._imported = parse_times(read_json(self.imports["times"], "--exportTimes"), self.metric)
            if not self._imported:
                raise BackendError(f"{self.imports['times']}: no inference records")
        if iterations <= 0:
            return list(self._imported)
        count = len(self._imported)
        samples = [self._imported[(self._cursor + i) % count] for i in range(iterations)]
        self._cursor = (self._cursor + iterations) % count
        return samples

    def _number(self, key: str, default: float) -> float:
        text = self.options.get(key)
        if text is None:
            return default
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if value <= 0:
            raise OptionError(f"trtexec option {key}={text!r} must be a positive number")
        return value

    @property
    def import_mode(self) -> bool:
        """Whether exports are read from files instead of running trtexec."""
        return bool(self.imports)

    def executable(self) -> str | None:
        """The trtexec binary: the ``trtexec`` option, else PATH (None when not found)."""
        configured = self.options.get("trtexec")
        if configured:
            path = Path(configured)
            return str(path) if path.is_file() and os.access(path, os.X_OK) else None
        return shutil.which("trtexec")

    def _instance_available(self) -> bool:
        return self.import_mode or self.executable() is not None

    @classmethod
    def _class_available(cls) -> bool:
        return shutil.which("trtexec") is not None

    # On the class: trtexec on PATH.  On an instance (what get_backend asks): import mode, or
    # the configured/PATH binary exists.
    available = _ClassOrInstance(_class_available.__func__, _instance_available)  # type: ignore[attr-defined]

    def is_available(self) -> bool:
        """Import mode, or a runnable trtexec binary."""
        return self._instance_available()

    def unavailable_message(self) -> str:
        """The one line shown when trtexec cannot be found."""
        configured = self.options.get("trtexec")
        where = f"{configured} is not an executable file" if configured else "trtexec is not on PATH"
        return (
            f"backend 'trtexec' is not available: {where}; install TensorRT (trtexec ships with it), "
            "pass --option trtexec=PATH, or import exported files with --option profile=... times=..."
        )

    def check_available(self) -> None:
        """Raise :class:`BackendUnavailable` with :meth:`unavailable_message` if unusable."""
        if not self.is_available():
            raise BackendUnavailable(self.unavailable_message())

    def trt_version(self) -> TrtVersion:
        """The TensorRT version from trtexec's banner (``trtexec --help``), cached."""
        if self._version is None:
            self.check_available()
            exe = self.executable()
            assert exe is not None
            try:
                proc = subprocess.run(
                    [exe, "--help"],
                    capture_output=True,
                    text=True,
                    errors="replace",
                    timeout=min(self.timeout, 60.0),
                    start_new_session=True,
                )
            except subprocess.TimeoutExpired:
                raise BackendError(f"{exe} --help did not answer within 60 s") from None
            except OSError as exc:
                raise BackendError(f"cannot run {exe}: {exc.strerror or exc}") from None
            self._version = parse_banner(proc.stdout + proc.stderr)
        return self._version

    def version(self) -> str:
        """``TensorRT 8.6.1``, or ``imported`` in import mode."""
        return "imported" if self.import_mode else f"TensorRT {self.trt_version()}"

    def fingerprint(self) -> dict[str, Any]:
        """Runtime version, configuration and the GPU of ``--device`` (from NVML, no console scraping).

        The device class of a trtexec run is that GPU; import mode ran elsewhere and names none.
        """
        data: dict[str, Any] = {"backend": self.name, "version": self.version(), "precision": self.precision}
        if self.import_mode:
            data["imported"] = {k: str(Path(v).name) for k, v in sorted(self.imports.items())}
        else:
            from pytest_roofline.device.gpu import gpu_fingerprint

            data["workspace_mib"] = self.workspace
            data["args"] = list(self.extra_args)
            data["gpu"] = gpu_fingerprint(self.device_index())
        return data

    def device_index(self) -> int:
        """The GPU trtexec runs on: its ``--device=N`` (or ``--device N``) in ``args``, else 0."""
        args = list(self.extra_args)
        for position, arg in enumerate(args):
            value = arg.partition("=")[2] if arg.startswith("--device=") else None
            if arg == "--device" and position + 1 < len(args):
                value = args[position + 1]
            if value is not None:
                return int(value) if value.isdigit() else 0
        return 0

    def open(self, spec: ModelSpec, inputs: Mapping[str, np.ndarray]) -> TrtexecSession:
        """Build (or reuse) the engine for ``spec`` at the inputs' shapes; import mode reads files."""
        self.check_available()
        if self.precision != "fp32" and not self.import_mode and self.trt_version().strongly_typed:
            warnings.warn(
                f"TensorRT {self.trt_version()} is strongly typed: precision={self.precision} is ignored, "
                "the model's own types decide (export an fp16/int8 model instead)",
                stacklevel=2,
            )
        return TrtexecSession(self, spec, inputs)


class TrtexecSession(BackendSession):
    """One engine; every call runs trtexec on it (or reads the imported files)."""

    def __init__(self, backend: TrtexecBackend, spec: ModelSpec, inputs: Mapping[str, np.ndarray]) -> None:
        self._backend = backend
        self._spec = spec
        self._proto = load_model(spec.source)
        self._index = GraphIndex.from_model(self._proto)
        dynamic = {vi.name for vi in graph_inputs(self._proto) if _is_dynamic(vi)}
        self._shapes = {name: tuple(a.shape) for name, a in inputs.items() if name in dynamic}
        self._engine: Path | None = None
        self._workdir = Path(tempfile.mkdtemp(prefix="roofline-trtexec-"))
        self._model_file: Path | None = None
        self._buffer: list[float] = []
        self._log = ""  # the last trtexec run's console log (its memory lines)

    # -- engine ------------------------------------------------------------------------------
    def _model_path(self) -> str:
        if self._spec.path is not None:
            return str(self._spec.path.resolve())
        if self._model_file is None:
            self._model_file = self._workdir / "model.onnx"
            self._model_file.write_bytes(self._proto.SerializeToString())
        return str(self._model_file)

    def _engine_path(self) -> Path:
        backend = self._backend
        key = json.dumps(
            {
                "model": model_hash(self._spec.source),
                "shapes": {k: list(v) for k, v in sorted(self._shapes.items())},
                "precision": backend.precision,
                "workspace": backend.workspace,
                "args": list(backend.extra_args),
                "trt": str(backend.trt_version()),
            },
            sort_keys=True,
        )
        digest = hashlib.sha256(key.encode()).hexdigest()[:24]
        folder = engine_cache_dir()
        path = folder / f"{engine_stem(self._spec.name)}-{digest}.engine"
        if path.parent != folder:  # engine_stem makes one path component; never write elsewhere
            raise BackendError(f"model name {self._spec.name!r} cannot name an engine file")
        return path

    def _run(self, iterations: int, *, times: bool, profile: bool) -> dict[str, Path]:
        """Run trtexec once, building the engine first if it is not cached; the export paths."""
        backend = self._backend
        version = backend.trt_version()
        engine = self._engine or self._engine_path()
        engine.parent.mkdir(parents=True, exist_ok=True)
        files = {
            "times": self._workdir / "times.json" if times else None,
            "profile": self._workdir / "profile.json" if profile else None,
            "layer_info": self._workdir / "layers.json" if profile else None,
        }
        for path in files.values():
            if path is not None and path.exists():
                path.unlink()
        with file_lock(engine.with_name(engine.name + ".lock"), timeout=None):  # removed when released
            build = not engine.exists()
            cmd = build_command(
                backend.executable() or "trtexec",
                version,
                onnx=self._model_path() if build else None,
                engine=str(engine),
                build=build,
                shapes=self._shapes,
                precision=backend.precision,
                workspace_mib=backend.workspace,
                iterations=max(1, iterations),
                times=str(files["times"]) if files["times"] else None,
                profile=str(files["profile"]) if files["profile"] else None,
                layer_info=str(files["layer_info"]) if files["layer_info"] else None,
                # a profiled run logs its context's activation bytes at --verbose (prof.memory)
                extra_args=(*backend.extra_args, *_VERBOSE) if profile else backend.extra_args,
            )
            try:
                self._log = run_trtexec(cmd, backend.timeout)
            except BackendError:
                if build and engine.exists():
                    engine.unlink()  # never keep a half-written engine
                raise
            if build:  # what the build logged (the weights' bytes) holds for every later load
                atomic_write_text(_build_log(engine), self._log)
        self._engine = engine
        return {k: v for k, v in files.items() if v is not None}

    # -- protocol ------------------------------------------------------------------------------
    def time(self, iterations: int) -> list[float]:
        """Seconds per inference from ``--exportTimes`` (profiling off).

        Starting trtexec costs seconds (engine load), so one run times at least ``chunk``
        inferences and later calls are served from them; a fresh session starts a fresh run.
        Import mode replays the recorded samples in order, cycling (``time(0)``: all of them).
        """
        backend = self._backend
        if backend.import_mode:
            return backend.imported_times(iterations)
        while len(self._buffer) < iterations:
            path = self._run(max(iterations, backend.chunk), times=True, profile=False)["times"]
            if not path.exists():
                raise BackendError("trtexec wrote no --exportTimes file (profiling without a separate run?)")
            self._buffer.extend(parse_times(read_json(path, "--exportTimes"), backend.metric))
        samples, self._buffer = self._buffer[:iterations], self._buffer[iterations:]
        return samples

    def profile(self, iterations: int) -> KernelProfile:
        """Per-layer times from ``--exportProfile``, attributed with ``--exportLayerInfo``."""
        backend = self._backend
        if backend.import_mode:
            if "profile" not in backend.imports:
                raise BackendError("import mode without profile=FILE has no per-layer times")
            files = {k: Path(v) for k, v in backend.imports.items()}
        else:
            files = self._run(iterations, times=False, profile=True)
        count, rows = parse_profile(read_json(files["profile"], "--exportProfile"))
        layers = []
        layer_file = files.get("layer_info")
        if layer_file is not None and (backend.import_mode or layer_file.exists()):
            layers = parse_layer_info(read_json(layer_file, "--exportLayerInfo"))
        default = {"fp32": "fp32", "fp16": "fp16", "int8": "int8"}.get(backend.precision, "mixed")
        kernels = attribute_layers(rows, layers, self._index, count, default_precision=default)
        return dataclasses.replace(kernels, console_log=self._profiled_log())

    def _profiled_log(self) -> str:
        """The console log of the profiled run: import mode's ``log=FILE`` (else none), or the run's."""
        backend = self._backend
        if not backend.import_mode:
            built = _build_log(self._engine) if self._engine is not None else None
            if built is None or not built.is_file():
                return self._log
            return read_document(built) + "\n" + self._log  # a build's lines: as the log of the build
        if "log" not in backend.imports:
            return ""
        path = Path(backend.imports["log"])
        try:
            return read_document(path)
        except FileNotFoundError:
            raise BackendError(f"{path}: no such file (expected trtexec's console log)") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise BackendError(f"{path}: cannot read trtexec's console log ({exc})") from None

    def close(self) -> None:
        """Remove the temporary export files (the cached engine stays)."""
        shutil.rmtree(self._workdir, ignore_errors=True)


def _build_log(engine: Path) -> Path:
    """Where the console log of ``engine``'s build is kept, beside it."""
    return engine.with_name(engine.name + ".build.log")


def _is_dynamic(vi: Any) -> bool:
    dims = vi.type.tensor_type.shape.dim
    return any(not (d.HasField("dim_value") and d.dim_value > 0) for d in dims)
