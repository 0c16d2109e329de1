"""Hostile round four (issue 36): the history stores, locks, bisect, reports and baselines under
attack and faults.  One test (or more) per probe H1..H21 that failed, and the held probes kept held.

Real parts: a real tmpfs (mounted when the tests run as root) for a full disk, real processes of
other users (``runuser``) and other ``$TMPDIR``s for the locks, a real PostgreSQL server on a Unix
socket, a real TCP server that never answers.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _baselines import make_entry
from _history_data import point, postgres_url  # noqa: F401 - the session fixture
from _servers import silent_server

import pytest_roofline  # noqa: E402 - the tree under test, for the processes the tests start
from pytest_roofline.errors import RooflineError
from pytest_roofline.gate.store import BaselineStore
from pytest_roofline.history.store import JsonLinesStore, PostgresStore

ROOT = Path(pytest_roofline.__file__).resolve().parent.parent


def _run_as(user: str, code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``python -c code args`` as ``user`` (root runs it through runuser), with this tree importable."""
    command = [sys.executable, "-c", code, *args]
    if os.geteuid() == 0:
        runuser = shutil.which("runuser")
        if runuser is None:
            pytest.skip("runuser is missing")
        command = [runuser, "-u", user, "--", *command]
    elif user != "root":
        pytest.skip("another user's process needs root to start")
    full = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.Popen(command, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _python(code: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """``python -c code args`` on this tree; it must exit 0 within ``timeout`` (a hang fails)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", code, *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, done.stderr
    return done


@contextlib.contextmanager
def tmpfs(size: str) -> Iterator[Path]:
    """A real, small tmpfs (root only), unmounted after."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="roofline-full-"))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=False)
    if done.returncode != 0:
        folder.rmdir()
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
        folder.rmdir()


# --- H1: a store write is complete or reported failed -----------------------------------------


def test_h1_history_on_a_disk_that_fills_is_never_added_when_not(tmp_path: Path) -> None:
    """A real 64 KiB tmpfs filled up mid-append: the append raises and says how many points were
    added; every point it counts is readable, and no torn line is left behind."""
    with tmpfs("64k") as disk:
        store = JsonLinesStore(disk / "history")
        store.append([point(0, 1.0, commit="a" * 40)])
        (disk / "filler").write_bytes(b"x" * (60 * 1024 - 4096))  # what is left: a few KiB
        layers = {f"layer{j}": 0.1 for j in range(40)}
        big = [point(i, 1.0, layers=layers, commit="a" * 40) for i in range(1, 40)]
        with pytest.raises(RooflineError, match=r"cannot be written .*0 of 39 points added"):
            store.append(big)
        text = (disk / "history").joinpath(store.file_for(big[0]).relative_to(disk / "history")).read_text()
        assert text.endswith("\n") and len(text.splitlines()) == 1
        reread = JsonLinesStore(disk / "history")
        assert [p.id for p in reread.points()] == [point(0, 1.0).id] and reread.notes == []


def test_h1_a_short_write_is_written_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``os.write`` may write part of the buffer: the rest is written, not dropped."""
    real = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real(fd, bytes(data[:7])))
    store = JsonLinesStore(tmp_path)
    assert store.append([point(i, 1.0) for i in range(5)]) == 5
    monkeypatch.undo()
    assert len(JsonLinesStore(tmp_path).points()) == 5


# --- H2 / H10: locks across users and TMPDIRs ----------------------------------------------------

WRITE_ENTRY = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from _baselines import make_entry
from pytest_roofline.gate.store import BaselineStore
store = BaselineStore(Path(sys.argv[1]))
for i in range(int(sys.argv[4])):
    store.write([make_entry(f"tests/test_m.py::test_{sys.argv[2]}_{i}")])
"""


def test_h2_baseline_writers_with_their_own_tmpdir_lose_no_entry(tmp_path: Path) -> None:
    """8 processes, each its own ``$TMPDIR``, merge entries into one module file: all are kept."""
    directory = tmp_path / ".roofline"
    tests_dir = str(Path(__file__).parent)
    procs = []
    for writer in range(8):
        temp = tmp_path / f"tmp{writer}"
        temp.mkdir()
        env = {"TMPDIR": str(temp)}
        procs.append(_run_as("root", WRITE_ENTRY, str(directory), f"w{writer}", tests_dir, "5", env=env))
    for proc in procs:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
    entries = BaselineStore(directory).all_entries()
    assert len(entries) == 8 * 5


APPEND_POINTS = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from _history_data import point
from pytest_roofline.history.store import JsonLinesStore
# no limit on the wait for the file's lock: with 8 writers on a busy machine one of them can wait
# past the store's 120 s for its turn (the limit itself: test_history_store's lock-limit test)
store = JsonLinesStore(Path(sys.argv[1]), lock_timeout=None)
layers = {f"layer_{j}": 1e-4 for j in range(300)}  # lines of ~8 KB: a write takes a while
for i in range(int(sys.argv[4])):
    shared = point(0, 1.0, writer="shared", commit="d" * 40)
    store.append([point(i, 1.0, writer=sys.argv[2], commit="d" * 40, layers=layers), shared])
"""


def test_h2_history_writers_with_their_own_tmpdir_lose_and_double_nothing(tmp_path: Path) -> None:
    """8 processes x 60 points (and one point all of them send) into one file, each process with
    its own ``$TMPDIR``: every point once."""
    tests_dir = str(Path(__file__).parent)
    procs = []
    for writer in range(8):
        temp = tmp_path / f"tmp{writer}"
        temp.mkdir()
        args = (str(tmp_path / "h"), f"w{writer}-", tests_dir, "60")
        procs.append(_run_as("root", APPEND_POINTS, *args, env={"TMPDIR": str(temp)}))
    for proc in procs:
        # as long as the writers take (their CPU share under load); a hang: pytest-timeout's limit
        _, err = proc.communicate()
        assert proc.returncode == 0, err
    ids = [
        json.loads(line)["id"]
        for f in (tmp_path / "h").rglob("*.jsonl")
        for line in f.read_text().splitlines()
    ]
    assert len(ids) == len(set(ids)) == 8 * 60 + 1


def _as_user(name: str) -> None:
    """Become user ``name`` (a forked child of a root test: the interpreter is already loaded, so
    a folder only root reads, like ``/root``'s pyenv, does not matter)."""
    import pwd

    entry = pwd.getpwnam(name)
    os.setgroups([])
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)


def _hold(path: str, ready: Any, seconds: float) -> None:
    import fcntl

    _as_user("nobody")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # private: no other user may even open it
    fcntl.flock(fd, fcntl.LOCK_EX)
    ready.set()
    time.sleep(seconds)


def _measure(path: str, results: Any) -> None:
    import warnings

    from pytest_roofline.gate import runner

    _as_user("daemon")
    runner.MEASURE_LOCK, runner.FOREIGN_LOCK_WAIT = Path(path), 1.0
    waits, messages = [], []
    try:
        for _ in range(2):  # the second measurement of the run does not wait again
            start = time.monotonic()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with runner.measure_lock():
                    pass
            waits.append(time.monotonic() - start)
            messages += [str(w.message) for w in caught]
    except BaseException as exc:  # noqa: BLE001 - the failure the test reports
        messages.append(f"raised {exc!r}")
    results.put((waits, messages))


def test_h10_another_users_measure_lock_neither_crashes_nor_blocks() -> None:
    """User ``nobody`` holds a private (0600) measure lock file in a shared sticky folder for a
    minute; user ``daemon`` measures after a bounded wait, with a warning: no traceback."""
    import multiprocessing
    import tempfile

    if os.geteuid() != 0:
        pytest.skip("processes of two other users need root to start")
    import filelock

    from pytest_roofline.gate import runner  # noqa: F401 - loaded before the fork: the other users

    _ = filelock.Timeout  # cannot read /root's library, and filelock loads (secrets) on first use
    context = multiprocessing.get_context("fork")
    shared = Path(tempfile.mkdtemp(prefix="roofline-shared-", dir="/tmp"))  # noqa: S108 - like /tmp
    shared.chmod(0o1777)
    lock = str(shared / "pytest-roofline-measure.lock")
    ready, results = context.Event(), context.Queue()
    holder = context.Process(target=_hold, args=(lock, ready, 60.0))
    holder.start()
    try:
        assert ready.wait(30)
        waiter = context.Process(target=_measure, args=(lock, results))
        waiter.start()
        waits, messages = results.get(timeout=60)
        waiter.join(30)
        assert waiter.exitcode == 0
        assert len(messages) == 2, messages
        assert all("measured without the machine's measure lock" in m for m in messages), messages
        assert waits[0] < 10 and waits[1] < 0.5, waits
    finally:
        holder.kill()
        holder.join()
        shutil.rmtree(shared, ignore_errors=True)


def test_h10_a_symlink_or_fifo_planted_as_the_measure_lock_is_refused_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_roofline.gate import runner

    target = tmp_path / "victim"
    target.write_text("keep")
    lock = tmp_path / "measure.lock"
    lock.symlink_to(target)
    monkeypatch.setattr(runner, "MEASURE_LOCK", lock)
    with pytest.warns(RuntimeWarning, match="measured without"), runner.measure_lock():
        pass
    assert target.read_text() == "keep" and lock.is_symlink()


def test_h2_the_measure_lock_ignores_tmpdir(tmp_path: Path) -> None:
    code = "import os, sys; os.environ['TMPDIR'] = sys.argv[1]; from pytest_roofline.gate import runner; "
    done = _python(code + "print(runner.MEASURE_LOCK.parent)", str(tmp_path))
    assert done.stdout.strip() == "/tmp"  # the machine's, not $TMPDIR


# --- H5 / H19: hostile files in the history store ------------------------------------------------

READ_STORE = """
import sys
from pathlib import Path
from pytest_roofline.history.store import JsonLinesStore
store = JsonLinesStore(Path(sys.argv[1]))
print(len(store.points()), store.notes)
"""


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_h5_a_fifo_or_device_in_the_store_is_skipped_not_read(tmp_path: Path, kind: str) -> None:
    JsonLinesStore(tmp_path).append([point(0, 1.0)])
    bad = tmp_path / "CPU_x2" / "evil.jsonl"
    if kind == "fifo":
        os.mkfifo(bad)
    else:
        bad.symlink_to("/dev/zero")
    done = _python(READ_STORE, str(tmp_path))
    assert done.stdout.startswith("1 ") and "evil.jsonl cannot be read" in done.stdout


def test_h19_a_history_file_symlinked_outside_is_never_written_through(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("not yours\n")
    store = JsonLinesStore(tmp_path / "store")
    target = store.file_for(point(0, 1.0))
    target.parent.mkdir(parents=True)
    target.symlink_to(outside)
    with pytest.raises(RooflineError, match=r"\(a symlink, never written through\); 0 of 1 points added"):
        store.append([point(0, 1.0)])
    assert outside.read_text() == "not yours\n"


def test_h19_a_device_folder_symlinked_outside_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    store = JsonLinesStore(tmp_path / "store")
    store.root.mkdir()
    store.file_for(point(0, 1.0)).parent.symlink_to(outside)
    with pytest.raises(RooflineError, match="a symlink"):
        store.append([point(0, 1.0)])
    assert list(outside.iterdir()) == []


# --- H9: one bad point named and skipped ---------------------------------------------------------


def _newer(data: dict[str, object]) -> dict[str, object]:
    return {**data, "v": 999}


def test_h9_a_bad_line_in_another_commits_file_costs_only_that_line(tmp_path: Path) -> None:
    store = JsonLinesStore(tmp_path)
    store.append([point(0, 1.0, commit="a" * 40)])
    other = store.file_for(point(0, 1.0, commit="b" * 40))
    newer = _newer(point(1, 1.0, commit="b" * 40).to_dict())
    other.write_text("{broken\n" + json.dumps(newer) + "\n")
    assert store.append([point(2, 1.0, commit="c" * 40)]) == 1
    ids = [p.id for p in store.points()]
    assert ids == [point(0, 1.0).id, point(2, 1.0).id]
    assert sum("skipped" in note for note in store.notes) == 2


def test_h9_a_bad_row_in_postgres_costs_only_that_row(postgres_url: str) -> None:  # noqa: F811
    store = PostgresStore(postgres_url)
    try:
        good = point(0, 1.0, test="tests/test_h9.py::t")
        store.append([good])
        bad = _newer(point(1, 1.0, test="tests/test_h9.py::t").to_dict())
        store._conn.execute(
            "INSERT INTO roofline_points (id, test, key, device_class, series, time, value, data) "
            "VALUES ('h9-bad', 'tests/test_h9.py::t', 'k', 'd', 's', '2026', 1.0, %s)",
            (json.dumps(bad),),
        )
        store._conn.commit()
        assert [p.id for p in store.points(test="tests/test_h9.py::t")] == [good.id]
        assert len(store.notes) == 1 and "skipped" in store.notes[0]
    finally:
        store.close()


# --- H4 / H6: PostgreSQL URLs: secrets and a server that never answers ---------------------------


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:s3cret@host/db",
        "postgresql:///db?host=/tmp&user=u&password=s3cret",
        "postgresql:///db?PASSWORD=s3cret&host=/tmp",
        "postgresql:///db?passfile=/home/u/s3cret&host=/tmp",
        "postgres://u:s3cret@h/db?sslpassword=s3cret",
    ],
)
def test_h4_every_url_form_is_masked(url: str) -> None:
    from pytest_roofline.history.store import mask_url

    assert "s3cret" not in mask_url(url)


def test_h4_a_query_password_is_never_printed_on_a_connection_error(tmp_path: Path) -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(RooflineError) as caught:
        PostgresStore(f"postgresql:///db?host={tmp_path}&user=u&password=s3cret")
    assert "s3cret" not in str(caught.value) and "password=***" in str(caught.value)


def test_h6_a_server_that_never_answers_costs_at_most_5_s_in_all() -> None:
    """Three opens (tests' pairing reads, then the session end's append): one wait, one line each."""
    pytest.importorskip("psycopg")
    messages = []
    with silent_server() as port:
        url = f"postgresql://u@127.0.0.1:{port}/db?sslmode=disable"
        start = time.monotonic()
        for _ in range(3):
            with pytest.raises(RooflineError, match="cannot connect") as caught:
                PostgresStore(url)
            messages.append(str(caught.value))
        assert time.monotonic() - start <= 5.0
    assert all("\n" not in m for m in messages)


def test_held_fs_sanity(tmp_path: Path) -> None:
    """Held: a plain store round-trips with no note (the hardened reader reads regular files)."""
    store = JsonLinesStore(tmp_path)
    store.append([point(i, 1.0) for i in range(3)])
    assert len(store.points()) == 3 and store.notes == []
    assert stat.S_ISREG(next(tmp_path.rglob("*.jsonl")).lstat().st_mode)


# --- H11: numbers from baseline files range-checked where they are read --------------------------


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("sessions", 1e308),
        ("sessions", 1e-308),
        ("control_p25", 1e308),
        ("control_p25", 1e-308),
        ("figure", 1e300),
    ],
)
def test_h11_an_absurd_stored_number_is_one_line_where_it_is_read(
    tmp_path: Path, where: str, value: float
) -> None:
    from pytest_roofline.errors import BaselineError

    store = BaselineStore(tmp_path)
    entry = make_entry()
    store.write([entry])
    path = store.file_for(entry.test)
    data = json.loads(path.read_text())
    raw = data["entries"][entry.key]
    if where == "sessions":
        raw["sessions"] = [value, value]
    elif where == "control_p25":
        raw["control"]["p25"] = value
    else:
        raw[where] = value
    path.write_text(json.dumps(data))
    with pytest.raises(BaselineError, match="outside the") as caught:
        BaselineStore(tmp_path).get(entry.key, entry.test)
    assert "\n" not in str(caught.value)


