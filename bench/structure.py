"""The structure of ragexp's code, from the import graph tests/test_layers.py builds: its packages
with their lines of code, the imports between packages (how many module-to-module imports each
arrow stands for), the cycles (there should be none), and the lines of each module of the packages
named on the command line (default: judges, run, store).

    python bench/structure.py                 # the whole picture, as text
    python bench/structure.py judges store    # lines per module of those packages

Run it before and after a change of layout and compare the two outputs."""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_layers import EDGES, MODULES, UPWARD, cycles, package_of  # noqa: E402  # the graph the layering test checks


def lines(path: Path) -> int:
    """Lines of code: not blank, not a comment."""
    return sum(1 for line in path.read_text().splitlines() if line.strip() and not line.lstrip().startswith("#"))


def main(packages: list[str]) -> None:
    sizes: Counter[str] = Counter()
    modules: Counter[str] = Counter()
    for name, path in MODULES.items():
        sizes[package_of(name)] += lines(path)
        modules[package_of(name)] += 1
    arrows: Counter[tuple[str, str]] = Counter()
    for a, found in EDGES.items():
        for b, _ in found:
            if package_of(a) != package_of(b) and (a, b) not in UPWARD:  # the listed lazy doors, as the test
                arrows[package_of(a), package_of(b)] += 1
    print(f"packages ({len(sizes)}, {sum(modules.values())} modules, {sum(sizes.values())} lines of code):")
    for package in sorted(sizes):
        print(f"  {package:<28} {modules[package]:>3} modules {sizes[package]:>6} lines")
    print(f"arrows between packages ({len(arrows)}; the number: module imports behind it):")
    for (a, b), count in sorted(arrows.items()):
        print(f"  {a} -> {b} ({count})")
    graph: dict[str, set[str]] = {}
    for a, b in arrows:
        graph.setdefault(a, set()).add(b)
    module_graph = {a: {b for b, _ in found if b != a and (a, b) not in UPWARD} for a, found in EDGES.items()}
    print(f"cycles: packages {cycles(graph) or 'none'}; modules {cycles(module_graph) or 'none'}")
    for package in packages:
        prefix = f"ragexp.{package}"
        print(f"{prefix}:")
        for name, path in sorted(MODULES.items()):
            if name == prefix or name.startswith(prefix + "."):
                print(f"  {name:<40} {lines(path):>4}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["judges", "run", "store"])
