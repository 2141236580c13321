"""How a loaded model runs translations: the kernels of its linear layers (float32, packed
where that pays on this machine, int8 or bfloat16), the shortlist of target ids it scores, and the
options every search of it runs with. `Translator.from_checkpoint` and the benchmarks set
models up through here, so that they measure what `tmt translate` runs.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from transformer_mt.artifacts import InferenceBundle
from transformer_mt.data.specials import OWN_SPECIALS, SpecialTokens
from transformer_mt.errors import SettingError
from transformer_mt.inference.packed import pack_where_it_pays, packed_product, packing_available
from transformer_mt.inference.quantize import (
    QUANTIZE_OPTIONS,
    bf16_refusal,
    int8_cache_dtype,
    quantize_bf16,
    quantize_int8,
)
from transformer_mt.model import Seq2SeqTransformer
from transformer_mt.search import SearchOptions, SpecialIds
from transformer_mt.shortlist.select import Shortlist


def search_options(
    model: Seq2SeqTransformer,
    specials: SpecialTokens = OWN_SPECIALS,
    cache_dtype: torch.dtype | None = None,
    shortlist: Shortlist | None = None,
) -> SearchOptions:
    """How every translation search of `model` runs: with its special ids, decoding capped at
    its position table (a hypothesis never needs a position the model lacks), keys and values
    of the decoding cache stored in `cache_dtype` (None: the dtype they are computed in),
    scoring only the target ids of `shortlist` (None: all)."""
    new_cache = None
    if cache_dtype is not None:
        new_cache = functools.partial(model.decoder.new_cache, dtype=cache_dtype)
    ids = SpecialIds(specials.pad, specials.bos, specials.eos, specials.never, specials.unk)
    return SearchOptions(
        ids=ids, max_len_cap=model.cfg.max_positions, new_cache=new_cache, vocabulary=shortlist
    )


def load_shortlist(path: str | Path, bundle: InferenceBundle, device: torch.device) -> Shortlist:
    """The shortlist file `path` over the float rows of `bundle`'s output projection."""
    output = bundle.model.output_projection
    return Shortlist.load(
        path,
        bundle.src_tokenizer,
        bundle.tgt_tokenizer,
        output.weight.detach(),
        None if output.bias is None else output.bias.detach(),
        (bundle.specials.unk,),
        packed_product if device.type == "cpu" and packing_available() else None,
    )


def inference_model(
    model: Seq2SeqTransformer, quantize: str | None, device: torch.device
) -> tuple[Seq2SeqTransformer, torch.dtype | None]:
    """`model` as it runs translations on `device`: int8 layers with their cache dtype, or
    bfloat16 ones, when `quantize` asks, else float32 with the linear layers packed where
    that pays (CPU).

    Raises:
        SettingError: an unknown `quantize`; int8 or bf16 off the CPU; bf16 on a CPU that
            emulates bfloat16.
    """
    if quantize is None:
        if device.type == "cpu":
            pack_where_it_pays(model)
        return model, None
    if quantize not in QUANTIZE_OPTIONS:
        raise SettingError("quantize", quantize, f"choose one of {', '.join(QUANTIZE_OPTIONS)}")
    if device.type != "cpu":
        raise SettingError("quantize", quantize, f"{quantize} layers run on the CPU only")
    if quantize == "int8":
        return quantize_int8(model), int8_cache_dtype()
    refusal = bf16_refusal()
    if refusal is not None:
        raise SettingError("quantize", quantize, refusal)
    return quantize_bf16(model), None
