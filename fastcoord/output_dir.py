"""The directories fastcoord writes results into (a load test's `--out`, a report's), made
so that git leaves them alone.

They are data, often created inside a checkout: hundreds of Parquet part files that `git
status` would list and `git add .` would commit. So, as Python's venv does, a `.gitignore`
holding `*` goes into such a directory when fastcoord finds it new or empty. A directory
that already holds something is the user's, and nothing is added to it: `--out .` in a
checkout must not hide the checkout from git.
"""

from __future__ import annotations

from pathlib import Path

GITIGNORE = ".gitignore"
IGNORE_ALL = "# Written by fastcoord: results, not sources.\n*\n"


def make_output_dir(path: Path) -> None:
    """Create `path` (and its parents) if need be; put a `.gitignore` of `*` in it when it
    holds nothing yet."""
    path.mkdir(parents=True, exist_ok=True)
    if not any(path.iterdir()):
        (path / GITIGNORE).write_text(IGNORE_ALL)
