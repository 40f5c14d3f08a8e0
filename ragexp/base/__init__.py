"""The bottom layer, imported by every other: text splitting, progress bars, concurrency, masking
secrets, the annotated types of settings. Standard library and numpy only; nothing of ragexp above."""
