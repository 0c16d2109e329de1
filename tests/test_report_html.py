"""HTML report: self-contained, escaped, small, complete (browser behaviour: test_html_browser.py)."""

from __future__ import annotations

import json
import re
import sys

import pytest
from _report_data import model_profile, result, results_of, run_results, sample_run

from pytest_roofline.errors import RooflineError
from pytest_roofline.report import html

pytest.importorskip("jinja2")

EVIL = '</script><img src=x onerror="alert(1)"><b>&amp;'


def embedded_data(page: str) -> dict:
    match = re.search(r'<script type="application/json" id="roofline-data">(.*?)</script>', page, re.S)
    assert match, "data blob missing"
    return json.loads(match.group(1))


def test_sections_of_a_full_run_are_present() -> None:
    page = html.render(results_of(sample_run(30)))
    for text in (
        "Batch sweeps",
        "Roofline",
        "Layers against the baseline",
        "History across commits",
        "What if",
        "Application spans",
        "REGRESSION",
        "2 per multiply-accumulate",
        "Precision: fp32",
    ):
        assert text in page, text
    data = embedded_data(page)
    assert [r["id"] for r in data["results"]] == ["r0", "r1", "r2"]
    assert data["sweeps"][0]["model"] == "resnet"
    assert [p["batch"] for p in data["sweeps"][0]["points"]] == [1, 8]
    # one data row per executed layer, folded nodes left out of the chart data but counted
    assert len(data["results"][0]["layers"]) == 30
    assert "2 folded node(s)" in page
    roof = data["results"][0]["roof"]
    assert set(roof["peaks"]) == {"float32", "float16"}
    assert [c[0] for c in roof["caches"]] == ["L1", "L2", "DRAM"]


def test_names_from_user_files_are_escaped_everywhere() -> None:
    profile = model_profile(8, name=EVIL, layer_prefix=EVIL)
    page = html.render(results_of(run_results(result(profile, test=f"tests/t.py::test[{EVIL}]"))))
    assert "<img" not in page and "</script><img" not in page
    assert page.count("</script>") == 2  # the data blob and the code, nothing from the data
    assert "&lt;img src=x" in page
    data = embedded_data(page)  # the blob parses back to the exact names
    assert data["results"][0]["layers"][0][0].startswith(EVIL)
    assert data["results"][0]["label"].startswith(EVIL)


def test_script_json_cannot_close_its_element() -> None:
    text = html.script_json({"a": "</script><!-- \u2028", "b": float("nan")})
    assert "<" not in text and ">" not in text and "\u2028" not in text
    assert json.loads(text) == {"a": "</script><!-- \u2028", "b": None}


def test_page_makes_no_network_requests() -> None:
    page = html.render(results_of(sample_run(20)))
    # the SVG namespace URI is an identifier, not a request; nothing else may name a host
    hosts = set(re.findall(r"https?://[^\s\"')]+", page)) - {"http://www.w3.org/2000/svg"}
    assert hosts == set()
    assert not re.search(r"<(link|img|iframe)\b|\bsrc=|@import|url\(", page.replace('"url(#clip-', ""))
    assert "default-src 'none'" in page  # the CSP forbids any fetch even if a name slipped through


def test_300_layer_model_is_under_5_mb(tmp_path) -> None:
    results = run_results(
        result(model_profile(300, batch=1, name="big")),
        result(model_profile(300, batch=4, seed=3, name="big")),
    )
    path = tmp_path / "report.html"
    html.write(results_of(results), path)
    size = path.stat().st_size
    assert 0 < size < 5 * 1024 * 1024
    assert len(embedded_data(path.read_text(encoding="utf-8"))["results"][1]["layers"]) == 300


def test_renders_without_roofline_verdict_or_history() -> None:
    profile = model_profile(5).to_dict()
    profile["roofline"] = None
    bare = {"schema_version": 1, "results": [{"test": "t::x", "profile": profile, "outcome": "passed"}]}
    page = html.render(results_of(bare))
    assert "PASSED" in page and "History across commits" not in page
    assert embedded_data(page)["results"][0]["roof"] is None
    assert "pytest-roofline report" in html.render(results_of({"schema_version": 1, "results": []}))


def test_what_if_table_lists_timed_op_types_and_roof_estimate() -> None:
    profile = model_profile(16)
    page = html.render(results_of(run_results(result(profile, "pass"))))
    ops = re.findall(r'data-op="([^"]+)"', page)
    assert sorted(ops) == sorted({la.op_type for la in profile.layers if la.time > 0})
    at_roof = profile.latency.median * (profile.kernel_time - profile.headroom) / profile.kernel_time
    assert f"If every layer reached its roof: {html.fmt_seconds(at_roof)}" in page


