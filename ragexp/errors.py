"""Errors a user can fix: printed as one line that says what to change, never a traceback."""


class RagexpError(Exception):
    """A problem with the user's input or settings; the message names what to fix."""
