"""Registers ragexp's racing sweeper with Hydra, which instantiates plugins only from the
`hydra_plugins` namespace (conf/hydra/sweeper/racing.yaml names this class). The sweeper itself is
`ragexp.sweep.racing.sweeper.RacingSweeper`; this module stays light, Hydra imports it at every start."""
from ragexp.sweep.racing.sweeper import RacingSweeper as _Racing


class RacingSweeper(_Racing):
    """`hydra/sweeper=racing`: see ragexp.sweep.racing."""


__all__ = ["RacingSweeper"]
