"""The argparse tools take the Hydra commands' spelling of the shared settings too."""
import argparse

import pytest

from ragexp.config.cli_settings import parse_args
from ragexp.config.build import from_yaml


def tool() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ragexp.tool")
    parser.add_argument("targets", nargs="*")
    parser.add_argument("--tracking-uri")
    return parser


def test_a_shared_setting_in_key_value_form_is_the_tools_flag():
    args = parse_args(tool(), ["sweep-1", "tracker.tracking_uri=http://host:5000", "run=2"])
    assert args.tracking_uri == "http://host:5000"
    assert args.targets == ["sweep-1", "run=2"]  # anything else is left to the tool


def test_a_shared_setting_the_tool_has_no_use_for_is_bad_input(capsys):
    with pytest.raises(SystemExit) as stop:
        parse_args(tool(), ["cache.dir=/tmp/x"])
    assert stop.value.code == 2
    assert "cache.dir: not a setting of python -m ragexp.tool (it takes tracker.tracking_uri=...)" in capsys.readouterr().err


def test_the_tools_accept_both_spellings(tmp_path):
    from ragexp.cache import main as cache_main
    from ragexp.compare.__main__ import parser as compare_parser

    assert parse_args(compare_parser(), ["tracker.tracking_uri=sqlite:///x.db"]).tracking_uri == "sqlite:///x.db"
    from_yaml("cache", dir=str(tmp_path / "c")).put("stage", "ab" * 32, [1])  # a stage cache, tagged as ragexp tags it
    assert cache_main(["clear", f"cache.dir={tmp_path / 'c'}"]) in (0, None)
    assert not (tmp_path / "c").exists()


def test_the_help_of_a_tool_names_the_key_value_spelling(capsys):
    with pytest.raises(SystemExit):
        parse_args(tool(), ["--help"])
    assert "Also as key=value, as for python -m ragexp: tracker.tracking_uri=..." in capsys.readouterr().out
