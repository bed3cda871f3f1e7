"""Arize Phoenix: a trace by id from its REST API (port 6006 by default).

`GET /v1/projects/{project}/spans?trace_id=ID` (Phoenix >= 13.9), paged with `cursor`.
Phoenix keeps traces per project, and its API asks for one: `phoenix:URL#PROJECT` names
it; without a name every project is searched (the first 100), since a user grading an id
copied from the UI rarely knows which project the trace landed in.

What Phoenix gives back is its own span shape, not OTLP: ISO-8601 times, `status_code`
as a name, attributes flattened to dotted keys (lists of scalars kept as lists), and the
OpenInference span kind lifted out of the attributes into `span_kind`, from where it is
put back (the adapters recognise OpenInference spans by that attribute). Resource and
instrumentation scope are not kept by Phoenix; the project name stands in as
`openinference.project.name`.

Auth: `--header Authorization=Bearer <key>`, or `PHOENIX_API_KEY` as Phoenix's own
clients read it. An older server that ignores `trace_id` still works (spans are filtered
here), up to `MAX_PAGES` pages.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urldefrag

from attest_otel.errors import SourceError
from attest_otel.ingest.decode import Decoded
from attest_otel.model import STATUS_ERROR, STATUS_OK, STATUS_UNSET, Event, Span
from attest_otel.sources.base import (
    TraceNotFoundError,
    decoded_from_spans,
    join_url,
    normalize_trace_id,
    parse_hex_id,
)
from attest_otel.sources.http import HttpClient, HttpOptions, Response
from attest_otel.sources.kind import SourceKind

__all__ = [
    "MAX_PAGES",
    "MAX_PROJECTS",
    "PhoenixSource",
    "restore_json_attributes",
    "span_from_phoenix",
]

MAX_PAGES = 100
"""Pages of 1000 spans read per project before giving up (an old server without the
trace filter makes us read a whole project)."""
MAX_PROJECTS = 100
PAGE_SIZE = 1000

_JSON_STRING_SUFFIXES = (
    "document.metadata",
    "llm.prompt_template.variables",
    "metadata",
    "tool.parameters",
)
"""Attributes Phoenix parses from JSON strings into objects when it stores a span, and its
REST API then returns flattened (`tool.parameters.type`, ...). The adapters read them as
the JSON strings the instrumentation wrote (a run's policy may be in `metadata`)."""

_STATUS = {"OK": STATUS_OK, "ERROR": STATUS_ERROR, "UNSET": STATUS_UNSET}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SPAN_KIND = "openinference.span.kind"
_GENAI_OPERATION = "gen_ai.operation.name"
"""Phoenix gives spans in the OpenTelemetry GenAI conventions an OpenInference kind of its
own making; left out, so the adapters read such a span in the dialect it was written in."""
_PROJECT = "openinference.project.name"


class PhoenixSource:
    kind = "phoenix"

    def __init__(self, url: str, options: HttpOptions | None = None) -> None:
        self.location = url
        base, fragment = urldefrag(url)
        self.base_url = base
        self.project: str | None = fragment or None
        options = options or HttpOptions()
        key = os.environ.get("PHOENIX_API_KEY", "").strip()
        if key and not options.has_header("Authorization"):
            options = dataclasses.replace(
                options, headers=(*options.headers, ("Authorization", f"Bearer {key}"))
            )
        self._http = HttpClient("phoenix", options)

    def close(self) -> None:
        self._http.close()

    def fetch(self, trace_id: str) -> Decoded:
        tid = normalize_trace_id(trace_id)
        projects = [self.project] if self.project else self._projects()
        for project in projects:
            spans = self._spans(project, tid)
            if spans:
                return decoded_from_spans(spans)
        where = f"phoenix at {self.base_url}"
        if self.project:
            where += f" (project {self.project})"
        elif projects:
            where += f" ({len(projects)} projects searched)"
        raise TraceNotFoundError(tid, where)

    def _projects(self) -> list[str]:
        names: list[str] = []
        cursor: str | None = None
        while len(names) < MAX_PROJECTS:
            params: dict[str, str | int | list[str]] = {"limit": MAX_PROJECTS}
            if cursor:
                params["cursor"] = cursor
            r = self._http.get(join_url(self.base_url, "v1/projects"), params=params)
            if r.status != 200:
                raise self._http_error(r, "v1/projects")
            body = self._http.parse(r, functools.partial(self._json, r))
            for project in body.get("data") or []:
                if isinstance(project, dict) and project.get("name"):
                    names.append(str(project["name"]))
            cursor = body.get("next_cursor")
            if not cursor:
                break
        return names[:MAX_PROJECTS]

    def _spans(self, project: str, tid: str) -> list[Span]:
        url = join_url(self.base_url, "v1/projects", quote(project, safe=""), "spans")
        out: list[Span] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            params: dict[str, str | int | list[str]] = {"trace_id": tid, "limit": PAGE_SIZE}
            if cursor:
                params["cursor"] = cursor
            r = self._http.get(url, params=params, accept="application/json")
            if r.status == 404:
                if self.project:
                    detail = _detail(r)
                    if "not found" in detail.lower() and "project" in detail.lower():
                        raise SourceError(
                            f"project {project!r} not found in phoenix at {self.base_url}"
                        )
                    raise self._http_error(r, "v1/projects/{project}/spans")
                return out  # the project went away while we searched
            if r.status != 200:
                raise self._http_error(r, "v1/projects/{project}/spans")
            page, cursor = self._http.parse(r, functools.partial(self._page, r, project, tid))
            out += page
            if not cursor:
                return out
        raise SourceError(
            f"phoenix at {self.base_url}: more than {MAX_PAGES * PAGE_SIZE} spans to page "
            f"through in project {project!r}; this server may be older than 13.9 and ignore "
            "the trace_id filter"
        )

    def _page(self, r: Response, project: str, tid: str) -> tuple[list[Span], str | None]:
        """One page of spans: those of trace `tid`, and the next page's cursor."""
        body = self._json(r)
        out: list[Span] = []
        try:
            for raw in body.get("data") or []:
                span = span_from_phoenix(raw, project)
                if span.trace_id == tid:
                    out.append(span)
        except (KeyError, TypeError, ValueError) as e:
            raise SourceError(
                f"unexpected body from phoenix at {self.base_url} ({r.url}): malformed span: {e}"
            ) from None
        cursor = body.get("next_cursor")
        return out, str(cursor) if cursor else None

    def _json(self, r: Response) -> dict[str, Any]:
        try:
            body = json.loads(r.body)
        except (ValueError, UnicodeDecodeError) as e:
            raise SourceError(
                f"unexpected body from phoenix at {self.base_url} ({r.url}): not JSON ({e})"
            ) from None
        if not isinstance(body, dict):
            raise SourceError(
                f"unexpected body from phoenix at {self.base_url} ({r.url}): expected a JSON object"
            )
        return body

    def _http_error(self, r: Response, route: str) -> SourceError:
        where = f"phoenix at {self.base_url}"
        if r.status in (401, 403):
            return SourceError(
                f"{where} refused access (HTTP {r.status}): set PHOENIX_API_KEY or pass "
                "--header 'Authorization=Bearer <api key>'"
            )
        if r.status == 404:
            return SourceError(
                f"{where} has no /{route} (HTTP 404); grading by id needs Phoenix 13.9 or newer"
            )
        return SourceError(f"{where} answered HTTP {r.status}: {r.snippet()}")


def _detail(r: Response) -> str:
    try:
        body = json.loads(r.body)
    except (ValueError, UnicodeDecodeError):
        return r.snippet()
    detail = body.get("detail") if isinstance(body, dict) else None
    return str(detail) if detail else r.snippet()


def _ns(text: Any) -> int:
    if not text:
        return 0
    moment = datetime.fromisoformat(str(text))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    # Integer arithmetic: float seconds would lose the microseconds.
    return (moment - _EPOCH) // timedelta(microseconds=1) * 1000


def _json_root(key: str) -> str | None:
    """The shortest dotted prefix of `key` that names a JSON-string attribute, if any."""
    parts = key.split(".")
    for end in range(1, len(parts)):
        prefix = ".".join(parts[:end])
        if any(prefix == s or prefix.endswith("." + s) for s in _JSON_STRING_SUFFIXES):
            return prefix
    return None


def _listify(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    items = {k: _listify(v) for k, v in node.items()}
    if (
        items
        and all(k.isdigit() for k in items)
        and sorted(map(int, items)) == list(range(len(items)))
    ):
        return [items[str(i)] for i in range(len(items))]
    return items


def restore_json_attributes(attributes: dict[str, Any]) -> dict[str, Any]:
    """Puts Phoenix's flattened JSON-string attributes back together as JSON strings."""
    roots: dict[str, dict[str, Any]] = {}
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        root = _json_root(key)
        if root is None or root in attributes:
            out[key] = value
            continue
        node = roots.setdefault(root, {})
        *path, leaf = key[len(root) + 1 :].split(".")
        for part in path:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                break  # a value and an object under one name: keep the value
            node = child
        else:
            node[leaf] = value
    for root, tree in roots.items():
        # Phoenix's flattening cannot tell {"attest.allowed_tools": ...} from {"attest":
        # {"allowed_tools": ...}}; attest's policy keys are documented in the first form.
        attest = tree.pop("attest", None)
        if isinstance(attest, dict):
            tree.update({f"attest.{k}": v for k, v in attest.items()})
        elif attest is not None:
            tree["attest"] = attest
        out[root] = json.dumps(_listify(tree))
    return out


def span_from_phoenix(raw: dict[str, Any], project: str | None = None) -> Span:
    """One span of Phoenix's `/v1/projects/{p}/spans` answer as a `Span`."""
    context = raw["context"]
    attributes = restore_json_attributes(dict(raw.get("attributes") or {}))
    span_kind = raw.get("span_kind")
    if (
        span_kind
        and span_kind != "UNKNOWN"
        and _SPAN_KIND not in attributes
        and _GENAI_OPERATION not in attributes
    ):
        attributes[_SPAN_KIND] = span_kind
    parent = raw.get("parent_id")
    events = [
        Event(
            name=str(e.get("name") or ""),
            time_ns=_ns(e.get("timestamp")),
            attributes=dict(e.get("attributes") or {}),
        )
        for e in raw.get("events") or []
    ]
    return Span(
        trace_id=parse_hex_id(str(context["trace_id"]), 16),
        span_id=parse_hex_id(str(context["span_id"]), 8),
        parent_id=parse_hex_id(str(parent), 8) if parent else None,
        name=str(raw.get("name") or ""),
        start_ns=_ns(raw.get("start_time")),
        end_ns=_ns(raw.get("end_time")),
        status_code=_STATUS.get(str(raw.get("status_code") or "UNSET").upper(), STATUS_UNSET),
        status_message=str(raw.get("status_message") or ""),
        attributes=attributes,
        events=events,
        resource={_PROJECT: project} if project else {},
    )


KIND = SourceKind("phoenix", "url", "http://localhost:6006", PhoenixSource)
