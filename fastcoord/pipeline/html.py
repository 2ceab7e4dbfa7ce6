"""report.html as a load tester's page: a verdict at the top, the headline figures as cards,
then sections of charts and tables. The page is one file that opens offline and can be
mailed or archived alone: its CSS and its JavaScript are inline, and no URL in it points
anywhere. The charts are drawn in the browser, as SVG, by charts.js (beside this module)
from specs embedded in the page as JSON, so that they can be zoomed and hovered; a chart's
spec is what a Spark job's small aggregate rows turn into, a dict (see Page.chart).

    page = Page("fastcoord report: run1")
    page.verdict(False, "p99 heartbeat latency over its threshold", ["p99 41 ms > 20 ms"])
    page.figures([Figure("heartbeat-p99-ms", "heartbeat p99", 41.2, unit="ms")])
    page.section("Latency over time", page.chart({"id": "latency", ...}))
    path.write_text(page.render())

Everything a caller passes in is text and is escaped: a run named `<script>` is shown as
such. The first script of the page records any script error in the page itself (the root
element's data-script-errors, a JSON list) and shows it at the top, so a page whose charts
failed says so, to a reader and to a test.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from importlib import resources
from typing import Any, Literal

CHART_TYPES = ("line", "step", "area", "bars")
X_KINDS = ("time", "linear", "log", "category")
BAND_KINDS = ("phase", "fault")
CHART_ID = re.compile(r"[a-z0-9-]+")
COLOR = re.compile(r"#[0-9a-fA-F]{6}")

STYLE = """
:root { --text: #1f2328; --muted: #59636e; --line: #d1d9e0; --soft: #f6f8fa;
  --good: #1a7f37; --good-bg: #dafbe1; --bad: #cf222e; --bad-bg: #ffebe9;
  --none: #59636e; --none-bg: #eff2f5; --accent: #0969da; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial,
  sans-serif; color: var(--text); margin: 0 auto; padding: 1.5em 2em 3em; max-width: 1200px; }
h1 { font-size: 1.6em; margin: 0 0 .2em; }
h2 { font-size: 1.25em; margin: 2em 0 .6em; padding-bottom: .25em;
  border-bottom: 1px solid var(--line); }
.subtitle { color: var(--muted); margin: 0 0 1em; }
.script-errors { background: var(--bad-bg); border: 1px solid var(--bad); color: var(--bad);
  padding: .6em 1em; border-radius: 6px; margin: 0 0 1em; white-space: pre-wrap; }
.verdict { display: flex; gap: 1.2em; align-items: center; border-radius: 8px;
  padding: 1em 1.4em; margin: 1em 0; border: 1px solid; }
.verdict-pass { background: var(--good-bg); border-color: var(--good); }
.verdict-fail { background: var(--bad-bg); border-color: var(--bad); }
.verdict-none { background: var(--none-bg); border-color: var(--line); }
.verdict-badge { font-size: 1.5em; font-weight: 700; letter-spacing: .06em; color: #fff;
  border-radius: 6px; padding: .25em .7em; white-space: nowrap; }
.verdict-pass .verdict-badge { background: var(--good); }
.verdict-fail .verdict-badge { background: var(--bad); }
.verdict-none .verdict-badge { background: var(--none); }
.verdict-headline { font-size: 1.15em; font-weight: 600; margin: 0; }
.verdict-failures { margin: .4em 0 0; padding-left: 1.2em; }
.problems { border-left: 4px solid #bf8700; background: #fff8c5; padding: .5em 1em;
  margin: 1em 0; border-radius: 0 6px 6px 0; }
.problems h2 { border: 0; margin: .2em 0 .3em; font-size: 1.05em; }
.problems ul { margin: 0; padding-left: 1.2em; }
.figures { display: grid; grid-template-columns: repeat(auto-fill, minmax(170px, 1fr));
  gap: .8em; margin: 1em 0; }
