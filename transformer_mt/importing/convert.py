"""From a model directory (or hub name) to one checkpoint file: pick the converter by the
config's `model_type`, check everything, then write the checkpoint atomically (a refused
import writes nothing)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from transformer_mt.artifacts import Checkpoint, pack_tokenizers, save_checkpoint
from transformer_mt.config import DataConfig, ExperimentConfig, TokenizerConfig, config_to_dict
from transformer_mt.errors import TmtError, one_line
from transformer_mt.files import check_output
from transformer_mt.importing.m2m100 import read_m2m100
from transformer_mt.importing.marian import read_marian
from transformer_mt.importing.parts import ImportedModel
from transformer_mt.importing.source import model_directory

# model_type of config.json -> the reader of such a directory.
READERS = {"marian": read_marian, "m2m_100": read_m2m100}


def import_model(source: str, out: str | Path) -> ImportedModel:
    """Write the model `source` (a directory or a hub name) as the checkpoint `out`.

    Raises:
        TmtError: transformers is missing, `source` is not a supported model (by its
            model_type, a config key it sets, or a missing file), or `out` cannot be written.
    """
    if importlib.util.find_spec("transformers") is None:
        raise TmtError("tmt import needs transformers: pip install 'transformer_mt[hf]'")
    check_output(out, [(source, "the model to import")])
    directory = model_directory(source)
    check_output(out, [(path, "a file of the model to import") for path in directory.iterdir()])
    hf_config = _config(directory)
    model_type = getattr(hf_config, "model_type", None)
    if model_type not in READERS:
        raise TmtError(
            f"{directory}: model_type {model_type!r} is not one we import "
            f"(supported: {', '.join(sorted(READERS))})"
        )
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our one line says what was written
    try:
        imported = READERS[model_type](directory, hf_config)
    finally:
        hf_logging.enable_progress_bar()
    save_checkpoint(_checkpoint(imported), out)
    return imported


def _config(directory: Path) -> Any:
    from transformers import AutoConfig

    if not (directory / "config.json").is_file():
        raise TmtError(f"{directory}: no config.json; not a Hugging Face model directory")
    try:
        return AutoConfig.from_pretrained(directory)
    except (ValueError, OSError, KeyError) as err:
        raise TmtError(f"{directory}/config.json: not a model config ({one_line(err)})") from None


def _checkpoint(imported: ImportedModel) -> Checkpoint:
    """Step 0 of a model: its weights, config, tokenizers and special ids."""
    converted = imported.converted
    model = converted.build()  # checks that the weights fit the config
    config = ExperimentConfig(
        model=converted.cfg,
        data=DataConfig(src_lang=imported.src_lang, tgt_lang=imported.tgt_lang),
        # One numbering on both sides (Marian's shared vocab.json, even with two
        # SentencePiece models) is one vocabulary.
        tokenizer=TokenizerConfig(
            vocab_size=converted.src_vocab_size,
            joint=imported.src_tokenizer.pieces == imported.tgt_tokenizer.pieces,
        ),
    )
    config.validate()
    return Checkpoint(
        model=model.state_dict(),
        config=config_to_dict(config),
        tokenizers=pack_tokenizers(imported.src_tokenizer, imported.tgt_tokenizer),
        step=0,
        specials=imported.specials.to_dict(),
    )
