"""Export a checkpoint for deployment: a Hugging Face Marian directory or a CTranslate2 model.

The Hugging Face export is the weight mapping of `hf_marian.py` plus a `MarianTokenizer` built
from our SentencePiece model(s), so `MarianMTModel.from_pretrained(OUT)` and
`MarianTokenizer.from_pretrained(OUT)` work offline. Both carry the model's own special ids
(`SpecialTokens`): pad, eos and the decoder's first input in the config, the ids search never
produces as the generation config's `bad_words_ids`; vocab.json numbers the pieces as the
model does (an imported model's table, else SentencePiece's ids). The CTranslate2 export
(`export_ct2.py`) builds the model with CTranslate2's spec API directly from our weights:
CTranslate2's Marian loader assumes OPUS-MT special tokens, which ours are not.

Either export writes into a temporary folder beside OUT_DIR, renamed to OUT_DIR when complete:
a refused or failed export leaves nothing behind, and an earlier export stays as it was.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from transformer_mt.artifacts import InferenceBundle, load_for_inference
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.errors import SettingError, TmtError
from transformer_mt.files import output_folder
from transformer_mt.inference.export_ct2 import export_ctranslate2
from transformer_mt.inference.hf_marian import check_marian_compatible, to_marian

FORMATS = ("hf", "ctranslate2")


def _write_vocab(tokenizer: Tokenizer, path: Path) -> None:
    """Marian's vocab.json maps pieces to ids: an imported model's own table (rows it numbers
    no piece with stay out), else SentencePiece's ids, kept as they are."""
    vocab = tokenizer.pieces
    if vocab is None:
        vocab = {tokenizer.id_to_piece(i): i for i in range(tokenizer.vocab_size)}
    path.write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")


def _one_vocabulary(src: Tokenizer, tgt: Tokenizer) -> bool:
    """Whether both sides number their pieces alike (Marian's shared vocab.json): one table,
    even with two SentencePiece models (multilingual OPUS-MT), or one SentencePiece model."""
    if src.pieces is None and tgt.pieces is None:
        return src.model_bytes == tgt.model_bytes
    return src.pieces == tgt.pieces


def export_hf(checkpoint: str | Path, out_dir: str | Path) -> Path:
    """Write a `MarianMTModel` + `MarianTokenizer` directory equivalent to `checkpoint`.

    Raises:
        TmtError: transformers is missing, the model uses options Marian lacks, or `out_dir`
            holds other files (see `output_folder`).
    """
    if importlib.util.find_spec("transformers") is None:
        raise TmtError(
            "the Hugging Face export needs transformers: pip install 'transformer_mt[hf]'"
        )
    bundle = load_for_inference(checkpoint)
    check_marian_compatible(bundle.model.cfg)
    with output_folder(out_dir) as tmp:
        _write_hf(bundle, tmp)
    return Path(out_dir)


def _write_hf(bundle: InferenceBundle, out: Path) -> None:
    """The Marian model and tokenizer files of `bundle`, into the folder `out`."""
    from transformers import MarianTokenizer

    specials = bundle.specials
    src, tgt = bundle.src_tokenizer, bundle.tgt_tokenizer
    hf_model = to_marian(bundle.model, bos_id=specials.bos, eos_id=specials.eos)
    # transformers' generate then never produces them either (OPUS-MT ships [[pad]]).
    hf_model.generation_config.bad_words_ids = [[i] for i in specials.never] or None
    hf_model.save_pretrained(out)
    joint = _one_vocabulary(src, tgt)
    (out / "source.spm").write_bytes(src.model_bytes)
    (out / "target.spm").write_bytes(tgt.model_bytes)
    _write_vocab(src, out / "vocab.json")
    target_vocab = None
    if not joint:
        target_vocab = out / "target_vocab.json"
        _write_vocab(tgt, target_vocab)
    data = bundle.config.data
    tokenizer = MarianTokenizer(
        source_spm=str(out / "source.spm"),
        target_spm=str(out / "target.spm"),
        vocab=str(out / "vocab.json"),
        target_vocab_file=None if target_vocab is None else str(target_vocab),
        source_lang=data.src_lang,
        target_lang=data.tgt_lang,
        unk_token=src.id_to_piece(specials.unk),
        eos_token=src.id_to_piece(specials.eos),
        pad_token=src.id_to_piece(specials.pad),
        separate_vocabs=not joint,
        model_max_length=bundle.config.model.max_positions,
    )
    tokenizer.save_pretrained(out)


def export(checkpoint: str | Path, out_dir: str | Path, fmt: str, quantize: str | None) -> Path:
    """Dispatch on `fmt` (one of FORMATS); `quantize` is CTranslate2's weight type."""
    if fmt == "hf":
        if quantize:
            raise SettingError("quantize", quantize, "applies to format ctranslate2 only")
        return export_hf(checkpoint, out_dir)
    return export_ctranslate2(checkpoint, out_dir, quantize)
