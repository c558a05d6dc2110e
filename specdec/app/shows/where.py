"""Where a run ran, in words: its device, precision, engine and threads, and what its precision means
for the claim the page teaches (greedy speculation writes the target alone's text)."""

from __future__ import annotations

__all__ = ["where_ran", "where_note"]


def where_ran(models: dict) -> str:
    n, engine = models.get("threads"), models.get("engine")
    parts = [str(models[k]) for k in ("device", "dtype") if models.get(k)] + [f"{engine} engine"] * bool(engine)
    return ", ".join(parts + ([f"{n} torch thread{'s' * (n > 1)}"] if n else []))


def where_note(models: dict) -> str:
    """Half precision says whether its verify rows were checked equal to the steps', or what it gives up."""
    if models.get("rows_equal"):
        return ("**Batch-invariant bfloat16**: a verify's row for each position has the same bits as a one-token step "
                "there (checked when the model loaded), so greedy speculation writes the target alone's text.")
    if models.get("dtype", "float32") != "float32":
        return ("⚠ **Half precision** (asked for): a verify over γ + 1 tokens and a one-token step round differently, "
                "so this output is exact with respect to the verify's p, not token for token the target alone's.")
    return "Float32 weights and math: the verify pass and the target alone compute the same p."
