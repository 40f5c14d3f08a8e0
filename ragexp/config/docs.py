"""What `conf/` says about itself: the groups of a command, their options, every setting with its
default and the comment beside it. Read from the YAML text (the comments are the documentation),
with no Hydra and no model code: `--help` of `python -m ragexp`, `.synth` and `.monitor` prints
it, and the documentation site's Reference pages are generated from it, so neither can drift."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ragexp.config import CONF

COMMANDS = {"config": "ragexp", "synth": "ragexp.synth", "monitor": "ragexp.monitor"}

KEY = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z_][\w.@/-]*|\"[^\"]*\"|'[^']*'):(?:\s+(?P<rest>.*))?$")


@dataclass
class Setting:
    key: str          # dotted, from the top of the file: endpoint.model
    default: str      # the YAML text of the value ('' for a mapping; '(text)' for a block of text)
    comment: str      # the comment on its line, or the comment lines just above it
    parts: tuple[str, ...] = ()   # the key's path (a key may hold a dot: llm.prices.gpt-4.1)


@dataclass
class Option:
    group: str        # chunker, synth/generator
    name: str         # recursive
    path: Path
    about: str        # the comment lines at the top of the file, joined (its example commands apart)
    settings: list[Setting] = field(default_factory=list)
    target: str = ""  # its _target_ class, if any
    examples: list[str] = field(default_factory=list)  # the header's indented lines: example commands

    @property
    def summary(self) -> str:
        """The first sentence of `about`."""
        return first_sentence(self.about)


def first_sentence(text: str) -> str:
    """The first whole sentence of `text` ("e.g.", "0.5" and the like do not end one)."""
    from ragexp.base.text import split_sentences

    paragraph = re.split(r"\n\s*\n|\n\s*- ", text.strip(), maxsplit=1)[0]  # before a blank line or a list
    sentences = split_sentences(" ".join(paragraph.split()))
    return sentences[0] if sentences else ""


@dataclass
class Group:
    name: str                 # as chosen on the command line: chunker, scoring_embedder via embedder@...
    folder: str               # the folder under conf/: embedder for embedder@scoring_embedder
    default: str | None       # the option chosen when none is given; None for `+group=option` groups
    options: list[Option]

    @property
    def spelling(self) -> str:
        # hydra/... (hydra/sweeper=racing) replaces Hydra's own choice: chosen without +
        return f"+{self.name}" if self.default is None and not self.name.startswith("hydra/") else self.name


def split_comment(text: str) -> tuple[str, str]:
    """`value  # comment` -> (value, comment); a # inside quotes or `${...}` is part of the value."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i].rstrip(), text[i + 1:].strip()
    return text.rstrip(), ""


def read_option(path: Path, group: str) -> Option:
    lines = path.read_text(encoding="utf-8").splitlines()
    about: list[str] = []
    examples: list[str] = []
    for line in lines:
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if text.startswith("@package"):
            continue
        if (about or examples) and not text:
            break
        if line.lstrip("#").startswith("   "):  # an indented line: an example command, kept whole
            examples.append(text)
        else:
            about.append(text)
    option = Option(group=group, name=path.stem, path=path, about=unreferenced(" ".join(t for t in about if t)),
                    examples=examples)
    option.settings = read_settings(lines)
    option.target = next((s.default for s in option.settings if s.key == "_target_"), "")
    return option


def unreferenced(text: str) -> str:
    """A comment without its pointers into the README or the specification (`(see README, "X")`,
    `(specification 6.2)`): the documentation site is organised otherwise."""
    return re.sub(r"\s*\((?:see )?(?:README|the specification|specification)\b[^)]*\)", "", text)


def read_settings(lines: list[str]) -> list[Setting]:
    """Every key of a YAML file with its dotted name, its value's text and its comment; the
    `defaults` list, `hydra` block and the text of block scalars are left out."""
    settings: list[Setting] = []
    parents: list[tuple[int, str]] = []   # (indent, key) of the open mappings
    pending: list[str] = []               # comment lines above the next key
    skip_below: int | None = None         # inside a block scalar, a list, or a left-out block
    for line in lines:
        if not line.strip():
            pending = [] if skip_below is None else pending
            continue
        indent = len(line) - len(line.lstrip())
        if skip_below is not None:
            if indent > skip_below or line.lstrip().startswith("- ") and indent == skip_below:
                continue
            skip_below = None
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("#").strip())
            continue
        match = KEY.match(line)
        if not match:
            pending = []
            continue
        key = match["key"].strip("\"'")
        value, comment = split_comment(match["rest"] or "")
        while parents and parents[-1][0] >= indent:
            parents.pop()
        parts = (*[p for _, p in parents], key)
        dotted = ".".join(parts)
        comment = unreferenced(comment or " ".join(pending if indent == 0 and not parents else pending[-1:]))
        pending = []
        if not parents and key in ("defaults", "hydra"):
            skip_below = indent
            continue
        if value in ("|", "|-", ">", ">-", "|+"):
            settings.append(Setting(dotted, "(text)", comment, parts))
            skip_below = indent
        elif value == "":
            settings.append(Setting(dotted, "", comment, parts))
            parents.append((indent, key))
        else:
            settings.append(Setting(dotted, value, comment, parts))
    return settings


