"""One spelling for the settings that ragexp's command lines share. The Hydra commands (`python -m
ragexp`, `.synth`, `.monitor`) take `tracker.tracking_uri=URI`; the argparse tools (`.compare`,
`.calibrate`, `.track`, `.cache`) take the same words as well as their `--flags`."""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

SHARED = {"tracker.tracking_uri": "--tracking-uri", "tracker.experiment": "--experiment", "cache.dir": "--dir"}


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """`parser.parse_args(argv)`, with `key=value` for the shared settings the tool has (as its
    flag: `tracker.tracking_uri=URI` is `--tracking-uri URI`); a shared setting it has no use for
    is bad input (exit status 2), named."""
    flags = parser._option_string_actions
    takes = [f"{key}=..." for key, flag in SHARED.items() if flag in flags]
    if takes:
        parser.epilog = "\n".join(filter(None, [parser.epilog, f"Also as key=value, as for python -m ragexp: {', '.join(takes)}"]))
    spelled: list[str] = []
    settings: list[str] = []   # after the rest: argparse takes positionals in one run (targets ... --flag X)
    for arg in sys.argv[1:] if argv is None else argv:
        key, equals, value = arg.partition("=")
        if not equals or key not in SHARED:
            spelled.append(arg)
        elif SHARED[key] in flags:
            settings += [SHARED[key], value]
        else:
            parser.error(f"{key}: not a setting of {parser.prog}" + (f" (it takes {', '.join(takes)})" if takes else ""))
    return parser.parse_args(spelled + settings)
