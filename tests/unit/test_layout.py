"""The package's layers, as docs/architecture.md draws them: imports point only down, never in a circle,
and `import mpiray` stays cheap. Read from the source (ast), so a lazy import counts as much as any."""

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "mpiray"

# Bottom to top; a module's layer is the first whose prefix names it. A module may import its own
# layer and those below it.
LAYERS = (
    ("base", ("mpiray.errors", "mpiray.deadline", "mpiray.config", "mpiray.package")),
    ("logs", ("mpiray.logs",)),
    ("batch systems", ("mpiray.batch",)),
    ("the host", ("mpiray.host",)),
    ("the Ray node", ("mpiray.raynode",)),
    ("elastic", ("mpiray.elastic",)),
    ("the rank's life", ("mpiray.rank",)),
    ("rank 0's leaders", ("mpiray.leaders",)),
    ("front doors", ("mpiray.values", "mpiray.console", "mpiray.options", "mpiray.library", "mpiray.driver", "mpiray.cli",
                     "mpiray.__main__", "mpiray")),
)
# The only imports of mpiray modules inside a function, and why they cannot be at the top.
DEFERRED = {
    ("mpiray.rank.life", "mpiray.rank.mpi"): "importing mpi4py is MPI_Init: only once the options are valid",
    ("mpiray.library", "mpiray.rank.mpi"): "importing mpi4py is MPI_Init: only once the options are valid",
    ("mpiray", "mpiray.library"): "`import mpiray` stays cheap for helper processes and scripts",
    ("mpiray.cli", "mpiray.library"): "a script's run alone (`python -m mpiray my_script.py`): not every rank's start",
    ("mpiray", "mpiray.elastic.submit"): "`import mpiray` stays cheap: mpiray.jobs_client is a login node's",
    # What one kind of job needs, off the start of every rank of every job (--dry-run at 64 ranks: bench_preflight.py)
    ("mpiray.rank.head", "mpiray.elastic.autoscale"): "an elastic cluster's alone",
    ("mpiray.rank.head", "mpiray.elastic.registry"): "a running cluster's rank 0 alone (not its workers, not a dry run)",
    ("mpiray.rank.head", "mpiray.elastic.info"): "a running cluster's rank 0 alone: cluster_info.json",
    ("mpiray.rank.zero", "mpiray.elastic.info"): "a running cluster's rank 0 alone: its nodes for Prometheus",
    ("mpiray.rank.batchjob", "mpiray.batch.pbs"): "a PBS job's rank 0 alone",
    ("mpiray.rank.life", "mpiray.rank.joiner"): "a joining job's rank 0 alone",
    ("mpiray.cli", "mpiray.leaders.stay"): "a joining job's rank 0 alone",
    ("mpiray.leaders.command", "mpiray.logs.tee"): "rank 0's alone, once its driver runs",
}
MAX_TOP_MODULES = 12


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imports(name: str, path: Path, known: set[str]) -> list[tuple[str, bool]]:
    """(imported mpiray module, at the module's top level) for each import statement in the file."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            # `from mpiray.x import y`: y is a module of its own, or a name in mpiray.x.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        at_top = id(node) in top or _in_type_checking(tree, node)
        found += [(target, at_top) for target in targets if target in known and target != name]
    return found


def _in_type_checking(tree: ast.Module, node: ast.AST) -> bool:
    for block in tree.body:
        if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING":
            if any(node is child for child in ast.walk(block)):
                return True
    return False


def layer(name: str) -> int:
    for index, (_, prefixes) in enumerate(LAYERS):
        if any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes if prefix != "mpiray"):
            return index
    assert name == "mpiray", f"{name} is in no layer: add it to LAYERS (and to docs/architecture.md)"
    return len(LAYERS) - 1


def graph() -> dict[str, list[tuple[str, bool]]]:
    found = modules()
    return {name: imports(name, path, set(found)) for name, path in found.items()}


def test_every_import_points_down_or_within_its_layer():
    upward = [f"{name} ({LAYERS[layer(name)][0]}) imports {target} ({LAYERS[layer(target)][0]})"
              for name, targets in graph().items() for target, _ in targets if layer(target) > layer(name)]
    assert upward == []


def test_no_import_circle():
    edges = {name: {target for target, _ in targets} for name, targets in graph().items()}
    state: dict[str, str] = {}
    circles = []

    def visit(name: str, path: list[str]) -> None:
        state[name] = "open"
        for target in sorted(edges[name]):
            if state.get(target) == "open":
                circles.append(" -> ".join(path[path.index(target):] + [target]))
            elif target not in state:
                visit(target, path + [target])
        state[name] = "done"

    for name in sorted(edges):
        if name not in state:
            visit(name, [name])
    assert circles == []


def test_mpiray_modules_are_imported_at_the_top_but_for_the_named_exceptions():
    deferred = {(name, target) for name, targets in graph().items() for target, at_top in targets if not at_top}
    assert deferred == set(DEFERRED)


def test_the_package_root_holds_few_modules():
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top


def test_importing_mpiray_starts_neither_ray_nor_mpi_nor_the_launcher():
    code = "import sys, mpiray; print(sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'mpi4py', 'mpiray')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert eval(loaded.stdout) == ["mpiray", "mpiray.errors"]


def test_the_trainer_uses_mpirays_front_door_only():
    """train/ is a driver like any other: it imports `mpiray` (init) and mpiray.driver, nothing inside."""
    known = set(modules())
    used = sorted({(module_name(path), target) for path in (ROOT / "train").rglob("*.py")
                   for target, _ in imports(module_name(path), path, known)})
    assert {target for _, target in used} <= {"mpiray", "mpiray.driver"}, used
    assert ("train.cluster", "mpiray.driver") in used  # the test reads train/ at all


def test_no_function_of_the_package_is_over_60_lines():
    """A function a newcomer reads in one screen; a longer one is cut into named steps."""
    long = [f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in PACKAGE.rglob("*.py") for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60]
    assert long == []


def diagram_layers() -> list[tuple[str, set[str]]]:
    """docs/architecture.md's layer diagram, top to bottom: (its label, the modules it names, as mpiray.x.y)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("```mermaid\nflowchart TB\n", 1)[1].split("```", 1)[0]
    drawn = []
    for label in re.findall(r'^\s*\w+\["([^"]+)"\]', block, flags=re.MULTILINE):
        title, _, names = label.partition(": ")
        folder = title[:-1].replace("/", ".") + "." if title.endswith("/") else ""
        entries = {re.sub(r"\s*\(.*\)$", "", entry).strip().removesuffix(".py").rstrip("/")
                   for entry in names.split(", ")}
        drawn.append((title, {f"mpiray.{folder}{entry}" for entry in entries}))
    return drawn