def test_h11_ordinary_stored_numbers_still_read(tmp_path: Path) -> None:
    """Held: the range leaves every real figure alone (a 20 us model, a 10 minute one)."""
    store = BaselineStore(tmp_path)
    for figure in (2e-5, 600.0):
        entry = make_entry(f"tests/test_m.py::test_{int(figure * 1e6)}", figure=figure)
        store.write([entry])
        assert BaselineStore(tmp_path).get(entry.key, entry.test) == entry


# --- H12: a baseline beside an entry with 40k layers is written in linear time -------------------


def test_h12_one_line_layers_is_one_pass_and_names_cannot_spell_a_placeholder() -> None:
    from pytest_roofline.gate.store import _one_line_layers

    hostile = "\x00layer 0\x00"
    data = {"entries": {"k": {"layers": {hostile: {"time": 1.0}, "b": {"time": 2.0}}}}}
    text = _one_line_layers(data)
    assert json.loads(text) == data
    assert '        "b": {"time": 2.0}' in text.splitlines()  # one line per layer, nested as before
    big = {"entries": {"k": {"layers": {f"layer{i}": {"time": i * 1e-6} for i in range(40_000)}}}}
    start = time.process_time()
    text = _one_line_layers(big)
    assert time.process_time() - start < 2.0  # CPU time (quadratic: 38.9 s)
    assert json.loads(text) == big


