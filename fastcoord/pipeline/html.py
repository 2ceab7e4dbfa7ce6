"""report.html: one self-contained page (inline CSS, each chart a PNG file beside it and the
same PNG inside the page as a data: URI, so the page alone can be mailed or archived)."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

STYLE = """
body { font-family: sans-serif; margin: 2em; max-width: 1100px; }
table { border-collapse: collapse; margin: 1em 0; font-size: 90%; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f0f0f0; } td.text, th.text { text-align: left; }
.problem { color: #a40000; }
"""


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.3f}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return html.escape(str(value))


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    if not rows:
        return "<p>(none)</p>"
    columns = list(columns or rows[0].keys())
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="{"text" if isinstance(r.get(c), str) else "num"}">{cell(r.get(c))}</td>'
            for c in columns
        )
        + "</tr>"
        for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def chart(path: Path, title: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    name = html.escape(path.name)
    return (
        f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(title)}" '
        f'data-file="charts/{name}"><figcaption>{html.escape(title)} '
        f'(<a href="charts/{name}">{name}</a>)</figcaption></figure>'
    )


def page(title: str, sections: Sequence[tuple[str, str]], problems: Sequence[str]) -> str:
    parts = [f"<h1>{html.escape(title)}</h1>"]
    if problems:
        items = "".join(f'<li class="problem">{html.escape(p)}</li>' for p in problems)
        parts.append(f"<h2>Inputs left out</h2><ul>{items}</ul>")
    for heading, content in sections:
        parts.append(f"<h2>{html.escape(heading)}</h2>{content}")
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>"
        f"<body>{''.join(parts)}</body></html>\n"
    )
