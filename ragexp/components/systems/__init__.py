"""The system under test: who produces `(answer, contexts)` for each question (the `system` group).

The contract first (base.py), then a module per family; everything is importable from here."""
from .base import ContextError, ID_KEYS, System, SystemOutput, TEXT_KEYS, hits_from_contexts, output_of
from .pipeline import PipelineSystem
from .recorded import RecordedOutputs
from .python import DeadlineMissed, PythonSystem
