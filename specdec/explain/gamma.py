"""γ picked from what was measured, not guessed: the drafter's α (its model card) and what a verify
over γ + 1 tokens costs on this device (a committed cost profile of the pair and drafter).

Why it matters: on a 2-core CPU a SmolLM2-135M verify over 5 tokens costs about 1.6–1.9 one-token
steps (a small matrix product is not free there, as it nearly is on a GPU), so γ 4 lost at α 0.42
(0.76×, its card) where γ 1 won (1.18× in the same bench). The page, the CLI and the API start a
run of such a pair at the γ with the best predicted speedup, Leviathan et al.'s eq. 1 with the
profile's own c and v(γ), and say why.

Pure reading and arithmetic: the cards and profiles are files the project's commands wrote
(`specdec chat-card`, `specdec bench --save-profile`); nothing here times anything.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..core.registry import find
from ..models.pair import PRESETS, features_folder_of
from .calibrate import stored
from .speed import CostProfile, profiles_from_json

PROFILES = Path(__file__).resolve().parents[2] / "assets" / "bench" / "cost-profiles.json"
CARD_FILE = "measures.json"   # beside a real model's features drafter (`specdec chat-card`)


@dataclass(frozen=True)
class GammaPick:
    """The γ with the best predicted speedup, the predictions it was picked from, and their sources."""

    gamma: int
    predicted: dict[int, float]   # γ -> predicted speedup over the target alone
    alpha: float
    alpha_from: str               # where α comes from, in words
    profile: CostProfile

    @property
    def speedup(self) -> float:
        return self.predicted[self.gamma]

    def sentence(self) -> str:
        """One sentence for the page and the CLI: the γ, why, and what the usual γ 4 would give."""
        others = ", ".join(f"γ {g} {x:.2f}×" for g, x in sorted(self.predicted.items()) if g != self.gamma)
        v = self.profile.verify(self.gamma)
        return (f"γ {self.gamma} picked for this pair and drafter: at α {self.alpha:.2f} ({self.alpha_from}), with a "
                f"draft step at c = {self.profile.c:.2f} and a verify over {self.gamma + 1} tokens at {v:.2f} target "
                f"steps ({measured(self.profile)}), it predicts {self.speedup:.2f}× ({others}).")


def measured(profile: CostProfile) -> str:
    """Where and when a profile's costs were measured, in words: the project's machine, which need
    not be the one serving the page (a Space's CPU is another)."""
    if profile.name.startswith("here:"):
        return f"measured on this machine, {profile.when}, {profile.dtype}, {profile.where.split(', ')[-1].rstrip(')')}"
    device = {"cpu": "a CPU", "cuda": "a GPU"}.get(profile.device, profile.device)
    return f"measured for it on {device}, {profile.when}, {profile.engine}, {profile.dtype}"


def predictions(alpha: float, profile: CostProfile, gammas=range(1, 17)) -> dict[int, float]:
    """γ -> Leviathan et al.'s speedup with `profile`'s c and its measured verify over γ + 1 tokens;
    only the widths it measured (an unmeasured width is not guessed)."""
    out = {g: profile.speedup(alpha, g) for g in gammas}
    return {g: x for g, x in out.items() if x is not None}


# Predictions this close to the best are a tie: α and the costs are measured, and 1 % is below what
# a bench can tell apart (the real pair at T = 1: γ 1 1.255×, γ 2 1.257×).
TIE = 0.01


def pick_gamma(alpha: float, profile: CostProfile, alpha_from: str = "", gammas=range(1, 17)) -> GammaPick | None:
    """The smallest γ whose predicted speedup is within `TIE` of the best (less work, and fewer
    drafts thrown away, for the same speed); None where the profile measured no verify width of 2
    tokens or more."""
    predicted = predictions(alpha, profile, gammas)
    if not predicted:
        return None
    top = max(predicted.values())
    best = min(g for g, x in predicted.items() if x >= top * (1 - TIE))
    return GammaPick(best, predicted, alpha, alpha_from, profile)


def card_alpha(folder: Path, temperature: float) -> tuple[float, str] | None:
    """α from a drafter's card (`measures.json`) at the measured temperature nearest `temperature`,
    and where it comes from in words; None where the card is missing or unreadable."""
    try:
        rows = json.loads((Path(folder) / CARD_FILE).read_text(encoding="utf-8"))["measures"]["acceptance"]
        row = min(rows, key=lambda r: (abs(float(r["temperature"]) - temperature), float(r["temperature"])))
        alpha, t = float(row["alpha"]), float(row["temperature"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    at = "greedy" if t == 0 else f"T = {t:g}"
    return alpha, f"its card, {at}" + ("" if t == temperature else f"; this run samples at T = {temperature:g}")


def pair_device(pair) -> tuple[str, str]:
    """A loaded pair's kind of device ("cpu", "cuda") and dtype ("float32"), as profiles name them."""
    return str(pair.device).split(":")[0], str(pair.dtype).replace("torch.", "")


def committed_profile(pair_key: str, drafter: str, device: str, dtype: str = "float32",
                      path: Path | None = None) -> CostProfile | None:
    """The committed profile measured with this pair and drafter on this kind of device and dtype
    (`path`: the committed file, `PROFILES`, read at each call: a new profile needs no restart)."""
    try:
        profiles = profiles_from_json(json.loads(Path(path or PROFILES).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None
    want = (pair_key, drafter, device, dtype)
    return next((p for p in profiles if (p.pair, p.drafter, p.device, p.dtype) == want), None)


def profile_for(pair_key: str, drafter: str, device: str, dtype: str = "float32", threads: int | None = None,
                path: Path | None = None) -> CostProfile | None:
    """The costs a pick reads: those measured on this machine (`calibrate.stored`), else the committed
    profile of the pair on this kind of device and dtype (another machine's: its name says where).
    `path`: a profiles file to read instead of the committed one, alone."""
    here = stored(pair_key, drafter, device, dtype, threads) if path is None else None
    return here or committed_profile(pair_key, drafter, device, dtype, path)


def gamma_for(pair_key: str, drafter: str, temperature: float, device: str = "cpu", dtype: str = "float32",
              path: Path | None = None, threads: int | None = None) -> GammaPick | None:
    """The γ a run of this pair and drafter starts with, where both a card's α and a profile of the
    pair on this kind of device and dtype were measured; None elsewhere (the caller keeps its default:
    a CPU's costs say nothing of a GPU's, where a verify is nearly free)."""
    preset = PRESETS.get(pair_key)
    profile = profile_for(pair_key, drafter, device, dtype, threads, path) if preset is not None else None
    kind = find(drafter)
    if profile is None or kind is None or not kind.gamma_from_card:   # only some drafters have a card with α by T
        return None
    measured = card_alpha(features_folder_of(preset.target), temperature)
    return None if measured is None else pick_gamma(measured[0], profile, measured[1])


def preset_of(models: dict) -> str:
    """The preset whose target a trace's pair description names ('' for none: a folder, a hub id)."""
    return next((key for key, p in PRESETS.items() if Path(str(p.target)).name == models.get("target")), "")


def run_gamma_sentence(alpha: float, gamma: int, drafter: str, models: dict, temperature: float | None = None) -> str:
    """For a run compared with the target alone: what each γ would have given at the α it met, on its
    pair's measured costs on this kind of device (why it lost where it did); '' where no
    such costs were measured. With the run's `temperature`, a best γ other than the one picked before
    the run says why: the pick read the card's α, and this run met another."""
    profile = profile_for(preset_of(models), drafter, str(models.get("device", "")).split(":")[0],
                          str(models.get("dtype", "float32")), models.get("threads"))
    pick = pick_gamma(min(max(alpha, 0.0), 1.0), profile) if profile is not None else None
    if pick is None:
        return ""
    each = ", ".join(f"γ {g} {x:.2f}×" for g, x in sorted(pick.predicted.items()))
    verdict = (f"this run's γ {gamma} is the best for its α here" if gamma == pick.gamma else
               f"γ {pick.gamma} would have been best, not this run's γ {gamma}")
    card = card_alpha(features_folder_of(PRESETS[preset_of(models)].target), temperature) if (
        temperature is not None and preset_of(models)) else None
    before = pick_gamma(card[0], profile) if card is not None else None
    if before is not None and gamma == before.gamma != pick.gamma:
        verdict += (f"; the pick before the run read α {card[0]:.2f} ({card[1]}), and this run's α moved from it, "
                    "so its best γ moved too")
    return (f"At this run's α = {alpha:.3f}, the costs {measured(pick.profile)}, predict "
            f"{each}: {verdict} (a verify over more tokens costs more there; the speed explorer's "
            f"`{pick.profile.name}`).")
