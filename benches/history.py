"""asv over the last N commits, each built, then `asv publish`: the benchmarks' history.

    make bench-history N=20          # python -m benches.history --commits 20

Each commit's tree is built as the performance gate builds it (perf_gate.base_tree: `git
archive` into .perf-gate/trees/SHA, extensions compiled there, kept for the next time),
then this tree's benchmarks run against it in this environment (`asv run --python=same
--set-commit-hash SHA`, the tree first on asv's ASV_PYTHONPATH). A benchmark that an older
commit cannot run (an interface it lacks) is recorded as failed for that commit. The
HTML goes to .asv/html: `.venv/bin/asv preview` serves it on http://127.0.0.1:8080.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from benches.perf_gate import GateError, base_tree, git

ROOT = Path(__file__).resolve().parent.parent
ASV = [sys.executable, "-m", "asv"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--commits", type=int, default=20, help="how many, back from HEAD")
    parser.add_argument("--bench", help="only benchmarks matching this regular expression")
    parser.add_argument(
        "--full", action="store_true", help="asv's full repeats rather than --quick"
    )
    args = parser.parse_args(argv)
    shas = git(ROOT, "rev-list", f"--max-count={args.commits}", "--first-parent", "HEAD").split()
    subprocess.run([*ASV, "machine", "--yes"], cwd=ROOT, check=True, capture_output=True)
    for i, sha in enumerate(reversed(shas), 1):
        subject = git(ROOT, "log", "-1", "--format=%h %s", sha).strip()
        print(f"[{i}/{len(shas)}] {subject[:90]}", flush=True)
        try:
            tree = base_tree(ROOT, sha, ROOT / ".perf-gate" / "trees")
        except GateError as e:
            print(f"  skipped: {str(e).splitlines()[0]}", flush=True)
            continue
        command = [*ASV, "run", "--python=same", "--set-commit-hash", sha]
        if not args.full:
            command.append("--quick")
        if args.bench:
            command += ["--bench", args.bench]
        env = {**os.environ, "ASV_PYTHONPATH": str(tree)}
        subprocess.run(command, cwd=ROOT, env=env, check=False)
    subprocess.run([*ASV, "publish"], cwd=ROOT, check=True)
    print(f"history: {ROOT / '.asv' / 'html' / 'index.html'} (`.venv/bin/asv preview` serves it)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
