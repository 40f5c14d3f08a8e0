"""mkdocs hook: the Reference pages generated at build time, so that they cannot drift.

- reference/config/*.md: every command's own settings and every config group and option, from
  conf/'s YAML and comments (ragexp.config.docs, which also writes `--help`), with the class each
  option instantiates (`_target_`): its signature and docstring, read from the source with `ast`
  (nothing is imported: building the docs loads no model code);
- reference/cli.md: the `--help` of every command line;
- reference/python-api.md: the records of ragexp.types and the public names of `ragexp`.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from ragexp.config import docs as config_docs  # noqa: E402
from ragexp.config.cli_settings import SHARED  # noqa: E402

ARGPARSE_TOOLS = ["ragexp.compare", "ragexp.calibrate", "ragexp.plan", "ragexp.trec_eval", "ragexp.track", "ragexp.cache"]


def on_config(config):
    """The generated group pages join the navigation under Reference > Configuration."""
    for section in config["nav"]:
        for entries in section.values():
            if not isinstance(entries, list):
                continue
            for i, entry in enumerate(entries):
                if isinstance(entry, dict) and entry.get("Configuration") == "reference/config/index.md":
                    entries[i] = {"Configuration": ["reference/config/index.md", *[
                        {folder: f"reference/config/{page_name(folder)}.md"} for folder in config_docs.group_folders()]]}
    return config


def on_files(files, config):
    for uri, text in pages().items():
        files.append(File.generated(config, uri, content=text))
    return files


def pages() -> dict[str, str]:
    out = {"reference/config/index.md": config_index(), "reference/cli.md": cli_page(),
           "reference/python-api.md": python_api_page(), "contributing/layout.md": layout_page()}
    for folder in config_docs.group_folders():
        out[f"reference/config/{page_name(folder)}.md"] = group_page(folder)
    return out


def page_name(folder: str) -> str:
    return folder.replace("/", "-")


def plain(text: str) -> str:
    """Text from conf/ or a docstring as Markdown: `<model>` outside code spans is shown, not read as HTML."""
    parts = config_docs.unreferenced(text).split("`")
    return "`".join(part if i % 2 else part.replace("<", "&lt;") for i, part in enumerate(parts))


def cell(text: str) -> str:
    return plain(text).replace("|", "\\|").replace("\n", " ")


def settings_table(settings: list[config_docs.Setting], prefix: str = "") -> list[str]:
    rows = ["| setting | default | what it does |", "| --- | --- | --- |"]
    for s in settings:
        if s.key.endswith("_target_"):
            continue
        key = f"{prefix}.{s.key}" if prefix else s.key
        default = "*(a mapping)*" if s.default == "" else "*(text)*" if s.default == "(text)" else f"`{cell(s.default)}`"
        rows.append(f"| `{key}` | {default} | {cell(s.comment)} |")
    return rows if len(rows) > 2 else []


def config_index() -> str:
    lines = ["# Configuration", "",
             "Generated from `conf/` when the site is built (the same text as `--help`). Choose one option "
             "per group with `group=option`, override any setting with `key=value`; "
             "`python -m ragexp --help judge=llm` prints an option's settings in the terminal, "
             "`--cfg job` the composed config.", ""]
    for config, command in config_docs.COMMANDS.items():
        lines += [f"## `python -m {command}`", "", config_docs.help_header(config).replace("\n", " "), "",
                  "| group | default | options |", "| --- | --- | --- |"]
        for group in config_docs.groups_of(config):
            links = ", ".join(f"[{o.name}]({page_name(group.folder)}.md#{o.name})" for o in group.options)
            lines.append(f"| `{group.spelling}` | {f'`{group.default}`' if group.default else '—'} | {links} |")
        lines += ["", f"### Settings of `python -m {command}`", ""]
        lines += settings_table(config_docs.top_settings(config)) + [""]
    return "\n".join(lines)


def group_page(folder: str) -> str:
    users = [(config_docs.COMMANDS[c], g) for c in config_docs.COMMANDS for g in config_docs.groups_of(c)
             if g.folder == folder]
    spellings = ", ".join(f"`{g.spelling}=` ({command})" for command, g in users) or "internal"
    lines = [f"# {folder}", "", f"Chosen with {spellings}. Generated from `conf/{folder}/`.", ""]
    for option in config_docs.options_of(folder):
        prefix = next(((g.name.partition("@")[2] or g.name).replace("/", ".") for _, g in users if g.default), folder)
        lines += [f"## {option.name}", "", plain(option.about), ""]
        if option.target:
            lines += target_lines(option.target)
        lines += settings_table(option.settings, prefix) + [""]
    return "\n".join(lines)


def source_of(dotted: str) -> tuple[Path, str] | None:
    """The source file and class name of `pkg.module.Class`, if it is defined there."""
    module, _, name = dotted.rpartition(".")
    base = ROOT / Path(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.exists():
            return path, name
    return None


def class_node(dotted: str) -> ast.ClassDef | ast.FunctionDef | None:
    """The definition `dotted` names; for a name a package gathers from its modules (a stage's
    package: `ragexp.components.systems.SystemOutput`), the class of that name under the package."""
    found = source_of(dotted)
    if found:
        path, name = found
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
                return node
    package, _, name = dotted.rpartition(".")
    defined = find_class(name)
    return defined[1] if defined and defined[0].startswith(package) else None


def signature(node: ast.ClassDef | ast.FunctionDef) -> str:
    if isinstance(node, ast.FunctionDef):
        return f"({ast.unparse(node.args)})"
    init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    if init:
        args = ast.unparse(init.args)
        return f"({args.removeprefix('self, ').removeprefix('self')})"
    fields = [ast.unparse(n) for n in node.body if isinstance(n, ast.AnnAssign)]
    return f"({', '.join(fields)})"


def target_lines(target: str) -> list[str]:
    node = class_node(target)
    if node is None:
        return [f"Instantiates `{target}`.", ""]
    doc = ast.get_docstring(node) or ""
    return [f"Instantiates `{target}{signature(node)}`", "", *(["> " + plain(line) for line in doc.split("\n\n")[0].splitlines()]
                                                              if doc else []), ""]


def tool_help(module: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "100"}
    proc = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"python -m {module} --help failed: {proc.stderr[-2000:]}")
    return proc.stdout


def cli_page() -> str:
    lines = ["# Command lines", "",
             "Generated when the site is built: each command's own `--help`.", "",
             "## One spelling for the shared settings", "",
             "`python -m ragexp`, `ragexp.synth` and `ragexp.monitor` are Hydra applications: a group's option "
             "is `group=option`, any setting `key=value`, and `-m` sweeps. The tools that read what runs left "
             "behind — `ragexp.compare`, `ragexp.calibrate`, `ragexp.plan`, `ragexp.track`, `ragexp.cache`, `ragexp.trec_eval` — "
             "take paths, run ids and `--flags`, and also the Hydra spelling of the settings they share with the "
             "runs:", "",
             "| setting | Hydra commands | tools (either spelling) |", "| --- | --- | --- |",
             *[f"| {key} | `{key}=...` | `{key}=...` or `{flag} ...` |" for key, flag in SHARED.items()],
             "",
             "So `python -m ragexp.compare tracker.tracking_uri=http://mlflow-host:5000` works as `--tracking-uri` "
             "does. `MLFLOW_TRACKING_URI` in the environment sets the store for every command at once.", ""]
    for config, command in config_docs.COMMANDS.items():
        lines += [f"## `python -m {command}`", "", "```text", config_docs.command_help(config).rstrip(), "```", ""]
    with ThreadPoolExecutor(max_workers=2) as pool:
        helps = list(pool.map(tool_help, ARGPARSE_TOOLS))
    for module, text in zip(ARGPARSE_TOOLS, helps):
        lines += [f"## `python -m {module}`", "", "```text", text.rstrip(), "```", ""]
    return "\n".join(lines)


def python_api_page() -> str:
    lines = ["# Python API", "",
             "Generated from the source when the site is built: signatures and docstrings.", ""]
    init = ROOT / "ragexp" / "__init__.py"
    tree = ast.parse(init.read_text(encoding="utf-8"))
    public = public_names(tree)
    lines += ["## `import ragexp`", "", ast.get_docstring(tree) or "", ""]
    for name, origin in public:
        node = class_node(origin)
        if node is None:
            lines += [f"### `ragexp.{name}`", "", f"From `{origin}`.", ""]
            continue
        lines += [f"### `ragexp.{name}{signature(node)}`", "", plain(ast.get_docstring(node) or ""), ""]
    lines += ["## Writing a component", "",
              "The base classes a new option's `_target_` extends ([Contributing](../contributing/index.md)).", ""]
    for name in CONTRACTS:
        found = find_class(name)
        if found:
            module, node = found
            lines += [f"### `{module}.{name}`", "", plain(ast.get_docstring(node) or ""), ""]
            for method in node.body:
                if isinstance(method, ast.FunctionDef) and not method.name.startswith("_"):
                    doc = (ast.get_docstring(method) or "").split("\n\n")[0]
                    lines += [f"- `{method.name}({ast.unparse(method.args).removeprefix('self, ').removeprefix('self')})`"
                              + (f": {plain(' '.join(doc.split()))}" if doc else "")]
            lines.append("")
    types = ast.parse((ROOT / "ragexp" / "types.py").read_text(encoding="utf-8"))
    lines += ["## The records (`ragexp.types`)", "", ast.get_docstring(types) or "", ""]
    for node in types.body:
        if isinstance(node, ast.ClassDef):
            lines += [f"### `{node.name}`", "", "```python", f"{node.name}{signature(node)}", "```", "",
                      plain(ast.get_docstring(node) or ""), ""]
    return "\n".join(lines)


CONTRACTS = ["System", "Chunker", "Embedder", "Retriever", "Reranker", "Generator", "Loader", "Judge", "UsesLLM"]


def find_class(name: str) -> tuple[str, ast.ClassDef] | None:
    """(module, class) of the first class `name` defined under ragexp/, wherever the layout puts it."""
    for path in sorted((ROOT / "ragexp").rglob("*.py")):
        if f"class {name}" not in path.read_text(encoding="utf-8"):
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                return module, node
    return None


def public_names(tree: ast.Module) -> list[tuple[str, str]]:
    """(name, where it is defined) of each name in `ragexp/__init__.py`'s `__all__` (dunders aside):
    the module its import names it from, lazily or not (`from ragexp.api import evaluate as x`
    documents `ragexp.evaluate` from `ragexp.api.evaluate`)."""
    exported = next((ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                     and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)), [])
    origins = {alias.name: f"{node.module}.{alias.name}" for node in ast.walk(tree)
               if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ragexp")
               for alias in node.names}
    return sorted((name, origins.get(name, f"ragexp.{name}")) for name in exported if not name.startswith("__"))


def first_sentence(doc: str | None) -> str:
    return config_docs.first_sentence(doc or "")


def layout_page() -> str:
    """Each package and module of ragexp/ with the first sentence of its docstring."""
    lines = ["# Layout", "", "Generated from the modules' docstrings when the site is built.", "",
             "| module | what it holds |", "| --- | --- |"]
    package = ROOT / "ragexp"
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(ROOT)
        if "conf" in relative.parts:  # the packaged configs (a link to conf/), not modules
            continue
        name = ".".join(relative.with_suffix("").parts).removesuffix(".__init__")
        doc = first_sentence(ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))))
        lines.append(f"| `{name}` | {cell(doc)} |")
    return "\n".join(lines) + "\n"
