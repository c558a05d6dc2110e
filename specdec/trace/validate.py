"""Check an imported trace before anything is built from it: size, depth, schema, types, ranges.

A trace file comes from anyone. `read_trace_file` refuses a file over the upload limit before
reading it; `load_json` refuses text over the limit or nested deeper than a trace can be before
parsing it; `check_trace` walks the parsed dict and raises ValueError naming the FIRST thing
wrong by its place in the file, e.g.

    rounds[3].positions[1].p.probs[4] is -0.2: a probability must be a finite number from 0 to 1

Beyond types it checks what the decoder guarantees, so tampered numbers are refused rather than
drawn: ids inside the vocabulary; every probability finite and in [0, 1]; every stored
distribution adding up to 1 (within MASS_TOL); p(x), q(x), p/q and beta agreeing with the
stored rows; statuses and n_accepted agreeing with u < p/q and with gamma; each round's emitted
tokens being its accepted drafts then its drawn token; the run's tokens being the rounds'
emitted tokens; the statistics counting what the rounds hold; and the size bounds it is given
(`ImportLimits`: bytes, depth, rounds, tokens, prompt length). The library's own bounds are
generous; a server passes its limits, named by its environment variables (`specdec.app.server.limits`).

Schema 1 traces (no tail split, `end_rule` instead of `ending`) pass the checks that apply to them.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core.checks import is_whole
from ..core.sampling import Rule, SamplingConfig
from ..core.settings import RunSettings
from .fields import (
    MAX_TEXT,
    Bad,
    equal,
    fail,
    finite,
    kind_of,
    list_field,
    object_field,
    probability,
    shown,
    text_field,
    token_id,
    token_ids,
    whole,
)
from .outcomes import Ending, Status, status_at
from .spine import SCHEMA, VERSIONS, Dist, Generation, beta_of, residual_mass_of

MASS_TOL = 1e-3      # a stored distribution (kept ids + tail) adds up to 1 within this
MATCH_TOL = 1e-4     # p(x), q(x), beta, the residual mass agree with the stored rows within this
MAX_IDS = 4096       # ids kept per stored distribution (the decoder keeps at most 2 x TOP_N + 1)
MAX_ID = 2**31 - 1   # the vocabulary bound when a trace does not say its vocabulary size

__all__ = ["ImportLimits", "load_trace", "read_trace_file", "load_json", "check_trace", "json_depth"]


@dataclass(frozen=True)
class ImportLimits:
    """How large an imported trace may be. The defaults bound only what no real trace comes near
    (a trace nests 5 deep); a server passes its own limits, and `names` says what a message calls
    each bound (the server's environment variables; by default the field's own name)."""

    max_bytes: int = 1_000_000_000
    max_depth: int = 16
    max_tokens: int = 1 << 20            # generated tokens, and rounds
    max_prompt_tokens: int = 1 << 22
    max_prompt_chars: int = 1 << 24
    names: Mapping[str, str] = field(default_factory=dict)

    def name(self, bound: str) -> str:
        return self.names.get(bound, bound)


# ---------------------------------------------------------------- bytes and JSON

def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.1f} kB"


def _too_big(size: int, lim: ImportLimits) -> str:
    return (f"the file is {_mb(size)}; traces are imported up to {_mb(lim.max_bytes)} here "
            f"({lim.name('max_bytes')})")


def read_trace_file(path, lim: ImportLimits | None = None) -> str:
    """The text of an uploaded trace, refused by its size BEFORE it is read (ValueError)."""
    lim = lim or ImportLimits()
    try:
        size = os.stat(path).st_size
    except (OSError, TypeError, ValueError) as err:
        raise ValueError(f"could not read the file: {getattr(err, 'strerror', None) or err}") from None
    if size > lim.max_bytes:
        raise ValueError(_too_big(size, lim))
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError("the file is not UTF-8 text (a specdec trace is a JSON file)") from None
    except OSError as err:
        raise ValueError(f"could not read the file: {err.strerror or err}") from None


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)


def json_depth(text: str) -> int:
    """How deeply the arrays and objects of a JSON text nest, without parsing it (brackets inside
    strings do not count). Linear time and no recursion, so a 100,000-deep text costs nothing."""
    structural = _STRING.sub("", text).encode("utf-8", "replace")
    b = np.frombuffer(structural, dtype=np.uint8)
    where = np.flatnonzero((b == 0x5B) | (b == 0x7B) | (b == 0x5D) | (b == 0x7D))   # [ { ] }
    if where.size == 0:
        return 0
    steps = np.where((b[where] == 0x5B) | (b[where] == 0x7B), 1, -1).astype(np.int32)
    return int(np.cumsum(steps, dtype=np.int64).max(initial=0))


def load_json(text, lim: ImportLimits | None = None) -> dict:
    """Parse a trace's JSON text (str or bytes) safely: refused (ValueError with a message a person
    can act on) when over `lim.max_bytes`, nested deeper than `lim.max_depth`, not JSON, or not a
    JSON object."""
    lim = lim or ImportLimits()
    if isinstance(text, (bytes, bytearray)):
        if len(text) > lim.max_bytes:
            raise ValueError(_too_big(len(text), lim))
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("the file is not UTF-8 text (a specdec trace is a JSON file)") from None
    if not isinstance(text, str):
        raise ValueError(f"expected the JSON text of a trace, got {type(text).__name__}")
    size = len(text) if len(text) * 4 <= lim.max_bytes else len(text.encode("utf-8"))
    if size > lim.max_bytes:
        raise ValueError(_too_big(size, lim))
    depth = json_depth(text)
    if depth > lim.max_depth:
        raise ValueError(f"the JSON is nested {depth} levels deep; a specdec trace nests at most {lim.max_depth} "
                         f"({lim.name('max_depth')}): this is not a specdec trace")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"not valid JSON: {err}") from None
    except RecursionError:   # json_depth bounds the depth; this is a second line of defence
        raise ValueError("the JSON is nested too deeply to be a specdec trace") from None
    except ValueError as err:   # e.g. an integer with more digits than Python converts
        raise ValueError(f"not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"not a specdec trace: expected a JSON object, got a JSON {kind_of(data)}")
    return data


# ---------------------------------------------------------------- the trace, part by part

def _dist(d, where: str, vocab: int) -> dict:
    """A stored distribution: kept ids, their probabilities, the tail mass (and its two parts)."""
    object_field(d, where, ("ids", "probs", "rest"), ("split",))
    ids = token_ids(d["ids"], f"{where}.ids", vocab, MAX_IDS)
    if len(set(ids)) != len(ids):
        dup = next(t for t in ids if ids.count(t) > 1)
        fail(f"{where}.ids", f"lists token {dup} twice")
    probs = list_field(d["probs"], f"{where}.probs", MAX_IDS)
    if len(probs) != len(ids):
        fail(f"{where}.probs", f"has {len(probs)} values for {len(ids)} ids")
    for i, x in enumerate(probs):
        probability(x, f"{where}.probs[{i}]")
    rest = probability(d["rest"], f"{where}.rest")
    split = d.get("split")
    if split is not None:
        list_field(split, f"{where}.split", 2)
        if len(split) != 2:
            fail(f"{where}.split", f"has {len(split)} values: expected two (tail where p >= q, where p < q)")
        a, b = (probability(x, f"{where}.split[{i}]") for i, x in enumerate(split))
        if abs(a + b - rest) > MATCH_TOL:
            fail(f"{where}.split", f"adds up to {a + b:.6g}, but rest is {rest:.6g}")
    total = math.fsum(probs) + rest
    if abs(total - 1) > MASS_TOL:
        fail(where, f"adds up to {total:.6g} (kept probabilities plus rest): a distribution adds up to 1")
    return d


def _same_ids(a: dict, b: dict, where: str, names: str) -> None:
    if a["ids"] != b["ids"]:
        fail(where, f"stores {names} over different ids: they must be over the same ids")


def _position(pos, where: str, vocab: int) -> dict:
    object_field(pos, where, ("draft_token", "p_draft", "q_draft", "ratio", "u", "status", "beta", "p", "q"),
         ("skip_tv", "p_where_q_is_0", "p_outside_vocab", "outside_ids"))
    tok = token_id(pos["draft_token"], f"{where}.draft_token", vocab)
    p_x = probability(pos["p_draft"], f"{where}.p_draft")
    q_x = probability(pos["q_draft"], f"{where}.q_draft")
    ratio = finite(pos["ratio"], f"{where}.ratio", 0.0, math.inf, "a finite number (p(x)/q(x))")
    finite(pos["u"], f"{where}.u", 0.0, 1.0, "a uniform draw")
    if not isinstance(pos["status"], str):
        fail(f"{where}.status", f"is {shown(pos['status'])}: expected 'accepted', 'rejected' or 'unused'")
    probability(pos["beta"], f"{where}.beta")
    for key in ("skip_tv", "p_where_q_is_0", "p_outside_vocab"):
        if pos.get(key) is not None:
            probability(pos[key], f"{where}.{key}")
    p = _dist(pos["p"], f"{where}.p", vocab)
    q = _dist(pos["q"], f"{where}.q", vocab)
    _same_ids(p, q, where, "p and q")
    if tok not in p["ids"]:
        fail(f"{where}.draft_token", f"({tok}) is not among the stored ids of p and q")
    _outside_ids(pos.get("outside_ids"), p["ids"], tok, where, vocab)
    i = p["ids"].index(tok)
    if abs(p["probs"][i] - p_x) > MATCH_TOL:
        fail(f"{where}.p_draft", f"is {p_x:.6g}, but p stores {p['probs'][i]:.6g} for the drafted token")
    if abs(q["probs"][i] - q_x) > MATCH_TOL:
        fail(f"{where}.q_draft", f"is {q_x:.6g}, but q stores {q['probs'][i]:.6g} for the drafted token")
    if q_x <= 0:
        fail(f"{where}.q_draft", "is 0: a drafted token was drawn from q, so q gives it mass")
    if abs(ratio - p_x / q_x) > MATCH_TOL * max(1.0, ratio):
        fail(f"{where}.ratio", f"is {ratio:.6g}, but p(x)/q(x) = {p_x / q_x:.6g}")
    if p.get("split") is not None and q.get("split") is not None:
        beta = beta_of(Dist(**p), Dist(**q))   # the trace's own beta, on the stored view
        if abs(beta - pos["beta"]) > MATCH_TOL:
            fail(f"{where}.beta", f"is {pos['beta']:.6g}, but sum(min(p, q)) over the stored rows is {beta:.6g}")
    return pos


def _outside_ids(outside, ids: list, drafted: int, where: str, vocab: int) -> None:
    """The stored ids a position names as outside the drafter's vocabulary: stored ids, and not the
    drafted token (a draft is drawn from q, so it lies inside)."""
    if outside is None:
        return
    for i, t in enumerate(token_ids(outside, f"{where}.outside_ids", vocab, len(ids))):
        if t not in ids:
            fail(f"{where}.outside_ids[{i}]", f"({t}) is not among the stored ids of p and q")
        if t == drafted:
            fail(f"{where}.outside_ids[{i}]", f"({t}) is the drafted token: a draft lies inside the vocabulary")


def _round(r, where: str, k: int, ctx: dict) -> dict:
    """One round; ctx carries the vocabulary, the version, the rule, gamma and the tokens so far."""
    ending_key = ("ending",) if ctx["version"] >= 2 else ()
    object_field(r, where, ("index", "start", "gamma", "positions", "n_accepted", "end_token", "end_dist", "end_p",
                            "emitted", *ending_key),
                 ("end_q", "residual_mass", "draft_seconds", "verify_seconds", "ending", "end_rule"))
    equal(r["index"], k, f"{where}.index", "the round's place in the list")
    equal(r["start"], ctx["tokens"], f"{where}.start", "the number of tokens the rounds before it emitted")
    g = whole(r["gamma"], f"{where}.gamma", 0, ctx["gamma"], "drafts this round (at most the run's gamma)")
    positions = list_field(r["positions"], f"{where}.positions", g)
    if len(positions) != g:
        fail(f"{where}.positions", f"has {len(positions)} drafts, but gamma is {g}")
    n = whole(r["n_accepted"], f"{where}.n_accepted", 0, g, "accepted drafts (at most the round's gamma)")
    for i, pos in enumerate(positions):
        _position(pos, f"{where}.positions[{i}]", ctx["vocab"])
        _verdict(pos, f"{where}.positions[{i}]", status_at(i, n), n, ctx["rule"])
    end = _round_end(r, where, g, n, ctx)
    emitted = token_ids(r["emitted"], f"{where}.emitted", ctx["vocab"], n + 1)
    decided = [pos["draft_token"] for pos in positions[:n]] + [end]
    if not emitted or emitted != decided[:len(emitted)]:
        fail(f"{where}.emitted", f"is {emitted[:8]}, but the round's accepted drafts then its drawn token are "
                                 f"{decided[:8]} (emitted is a non-empty prefix of them)")
    for key in ("draft_seconds", "verify_seconds"):
        if key in r:
            finite(r[key], f"{where}.{key}", 0.0, 1e7, "a time in seconds")
    ctx["tokens"] += len(emitted)
    ctx["drafted"] += g
    ctx["tested"] += min(n + 1, g)
    ctx["accepted"] += n
    return r


def _verdict(pos: dict, where: str, expected: Status, n: int, rule: Rule) -> None:
    """A drafted position's status follows from n_accepted, and a tested one's verdict from its numbers."""
    if pos["status"] != expected.value:
        fail(f"{where}.status", f"is {shown(pos['status'])}, but with n_accepted = {n} "
                                f"this draft is {expected.value!r}")
    if expected is Status.UNUSED:   # never tested: nothing to agree with
        return
    accepted = expected is Status.ACCEPTED
    if rule is Rule.GREEDY_MATCH:
        top = max(pos["p"]["probs"])
        agrees = pos["p_draft"] >= top - 1e-7 if accepted else pos["p_draft"] <= top
    elif rule is Rule.ACCEPT_ALL:
        agrees = accepted
    else:
        agrees = (pos["u"] < pos["ratio"]) == accepted
    if not agrees:
        fail(where, f"is {expected.value}, but its u = {pos['u']:.6g} and p/q = {pos['ratio']:.6g} say otherwise")


def _round_end(r: dict, where: str, g: int, n: int, ctx: dict) -> int:
    """The round's last token: drawn from a stored distribution that gives it mass, under the
    ending its drafts and the rule imply, with the residual's mass where it has one."""
    vocab, rejected = ctx["vocab"], n < g
    end = token_id(r["end_token"], f"{where}.end_token", vocab)
    end_dist = _dist(r["end_dist"], f"{where}.end_dist", vocab)
    end_p = _dist(r["end_p"], f"{where}.end_p", vocab)
    _same_ids(end_dist, end_p, where, "end_dist and end_p")
    end_q = r.get("end_q")
    if end_q is not None:
        _dist(end_q, f"{where}.end_q", vocab)
        _same_ids(end_dist, end_q, where, "end_dist and end_q")
    if end not in end_dist["ids"]:
        fail(f"{where}.end_token", f"({end}) is not among the stored ids of end_dist")
    if end_dist["probs"][end_dist["ids"].index(end)] <= 0:
        fail(f"{where}.end_token", f"({end}) has probability 0 in end_dist, so it cannot have been drawn from it")
    if ctx["version"] >= 2:
        _ending(r, where, Ending.of(g, rejected, ctx["rule"]), f"{g} drafts and {n} accepted under the "
                                                               f"{ctx['rule'].value!r} rule")
        if (end_q is not None) != rejected:
            fail(f"{where}.end_q", "must be stored exactly when a draft was rejected")
    _residual_mass(r, where, end_p, end_q, ctx["version"])
    return end


