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
generous; a server passes its limits, named by its environment variables (`specdec.app.limits`).

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

from .checks import is_whole
from .outcomes import Ending, Status, status_at
from .sampling import Rule, SamplingConfig
from .settings import RunSettings
from .trace import SCHEMA, VERSIONS, Dist, Generation, beta_of, residual_mass_of

PROB_TOL = 1e-5      # a stored probability may exceed [0, 1] by float32 rounding, not more
MASS_TOL = 1e-3      # a stored distribution (kept ids + tail) adds up to 1 within this
MATCH_TOL = 1e-4     # p(x), q(x), beta, the residual mass agree with the stored rows within this
MAX_IDS = 4096       # ids kept per stored distribution (the decoder keeps at most 2 x TOP_N + 1)
MAX_TEXT = 100_000   # characters of a free-text field (label, title, note, token text)
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
        raise ValueError(f"not a specdec trace: expected a JSON object, got a JSON {_kind(data)}")
    return data


# ---------------------------------------------------------------- the checks

class _Bad(ValueError):
    pass


def _kind(x) -> str:
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "true/false value"
    if isinstance(x, (int, float)):
        return "number"
    if isinstance(x, str):
        return "string"
    if isinstance(x, list):
        return "array"
    if isinstance(x, dict):
        return "object"
    return type(x).__name__


def _show(x) -> str:
    if isinstance(x, float) and math.isnan(x):
        return "NaN"
    if isinstance(x, str):
        return repr(x if len(x) <= 40 else x[:40] + "…")
    if isinstance(x, (list, dict)):
        return f"a JSON {_kind(x)}"
    return json.dumps(x) if x is None or isinstance(x, bool) else repr(x)


def _fail(where: str, problem: str):
    raise _Bad(f"{where} {problem}")


def _is_num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _int(x, where: str, lo: int, hi: int, what: str = "a whole number") -> int:
    if not is_whole(x):
        _fail(where, f"is {_show(x)}: expected {what} from {lo} to {hi}")
    if not lo <= x <= hi:
        _fail(where, f"is {x}: expected {what} from {lo} to {hi}")
    return x


def _number(x, where: str, lo: float = 0.0, hi: float = math.inf, what: str = "a finite number") -> float:
    if not _is_num(x) or not math.isfinite(x):
        _fail(where, f"is {_show(x)}: expected {what}" + (f" from {lo:g}" if lo > -math.inf else "")
              + (f" to {hi:g}" if hi < math.inf else ""))
    if not lo <= x <= hi:
        _fail(where, f"is {x!r}: expected {what}" + (f" from {lo:g}" if lo > -math.inf else "")
              + (f" to {hi:g}" if hi < math.inf else ""))
    return float(x)


def _prob(x, where: str) -> float:
    if not _is_num(x) or not math.isfinite(x) or not -PROB_TOL <= x <= 1 + PROB_TOL:
        _fail(where, f"is {_show(x)}: a probability must be a finite number from 0 to 1")
    return float(x)


def _text(x, where: str, max_len: int = MAX_TEXT, what: str = "text") -> str:
    if not isinstance(x, str):
        _fail(where, f"is {_show(x)}: expected {what}")
    if len(x) > max_len:
        _fail(where, f"is {len(x):,} characters long: at most {max_len:,} here")
    return x


def _list(x, where: str, max_len: int, limit_name: str = "") -> list:
    if not isinstance(x, list):
        _fail(where, f"is {_show(x)}: expected a list")
    if len(x) > max_len:
        _fail(where, f"has {len(x):,} entries: at most {max_len:,} here" + (f" ({limit_name})" if limit_name else ""))
    return x


def _obj(x, where: str, required: tuple[str, ...], optional: tuple[str, ...] = (), extra_scalars: bool = True
         ) -> dict:
    """A JSON object with these keys. Unknown keys are allowed only as plain values (numbers, text,
    true/false, null): a newer specdec may add a field, but nothing deep hides in one."""
    if not isinstance(x, dict):
        _fail(where, f"is {_show(x)}: expected an object")
    for key in required:
        if key not in x:
            _fail(where, f"has no {key!r}")
    known = set(required) | set(optional)
    for key, value in x.items():
        if key not in known:
            if not extra_scalars or isinstance(value, (list, dict)):
                _fail(f"{where}.{key}", "is not a field of a specdec trace")
            if isinstance(value, str) and len(value) > MAX_TEXT:
                _fail(f"{where}.{key}", f"is {len(value):,} characters long: at most {MAX_TEXT:,} here")
    return x


