"""report.html's building blocks (fastcoord.pipeline.html) and its charts' script, run in
headless Chromium: a page of every kind of chart, drawn, hovered, zoomed; a broken one."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from fastcoord.pipeline import html
from fastcoord.pipeline.html import Figure, Page
from fastcoord.testing_browser import Element, chromium, dump_dom, parse

RUN_S = 3600
TITLE = 'fastcoord report: run<script>document.documentElement.dataset.owned = "1"</script>'
PHASES = [(0, 31, "joining"), (31, 1800, "steady"), (1800, 3000, "churn"), (3000, 3600, "drain")]
FAULTS = [(1200, 1260, "node 2 killed"), (2400, 2430, "partition")]
TIME_CHARTS = ("latency", "members", "errors", "commits", "apis", "empty-time")
OTHER_CHARTS = ("sizes", "cdf", "histogram", "all-null")


def bands() -> list[dict[str, Any]]:
    return [{"from": a, "to": b, "label": t, "kind": "phase"} for a, b, t in PHASES] + [
        {"from": a, "to": b, "label": t, "kind": "fault"} for a, b, t in FAULTS
    ]


def latency(t: int, run: int, quantile: int) -> float | None:
    """A made-up latency (ms) with spikes in the faults; 0 (left out on a log axis) and
    gaps now and then."""
    if quantile == 2 and t % 500 == 7:
        return 0.0
    if t % 997 == 3:
        return None
    spike = 40.0 if any(a <= t < b for a, b, _ in FAULTS) else 1.0
    wave = math.sin(t / 97) + math.sin(t / 13) / 4
    return round((2 + quantile * 4 + run + wave) * (1 + quantile) * spike, 3)


def errors(window: int, kind: int) -> int:
    """Made-up errors per 10 s: bursts in the faults, a trickle in the churn."""
    if any(a - 10 <= window < b + 30 for a, b, _ in FAULTS):
        return 400 * (kind + 1) + window % 70
    return (window // 10) % (3 + kind) * 5 if 1800 <= window < 3000 else 0


def specs() -> list[dict[str, Any]]:
    seconds = list(range(RUN_S))
    windows = list(range(0, RUN_S, 10))
    states = ("stable", "joining", "rebalancing", "dead")
    return [
        {
            "id": "latency",
            "title": "Heartbeat latency (ms)",
            "type": "line",
            "x": {"label": "seconds since the run's start", "kind": "time"},
            "y": {"label": "ms", "log": True},
            "series": [
                {
                    "name": f"{q} (run{run})",
                    "x": seconds,
                    "y": [latency(t, run, i) for t in seconds],
                }
                for run in (1, 2)
                for i, q in enumerate(("p50", "p99", "max"))
            ],
            "bands": bands(),
            "note": "per second, from the members' histograms",
        },
        {
            "id": "members",
            "title": "Members by state",
            "type": "area",
            "stacked": True,
            "x": {"label": "seconds since the run's start", "kind": "time"},
            "y": {"label": "members"},
            "series": [
                {
                    "name": state,
                    "x": seconds,
                    "y": [
                        [9000 + t % 50, 400 + t % 30, 100 * (1800 <= t < 3000), t // 200][k]
                        for t in seconds
                    ],
                }
                for k, state in enumerate(states)
            ],
            "bands": bands(),
        },
        {
            "id": "errors",
            "title": "Errors per 10 s",
            "type": "bars",
            "x": {"label": "seconds since the run's start", "kind": "time"},
            "y": {"label": "errors"},
            "series": [
                {"name": name, "x": windows, "y": [errors(w, k) for w in windows]}
                for k, name in enumerate(("REBALANCE_IN_PROGRESS", "UNKNOWN_MEMBER_ID"))
            ],
            "bands": bands(),
        },
        {
            "id": "commits",
            "title": "OffsetCommits per second",
            "type": "step",
            "x": {"label": "seconds since the run's start", "kind": "time"},
            "y": {"label": "commits/s", "min": 0},
            "series": [
                {
                    "name": "run1",
                    "x": seconds,
                    "y": [
                        None if 1200 <= t < 1260 else 2_500_000 + (t % 60) * 1000 for t in seconds
                    ],
                }
            ],
            "bands": bands()[-2:],
        },
        {
            # The most a report draws in one chart: 10 series of an hour, second by second.
            "id": "apis",
            "title": "p99 latency by API (ms)",
            "type": "line",
            "x": {"label": "seconds since the run's start", "kind": "time"},
            "y": {"label": "ms"},
            "series": [
                {
                    "name": f"api {k}",
                    "x": seconds,
                    "y": [
                        k + math.sin(t / (20 + k)) + (30 if t % 600 == k else 0) for t in seconds
                    ],
                }
                for k in range(10)
            ],
        },
        {
            "id": "empty-time",
            "title": "Fetches (none in this run)",
            "type": "line",
            "x": {"label": "seconds since the run's start", "kind": "time"},
            "y": {"label": "fetches"},
            "series": [],
        },
        {
            "id": "sizes",
            "title": "Rebalance duration by group size",
            "type": "bars",
            "x": {"label": "group size, members", "kind": "category"},
            "y": {"label": "ms"},
            "series": [
                {"name": f"p{q} (run1)", "x": ["1-9", "10-99", "100-999", "1000+"], "y": ys}
                for q, ys in ((50, [12, 30, 250, 1900]), (99, [40, 95, 900, 7400]))
            ],
        },
        {
            "id": "cdf",
            "title": "Rebalance durations, cumulative",
            "type": "line",
            "x": {"label": "rebalance duration, ms", "kind": "log"},
            "y": {"label": "fraction", "min": 0, "max": 1},
            "series": [
                {
                    "name": "run1",
                    "x": [0, *(10 ** (k / 20) for k in range(81))],  # 0 has no place: left out
                    "y": [0, *(1 - math.exp(-(10 ** (k / 20)) / 300) for k in range(81))],
                }
            ],
        },
        {
            "id": "histogram",
            "title": "Session lengths",
            "type": "bars",
            "x": {"label": "session length, s", "kind": "linear"},
            "y": {"label": "sessions", "log": True},
            "series": [
                {
                    "name": "sessions",
                    "x": list(range(0, 300, 10)),
                    "y": [int(10_000 * math.exp(-s / 40)) for s in range(0, 300, 10)],
                }
            ],
        },
        {
            "id": "all-null",
            "title": "Lag by partition",
            "type": "bars",
            "x": {"label": "partition", "kind": "category"},
            "y": {"label": "messages"},
            "series": [{"name": "lag", "x": ["p0", "p1"], "y": [None, float("nan")]}],
        },
    ]


SECTIONS = {
    "Latency": ("latency", "apis", "empty-time"),
    "Members": ("members",),
    "Commits": ("commits",),
    "Errors": ("errors",),
    "Rebalances": ("sizes", "cdf"),
    "Sessions and lag": ("histogram", "all-null"),
}


def build(path: Path, chart_specs: list[dict[str, Any]] | None = None) -> Path:
    """The test page: a verdict, figures, inputs left out, a table and the charts of
    `chart_specs` (specs() if None) in sections, as report.py would build it."""
    page = Page(TITLE, subtitle="churn load test, 2 runs of 1 h <b>each</b>")
    page.verdict(False, "2 of 5 thresholds failed <i>here</i>", ["p99 JoinGroup 41 ms > 20 ms"])
    page.problems(["runs/old: schema 1 (<2>), left out"])
    page.figures(
        [
            Figure("heartbeat-p99-ms", "heartbeat p99", 41.25, unit="ms", tone="bad"),
            Figure("rebalances", "rebalances", 12345, note="as the members saw them"),
            Figure("commit-rate", "OffsetCommits/s", 2_512_000.5, unit="/s", tone="good"),
            Figure("lost", "members lost <x>", None, note="no events"),
        ]
    )
    placed = {spec["id"]: page.chart(spec) for spec in chart_specs or specs()}
    for heading, ids in SECTIONS.items():
        content = "".join(placed.pop(i) for i in ids if i in placed)
        if heading == "Errors":
            rows = [{"api": "JoinGroup", "errors": 3 + k, "rate": 0.25} for k in range(30)]
            content += html.table(rows, limit=5, source="tables/errors_by_api/")
        page.section(heading, content)
    if placed:
        page.section("More", "".join(placed.values()))
    path.write_text(page.render())
    return path


def require_chromium() -> None:
    if chromium() is None:
        pytest.fail(
            "no Chromium for the page's browser tests: apt-get install chromium "
            "(make test installs it), or set FASTCOORD_CHROMIUM to a Chromium binary"
        )


@pytest.fixture(scope="module")
def page_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build(tmp_path_factory.mktemp("page") / "report.html")


@pytest.fixture(scope="module")
def dom(page_path: Path) -> Element:
    """The page as Chromium left it once its scripts ran: one browser run for the checks
    of what was drawn."""
    require_chromium()
    return parse(dump_dom(page_path))


def figure(dom: Element, chart_id: str) -> Element:
    return dom.find("figure", id=f"chart-{chart_id}")


def test_the_page_needs_no_network_and_is_of_a_sane_size(page_path: Path) -> None:
    text = page_path.read_text()
    assert "http://" not in text and "https://" not in text
    references = re.findall(r"""(?:src|href)\s*=\s*["']?([^"'\s>]+)|url\(\s*["']?([^"')]+)""", text)
    for found in (a or b for a, b in references):
        assert not found.startswith("//") and ":" not in found.split("#")[0], found
    # 10 series of 3,600 points and a few more: a few MB at most.
    assert 100_000 < len(text.encode()) < 5_000_000
    assert '<script type="application/json" id="fastcoord-charts">' in text


def test_what_callers_pass_stays_text(page_path: Path, dom: Element) -> None:
    text = page_path.read_text()
    assert "<script>document.documentElement" not in text
    assert "&lt;script&gt;document.documentElement" in text
    assert "<i>here</i>" not in text and "<b>each</b>" not in text
    root = dom.find("html")
    assert "data-owned" not in root.attrs  # the title's script never ran
    assert dom.find("h1").text() == TITLE
    banner = dom.find("section", id="verdict")
    assert banner.attrs["data-verdict"] == "fail"
    assert "FAILED" in banner.text() and "2 of 5 thresholds failed <i>here</i>" in banner.text()
    assert "p99 JoinGroup 41 ms > 20 ms" in banner.text()
    assert "runs/old: schema 1 (<2>), left out" in dom.find("section", id="problems").text()
    cards = {e.attrs["data-figure"]: e for e in dom.find_all(data_figure=True)}
    assert {k: e.attrs["data-value"] for k, e in cards.items()} == {
        "heartbeat-p99-ms": "41.25",
        "rebalances": "12345",
        "commit-rate": "2512000.5",
        "lost": "",
    }
    assert cards["heartbeat-p99-ms"].text() == "41.2ms"
    assert cards["rebalances"].text() == "12,345"
    assert cards["commit-rate"].text() == "2.51M/s"
    assert cards["lost"].text() == "-"
    assert any("members lost <x>" in e.text() for e in dom.find_all(cls="figure-label"))


def test_a_long_table_shows_its_top_rows_and_where_the_rest_is(page_path: Path) -> None:
    dom = parse(page_path.read_text())
    table = dom.find("section", id="errors").find("table")
    assert len(table.find("tbody").find_all("tr")) == 5
    assert dom.find("section", id="errors").find(cls="table-caption").text() == (
        "top 5 of 30; the whole table: tables/errors_by_api/ (Parquet)"
    )
    assert [td.attrs["class"] for td in table.find("tbody").find_all("td")[:3]] == [
        "text",
        "num",
        "num",
    ]


def test_every_chart_is_drawn(dom: Element) -> None:
    root = dom.find("html")
    assert "data-script-errors" not in root.attrs, root.attrs["data-script-errors"]
    assert dom.find(id="script-errors").attrs.get("hidden") is not None
    assert root.attrs["data-charts-drawn"] == str(len(specs()))
    by_id = {spec["id"]: spec for spec in specs()}
    for chart_id, spec in by_id.items():
        chart = figure(dom, chart_id)
        svg = chart.find("svg")
        if chart_id in ("empty-time", "all-null"):
            assert chart.attrs["data-state"] == "empty"
            assert chart.attrs["data-drawn"] == "0"
            assert "no data" in svg.text()
            continue
        assert chart.attrs["data-state"] == "drawn", chart_id
        assert int(chart.attrs["data-drawn"]) > 0, chart_id
        for index in range(len(spec["series"])):
            paths = svg.find_all("path", cls="series", data_series=str(index))
            assert paths and all(p.attrs["d"] for p in paths), (chart_id, index)
        legend = chart.find_all("button", cls="legend-item")
        assert [b.text() for b in legend] == [s["name"] for s in spec["series"]]
        assert len(svg.find_all("text")) >= 6  # ticks and labels on both axes
    # Every point of the latency chart but the log axis' zeros and the gaps.
    points = sum(1 for s in by_id["latency"]["series"] for v in s["y"] if v is not None and v > 0)
    assert int(figure(dom, "latency").attrs["data-drawn"]) == points
    # The gaps of the commits' series (the minute of the fault) break its path.
    (commits,) = figure(dom, "commits").find("svg").find_all("path", cls="series")
    assert commits.attrs["d"].count("M") == 2
    # The CDF's zero has no place on a log axis.
    assert figure(dom, "cdf").attrs["data-drawn"] == "81"
    # Band labels, and x ranges: the time charts share one, the run's.
    labels = [t.text() for t in figure(dom, "latency").find_all("text", cls="band-label")]
    assert {"joining", "steady", "churn", "drain", "node 2 killed", "partition"} <= set(labels)
    ranges = {figure(dom, i).attrs["data-x-range"] for i in TIME_CHARTS if i != "empty-time"}
    assert len(ranges) == 1, ranges


# Runs after the page's scripts: hovers, drags, double-clicks and clicks as a reader would
# (events dispatched at the plot's pixels, found from the figure's data-plot and
# data-x-range), and writes what the charts showed into <pre id="test-results">.
INTERACT = """
(function () {
  const out = { errors: [] };
  const fig = (id) => document.getElementById("chart-" + id);
  const ranges = () => Object.fromEntries(Array.from(document.querySelectorAll("figure.chart"),
    (f) => [f.dataset.chart, f.dataset.xRange || ""]));
  // The client coordinates of x (a data value) at a fraction of the plot's height.
  const at = (id, x, down) => {
    const f = fig(id), svg = f.querySelector("svg"), r = svg.getBoundingClientRect();
    const [left, top, w, h] = f.dataset.plot.split(",").map(Number);
    const [from, to] = f.dataset.xRange.split(",").map(Number);
    const k = r.width / Number(svg.getAttribute("viewBox").split(" ")[2]);
    const scale = f.dataset.xKind === "log" ? Math.log10 : (v) => v;
    const share = (scale(x) - scale(from)) / (scale(to) - scale(from));
    return { clientX: r.left + (left + share * w) * k,
             clientY: r.top + (top + h * (down || 0.5)) * k };
  };
  const fire = (id, type, where) => fig(id).querySelector(".overlay").dispatchEvent(
    new MouseEvent(type, Object.assign({ bubbles: true, cancelable: true, button: 0 }, where)));
  const tooltip = (id) => {
    const tip = fig(id).querySelector(".chart-tooltip");
    if (!tip || tip.hidden) return null;
    return { x: Number(tip.dataset.x), head: tip.querySelector(".tt-head").textContent,
      rows: Array.from(tip.querySelectorAll(".tt-row"), (r) => [r.dataset.series, r.dataset.value]),
      bands: Array.from(tip.querySelectorAll(".tt-band"), (b) => b.textContent) };
  };
  const crosshairs = () => Array.from(document.querySelectorAll("figure.chart"))
    .filter((f) => { const c = f.querySelector(".crosshair");
      return c && c.getAttribute("visibility") === "visible"; })
    .map((f) => f.dataset.chart);
  try {
    fire("latency", "mousemove", at("latency", 1230));
    out.hover = tooltip("latency");
    out.crosshairs = crosshairs();
    fire("sizes", "mousemove", at("sizes", 2));
    out.hoverCategory = tooltip("sizes");
    out.crosshairsCategory = crosshairs();
    fire("cdf", "mousemove", at("cdf", 100));
    out.hoverLog = tooltip("cdf");
    out.before = ranges();
    out.drawnBefore = fig("latency").dataset.drawn;
    fire("latency", "mousedown", at("latency", 600));
    fire("latency", "mousemove", at("latency", 900));
    fire("latency", "mouseup", at("latency", 900));
    out.zoomed = ranges();
    out.drawnZoomed = fig("latency").dataset.drawn;
    out.resetShown = Array.from(document.querySelectorAll("figure.chart"))
      .filter((f) => !f.querySelector(".chart-reset").hidden).map((f) => f.dataset.chart);
    fire("members", "dblclick", at("members", 700));
    out.reset = ranges();
    fire("cdf", "mousedown", at("cdf", 10));
    fire("cdf", "mousemove", at("cdf", 1000));
    fire("cdf", "mouseup", at("cdf", 1000));
    out.zoomedCdf = ranges();
    fig("cdf").querySelector(".chart-reset").click();
    out.resetCdf = ranges();
    const item = fig("latency").querySelector('.legend-item[data-series="1"]');
    item.click();
    out.legend = { pressed: item.getAttribute("aria-pressed"), off: item.classList.contains("off"),
      paths: Array.from(fig("latency").querySelectorAll("path.series"), (p) => p.dataset.series),
      drawn: fig("latency").dataset.drawn };
    fire("latency", "mousemove", at("latency", 1230));
    out.hoverHidden = tooltip("latency");
    item.click();
    out.legendBack = Array.from(fig("latency").querySelectorAll("path.series"),
      (p) => p.dataset.series);
    const stacked = fig("members").querySelector('.legend-item[data-series="0"]');
    stacked.click();
    out.stackedDrawn = fig("members").dataset.drawn;
  } catch (error) {
    out.errors.push(String((error && error.stack) || error));
  }
  out.scriptErrors = document.documentElement.dataset.scriptErrors || null;
  const pre = document.createElement("pre");
  pre.id = "test-results";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
"""


@pytest.fixture(scope="module")
def interactions(page_path: Path) -> dict[str, Any]:
    """What the charts showed as INTERACT hovered, zoomed and clicked: one browser run."""
    require_chromium()
    found = json.loads(parse(dump_dom(page_path, INTERACT)).find(id="test-results").text())
    assert found["errors"] == [] and found["scriptErrors"] is None, found
    return found


def test_hovering_shows_each_series_value_at_the_nearest_x(interactions: dict[str, Any]) -> None:
    hover = interactions["hover"]
    x = hover["x"]
    assert abs(x - 1230) <= 4 and x == int(x)
    assert hover["head"] == f"t = {int(x):,} s"
    (latency_spec,) = (s for s in specs() if s["id"] == "latency")
    expected = []
    for series in latency_spec["series"]:
        value = series["y"][int(x)]
        shown = "" if value is None or value <= 0 else str(float(f"{value:.6g}"))
        expected.append([series["name"], shown])
    assert hover["rows"] == expected
    assert hover["bands"] == ["phase: steady", "fault: node 2 killed"]
    # The hovered time chart's crosshair shows on every time chart, and only there.
    assert set(interactions["crosshairs"]) == set(TIME_CHARTS) - {"empty-time"}
    category = interactions["hoverCategory"]
    assert category["head"] == "100-999"
    assert category["rows"] == [["p50 (run1)", "250"], ["p99 (run1)", "900"]]
    assert interactions["crosshairsCategory"] == ["sizes"]
    log = interactions["hoverLog"]
    assert 90 < log["x"] < 110 and log["head"].startswith("rebalance duration, ms: ")


def test_dragging_zooms_every_time_chart_and_a_double_click_resets(
    interactions: dict[str, Any],
) -> None:
    before, zoomed, reset = interactions["before"], interactions["zoomed"], interactions["reset"]
    drawn = [i for i in TIME_CHARTS if i != "empty-time"]
    for chart_id in drawn:
        start, end = map(float, zoomed[chart_id].split(","))
        assert abs(start - 600) < 3 and abs(end - 900) < 3, (chart_id, zoomed[chart_id])
        assert reset[chart_id] == before[chart_id]
    for chart_id in (*OTHER_CHARTS, "empty-time"):
        assert zoomed[chart_id] == before[chart_id]
    assert set(interactions["resetShown"]) == set(drawn)
    # The zoomed latency chart drew the points of its 300 s only.
    assert int(interactions["drawnZoomed"]) < int(interactions["drawnBefore"]) / 10
    # A log axis zooms alone (the CDF), and its button resets it.
    start, end = map(float, interactions["zoomedCdf"]["cdf"].split(","))
    assert abs(start - 10) < 1 and abs(end - 1000) < 50
    assert interactions["zoomedCdf"]["latency"] == before["latency"]
    assert interactions["resetCdf"] == before


def test_the_legend_hides_and_shows_a_series(interactions: dict[str, Any]) -> None:
    legend = interactions["legend"]
    assert legend["pressed"] == "false" and legend["off"]
    assert legend["paths"] == ["0", "2", "3", "4", "5"]
    assert int(legend["drawn"]) < int(interactions["drawnBefore"])
    assert "p99 (run1)" not in [name for name, _ in interactions["hoverHidden"]["rows"]]
    assert interactions["legendBack"] == ["0", "1", "2", "3", "4", "5"]
    assert int(interactions["stackedDrawn"]) == 3 * RUN_S


def test_a_broken_chart_says_so_on_the_page(tmp_path: Path) -> None:
    require_chromium()
    broken = {
        "id": "broken",
        "title": "Broken",
        "type": "line",
        "x": {"label": "s", "kind": "time"},
        "y": {"label": "ms"},
        "series": [{"name": "run1", "x": [1, 2, 3], "y": [101, 102, 103]}],
    }
    good = {**broken, "id": "good", "series": [{"name": "run1", "x": [1, 2], "y": [5, 6]}]}
    path = build(tmp_path / "report.html", [broken, good])
    # html.py would not take this spec; the page must cope with one that is wrong anyway.
    text = path.read_text()
    assert text.count('"y":[101,102,103]') == 1
    path.write_text(text.replace('"y":[101,102,103]', '"y":[101,102]'))
    dom = parse(dump_dom(path, 'throw new Error("provoked <failure>")'))
    errors = json.loads(dom.find("html").attrs["data-script-errors"])
    assert errors == [
        'chart broken: series "run1": 3 x values but 2 y values',
        "provoked <failure>",
    ]
    box = dom.find(id="script-errors")
    assert "hidden" not in box.attrs
    assert box.text().startswith("The charts could not be drawn: chart broken: series")
    assert "provoked <failure>" in box.text()
    chart = figure(dom, "broken")
    assert chart.attrs["data-state"] == "error" and chart.attrs["data-drawn"] == "0"
    assert "3 x values but 2 y values" in chart.text()
    assert figure(dom, "good").attrs["data-state"] == "drawn"
    assert figure(dom, "good").attrs["data-drawn"] == "2"


def test_a_malformed_spec_is_refused_where_it_is_made() -> None:
    page = Page("x")
    good = {"id": "a", "type": "line", "x": {"kind": "time"}, "series": []}
    page.chart(good)
    for wrong, message in (
        ({"id": "A b"}, "id must match"),
        ({"type": "pie"}, "type must be one of"),
        ({"x": {"kind": "date"}}, "x.kind must be one of"),
        ({"series": [{"name": "s", "x": [1, 2], "y": [1]}]}, "x and y lists of one length"),
        ({"series": [{"name": "s", "x": [], "y": [], "color": "red"}]}, "#rrggbb"),
        ({"bands": [{"from": 0, "to": 1, "kind": "other"}]}, "a band's kind"),
        ({"bands": [{"from": "0", "to": 1}]}, "numbers from and to"),
        ({"id": "a"}, "two charts with the id a"),
    ):
        with pytest.raises(ValueError, match=message):
            page.chart({**good, "id": "b", **wrong})
    with pytest.raises(ValueError, match=r"placed in no section: \['a'\]"):
        page.render()


def test_a_spec_holds_what_json_can() -> None:
    page = Page("x")
    numpy = pytest.importorskip("numpy")
    spec = {
        "id": "a",
        "type": "line",
        "x": {"kind": "linear"},
        "series": [{"name": "s", "x": numpy.arange(3), "y": [1.5, float("nan"), numpy.float64(2)]}],
        "note": "</script><script>alert(1)</script>",
    }
    page.section("A", page.chart(spec))
    text = page.render()
    data = re.search(r'id="fastcoord-charts">(.*?)</script>', text, re.S)
    assert data is not None
    (parsed,) = json.loads(data.group(1))
    assert parsed["series"][0] == {"name": "s", "x": [0, 1, 2], "y": [1.5, None, 2.0]}
    assert parsed["note"] == spec["note"]
    assert text.count("<script") == 3  # the error handler, the specs, charts.js


def test_cells_and_tables() -> None:
    assert [html.cell(v) for v in (None, True, 1234, 0.25, 12345.6, "<b>")] == [
        "-",
        "yes",
        "1,234",
        "0.250",
        "12,346",
        "&lt;b&gt;",
    ]
    assert html.table([]) == "<p>(none)</p>"
    rows = [{"a": "x", "n": 1}, {"a": "y", "n": None}]
    table = html.table(rows, limit=5, source="tables/t/")
    assert "all 2; the whole table: tables/t/ (Parquet)" in table
    assert '<th class="num" scope="col">n</th>' in table
    assert "top" not in html.table(rows)


def test_the_chromium_is_the_one_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTCOORD_CHROMIUM", sys.executable)
    assert chromium() == sys.executable
    monkeypatch.setenv("FASTCOORD_CHROMIUM", "/nonexistent/chromium")
    assert chromium() is None