def read_defaults(config: str) -> list[tuple[str, str | None]]:
    """The (group spelling, default option) pairs of a top-level config's defaults list, each
    followed by the groups its default option composes at the top level (`system: pipeline` brings
    `- /chunker: recursive`, ...: they exist only under that option); an interpolated choice
    (monitor/tracker@tracker: ${tracker}) is an internal detail, left out."""
    pairs: list[tuple[str, str | None]] = []
    for spelling, default in defaults_in(CONF / f"{config}.yaml"):
        pairs.append((spelling, default))
        option = CONF / spelling.partition("@")[0] / f"{default}.yaml"
        if option.is_file():
            pairs += [(top_level(nested), choice) for nested, choice in defaults_in(option) if nested.startswith("/")]
    return pairs


def top_level(spelling: str) -> str:
    """`/chunker@_global_.chunker` (a group composed at the top by an option) as `chunker`."""
    name, _, package = spelling[1:].partition("@")
    package = package.removeprefix("_global_.")
    return name if package in ("", name) else f"{name}@{package}"


def defaults_in(path: Path) -> list[tuple[str, str]]:
    """The (group spelling, option) entries of a YAML file's defaults list (overrides left out)."""
    pairs = []
    inside = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("defaults:"):
            inside = True
            continue
        if inside and line and not line.startswith((" ", "#")):
            break
        entry = re.match(r"\s*-\s*(?:optional\s+)?([\w/@.-]+)\s*:\s*\"?([^\s\"#]+)", line) if inside else None
        if entry and not entry[1].startswith("override") and "${" not in entry[2]:
            pairs.append((entry[1], entry[2]))
    return pairs


def overridden(path: Path) -> set[str]:
    """The groups an option's defaults list overrides (`- override /system@_global_.system: x`)."""
    text = path.read_text(encoding="utf-8")
    return {m.partition("@")[0] for m in re.findall(r"^\s*-\s*override\s+/([\w/@.-]+)\s*:", text, re.M)}


def nested_defaults(path: Path) -> list[tuple[str, str, str]]:
    """(group folder, package, option) of each group an option composes inside itself
    (`- /endpoint@endpoint: openai`, or `- override /endpoint@endpoint: local` over its base's)."""
    found: dict[tuple[str, str], str] = {}
    for folder, package, option in re.findall(r"^\s*-\s*(?:override\s+)?/([\w/.-]+)@([\w.]+)\s*:\s*([\w.-]+)",
                                             path.read_text(encoding="utf-8"), re.M):
        if not package.startswith("_global_"):
            found[(folder, package)] = option
    return [(folder, package, option) for (folder, package), option in found.items()]


def nested_folders() -> set[str]:
    """The groups that options compose inside themselves (endpoint: a judge's, a generator's)."""
    return {folder for p in CONF.glob("**/*.yaml") for folder, _, _ in nested_defaults(p)}


def group_folders() -> list[str]:
    """Every folder of conf/ that holds options (YAML files), e.g. chunker, synth/generator."""
    return sorted({str(p.parent.relative_to(CONF)) for p in CONF.glob("**/*.yaml") if p.parent != CONF})


def options_of(folder: str) -> list[Option]:
    return [read_option(p, folder) for p in sorted((CONF / folder).glob("*.yaml"))]


def groups_of(config: str) -> list[Group]:
    """The groups a command uses: its defaults list, then (for `python -m ragexp`) the groups no
    command chooses by default, added with `+group=option` (experiment, search, cluster)."""
    groups = []
    defaults = read_defaults(config)
    composed = {spelling.partition("@")[0] for spelling, _ in defaults} | nested_folders()
    for spelling, default in defaults:
        folder, _, package = spelling.partition("@")
        # an option that overrides a group this command does not have cannot be used with it
        # (dataset=outputs chooses system=recorded: not an option of python -m ragexp.synth)
        usable = [o for o in options_of(folder) if overridden(o.path) <= composed]
        groups.append(Group(name=spelling, folder=folder, default=default, options=usable))
    if config == "config":
        chosen = {spelling.partition("@")[0] for c in COMMANDS for spelling, _ in read_defaults(c)}
        namespaced = {c + "/" for c in COMMANDS}
        inside = nested_folders()
        for folder in group_folders():
            if folder not in chosen | inside and not any(folder.startswith(n) for n in namespaced):
                groups.append(Group(name=folder, folder=folder, default=None, options=options_of(folder)))
    return groups


def top_settings(config: str) -> list[Setting]:
    """The settings of the config file itself (run_name, objective, synth.size, monitor.input, ...)."""
    return read_settings((CONF / f"{config}.yaml").read_text(encoding="utf-8").splitlines())


def help_header(config: str) -> str:
    """The `hydra.help.header` text of a command's config file."""
    text = (CONF / f"{config}.yaml").read_text(encoding="utf-8")
    match = re.search(r"^\s+header: \|-\n((?:\s{6}.*\n)+)", text, re.M)
    return "\n".join(line.strip() for line in match[1].splitlines()) if match else COMMANDS[config]


