"""A load test's parent that dies mid-run: `python -m tests.loadtest.dying_run OUT`.

It merges and flushes three seconds of two workers, then dies by os._exit halfway through
writing the fourth flush's latency part, as a killed process would: no cleanup of any kind.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from fastcoord.loadtest import results
from fastcoord.loadtest.aggregate import Aggregator
from fastcoord.loadtest.summary import Thresholds

from .workers import second, server_samples

FLUSHED_SECONDS = 3
EXIT_CODE = 37


def main(out: Path) -> None:
    agg = Aggregator(out, {"members": 20}, workers=2, thresholds=Thresholds())
    for elapsed_s in range(1, FLUSHED_SECONDS + 1):
        agg.add(second(0, elapsed_s))
        agg.add(second(1, elapsed_s))
        agg.add_server(*server_samples(elapsed_s))
        agg.flush()
    write_table = results.pq.write_table

    def half_then_die(table: Any, where: Any, **kwargs: Any) -> None:
        write_table(table, where, **kwargs)
        size = os.path.getsize(where)
        os.truncate(where, size // 2)
        os._exit(EXIT_CODE)

    results.pq.write_table = half_then_die
    agg.add(second(0, FLUSHED_SECONDS + 1))
    agg.add(second(1, FLUSHED_SECONDS + 1))
    agg.flush()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