def _ending(r: dict, where: str, expected: Ending, why: str) -> None:
    valid = [e.value for e in Ending]
    if r["ending"] not in valid:
        fail(f"{where}.ending", f"is {shown(r['ending'])}: expected one of {', '.join(map(repr, valid))}")
    if r["ending"] != expected.value:
        fail(f"{where}.ending", f"is {r['ending']!r}, but a round with {why} ends {expected.value!r}")


def _residual_mass(r: dict, where: str, end_p: dict, end_q: dict | None, version: int) -> None:
    rm = r.get("residual_mass")
    if rm is None:
        if version >= 2 and r["ending"] == Ending.RESIDUAL.value:
            fail(f"{where}", "ended by the residual but stores no residual_mass")
        return
    probability(rm, f"{where}.residual_mass")
    if version >= 2 and r["ending"] != Ending.RESIDUAL.value:
        fail(f"{where}.residual_mass", "is stored, but only a round ended by the residual has one")
    if end_q is not None and end_p.get("split") is not None and end_q.get("split") is not None:
        mass = residual_mass_of(Dist(**end_p), Dist(**end_q))   # the trace's own residual mass
        if abs(mass - rm) > MATCH_TOL:
            fail(f"{where}.residual_mass", f"is {rm:.6g}, but sum(max(0, p - q)) over the stored rows is {mass:.6g}")


