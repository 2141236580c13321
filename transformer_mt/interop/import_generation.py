"""A model's own search settings, those `generate` uses by default, as the checkpoint's decode
section: `tmt translate` on an imported model then searches as transformers' `generate` does
without arguments, as far as our search can say it, and names the rest (`Generation.notes`).
The same table read backwards (`generation_keys`) is the generation config `tmt export --format
hf` writes, so that an export searches as its checkpoint does.

Where `generate` finds them: generation_config.json when the directory has one (that file
alone), else the generation keys of config.json; what neither sets takes transformers' global
default (`HF_DEFAULTS`, as `GenerationConfig._get_default_generation_params` gives them).

How they map onto `DecodeConfig`, with |y| the tokens generated, EOS included (search/__init__):
transformers counts the decoder's start token in `max_length` and `min_length`, we do not, and
its beam search ranks a finished hypothesis by log P(y|x) / |y| ** length_penalty, the same |y|.

    num_beams = K            beam_size = K (1: greedy search)
    length_penalty = p       length_norm "power" (lp = |y| ** p), length_penalty = p
    max_length = L           max_len_a = 0, max_len_b = L - 1
    max_new_tokens = N       max_len_b = N (`generate` prefers it to max_length; with neither
                             set, it adds 20 tokens: max_len_b = 20)
    min_length = M           min_len = max(M - 1, min_new_tokens, 0)
    no_repeat_ngram_size = n no_repeat_ngram_size = n (the same rule: search/repeats.py)
    bad_words_ids            its single tokens are never generated (`SpecialTokens.never`;
                             at export, also the unknown piece under disable_unk)
    early_stopping           True: "k_finished", False: "heuristic", "never": "never" (the
                             same rules, `DecodeConfig`)

A note names each setting our search follows otherwise (`_notes`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformer_mt.config import DecodeConfig
from transformer_mt.config.decode import DECODE_RANGES
from transformer_mt.interop.import_files import present, read_json
from transformer_mt.interop.import_values import (
    OPTIONAL_COUNT,
    OPTIONAL_FLAG,
    Kind,
    banned_words,
    check_values,
    is_id,
    shown,
)

# transformers' global defaults of the settings read here (what `generate` uses when neither
# file sets one).
HF_DEFAULTS: dict[str, Any] = {
    "num_beams": 1,
    "length_penalty": 1.0,
    "max_length": None,  # none set: 20 new tokens (`DEFAULT_NEW_TOKENS`)
    "max_new_tokens": None,
    "min_length": 0,
    "min_new_tokens": None,
    "early_stopping": False,
    "do_sample": False,
    "renormalize_logits": False,
    "forced_eos_token_id": None,
    "no_repeat_ngram_size": 0,
    "repetition_penalty": 1.0,
}

# The tokens `generate` adds when neither max_length nor max_new_tokens is set (a default
# max_length of 20 that does not count the decoder's start token).
DEFAULT_NEW_TOKENS = 20

_LOW, _HIGH = DECODE_RANGES["length_penalty"]


# transformers' `early_stopping` values and the rules of ours that are theirs.
EARLY_STOPPING = {True: "k_finished", False: "heuristic", "never": "never"}


def _penalty(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and _LOW <= value <= _HIGH


# The generation keys read here, each as the key's value must be (null: transformers' default).
GENERATION_KEYS: dict[str, Kind] = {
    "num_beams": OPTIONAL_COUNT,
    "length_penalty": Kind(_penalty, f"a number in [{_LOW:g}, {_HIGH:g}] or null", True),
    "max_length": OPTIONAL_COUNT,
    "max_new_tokens": OPTIONAL_COUNT,
    "min_length": Kind(is_id, "an integer >= 0 or null", True),
    "min_new_tokens": Kind(is_id, "an integer >= 0 or null", True),
    "early_stopping": Kind(
        lambda value: isinstance(value, bool) or value == "never",
        'true, false, "never" or null',
        True,
    ),
    "do_sample": OPTIONAL_FLAG,
    "renormalize_logits": OPTIONAL_FLAG,
    "no_repeat_ngram_size": Kind(is_id, "an integer >= 0 or null", True),
}


@dataclass(frozen=True)
class Generation:
    """The model's search settings as ours: the decode section, the ids never generated, and
    one line for each setting our search follows otherwise."""

    decode: DecodeConfig
    never: tuple[int, ...]
    notes: tuple[str, ...]


def read_generation(directory: Path, pad: int, rows: int) -> Generation:
    """The search settings `generate` uses for the model in `directory` (a target vocabulary
    of `rows` entries, `pad` its padding id: never generated, as a translation holds none).

    Raises:
        TmtError: generation_config.json (or config.json) is unreadable, or a setting read
            here is of the wrong type or range, naming the file and the key.
    """
    path = directory / "generation_config.json"
    if not present(path):
        path = directory / "config.json"
    values = read_json(path)
    check_values(values, GENERATION_KEYS, path)
    banned = banned_words(values, rows, path)
    settings = dict(HF_DEFAULTS)
    settings.update({key: v for key, v in values.items() if key in settings and v is not None})
    never = tuple(dict.fromkeys([pad, *banned]))
    return Generation(decode_config(settings), never, _notes(settings, values, path))


def decode_config(settings: Mapping[str, Any]) -> DecodeConfig:
    """The decode section that searches as `generate` with `settings` (every key of
    `HF_DEFAULTS`) does, in the module's table."""
    max_len_b = settings["max_new_tokens"] or DEFAULT_NEW_TOKENS
    if settings["max_new_tokens"] is None and settings["max_length"] is not None:
        max_len_b = settings["max_length"] - 1
    min_len = max(settings["min_length"] - 1, settings["min_new_tokens"] or 0, 0)
    return DecodeConfig(
        beam_size=settings["num_beams"],
        length_norm="power",
        length_penalty=float(settings["length_penalty"]),
        early_stopping=EARLY_STOPPING[settings["early_stopping"]],
        max_len_a=0.0,
        max_len_b=min(max_len_b, int(DECODE_RANGES["max_len_b"][1])),
        min_len=min(min_len, int(DECODE_RANGES["min_len"][1])),
        no_repeat_ngram_size=min(
            settings["no_repeat_ngram_size"], int(DECODE_RANGES["no_repeat_ngram_size"][1])
        ),
    )


