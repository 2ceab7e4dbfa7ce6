"""The swap that ends a compaction pass, and its completion after a crash.

A pass (storage/cleaner.py) writes its output segments as `BASE.log.cleaned`, syncs them,
then commits by renaming a manifest, `compaction.swap`, into place: from then on the new
segments are the log. Finishing (here) deletes the inputs and renames the outputs over
them; it may be repeated from any point, so recovery redoes it whenever a manifest is
found, and otherwise removes `.cleaned` files left by a pass that never committed.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("fastcoord.storage")

MANIFEST = "compaction.swap"
CLEANED = ".cleaned"


def fsync_directory(path: Path) -> None:
    """Make a directory's entries (a created, renamed or deleted file) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_manifest(directory: Path, inputs: list[str], outputs: list[str]) -> None:
    temporary = directory / f"{MANIFEST}.tmp"
    with open(temporary, "w") as f:
        json.dump({"inputs": inputs, "outputs": outputs}, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(temporary, directory / MANIFEST)
    fsync_directory(directory)


def finish_swap(directory: Path, step: Callable[[str], None] = lambda name: None) -> None:
    """Step 3 of a committed pass; safe to repeat from any point (recovery does)."""
    manifest = json.loads((directory / MANIFEST).read_text())
    outputs = set(manifest["outputs"])
    for name in manifest["inputs"]:
        if name not in outputs:
            (directory / name).unlink(missing_ok=True)
    step("inputs deleted")
    for name in manifest["outputs"]:
        cleaned = directory / f"{name}{CLEANED}"
        if cleaned.exists():
            os.rename(cleaned, directory / name)
    fsync_directory(directory)
    step("renamed")
    (directory / MANIFEST).unlink()
    fsync_directory(directory)


def recover_swap(directory: Path) -> None:
    """At start, before the segments are read: finish a committed pass, forget the rest."""
    if not directory.exists():
        return
    if (directory / MANIFEST).exists():
        log.warning("%s: finishing a compaction that a stop interrupted", directory)
        finish_swap(directory)
    for leftover in [*directory.glob(f"*{CLEANED}"), directory / f"{MANIFEST}.tmp"]:
        if leftover.exists():
            log.info("%s: removing %s, left by an interrupted compaction", directory, leftover.name)
            leftover.unlink()