def test_the_architecture_diagram_names_every_module_in_its_layer():
    """Each box of the page's diagram names the modules its layer holds, all of them, in LAYERS' order."""
    drawn = diagram_layers()
    assert len(drawn) == len(LAYERS)
    for (title, named), (layer_name, _) in zip(drawn, reversed(LAYERS)):
        real = {name for name, path in modules().items() if path.name not in ("__init__.py", "__main__.py")}
        held = {name for name in real if layer(name) == [n for n, _ in LAYERS].index(layer_name)}
        # a sub-package (logs/report/) is named once, for all its modules
        packages = {name for name in named if (PACKAGE / name.removeprefix("mpiray.").replace(".", "/")).is_dir()}
        held = packages | {name for name in held if not any(name.startswith(package + ".") for package in packages)}
        assert named == held, (title, sorted(held - named), sorted(named - held))


def test_the_architecture_page_lists_every_deferred_import():
    text = (ROOT / "docs" / "architecture.md").read_text()
    missing = [f"{name} -> {target}" for name, target in DEFERRED
               if f"`{name.removeprefix('mpiray.')}` → `{target.removeprefix('mpiray.')}`" not in text]
    assert missing == []


# Writes of another object's attributes that remain: Python's own, where a script is run as `python` runs it and
# init()'s exit watch sees how it ends (the builtin replaced only under `python SCRIPT` calling mpiray.init(); `python
# -m mpiray SCRIPT` replaces nothing), and Ray's own patch. A new one fails the test below.
STILL_WRITTEN = {
    "mpiray.leaders.script": {"builtins.SystemExit", "sys.excepthook", "sys.exit"},
    "mpiray.library": {"sys.argv"},  # run_script: the script's own argv, as `python my_script.py` sets it
    "mpiray.raynode.raycompat": {"utils.internal_kv_get_with_retry"},
    # Ray's --block loop's look at its processes, wrapped so that a dead GCS is started again before Ray sees it.
    "mpiray.raynode.gcsrestart": {"ray_node.Node.dead_processes"},
    "mpiray.raynode.starter": {"sys.argv"},
}