def _equal(x, expected: int, where: str, what: str) -> None:
    if not is_whole(x) or x != expected:
        _fail(where, f"is {_show(x)}, but it must be {expected}: {what}")


def _id(x, where: str, vocab: int) -> int:
    if not is_whole(x) or not 0 <= x < vocab:
        _fail(where, f"is {_show(x)}: a token id must be a whole number from 0 to {vocab - 1} "
                     f"(the vocabulary has {vocab} tokens)")
    return x


def _ids(x, where: str, vocab: int, max_len: int, limit_name: str = "") -> list[int]:
    for i, t in enumerate(_list(x, where, max_len, limit_name)):
        _id(t, f"{where}[{i}]", vocab)
    return x


def _dist(d, where: str, vocab: int) -> dict:
    """A stored distribution: kept ids, their probabilities, the tail mass (and its two parts)."""
    _obj(d, where, ("ids", "probs", "rest"), ("split",))
    ids = _ids(d["ids"], f"{where}.ids", vocab, MAX_IDS)
    if len(set(ids)) != len(ids):
        dup = next(t for t in ids if ids.count(t) > 1)
        _fail(f"{where}.ids", f"lists token {dup} twice")
    probs = _list(d["probs"], f"{where}.probs", MAX_IDS)
    if len(probs) != len(ids):
        _fail(f"{where}.probs", f"has {len(probs)} values for {len(ids)} ids")
    for i, x in enumerate(probs):
        _prob(x, f"{where}.probs[{i}]")
    rest = _prob(d["rest"], f"{where}.rest")
    split = d.get("split")
    if split is not None:
        _list(split, f"{where}.split", 2)
        if len(split) != 2:
            _fail(f"{where}.split", f"has {len(split)} values: expected two (tail where p >= q, where p < q)")
        a, b = (_prob(x, f"{where}.split[{i}]") for i, x in enumerate(split))
        if abs(a + b - rest) > MATCH_TOL:
            _fail(f"{where}.split", f"adds up to {a + b:.6g}, but rest is {rest:.6g}")
    total = math.fsum(probs) + rest
    if abs(total - 1) > MASS_TOL:
        _fail(where, f"adds up to {total:.6g} (kept probabilities plus rest): a distribution adds up to 1")
    return d


def _same_ids(a: dict, b: dict, where: str, names: str) -> None:
    if a["ids"] != b["ids"]:
        _fail(where, f"stores {names} over different ids: they must be over the same ids")


def _position(pos, where: str, vocab: int) -> dict:
    _obj(pos, where, ("draft_token", "p_draft", "q_draft", "ratio", "u", "status", "beta", "p", "q"),
         ("skip_tv",))
    tok = _id(pos["draft_token"], f"{where}.draft_token", vocab)
    p_x = _prob(pos["p_draft"], f"{where}.p_draft")
    q_x = _prob(pos["q_draft"], f"{where}.q_draft")
    ratio = _number(pos["ratio"], f"{where}.ratio", 0.0, math.inf, "a finite number (p(x)/q(x))")
    _number(pos["u"], f"{where}.u", 0.0, 1.0, "a uniform draw")
    if not isinstance(pos["status"], str):
        _fail(f"{where}.status", f"is {_show(pos['status'])}: expected 'accepted', 'rejected' or 'unused'")
    _prob(pos["beta"], f"{where}.beta")
    if pos.get("skip_tv") is not None:
        _prob(pos["skip_tv"], f"{where}.skip_tv")
    p = _dist(pos["p"], f"{where}.p", vocab)
    q = _dist(pos["q"], f"{where}.q", vocab)
    _same_ids(p, q, where, "p and q")
    if tok not in p["ids"]:
        _fail(f"{where}.draft_token", f"({tok}) is not among the stored ids of p and q")
    i = p["ids"].index(tok)
    if abs(p["probs"][i] - p_x) > MATCH_TOL:
        _fail(f"{where}.p_draft", f"is {p_x:.6g}, but p stores {p['probs'][i]:.6g} for the drafted token")
    if abs(q["probs"][i] - q_x) > MATCH_TOL:
        _fail(f"{where}.q_draft", f"is {q_x:.6g}, but q stores {q['probs'][i]:.6g} for the drafted token")
    if q_x <= 0:
        _fail(f"{where}.q_draft", "is 0: a drafted token was drawn from q, so q gives it mass")
    if abs(ratio - p_x / q_x) > MATCH_TOL * max(1.0, ratio):
        _fail(f"{where}.ratio", f"is {ratio:.6g}, but p(x)/q(x) = {p_x / q_x:.6g}")
    if p.get("split") is not None and q.get("split") is not None:
        beta = beta_of(Dist(**p), Dist(**q))   # the trace's own beta, on the stored view
        if abs(beta - pos["beta"]) > MATCH_TOL:
            _fail(f"{where}.beta", f"is {pos['beta']:.6g}, but sum(min(p, q)) over the stored rows is {beta:.6g}")
    return pos


