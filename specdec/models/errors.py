"""The library's one error a user acts on when a model cannot be had: what went wrong and what to do.

Its own module so that every module that finds or loads models (`models`, `realmodel`) can raise it
without importing the others (`models` uses `realmodel`; the import rule forbids circles).
"""

from __future__ import annotations


class ModelLoadError(RuntimeError):
    """A pair could not be loaded; the message says why and what to do."""


class HubUnreachable(ModelLoadError):
    """A hub pair, asked for where the Hugging Face Hub cannot be reached and its files are not in
    the hub cache. `label`: the pair's name, for a message in the words of where it was asked
    (the page has no presets and no local folders; the CLI and the library have both)."""

    def __init__(self, message: str, label: str):
        super().__init__(message)
        self.label = label
