"""Errors a user can fix: printed as one line that says what to change, never a traceback."""


class RagexpError(Exception):
    """A problem with the user's input or settings; the message names what to fix."""


class QuestionFailed(Exception):
    """One question cannot be completed (an LLM request failed after its retries, a reply that
    could not be read, the budget spent); the run goes on. `str(err)` is the reason shown."""


class BudgetExhausted(QuestionFailed):
    """`budget_usd` is spent: no further LLM request is made."""
