"""From a model directory (or hub name) to one checkpoint file: pick the converter by the
config's `model_type`, check everything, then write the checkpoint atomically (a refused
import writes nothing)."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from transformer_mt.artifacts import Checkpoint, pack_tokenizers, save_checkpoint
from transformer_mt.config import DataConfig, ExperimentConfig, TokenizerConfig, config_to_dict
from transformer_mt.errors import TmtError, one_line
from transformer_mt.files import check_output
from transformer_mt.interop.hf_bart import ignored_settings
from transformer_mt.interop.import_files import check_model_files, present, read_json
from transformer_mt.interop.import_m2m100 import read_m2m100
from transformer_mt.interop.import_marian import read_marian
from transformer_mt.interop.import_parts import ImportedModel
from transformer_mt.interop.import_source import model_directory
from transformer_mt.interop.import_values import CONFIG_KEYS, check_resolved_config, check_values

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
    check_model_files(directory)
    check_output(out, [(path, "file of the model to import") for path in directory.iterdir()])
    with _quiet_transformers():
        model_type, hf_config = read_config(directory)
        imported = READERS[model_type](directory, hf_config)
    imported = dataclasses.replace(imported, ignored=tuple(ignored_settings(hf_config)))
    save_checkpoint(_checkpoint(imported, str(source)), out)
    return imported


def read_config(directory: Path) -> tuple[str, Any]:
    """The model_type and transformers config of `directory`'s config.json, every key an
    importer reads checked as written (before transformers reads it) and as resolved.

    Raises:
        TmtError: no config.json, a model_type we do not import, or a key of the wrong type
            or range, naming the file and the key.
    """
    from transformers import AutoConfig

    path = directory / "config.json"
    if not present(path):
        raise TmtError(f"{directory}: no config.json; not a Hugging Face model directory")
    raw = read_json(path)
    model_type = raw.get("model_type")
    if model_type is None and present(directory / "model.bin"):  # `tmt export --format ctranslate2`
        raise TmtError(
            f"{directory}: a CTranslate2 model (model.bin), which is not imported; import the "
            "Hugging Face model it was converted from, or translate with the checkpoint it was "
            "exported from"
        )
    if not isinstance(model_type, str) or model_type not in READERS:
        raise TmtError(
            f"{directory}: model_type {model_type!r} is not one we import "
            f"(supported: {', '.join(sorted(READERS))})"
        )
    check_values(raw, CONFIG_KEYS[model_type], path)
    try:
        hf_config = AutoConfig.from_pretrained(directory)
    except Exception as err:  # transformers and huggingface_hub's strict fields raise many kinds
        raise TmtError(f"{path}: not a model config ({one_line(err)})") from None
    check_resolved_config(hf_config, model_type, path)
    return model_type, hf_config


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """transformers' progress bars and log lines off (our one line says what was written or
    what is wrong; its load reports would add a table to a refusal), restored after."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        hf_logging.enable_progress_bar()


def _checkpoint(imported: ImportedModel, source: str) -> Checkpoint:
    """Step 0 of a model: its weights, config (with its own search settings), tokenizers,
    special ids and the `source` it was imported from."""
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
        decode=imported.generation.decode,  # searches as the model's `generate` does
    )
    config.validate()
    return Checkpoint(
        model=model.state_dict(),
        config=config_to_dict(config),
        tokenizers=pack_tokenizers(imported.src_tokenizer, imported.tgt_tokenizer),
        step=0,
        specials=imported.specials.to_dict(),
        imported_from=source,
    )