_SETTINGS_KEYS = ("mode", "gamma", "max_new_tokens", "sampling", "seed", "rule", "drafter", "skip_adjustment", "chat")


def _settings(s, where: str):
    object_field(s, where, (), _SETTINGS_KEYS, extra_scalars=False)
    sampling = s.get("sampling", {})
    object_field(sampling, f"{where}.sampling", (), ("temperature", "top_k", "top_p"), extra_scalars=False)
    for key in ("temperature", "top_p"):
        if key in sampling:
            finite(sampling[key], f"{where}.sampling.{key}", 0.0, 100.0)
    if "top_k" in sampling:
        whole(sampling["top_k"], f"{where}.sampling.top_k", 0, MAX_ID)
    for key in ("mode", "rule", "drafter"):
        if key in s and not isinstance(s[key], str):
            fail(f"{where}.{key}", f"is {shown(s[key])}: expected text")
    if "rule" in s and s["rule"] not in [r.value for r in Rule]:
        fail(f"{where}.rule", f"is {shown(s['rule'])}: expected one of {', '.join(repr(r.value) for r in Rule)}")
    if s.get("chat") is not None and not isinstance(s["chat"], bool):
        fail(f"{where}.chat", f"is {shown(s['chat'])}: expected true, false or null")
    for key in ("gamma", "max_new_tokens", "seed"):
        if key in s and not is_whole(s[key]):
            fail(f"{where}.{key}", f"is {shown(s[key])}: expected a whole number")
    try:
        settings = RunSettings.from_dict(s)
        SamplingConfig(**sampling)
        settings.validate()
    except (TypeError, ValueError) as err:
        fail(where, f"are not valid: {err}")
    return settings


