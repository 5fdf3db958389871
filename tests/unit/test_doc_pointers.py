"""Comments, docstrings and docs stand alone: what they point at exists.

Three checks over the product's Python comments and docstrings, README.md and docs/*.md
(CHANGELOG.md is history and is left out):

- every dotted module name (`paystream.consumers.ledger.plan`, `ops.health.CHECK_NAMES`)
  names a module of the distribution, or a name defined in one (found with `ast`, read
  from the source folders of pyproject's package-dir; nothing is imported);
- every repository path (`consumers/ledger/plan.py`, `docs/ledger.md`) exists, except
  under the runtime-state folders of RUNTIME_STATE, which the stack creates;
- no text names an internal tracker's `issue <number>` (tests too), nor a folder of one
  machine (a home, root, work or temporary folder: MACHINE_PATH).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from fnmatch import fnmatch
from functools import cache
from pathlib import Path

from tests.support.parts import ROOT, package_dirs

# Folders a path may point into although they are not in the repository, each because
# the running product creates it (all are in .gitignore, which the test checks).
RUNTIME_STATE: dict[str, str] = {
    ".stack/": "the dev stack's state (data, logs, secrets), made by `paystream stack up`",
    ".stack-test/": "the test stack's state, made by `paystream stack up` for the tests",
}


# File endings that make a slashed word a path rather than prose ("debit/credit").
PATH_ENDINGS = ("py", "md", "sql", "yml", "yaml", "toml", "json", "sh", "ini", "cfg",
                "conf", "txt", "env", "lock", "html", "csv", "properties")

DOTTED_TAIL = r"(?:\.[A-Za-z_]\w*)+(?![\w-]|\.\w)"
ISSUE_NUMBER = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)
MACHINE_PATH = re.compile(r"(?<![\w.~$}/-])/(?:work|root|home|tmp)/[^\s`'\")]*")


def import_roots() -> dict[str, Path]:
    """Import name -> source folder, longest name first."""
    dirs = {name: ROOT / folder for name, folder in package_dirs().items()}
    return dict(sorted(dirs.items(), key=lambda item: -len(item[0])))


def product_sources() -> list[Path]:
    return sorted({p for folder in import_roots().values() for p in folder.rglob("*.py")})


def doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def comments_and_docstrings(path: Path) -> str:
    """The prose of a Python file: its comments and docstrings, one per line."""
    source = path.read_text(encoding="utf-8")
    parts = [tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                parts.append(doc)
    return "\n".join(parts)


def texts() -> Iterator[tuple[str, str]]:
    """(where, prose) for every product Python file and every doc page."""
    for path in product_sources():
        yield str(path.relative_to(ROOT)), comments_and_docstrings(path)
    for page in doc_pages():
        yield str(page.relative_to(ROOT)), page.read_text(encoding="utf-8")


# --- dotted names ---------------------------------------------------------------------

def dotted_pattern() -> re.Pattern[str]:
    """`paystream.x.y`, or `x.y` where x is one of the sub-packages (`ops.health`), but
    not a file name (`api.md`) nor part of a path (`docs/api.md`)."""
    subpackages = sorted({name.split(".")[1] for name in package_dirs() if "." in name})
    ext = "|".join(PATH_ENDINGS)
    bare = rf"(?:{'|'.join(subpackages)})(?!\.(?:{ext})\b)"
    return re.compile(rf"(?<![\w./-])(?:paystream|{bare}){DOTTED_TAIL}")


def module_file(dotted: str) -> Path | None:
    for name, folder in import_roots().items():
        if dotted == name or dotted.startswith(name + "."):
            rest = dotted[len(name):].strip(".").split(".") if dotted != name else []
            base = folder.joinpath(*rest)
            for candidate in (base / "__init__.py", base.with_suffix(".py")):
                if rest == [] and candidate == base.with_suffix(".py"):
                    continue
                if candidate.is_file():
                    return candidate
            return None
    return None


@cache
def defined_names(path: Path) -> dict[str, ast.AST]:
    """Top-level names a module defines or imports (what `module.name` can reach)."""
    return names_in(ast.parse(path.read_text(encoding="utf-8")).body)


def names_in(body: list[ast.stmt]) -> dict[str, ast.AST]:
    found: dict[str, ast.AST] = {}
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[stmt.name] = stmt
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                for node in ast.walk(target):
                    if isinstance(node, ast.Name):
                        found[node.id] = stmt
        elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for alias in stmt.names:
                found[(alias.asname or alias.name).split(".")[0]] = stmt
        elif isinstance(stmt, (ast.If, ast.Try)):
            found.update(names_in(stmt.body))
    return found


def defines(module: Path, attributes: list[str]) -> bool:
    """Whether `module.a.b` names something the module defines."""
    names: dict[str, ast.AST] = defined_names(module)
    for attribute in attributes:
        node = names.get(attribute)
        if node is None:
            return False
        # Inside a class its body names the next part; past anything else (a value,
        # an import) the source cannot say, and the name so far is found.
        if not isinstance(node, ast.ClassDef):
            return True
        names = names_in(node.body)
    return True


@cache
def runtime_strings() -> tuple[frozenset[str], frozenset[str]]:
    """Dotted strings the product itself uses, and the dotted suffixes it appends to them
    (`NOTIFICATIONS_TOPIC + ".dlq"`): a topic name such as `paystream.payments` or a
    logger name in a text means that name, not a module."""
    pattern, suffix = dotted_pattern(), re.compile(DOTTED_TAIL)
    names, suffixes = set(), set()
    for path in product_sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if pattern.fullmatch(node.value):
                    names.add(node.value)
                elif suffix.fullmatch(node.value):
                    suffixes.add(node.value)
    return frozenset(names), frozenset(suffixes)


def runtime_name(dotted: str) -> bool:
    names, suffixes = runtime_strings()
    return dotted in names or any(
        dotted.endswith(end) and runtime_name(dotted[: -len(end)]) for end in suffixes)


def resolves(dotted: str) -> bool:
    if runtime_name(dotted):
        return True
    if not dotted.startswith("paystream"):
        dotted = "paystream." + dotted
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = module_file(".".join(parts[:cut]))
        if module is not None:
            return defines(module, parts[cut:])
    return False


def test_the_dotted_pattern_finds_names_not_prose() -> None:
    pattern = dotted_pattern()
    found = pattern.findall("see paystream.schema.outbox.publish. Then ops.health.CHECK_NAMES, "
                            "docs/api.md, api.md, paystream.egg-info and e.g. the ledger.")
    assert found == ["paystream.schema.outbox.publish", "ops.health.CHECK_NAMES"]


def test_resolution_tells_a_moved_module_from_a_present_one() -> None:
    assert resolves("paystream.finality.evidence.BlockRef")
    assert resolves("ops.health")
    assert not resolves("consumers.health")
    assert not resolves("paystream.finality.evidence.NoSuchName")
    assert resolves("paystream.payments")  # a topic the code names, not a module
    assert resolves("paystream.notifications.dlq")  # NOTIFICATIONS_TOPIC + ".dlq"
    assert not resolves("paystream.notifications.nodlq")


def test_every_dotted_name_resolves() -> None:
    pattern = dotted_pattern()
    stale = [f"{where}: {name}" for where, text in texts()
             for name in sorted(set(pattern.findall(text))) if not resolves(name)]
    assert stale == []


# --- repository paths -----------------------------------------------------------------

def path_pattern() -> re.Pattern[str]:
    """A slashed word that ends in a file ending, or starts at a top-level folder of the
    repository: `ops/holds.py`, `schema/migrations/`, `.stack/logs`; not `and/or`."""
    # Hidden and build folders vary from one working tree to the next; only the
    # runtime-state ones count, from RUNTIME_STATE.
    tops = [p.name for p in ROOT.iterdir()
            if p.is_dir() and not p.name.startswith(".") and not p.name.endswith(".egg-info")]
    tops += [prefix.rstrip("/") for prefix in RUNTIME_STATE]
    ext = "|".join(PATH_ENDINGS)
    segment = r"[\w.-]+"
    body = rf"(?:{segment}/)*[\w.-]*\w"
    return re.compile(
        rf"(?<![\w./~:@$}}-])"
        rf"(?:(?:{'|'.join(re.escape(t) for t in sorted(set(tops)))})/(?:{body})?"
        rf"|(?:{segment}/)+{segment}\.(?:{ext}))"
        rf"(?![\w/*{{<\[-]|\.\w)"
    )


def path_exists(path: str, where: Path) -> bool:
    """From the repository root, from the folder of the text that names it, or from a
    product folder (a module's comment may say `ledger/plan.py`); `paystream/ops/x.py`
    is the installed name of `ops/x.py`."""
    if any(path.startswith(prefix) for prefix in RUNTIME_STATE):
        return True
    clean = path.rstrip("/")
    bases = [ROOT, where.parent, *import_roots().values()]
    if any((base / clean).exists() for base in bases):
        return True
    head, _, tail = clean.partition("/")
    sub, _, rest = tail.partition("/")
    mapped = package_dirs().get(f"{head}.{sub}")
    if mapped is not None and (ROOT / mapped / rest).exists():
        return True
    # `schema/transfers.signed`: the function `signed` of schema/transfers.py.
    folder, _, last = clean.rpartition("/")
    stem, _, attributes = last.partition(".")
    module = ROOT / folder / f"{stem}.py"
    return bool(attributes) and module.is_file() and defines(module, attributes.split("."))


def test_the_path_pattern_finds_paths_not_prose() -> None:
    pattern = path_pattern()
    found = pattern.findall("the expiry scheduler (ops/holds.py), debit/credit, and/or, see "
                            "docs/ledger.md. https://example.org/a/b.md and tests/unit/test_*.py")
    assert found == ["ops/holds.py", "docs/ledger.md"]


def test_a_path_may_name_a_definition_of_its_module() -> None:
    assert path_exists("schema/transfers.signed", ROOT / "README.md")
    assert not path_exists("schema/transfers.unsigned", ROOT / "README.md")


def test_runtime_state_folders_are_not_content() -> None:
    ignored = (ROOT / ".gitignore").read_text(encoding="utf-8").split()
    for prefix in RUNTIME_STATE:
        assert any(fnmatch(prefix, rule) for rule in ignored), f"{prefix} is not in .gitignore"


def missing_paths() -> list[tuple[str, str]]:
    pattern = path_pattern()
    return [(where, path) for where, text in texts()
            for path in sorted(set(pattern.findall(text))) if not path_exists(path, ROOT / where)]


def test_every_path_exists() -> None:
    assert missing_paths() == []


# --- issue numbers and machine paths --------------------------------------------------

def test_no_issue_numbers() -> None:
    files = [*product_sources(), *sorted((ROOT / "tests").rglob("*.py")), *doc_pages()]
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in files
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if ISSUE_NUMBER.search(line)]
    assert found == []


def test_no_machine_paths() -> None:
    found = [f"{where}: {m}" for where, text in texts() for m in MACHINE_PATH.findall(text)]
    assert found == []


# --- bare file names ------------------------------------------------------------------

BARE_NAME = re.compile(r"(?<![\w./\\-])([A-Za-z_][\w-]*\.py)(?![\w/-]|\.\w)")


@cache
def repository_file_names() -> frozenset[str]:
    """The names of the repository's Python files (hidden and build folders left out)."""
    return frozenset(p.name for p in ROOT.rglob("*.py")
                     if not any(part.startswith(".") or part.endswith(".egg-info")
                                for part in p.relative_to(ROOT).parts))


def test_the_bare_name_pattern_finds_file_names_alone() -> None:
    found = BARE_NAME.findall("ledger_plan.py moved; ops/holds.py is a path; "
                              "conftest.py and setup.py.in, x.pyc")
    assert found == ["ledger_plan.py", "conftest.py"]


def test_every_bare_file_name_is_a_file_of_the_repository() -> None:
    """A file named without its folder (`plan.py`) still exists by that name somewhere:
    a comment left behind by a move (`ledger_plan.py`) fails here."""
    names = repository_file_names()
    stale = [f"{where}: {name}" for where, text in texts()
             for name in sorted(set(BARE_NAME.findall(text))) if name not in names]
    assert stale == []
