"""Errors a user can fix: printed as one line that says what to change, never a traceback."""


class RagexpError(Exception):
    """A problem with the user's input or settings; the message names what to fix."""


class StoreUnreachable(RagexpError):
    """The tracking store did not answer (unreachable, a server error) after retries: not the same
    as an answer that a run is absent. Commands exit RUN_FAILED (4) on it."""


class UserCodeStopped(RagexpError):
    """Code the run called (a user's system function, component or judge) raised SystemExit,
    KeyboardInterrupt or another BaseException that is not an Exception: it cannot end a run as a
    pass. The message names the function; commands exit RUN_FAILED (4) on it."""


class QuestionFailed(Exception):
    """One question cannot be completed (an LLM request failed after its retries, a reply that
    could not be read, the budget spent); the run goes on. `str(err)` is the reason shown."""


class UnreadableReply(QuestionFailed):
    """An LLM's reply could not be read, even after a re-ask: what it was to give fails (a judge's
    metrics of that request; the question, when nothing else of it was judged)."""


class BudgetExhausted(QuestionFailed):
    """`budget_usd` is spent: no further LLM request is made."""


# exit status of `python -m ragexp` (docs/concepts/failures.md); a sweep exits RUN_FAILED when a job failed
BAD_INPUT = 2  # a setting, an override, a file or the command line itself must be fixed
GATE_FAILED = 3  # a run (or a sweep's job) missed a quality-gate threshold
RUN_FAILED = 4  # every question failed, or more than `max_failed_share` of them; in a sweep: a job failed