def _round(r, where: str, k: int, ctx: dict) -> dict:
    """One round; ctx carries the vocabulary, the version, the rule, gamma and the tokens so far."""
    vocab, version = ctx["vocab"], ctx["version"]
    ending_key = ("ending",) if version >= 2 else ()
    _obj(r, where, ("index", "start", "gamma", "positions", "n_accepted", "end_token", "end_dist", "end_p",
                    "emitted", *ending_key),
         ("end_q", "residual_mass", "draft_seconds", "verify_seconds", "ending", "end_rule"))
    _equal(r["index"], k, f"{where}.index", "the round's place in the list")
    _equal(r["start"], ctx["tokens"], f"{where}.start", "the number of tokens the rounds before it emitted")
    g = _int(r["gamma"], f"{where}.gamma", 0, ctx["gamma"], "drafts this round (at most the run's gamma)")
    positions = _list(r["positions"], f"{where}.positions", g)
    if len(positions) != g:
        _fail(f"{where}.positions", f"has {len(positions)} drafts, but gamma is {g}")
    n = _int(r["n_accepted"], f"{where}.n_accepted", 0, g, "accepted drafts (at most the round's gamma)")
    for i, pos in enumerate(positions):
        _position(pos, f"{where}.positions[{i}]", vocab)
        expected = status_at(i, n)
        if pos["status"] != expected.value:
            _fail(f"{where}.positions[{i}].status", f"is {_show(pos['status'])}, but with n_accepted = {n} "
                                                     f"draft {i + 1} is {expected.value!r}")
        if expected is not Status.UNUSED:   # tested: the verdict must follow from the stored numbers
            accepted = expected is Status.ACCEPTED
            if ctx["rule"] is Rule.GREEDY_MATCH:
                top = max(pos["p"]["probs"])
                agrees = pos["p_draft"] >= top - 1e-7 if accepted else pos["p_draft"] <= top
            elif ctx["rule"] is Rule.ACCEPT_ALL:
                agrees = accepted
            else:
                agrees = (pos["u"] < pos["ratio"]) == accepted
            if not agrees:
                _fail(f"{where}.positions[{i}]", f"is {expected.value}, but its u = {pos['u']:.6g} and p/q = "
                                                 f"{pos['ratio']:.6g} say otherwise")
    rejected = n < g
    end = _id(r["end_token"], f"{where}.end_token", vocab)
    end_dist = _dist(r["end_dist"], f"{where}.end_dist", vocab)
    end_p = _dist(r["end_p"], f"{where}.end_p", vocab)
    _same_ids(end_dist, end_p, where, "end_dist and end_p")
    end_q = r.get("end_q")
    if end_q is not None:
        _dist(end_q, f"{where}.end_q", vocab)
        _same_ids(end_dist, end_q, where, "end_dist and end_q")
    if end not in end_dist["ids"]:
        _fail(f"{where}.end_token", f"({end}) is not among the stored ids of end_dist")
    if end_dist["probs"][end_dist["ids"].index(end)] <= 0:
        _fail(f"{where}.end_token", f"({end}) has probability 0 in end_dist, so it cannot have been drawn from it")
    if version >= 2:
        valid = [e.value for e in Ending]
        if r["ending"] not in valid:
            _fail(f"{where}.ending", f"is {_show(r['ending'])}: expected one of {', '.join(map(repr, valid))}")
        expected_end = Ending.of(g, rejected, ctx["rule"]).value
        if r["ending"] != expected_end:
            _fail(f"{where}.ending", f"is {r['ending']!r}, but a round with {g} drafts and {n} accepted under the "
                                     f"{ctx['rule'].value!r} rule ends {expected_end!r}")
        if (end_q is not None) != rejected:
            _fail(f"{where}.end_q", "must be stored exactly when a draft was rejected")
    rm = r.get("residual_mass")
    if rm is not None:
        _prob(rm, f"{where}.residual_mass")
        if version >= 2 and r["ending"] != Ending.RESIDUAL.value:
            _fail(f"{where}.residual_mass", "is stored, but only a round ended by the residual has one")
        if end_q is not None and end_p.get("split") is not None and end_q.get("split") is not None:
            mass = residual_mass_of(Dist(**end_p), Dist(**end_q))   # the trace's own residual mass
            if abs(mass - rm) > MATCH_TOL:
                _fail(f"{where}.residual_mass", f"is {rm:.6g}, but sum(max(0, p - q)) over the stored rows is "
                                                f"{mass:.6g}")
    elif version >= 2 and r["ending"] == Ending.RESIDUAL.value:
        _fail(f"{where}", "ended by the residual but stores no residual_mass")
    emitted = _ids(r["emitted"], f"{where}.emitted", vocab, n + 1)
    decided = [pos["draft_token"] for pos in positions[:n]] + [end]
    if not emitted or emitted != decided[:len(emitted)]:
        _fail(f"{where}.emitted", f"is {emitted[:8]}, but the round's accepted drafts then its drawn token are "
                                  f"{decided[:8]} (emitted is a non-empty prefix of them)")
    for key in ("draft_seconds", "verify_seconds"):
        if key in r:
            _number(r[key], f"{where}.{key}", 0.0, 1e7, "a time in seconds")
    ctx["tokens"] += len(emitted)
    ctx["drafted"] += g
    ctx["tested"] += min(n + 1, g)
    ctx["accepted"] += n
    return r


