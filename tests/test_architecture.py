"""The shape of the code, read from the source: imports run downward through the layers
with no circles, and generic code never asks which MPI family it drives (it asks the
backend). docs/architecture.md explains the layers."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src" / "colltune"

# lower layers never import higher ones; a module may import its own layer
LAYERS: list[tuple[str, ...]] = [
    ("colltune", "colltune.core", "colltune.errors", "colltune.host", "colltune.collectives",
     "colltune.outfile", "colltune.rules.safe", "colltune.rules.shell_lines"),
    ("colltune.kernel", "colltune.launchers", "colltune.slots", "colltune.rules",
     "colltune.osu.osu_output", "colltune.osu.imb_output", "colltune.store",
     "colltune.outputs.slurm_script"),
    ("colltune.options",),
    ("colltune.backends",),
    ("colltune.models", "colltune.tuner"),
    # the stages users run, by folder: reporting, verification, outputs, the application
    # loop, OSU and IMB import, and the commands over them
    ("colltune.reporting", "colltune.verification", "colltune.outputs.export",
     "colltune.osu.importing", "colltune.osu.osu_import", "colltune.osu.imb_import",
     "colltune.apploop", "colltune.cli"),
]

# the application loop's folders, in the order their imports run: a profile is what every
# other stage reads; tune online and the job-wide search stand beside each other; tune app
# and verify --app use all three (docs/architecture.md, "The application loop")
APPLOOP: list[tuple[str, ...]] = [
    ("colltune.apploop.profiling",),
    ("colltune.apploop.online", "colltune.apploop.jobwide"),
    ("colltune.apploop.app",),
]

# where a family may be named: its own modules
FAMILY_CODE = ("colltune.backends",)


def _modules() -> dict[str, Path]:
    out = {}
    for p in SRC.rglob("*.py"):
        parts = list(p.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _layer(mod: str) -> int:
    best, rank = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for pre in prefixes:
            if (mod == pre or mod.startswith(pre + ".")) and len(pre) > best:
                best, rank = len(pre), i
    assert rank >= 0, f"{mod} is in no layer: add it to LAYERS"
    return rank


def _imports(path: Path, mods: dict[str, Path], typing: bool = False) -> set[str]:
    """colltune modules `path` imports at run time (and, with `typing`, those it imports
    only for the type checker: a circle through them is still a circle to a reader)."""
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only and not typing:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and \
                node.module.startswith("colltune"):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                out.add(full if full in mods else node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("colltune")}
    return out


def _folder(mod: str) -> str:
    """The room a module lives in: its folder (colltune.tuner.run -> colltune.tuner, a
    family's colltune.backends.impi.files -> colltune.backends.impi). A loose module of the
    package root, or of a folder that holds packages (backends/base.py, registry.py beside
    the families), is its own room."""
    parts = mod.split(".")
    path = SRC.parent.joinpath(*parts)
    if path.is_dir() or len(parts) <= 2:
        return ".".join(parts[:2]) if len(parts) <= 2 else mod
    parent = path.parent
    holds_packages = any((d / "__init__.py").exists() for d in parent.iterdir() if d.is_dir())
    return mod if holds_packages else ".".join(parts[:-1])


def test_imports_run_downward_and_never_in_a_circle() -> None:
    mods = _modules()
    graph = {m: _imports(p, mods, typing=True) for m, p in mods.items()}
    upward = [f"{m} -> {t}" for m, ts in graph.items() for t in ts
              if t in mods and _layer(t) > _layer(m)]
    assert upward == []
    assert _circles(graph, set(mods)) == []
    # folders too: two folders importing each other are one knot, whatever the files
    folders: dict[str, set[str]] = {}
    for m, ts in graph.items():
        folders.setdefault(_folder(m), set()).update(
            _folder(t) for t in ts if t in mods and _folder(t) != _folder(m))
    assert _circles(folders, set(folders)) == []


def test_the_application_loop_is_folders_in_order() -> None:
    """apploop/ holds folders, one per stage, and none imports a later one; tune app reaches
    online tuning only through its one named interface (apploop/online/for_app)."""
    mods = _modules()
    loose = [m for m, p in mods.items() if m.startswith("colltune.apploop.")
             and p.parent == SRC / "apploop"]
    assert loose == [], "apploop/ holds folders: put these in the stage they serve"
    folders = {m.rsplit(".", 1)[0] for m in mods if m.count(".") == 3
               and m.startswith("colltune.apploop.")} | {
        m for m in mods if m.count(".") == 2 and m.startswith("colltune.apploop.")}
    rank = {f: i for i, group in enumerate(APPLOOP) for f in group}
    assert set(rank) == folders, "every folder of apploop/ has a place in APPLOOP"
    def stage(m: str) -> str:
        return ".".join(m.split(".")[:3])
    found = []
    for m, p in mods.items():
        if not m.startswith("colltune.apploop."):
            continue
        for t in _imports(p, mods, typing=True):
            if not t.startswith("colltune.apploop.") or stage(t) == stage(m):
                continue
            if rank[stage(t)] >= rank[stage(m)]:
                found.append(f"{m} -> {t}")
            elif stage(t) == "colltune.apploop.online" and t != "colltune.apploop.online.for_app":
                found.append(f"{m} -> {t} (through apploop/online/for_app)")
    assert found == []


def test_the_circle_check_sees_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, {"a", "b", "c", "d"}) \
        == [["a", "b", "c"]]


def _circles(graph: dict[str, set[str]], mods: set[str]) -> list[list[str]]:
    """The strongly connected groups of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in mods:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for m in sorted(mods):
        if m not in index:
            visit(m)
    return circles


def test_a_module_over_800_lines_says_why() -> None:
    """About 400 lines is advice (docs/architecture.md), not a rule to trim docstrings for:
    the size that hurts is inside functions, which ruff bounds (C901, PLR0913, PLR0915).
    Twice that is a module doing several things, unless it says why not."""
    long = [f"{m} ({n} lines)" for m, p in _modules().items()
            if (n := len(p.read_text().splitlines())) > 800
            and "Over 800 lines:" not in (ast.get_docstring(ast.parse(p.read_text())) or "")]
    assert long == [], "split these, or say in the module docstring why not"


def test_a_c_file_over_600_lines_says_why() -> None:
    """The C programs are split by concern as the Python is (the kernel's plan, sync,
    MPI_T, collectives' table and measuring are files of their own)."""
    long = [f"{p.name} ({n} lines)" for p in sorted((SRC / "kernel").rglob("*.[ch]"))
            if (n := len(p.read_text().splitlines())) > 600
            and "Over 600 lines:" not in p.read_text().split("*/", 1)[0]]
    assert long == [], "split these, or say in the opening comment why not"


def _family_names() -> tuple[list[str], list[str]]:
    """The registered families' names and the classes their modules define for an
    installation or a catalog, read from the registry (a new family is seen unlisted)."""
    import importlib
    import inspect

    from colltune.backends import registry
    from colltune.core.catalog import Catalog

    names = sorted(set(registry.BACKENDS) | set(registry.CHOICES) | {"han"})
    classes = set()
    for b in registry.BACKENDS.values():
        package = type(b).__module__.rsplit(".", 1)[0]  # the family's folder
        for mod in sorted(m for m in _modules() if m.startswith(package + ".")):
            m = importlib.import_module(mod)
            fields = lambda c: getattr(c, "__dataclass_fields__", {})  # noqa: E731
            classes |= {n for n, c in inspect.getmembers(m, inspect.isclass)
                        if c.__module__ == mod and (issubclass(c, Catalog)
                                                    or "mpicc" in fields(c))}
    return names, sorted(classes)


_NAMES, _CLASSES = _family_names()
_FORBIDDEN = [
    re.compile(rf"isinstance\([^)]*\b({'|'.join(_CLASSES)})\b"),
    re.compile(r"isinstance\([^)]*\b\w+_backend\.\w+"),
    re.compile(r"\bbackend\s*[!=]=\s*['\"]"),
    re.compile(r"\.backend\s+(not\s+)?in\s"),
    re.compile(rf"[!=]=\s*['\"]({'|'.join(_NAMES)})['\"]"),
    re.compile(rf"\.get\(['\"]({'|'.join(_NAMES)})['\"]\)"),  # summary["mpich"] branches
]


def test_generic_code_reaches_a_family_only_through_the_registry() -> None:
    """Outside backends/, code imports the Backend interface and the registry, never a
    family's own module (a `tune` command importing Open MPI's would be Open MPI only)."""
    mods = _modules()
    face = {"colltune.backends", "colltune.backends.base", "colltune.backends.registry",
            "colltune.backends.files", "colltune.backends.runtime",  # the interface
            "colltune.backends.common.tools"}  # --keep-env, which no family owns
    found = [f"{m} imports {t}" for m, p in mods.items() if not m.startswith(FAMILY_CODE)
             for t in sorted(_imports(p, mods, typing=True))
             if t.startswith("colltune.backends") and t not in face]
    assert found == [], "go through backends/registry.py and backends/base.py"


def test_the_family_list_comes_from_the_registry() -> None:
    assert {"OpenMPI", "MPICH", "MVAPICH2", "SMPI", "MV2Catalog", "MPICHCatalog",
            "HanCatalog"} <= set(_CLASSES)
    assert {"openmpi", "mpich", "mvapich2", "smpi", "han"} <= set(_NAMES)


def test_generic_code_never_branches_on_the_mpi_family() -> None:
    found = []
    for mod, path in _modules().items():
        if mod.startswith(FAMILY_CODE):
            continue
        for no, line in enumerate(path.read_text().splitlines(), 1):
            if any(p.search(line) for p in _FORBIDDEN):
                found.append(f"{path.relative_to(SRC)}:{no}: {line.strip()}")
    assert found == [], "ask the backend (backends/base.py) instead:\n" + "\n".join(found)


@pytest.mark.parametrize("line", [
    "if isinstance(mpi, SMPI):", "elif isinstance(catalog, mv2_backend.MV2Catalog):",
    'if opts.backend == "smpi":', "exact = isinstance(mpi, smpi_backend.SMPI)",
    'han = res.summary.get("han")',
])
def test_the_family_check_sees_the_branches_it_forbids(line: str) -> None:
    assert any(p.search(line) for p in _FORBIDDEN)


def test_every_backend_is_registered_and_implements_the_interface() -> None:
    from colltune.backends import registry
    from colltune.backends.base import Backend

    for name in registry.CHOICES:
        b = registry.named(name)
        assert isinstance(b, Backend) and b.name == name and b.formats
    assert registry.named("openmpi", han=True).name == "han"
    assert registry.for_key("mpich-5.0.2@/x").name == "mpich"  # type: ignore[union-attr]
    assert registry.for_key("openmpi-5.0.11@/x+han").name == "han"  # type: ignore[union-attr]
    assert registry.for_key("openmpi-4.1.4@/usr").name == "openmpi"  # type: ignore[union-attr]
    assert registry.for_key("mvapich2-2.3.7@/x").name == "mvapich2"  # type: ignore[union-attr]


# the Backend's core, on purpose small: a method added here is one every family must think
# about; what only some families do belongs in a capability (files, runtime, apps, bands,
# selects), how its measurements behave in Traits
CORE = {"launch", "forcing_env", "open", "place", "rule_size", "waiting", "mpit_env",
        "mpit_vars", "plan_catalog", "catalog_for", "owns", "with_files", "with_runtime",
        "with_apps"}


def test_the_backend_core_stays_small() -> None:
    import inspect

    from colltune.backends.apps import AppSupport
    from colltune.backends.banded import BandSupport
    from colltune.backends.base import Backend
    from colltune.backends.files import FileFormats
    from colltune.backends.runtime import RuntimeSupport

    methods = {n for n, f in inspect.getmembers(Backend, inspect.isfunction)
               if not n.startswith("_")}
    assert methods == CORE, "a new core method? say why every family needs it, or make it "\
        "part of a capability"
    assert len(methods) <= 18
    # the capabilities hold what the core no longer does
    assert {"claims", "check", "explain", "verify_target", "installable", "decided_rules",
            "section_text", "rules_arms"} <= set(vars(FileFormats))
    assert {"knobs", "environ", "readback", "write", "read"} <= set(vars(RuntimeSupport))
    assert {"find", "launcher_env", "readback", "chooser"} <= set(vars(AppSupport))
    assert {"env"} <= set(vars(BandSupport))
    assert not [n for n in methods if n.startswith("runtime_")]


def test_the_architecture_doc_names_every_module() -> None:
    doc = (SRC.parent.parent / "docs" / "architecture.md").read_text()
    def named(m: str, p: Path) -> bool:
        # a family's module by its folder (`impi/files`): `files` alone says nothing
        parts = m.split(".")
        word = "/".join(parts[-2:]) if parts[:2] == ["colltune", "backends"] and \
            len(parts) == 4 else p.stem
        return re.search(rf"\b{re.escape(word)}\b", doc) is not None

    missing = [m for m, p in _modules().items() if p.name != "__init__.py"
               and p.stem not in ("__main__",) and not m.startswith("colltune.cli")
               and not named(m, p)]
    assert missing == [], "say in docs/architecture.md what these are"


def test_the_command_line_starts_without_the_numeric_stack() -> None:
    """Every `tune` command starts by importing the CLI; numpy, scipy, matplotlib and
    skopt are loaded only by what uses them (they would double a command's start-up, and
    the suite runs hundreds of commands)."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", "import sys, colltune.cli; print(' '.join("
                        "m for m in ('numpy', 'scipy', 'matplotlib', 'skopt', 'jsonschema') "
                        "if m in sys.modules))"], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "", r.stdout


# a path into the package, as docstrings, comments and docs name one (`impi/install.py`)
_PATH = re.compile(r"(?<![\w/.-])((?:backends|kernel|tuner|rules|core|apploop|store|models|osu|"
                   r"outputs|reporting|verification|cli)/[\w/]+\.(?:py|c|h|gdb))\b")


def test_every_file_the_code_and_docs_name_exists() -> None:
    """Issue 74: a move left docstrings and pages naming the old flat modules. Every path
    into the package a source file or a page names exists (`X` stands for any family)."""
    repo = SRC.parent.parent
    texts = [*SRC.rglob("*.py"), *SRC.rglob("*.c"), *SRC.rglob("*.h"),
             *(repo / "docs").glob("*.md"), repo / "README.md"]
    gone = sorted({(str(f.relative_to(repo)), m.group(1)) for f in texts
                   for m in _PATH.finditer(f.read_text())
                   if "/X/" not in m.group(1) and not (SRC / m.group(1)).exists()})
    assert gone == [], "these name files that do not exist"


def test_the_map_names_files_that_exist() -> None:
    """docs/architecture.md's map (each family's code, formats, page, tests) stays true."""
    repo = SRC.parent.parent
    doc = (repo / "docs" / "architecture.md").read_text()
    table = doc.split("## The map", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"`((?:backends|rules|docs|tests)/[\w/.]*)`", table)
    assert len(named) > 30
    missing = [n for n in named if "/X/" not in n and not (
        (SRC / n) if n.startswith(("backends", "rules")) else repo / n).exists()]
    assert missing == []
    # every family folder and every test file named after one is on the map
    for folder in (SRC / "backends").iterdir():
        if folder.is_dir() and (folder / "backend.py").exists():
            assert f"`backends/{folder.name}/`" in table, folder.name


def test_a_function_over_the_limits_says_why_on_its_def_line() -> None:
    """pyproject.toml: a function over ruff's limits says why where it is marked, so the
    reason is read where the limit is lifted (and stays with it when the code moves)."""
    unexplained = [f"{p.relative_to(SRC)}:{i}" for p in SRC.rglob("*.py")
                   for i, line in enumerate(p.read_text().splitlines(), 1)
                   if re.search(r"noqa: (C901|PLR09\d\d)", line)
                   and not re.search(r"noqa: [\w, ]+ \(\S.*\)\s*$", line)]
    assert unexplained == []


def test_the_kernels_c_files_call_one_way(tmp_path: Path) -> None:
    """Issue 87: each C program's files call one another one way (its shared state owned by
    one file, stateless helpers in a header), as the Python modules import: read from the
    objects' own symbols (nm), each program compiled file by file with Debian's Open MPI."""
    import shutil
    import subprocess

    from colltune.kernel.build import SOURCES

    mpicc = shutil.which("mpicc.openmpi")
    assert mpicc, "Debian's Open MPI (mpicc.openmpi): .ci/run installs it"
    for program, files in SOURCES.items():
        defs: dict[str, set[str]] = {}
        uses: dict[str, set[str]] = {}
        for f in (f for f in files if f.endswith(".c")):
            obj = tmp_path / f"{program}-{Path(f).stem}.o"
            subprocess.run([mpicc, "-std=c99", "-fPIC", "-c", str(SRC / "kernel" / f), "-o",
                            str(obj)], check=True)
            rows = [ln.split() for ln in subprocess.run(
                ["nm", str(obj)], capture_output=True, text=True, check=True).stdout.splitlines()]
            defs[f] = {r[2] for r in rows if len(r) == 3 and r[1] in "TDBRC"}
            uses[f] = {r[1] for r in rows if len(r) == 2 and r[0] == "U"}
        graph = {f: {g for g in defs if g != f and uses[f] & defs[g]} for f in defs}
        assert _circles(graph, set(graph)) == [], program


def test_a_command_function_is_short() -> None:
    """Issue 87: a command converts its options once and hands them to stages; its body
    (after the signature that declares its options) stays within about 60 lines."""
    long = []
    for p in sorted((SRC / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.FunctionDef) and (node.name == "command" or any(
                    "command" in ast.unparse(d) for d in node.decorator_list)):
                lines = (node.end_lineno or 0) - node.body[0].lineno + 1
                if lines > 60:
                    long.append(f"cli/{p.name}:{node.name} ({lines} lines)")
    assert long == [], "hand the options to stages of their own"