# --- H14: history analysis linear in points x layers ---------------------------------------------


def test_h14_pelt_on_prefix_sums_finds_ruptures_breaks() -> None:
    """The O(1)-cost PELT gives the breaks ruptures' own (a variance per segment) gives."""
    np = pytest.importorskip("numpy")
    ruptures = pytest.importorskip("ruptures")
    from pytest_roofline.history.changepoints import pelt_l2

    rng = np.random.default_rng(36)
    compared = 0
    for _ in range(120):
        n = int(rng.integers(6, 120))
        data = rng.normal(0.0, 0.01, n)
        for _ in range(int(rng.integers(0, 4))):
            data[int(rng.integers(0, n)) :] += rng.normal(0.0, 0.05)
        min_size = int(rng.integers(1, 5))
        if n < 2 * min_size:
            continue
        penalty = float(rng.uniform(1e-5, 1e-2))
        expected = (
            ruptures.Pelt(model="l2", min_size=min_size, jump=1).fit(data.reshape(-1, 1)).predict(pen=penalty)
        )
        assert pelt_l2(data, penalty, min_size) == expected
        compared += 1
    assert compared > 100


# --- H13 / H17 / H18: one escape per medium wherever stored names are printed --------------------


def test_h13_a_carriage_return_in_a_node_name_never_splits_a_csv_row(tmp_path: Path) -> None:
    """``roofline analyze --format csv`` on a real model whose node is named ``"\\r=1+1"``."""
    import csv
    import io

    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["y"], name="\r=1+1"),
            helper.make_node("Relu", ["y"], ["z"], name="ok"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 8])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")
    cli = "import sys; from pytest_roofline.cli import main; sys.exit(main())"
    done = _python(cli, "analyze", str(tmp_path / "m.onnx"), "--format", "csv", timeout=120)
    rows = list(csv.reader(io.StringIO(done.stdout, newline="")))
    assert len(rows) == 3  # header + two nodes: the CR split nothing
    assert all(not cell.startswith(("=", "+", "@")) for row in rows for cell in row)
    assert "\r" not in done.stdout


