"""The admin client's paths for /v1/groups and its reading of a Link header: the next page
is followed on the same server only, whatever else the header carries."""

from __future__ import annotations

import pytest

from fastcoord.client.admin import groups_path, next_link


def test_the_query_of_each_parameter() -> None:
    assert groups_path(None, None, None) == "/v1/groups"
    assert groups_path("Stable", None, None) == "/v1/groups?state=Stable"
    assert groups_path(["Stable", "Empty"], 50, "a b/c&d") == (
        "/v1/groups?state=Stable,Empty&limit=50&after=a%20b%2Fc%26d"
    )


@pytest.mark.parametrize(
    ("values", "wanted"),
    [
        ([], None),
        (['</v1/groups?after=b&limit=2>; rel="next"'], "/v1/groups?after=b&limit=2"),
        (["</v1/groups?after=b>;rel=next"], "/v1/groups?after=b"),
        (['</a>; rel="prev", </v1/groups?after=c>; rel="next"'], "/v1/groups?after=c"),
        (['</a>; rel="prev"', '</b>; rel="next"'], "/b"),
        (['</a>; rel="nextish"'], None),
        (['<http://elsewhere/v1/groups>; rel="next"'], None),  # another host's: not followed
        (['<//elsewhere/v1/groups>; rel="next"'], None),
    ],
)
def test_the_next_link(values: list[str], wanted: str | None) -> None:
    assert next_link(values) == wanted
