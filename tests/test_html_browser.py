"""The HTML report in a real headless Chromium, offline: charts drawn, hover, sort, what-if.

Needs the Debian ``chromium`` package (CI installs it) and the ``playwright`` Python driver (the
``test`` extra); Playwright's own browser download is never used.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pytest
from _report_data import model_profile, result, results_of, run_results

from pytest_roofline.fmt import fmt_seconds
from pytest_roofline.report import html

CHROMIUM = os.environ.get("ROOFLINE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
SCREENSHOT = Path("/tmp/roofline-report.png")

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium installed (apt-get install chromium)")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """A report of a regressed model with a batch sweep and a second model, plus its data."""
    pytest.importorskip("jinja2")
    profiles = [
        model_profile(45, name="resnet", layer_prefix="block<b>"),
        model_profile(45, batch=4, seed=1, name="resnet"),
        model_profile(9, seed=2, name="tiny"),
    ]
    results = run_results(result(profiles[0]), result(profiles[1], "pass"), result(profiles[2], "pass"))
    path = tmp_path_factory.mktemp("report") / "report.html"
    html.write(results_of(results), path)
    return path, profiles


@pytest.fixture(scope="module")
def pw():
    """One Playwright driver for the module (its sync API cannot nest)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as driver:
        yield driver


@contextlib.contextmanager
def open_report(pw, path: Path, profile_dir: Path, width: int = 1400):
    """``path`` opened from file:// in headless Chromium, every non-file request aborted and recorded.

    Yields (page, requests, errors): the requests attempted and the console/page errors seen.
    """
    requests, errors = [], []
    context = pw.chromium.launch_persistent_context(
        str(profile_dir),
        executable_path=CHROMIUM,
        headless=True,
        args=[
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--no-first-run",
        ],
        viewport={"width": width, "height": 1000},
    )
    context.set_offline(True)

    def route(request_route):
        if request_route.request.url.startswith("file://"):
            request_route.continue_()
        else:
            requests.append(request_route.request.url)
            request_route.abort()

    context.route("**/*", route)
    tab = context.new_page()
    tab.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        tab.goto(path.as_uri())
        tab.wait_for_load_state("load")
        yield tab, requests, errors
    finally:
        context.close()


@pytest.fixture(scope="module")
def page(pw, report, tmp_path_factory):
    """The synthetic report, opened once for the module."""
    with open_report(pw, report[0], tmp_path_factory.mktemp("chromium-profile")) as opened:
        yield opened


def test_loads_offline_without_errors_or_requests(page) -> None:
    tab, requests, errors = page
    assert requests == []
    assert errors == []
    assert tab.locator("[data-chart] svg").count() == 3 + 2 + 3  # rooflines, sweep pair, histories


def test_one_point_per_executed_layer(page, report) -> None:
    tab, _, _ = page
    for index, profile in enumerate(report[1]):
        executed = [la for la in profile.layers if la.kind != "folded" and la.time > 0]
        assert tab.locator(f"section#r{index} [data-chart=roofline] circle.pt").count() == len(executed)
    roofs = tab.locator("section#r0 [data-chart=roofline] line.roof")
    assert roofs.count() == 3 + 2  # L1, L2 and DRAM memory roofs, float32 and float16 compute roofs
    assert tab.locator("section#r0 circle.ridge").count() == 1


def test_hover_and_click_show_the_layer(page, report) -> None:
    tab, _, _ = page
    biggest = max(report[1][0].layers, key=lambda la: la.time)
    point = tab.locator(f'section#r0 circle.pt[data-name="{biggest.name}"]')
    point.hover()
    tip = tab.locator("#tip")
    assert tip.is_visible()
    text = tip.inner_text()
    assert biggest.name in text and biggest.op_type in text and fmt_seconds(biggest.time) in text
    assert "FLOP/byte" in text and "bound" in text
    point.click()
    assert "pinned" in (tip.get_attribute("class") or "")
    row = tab.locator(f'section#r0 table.layers tr[data-name="{biggest.name}"]')
    assert "pinned" in (row.get_attribute("class") or "")
    tab.screenshot(path=str(SCREENSHOT), full_page=False)
    tab.mouse.click(5, 5)  # unpin
    assert tip.is_hidden()