_SETTINGS_KEYS = ("mode", "gamma", "max_new_tokens", "sampling", "seed", "rule", "drafter", "skip_adjustment")


def _settings(s, where: str):
    _obj(s, where, (), _SETTINGS_KEYS, extra_scalars=False)
    sampling = s.get("sampling", {})
    _obj(sampling, f"{where}.sampling", (), ("temperature", "top_k", "top_p"), extra_scalars=False)
    for key in ("temperature", "top_p"):
        if key in sampling:
            _number(sampling[key], f"{where}.sampling.{key}", 0.0, 100.0)
    if "top_k" in sampling:
        _int(sampling["top_k"], f"{where}.sampling.top_k", 0, MAX_ID)
    for key in ("mode", "rule", "drafter"):
        if key in s and not isinstance(s[key], str):
            _fail(f"{where}.{key}", f"is {_show(s[key])}: expected text")
    if "rule" in s and s["rule"] not in [r.value for r in Rule]:
        _fail(f"{where}.rule", f"is {_show(s['rule'])}: expected one of {', '.join(repr(r.value) for r in Rule)}")
    for key in ("gamma", "max_new_tokens", "seed"):
        if key in s and not is_whole(s[key]):
            _fail(f"{where}.{key}", f"is {_show(s[key])}: expected a whole number")
    try:
        settings = RunSettings.from_dict(s)
        SamplingConfig(**sampling)
        settings.validate()
    except (TypeError, ValueError) as err:
        _fail(where, f"are not valid: {err}")
    return settings


_STATS_COUNTS = ("new_tokens", "rounds", "drafted", "tested", "accepted", "target_forwards", "draft_forwards")
_STATS_RATES = ("acceptance_rate", "accepted_per_drafted", "expected_acceptance", "skip_tv_mean")


