"""The layers of ragexp's code, drawn from its imports: each module imports only from its own layer
or the layers below, and no two modules or packages import each other, directly or through others.
The only upward imports are the lazy ones listed in UPWARD, each with its reason: a new one fails
here, as does a cycle."""
import ast
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGE = ROOT / "ragexp"

# highest first; a module may import from its own layer and any layer after it
LAYERS = [
    ("apps", ["ragexp.__main__", "ragexp.api", "ragexp.cache", "ragexp.track", "ragexp.ui", "ragexp.validation", "ragexp.monitor",
              "ragexp.synth", "ragexp.pytest_plugin", "ragexp.scorers"]),
    ("sweep", ["ragexp.sweep"]),
    ("compare / calibrate: finished runs read and weighed", ["ragexp.compare", "ragexp.calibrate", "ragexp.plan"]),
    ("job", ["ragexp.run"]),
    ("config", ["ragexp.config"]),
    ("datasets / components / judges", ["ragexp.datasets", "ragexp.components", "ragexp.judges"]),
    ("llm", ["ragexp.llm"]),
    ("metrics / stats", ["ragexp.metrics", "ragexp.stats", "ragexp.trec_eval"]),
    ("store", ["ragexp.store"]),
    ("base", ["ragexp.base", "ragexp.errors", "ragexp.types", "ragexp"]),
]

# (importer, imported): the upward imports there are, each lazy (inside a function), with its reason
UPWARD = {
    ("ragexp", "ragexp.api"): "the public door: ragexp.evaluate and ragexp.Evaluation, imported when asked for",
    ("ragexp", "ragexp.components.systems"): "the public door: ragexp.SystemOutput, imported when asked for",
    ("ragexp.store.run_folder", "ragexp.metrics.relevance"): "the TREC files list the context metrics the run scored",
}


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = modules()


def owner(name: str) -> str | None:
    """The module of ragexp's that `name` (a module or a name in one) is."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(name: str, path: Path) -> list[tuple[str, bool]]:
    """The modules of ragexp's that module `name` imports, each with whether it is lazy (inside a
    function) or at the top (also under `if TYPE_CHECKING:`, which only type checkers run)."""
    tree = ast.parse(path.read_text())
    lazy = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in ast.walk(f)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            targets = [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            imported = owner(target) if target.startswith("ragexp") else None
            if imported and imported != name:
                found.append((imported, id(node) in lazy))
    return found


def layer_of(name: str) -> int:
    best = max((prefix for _, prefixes in LAYERS for prefix in prefixes if name == prefix or name.startswith(prefix + ".")),
               key=len)
    return next(i for i, (_, prefixes) in enumerate(LAYERS) if best in prefixes)


def package_of(name: str) -> str:
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and (PACKAGE / parts[1]).is_dir() else name


EDGES = {name: imports(name, path) for name, path in MODULES.items()}


def test_every_module_has_a_layer():
    assert [name for name in MODULES if not any(name == p or name.startswith(p + ".") for _, ps in LAYERS for p in ps)] == []


def test_imports_go_down_the_layers_but_the_listed_lazy_ones():
    upward = {(a, b): lazy for a, found in EDGES.items() for b, lazy in found if layer_of(b) < layer_of(a)}
    assert sorted(edge for edge in upward if edge not in UPWARD) == [], "an import up the layers: move the code down"
    assert sorted(edge for edge, lazy in upward.items() if not lazy) == [], "a listed upward import must be lazy"
    assert sorted(set(UPWARD) - set(upward)) == [], "a listed upward import that is gone: take it off the list"


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


@pytest.mark.parametrize("level", ["module", "package"])
def test_no_cycles(level):
    graph: dict[str, set[str]] = defaultdict(set)
    for a, found in EDGES.items():
        for b, _ in found:
            if (a, b) in UPWARD:
                continue  # a listed lazy import of the public door (ragexp/__init__.py)
            x, y = (a, b) if level == "module" else (package_of(a), package_of(b))
            if x != y:
                graph[x].add(y)
    assert cycles(graph) == []


# Judging has one home (ragexp.judges): outside it, code knows a judge only by the contract (`Judge`)
JUDGES = "ragexp.judges"
JUDGE_NAMES = ("judge", "rubric", "cheap", "expensive")  # what a variable holding a judge is called


def outside_judges() -> dict[str, ast.Module]:
    return {name: ast.parse(path.read_text()) for name, path in MODULES.items()
            if not (name == JUDGES or name.startswith(JUDGES + "."))}


def test_no_module_outside_judges_imports_a_concrete_judge_class():
    import importlib

    from ragexp.judges.contract import Judge

    found = []
    for name, tree in outside_judges().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(JUDGES):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    value = getattr(module, alias.name, None)
                    if isinstance(value, type) and issubclass(value, Judge) and value is not Judge:
                        found.append(f"{name}: {node.module}.{alias.name}")
    assert found == [], "ask the judge through the contract (ragexp.judges.contract.Judge) instead"


# What code outside ragexp.judges may import from it besides the contract and the one judging service:
# where judges are built (config.build puts a rubric beside a judge) and where a logged run's records are
# read (calibrate: a rubric's scales, the marker of a drawn question people have not labelled).
JUDGES_OPEN_TO = {"ragexp.judges.contract": None, "ragexp.judges.judging": None,
                  "ragexp.judges.rubric.beside": {"ragexp.config.build"},
                  "ragexp.judges.rubric.scales": {"ragexp.calibrate.source"},
                  "ragexp.judges.people": {"ragexp.calibrate.__main__"}}


def test_no_module_outside_judges_imports_from_a_concrete_judges_module():
    """Not only its class: a concrete judge's function called by the job (people's `write_wanted` was)
    is a special case in run/; what a judge needs around a run is a method of the contract."""
    found = []
    for name, tree in outside_judges().items():
        for node in ast.walk(tree):
            modules = [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for module in modules:
                if module.startswith(JUDGES + ".") and module not in JUDGES_OPEN_TO:
                    found.append(f"{name}:{node.lineno}: {module}")
                elif JUDGES_OPEN_TO.get(module) is not None and name not in JUDGES_OPEN_TO[module]:
                    found.append(f"{name}:{node.lineno}: {module}")
    assert found == [], "ask the judge through the contract (ragexp.judges.contract.Judge) or ragexp.judges.judging"


def test_no_module_outside_judges_probes_a_judge_with_getattr_or_isinstance():
    found = []
    for name, tree in outside_judges().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                    and node.args and any(word in ast.unparse(node.args[0]).lower() for word in JUDGE_NAMES):
                found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    assert found == [], "declare the attribute on ragexp.judges.contract.Judge, with its default"


def test_judges_export_no_class_predicate():
    """No `is_cascade(judge)`-like helper: what code outside needs of a judge is an attribute of the contract."""
    found = []
    for name, path in MODULES.items():
        if name == JUDGES or name.startswith(JUDGES + "."):
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.FunctionDef) and any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                                                             and n.func.id == "isinstance" for n in ast.walk(node)) \
                        and isinstance(node.body[-1], ast.Return) and isinstance(node.body[-1].value, ast.Call) \
                        and ast.unparse(node.body[-1].value).startswith("isinstance("):
                    found.append(f"{name}.{node.name}")
    assert found == []


def test_one_cached_judging_path():
    calls = [f"{name}:{node.lineno}" for name, path in MODULES.items() for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "cached"
             and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == "judgement"]
    assert len(calls) == 1 and calls[0].startswith("ragexp.judges.judging:"), calls