.figure-card { border: 1px solid var(--line); border-radius: 8px; padding: .7em .9em;
  border-top: 4px solid var(--line); background: #fff; }
.figure-card.tone-good { border-top-color: var(--good); }
.figure-card.tone-bad { border-top-color: var(--bad); }
.figure-value { font-size: 1.75em; font-weight: 650; line-height: 1.2;
  font-variant-numeric: tabular-nums; }
.figure-card.tone-bad .figure-value { color: var(--bad); }
.figure-unit { font-size: .55em; font-weight: 500; color: var(--muted); margin-left: .2em; }
.figure-label { font-weight: 600; }
.figure-note { color: var(--muted); font-size: .88em; }
nav.contents { margin: 1.2em 0; color: var(--muted); }
nav.contents a { color: var(--accent); text-decoration: none; margin-right: 1em;
  white-space: nowrap; }
.table-wrap { overflow-x: auto; margin: .8em 0 1.2em; }
table { border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 10px; text-align: right;
  white-space: nowrap; }
th { background: var(--soft); font-weight: 600; border-top: 1px solid var(--line); }
td.text, th.text { text-align: left; }
tbody tr:nth-child(even) td { background: #fbfcfd; }
.table-caption { color: var(--muted); font-size: .88em; margin: .3em 0 0; }
.problem { color: var(--bad); }
figure.chart { margin: 1em 0 1.6em; border: 1px solid var(--line); border-radius: 8px;
  padding: .6em .8em .5em; }
.chart-head { display: flex; justify-content: space-between; align-items: baseline;
  gap: 1em; }
.chart-title { font-weight: 600; font-size: 1.02em; }
.chart-reset { font: inherit; font-size: .85em; border: 1px solid var(--line);
  background: var(--soft); border-radius: 5px; padding: 1px 8px; cursor: pointer; }
.chart-plot { position: relative; min-height: 300px; user-select: none; }
.chart-plot svg { display: block; width: 100%; height: 300px; overflow: visible; }
.chart-message { color: var(--muted); margin: 0; padding: 2em 0; text-align: center; }
.chart-error .chart-message { color: var(--bad); }
.chart-legend { display: flex; flex-wrap: wrap; gap: 2px 14px; font-size: 12.5px;
  margin: 2px 0 0 4px; }
.legend-item { font: inherit; border: 0; background: none; padding: 1px 0; cursor: pointer;
  color: var(--text); display: inline-flex; align-items: center; gap: 5px; }
.legend-item.off { color: #9aa4ae; text-decoration: line-through; }
.legend-swatch { width: 14px; height: 3px; border-radius: 2px; display: inline-block; }
.legend-swatch.box { width: 10px; height: 10px; }
.legend-item.off .legend-swatch { opacity: .3; }
.chart-note { color: var(--muted); font-size: .88em; margin: .3em 0 0; }
.chart-tooltip { position: absolute; pointer-events: none; background: rgba(255,255,255,.97);
  border: 1px solid var(--line); border-radius: 6px; box-shadow: 0 2px 8px rgba(0,0,0,.12);
  padding: 5px 8px; font-size: 12px; white-space: nowrap; z-index: 2; }
.tt-head { font-weight: 600; margin-bottom: 2px; }
.tt-row { display: flex; gap: 8px; align-items: center; }
.tt-row .tt-value { margin-left: auto; padding-left: 12px; font-variant-numeric: tabular-nums;
  font-weight: 600; }
.tt-band { color: var(--muted); }
.tt-band.fault { color: var(--bad); }
.chart-svg text { font-size: 11px; fill: #57606a; }
.chart-svg .axis-label { font-size: 11.5px; fill: #404850; }
.chart-svg .band-label { font-size: 10.5px; fill: #34527d; }
.chart-svg .band-label.fault { fill: #b42318; font-weight: 600; }
.chart-svg .empty { font-size: 14px; fill: #8c959f; }
@media print {
  body { padding: 0; max-width: none; font-size: 12px; }
  .chart-reset, .chart-tooltip, nav.contents { display: none; }
  figure.chart, .figure-card, .verdict, tr { break-inside: avoid; }
  .table-wrap { overflow: visible; }
}
"""

# The first script: errors anywhere later (the charts' script, a chart's spec, an event
# handler) go into the page, for the reader and for tests, rather than only to a console
# that nobody opens on a mailed report.
ERROR_SCRIPT = """
(function () {
  "use strict";
  var errors = [];
  function show() {
    var box = document.getElementById("script-errors");
    if (!box || !errors.length) return;
    box.textContent = "The charts could not be drawn: " + errors.join("; ");
    box.hidden = false;
  }
  window.fastcoordError = function (message) {
    message = String(message);
    if (errors.indexOf(message) >= 0) return; // a chart that fails at each zoom, once
    errors.push(message);
    document.documentElement.dataset.scriptErrors = JSON.stringify(errors);
    show();
  };
  window.onerror = function (message, source, line, column, error) {
    window.fastcoordError((error && error.message) || message);
  };
  window.addEventListener("unhandledrejection", function (event) {
    var reason = event.reason;
    window.fastcoordError((reason && reason.message) || reason);
  });
  document.addEventListener("DOMContentLoaded", show);
})();
"""


def charts_script() -> str:
    """charts.js, the page's chart drawing (package data)."""
    return resources.files("fastcoord.pipeline").joinpath("charts.js").read_text("utf-8")


def cell(value: Any) -> str:
    """A value as a table shows it, escaped: floats to 3 decimals (none past 1,000), ints
    with thousands separators, None as a dash."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if not math.isfinite(value):
            return html.escape(str(value))
        return f"{value:,.3f}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return html.escape(str(value))


def _numeric(value: Any) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


def table(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str] | None = None,
    *,
    limit: int | None = None,
    total: int | None = None,
    source: str | None = None,
) -> str:
    """An HTML table of `rows` (numbers right-aligned). With `limit`, the first `limit` rows
    and a caption saying so: "top N of M" (M is `total`, else the rows given) and where the
    whole table is, `source` (e.g. tables/NAME/)."""
    if not rows:
        return "<p>(none)</p>"
    columns = list(columns or rows[0].keys())
    shown = rows if limit is None else rows[:limit]
    numeric = {
        c: next((_numeric(r.get(c)) for r in shown if r.get(c) is not None), False) for c in columns
    }
    head = "".join(
        f'<th class="{"num" if numeric[c] else "text"}" scope="col">{html.escape(c)}</th>'
        for c in columns
    )
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="{"num" if _numeric(r.get(c)) else "text"}">{cell(r.get(c))}</td>'
            for c in columns
        )
        + "</tr>"
        for r in shown
    )
    caption = ""
    if limit is not None or source is not None:
        count = len(rows) if total is None else total
        words = f"top {len(shown):,} of {count:,}" if len(shown) < count else f"all {count:,}"
        if source is not None:
            words += f"; the whole table: {source} (Parquet)"
        caption = f'<p class="table-caption">{html.escape(words)}</p>'
    return (
        f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table>{caption}</div>"
    )


@dataclass(frozen=True)
class Figure:
    """One card of a row of headline figures: `value` big (None: "-"), with its unit, the
    label under it and a small note. `text` is shown instead of the formatted value when
    given (the card's data-value stays the raw number). A `tone` colours the card: a
    figure that failed its threshold is "bad"."""

    key: str  # the card's data-figure, for tests and scripts to find it
    label: str
    value: float | int | None
    unit: str = ""
    note: str = ""
    tone: Literal["good", "bad"] | None = None
    text: str | None = None


def figure_text(value: float | int | None) -> str:
    """A headline figure, short: 41.2, 0.0312, 12,345, 2.5M."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    magnitude = abs(value)
    if magnitude >= 1e6:
        for factor, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
            if magnitude >= factor:
                return f"{value / factor:.3g}{suffix}"
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    if magnitude >= 100:
        return f"{value:,.0f}" if magnitude >= 1000 else f"{value:.1f}"
    return f"{value:.3g}"


def _raw(value: float | int | None) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    return repr(value) if isinstance(value, float) else str(int(value))


def _plain(value: Any) -> Any:
    """A spec's values as JSON can hold them: numpy's numbers and arrays as Python's,
    NaN and infinities as null (JSON has neither, and the page's parse would fail), floats
    to six significant digits."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, str | bool) or value is None:
        return value
    if isinstance(value, float):
        # Six significant digits are more than a chart or its tooltip shows, and an hour of
        # seconds in ten series is then half the size.
        return float(f"{value:.6g}") if math.isfinite(value) else None
    if isinstance(value, int):
        return value
    if isinstance(value, Decimal):
        return _plain(float(value))
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return _plain(value.tolist())
    if isinstance(value, Sequence):
        return [_plain(v) for v in value]
    raise TypeError(f"a chart spec holds a {type(value).__name__}: {value!r}")


def _check(spec: Mapping[str, Any]) -> None:
    """The shape of a spec, so that a mistake fails where the spec was made rather than as
    a broken chart in a page that nobody may open soon."""
    name = spec.get("id")
    if not isinstance(name, str) or not CHART_ID.fullmatch(name):
        raise ValueError(f"a chart's id must match [a-z0-9-]+: {name!r}")
    if spec.get("type") not in CHART_TYPES:
        raise ValueError(f"chart {name}: type must be one of {CHART_TYPES}: {spec.get('type')!r}")
    x = spec.get("x")
    if not isinstance(x, Mapping) or x.get("kind") not in X_KINDS:
        raise ValueError(f"chart {name}: x.kind must be one of {X_KINDS}")
    if not isinstance(spec.get("y", {}), Mapping):
        raise ValueError(f"chart {name}: y must be a dict")
    for series in spec.get("series", []):
        xs, ys = series.get("x"), series.get("y")
        if not isinstance(xs, Sequence) or not isinstance(ys, Sequence) or len(xs) != len(ys):
            raise ValueError(
                f"chart {name}: series {series.get('name')!r} needs x and y lists of one length"
            )
        if "color" in series and not COLOR.fullmatch(str(series["color"])):
            raise ValueError(f"chart {name}: a series' color is #rrggbb: {series['color']!r}")
    for band in spec.get("bands", []):
        if band.get("kind", "phase") not in BAND_KINDS:
            raise ValueError(f"chart {name}: a band's kind is one of {BAND_KINDS}")
        if not all(isinstance(band.get(k), int | float) for k in ("from", "to")):
            raise ValueError(f"chart {name}: a band needs numbers from and to")


def _json_in_script(value: Any) -> str:
    # Inside <script> the HTML parser ends the element at "</script" whatever the JSON
    # means; with every "<" as \u003c (the same string to JSON) nothing can end it.
    text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


class Page:
    """report.html, built part by part; render() writes the parts in a fixed order: the
    title, the verdict, the inputs left out, the rows of figures, a list of the sections,
    the sections as they were added."""

    def __init__(self, title: str, subtitle: str = "") -> None:
        self.title = title
        self.subtitle = subtitle
        self._verdicts: list[str] = []
        self._problems: list[str] = []
        self._figures: list[str] = []
        self._sections: list[tuple[str, str, str]] = []  # (id, heading, html)
        self._charts: list[dict[str, Any]] = []

    def problems(self, problems: Sequence[str]) -> None:
        """Inputs left out (files unreadable, runs of another schema): said near the top,
        as they qualify every figure below."""
        self._problems.extend(problems)

    def verdict(self, passed: bool | None, headline: str, failures: Sequence[str] = ()) -> None:
        """A banner at the top: passed, failed, or None for no verdict (nothing to judge
        by); `failures` lists what failed. Each call adds one (a run's, of several)."""
        if passed is None:
            kind, badge = "none", "NO VERDICT"
        else:
            kind, badge = ("pass", "PASSED") if passed else ("fail", "FAILED")
        items = "".join(f"<li>{html.escape(f)}</li>" for f in failures)
        n = len(self._verdicts) + 1
        verdict_id = "verdict" if n == 1 else f"verdict-{n}"
        self._verdicts.append(
            f'<section class="verdict verdict-{kind}" id="{verdict_id}" data-verdict="{kind}">'
            f'<div class="verdict-badge">{badge}</div><div class="verdict-text">'
            f'<p class="verdict-headline">{html.escape(headline)}</p>'
            + (f'<ul class="verdict-failures">{items}</ul>' if items else "")
            + "</div></section>"
        )

    def figures(self, figures: Sequence[Figure], title: str | None = None) -> None:
        """One row of cards, under `title` if given (whose figures: a run's, of several);
        each call adds a row."""
        cards = []
        for f in figures:
            tone = f" tone-{f.tone}" if f.tone else ""
            text = html.escape(f.text if f.text is not None else figure_text(f.value))
            unit = f'<span class="figure-unit">{html.escape(f.unit)}</span>' if f.unit else ""
            note = f'<div class="figure-note">{html.escape(f.note)}</div>' if f.note else ""
            cards.append(
                f'<div class="figure-card{tone}"><div class="figure-value" '
                f'data-figure="{html.escape(f.key)}" data-value="{_raw(f.value)}">{text}{unit}'
                f'</div><div class="figure-label">{html.escape(f.label)}</div>{note}</div>'
            )
        head = f'<h3 class="figures-title">{html.escape(title)}</h3>' if title else ""
        self._figures.append(f'{head}<div class="figures">{"".join(cards)}</div>')

    def section(self, heading: str, html: str, id: str | None = None) -> str:
        """A section (its HTML as given: from table(), chart(), ...); returns its id, made
        from the heading if None."""
        taken = {s[0] for s in self._sections}
        base = id or _slug(heading)
        section_id, n = base, 2
        while section_id in taken:
            section_id, n = f"{base}-{n}", n + 1
        self._sections.append((section_id, heading, html))
        return section_id

    def chart(self, spec: Mapping[str, Any]) -> str:
        """Register a chart and return its placeholder HTML, for a section; the page's
        script draws it there. The spec (checked here; ValueError if malformed):

            {"id": "latency-heartbeat",      # unique in the page; [a-z0-9-]+
             "title": "Heartbeat latency (ms)",
             "type": "line" | "step" | "area" | "bars",
             "x": {"label": "seconds since the run's start",
                   "kind": "time" | "linear" | "log" | "category"},
             "y": {"label": "ms", "log": False, "min": 0, "max": None},  # min, max optional
             "series": [{"name": "p99 (run1)", "x": [...], "y": [... or None for a gap],
                         "color": "#rrggbb" (optional)}],
             "bands": [{"from": 0, "to": 31.0, "label": "joining", "kind": "phase"|"fault"}],
             "stacked": False,                # area and bars
             "note": "a caption under the chart"}

        Every "time" chart of the page shares one x range (zoom one, all follow). Floats
        are kept to six significant digits; NaN is a gap, as None is."""
        plain = _plain(spec)
        _check(plain)
        if any(c["id"] == plain["id"] for c in self._charts):
            raise ValueError(f"two charts with the id {plain['id']}")
        self._charts.append(plain)
        note = plain.get("note")
        return (
            f'<figure class="chart" id="chart-{plain["id"]}" data-chart="{plain["id"]}" '
            f'data-x-kind="{plain["x"]["kind"]}" data-state="pending">'
            f'<figcaption class="chart-head"><span class="chart-title">'
            f"{html.escape(str(plain.get('title', '')))}</span>"
            '<button type="button" class="chart-reset" hidden>reset zoom</button></figcaption>'
            '<div class="chart-plot"><p class="chart-message">The chart is drawn by the '
            "page's script (JavaScript).</p></div>"
            '<div class="chart-legend"></div>'
            + (f'<p class="chart-note">{html.escape(str(note))}</p>' if note else "")
            + "</figure>"
        )

    def render(self) -> str:
        """The whole document."""
        body = [f"<h1>{html.escape(self.title)}</h1>"]
        if self.subtitle:
            body.append(f'<p class="subtitle">{html.escape(self.subtitle)}</p>')
        body.append('<div id="script-errors" class="script-errors" role="alert" hidden></div>')
        if self._charts:
            body.append(
                '<noscript><p class="script-errors">The charts need JavaScript, which is off.'
                "</p></noscript>"
            )
        body.extend(self._verdicts)
        if self._problems:
            items = "".join(f'<li class="problem">{html.escape(p)}</li>' for p in self._problems)
            body.append(
                f'<section class="problems" id="problems"><h2>Inputs left out</h2>'
                f"<ul>{items}</ul></section>"
            )
        body.extend(self._figures)
        if len(self._sections) > 1:
            links = "".join(
                f'<a href="#{html.escape(i)}">{html.escape(h)}</a>' for i, h, _ in self._sections
            )
            body.append(f'<nav class="contents">{links}</nav>')
        for section_id, heading, content in self._sections:
            body.append(
                f'<section id="{html.escape(section_id)}"><h2>{html.escape(heading)}</h2>'
                f"{content}</section>"
            )
        text = "".join(body)
        missing = [c["id"] for c in self._charts if f'id="chart-{c["id"]}"' not in text]
        if missing:
            raise ValueError(f"charts registered but placed in no section: {missing}")
        scripts = ""
        if self._charts:
            script = charts_script()
            if "</script" in script.lower():
                raise ValueError("charts.js must not hold </script")
            scripts = (
                '<script type="application/json" id="fastcoord-charts">'
                f"{_json_in_script(self._charts)}</script><script>{script}</script>"
            )
        return (
            '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(self.title)}</title><style>{STYLE}</style>"
            f"<script>{ERROR_SCRIPT}</script></head>"
            f"<body>{text}{scripts}</body></html>\n"
        )
