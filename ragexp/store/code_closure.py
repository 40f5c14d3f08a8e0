"""Which modules make a component's code (`module_closure`): its class's module and the modules it
uses that are ragexp's, of its own package, or outside the Python installation (`tracked`); a
package whose `__init__` gathers its modules is one unit (`unit_of`). Read from the imported
modules and their source files, never by running code."""
from __future__ import annotations

import ast
import importlib
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
    """`roots` and the tracked modules (`tracked`) their globals come from, transitively; a module
    a package gathers brings the package and all it gathers (`gathered`): they are one unit."""
    seen, todo = set(), [r for r in roots if r]
    while todo:
        name = todo.pop()
        if name in seen or name not in sys.modules:
            continue
        seen.add(name)
        unit = unit_of(name)
        todo.extend(m for m in (unit, *gathered(unit)) if m not in seen)
        for value in list(vars(sys.modules[name]).values()):
            if isinstance(value, type(sys)) and imported_by_chance(value.__name__, name):
                continue
            used = value.__name__ if isinstance(value, type(sys)) else getattr(value, "__module__", None)
            if used not in seen and tracked(used, own_package):
                todo.append(used)
    return seen


def module_source(name: str) -> bytes:
    path = getattr(sys.modules.get(name), "__file__", None)
    try:
        return Path(path).read_bytes() if path else b""
    except OSError:
        return b""


