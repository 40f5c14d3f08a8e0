"""`python -m ragexp.cache info|clear [--dir DIR]`: the stage cache's size per stage, or empty it
(the cache itself: ragexp.store.cache)."""
from ragexp.store.cache import main

if __name__ == "__main__":
    raise SystemExit(main())
