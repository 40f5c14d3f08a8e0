"""Config in, objects out: the command line before Hydra sees it, composition, `--help` from conf/,
the config check, and building components from their nodes. Imports stay light: `--help` reads
conf/ without Hydra."""
