"""OPUS-MT and other `MarianMTModel` directories: weights, tokenizers and special ids.

A Marian directory holds `config.json` and the weights (read through transformers, extra `hf`),
`source.spm` / `target.spm` (the SentencePiece models that segment each side), `vocab.json`
(piece -> id, shared by both sides) or, with `separate_vocabs` in `tokenizer_config.json`,
`vocab.json` for the source and `target_vocab.json` for the target.

Its conventions, which the checkpoint records (`SpecialTokens`): sentences end with `</s>`
(`eos_token_id`, usually 0); the decoder starts from the pad id (`decoder_start_token_id`);
pad is never generated (`bad_words_ids` of its generation config); a multilingual model's
target language is a `>>xxx<<` piece written in front of the source text, each such piece a
language tag. transformers' `MarianTokenizer` also normalises punctuation with sacremoses when
that package is installed; we do not (neither does it without sacremoses).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformer_mt.data.specials import SpecialTokens, tag_code
from transformer_mt.errors import TmtError
from transformer_mt.importing.parts import (
    ImportedModel,
    banned_ids,
    piece_tokenizer,
    read_json,
)
from transformer_mt.inference.hf_marian import check_marian_config, from_marian_weights


def read_marian(directory: Path, hf_config: Any) -> ImportedModel:
    """The Marian model in `directory` (its `hf_config` already read).

    Raises:
        TmtError: a missing or unreadable tokenizer file, an unsupported option (by its
            config key), or a vocabulary that does not fit the weights.
    """
    from transformers import MarianMTModel

    check_marian_config(hf_config)  # before reading megabytes of weights
    for name in ("source.spm", "target.spm"):
        if not (directory / name).is_file():
            raise TmtError(f"{directory / name}: missing; the model's tokenizer needs it")
    settings = read_json(directory / "tokenizer_config.json", required=False)
    src_vocab = read_json(directory / "vocab.json")
    tgt_vocab = src_vocab
    if settings.get("separate_vocabs"):
        tgt_vocab = read_json(directory / "target_vocab.json")
        for piece in ("</s>", "<unk>", "<pad>"):
            if src_vocab.get(piece) != tgt_vocab.get(piece):
                raise TmtError(
                    f"{directory}/target_vocab.json: {piece} is {tgt_vocab.get(piece)}, "
                    f"{src_vocab.get(piece)} in vocab.json; we need one id on both sides"
                )
    hf_model = MarianMTModel.from_pretrained(directory, config=hf_config)
    converted = from_marian_weights(hf_config, hf_model.state_dict())
    src_tok = piece_tokenizer(
        directory / "source.spm", src_vocab, converted.src_vocab_size, inline_tags=True
    )
    tgt_tok = piece_tokenizer(
        directory / "target.spm", tgt_vocab, converted.tgt_vocab_size, inline_tags=True
    )
    return ImportedModel(
        converted,
        src_tok,
        tgt_tok,
        _specials(directory, hf_config, src_vocab),
        src_lang=str(settings.get("source_lang") or "src"),
        tgt_lang=str(settings.get("target_lang") or "tgt"),
    )


def _specials(directory: Path, hf_config: Any, vocab: dict[str, int]) -> SpecialTokens:
    pad = hf_config.pad_token_id
    start = hf_config.decoder_start_token_id
    never = banned_ids(directory, pad)
    tags = {code: i for piece, i in vocab.items() if (code := tag_code(piece)) is not None}
    return SpecialTokens(
        pad=pad,
        unk=vocab["<unk>"],
        bos=pad if start is None else start,
        eos=hf_config.eos_token_id,
        never=never,
        language_tags=tags,
        source_tag="target" if tags else "",
    )