def outside_writes(path: Path) -> set[str]:
    """`x.attr = ...` (and +=, annotated, in tuples) where x is not self or cls: another object's attribute."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign):
            stack = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            stack = [node.target]
        else:
            continue
        while stack:
            target = stack.pop()
            if isinstance(target, (ast.Tuple, ast.List)):
                stack.extend(target.elts)
            elif isinstance(target, ast.Starred):
                stack.append(target.value)
            elif isinstance(target, ast.Attribute) and not (
                    isinstance(target.value, ast.Name) and target.value.id in ("self", "cls")):
                found.add(ast.unparse(target))
    return found


def test_no_module_writes_another_objects_attributes_beyond_the_known_ones():
    """A class keeps its own invariants: its attributes change through its methods (rank/ownnode.py writes none of
    RayNode's). The writes still made elsewhere are listed; a new one, or one gone from the code, fails."""
    writes = {name: found for name, path in modules().items() if (found := outside_writes(path))}
    assert writes == STILL_WRITTEN


MAX_POSITIONAL = 4


def test_a_function_takes_at_most_four_positional_arguments():
    """More than four values in a row are read by position and swapped unseen: the rest are keyword-only."""
    crowded = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                positional = [a.arg for a in node.args.posonlyargs + node.args.args if a.arg not in ("self", "cls")]
                if len(positional) > MAX_POSITIONAL:
                    crowded.append(f"{name}.{node.name}({', '.join(positional)})")
    assert crowded == []


def test_a_class_is_given_at_most_four_values_by_position():
    """As for a def (above), for the calls: Join(...) took 10 values in a row, Share 7 with two byte counts side by
    side. A class of the package is one defined in it."""
    classes = {node.name for path in modules().values() for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.ClassDef)}
    crowded = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and len(node.args) > MAX_POSITIONAL:
                called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
                if called in classes:
                    crowded.append(f"{name}:{node.lineno} {called}({len(node.args)} by position)")
    assert crowded == []


def test_no_two_modules_of_the_package_share_a_file_name():
    # One name, one module: `links` or `preflight` in two layers made every reader ask which one was meant.
    seen: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name not in ("__init__.py", "__main__.py"):
            seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


# The one module that replaces something of Python's, and why no other way exists (docs/library.md, its opening).
REPLACES_BUILTINS = {
    "mpiray.leaders.script": "plain `python SCRIPT` with init(): an exit handler cannot read the code the interpreter "
                             "exits with, so the script's SystemExit and uncaught exception are seen as they pass",
}


def test_no_module_replaces_a_builtin_or_a_hook_of_sys_but_the_listed_one():
    replacing = set()
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                for item in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if isinstance(item, ast.Attribute) and isinstance(item.value, ast.Name) and (
                            item.value.id == "builtins" or item.value.id == "sys" and item.attr != "argv"):
                        replacing.add(name)
    assert replacing == set(REPLACES_BUILTINS)
