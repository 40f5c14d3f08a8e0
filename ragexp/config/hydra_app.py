"""Running one of ragexp's Hydra apps (`python -m ragexp`, `.synth`, `.monitor`): `--help` from
conf/, secrets refused before Hydra writes the command line, config mistakes as bad input.
Imports stay light: Hydra is imported only to run."""
import sys

from ragexp.config.docs import print_help_if_asked
from ragexp.config.secrets import refuse_secret_overrides
from ragexp.errors import BAD_INPUT, RagexpError


def config_error(err: BaseException | None) -> bool:
    """Hydra's own config mistakes (an unknown option or key, a bad override) and ragexp's: bad input."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    return isinstance(err, (HydraException, OmegaConfBaseException, RagexpError))


def guarded(app, config: str = "config") -> None:
    """Runs a Hydra app (`python -m ragexp`, `.synth`, `.monitor`; `config`: its file in conf/):
    `--help` is ragexp's own, written from conf/ (ragexp.config.docs) without composing a config;
    refuses a command line that carries a secret before Hydra writes it to `.hydra/`; Hydra reports
    its config errors with exit status 1, which becomes 2 (bad input) as for ragexp's own."""
    if print_help_if_asked(config, sys.argv[1:]):
        return
    refuse_secret_overrides(sys.argv[1:])
    try:
        app()
    except SystemExit as done:
        # Hydra's run_and_report prints the error, then sys.exit(1) while handling it (__context__)
        if done.code == 1 and config_error(done.__context__):
            hint = unknown_key_hint(done.__context__, config)
            if hint:
                print(f"{'ragexp' if config == 'config' else f'ragexp.{config}'}: error: {hint}", file=sys.stderr)
            sys.exit(BAD_INPUT)
        raise


def unknown_key_hint(err: BaseException | None, config: str) -> str:
    """For Hydra's "Could not override 'KEY'" (a key the config lacks; Hydra then suggests `+KEY=`,
    which adds a key nothing reads): the settings of that name in conf/CONFIG.yaml and the group
    files, as the ones probably meant."""
    import re

    match = re.search(r"Could not override '([\w.@/-]+)'", str(err or ""))
    if not match:
        return ""
    key = match.group(1)
    leaf = key.rsplit(".", 1)[-1]
    found = sorted(places_of(leaf, config))
    meant = f"; did you mean {' or '.join(found[:3])}?" if found else ""
    return (f"{key} is not a setting of this command{meant} (`+{key}=...` would add a key that nothing reads; "
            "--help lists the settings)")


def places_of(leaf: str, config: str) -> set[str]:
    """Dotted settings named `leaf` in conf/CONFIG.yaml (`monitor.judge_sample`) and in the group
    files (`judge.repeats`), read as YAML without composing anything."""
    import yaml

    from ragexp.base.yaml_text import read_yaml
    from ragexp.config import CONF

    found: set[str] = set()

    def walk(node, prefix: str) -> None:
        if isinstance(node, dict):
            for name, value in node.items():
                path = f"{prefix}.{name}" if prefix else str(name)
                if name == leaf and prefix != "hydra" and not path.startswith("hydra."):
                    found.add(path)
                walk(value, path)

    for file, prefix in [(CONF / f"{config}.yaml", ""), *((f, f.parent.name) for f in sorted(CONF.glob("*/*.yaml")))]:
        try:
            walk(read_yaml(file.read_text(encoding="utf-8")), prefix)
        except (OSError, yaml.YAMLError):  # a hint only: a file it cannot read gives none
            continue
    return found
