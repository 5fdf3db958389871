"""Every parameter of every console route, read from the console's own routing table,
sent every hostile value a client can type: no answer is a 5xx, and a value no column can
hold (NUL, a control character, bytes that are not UTF-8) is refused 400 at the door.

The forms' fields are not in the routing table (a POST reads its urlencoded body
itself), so they are read from the templates: the names a browser posts. Each POST gets
every field set to the hostile value at once, with this session's CSRF token.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import quote

import pytest
import requests
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from paystream.console.app import ROUTERS, templates
from tests.support.console import ConsoleServer, csrf_of, start_console
from tests.support.ids import unique

TEMPLATES = templates()  # the kit's, the console's and each feature's, beside its routes
# (what it is, the value percent-encoded as a client would send it, refused at the door:
# True in a URL and a form, "url" in a URL only: a reason typed in a text area has lines)
HOSTILE: list[tuple[str, str, bool | str]] = [
    ("NUL", "%00", True),
    ("NUL inside", "a%00b", True),
    ("CR LF", "x%0D%0ASet-Cookie:%20a=b", "url"),
    ("escape", "%1B[31m", True),
    ("C1 control", "%C2%85", True),
    ("not UTF-8", "%FF%FE", True),
    ("a UTF-8 surrogate", "%ED%A0%80", True),
    ("truncated UTF-8", "%E2%82", True),
    ("superscript digit", quote("²"), False),
    ("Arabic-Indic digits", quote("١٢٣"), False),
    ("past 64 bits", "9" * 25, False),
    ("2**63", str(2**63), False),
    ("below bigint", str(-(2**63) - 1), False),
    ("zero", "0", False),
    ("negative", "-1", False),
    ("a float", "1e308", False),
    ("100 KB", "x" * 100_000, False),
    ("non-ASCII text", quote("żółw 🐢"), False),
    ("a SQL quote", quote("' OR '1'='1"), False),
    ("dots", "..%2F..%2Fetc", False),
]
BENIGN_PATH = {int: "999999999999", str: "none-such"}


def _form_fields() -> list[str]:
    """The names of the inputs, text areas and selects of every template's forms."""
    names: set[str] = set()
    loader = TEMPLATES.loader
    assert loader is not None
    for template in TEMPLATES.list_templates():
        names |= set(re.findall(r'<(?:input|textarea|select)[^>]*\sname="([a-z_]+)"',
                                loader.get_source(TEMPLATES, template)[0]))
    return sorted(names - {"csrf"})


def _params(dependant: Dependant, kind: str) -> list:
    """A route's path or query parameters, its dependencies' too."""
    found = list(getattr(dependant, kind))
    for sub in dependant.dependencies:
        found += _params(sub, kind)
    return found


def _routes() -> list[APIRoute]:
    routes = [r for module in ROUTERS for r in module.router.routes if isinstance(r, APIRoute)]
    assert len(routes) > 15, "the routing table was not read"
    return routes


def _path(route: APIRoute, hostile: tuple[str, str] | None = None) -> str:
    """The route's path with benign values, or `hostile` = (parameter, raw value)."""
    params = {p.name: p for p in _params(route.dependant, "path_params")}
    path = route.path
    for name, param in params.items():
        raw = hostile[1] if hostile and hostile[0] == name else BENIGN_PATH.get(
            param.field_info.annotation, "none-such")
        path = re.sub(r"\{" + name + r"(:[a-z]+)?\}", raw, path)
    return path


@pytest.fixture(scope="module")
def console() -> Iterator[ConsoleServer]:
    # Its own console: every hostile login is a failed one, and the limit must not stop
    # the requests from reaching the code under test.
    server = start_console(unique("hostile-operator"),
                           {"PAYSTREAM_CONSOLE_LOGIN_FAILURE_BURST": "100000"})
    try:
        yield server
    finally:
        server.stop()


def _check(answers: list[tuple[str, str, int, str]]) -> None:
    failures = [a for a in answers if a[2] >= 500]
    assert not failures, "5xx answers:\n" + "\n".join(
        f"{what}: {where[:120]} -> {status} {body[:200]}" for where, what, status, body
        in failures)


def test_no_route_answers_5xx_to_a_hostile_value_in_any_parameter(
        console: ConsoleServer) -> None:
    http = console.login()
    csrf = csrf_of(http.get(console.url + "/search", timeout=10).text)
    answers: list[tuple[str, str, int, str]] = []
    door: list[tuple[str, str, int]] = []  # (where, what, status) of a value refused there

    def send(method: str, url: str, what: str, at_door: bool | str,
             session: requests.Session, form: str | None = None, in_url: bool = True
             ) -> None:
        answer = session.request(method, console.url + url, data=form, timeout=30,
                                 allow_redirects=False, headers={
                                     "content-type": "application/x-www-form-urlencoded"}
                                 if form is not None else {})
        answers.append((url, what, answer.status_code, answer.text))
        if at_door is True or (at_door == "url" and in_url):
            door.append((url, what, answer.status_code))

    fields = _form_fields()
    assert {"q", "reason", "count", "since", "key"} <= set(fields), fields
    routes = _routes()
    for route in routes:
        path_params = _params(route.dependant, "path_params")
        query_params = _params(route.dependant, "query_params")
        for method in sorted(route.methods):
            for what, raw, at_door in HOSTILE:
                for param in path_params:
                    send(method, _path(route, (param.name, raw)), what, at_door, http,
                         f"csrf={csrf}" if method == "POST" else None)
                if method == "GET":
                    for param in query_params:
                        send(method, f"{_path(route)}?{param.name}={raw}", what, at_door,
                             http)
                else:
                    session = console.login() if route.path == "/logout" else http
                    token = csrf if session is http else csrf_of(
                        session.get(console.url + "/search", timeout=10).text)
                    body = "&".join(f"{name}={raw}" for name in fields
                                    if name != "login_csrf") + f"&csrf={token}"
                    send(method, _path(route), what, at_door, session, body, in_url=False)
    _check(answers)
    wrongly_let_in = [d for d in door if d[2] != 400]
    assert not wrongly_let_in, wrongly_let_in[:20]
    assert len(answers) > 500, len(answers)
    # The session lived through it all: the answers above were the routes', not a login
    # page's.
    assert http.get(console.url + "/search", timeout=10).status_code == 200


def test_a_search_for_a_number_in_other_digits_finds_nothing(console: ConsoleServer
                                                             ) -> None:
    http = console.login()
    for q in ("²", "١٢٣", "9" * 25, "𝟗"):
        answer = http.get(console.url + "/search", params={"q": q}, timeout=10)
        assert answer.status_code == 200, (q, answer.status_code, answer.text[:300])
        assert 'id="nothing"' in answer.text, q
    answer = http.get(console.url + "/search", params={"q": "x" * 201}, timeout=10)
    assert answer.status_code == 400 and "q" in answer.text


def test_numbers_past_a_bigint_are_refused_with_their_parameter_named(
        console: ConsoleServer) -> None:
    http = console.login()
    for url in ("/audit?before=" + "9" * 25, "/dead-letters?before=" + str(2**63),
                "/dead-letters/" + "9" * 25, "/audit?before=0"):
        answer = http.get(console.url + url, timeout=10)
        assert answer.status_code == 400, (url, answer.status_code)
        assert "before" in answer.text or "dlq_id" in answer.text, answer.text[:400]
