"""One Spark session (local[1]) for the pipeline's tests, and generated run directories."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from fastcoord._accel import NO_EXTENSIONS

# The pipeline has no compiled modules, so the twins' run of the suite would repeat the
# same Spark jobs (minutes of CI) and check nothing new: it runs with the extensions only.
collect_ignore_glob = ["test_*.py"] if NO_EXTENSIONS else []


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # PySpark 3.5's collect() leaves its result socket to the garbage collector, whose
    # ResourceWarning pytest would turn into an error in whichever test comes next.
    for item in items:
        if "tests/pipeline/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.filterwarnings("ignore::ResourceWarning"))
            item.add_marker(
                pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
            )


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from fastcoord.pipeline.session import spark_session

    session = spark_session("local[1]", "fastcoord report tests")
    yield session
    session.stop()
