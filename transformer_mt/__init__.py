"""transformer_mt: neural machine translation with the Transformer encoder-decoder.

The public API, for use from Python rather than the `tmt` command:

    load_config(path, overrides=())       the typed, validated experiment config of a YAML file
    build_model(model_cfg, src_vocab_size, tgt_vocab_size=None, pad_id=0)
                                          a freshly initialised Seq2SeqTransformer
    train(config_path, run_dir=None, overrides=())
                                          train (or resume) a run, as `tmt train`; returns the
                                          exit status (0, or 130 / 143 / 129 after a signal)
    Translator.from_checkpoint(path, device="cpu", **decode_changes)
                                          text in, translations out, as `tmt translate`

`train` runs as `tmt train` does, in this process: it sets torch's thread count, the root
logger's handler and level (INFO on stderr, when none is set) and the random seeds.

Example:

    import transformer_mt as tmt

    tmt.train("configs/multi30k_tiny.yaml", "runs/tiny", ["train.max_steps=600"])
    translator = tmt.Translator.from_checkpoint("runs/tiny/checkpoints/best.pt", beam_size=5)
    print(translator.translate(["Ein Mann fährt Fahrrad."])[0].texts[0])

The names are imported on first use (a module `__getattr__`, PEP 562): `tmt --help` and every
`import transformer_mt.<module>` import this package first, and should not pay for torch.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# Public name -> (module, attribute).
_PUBLIC = {
    "load_config": ("transformer_mt.config", "load_config"),
    "build_model": ("transformer_mt.model", "build_model"),
    "train": ("transformer_mt.training.run", "run_training"),
    "Translator": ("transformer_mt.inference.translator", "Translator"),
}

__all__ = ["Translator", "__version__", "build_model", "load_config", "train"]


def __getattr__(name: str) -> object:
    if name not in _PUBLIC:
        raise AttributeError(f"module 'transformer_mt' has no attribute {name!r}")
    module, attribute = _PUBLIC[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
