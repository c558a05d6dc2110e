"""The library's one error a user acts on when a model cannot be had: what went wrong and what to do.

Its own module so that every module that finds or loads models (`models`, `realmodel`) can raise it
without importing the others (`models` uses `realmodel`; the import rule forbids circles).
"""

from __future__ import annotations


class ModelLoadError(RuntimeError):
    """A pair could not be loaded; the message says why and what to do."""
