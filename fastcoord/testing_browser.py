"""Headless Chromium as a test peer for the pages fastcoord writes (report.html): the DOM as
it stands once the page's scripts ran, and screenshots for the docs.

A page whose charts are drawn by its own JavaScript is only tested by running that script
in a browser; string checks on the HTML cannot see a chart that throws. Chromium is run
as a command, one process per page: `--dump-dom` prints the document after the scripts
ran (virtual time lets timers run out at once), and a script of the test's own, injected
before </body>, runs after the page's and can drive it (dispatch mouse events) and write
what it found into the DOM, for the test to read:

    dom = dump_dom(path, "document.body.dataset.found = document.querySelectorAll('svg').length")
    found = parse(dom).find(tag="body").attrs["data-found"]

The browser reaches no network: every host name resolves to nothing. Chromium is the
machine's (Debian's package `chromium`; `make test` installs it), or FASTCOORD_CHROMIUM.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

CHROMIUM_ENV = "FASTCOORD_CHROMIUM"
INSTALL_HINT = "install Chromium (apt-get install chromium) or set FASTCOORD_CHROMIUM"
# A fresh profile, no network, nothing started in the background: a run is the page alone.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    # Timers and animation frames run in virtual time, up to this much of it, then the
    # page is dumped: a page's scripts finish without the test waiting in real time.
    "--virtual-time-budget=5000",
)
WINDOW = (1280, 1000)  # the charts are laid out at a desktop's width


class BrowserUnavailable(RuntimeError):
    """No Chromium: the message says how to install it."""


def chromium() -> str | None:
    """The Chromium binary: FASTCOORD_CHROMIUM (a path or a name on PATH; None if it is
    neither), else /usr/bin/chromium, else chromium or chromium-browser on PATH; None if
    there is none."""
    if os.environ.get(CHROMIUM_ENV):
        return shutil.which(os.environ[CHROMIUM_ENV])
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _binary() -> str:
    found = chromium()
    if found is None:
        raise BrowserUnavailable(f"no Chromium: {INSTALL_HINT}")
    return found


def _run(
    arguments: list[str], directory: Path, timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """Chromium with FLAGS and `arguments`, its profile and caches in `directory`; killed,
    with the renderers it started (its own process group), if it outlives `timeout_s`."""
    profile = directory / "profile"
    command = [_binary(), *FLAGS, f"--user-data-dir={profile}", *arguments]
    # Its crash reporter and font caches would write under the user's home otherwise.
    env = {**os.environ, "HOME": str(directory), "XDG_CONFIG_HOME": str(directory / "config")}
    env["XDG_CACHE_HOME"] = str(directory / "cache")
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        # Its process group is the browser's own (start_new_session): the browser and
        # the renderers it started, none of them anyone else's.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise TimeoutError(f"Chromium did not finish in {timeout_s} s: {command}") from None
    if process.returncode != 0:
        raise RuntimeError(f"Chromium exited with {process.returncode}:\n{stderr[-3000:]}")
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def _copy(page: Path, directory: Path, script: str | None) -> Path:
    text = page.read_text(encoding="utf-8")
    if script is not None:
        tag = f"<script>\n{script}\n</script>"
        at = text.lower().rfind("</body>")
        text = text[:at] + tag + text[at:] if at >= 0 else text + tag
    copy = directory / page.name
    copy.write_text(text, encoding="utf-8")
    return copy


def dump_dom(page: Path, script: str | None = None, timeout_s: float = 60) -> str:
    """The DOM of `page` (a file) after its scripts ran, as HTML. `script`, if given, is
    injected as a <script> before </body>: it runs after the page's own scripts. The page
    is copied into a temporary directory first (the original is left as it is)."""
    with tempfile.TemporaryDirectory(prefix="fastcoord-chromium-") as temporary:
        directory = Path(temporary)
        copy = _copy(page, directory, script)
        width, height = WINDOW
        done = _run(
            [f"--window-size={width},{height}", "--dump-dom", copy.as_uri()], directory, timeout_s
        )
    if not done.stdout.strip():
        raise RuntimeError(f"Chromium dumped no DOM:\n{done.stderr[-3000:]}")
    return done.stdout


def screenshot(
    page: Path, png: Path, width: int = 1280, height: int = 2000, timeout_s: float = 60
) -> Path:
    """A PNG of the top `height` pixels of `page` in a window `width` wide."""
    with tempfile.TemporaryDirectory(prefix="fastcoord-chromium-") as temporary:
        directory = Path(temporary)
        copy = _copy(page, directory, None)
        shot = directory / "screenshot.png"
        arguments = [f"--screenshot={shot}", f"--window-size={width},{height}"]
        _run([*arguments, "--hide-scrollbars", copy.as_uri()], directory, timeout_s)
        if not shot.is_file():
            raise RuntimeError(f"Chromium wrote no screenshot of {page}")
        png.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, png)
    return png


@dataclass
class Element:
    """An element of a parsed page: enough of a DOM for tests to find what a script left."""

    tag: str
    attrs: dict[str, str] = field(default_factory=dict)
    children: list[Element | str] = field(default_factory=list)

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self) -> Iterator[Element]:
        yield self
        for child in self.children:
            if isinstance(child, Element):
                yield from child.iter()

    def find_all(
        self, tag: str | None = None, cls: str | None = None, **attrs: str | bool
    ) -> list[Element]:
        """The elements below (and including) this one of `tag`, with class `cls`, with
        each of `attrs` (data_x for data-x): equal to a string, or present if True."""
        wanted = {k.replace("_", "-"): v for k, v in attrs.items()}
        return [
            e
            for e in self.iter()
            if (tag is None or e.tag == tag)
            and (cls is None or cls in e.attrs.get("class", "").split())
            and all((k in e.attrs) if v is True else e.attrs.get(k) == v for k, v in wanted.items())
        ]

    def find(self, tag: str | None = None, cls: str | None = None, **attrs: str | bool) -> Element:
        found = self.find_all(tag, cls, **attrs)
        if not found:
            raise LookupError(f"no {tag or 'element'} with class {cls} and {attrs}")
        return found[0]


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}  # fmt: skip


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document")
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(element)
        if tag not in VOID:
            self.stack.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Element(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(text: str) -> Element:
    """A page (dump_dom's, or a file's) as a tree of Elements."""
    builder = _Builder()
    builder.feed(text)
    builder.close()
    return builder.root
