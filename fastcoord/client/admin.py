"""A blocking client of `fastcoord serve --admin-port`: faults, groups, metrics.

Tests set faults and read groups on a running server with it, `fastcoord loadtest --faults`
applies its schedule with it, and scripts may do the same. It uses the standard library
alone (http.client, one connection per request, every socket operation bounded by the
timeout), so it works in any process without an event loop or a package to install.
"""

from __future__ import annotations

import http.client
import re
import urllib.parse
from collections.abc import Sequence
from typing import Any

import msgspec

__all__ = ["AdminClient", "AdminError", "parse_address"]

# How much of an answer that is not the API's JSON is quoted in an error.
QUOTED = 200


class AdminError(Exception):
    """The admin API refused a request (a non-2xx status), or answered what it should not;
    `message` is the server's `error` text when it gave one."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


def parse_address(address: str) -> tuple[str, int]:
    """HOST:PORT (or [IPv6]:PORT) as (host, port); ValueError when it is neither."""
    host, _, port = address.strip().rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{address!r}: expected HOST:PORT")
    return host, int(port)


class AdminClient:
    """The admin API at `address` ("HOST:PORT"). Transport failures (refused, timed out,
    not HTTP) raise OSError; refusals by the server raise AdminError."""

    def __init__(self, address: str, timeout_s: float = 10.0) -> None:
        self.host, self.port = parse_address(address)
        self.address = address
        self.timeout_s = timeout_s

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """One request as given; the status and the body, whatever they are."""
        status, answer, _ = self._exchange(method, path, body)
        return status, answer

    def _exchange(
        self, method: str, path: str, body: bytes | None = None
    ) -> tuple[int, bytes, http.client.HTTPMessage]:
        """One request: the status, the body and the headers of the answer."""
        connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, response.read(), response.headers
        except http.client.HTTPException as exc:
            # Callers catch OSError for "the server could not be asked"; a garbled answer
            # is one more way of that.
            raise ConnectionError(f"not an HTTP answer: {type(exc).__name__}: {exc}") from exc
        finally:
            connection.close()

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        return self._call_with_headers(method, path, body)[0]

    def _call_with_headers(
        self, method: str, path: str, body: Any = None
    ) -> tuple[Any, http.client.HTTPMessage]:
        data = None if body is None else msgspec.json.encode(body)
        status, answer, headers = self._exchange(method, path, data)
        if not 200 <= status < 300:
            raise AdminError(status, _error_text(answer))
        try:
            return msgspec.json.decode(answer), headers
        except msgspec.DecodeError:
            raise AdminError(status, f"an answer that is not JSON: {_quote(answer)}") from None

    def _expect(self, value: Any, kind: type, what: str) -> Any:
        if not isinstance(value, kind):
            raise AdminError(200, f"expected {what}, got {_quote(msgspec.json.encode(value))}")
        return value

    def add_fault(self, rule: dict[str, Any]) -> dict[str, Any]:
        """POST /v1/faults: the fault's view (id, rule, description, state, injected, ...)."""
        view: dict[str, Any] = self._expect(self._call("POST", "/v1/faults", rule), dict, "a fault")
        return view

    def faults(self) -> list[dict[str, Any]]:
        """GET /v1/faults: every fault's view, the ones added by others too."""
        views: list[dict[str, Any]] = self._expect(
            self._call("GET", "/v1/faults"), list, "a list of faults"
        )
        return views

    def delete_fault(self, fault_id: int) -> dict[str, Any]:
        """DELETE /v1/faults/ID: the fault's last view; AdminError 404 if there is none."""
        view: dict[str, Any] = self._expect(
            self._call("DELETE", f"/v1/faults/{int(fault_id)}"), dict, "a fault"
        )
        return view

    def clear_faults(self) -> int:
        """DELETE /v1/faults: how many faults were deleted."""
        answer = self._expect(self._call("DELETE", "/v1/faults"), dict, '{"deleted": N}')
        deleted = answer.get("deleted")
        if not isinstance(deleted, int):
            raise AdminError(200, f'expected {{"deleted": N}}, got {answer!r}')
        return deleted

    def groups(
        self, state: str | Sequence[str] | None = None, page_size: int | None = None
    ) -> list[dict[str, Any]]:
        """GET /v1/groups: every group, without its members, sorted by id; only those in
        `state` if given (a state's name, Kafka's, or several). In one answer; with
        `page_size` (1 to 10000), in pages of that many groups, a request each, following
        each answer's Link to the next: on a server with many groups, each request holds
        its loop for a page only. A group created or deleted between two pages may be
        missing or still listed."""
        found: list[dict[str, Any]] = []
        path: str | None = groups_path(state, page_size, None)
        while path is not None:
            page, following = self._groups_at(path)
            found += page
            path = following if following != path else None
        return found

    def groups_page(
        self,
        state: str | Sequence[str] | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """GET /v1/groups?state=..&limit=..&after=..: one page of the groups sorted by id
        (those whose id sorts after `after`, at most `limit` of them), and the `after` of
        the next page: None when this one is the last."""
        page, following = self._groups_at(groups_path(state, limit, after))
        if following is None:
            return page, None
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(following).query)
        return page, query.get("after", [None])[-1]

    def _groups_at(self, path: str) -> tuple[list[dict[str, Any]], str | None]:
        """The groups of one answer, and the path of its Link rel="next" if it has one."""
        answer, headers = self._call_with_headers("GET", path)
        groups: list[dict[str, Any]] = self._expect(answer, list, "a list of groups")
        return groups, next_link(headers.get_all("Link") or [])

    def group(self, group_id: str) -> dict[str, Any]:
        """GET /v1/groups/ID: one group with its members; AdminError 404 if unknown."""
        path = "/v1/groups/" + urllib.parse.quote(group_id, safe="")
        group: dict[str, Any] = self._expect(self._call("GET", path), dict, "a group")
        return group

    def cluster(self) -> dict[str, Any]:
        """GET /v1/cluster (fastcoord cluster's admin port): the nodes, their state and
        restarts."""
        view: dict[str, Any] = self._expect(self._call("GET", "/v1/cluster"), dict, "a cluster")
        return view

    def partitions(self) -> dict[str, Any]:
        """GET /v1/partitions (a node kept in ZooKeeper): the map it last read (owners by
        partition, nodes' addresses, its version) and the partitions it serves and loads."""
        view: dict[str, Any] = self._expect(
            self._call("GET", "/v1/partitions"), dict, "the partitions"
        )
        return view

    def move_partition(self, partition: int, node_id: int) -> dict[str, Any]:
        """POST /v1/partitions/P/move: give offsets partition `partition` to node `node_id`;
        the map written. AdminError 409 says why it cannot be."""
        path = f"/v1/partitions/{int(partition)}/move"
        written: dict[str, Any] = self._expect(
            self._call("POST", path, {"node": int(node_id)}), dict, "the map"
        )
        return written

    def metrics_text(self) -> str:
        """GET /metrics: the Prometheus text."""
        status, answer = self.request("GET", "/metrics")
        if not 200 <= status < 300:
            raise AdminError(status, _error_text(answer))
        return answer.decode("utf-8", "replace")


