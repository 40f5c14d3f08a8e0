"""YAML read and written safely with libyaml's parser and emitter when PyYAML was built with it
(several times faster on a run's config.yaml), else with PyYAML's own: the same documents."""
from __future__ import annotations

from typing import Any


def read_yaml(text: str) -> Any:
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader


def dump_yaml(data: Any) -> str:
    """`data` as YAML, its keys in their own order."""
    import yaml

    return yaml.dump(data, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False)