def _stats(s, where: str, gen: dict, ctx: dict) -> None:
    _obj(s, where, ())
    for key, value in s.items():
        if key == "stopped":
            _text(value, f"{where}.stopped", 100)
        elif key in _STATS_COUNTS:
            _int(value, f"{where}.{key}", 0, MAX_ID)
        elif key in _STATS_RATES:
            _prob(value, f"{where}.{key}")
        else:
            _number(value, f"{where}.{key}", 0.0, 1e9)
    if not ctx["speculative"]:
        return
    counts = {"new_tokens": len(gen["token_ids"]), "rounds": len(gen["rounds"])}
    if gen["rounds"]:
        counts.update(drafted=ctx["drafted"], tested=ctx["tested"], accepted=ctx["accepted"])
    for key, value in counts.items():
        if key in s and s[key] != value:
            _fail(f"{where}.{key}", f"is {s[key]}, but the trace holds {value}")
    if gen["rounds"] and "acceptance_rate" in s and ctx["tested"]:
        rate = ctx["accepted"] / ctx["tested"]
        if abs(s["acceptance_rate"] - rate) > MATCH_TOL:
            _fail(f"{where}.acceptance_rate", f"is {s['acceptance_rate']:.6g}, but the rounds give "
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
    except _Bad as err:
        raise ValueError(str(err)) from None
    except RecursionError:
        raise ValueError("the trace is nested too deeply") from None


def _check(d, lim: ImportLimits) -> None:
    if not isinstance(d, dict):
        _fail("the file", f"is {_show(d)}: a specdec trace is a JSON object")
    if d.get("schema") != SCHEMA:
        _fail("the file", f"is not a specdec trace (its schema is {_show(d.get('schema'))}, not {SCHEMA!r})")
    version = d.get("version")
    if not is_whole(version) or version not in VERSIONS:
        shown = f"the string {version!r}" if isinstance(version, str) else _show(version)
        _fail("version", f"is {shown}: this specdec reads trace versions "
                         f"{' and '.join(map(str, VERSIONS))} (a whole number, not text)")
    _obj(d, "the trace", _TOP, ("token_text", "eos_token_id", "title", "notes"))
    models = _obj(d["models"], "models", ())
    vocab = MAX_ID + 1
    if "vocab_size" in models:
        vocab = _int(models["vocab_size"], "models.vocab_size", 1, MAX_ID)
    if models.get("context_length") is not None:
        _int(models["context_length"], "models.context_length", 1, MAX_ID)
    for key in ("label", "target", "draft", "device", "dtype"):
        if key in models:
            _text(models[key], f"models.{key}", 1000)
    _text(d["prompt"], "prompt", lim.max_prompt_chars * 4)   # a typed prompt, or the text of given ids
    _ids(d["prompt_ids"], "prompt_ids", vocab, lim.max_prompt_tokens, lim.name("max_prompt_tokens"))
    token_ids = _ids(d["token_ids"], "token_ids", vocab, lim.max_tokens, lim.name("max_tokens"))
    _text(d["text"], "text", MAX_TEXT * 10)
    settings = _settings(d["settings"], "settings")
    if len(token_ids) > settings.max_new_tokens:
        _fail("token_ids", f"has {len(token_ids)} tokens, but the run asked for at most {settings.max_new_tokens}")
    if d.get("eos_token_id") is not None:
        _id(d["eos_token_id"], "eos_token_id", vocab)
    rounds = _list(d["rounds"], "rounds", lim.max_tokens, lim.name("max_tokens"))
    ctx = dict(vocab=vocab, version=version, rule=Rule(settings.rule), gamma=settings.gamma, tokens=0, drafted=0,
               tested=0, accepted=0, speculative=settings.speculative)
    if rounds and not settings.speculative:
        _fail("rounds", "are stored, but the run was autoregressive (it has no rounds)")
    for k, r in enumerate(rounds):
        _round(r, f"rounds[{k}]", k, ctx)
    if rounds:
        emitted = [t for r in rounds for t in r["emitted"]]
        if emitted != token_ids:
            first = next((i for i, (a, b) in enumerate(zip(emitted, token_ids)) if a != b),
                         min(len(emitted), len(token_ids)))
            _fail("token_ids", f"differ from the tokens the rounds emitted (from token {first + 1} on): the "
                               "generated tokens are the rounds' emitted tokens in order")
    _stats(d["stats"], "stats", d, ctx)
    token_text = d.get("token_text", {})
    _obj(token_text, "token_text", ())
    for key, value in token_text.items():
        if not re.fullmatch(r"\d{1,10}", key) or int(key) >= vocab:
            _fail("token_text", f"has the key {_show(key)}: keys are token ids from 0 to {vocab - 1}")
        _text(value, f"token_text[{key!r}]", 1000)
    if d.get("title") is not None:
        _text(d["title"], "title")
    notes = d.get("notes", {})
    if notes is not None:
        _obj(notes, "notes", ())
        for key, value in notes.items():
            if not re.fullmatch(r"\d{1,10}", key) or int(key) >= max(1, len(rounds)):
                _fail("notes", f"has the key {_show(key)}: keys are round indices from 0 to {max(0, len(rounds) - 1)}")
            _text(value, f"notes[{key!r}]")
