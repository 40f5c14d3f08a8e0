"""Which modules make a component's code (`module_closure`): its class's module and the modules it
uses that are ragexp's, of its own package, or outside the Python installation (`tracked`), and
every module of the user's that a user's module imports, however it imports it (`imported_modules`:
read from its import statements); a package whose `__init__` gathers its modules is one unit
(`unit_of`). Read from the imported modules and their source files, never by running code."""
from __future__ import annotations

import ast
import importlib
import importlib.machinery
import sys
import threading
from functools import cache
from pathlib import Path
from typing import Any, TypeGuard

# CPython 3.11's parser is not safe when threads parse at once (a stage's first questions, judged on
# several threads, ask for its code's identity together): "AST constructor recursion depth mismatch"
PARSING = threading.Lock()


def gathered(package: str) -> tuple[str, ...]:
    """The modules of `package` its `__init__` imports from (`from .base import Chunker`), in the
    order it imports them; () for a module, or a package that gathers none."""
    return relative_imports(package)[0]


def relative_imports(package: str) -> tuple[tuple[str, ...], frozenset[str]]:
    """What a package's `__init__` imports from itself: the modules it gathers names from, in order,
    and the submodules it imports by name (`from . import helpers`)."""
    module = sys.modules.get(package)
    if not hasattr(module, "__path__"):
        return (), frozenset()
    try:
        with PARSING:
            tree = ast.parse(module_source(package))
    except (SyntaxError, ValueError):
        return (), frozenset()
    relative = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1]
    found = (n.module for n in tree.body if n in relative and n.module and "." not in n.module)
    named = frozenset(a.asname or a.name for n in relative if not n.module for a in n.names)
    return tuple(dict.fromkeys(f"{package}.{name}" for name in found)), named


def imported_by_chance(module: str, package: str) -> bool:
    """Whether `module` is an attribute of `package` only because something imported it (the
    import system sets each submodule on its package): not a module the package gathers or
    imports itself (`from . import helpers`). What else imported it is no part of the code."""
    if module.rpartition(".")[0] != package:
        return False
    gathers, named = relative_imports(package)
    return module not in gathers and module.rpartition(".")[2] not in named


def unit_of(name: str) -> str:
    """The unit module `name`'s code is read in: the package that gathers it (`gathered`), else itself."""
    package = name.rpartition(".")[0]
    return package if package and name in gathered(package) else name


def locate(target: str) -> Any:
    parts = target.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for attr in parts[split:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def ragexp_module(name: Any) -> TypeGuard[str]:
    return isinstance(name, str) and (name == "ragexp" or name.startswith("ragexp."))


@cache
def installed_folders() -> tuple[str, ...]:
    """The Python installation's folders (standard library, site-packages): code there is the
    environment's, pinned by its versions, not the user's."""
    import site
    import sysconfig

    folders = {sysconfig.get_path(p) for p in ("stdlib", "platstdlib", "purelib", "platlib")}
    folders.update(site.getsitepackages() + [site.getusersitepackages()])
    return tuple(str(Path(f).resolve()) + "/" for f in folders if f)


def tracked(name: Any, own_package: str = "ragexp") -> TypeGuard[str]:
    """Whether module `name` is part of a component's code: ragexp's, the component's own
    package's (`own_package`), or any module whose file is outside the Python installation
    (a user's helper module next to their component)."""
    if not isinstance(name, str):
        return False
    if ragexp_module(name) or name == own_package or name.startswith(own_package + "."):
        return True
    path = getattr(sys.modules.get(name), "__file__", None)
    return isinstance(path, str) and not str(Path(path).resolve()).startswith(installed_folders())


def module_closure(roots: set[str], own_package: str = "ragexp") -> set[str]:
    """`roots` and the tracked modules (`tracked`) their globals come from, transitively, and the
    user's modules (`users`) that a user's module imports (`imported_modules`); a module a package
    gathers brings the package and all it gathers (`gathered`): they are one unit. ragexp's own
    modules import nothing of the user's: their import statements are not read."""
    seen, todo = set(), [r for r in roots if r]
    while todo:
        name = todo.pop()
        if name in seen or (name not in sys.modules and not users(name)):
            continue
        seen.add(name)
        unit = unit_of(name)
        todo.extend(m for m in (unit, *gathered(unit)) if m not in seen)
        for value in list(vars(sys.modules[name]).values()) if name in sys.modules else ():
            if isinstance(value, type(sys)) and imported_by_chance(value.__name__, name):
                continue
            used = value.__name__ if isinstance(value, type(sys)) else getattr(value, "__module__", None)
            if used not in seen and tracked(used, own_package):
                todo.append(used)
        if users(name):
            todo.extend(m for m in imported_modules(name) if m not in seen and users(m))
    return seen


def users(name: str) -> bool:
    """Whether module `name` is the user's: not ragexp's, its file outside the Python installation
    (an installed package is the environment's: see `cache_token` for its version)."""
    path = module_file(name)
    return not ragexp_module(name) and path is not None and not str(Path(path).resolve()).startswith(installed_folders())


def imported_modules(name: str) -> set[str]:
    """The modules that module `name`'s import statements name, wherever they stand (in a function
    too): `import a.b` names a.b; `from a.b import c` names a.b and a.b.c when that is a module
    (`from a.b import CONSTANT` brings a.b, where the constant is set); a relative import is read
    against the module's package. Names that are not modules are left to the caller's filter."""
    try:
        with PARSING:
            tree = ast.parse(module_source(name))
    except (SyntaxError, ValueError):
        return set()
    package = name if is_package(name) else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (base := imported_from(node, package)):
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return found


def imported_from(node: ast.ImportFrom, package: str) -> str | None:
    """The module a `from ... import` statement imports from, its dots read against `package`."""
    if not node.level:
        return node.module
    parts = package.split(".") if package else []
    if node.level - 1 >= len(parts):
        return None  # beyond the top-level package: Python refuses it too
    base = ".".join(parts[: len(parts) - node.level + 1])
    return f"{base}.{node.module}" if node.module else base


def is_package(name: str) -> bool:
    module = sys.modules.get(name)
    if module is not None:
        return hasattr(module, "__path__")
    spec = unimported_spec(name)
    return spec is not None and spec.submodule_search_locations is not None


def module_file(name: str) -> str | None:
    """The source file of module `name`: the imported module's, else the one the import system
    would load (found on the path without importing it: a module its user imports in a function
    not yet run counts alike)."""
    module = sys.modules.get(name)
    if module is not None:
        path = getattr(module, "__file__", None)
        return path if isinstance(path, str) else None
    spec = unimported_spec(name)
    return spec.origin if spec is not None and spec.has_location and isinstance(spec.origin, str) else None


def unimported_spec(name: str) -> importlib.machinery.ModuleSpec | None:
    """Where module `name` would be found on the path (`sys.path`, its parent package's folders),
    looked up without importing anything."""
    parent = name.rpartition(".")[0]
    search = None
    if parent:
        module = sys.modules.get(parent)
        parent_spec = None if module is not None else unimported_spec(parent)
        search = getattr(module, "__path__", None) if module is not None else getattr(parent_spec, "submodule_search_locations", None)
        if not search:
            return None
    try:
        return importlib.machinery.PathFinder.find_spec(name, list(search) if search else None)
    except Exception:  # noqa: BLE001 - a finder's own failure (a namespace path whose parent is gone): not found
        return None


def module_source(name: str) -> bytes:
    path = module_file(name)
    try:
        return Path(path).read_bytes() if path else b""
    except OSError:
        return b""
