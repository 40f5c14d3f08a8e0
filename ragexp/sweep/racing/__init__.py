"""Racing sweeps (`python -m ragexp -m hydra/sweeper=racing ...`): a grid raced over growing, nested,
seeded samples of the questions; after each round the configurations significantly worse than the
round's best (paired permutation tests, Holm-corrected: ragexp.stats.inference) are dropped.

- `plan`: the sweeper's settings, the grid and the round sizes, checked before any job (bad input: exit 2);
- `jobs`: a job's run folder read back as a `ragexp.store.reader.Run` (per-question table and all);
- `decide`: one round's decisions from its runs;
- `sweeper`: the Hydra Sweeper (registered through `hydra_plugins.ragexp_racing`) that launches the
  rounds through the configured launcher and keeps `racing.json`, the race's state, in the sweep folder;
- `report`: the race in the sweep's report, the final leaderboard of the survivors, the parent run's counts.
Imports stay light: Hydra scans the plugin at every start, also for `--help`."""
