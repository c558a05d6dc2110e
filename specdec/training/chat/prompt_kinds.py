"""α of a features drafter on three kinds of prompt, for its card: chat prompts written by hand (`specdec
chat-alpha`'s card, other and more sets), ShareGPT human turns held out from training, and questions the
model writes itself. A drafter can learn its training's distribution and not generalise; the three kinds
side by side show which it did.

The numbers are read from chat-alpha's JSON (the last line it prints), never typed: `kinds_of` pools each
kind's sets for the drafter whose weights have the sha256 the card describes, and refuses results measured
on other weights or under other settings.
"""

from __future__ import annotations

import json
from pathlib import Path

from ...models.manifest import sha256

KINDS = {"hand-written": ("card", "other", "more"), "ShareGPT, held out": ("sharegpt",),
         "the model's own questions": ("own",)}
SAMPLINGS = ("greedy", "pair's", "T = 1")   # `cli.chat_alpha.SAMPLING_WORDS`' words, as its keys hold them


def weights_sha256(folder: Path) -> str:
    """The sha256 of a saved drafter's weights: what ties a measurement to the drafter it measured."""
    return sha256(Path(folder) / "model.safetensors")


def last_json(path: Path) -> dict:
    """The JSON line chat-alpha prints last (a log may hold its progress lines before it)."""
    lines = [line for line in Path(path).read_text(encoding="utf-8").splitlines() if line.startswith("{")]
    if not lines:
        raise ValueError(f"{path} holds no chat-alpha results (no JSON line)")
    return json.loads(lines[-1])


def _entries(found: dict, sha: str) -> dict[str, dict]:
    """{"set, sampling": entry} of one chat-alpha result for the drafter with weights `sha` (none if it
    did not measure that drafter)."""
    drafters = [d for d, s in found.get("sha256", {}).items() if s == sha]
    if not drafters:
        return {}
    alone = len(found["drafters"]) == 1
    out = {}
    for key, entry in found.items():
        if not isinstance(entry, dict) or "per_prompt" not in entry:
            continue
        where, _, drafter = key.partition(" | ")
        if (alone and not drafter) or drafter == drafters[0]:
            out[where] = entry
    return out


def kinds_of(results: list[dict], sha: str) -> dict:
    """α by kind of prompt and sampling for the drafter with weights `sha`, pooled over each kind's sets
    from chat-alpha `results` (a later result replaces an earlier one's set and sampling). Refused when no
    result measured those weights, when they disagree on γ, new tokens or seeds a prompt, or when a sampled
    row's prompts shared their seeds' random numbers."""
    measured = [r for r in results if _entries(r, sha)]
    if not measured:
        raise ValueError(f"no chat-alpha result here measured the weights with sha256 {sha[:12]}…: run "
                         "`specdec chat-alpha` on this drafter (its JSON records each drafter's sha256)")
    shared = [r for r in measured if not r.get("seeded_apart")
              and any(key.partition(", ")[2] != "greedy" for key in _entries(r, sha))]
    if shared:   # `features_chat_card.run_seed`: an interval over prompts needs each prompt's own stream
        raise ValueError("a chat-alpha result here sampled every prompt from the same seed's random numbers: "
                         "run `specdec chat-alpha` again, which seeds each prompt's runs apart")
    # A result without "seeds" ran chat-alpha's default seeds, (0, 1).
    settings = {(r["gamma"], r["new_tokens"], len(r.get("seeds", (0, 1)))) for r in measured}
    if len(settings) > 1:
        raise ValueError(f"these results were measured at different γ, new tokens or seeds a prompt "
                         f"{sorted(settings)}: the card's table holds one setting")
    entries = {}
    for r in measured:
        entries |= _entries(r, sha)
    table = {}
    for kind, sets in KINDS.items():
        for sampling in SAMPLINGS:
            rows = [row for s in sets for row in entries.get(f"{s}, {sampling}", {}).get("per_prompt", [])]
            if rows:
                accepted, tested = (sum(column) for column in zip(*rows))
                table.setdefault(kind, {})[sampling] = {"alpha": accepted / max(tested, 1), "tested": tested,
                                                        "prompts": len(rows)}
    gamma, new_tokens, seeds = settings.pop()
    return {"sha256": sha, "gamma": gamma, "new_tokens": new_tokens, "seeds_a_prompt": seeds, "table": table}


def kinds_section(kinds: dict) -> str:
    """The card's table of `kinds_of`, a row per kind of prompt ("–" where a sampling was not measured)."""
    words = {"greedy": "greedy", "pair's": "the pair's own", "T = 1": "T = 1"}
    head = "| prompts | " + " | ".join(words[s] for s in SAMPLINGS) + " |\n|---|" + "---:|" * len(SAMPLINGS) + "\n"
    rows = ""
    for kind, by_sampling in kinds["table"].items():
        count = max(v["prompts"] for v in by_sampling.values())
        cells = [f"{by_sampling[s]['alpha']:.3f} ({by_sampling[s]['tested']} tested)" if s in by_sampling else "–"
                 for s in SAMPLINGS]
        rows += f"| {kind} ({count}) | " + " | ".join(cells) + " |\n"
    return (f"## α on three kinds of prompt (γ = {kinds['gamma']}, {kinds['new_tokens']} new tokens, "
            "`specdec chat-alpha`)\n\n"
            "None was trained on: the hand-written prompts are the card's and chat-alpha's other and more sets, "
            "the ShareGPT turns are held out by hash, and the model writes its own questions with a seed "
            "apart from training's. Sampled rows pool "
            f"{kinds.get('seeds_a_prompt', 2)} seeds a prompt, each prompt's runs seeded apart.\n\n" + head + rows)
