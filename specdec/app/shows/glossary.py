"""The page's symbols in one short list, shown above the tabs so every tab can reach it.

Each line says what the symbol is and where the page shows it; the definitions are the project's
(DESIGN.md's conventions): p is always the target, q always the draft."""

GLOSSARY = """
- **p, q**: the target's and the draft's next-token distributions at a position (the same temperature,
  top-k and top-p applied to both).
- **γ** (gamma): drafts per round: the draft proposes γ tokens, the target checks them all in one forward.
- **α** (alpha): the acceptance rate a run observed: accepted ÷ tested drafts (a draft after a rejection is
  never tested).
- **β** (beta) = Σ min(p, q): the chance a draft passes at one position before it is drawn from q (the drafted
  token x's own chance is min(1, p(x)/q(x)), known once x is drawn);
  a run's **mean β** is what α should be, up to the draws' noise.
- **TV** (total variation) = ½ Σ |a − b|: how far one distribution is from another; TV(p, q) = 1 − β. The
  exact rule's output has TV 0 to p; skipping the adjustment does not.
- **c**: one draft step ÷ one target step (what a draft costs, in target steps).
- **v(γ)**: one verify over γ + 1 tokens ÷ one target step (Leviathan et al. take v = 1).
- **speedup(α, γ)** = (1 − α^(γ+1)) / ((1 − α)(γ c + v)): tokens a round yields over what it costs (the
  Speed explorer's curves).
"""
