"""NLLB-200 and M2M100 directories (`model_type` m2m_100): weights, tokenizer, special ids.

Both segment with one SentencePiece model (`sentencepiece.bpe.model`) and number its pieces
past fairseq's four specials (<s> 0, <pad> 1, </s> 2, <unk> 3), with the language codes
(`fra_Latn`, M2M100's `__fr__`) as added tokens. The numbering is read from the model's own
tokenizer through transformers (`get_vocab`), so the ids are the ones it was trained with.

Their conventions, which the checkpoint records (`SpecialTokens`): a source is its language's
code, the text, </s>; the decoder starts from </s> (`decoder_start_token_id`), and its first
token is forced to the target language's code. The tokenizer's `src_lang` / `tgt_lang` become
the checkpoint's default direction (`data.src_lang` / `data.tgt_lang`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformer_mt.data.specials import SpecialTokens
from transformer_mt.errors import TmtError, one_line
from transformer_mt.interop.hf_m2m100 import SPM_FILE, check_m2m100_config, from_m2m100_weights
from transformer_mt.interop.import_files import check_file, present, read_json
from transformer_mt.interop.import_generation import read_generation
from transformer_mt.interop.import_parts import ImportedModel, piece_tokenizer
from transformer_mt.interop.import_values import (
    TOKENIZER_KEYS,
    check_ids_in_rows,
    check_special_pieces,
    check_values,
    check_vocab,
    shown,
)
from transformer_mt.interop.import_weights import read_weights

# The tokenizer's settings files, read before transformers reads them so that a damaged one is
# named (the tokenizer itself may be tokenizer.json or the SentencePiece model).
_SETTINGS_FILES = ("tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")
# The tokenizers whose conventions the checkpoint records (a source is its language's code,
# the text, </s>), slow and fast.
_TOKENIZER_CLASSES = ("NllbTokenizer", "M2M100Tokenizer")


def read_m2m100(directory: Path, hf_config: Any) -> ImportedModel:
    """The NLLB or M2M100 model in `directory` (its `hf_config` already read and checked).

    Raises:
        TmtError: a missing or unreadable tokenizer, an unsupported option (by its config
            key), a vocabulary or special id that does not fit the model, or weights that
            are damaged or do not fit the config.
    """
    from transformers import M2M100ForConditionalGeneration

    check_m2m100_config(hf_config)  # before reading megabytes of weights
    rows, pad = hf_config.vocab_size, hf_config.pad_token_id
    ids = ("pad_token_id", "eos_token_id", "decoder_start_token_id")
    named = [(key, getattr(hf_config, key)) for key in ids]
    check_ids_in_rows(named, rows, "vocab_size", directory / "config.json")
    hf_tokenizer = _tokenizer(directory)
    vocab = _vocabulary(directory, hf_tokenizer, hf_config)
    special = set(map(str, hf_tokenizer.all_special_tokens))
    tags = _language_tags(sorted(special - _core_specials(hf_tokenizer)), vocab, directory)
    src_lang, tgt_lang = (
        _default_language(hf_tokenizer, key, tags, directory) for key in ("src_lang", "tgt_lang")
    )
    generation = read_generation(directory, pad, rows)
    state = read_weights(M2M100ForConditionalGeneration, directory, hf_config)
    converted = from_m2m100_weights(hf_config, state)
    tokenizer = piece_tokenizer(
        directory / SPM_FILE, vocab, converted.tgt_vocab_size, frozenset(special)
    )
    specials = SpecialTokens(
        pad=pad,
        unk=vocab[str(hf_tokenizer.unk_token)],
        bos=hf_config.decoder_start_token_id,
        eos=hf_config.eos_token_id,
        never=generation.never,
        language_tags=tags,
        source_tag="source",
        target_tag=True,
    )
    return ImportedModel(converted, tokenizer, tokenizer, specials, src_lang, tgt_lang, generation)


def _tokenizer(directory: Path) -> Any:
    """The model's own tokenizer, through transformers, its files checked first."""
    from transformers import AutoTokenizer

    check_file(directory / SPM_FILE)
    for name in _SETTINGS_FILES[1:]:
        read_json(directory / name, required=False)
    settings_path = directory / _SETTINGS_FILES[0]
    settings = read_json(settings_path, required=False)
    check_values(settings, TOKENIZER_KEYS, settings_path)
    _check_m2m100_vocab(directory, settings.get("tokenizer_class"))
    try:
        hf_tokenizer = AutoTokenizer.from_pretrained(directory)
    except Exception as err:  # transformers and tokenizers raise many kinds on damaged files
        raise TmtError(
            f"{directory}: transformers cannot read its tokenizer files "
            f"({type(err).__name__}: {one_line(err)})"
        ) from None
    if not type(hf_tokenizer).__name__.startswith(_TOKENIZER_CLASSES):
        raise TmtError(
            f"{settings_path}: tokenizer_class {shown(settings.get('tokenizer_class'))} is not "
            f"NLLB's or M2M100's (transformers reads a {type(hf_tokenizer).__name__})"
        )
    return hf_tokenizer