_STATS_COUNTS = ("new_tokens", "rounds", "drafted", "tested", "accepted", "target_forwards", "draft_forwards")
_STATS_RATES = ("acceptance_rate", "accepted_per_drafted", "expected_acceptance", "skip_tv_mean")


def _stats(s, where: str, gen: dict, ctx: dict) -> None:
    object_field(s, where, ())
    for key, value in s.items():
        if key == "stopped":
            text_field(value, f"{where}.stopped", 100)
        elif key in _STATS_COUNTS:
            whole(value, f"{where}.{key}", 0, MAX_ID)
        elif key in _STATS_RATES:
            probability(value, f"{where}.{key}")
        else:
            finite(value, f"{where}.{key}", 0.0, 1e9)
    if not ctx["speculative"]:
        return
    counts = {"new_tokens": len(gen["token_ids"]), "rounds": len(gen["rounds"])}
    if gen["rounds"]:
        counts.update(drafted=ctx["drafted"], tested=ctx["tested"], accepted=ctx["accepted"])
    for key, value in counts.items():
        if key in s and s[key] != value:
            fail(f"{where}.{key}", f"is {s[key]}, but the trace holds {value}")
    if gen["rounds"] and "acceptance_rate" in s and ctx["tested"]:
        rate = ctx["accepted"] / ctx["tested"]
        if abs(s["acceptance_rate"] - rate) > MATCH_TOL:
            fail(f"{where}.acceptance_rate", f"is {s['acceptance_rate']:.6g}, but the rounds give "
                                              f"{ctx['accepted']}/{ctx['tested']} = {rate:.6g}")


