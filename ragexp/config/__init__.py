"""Config in, objects out: the command line before Hydra sees it, composition, `--help` from conf/,
the config check, and building components from their nodes. Imports stay light: `--help` reads
conf/ without Hydra."""
from pathlib import Path

# ragexp/conf: in a checkout (and an editable install) a symlink to the repository's top-level conf/, in a
# wheel the YAML files themselves (setuptools follows the link). Absolute, so `python -m ragexp` and the
# `ragexp` script find the same folder; user folders come on top with --config-dir or hydra.searchpath.
CONF = Path(__file__).resolve().parents[1] / "conf"