def test_h13_csv_cell_is_the_one_csv_escape() -> None:
    from pytest_roofline.fmt import csv_cell

    assert csv_cell("\r=1+1") == "\\x0d=1+1"
    assert csv_cell("a\nb") == "a\nb"  # data: the writer quotes a newline
    assert csv_cell("=SUM(A1)") == "'=SUM(A1)" and csv_cell("-0.5") == "-0.5" and csv_cell(3) == 3


def test_h17_escape_sequences_in_stored_names_never_reach_the_terminal() -> None:
    """The change-point line of ``roofline history`` (the table was already escaped)."""
    from pytest_roofline.cli.history import _table

    hostile = "tests/t.py::test_\x1b]0;pwned\x07\x1b[31mred"
    change = {"change": 0.08, "ci": [0.05, 0.1], "commit": "a" * 40, "runs_after": 4}
    change |= {"layers": ["\x1b[2Jconv +30 %"], "explanation": "\x1b]8;;http://x\x07link"}
    series = {"test": hostile, "device_class": "CPU", "points": [{"value": 1.0, "verdict": "pass"}]}
    series["change_points"] = [change]
    text = _table({"series": [series]})
    assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b]0;pwned" in text


def test_h18_a_parametrize_id_never_renders_as_an_image_in_markdown() -> None:
    from _report_data import model_profile, result, results_of, run_results

    from pytest_roofline.report import markdown

    hostile = "tests/test_m.py::test_a[![x](http://127.0.0.1:9/x.png)]"
    profile = model_profile(4, name="![y](http://127.0.0.1:9/y.png)", layer_prefix="[l](http://127.0.0.1:9/)")
    text = markdown.render(results_of(run_results(result(profile, test=hostile))))
    outside_code = "\n".join(line for line in text.splitlines() if not line.startswith("- "))
    assert not re.search(r"(?<!\\)[\[\]]", outside_code)  # every bracket escaped: no link, no image
    assert "!\\[y\\](http://127.0.0.1:9/y.png)" in text
    assert "![x](http://127.0.0.1:9/x.png)" in text  # the failed-tests list: inside a code span, inert
    listed = next(line for line in text.splitlines() if line.startswith("- "))
    assert listed.startswith("- `tests/test_m.py::test_a[![x](http://127.0.0.1:9/x.png)]`")