def test_one_memory_roof_per_level_and_points_outlined_by_their_level(page, report) -> None:
    """Cache-aware roofline (issue 21): a roof line per level; each point's outline is its level's."""
    tab, _, _ = page
    chart = "section#r0 [data-chart=roofline]"
    memory = tab.locator(f"{chart} line.roof.memory")
    strokes = [memory.nth(i).get_attribute("stroke") for i in range(memory.count())]
    assert len(strokes) == 3 and len(set(strokes)) == 3  # L1, L2, DRAM: three colours
    labels = tab.locator(f"{chart} .roof-labels text").evaluate_all("ns => ns.map(n => n.textContent)")
    assert any(t.startswith("L2 ") for t in labels) and any(t.startswith("DRAM ") for t in labels)
    levels = {la.name: la.memory_level for la in report[1][0].layers if la.kind != "folded" and la.time > 0}
    assert len(set(levels.values())) >= 2
    colour_of = {}
    for name, level in levels.items():
        point = tab.locator(f'{chart} circle.pt[data-name="{name}"]')
        assert point.get_attribute("data-level") == level
        colour_of.setdefault(level, set()).add(point.evaluate("c => getComputedStyle(c).stroke"))
    assert all(len(colours) == 1 for colours in colour_of.values())  # one outline colour per level
    assert len({next(iter(c)) for c in colour_of.values()}) == len(colour_of)  # levels apart
    first = next(iter(levels))
    tab.locator(f'{chart} circle.pt[data-name="{first}"]').hover()
    assert f"memory level: {levels[first]}" in tab.locator("#tip").inner_text()
    tab.mouse.click(5, 5)


def test_layer_table_sorts_and_shows_top_k(page) -> None:
    tab, _, _ = page
    table = tab.locator("section#r0 table.layers")
    visible = "Array.from(document.querySelectorAll('section#r0 table.layers tbody tr'))"
    assert tab.evaluate(f"{visible}.filter(r => !r.classList.contains('hidden')).length") == 20
    table.locator("th", has_text="Bytes").click()
    values = tab.evaluate(f"{visible}.map(r => parseFloat(r.cells[8].dataset.v))")
    assert values == sorted(values, reverse=True)
    table.locator("th", has_text="Bytes").click()
    values = tab.evaluate(f"{visible}.map(r => parseFloat(r.cells[8].dataset.v))")
    assert values == sorted(values)
    table.locator("th", has_text="Layer").click()
    names = tab.evaluate(f"{visible}.map(r => r.cells[1].textContent)")
    assert names == sorted(names, key=lambda n: n.lower()) or names == sorted(names)
    tab.select_option("section#r0 select.topk", "0")
    assert tab.evaluate(f"{visible}.filter(r => !r.classList.contains('hidden')).length") == 45


def test_what_if_recomputes_the_latency(page, report) -> None:
    tab, _, _ = page
    profile = report[1][0]
    estimate = tab.locator("section#r0 table.whatif .estimate")
    assert estimate.inner_text() == fmt_seconds(profile.latency.median)
    tab.fill('section#r0 table.whatif input[data-op="Conv"]', "2")
    conv = sum(la.time for la in profile.layers if la.op_type == "Conv")
    expected = profile.latency.median * (profile.kernel_time - conv / 2) / profile.kernel_time
    assert estimate.inner_text() == fmt_seconds(expected)


def test_real_profile_report(pw, tmp_path) -> None:
    pytest.importorskip("jinja2")
    from _report_data import device_roofline

    from pytest_roofline.api import profile_model
    from pytest_roofline.results import RunResults
    from pytest_roofline.zoo import tiny_cnn

    profile = profile_model(
        tiny_cnn(),
        batch=1,
        roofline=device_roofline(),
        sessions=2,
        rounds=5,
        profile_iterations=3,
        options={"intra_op_threads": "1"},
    )
    path = tmp_path / "real.html"
    html.write(results_of(RunResults.of_profiles([profile]).to_dict()), path)
    with open_report(pw, path, tmp_path / "chromium-profile") as (tab, requests, errors):
        executed = [la for la in profile.layers if la.kind != "folded" and la.time > 0]
        assert tab.locator("section#r0 [data-chart=roofline] circle.pt").count() == len(executed)
        assert requests == [] and errors == []
        tab.locator("section#r0 [data-chart=roofline]").screenshot(path="/tmp/roofline-report-real.png")


def test_degenerate_results_render_without_errors(pw, tmp_path) -> None:
    """No roofline, no layers, only zero-FLOP layers, many op types: charts still draw."""
    pytest.importorskip("jinja2")
    from dataclasses import replace

    no_roof = model_profile(6, seed=4)
    no_roof_dict = result(no_roof, "pass")
    no_roof_dict["profile"]["roofline"] = None
    empty = result(model_profile(3, seed=5, name="empty"), "new")
    empty["profile"]["layers"], empty["history"] = [], []
    data_only = model_profile(4, seed=6, name="moves")
    moved = tuple(replace(la, flops=0, op_type="Reshape") for la in data_only.layers)
    data_only = replace(data_only, layers=moved)
    many = model_profile(30, seed=7, name="many")
    many = replace(many, layers=tuple(replace(la, op_type=f"Op{i % 15}") for i, la in enumerate(many.layers)))
    results = run_results(no_roof_dict, empty, result(data_only, "inconclusive"), result(many, "pass"))
    results["roofline"] = None
    path = tmp_path / "edge.html"
    html.write(results_of(results), path)
    with open_report(pw, path, tmp_path / "chromium-profile") as (tab, requests, errors):
        assert errors == [] and requests == []
        assert tab.locator("section#r0 circle.pt").count() == 6
        assert tab.locator("section#r0 line.roof").count() == 0
        assert tab.locator("section#r1 circle.pt").count() == 0
        assert tab.locator("section#r2 circle.pt").count() == 4  # all in the no-FLOPs strip
        assert tab.locator("section#r3 .legend text", has_text="other").count() == 1
        charts = tab.locator("[data-chart]")
        assert all(charts.nth(i).locator("svg").count() == 1 for i in range(charts.count()))


