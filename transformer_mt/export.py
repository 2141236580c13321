"""Export a checkpoint for deployment: a Hugging Face Marian directory or a CTranslate2 model.

The Hugging Face export is the weight mapping of `hf_marian.py` plus a `MarianTokenizer` built
from our SentencePiece model(s), so `MarianMTModel.from_pretrained(OUT)` and
`MarianTokenizer.from_pretrained(OUT)` work offline. The CTranslate2 export (`export_ct2.py`)
builds the model with CTranslate2's spec API directly from our weights: CTranslate2's Marian
loader assumes OPUS-MT special tokens, which ours are not.
"""

from __future__ import annotations

import json
from pathlib import Path

from transformer_mt.data.tokenizer import BOS_ID, EOS_ID, Tokenizer
from transformer_mt.errors import TmtError
from transformer_mt.export_ct2 import export_ctranslate2
from transformer_mt.hf_marian import to_marian
from transformer_mt.training.checkpoint import load_for_inference

FORMATS = ("hf", "ctranslate2")


def _write_vocab(tokenizer: Tokenizer, path: Path) -> None:
    """Marian's vocab.json maps pieces to ids; ours are SentencePiece's ids, kept as they are."""
    vocab = {tokenizer.id_to_piece(i): i for i in range(tokenizer.vocab_size)}
    path.write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")


def export_hf(checkpoint: str | Path, out_dir: str | Path) -> Path:
    """Write a `MarianMTModel` + `MarianTokenizer` directory equivalent to `checkpoint`.

    Raises:
        TmtError: transformers is missing, or the model uses options Marian lacks.
    """
    try:
        from transformers import MarianTokenizer
    except ImportError:
        raise TmtError(
            "export --format hf needs transformers: pip install 'transformer_mt[hf]'"
        ) from None
    bundle = load_for_inference(checkpoint)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    to_marian(bundle.model, bos_id=BOS_ID, eos_id=EOS_ID).save_pretrained(out)
    joint = bundle.src_tokenizer.model_bytes == bundle.tgt_tokenizer.model_bytes
    (out / "source.spm").write_bytes(bundle.src_tokenizer.model_bytes)
    (out / "target.spm").write_bytes(bundle.tgt_tokenizer.model_bytes)
    _write_vocab(bundle.src_tokenizer, out / "vocab.json")
    target_vocab = None
    if not joint:
        target_vocab = out / "target_vocab.json"
        _write_vocab(bundle.tgt_tokenizer, target_vocab)
    data = bundle.config.data
    tokenizer = MarianTokenizer(
        source_spm=str(out / "source.spm"),
        target_spm=str(out / "target.spm"),
        vocab=str(out / "vocab.json"),
        target_vocab_file=None if target_vocab is None else str(target_vocab),
        source_lang=data.src_lang,
        target_lang=data.tgt_lang,
        separate_vocabs=not joint,
        model_max_length=bundle.config.model.max_positions,
    )
    tokenizer.save_pretrained(out)
    return out


def export(checkpoint: str | Path, out_dir: str | Path, fmt: str, quantization: str | None):
    """Dispatch on `fmt` (one of FORMATS)."""
    if fmt == "hf":
        if quantization:
            raise TmtError("--quantize applies to --format ctranslate2 only")
        return export_hf(checkpoint, out_dir)
    return export_ctranslate2(checkpoint, out_dir, quantization)