def test_held_markdown_code_spans_cannot_be_closed_from_inside() -> None:
    from pytest_roofline.fmt import markdown_code

    assert markdown_code("a`b") == "``a`b``"
    assert markdown_code("`x") == "`` `x ``"


# --- H15 / H16: output paths and --build strings, one line and exit 2 ---------------------------


@pytest.mark.parametrize("where", ["under-a-file", "a-folder", "proc", "full-disk"])
@pytest.mark.parametrize("action", ["export", "html"])
def test_h15_an_output_path_that_cannot_be_written_is_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    where: str,
    action: str,
) -> None:
    from pytest_roofline.cli import main

    JsonLinesStore(tmp_path / "h").append([point(i, 1.0) for i in range(3)])
    (tmp_path / "file").write_text("x")
    (tmp_path / "folder").mkdir()
    disk = contextlib.nullcontext(tmp_path)
    if where == "full-disk":
        disk = tmpfs("8k")  # type: ignore[assignment]
    monkeypatch.chdir(tmp_path)
    with disk as root:
        if where == "full-disk":
            (root / "filler").write_bytes(b"x" * 8192)
        output = {
            "under-a-file": tmp_path / "file" / "out.html",
            "a-folder": tmp_path / "folder",
            "proc": Path("/proc/roofline-out.html"),
            "full-disk": root / "out.html",
        }[where]
        argv = [
            "history",
            action,
            *(["-o"] if action == "export" else []),
            str(output),
            "--store",
            str(tmp_path / "h"),
        ]
        if action == "html":
            argv.append("--no-explain")
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot be written" in err and "Traceback" not in err