def generation_keys(
    decode: DecodeConfig, max_positions: int, never: tuple[int, ...], unk: int
) -> tuple[dict[str, Any], list[str]]:
    """The generation settings under which `generate` searches as `decode` does (the module's
    table read backwards, for `tmt export --format hf`) for a model that never produces the
    ids `never` and whose unknown piece is `unk`, and one line for each setting it cannot
    say: the GNMT penalty (written as log P / |y|), a length limit that grows with the
    source (written as the position table's `max_positions`, less the start token) and
    `replace_unk` (left out)."""
    banned = (*never, unk) if decode.disable_unk else never
    keys: dict[str, Any] = {
        "num_beams": decode.beam_size,
        "early_stopping": {rule: value for value, rule in EARLY_STOPPING.items()}[
            decode.early_stopping
        ],
        "min_new_tokens": decode.min_len,
        "do_sample": decode.sampling,
        "forced_eos_token_id": None,  # ours keeps the token chosen at the limit
        "length_penalty": {"power": decode.length_penalty, "none": 0.0}.get(
            decode.length_norm, 1.0
        ),
        "no_repeat_ngram_size": decode.no_repeat_ngram_size,
        # transformers' generate then never produces them either (OPUS-MT ships [[pad]]).
        "bad_words_ids": [[i] for i in banned] or None,
    }
    notes = []
    if decode.length_norm == "gnmt":
        notes.append(
            f"length_norm gnmt (alpha {decode.length_penalty:g}): generate has no GNMT "
            "penalty; written as length_penalty 1 (log P / |y|, our length_norm average)"
        )
    if decode.max_len_a == 0:
        keys["max_new_tokens"] = decode.max_len_b
    else:
        keys["max_length"] = max_positions
        notes.append(
            f"max_len_a={decode.max_len_a:g}: generate's length limit does not grow with the "
            f"source; written as max_length {max_positions} (the position table)"
        )
    if decode.replace_unk:
        notes.append(
            "replace_unk: generate has no setting that copies a source piece for an unknown "
            "one; its translations keep the unknown piece"
        )
    if decode.sampling:
        keys.update(top_k=decode.top_k, top_p=decode.top_p, temperature=decode.temperature)
    return keys, notes


def _notes(settings: Mapping[str, Any], values: Mapping[str, Any], path: Path) -> tuple[str, ...]:
    """One line per setting of `generate` that our search does not follow as it is."""
    notes = []
    beams = settings["num_beams"]
    if settings["do_sample"]:
        notes.append("do_sample=true: ours searches; sample with decode.sampling")
    if beams > 1 and settings["renormalize_logits"]:
        notes.append(
            "renormalize_logits=true: generate renormalises after banning tokens; "
            "ours keeps the model's log-probs"
        )
    if settings["forced_eos_token_id"] is not None:
        notes.append(
            "forced_eos_token_id: generate ends a translation cut at max_length with EOS; "
            "ours keeps the token the search chose"
        )
    if settings["repetition_penalty"] != HF_DEFAULTS["repetition_penalty"]:
        value = shown(settings["repetition_penalty"])
        notes.append(f"repetition_penalty={value}: not applied (our search has no such rule)")
    if any(isinstance(ids, list) and len(ids) > 1 for ids in values.get("bad_words_ids") or []):
        notes.append("bad_words_ids of several tokens: not banned (single tokens are)")
    return tuple(f"{path.name}: {note}" for note in notes)
