"""What `fastcoord loadtest` checks before anything starts, each refusal one line and exit
status 2: an --out that holds another run, an --admin (alone, without --faults, now) whose
/metrics cannot be read; and --warmup as parsed."""

from __future__ import annotations

from pathlib import Path

import pytest

from fastcoord.cli import build_parser

from .test_faults import Stub, free_port, loadtest, refusal, stub  # noqa: F401 (a fixture)
from .test_sampler import METRICS


def test_an_out_that_holds_a_run_is_refused_in_a_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "run" / "latency").mkdir(parents=True)
    assert refusal(capsys, loadtest(tmp_path)) == (
        f"fastcoord loadtest: --out {tmp_path / 'run'} holds another run's results (latency): "
        "give an empty or new directory"
    )
    (tmp_path / "file").write_text("")
    assert refusal(capsys, [*loadtest(tmp_path), "--out", str(tmp_path / "file")]) == (
        f"fastcoord loadtest: --out {tmp_path / 'file'} is a file: give a new or empty directory"
    )


def test_admin_alone_is_accepted_once_its_metrics_answer(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    stub: Stub,  # noqa: F811
) -> None:
    gone = f"127.0.0.1:{free_port()}"
    assert refusal(capsys, loadtest(tmp_path, "--admin", gone)) == (
        f"fastcoord loadtest: cannot read /metrics at the admin port {gone} (connection "
        "refused): is the server running with --admin-port, and is --admin its address?"
    )
    assert refusal(capsys, loadtest(tmp_path, "--admin", "nowhere")) == (
        "fastcoord loadtest: --admin 'nowhere': expected HOST:PORT"
    )
    stub.answer("GET", "/metrics", 200, METRICS.encode())
    # Accepted without --faults: the next check, the bootstrap's, is the one that refuses.
    assert "cannot reach the bootstrap" in refusal(
        capsys, loadtest(tmp_path, "--admin", stub.address)
    )
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_warmup_is_seconds_of_zero_or_more() -> None:
    parse = build_parser().parse_args
    assert parse(["loadtest"]).warmup is None
    assert parse(["loadtest", "--warmup", "30"]).warmup == 30.0
    assert parse(["loadtest", "--warmup", "0"]).warmup == 0.0
    for bad in ("-1", "nan", "soon"):
        with pytest.raises(SystemExit):
            parse(["loadtest", "--warmup", bad])