def test_h16_an_unsplittable_build_string_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_roofline.cli import main

    argv = ["bisect", "HEAD~1", "HEAD", "--test", "t", "--model", "m.onnx", "--build", 'echo "unterminated']
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot be split" in err and "No closing quotation" in err


# --- H8 / H20 / H7: bisect --------------------------------------------------------------------------


@pytest.fixture
def bisect_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[str]]:
    from test_history_bisect import _repo

    root = tmp_path / "repo"
    shas = _repo(root, [3, 3, 6])
    monkeypatch.chdir(root)
    return root, shas


@pytest.mark.parametrize("model", ["../outside.onnx", "ABSOLUTE", "link.onnx"])
def test_h8_a_model_outside_the_repository_is_refused(
    bisect_repo: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str], model: str
) -> None:
    from _plugin_helpers import matmul_chain

    from pytest_roofline.cli import main

    root, shas = bisect_repo
    outside = root.parent / "outside.onnx"
    matmul_chain(outside, 3, size=96)
    if model == "ABSOLUTE":
        model = str(outside)
    if model == "link.onnx":  # a symlink committed in the repository, pointing out of it
        (root / "link.onnx").symlink_to(outside)
        subprocess.run(["git", "add", "link.onnx"], cwd=root, check=True)
        subprocess.run(["git", "commit", "-qm", "link"], cwd=root, check=True)
        shas = [
            *shas,
            subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True
            ).stdout.strip(),
        ]
    assert main(["bisect", shas[0], shas[-1], "--test", "t", "--model", model]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ("leaves the repository" in err or "inside the repository" in err), err


def test_h20_the_repro_line_keeps_backend_and_batch(
    bisect_repo: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_roofline.cli import main

    root, shas = bisect_repo
    argv = [
        "bisect",
        shas[0],
        shas[1],
        "--test",
        "t",
        "--model",
        "model.onnx",
        "--batch",
        "2",
        "--format",
        "json",
    ]
    assert main([*argv, "--backend", "onnxruntime"]) == 0  # same bytes: nothing timed
    repro = json.loads(capsys.readouterr().out)["repro"]
    assert "--backend onnxruntime" in repro and "--batch 2" in repro


BUILD_THAT_HANGS = """
import os, subprocess, sys, time
from pathlib import Path
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
Path(sys.argv[1]).write_text(f"{os.getpid()} {child.pid}")
time.sleep(300)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie is gone for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    return True


def test_h7_sigterm_during_bisect_cleans_worktrees_temp_dir_and_build(
    bisect_repo: tuple[Path, list[str]], tmp_path: Path
) -> None:
    import signal

    root, shas = bisect_repo
    (tmp_path / "hang.py").write_text(BUILD_THAT_HANGS)
    pids, temp = tmp_path / "pids", tmp_path / "tmp"
    temp.mkdir()
    cli = "import sys; from pytest_roofline.cli import main; sys.exit(main())"
    build = f"{sys.executable} {tmp_path / 'hang.py'} {pids}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            cli,
            "bisect",
            shas[0],
            shas[-1],
            "--test",
            "t",
            "--model",
            "model.onnx",
            "--build",
            build,
        ],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(temp)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not (pids.exists() and len(pids.read_text().split()) == 2) and time.monotonic() < deadline:
        time.sleep(0.1)
    build_pid, grandchild = (int(p) for p in pids.read_text().split())
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    assert not list(temp.glob("roofline-bisect-*"))
    listed = subprocess.run(["git", "worktree", "list"], cwd=root, capture_output=True, text=True).stdout
    assert listed.count("\n") == 1, listed
    time.sleep(0.2)
    assert not _alive(build_pid) and not _alive(grandchild)


# --- H21: a model-store entry tampered in place in the process that hashed it -------------------


def test_h21_a_tampered_entry_is_caught_in_the_same_process(tmp_path: Path) -> None:
    from _plugin_helpers import matmul_chain

    from pytest_roofline.gate.model_store import ModelStore

    model = tmp_path / "m.onnx"
    matmul_chain(model, 3, size=32)
    store = ModelStore(tmp_path / "store")
    digest = store.put(model)
    stored = store.get(digest)
    assert stored is not None
    before = stored.stat()
    data = bytearray(stored.read_bytes())
    data[-1] ^= 0xFF  # same size
    stored.write_bytes(bytes(data))
    os.utime(stored, ns=(before.st_atime_ns, before.st_mtime_ns))  # mtime restored
    assert store.get(digest) is None
    assert any("failed its hash check" in note for note in store.notes)


# --- through the plugin: the run's own point reported truly (H9), an unanswering server (H6) -----

PLUGIN_TEST = """
def test_model(model_profile):
    model_profile("model.onnx")
"""


@pytest.fixture
def project(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> pytest.Pytester:
    from _plugin_helpers import relu_chain

    monkeypatch.setenv("ROOFLINE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.delenv("ROOFLINE_HISTORY", raising=False)
    pytester.makepyfile(test_model=PLUGIN_TEST)
    relu_chain(pytester.path / "model.onnx", 3)
    return pytester


def test_h9_a_bad_point_in_the_store_costs_neither_the_run_nor_its_point(project: pytest.Pytester) -> None:
    pytest.importorskip("ruptures")
    from _plugin_helpers import FAKE

    store = project.path / "hist"
    other = store / "elsewhere" / f"{'b' * 40}.jsonl"
    other.parent.mkdir(parents=True)
    other.write_text("{broken\n" + json.dumps({"v": 999, "id": "x"}) + "\n")
    result = project.runpytest(*FAKE, f"--roofline-history={store}")
    result.assert_outcomes(passed=1)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*history: 1 point added to*", "*line 1: not JSON; skipped*"])
    assert "history not written" not in result.stdout.str()


def test_h6_h4_a_silent_server_costs_one_wait_and_one_masked_line(project: pytest.Pytester) -> None:
    pytest.importorskip("psycopg")
    from _plugin_helpers import FAKE

    project.makepyfile(
        test_more="\n".join(
            f"def test_{i}(model_profile):\n    model_profile('model.onnx')\n" for i in range(3)
        )
    )
    with silent_server() as port:
        url = f"postgresql://u@127.0.0.1:{port}/db?sslmode=disable&password=s3cret"
        start = time.monotonic()
        result = project.runpytest(*FAKE, f"--roofline-history={url}")
        took = time.monotonic() - start
    text = result.stdout.str() + result.stderr.str()
    assert "s3cret" not in text
    assert text.count("cannot connect") == 1, text
    assert took < 30  # the landed code: 30 s per test and 30 s at the end (4 tests: 150 s)


# --- held probes (issue 36's "held" list), kept held ---------------------------------------------


def test_held_dashboard_payload_cannot_close_its_script() -> None:
    from pytest_roofline.history.dashboard import render

    hostile = "</script><script>alert(1)</script><!--\u2028"
    page = render({"series": [{"test": hostile, "points": [], "change_points": []}]})
    assert "alert(1)</script>" not in page and "<!--\u2028" not in page


def test_held_commit_and_device_class_cannot_leave_the_store(tmp_path: Path) -> None:
    from dataclasses import replace

    store = JsonLinesStore(tmp_path / "store")
    hostile = replace(point(0, 1.0), device_class="../../../etc", commit="../../x/../y")
    store.append([hostile])
    (written,) = list((tmp_path / "store").rglob("*.jsonl"))
    assert written.resolve().is_relative_to((tmp_path / "store").resolve())
    assert not (tmp_path / "etc").exists()


def test_held_sql_is_parameterised(postgres_url: str) -> None:  # noqa: F811
    store = PostgresStore(postgres_url)
    try:
        hostile = "tests/t.py::test_'; DROP TABLE roofline_points; --"
        store.append([point(0, 1.0, test=hostile)])
        assert [p.test for p in store.points(test=hostile)] == [hostile]
    finally:
        store.close()


# --- H5 beyond the history: the model store and a model that is a FIFO ---------------------------


def test_h5_a_fifo_as_a_model_or_a_manifest_is_refused_not_read(tmp_path: Path) -> None:
    code = """
import os, sys
from pathlib import Path
from pytest_roofline.errors import ModelError
from pytest_roofline.gate.model_store import MANIFEST, ModelStore, content_hash
root = Path(sys.argv[1])
os.mkfifo(root / "model.onnx")
try:
    content_hash(root / "model.onnx")
except ModelError as exc:
    print("model:", exc)
entry = root / "store" / ("a" * 64)
entry.mkdir(parents=True)
os.mkfifo(entry / MANIFEST)
print("manifest:", ModelStore(root / "store").get("a" * 64))
"""
    done = _python(code, str(tmp_path))
    assert "model: " in done.stdout and "not a regular file" in done.stdout
    assert "manifest: None" in done.stdout


def test_h6_every_statement_is_bounded_on_the_server(postgres_url: str) -> None:  # noqa: F811
    from pytest_roofline.history.store import STATEMENT_TIMEOUT_MS

    store = PostgresStore(postgres_url)
    try:
        (value,) = store._conn.execute("SHOW statement_timeout").fetchone()
        assert value == f"{STATEMENT_TIMEOUT_MS // 1000}s"
    finally:
        store.close()
