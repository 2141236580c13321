"""Every value the importers read from a model directory's JSON files, checked where it is read:
its type, its range, and that each token id numbers a row of the model and the piece it
stands for.

A value that passes is one every later command takes: the checkpoint's special ids, its piece
tables and its config are built from these alone, so an import that passes here writes a
checkpoint that `tmt translate` loads. Each refusal is one line naming the file and the key.

config.json is checked twice: as written, before transformers reads it (whose own checks
raise tracebacks or only log), and as transformers resolved it (its defaults filled in).
"""

from __future__ import annotations

import json
import numbers
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformer_mt.config.model import MAX_WIDTH
from transformer_mt.errors import TmtError

SHOWN_CHARS = 80  # of a value quoted in a message


COUNT_LIMIT = 2**31  # a size above it is no model's (and would overflow the tensors sized by it)


def _count(value: Any) -> bool:
    return _is_int(value) and 0 < value < COUNT_LIMIT


def _probability(value: Any) -> bool:
    return _is_real(value) and 0 <= value < 1


def _rate(value: Any) -> bool:
    return _is_real(value) and 0 <= value <= 1


def _flag(value: Any) -> bool:
    return isinstance(value, bool)


def _name(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def is_id(value: Any) -> bool:
    """Whether `value` can be a token id: an int (not a bool), at least 0."""
    return _is_int(value) and value >= 0


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


@dataclass(frozen=True)
class Kind:
    """What a key's value must be: the test it passes, and the words a refusal uses."""

    test: Callable[[Any], bool]
    what: str  # "must be <what>"
    nullable: bool = False  # whether null passes


COUNT = Kind(_count, "a positive integer below 2**31")
# A width or a position table's length: a model of this toolkit is at most MAX_WIDTH wide, and
# a larger value would have transformers build (and allocate) a model no weights file fits.
WIDTH = Kind(
    lambda value: _count(value) and value <= MAX_WIDTH, f"a positive integer <= {MAX_WIDTH}"
)
PROBABILITY = Kind(_probability, "a number in [0, 1)")
RATE = Kind(_rate, "a number in [0, 1]")
FLAG = Kind(_flag, "true or false")
NAME = Kind(_name, "a non-empty string")
TOKEN_ID = Kind(is_id, "one token id (an integer >= 0)", nullable=True)
OPTIONAL_COUNT = Kind(_count, "a positive integer below 2**31, or null", nullable=True)
OPTIONAL_FLAG = Kind(_flag, "true, false or null", nullable=True)
OPTIONAL_TEXT = Kind(lambda value: isinstance(value, str), "a string or null", nullable=True)

# The config.json keys both readers (and `hf_bart.stack_settings`) read.
_STACK_KEYS: dict[str, Kind] = {
    "model_type": NAME,
    "d_model": WIDTH,
    "encoder_layers": COUNT,
    "decoder_layers": COUNT,
    "encoder_attention_heads": COUNT,
    "decoder_attention_heads": COUNT,
    "encoder_ffn_dim": WIDTH,
    "decoder_ffn_dim": WIDTH,
    "max_position_embeddings": WIDTH,
    "vocab_size": COUNT,
    "dropout": PROBABILITY,
    "attention_dropout": PROBABILITY,
    "activation_dropout": PROBABILITY,
    "encoder_layerdrop": RATE,
    "decoder_layerdrop": RATE,
    "activation_function": NAME,
    "scale_embedding": FLAG,
    "tie_word_embeddings": FLAG,
    "pad_token_id": TOKEN_ID,
    "eos_token_id": TOKEN_ID,
    "decoder_start_token_id": TOKEN_ID,
    # BART-era keys that the config checks compare with the value the architecture computes.
    "normalize_before": FLAG,
    "add_final_layer_norm": FLAG,
    "normalize_embedding": FLAG,
    "layernorm_embedding": FLAG,
    "static_position_embeddings": FLAG,
    "add_bias_logits": FLAG,
}

# model_type -> the config.json keys its reader reads.
CONFIG_KEYS: dict[str, dict[str, Kind]] = {
    "marian": {
        **_STACK_KEYS,
        "decoder_vocab_size": OPTIONAL_COUNT,
        "share_encoder_decoder_embeddings": FLAG,
    },
    "m2m_100": _STACK_KEYS,
}

# tokenizer_config.json keys the readers read: Marian's (MarianTokenizer's settings) and
# NLLB's and M2M100's default direction.
TOKENIZER_KEYS: dict[str, Kind] = {
    "separate_vocabs": OPTIONAL_FLAG,
    "source_lang": OPTIONAL_TEXT,
    "target_lang": OPTIONAL_TEXT,
    "src_lang": OPTIONAL_TEXT,
    "tgt_lang": OPTIONAL_TEXT,
}

# The ids a reader cannot do without once transformers has filled in its defaults (Marian's
# decoder starts from its pad id when decoder_start_token_id is null).
REQUIRED_IDS = {
    "marian": ("pad_token_id", "eos_token_id"),
    "m2m_100": ("pad_token_id", "eos_token_id", "decoder_start_token_id"),
}


def shown(value: Any) -> str:
    """`value` as JSON writes it (null, true, "0", [0, 1]), unprintable characters escaped (a
    piece may hold a line break), cut short."""
    text = json.dumps(value, ensure_ascii=False, default=repr)
    text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


def check_values(values: Mapping[str, Any], kinds: Mapping[str, Kind], path: Path) -> None:
    """Raise TmtError naming the first key of `values` (read from `path`) whose value is not
    of its kind in `kinds`; keys absent from `kinds` are not read, and pass."""
    for key, value in values.items():
        if key not in kinds:
            continue
        kind = kinds[key]
        if not (value is None and kind.nullable) and not kind.test(value):
            raise TmtError(f"{path}: {key} must be {kind.what}, got {shown(value)}")


def check_resolved_config(hf_config: Any, model_type: str, path: Path) -> None:
    """The config as transformers resolved it: every key read is of its kind, the ids the
    reader needs are set, and the heads divide the width.

    Raises:
        TmtError: naming `path` and the key.
    """
    kinds = CONFIG_KEYS[model_type]
    resolved = {key: getattr(hf_config, key) for key in kinds if hasattr(hf_config, key)}
    check_values(resolved, kinds, path)
    for key in REQUIRED_IDS[model_type]:
        if getattr(hf_config, key) is None:
            raise TmtError(f"{path}: {key} is null; the model needs this token id")
    for key in ("encoder_attention_heads", "decoder_attention_heads"):
        heads = getattr(hf_config, key)
        if hf_config.d_model % heads:
            raise TmtError(
                f"{path}: d_model={hf_config.d_model} is not a multiple of {key}={heads}"
            )


def check_ids_in_rows(
    named_ids: Iterable[tuple[str, int | None]], rows: int, size_key: str, path: Path
) -> None:
    """Raise TmtError naming the first (key, id) of `named_ids` (from `path`) that numbers no
    row of a table of `rows` (the config's `size_key`); None passes."""
    for key, token in named_ids:
        if token is not None and token >= rows:
            raise TmtError(f"{path}: {key}={token} is outside the vocabulary ({size_key}={rows})")


def check_vocab(vocab: Mapping[str, Any], rows: int, path: Path) -> dict[str, int]:
    """`vocab` (piece -> id, read from `path`) when every id is an id of one piece only and
    numbers one of the model's `rows` embedding rows (rows may number no piece).

    Raises:
        TmtError: naming `path` and the first piece whose id is not an int >= 0, is another
            piece's, or is past the rows.
    """
    owner: dict[int, str] = {}
    for piece, token in vocab.items():
        if not is_id(token):
            raise TmtError(
                f"{path}: the id of {shown(piece)} must be an integer >= 0, got {shown(token)}"
            )
        if token >= rows:
            raise TmtError(
                f"{path}: {shown(piece)} has id {token}; the model's embeddings have {rows} rows"
            )
        if token in owner:
            raise TmtError(
                f"{path}: {shown(owner[token])} and {shown(piece)} share id {token}; "
                "each id must stand for one piece"
            )
        owner[token] = piece
    return dict(vocab)


def check_special_pieces(
    expected: Iterable[tuple[str, str | None, int | None]],
    vocab: Mapping[str, int],
    vocab_path: Path,
    config_path: Path,
) -> None:
    """Raise TmtError unless each (piece, config key, id) of `expected` names a piece of
    `vocab` (read from `vocab_path`) numbered as the config's key says (key None: any id)."""
    for piece, key, token in expected:
        if piece not in vocab:
            raise TmtError(f"{vocab_path}: no {piece} piece; the model's tokenizer needs it")
        if key is not None and vocab[piece] != token:
            found = next((p for p, i in vocab.items() if i == token), None)
            what = "no piece" if found is None else shown(found)
            raise TmtError(
                f"{config_path}: {key}={token} is {what} in {vocab_path.name}, "
                f"where {piece} is {vocab[piece]}"
            )


def banned_words(generation: Mapping[str, Any], rows: int, path: Path) -> list[int]:
    """The single tokens of `generation`'s `bad_words_ids` (read from `path`): a list of
    non-empty lists of ids, each id within the target vocabulary of `rows` entries.
    Sequences of several tokens are banned by no search of ours, and left out.

    Raises:
        TmtError: naming `path`, `bad_words_ids` and the first entry that is not so.
    """
    value = generation.get("bad_words_ids")
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(ids, list) and ids for ids in value):
        raise TmtError(
            f"{path}: bad_words_ids must be a list of non-empty lists of token ids, "
            f"got {shown(value)}"
        )
    for i, ids in enumerate(value):
        for j, token in enumerate(ids):
            if not is_id(token):
                raise TmtError(
                    f"{path}: bad_words_ids[{i}][{j}] must be a token id (an integer >= 0), "
                    f"got {shown(token)}"
                )
            if token >= rows:
                raise TmtError(
                    f"{path}: bad_words_ids[{i}][{j}]={token} is outside the target "
                    f"vocabulary of {rows} entries"
                )
    return [ids[0] for ids in value if len(ids) == 1]