def groups_path(state: str | Sequence[str] | None, limit: int | None, after: str | None) -> str:
    """/v1/groups with the query of these parameters (none for those that are None)."""
    params = []
    if state is not None:
        names = ",".join([state] if isinstance(state, str) else state)
        params.append("state=" + urllib.parse.quote(names, safe=","))
    if limit is not None:
        params.append(f"limit={int(limit)}")
    if after is not None:
        params.append("after=" + urllib.parse.quote(after, safe=""))
    return "/v1/groups" + ("?" + "&".join(params) if params else "")


# One link of a Link header: <URI>; rel="next" (RFC 8288), the rel quoted or not.
LINK = re.compile(r'<([^>]*)>\s*;\s*rel="?next"?(?:[\s;,]|$)')


def next_link(values: Sequence[str]) -> str | None:
    """The path of the Link headers' rel="next", if they have one on this server (a path,
    not another host's URL)."""
    for value in values:
        for match in LINK.finditer(value):
            if match[1].startswith("/") and not match[1].startswith("//"):
                return match[1]
    return None


def _quote(data: bytes) -> str:
    text = data.decode("utf-8", "replace")
    return repr(text if len(text) <= QUOTED else text[:QUOTED] + "...")


def _error_text(answer: bytes) -> str:
    """The server's `error` text, or what it said instead."""
    try:
        decoded = msgspec.json.decode(answer)
    except msgspec.DecodeError:
        decoded = None
    if isinstance(decoded, dict) and isinstance(decoded.get("error"), str):
        return str(decoded["error"])
    return _quote(answer) if answer else "no reason given"