def _check_m2m100_vocab(directory: Path, named: Any) -> None:
    """Name vocab.json when the tokenizer transformers would read needs it and it is missing
    (transformers fails on the missing path with a TypeError that names no file).

    M2M100Tokenizer numbers pieces with vocab.json; transformers reads it when
    tokenizer_config.json names it, and also when that file is missing or names no
    tokenizer_class (config.json's model_type, m2m_100, then decides). NLLB's names
    NllbTokenizer, which reads tokenizer.json or the SentencePiece model.

    Raises:
        TmtError: naming tokenizer_config.json (no class named) or vocab.json.
    """
    vocab = directory / "vocab.json"
    if present(vocab) or (named and not str(named).startswith("M2M100")):
        return
    if named:
        raise TmtError(
            f"{vocab}: missing; {named}, tokenizer_config.json's tokenizer_class, "
            "numbers the pieces with it"
        )
    settings_path = directory / _SETTINGS_FILES[0]
    state = "names no tokenizer_class" if present(settings_path) else "missing"
    raise TmtError(
        f"{settings_path}: {state}, so transformers reads the tokenizer as M2M100's, which "
        "needs vocab.json (missing too); NLLB's names NllbTokenizer"
    )


def _vocabulary(directory: Path, hf_tokenizer: Any, hf_config: Any) -> dict[str, int]:
    """The tokenizer's numbering (NLLB's tokenizer.json, M2M100's vocab.json, or the
    SentencePiece model's shifted past fairseq's specials), checked against the model's rows
    and the config's special ids."""
    numbered_in = ("tokenizer.json", "vocab.json")  # NLLB's fast tokenizer, M2M100's
    source = next((directory / n for n in numbered_in if present(directory / n)), None)
    source = source or directory / SPM_FILE
    vocab = check_vocab(hf_tokenizer.get_vocab(), hf_config.vocab_size, source)
    expected = []
    for name, key in (
        ("eos_token", "eos_token_id"),
        ("pad_token", "pad_token_id"),
        ("unk_token", None),
    ):
        piece = getattr(hf_tokenizer, name, None)
        if not piece:
            raise TmtError(f"{directory / 'tokenizer_config.json'}: {name} is not set")
        expected.append((str(piece), key, key and getattr(hf_config, key)))
    check_special_pieces(expected, vocab, source, directory / "config.json")
    return vocab


def _core_specials(hf_tokenizer: Any) -> set[str]:
    """The special tokens that are not language codes."""
    names = ("bos_token", "eos_token", "unk_token", "pad_token", "mask_token", "sep_token")
    names += ("cls_token",)
    return {str(getattr(hf_tokenizer, n)) for n in names if getattr(hf_tokenizer, n, None)}


def _language_tags(codes: list[str], vocab: dict[str, int], directory: Path) -> dict[str, int]:
    """Each language code (as users write it) -> the id of its token."""
    for code in codes:
        if code not in vocab:
            raise TmtError(f"{directory}: the tokenizer's special token {shown(code)} has no id")
    return {_code(c): vocab[c] for c in codes}


def _default_language(hf_tokenizer: Any, key: str, tags: dict[str, int], directory: Path) -> str:
    """The tokenizer's `key` (src_lang, tgt_lang) as the checkpoint's default direction: one of
    the model's language codes ("src" / "tgt" when it has none)."""
    token = getattr(hf_tokenizer, key, None)
    if not token:
        return "src" if key == "src_lang" else "tgt"
    code = _code(str(token))
    if code not in tags:
        known = ", ".join(sorted(tags)[:5]) + (", ..." if len(tags) > 5 else "")
        raise TmtError(
            f"{directory / 'tokenizer_config.json'}: {key} {shown(str(token))} is not one of the "
            f"model's language codes ({known or 'none'})"
        )
    return code


def _code(token: str) -> str:
    """A language code as users write it: NLLB's as it is (`fra_Latn`), M2M100's `__fr__` as
    `fr`."""
    return token.strip("_") if token.startswith("__") and token.endswith("__") else token