_TOP = ("schema", "version", "prompt", "prompt_ids", "token_ids", "text", "rounds", "stats", "settings", "models")


def load_trace(data, lim: ImportLimits | None = None) -> Generation:
    """A trace from anyone (its JSON text, bytes, or the parsed dict) as a `Generation`: parsed
    within `lim`, checked (`check_trace`), then built. ValueError names the first thing wrong."""
    d = data if isinstance(data, dict) else load_json(data, lim)
    check_trace(d, lim)
    return Generation.from_dict(d)


def check_trace(data, lim: ImportLimits | None = None) -> None:
    """Raise ValueError naming the first thing wrong with a parsed trace; return None when it may
    be built and shown. Call it before any object is built from `data`."""
    try:
        _check(data, lim or ImportLimits())
    except Bad as err:
        raise ValueError(str(err)) from None
    except RecursionError:
        raise ValueError("the trace is nested too deeply") from None


def _check(d, lim: ImportLimits) -> None:
    if not isinstance(d, dict):
        fail("the file", f"is {shown(d)}: a specdec trace is a JSON object")
    if d.get("schema") != SCHEMA:
        fail("the file", f"is not a specdec trace (its schema is {shown(d.get('schema'))}, not {SCHEMA!r})")
    version = d.get("version")
    if not is_whole(version) or version not in VERSIONS:
        found = f"the string {version!r}" if isinstance(version, str) else shown(version)
        fail("version", f"is {found}: this specdec reads trace versions "
                         f"{' and '.join(map(str, VERSIONS))} (a whole number, not text)")
    object_field(d, "the trace", _TOP, ("token_text", "eos_token_id", "title", "notes"))
    models = object_field(d["models"], "models", (), ("feature_layers", "draft_vocab"))
    if "draft_vocab" in models:   # how many token ids a features drafter's q reads (a vocabulary subset)
        whole(models["draft_vocab"], "models.draft_vocab", 1, MAX_ID + 1)
    if "feature_layers" in models:   # the target layers a features drafter fused (a list of layer numbers)
        for i, layer in enumerate(list_field(models["feature_layers"], "models.feature_layers", 64)):
            whole(layer, f"models.feature_layers[{i}]", 1, 1024)
    vocab = MAX_ID + 1
    if "vocab_size" in models:
        vocab = whole(models["vocab_size"], "models.vocab_size", 1, MAX_ID)
    if models.get("context_length") is not None:
        whole(models["context_length"], "models.context_length", 1, MAX_ID)
    for key in ("label", "target", "draft", "device", "dtype"):
        if key in models and not (key == "draft" and models[key] is None):   # null: a pair with no draft model
            text_field(models[key], f"models.{key}", 1000)
    text_field(d["prompt"], "prompt", lim.max_prompt_chars * 4)   # a typed prompt, or the text of given ids
    token_ids(d["prompt_ids"], "prompt_ids", vocab, lim.max_prompt_tokens, lim.name("max_prompt_tokens"))
    generated = token_ids(d["token_ids"], "token_ids", vocab, lim.max_tokens, lim.name("max_tokens"))
    text_field(d["text"], "text", MAX_TEXT * 10)
    settings = _settings(d["settings"], "settings")
    if len(generated) > settings.max_new_tokens:
        fail("token_ids", f"has {len(generated)} tokens, but the run asked for at most {settings.max_new_tokens}")
    if d.get("eos_token_id") is not None:
        token_id(d["eos_token_id"], "eos_token_id", vocab)
    rounds = list_field(d["rounds"], "rounds", lim.max_tokens, lim.name("max_tokens"))
    ctx = dict(vocab=vocab, version=version, rule=Rule(settings.rule), gamma=settings.gamma, tokens=0, drafted=0,
               tested=0, accepted=0, speculative=settings.speculative)
    if rounds and not settings.speculative:
        fail("rounds", "are stored, but the run was autoregressive (it has no rounds)")
    for k, r in enumerate(rounds):
        _round(r, f"rounds[{k}]", k, ctx)
    if rounds:
        emitted = [t for r in rounds for t in r["emitted"]]
        if emitted != generated:
            first = next((i for i, (a, b) in enumerate(zip(emitted, generated)) if a != b),
                         min(len(emitted), len(generated)))
            fail("token_ids", f"differ from the tokens the rounds emitted (from token {first + 1} on): the "
                               "generated tokens are the rounds' emitted tokens in order")
    _stats(d["stats"], "stats", d, ctx)
    _texts(d, vocab, len(rounds))


def _texts(d: dict, vocab: int, rounds: int) -> None:
    """The token texts, the title and the notes: text, keyed by token ids and round indices."""
    token_text = d.get("token_text", {})
    object_field(token_text, "token_text", ())
    for key, value in token_text.items():
        if not re.fullmatch(r"\d{1,10}", key) or int(key) >= vocab:
            fail("token_text", f"has the key {shown(key)}: keys are token ids from 0 to {vocab - 1}")
        text_field(value, f"token_text[{key!r}]", 1000)
    if d.get("title") is not None:
        text_field(d["title"], "title")
    notes = d.get("notes", {})
    if notes is not None:
        object_field(notes, "notes", ())
        for key, value in notes.items():
            if not re.fullmatch(r"\d{1,10}", key) or int(key) >= max(1, rounds):
                fail("notes", f"has the key {shown(key)}: keys are round indices from 0 to {max(0, rounds - 1)}")
            text_field(value, f"notes[{key!r}]")
