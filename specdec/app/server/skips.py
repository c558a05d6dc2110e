"""Outputs a handler leaves out cost nothing (a workaround for Gradio 6.31; see `skip_left_out`).

A handler here returns `{component: value}` with only what changed (`handlers`): a streamed update
of a run names 4 of the Run event's 24 outputs. Gradio fills each output left out with `gr.skip()`
and then treats that skip as a property update: it builds the component anew (a Plot, a
Dataframe, ...) and rewrites its entry in the visitor's session config, all to send the browser
the same bare skip. Measured with py-spy on this 2-core machine, 30 visitors each running a
different 64-token run: 29 % of the server's busy time went to those rebuilds, beside 47 % for the
decodes themselves; and the copies are what `housekeeping` sweeps as orphaned component copies.
"""

from __future__ import annotations

import copy

import gradio as gr
from gradio.blocks import Block


def skip_left_out(demo: gr.Blocks) -> None:
    """Gradio's own postprocessing for the outputs a handler named, and a bare skip, as Gradio
    would send it, for each output it left out. Anything else (lists, one skip for all, batches)
    goes to Gradio unchanged. `tests/test_skips.py` checks that the browser receives what Gradio
    alone sends."""
    original = demo.postprocess_data

    async def postprocess_data(block_fn, predictions, state):
        outputs = list(getattr(block_fn, "outputs", None) or ())
        if getattr(block_fn, "batch", False) or not _by_component(predictions) or len(outputs) < 2:
            return await original(block_fn, predictions, state)
        named_ids = {block._id for block in predictions}
        named = [i for i, block in enumerate(outputs) if block._id in named_ids]
        if len(named) == len(outputs) or len(named) != len(predictions):   # all named, or a stale component
            return await original(block_fn, predictions, state)
        narrowed = copy.copy(block_fn)
        narrowed.outputs = [outputs[i] for i in named]
        # One output: Gradio expects the value itself (a dict of one would be wrapped once more).
        values = predictions if len(named) > 1 else next(iter(predictions.values()))
        done = await original(narrowed, values, state)
        sent = [gr.skip() for _ in outputs]
        for i, value in zip(named, done):
            sent[i] = value
        return sent

    demo.postprocess_data = postprocess_data


def _by_component(predictions) -> bool:
    return isinstance(predictions, dict) and bool(predictions) and all(isinstance(k, Block) for k in predictions)