def test_missing_jinja2_names_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "jinja2", None)
    with pytest.raises(RooflineError, match=r"pytest-roofline\[reports\]"):
        html.render(results_of(sample_run(3)))


def test_extra_verdicts_are_listed() -> None:
    run = sample_run(4)
    run["results"][0]["verdicts"] = [
        {"metric": "layer:<conv>", "status": "regression", "ratio": 1.3, "message": "conv 1.30x slower"}
    ]
    page = html.render(results_of(run))
    assert "Other gate" in page and "layer:&lt;conv&gt;" in page and "1.300x" in page


def test_the_chart_has_one_memory_roof_per_level_and_each_layer_its_level() -> None:
    """Cache-aware roofline (issue 21): the levels layers sit on are drawn, each layer names its own."""
    page = html.render(results_of(sample_run(30)))
    data = embedded_data(page)
    result = data["results"][0]
    assert [(c[0], c[2]) for c in result["roof"]["caches"]] == [
        ("L1", 32 * 1024),
        ("L2", 1 << 20),
        ("DRAM", 0),
    ]
    levels = {row[0]: row[10] for row in result["layers"]}
    assert set(levels.values()) <= {"L1", "L2", "DRAM"} and len(set(levels.values())) >= 2, levels
    assert "<th>Level</th>" in page and '<td class="level">DRAM</td>' in page
    js = page[page.index("function drawRoofline") :]
    # the script draws a dashed line per cache level beside the DRAM roof and outlines points by level
    assert "levelColour[c[0]]" in js and "memoryRoof(c[0], c[1]" in js and '"data-level"' in js


def test_profile_only_report_shows_the_headroom_the_terminal_says_and_no_tolerance() -> None:
    """Issue 24 item 6: `roofline profile --html` said "Headroom 0 s" and "tolerance 0.0 %"."""
    from dataclasses import replace

    from _report_data import device_roofline

    from pytest_roofline.fmt import fmt_seconds
    from pytest_roofline.profile import apply_roofline
    from pytest_roofline.results import RunResults

    profile = model_profile(12, name="resnet")
    slow_roofs = replace(device_roofline(), peak_flops={"float32": 5e9}, peak_bandwidth=1e9)
    first = apply_roofline(replace(profile.layers[0], roofline_fraction=None), slow_roofs)
    impossible = replace(profile, layers=(first, *profile.layers[1:]))  # one layer above its roof
    for shown in (profile, impossible):
        assert shown.headroom > 0
        page = html.render(RunResults.of_profiles([shown]))
        headroom = re.search(r'Headroom</div><div class="v">([^<]*)<', page)
        assert headroom and headroom.group(1) == fmt_seconds(shown.headroom)
        assert "tolerance" not in page and "Against baseline" not in page
    assert impossible.roofline_check.status == "invalid"
    assert "(roofline invalid: an estimate)" in html.render(RunResults.of_profiles([impossible]))


def test_inconclusive_badge_text_is_not_painted_in_its_background_colour() -> None:
    """A later `.warn { color }` rule painted the badge's text the colour of its background."""
    from pytest_roofline.report.html import _static

    css = _static("report.css")
    rules = re.findall(r"([^{}]+)\{([^}]*)\}", css)
    colour = None
    for selector, body in rules:  # the last rule of equal or higher specificity wins
        selectors = [s.strip() for s in selector.split(",")]
        if any(s in (".badge", ".warn", ".badge.warn") for s in selectors):
            match = re.search(r"(?:^|;)\s*color:\s*([^;]+)", body)
            if match:
                colour = match.group(1).strip()
    assert colour == "#fff"


def test_one_session_is_not_sessions() -> None:
    """ "38 samples in 1 sessions": the count's noun agrees with it, in the HTML and the table."""
    import dataclasses

    from pytest_roofline.measure.stats import LatencyStats
    from pytest_roofline.report.tables import profile_table

    profile = model_profile(6)
    samples = [1e-3 + i * 1e-6 for i in range(38)]
    one = dataclasses.replace(profile, latency=LatencyStats.from_samples(samples, [samples]))
    page = html.render(results_of(run_results(result(one, "pass"))))
    assert "38 samples in 1 session<" in page and "1 sessions" not in page
    assert "(38 samples, 1 session, " in profile_table(one)
    assert "in 2 sessions" in html.render(results_of(run_results(result(profile, "pass"))))
