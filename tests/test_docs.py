"""The documentation keeps up with the code: every setting is in docs/server.md with its
default, and the repository speaks of itself alone (no issue numbers, no files outside it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fastcoord import config

ROOT = Path(__file__).parent.parent
SERVER_MD = ROOT / "docs" / "server.md"


@pytest.mark.parametrize("setting", config.SETTINGS, ids=lambda s: s.name)
def test_every_setting_is_in_the_server_docs_with_its_default(setting: config.Setting) -> None:
    rows = [
        line
        for line in SERVER_MD.read_text().splitlines()
        if line.startswith("| ") and re.search(rf"(^\| |, ){re.escape(setting.name)}\b", line)
    ]
    assert rows, f"{setting.name} is missing from docs/server.md's settings tables"
    names, default = (cell.strip() for cell in rows[0].split("|")[1:3])
    shown = [d.strip() for d in default.split(",")] if "," in names else [default]
    index = [n.strip().split()[0] for n in names.split(",")].index(setting.name)
    assert shown[index] == config.render(setting, setting.default).split(" = ")[0] or (
        setting.doc.default == shown[index]
    ), rows[0]


def test_the_repository_speaks_of_itself_alone() -> None:
    outside = re.compile(r"[Ii]ssue #?\d+|\.\./shared|KAFKA-FACTS|the seeds\b|seeds'")
    places = [ROOT / "README.md", ROOT / "Makefile"]
    for folder in ("docs", "fastcoord", "_ext", "tests", "benches"):
        places += [p for p in (ROOT / folder).rglob("*") if p.suffix in (".md", ".py", ".pyx")]
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in places
        if path != Path(__file__)
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if outside.search(line)
    ]
    assert found == []
