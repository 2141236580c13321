"""transformer_mt: neural machine translation with the Transformer encoder-decoder."""

__version__ = "0.1.0"