def wrap(text: str, width: int, indent: str) -> str:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    lines.append(line)
    return ("\n" + indent).join(lines)


def command_help(config: str, chosen: list[str] | None = None) -> str:
    """The `--help` text of a command (conf/<config>.yaml): its groups, each option with its
    first sentence, its own settings with their comments; with `group=option` arguments, also the
    settings of those options."""
    out = [help_header(config), ""]
    groups = groups_of(config)
    out.append("Groups: choose one option per group with group=option (* = the default).")
    for group in groups:
        out.append(f"  {group.spelling}=")
        for option in group.options:
            mark = "*" if option.name == group.default else " "
            line = f"   {mark} {option.name:<16} "
            out.append(line + wrap(option.summary, 100 - len(line), " " * len(line)))
    out += ["", "Settings: override any value with key=value (group settings too: chunker.chunk_size=256)."]
    out += setting_lines(top_settings(config))
    if config == "config":  # the words a sweep's leaderboard and a regression check decide with
        out += ["", "Verdicts (a sweep's leaderboard, the gate's regression check):", *verdict_lines()]
    out += ["", f"Run:       python -m {COMMANDS[config]} [group=option ...] [key=value ...]",
            f"Sweep:     python -m {COMMANDS[config]} -m chunker=recursive,semantic   (one run per combination)",
            f"An option's settings: python -m {COMMANDS[config]} --help judge=llm   "
            "The composed config: --cfg job   Hydra's flags: --hydra-help"]
    by_name = {g.name: g for g in groups} | {g.name.partition("@")[2]: g for g in groups if "@" in g.name}
    for arg in chosen or []:  # last, so that the end of the output (`| tail`) is the options asked for
        name, _, value = arg.lstrip("+").partition("=")
        if name in by_name:
            out += option_lines(by_name[name], value)
    return "\n".join(out) + "\n"


def verdict_lines(width: int = 100) -> list[str]:
    """The verdicts (ragexp.base.verdicts) as `--help` prints them: the word, then its meaning."""
    from ragexp.base.verdicts import VERDICTS

    return [f"  {word:<27}" + wrap(meaning, width - 30, " " * 30) for word, meaning in VERDICTS.items()]


def option_lines(group: Group, name: str) -> list[str]:
    """An option's description and settings, spelled as on the command line (judge.endpoint.model)."""
    for option in group.options:
        if option.name == name:
            prefix = ((group.name.partition("@")[2] or group.name) if group.default is not None else "").replace("/", ".")
            lines = ["", f"{group.spelling}={option.name}: {option.about}", *(f"    {e}" for e in option.examples),
                     *setting_lines(option.settings, prefix=prefix)]
            return lines + nested_lines(option, prefix)
    return []


def nested_lines(option: Option, prefix: str) -> list[str]:
    """The settings of the groups an option composes inside itself (its endpoint), the option's own
    values of them left out (they are listed above), and how to choose another option there."""
    lines, own = [], {s.key for s in option.settings}
    bases = re.findall(r"^\s*-\s*([\w.-]+)\s*$", option.path.read_text(encoding="utf-8"), re.M)  # `- llm`: the option it extends
    chain = [option.path, *[CONF / option.group / f"{b}.yaml" for b in bases if (CONF / option.group / f"{b}.yaml").is_file()]]
    seen: dict[tuple[str, str], str] = {}
    for path in chain:  # the option's own choice wins over the one its base option makes
        for folder, package, chosen in nested_defaults(path):
            seen.setdefault((folder, package), chosen)
    for (folder, package), chosen in seen.items():
        inner = next((o for o in options_of(folder) if o.name == chosen), None)
        if inner is None:
            continue
        where = f"{prefix}.{package}" if prefix else package
        names = ", ".join(o.name for o in options_of(folder))
        lines.append(f"  {where}: {folder}={chosen} (conf/{folder}/{chosen}.yaml); another: {folder}@{where}=NAME ({names})")
        lines += setting_lines([s for s in inner.settings if f"{package}.{s.key}" not in own], prefix=where)
    return lines


def setting_lines(settings: list[Setting], prefix: str = "") -> list[str]:
    lines = []
    for s in settings:
        if s.key.endswith("_target_"):
            continue
        key = f"{prefix}.{s.key}" if prefix else s.key
        head = f"  {key}={s.default}" if s.default else f"  {key}:"
        if not s.comment:
            lines.append(head)
        elif len(head) < 40:
            lines.append(f"{head:<40} " + wrap(s.comment, 59, " " * 41))
        else:
            lines += [head, " " * 41 + wrap(s.comment, 59, " " * 41)]
    return lines


def print_help_if_asked(config: str, argv: list[str]) -> bool:
    """`--help` / `-h` among the arguments: print the command's help from conf/ and say so."""
    if not {"--help", "-h"} & set(argv):
        return False
    print(command_help(config, [a for a in argv if "=" in a and not a.startswith("-")]), end="")
    return True
