"""The layers, checked on the source (issue 22): ``shared`` never imports ``worker``, and the
pure modules (the contract and the engines) import no I/O, directly or through anything they
import; production never loads the testing part.

Read with ``ast``, not by importing: every import statement counts, a lazy one inside a
function too, since it runs the day that function does. "Through" follows the project's own
imports and the packages they pass through (importing ``worker.providers.limits`` runs
``worker/providers/__init__.py`` first, which builds the HTTP providers): what counts is
what importing the module really loads.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PROJECT = ("shared", "worker")

#: Modules that talk to a server, a socket, a process or a web framework, or stand for one.
IO_MODULES = frozenset(
    {
        "redis",
        "celery",
        "kombu",
        "billiard",
        "amqp",
        "httpx",
        "httpcore",
        "h11",
        "sqlalchemy",
        "alembic",
        "psycopg",
        "socket",
        "ssl",
        "selectors",
        "subprocess",
        "asyncio.subprocess",
        "multiprocessing",
        "http.client",
        "http.server",
        "urllib.request",
        "starlette",
        "uvicorn",
        "prometheus_client",
    }
)

#: The contract and the pure engines: data in, data out. Each was checked to hold; a module
#: that does not (its own code or its package does I/O) is not listed here but named in
#: ``NOT_PURE_YET`` with the reason, so that the list only grows.
PURE = (
    "shared/canonical.py",
    "shared/decoding.py",
    "shared/errors.py",
    "shared/escalation_entries.py",
    "shared/estimate.py",
    "shared/fingerprint.py",
    "shared/images.py",
    "shared/job_parsing.py",
    "shared/json_measure.py",
    "shared/jobs.py",
    "shared/keys.py",
    "shared/limits.py",
    "shared/outcomes.py",
    "shared/packs.py",
    "shared/prices.py",
    "shared/questions.py",
    "shared/rejection.py",
    "shared/replies.py",
    "shared/resolutions.py",
    "shared/scrub.py",
    "shared/secret_fragments.py",
    "shared/service_settings.py",
    "shared/setting_types.py",
    "shared/settings.py",
    "shared/strict_json.py",
    "shared/tokens.py",
    "shared/judgments/*.py",
    "shared/menus/*.py",
    "shared/verdicts.py",
)

#: Pure in intent, not (yet) in fact: what importing them loads, and why.
NOT_PURE_YET = {
    "worker/providers/failures.py": "maps httpx's exceptions to error codes (imports httpx)",
    "worker/runtimes/wire.py": "reads httpx responses (imports httpx)",
    "shared/audit.py": "writes the audit stream to Redis",
}


#: Production modules that may import the testing part (``worker.testing``: the faux, the
#: recorder, the test kit), each only inside a function, run when a setting or a command asks
#: for the fake: the one door (``worker.fakes``), the embedded ``decisions run`` and the
#: ``decisions faux serve`` verb.
TESTING_DOORS = frozenset({"worker/fakes.py", "worker/embedded.py", "worker/cli/serve.py"})


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_path(name: str) -> Path | None:
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@cache
def imported(path: Path) -> frozenset[str]:
    """Every module name an import statement of ``path`` names (relative ones resolved;
    ``from a import b`` names ``a`` and ``a.b``, which may be a module)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return frozenset(found)


def loaded_files(name: str) -> list[Path]:
    """The project files importing ``name`` runs: its packages' ``__init__`` and itself."""
    parts = name.split(".")
    files = []
    for i in range(1, len(parts) + 1):
        path = module_path(".".join(parts[:i]))
        if path is not None:
            files.append(path)
    return files


def io_reached(start: Path) -> list[str]:
    """``"chain -> io module"`` for each I/O module reachable from ``start``'s imports."""
    found: list[str] = []
    seen: set[Path] = set()
    # Importing the module runs its packages' __init__ first.
    stack = [(file, module_name(file)) for file in loaded_files(module_name(start))]
    while stack:
        path, chain = stack.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in sorted(imported(path)):
            if any(name == io or name.startswith(io + ".") for io in IO_MODULES):
                found.append(f"{chain} -> {name}")
            elif name.split(".")[0] in PROJECT:
                for file in loaded_files(name):
                    stack.append((file, f"{chain} -> {module_name(file)}"))
    return found


def pure_files() -> list[Path]:
    files: list[Path] = []
    for pattern in PURE:
        matched = sorted(ROOT.glob(pattern))
        assert matched, f"{pattern} matches no file: update the list"
        files += matched
    return files


@pytest.mark.parametrize("path", pure_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_a_pure_module_loads_no_io(path: Path) -> None:
    assert io_reached(path) == []


@pytest.mark.parametrize(
    "path", sorted((ROOT / "shared").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT))
)
def test_shared_never_imports_worker(path: Path) -> None:
    names = imported(path)
    assert not [n for n in names if n == "worker" or n.startswith("worker.")]


def top_level_imports(path: Path) -> frozenset[str]:
    """The module names ``path`` imports as it loads: every import statement outside a
    function (a class body, an ``if`` or a ``try`` runs at import too; ``if TYPE_CHECKING``
    does not)."""
    found: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
                visit(node.orelse)
                continue
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level:
                found.add(node.module or "")
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            for field in ("body", "orelse", "finalbody", "handlers"):
                visit([n for n in getattr(node, field, []) if isinstance(n, ast.stmt)])

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    return frozenset(found)


def production_files() -> list[Path]:
    files = sorted((ROOT / "shared").rglob("*.py")) + sorted((ROOT / "worker").rglob("*.py"))
    return [f for f in files if not f.is_relative_to(ROOT / "worker" / "testing")]


def _names_testing(names: frozenset[str]) -> list[str]:
    return sorted(n for n in names if n == "worker.testing" or n.startswith("worker.testing."))


@pytest.mark.parametrize(
    "path", production_files(), ids=lambda p: str(p.relative_to(ROOT))
)
def test_production_never_loads_the_testing_part(path: Path) -> None:
    # The faux, the recorder and the test kit stay out of a worker unless asked for: no
    # production module imports them as it loads, and only the named doors import them at all.
    assert _names_testing(top_level_imports(path)) == []
    if str(path.relative_to(ROOT)) not in TESTING_DOORS:
        assert _names_testing(imported(path)) == []


def test_the_testing_doors_are_real() -> None:
    # Each door exists and does open onto the testing part (inside a function).
    for door in TESTING_DOORS:
        assert _names_testing(imported(ROOT / door)), door


def test_the_impure_list_is_true() -> None:
    # A module that became pure moves to PURE; one that is gone leaves the list.
    for file in NOT_PURE_YET:
        path = ROOT / file
        assert path.is_file(), file
        assert io_reached(path), f"{file} is pure now: list it in PURE"


def test_the_checker_sees_a_package_init_and_a_lazy_import() -> None:
    # The check itself, on the project's own cases: a worker module whose package's __init__
    # pulls in httpx, and the ledger-outage report importing the metrics inside a function.
    assert any("httpx" in line for line in io_reached(ROOT / "worker/providers/limits.py"))
    outage = io_reached(ROOT / "worker/delivery/outage.py")
    families = "worker.observability.metrics.families -> prometheus_client"
    assert any(families in line for line in outage)
