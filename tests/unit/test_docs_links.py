"""Every link in README.md, CHANGELOG.md and docs/*.md stays inside the repository.

A relative link must resolve, from the page that holds it, to a file or folder of the
repository (never to one of the ignored state folders, never above the repository
root), and an anchor (`page.md#section`, `#section`) must name a heading of its page.
No link may leave the repository: absolute paths and URLs are refused, except URLs to
the hosts listed in ALLOWED_HOSTS (public upstream documentation; none today).
Links inside code blocks and code spans are text, not links, and are not checked.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
ALLOWED_HOSTS: frozenset[str] = frozenset()
# Folders that exist in a working tree but are not the repository's content.
NOT_CONTENT = (".git", ".venv", ".stack", ".stack-test", "paystream.egg-info")

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)
AUTOLINK = re.compile(r"<((?:https?|ftp|mailto):[^>\s]+)>")
HTML_LINK = re.compile(r"""<(?:a|img)\s[^>]*?(?:href|src)\s*=\s*["']([^"']+)["']""", re.I)
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)


def pages() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [page for page in found if page.exists()]


def _without_code(text: str) -> str:
    return CODE_SPAN.sub("", FENCE.sub("", text))


def links(text: str) -> list[str]:
    prose = _without_code(text)
    return [*INLINE_LINK.findall(prose), *REFERENCE_DEF.findall(prose),
            *AUTOLINK.findall(prose), *HTML_LINK.findall(prose)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lowercase, punctuation removed,
    spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def problem(page: Path, target: str) -> str | None:
    """Why `target`, linked from `page`, is not a link into the repository (None: fine)."""
    if not target:
        return "empty link"
    parts = urlsplit(target)
    if parts.scheme or target.startswith("//"):
        if parts.scheme in ("http", "https") and parts.hostname in ALLOWED_HOSTS:
            return None
        return "leaves the repository (a URL)"
    path_text = unquote(parts.path)
    if path_text.startswith("/"):
        return "an absolute path"
    resolved = (page.parent / path_text).resolve() if path_text else page.resolve()
    if not resolved.is_relative_to(ROOT):
        return "points above the repository root"
    relative = resolved.relative_to(ROOT)
    if relative.parts and (relative.parts[0] in NOT_CONTENT
                           or relative.parts[0].startswith(".stack")):
        return "points into an ignored working folder"
    if not resolved.exists():
        return "no such file in the repository"
    if parts.fragment:
        if resolved.suffix != ".md" or not resolved.is_file():
            return "an anchor on something that is not a Markdown page"
        if unquote(parts.fragment).lower() not in anchors(resolved):
            return f"no heading with anchor #{parts.fragment} in {relative}"
    return None


def test_the_pages_exist() -> None:
    names = {str(p.relative_to(ROOT)) for p in pages()}
    for required in ("README.md", "CHANGELOG.md", "docs/configuration.md",
                     "docs/guarantees.md", "docs/architecture.md"):
        assert required in names


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_stays_in_the_repository(page: Path) -> None:
    bad = [(target, why) for target in links(page.read_text(encoding="utf-8"))
           if (why := problem(page, target)) is not None]
    assert not bad, f"{page.relative_to(ROOT)}: " + "; ".join(
        f"{target!r}: {why}" for target, why in bad)


def test_the_checker_refuses_what_it_must() -> None:
    readme = ROOT / "README.md"
    assert problem(readme, "../shared/ARCHITECTURE.md") is not None
    assert problem(readme, "https://example.org/") is not None
    assert problem(readme, "/etc/passwd") is not None
    assert problem(readme, "docs/no-such-page.md") is not None
    assert problem(readme, ".venv/bin/python") is not None
    assert problem(readme, "#no-such-heading") is not None
    assert problem(readme, "pyproject.toml") is None
    assert links("see `[x](../out.md)` and\n```\n[y](../out.md)\n```\n") == []
    assert slug("Guarantee: crash between the DB commit and the offset commit") == \
        "guarantee-crash-between-the-db-commit-and-the-offset-commit"
    assert slug("`paystream reconcile`: is every balance explained?") == \
        "paystream-reconcile-is-every-balance-explained"
