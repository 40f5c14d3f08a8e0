"""One evaluation run: its components built from the config, its stages (answers, judgements,
aggregates) and the job that every door (command line, sweep, `ragexp.evaluate`) runs."""
