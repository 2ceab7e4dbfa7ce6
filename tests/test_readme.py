"""The README's quickstart runs as written: each Python example, in order, against the real
`fastcoord serve` on its default settings (only the port differs), with the clients that
the README says to install beside `make serve`'s fastcoord."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fastcoord.testing import ServerProcess, fastcoord_server

README = Path(__file__).parent.parent / "README.md"
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


def quickstart() -> str:
    return README.read_text().split("## Quickstart", 1)[1].split("\n## ", 1)[0]


def quickstart_examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", quickstart(), re.DOTALL)


def normalized(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with fastcoord_server(tmp_path_factory.mktemp("readme")) as running:
        yield running


def run_example(server: ServerProcess, code: str) -> str:
    assert DEFAULT_BOOTSTRAP in code
    result = subprocess.run(
        [sys.executable, "-c", code.replace(DEFAULT_BOOTSTRAP, server.bootstrap)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_quickstart_has_its_four_examples() -> None:
    assert len(quickstart_examples()) == 4


def test_the_quickstart_says_how_to_install_what_its_examples_import() -> None:
    # `make serve` installs the project's dependencies only: every package an example
    # imports beyond them must be on the README's install line.
    (line,) = re.findall(r"^\.venv/bin/pip install (.+)$", quickstart(), re.MULTILINE)
    installed = {normalized(re.split(r"[<>=!~ ]", word.strip("'\""))[0]) for word in line.split()}
    served = {
        normalized(re.split(r"[<>=!~ \[;]", requirement)[0])
        for requirement in importlib.metadata.requires("fastcoord") or []
        if "extra ==" not in requirement
    }
    providers = importlib.metadata.packages_distributions()
    for example in quickstart_examples():
        for module in re.findall(r"^(?:from|import) (\w+)", example, re.MULTILINE):
            names = {normalized(d) for d in providers[module]}
            assert names & (installed | served), f"{module} is not on the install line: {line}"


def test_the_quickstart_examples_run_in_order(server: ServerProcess) -> None:
    kafka_python, confluent, kafka_python_admin, confluent_admin = quickstart_examples()
    assert run_example(server, kafka_python).strip() == (
        "{TopicPartition(topic='orders', partition=0)}"
    )
    assert "TopicPartition{topic=orders,partition=0" in run_example(server, confluent)
    listed = run_example(server, kafka_python_admin)
    assert "'group_id': 'orders-app'" in listed
    assert "'group_state': 'Empty'" in listed  # both consumers have left
    assert "OffsetAndMetadata(offset=42" in listed
    described = run_example(server, confluent_admin).splitlines()
    assert described[0] == "orders-app ConsumerGroupState.EMPTY"
    assert described[1].startswith("ConsumerGroupState.EMPTY")
    assert "TopicPartition{topic=orders,partition=0,offset=42," in described[2]
