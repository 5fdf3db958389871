"""docs/configuration.md documents exactly the environment variables the product reads.

By convention every variable name is spelled in full as a string literal in the product
source (a name built per network is an f-string whose literal part is the whole prefix,
`f"ETH_RPC_URL_{network}"`). The source side is found with `ast`, not by importing
anything:
  - every string literal that is a whole name starting PAYSTREAM_, ALCHEMY_ or PAYMENTS_;
  - every name, whatever its prefix, declared as a settings field's `alias=`
    (paystream/env.py: the declarations the page is generated from);
  - every name, whatever its prefix, passed first to a call whose callee mentions `env`
    (`os.environ.get`, `os.getenv`, `env.get`, an `_env(...)` helper) or used as a key
    of `os.environ[...]`;
  - the same two shapes as f-strings: a family of names, written `PREFIX_<NETWORK>` on
    the page;
  - `${env:NAME}` in the Kafka Connect configuration the stack registers.
The page side: the first cell of every table row of docs/configuration.md that starts
with a name in backticks (several allowed, each in its own backticks). Any name with one
of the product prefixes mentioned anywhere on the page, or anywhere in README.md and
docs/*.md, must exist in the source too, so a renamed variable cannot linger in prose.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.parts import product_folders

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "configuration.md"
PRODUCT_DIRS = product_folders()
PREFIXES = ("PAYSTREAM_", "ALCHEMY_", "PAYMENTS_")

NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*")
FAMILY_PREFIX = re.compile(r"[A-Z][A-Z0-9_]*_")
CONNECT_ENV = re.compile(r"\$\{env:([A-Z][A-Z0-9_]*)\}")
# On the page: a name, or a family written PREFIX_<WHAT>.
DOC_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*(?:_<[A-Za-z_ ]+>)?")
PREFIXED_MENTION = re.compile(
    r"(?<![A-Za-z0-9_])(?:PAYSTREAM|ALCHEMY|PAYMENTS)_[A-Z0-9_]*(?:<[A-Za-z_ ]+>)?")


def _family(prefix: str) -> str:
    return prefix + "<>"


def _normalise(doc_name: str) -> str:
    """`PAYSTREAM_FINALITY_CONFIRMATIONS_<NETWORK>` -> `PAYSTREAM_FINALITY_CONFIRMATIONS_<>`."""
    return re.sub(r"<[^>]*>$", "<>", doc_name)


def _literal_name(node: ast.AST, *, any_prefix: bool) -> str | None:
    """The variable name (or family) a string or f-string node spells, if any."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value
        if NAME.fullmatch(text) and (any_prefix or text.startswith(PREFIXES)):
            return text
        return None
    if isinstance(node, ast.JoinedStr) and len(node.values) >= 2:
        head, tail = node.values[0], node.values[1]
        if (isinstance(head, ast.Constant) and isinstance(head.value, str)
                and isinstance(tail, ast.FormattedValue)
                and FAMILY_PREFIX.fullmatch(head.value)
                and (any_prefix or head.value.startswith(PREFIXES))):
            return _family(head.value)
    return None


def names_in_source() -> dict[str, set[str]]:
    """Every variable name the product reads -> the files that spell it."""
    found: dict[str, set[str]] = {}

    def add(name: str | None, path: Path) -> None:
        if name is not None:
            found.setdefault(name, set()).add(str(path.relative_to(ROOT)))

    for folder in PRODUCT_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                add(_literal_name(node, any_prefix=False), path)
                if isinstance(node, ast.keyword) and node.arg == "alias":
                    add(_literal_name(node.value, any_prefix=True), path)
                if (isinstance(node, ast.Call) and node.args
                        and "env" in ast.unparse(node.func).lower()):
                    add(_literal_name(node.args[0], any_prefix=True), path)
                if (isinstance(node, ast.Subscript)
                        and "environ" in ast.unparse(node.value)):
                    add(_literal_name(node.slice, any_prefix=True), path)
    for path in sorted((ROOT / "connectors" / "config").rglob("*")):
        if not path.is_file():
            continue
        for name in CONNECT_ENV.findall(path.read_text(encoding="utf-8")):
            add(name, path)
    return found


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def names_documented(text: str) -> set[str]:
    """Names in the first cell of the page's table rows."""
    documented: set[str] = set()
    for line in text.splitlines():
        if not line.lstrip().startswith("|"):
            continue
        first = _cells(line)[0]
        spans = re.findall(r"`([^`]+)`", first)
        if not spans or not DOC_NAME.fullmatch(spans[0]):
            continue  # a header, a separator, or a row that is not about a variable
        for span in spans:
            assert DOC_NAME.fullmatch(span), f"not a variable name: {span!r} in {line!r}"
            documented.add(_normalise(span))
    return documented


def prefixed_mentions(text: str) -> set[str]:
    return {_normalise(m) for m in PREFIXED_MENTION.findall(text)}


def test_source_scan_finds_the_known_readers() -> None:
    # Guards the scanner itself: one name of each shape it must see.
    found = names_in_source()
    for name in ("PAYSTREAM_DATABASE_URL", "ALCHEMY_SIGNING_KEY", "PAYMENTS_WEBHOOK_SECRET",
                 "ETH_RPC_URL", "ETH_RPC_URL_<>", "PAYSTREAM_FINALITY_CREDIT_DEPTH_<>",
                 "PAYSTREAM_PG_HOST"):
        assert name in found, f"the scan no longer finds {name}"


def test_every_variable_the_product_reads_is_documented() -> None:
    found = names_in_source()
    documented = names_documented(PAGE.read_text(encoding="utf-8"))
    missing = {name: sorted(files) for name, files in found.items() if name not in documented}
    assert not missing, (
        "read by the product but not in a table row of docs/configuration.md "
        "(add a row: `NAME` | default | meaning):\n"
        + "\n".join(f"  {name}  ({', '.join(files)})" for name, files in sorted(missing.items()))
    )


def test_the_page_documents_nothing_the_product_does_not_read() -> None:
    found = names_in_source()
    text = PAGE.read_text(encoding="utf-8")
    stale = (names_documented(text) | prefixed_mentions(text)) - set(found)
    assert not stale, (
        "docs/configuration.md names variables no product source spells: "
        f"{sorted(stale)}")


def test_no_page_mentions_a_variable_the_product_does_not_read() -> None:
    found = set(names_in_source())
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    stale = {str(page.relative_to(ROOT)): sorted(prefixed_mentions(
        page.read_text(encoding="utf-8")) - found) for page in pages}
    stale = {page: names for page, names in stale.items() if names}
    assert not stale, f"pages name variables no product source spells: {stale}"
