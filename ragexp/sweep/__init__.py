"""Sweep-level code, above the job: the sweep folder's shared files (`folder`), Hydra's callbacks
that open and close a sweep (`callbacks`), and the racing sweeper (`racing`)."""