#: (badge text, colour, background, contrast) of every badge on the page, from computed styles
BADGE_CONTRAST = """() => {
  const rgb = s => s.match(/[\\d.]+/g).slice(0, 3).map(Number);
  const lin = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
  const lum = c => { const [r, g, b] = c.map(lin); return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  return Array.from(document.querySelectorAll('.badge')).map(el => {
    const style = getComputedStyle(el);
    const [a, b] = [lum(rgb(style.color)), lum(rgb(style.backgroundColor))];
    const contrast = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    return [el.textContent.trim(), style.color, style.backgroundColor, contrast];
  });
}"""


@pytest.mark.parametrize("width", [1050, 1600])
def test_every_verdict_readable_and_the_table_fits_the_window(pw, tmp_path, width) -> None:
    """Issue 24 item 6: every verdict's badge meets WCAG AA (4.5:1) and the results table fits a
    1050-px window with its median column in view; screenshots at /tmp/roofline-verdicts-<width>.png."""
    pytest.importorskip("jinja2")
    from pytest_roofline.gate.verdict import STATUSES
    from pytest_roofline.report.view import status_word

    items = []
    for index, status in enumerate(STATUSES):
        name = status.replace("-", "_")
        profile = model_profile(6, seed=index, name=f"model_{name}_int8_sweep")
        test = f"tests/perf/test_exported_models_perf.py::test_{name}_latency[onnxruntime-b8-seq=128]"
        items.append(result(profile, status, test=test))
    items[0]["outcome"] = "failed"
    not_compared = result(
        model_profile(6, seed=9, name="skipped"), "not-compared", test="tests/test_x.py::test_gpu"
    )
    not_compared["outcome"] = "skipped"
    results = results_of(run_results(*items, not_compared))
    path = tmp_path / "verdicts.html"
    html.write(results, path)
    with open_report(pw, path, tmp_path / "chromium-profile", width=width) as (tab, requests, errors):
        assert errors == [] and requests == []
        badges = tab.evaluate(BADGE_CONTRAST)
        shown = {text for text, *_ in badges}
        assert {status_word(record) for record in results.records} <= shown
        assert {status.upper() for status in STATUSES if status != "not-compared"} | {
            "PASSED",
            "SKIPPED",
        } <= shown
        low = [(text, colour, back, round(ratio, 2)) for text, colour, back, ratio in badges if ratio < 4.5]
        assert low == [], f"badges below WCAG AA 4.5:1: {low}"
        assert tab.evaluate("document.documentElement.scrollWidth") <= width
        median = tab.locator("table.overview th", has_text="Median").first.bounding_box()
        table = tab.locator("table.overview").bounding_box()
        assert median is not None and table is not None
        assert median["x"] + median["width"] <= width and table["x"] + table["width"] <= width
        tab.locator("table.overview").screenshot(path=f"/tmp/roofline-verdicts-{width}.png")


def test_the_roofline_chart_labels_the_dispatch_floor(pw, tmp_path) -> None:
    """Issue 33: a roofline with a dispatch floor says so on the chart, with the overhead-bound layers."""
    import dataclasses

    from _report_data import device_roofline

    from pytest_roofline.profile import Layer, apply_roofline

    pytest.importorskip("jinja2")
    floored = dataclasses.replace(device_roofline(), dispatch_floor=0.5e-6)
    base = model_profile(12, name="decode", roofline=floored)
    views = tuple(  # a decode step's views: 0 bytes, 1 µs each, priced at the floor alone
        apply_roofline(Layer(f"view_{i}", "Reshape", (f"Reshape_v{i}",), 1e-6, 0, 0), floored)
        for i in range(3)
    )
    profile = dataclasses.replace(base, layers=(*base.layers, *views))
    assert sum(la.bound == "overhead" for la in profile.layers) == 3 and profile.roofline_check.valid
    path = tmp_path / "report.html"
    html.write(results_of(run_results(result(profile, "pass"))), path)
    with open_report(pw, path, tmp_path / "chromium-profile") as (tab, requests, errors):
        label = tab.locator("section#r0 [data-chart=roofline] text.floor")
        assert label.count() == 1 and not errors and not requests
        assert label.text_content() == "dispatch floor 500 ns a kernel · 3 layers overhead-bound"
        assert (
            "Dispatch floor 500 ns a kernel: 3 layers overhead-bound"
            in tab.locator("section#r0 .overhead").inner_text()
        )
