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
from transformer_mt.importing.parts import ImportedModel, banned_ids, piece_tokenizer
from transformer_mt.inference.hf_m2m100 import SPM_FILE, check_m2m100_config, from_m2m100_weights


def read_m2m100(directory: Path, hf_config: Any) -> ImportedModel:
    """The NLLB or M2M100 model in `directory` (its `hf_config` already read).

    Raises:
        TmtError: a missing or unreadable tokenizer, an unsupported option (by its config
            key), or a vocabulary that does not fit the weights.
    """
    from transformers import AutoTokenizer, M2M100ForConditionalGeneration

    check_m2m100_config(hf_config)  # before reading megabytes of weights
    if not (directory / SPM_FILE).is_file():
        raise TmtError(f"{directory / SPM_FILE}: missing; the model's tokenizer needs it")
    try:
        hf_tokenizer = AutoTokenizer.from_pretrained(directory)
    except (OSError, ValueError, ImportError) as err:
        raise TmtError(f"{directory}: its tokenizer cannot be read ({one_line(err)})") from None
    vocab = hf_tokenizer.get_vocab()
    hf_model = M2M100ForConditionalGeneration.from_pretrained(directory, config=hf_config)
    converted = from_m2m100_weights(hf_config, hf_model.state_dict())
    special = set(hf_tokenizer.all_special_tokens)
    codes = sorted(special - _core_specials(hf_tokenizer))
    tokenizer = piece_tokenizer(
        directory / SPM_FILE, vocab, converted.tgt_vocab_size, frozenset(special)
    )
    pad = hf_config.pad_token_id
    specials = SpecialTokens(
        pad=pad,
        unk=vocab[hf_tokenizer.unk_token],
        bos=hf_config.decoder_start_token_id,
        eos=hf_config.eos_token_id,
        never=banned_ids(directory, pad),
        language_tags={_code(c): vocab[c] for c in codes},
        source_tag="source",
        target_tag=True,
    )
    src_lang = getattr(hf_tokenizer, "src_lang", None)
    tgt_lang = getattr(hf_tokenizer, "tgt_lang", None)
    return ImportedModel(
        converted,
        tokenizer,
        tokenizer,
        specials,
        src_lang=_code(src_lang) if src_lang else "src",
        tgt_lang=_code(tgt_lang) if tgt_lang else "tgt",
    )


def _core_specials(hf_tokenizer: Any) -> set[str]:
    """The special tokens that are not language codes."""
    names = ("bos_token", "eos_token", "unk_token", "pad_token", "mask_token", "sep_token")
    names += ("cls_token",)
    return {str(getattr(hf_tokenizer, n)) for n in names if getattr(hf_tokenizer, n, None)}


def _code(token: str) -> str:
    """A language code as users write it: NLLB's as it is (`fra_Latn`), M2M100's `__fr__` as
    `fr`."""
    return token.strip("_") if token.startswith("__") and token.endswith("__") else token
