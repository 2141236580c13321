"""Build a CTranslate2 model from our weights with CTranslate2's spec API.

CTranslate2's Marian/Transformers loaders assume OPUS-MT conventions (pad is the last vocabulary
entry and is dropped; the decoder starts from a zero embedding), which the models this toolkit
trains do not follow: they start decoding from the BOS embedding with pad=0, unk=1, bos=2,
eos=3. So instead of going through the Hugging Face export, this module describes our network
directly as a `ctranslate2.specs.TransformerSpec` and fills it from our `state_dict`, with the
special tokens of the model's own `SpecialTokens` (an imported OPUS-MT model keeps its pad row
and starts from that row's embedding, as transformers' MarianMTModel and our model do):

  - post- or pre-norm layers (pre-norm: a final LayerNorm on each side, and no LayerNorm on
    the embeddings: M2M100 / NLLB, which CTranslate2's own converter maps to `pre_norm`
    without `layernorm_embedding` too), relu / gelu / swish (SiLU, CTranslate2's SWISH) /
    swiglu;
  - our own position table (sinusoidal, sinusoidal_fairseq or learned) and token embeddings
    scaled by sqrt(d_model) or not (`scale_embeddings`, CTranslate2's flag of the same name);
    CTranslate2 adds row t to the token at position t (from 0), and row t of our sinusoidal
    tables holds position `position_offset` + t (M2M100 / NLLB: pad + 1), so the offset
    travels inside the table (CTranslate2's M2M100 converter, likewise, cuts transformers'
    table at its offset). sinusoidal_fairseq gives pad tokens no position (fairseq's zero
    vector) where CTranslate2 numbers every token; the two agree wherever our batches hold a
    pad, after the tokens of a right-padded row (masked in attention, its output unread). A
    pad as a decoder input would differ, so a model whose search may produce the pad id is
    refused (`check_pad_positions`); or
    relative positions in self-attention: Shaw's key/value tables of each layer (a zero value
    table when ours has none), or T5's bias per head and bucket, which CTranslate2 buckets as
    T5 and `model/relative.py` do (bidirectional in the encoder, causal in the decoder) and
    adds, as we do, to the scaled scores;
  - rotary positions in encoder and decoder self-attention: `model/rope.py` turns the pairs
    (x_i, x_{i + Dh/2}) by pos * base^(-2i/Dh) over the whole head, which is CTranslate2's
    `rotary_interleave=False` ("sliced in half": y_i = x_i cos - x_{i+Dh/2} sin for i < Dh/2,
    x_i cos + x_{i-Dh/2} sin above, with the frequencies repeated over both halves) with
    `rotary_dim=0` (all features) and the same base, not its default interleaved pairs
    (x_{2i}, x_{2i+1}). No rotation in cross-attention, in either;
  - grouped key/value heads (`n_kv_heads`, GQA; 1 = MQA) in self- and cross-attention as
    `num_heads_kv`: CTranslate2 tiles kv head j over query heads j*G .. j*G + G-1
    (G = n_heads / n_kv_heads), as our `repeat_interleave` does;
  - q/k/v projections fused the way CTranslate2 stores them (self: [q;k;v], cross: q and [k;v];
    with grouped heads the k and v parts are n_kv_heads heads wide);
  - the output projection (tied or not) with the model's own bias only (`output_bias`,
    Marian's final_logits_bias), so CTranslate2's log-probs are ours exactly (`score_batch`
    equals our teacher-forced log-probs). Our search forbids the ids of `SpecialTokens.never`
    (ours: PAD and BOS) by setting their log-probs to -inf *after* the softmax; CTranslate2's
    `suppress_sequences` (and `min_decoding_length` for EOS) mask logits *before* it, i.e.
    renormalise. A -inf bias baked into the model would do the same and break the exact score
    equality, so their suppression is left to the caller (docs/deployment.md); a trained model
    gives them ~0 probability, as they are never training targets;
  - vocabularies in the model's id order (SentencePiece's ids, or an imported model's table,
    a row it numbers no piece with named `<unnumbered_ID>`), the pieces of `SpecialTokens`' bos
    as decoder start token (ours `<s>`, OPUS-MT's `<pad>`, NLLB's `</s>`), eos and unk;
    source EOS appended. Language tags are the caller's, as tokens: a source tag in front of
    the source tokens (OPUS-MT's `>>fra<<`, NLLB's source code), and NLLB's target code,
    which our search forces first, as `translate_batch(..., target_prefix=[[code]])`.

Only CTranslate2 (extra `ct2`) is imported, and only inside the functions that build the spec.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from transformer_mt.artifacts import load_for_inference
from transformer_mt.config import ModelConfig
from transformer_mt.data.specials import OWN_SPECIALS, SpecialTokens
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.errors import SettingError, TmtError
from transformer_mt.files import check_output_folder, output_folder
from transformer_mt.input_files import checkpoint_input_files
from transformer_mt.interop.limits import FormatLimits, Limit, check_expressible
from transformer_mt.model import Seq2SeqTransformer
from transformer_mt.model.rope import RotaryEmbedding
from transformer_mt.shortlist.select import Shortlist

# ModelConfig.activation -> CTranslate2's Activation: F.gelu is the exact erf GELU, swish is
# F.silu (x * sigmoid(x)), which CTranslate2 calls SWISH; swiglu is SWISH with ffn_glu.
_ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "swish": "SWISH", "swiglu": "SWISH"}

# What of ours the spec can hold: options the exporter does not map are refused, not exported
# as something else (and so is any activation or position kind added later).
CT2 = FormatLimits(
    "cannot export to CTranslate2",
    {
        "activation": Limit(
            tuple(_ACTIVATIONS), "the spec's are RELU, GELU and SWISH (swiglu: with ffn_glu)"
        ),
        "positions": Limit(
            ("sinusoidal", "sinusoidal_fairseq", "learned", "rope", "shaw", "t5"),
            "ALiBi: CTranslate2 has it in the decoder only; ours biases the encoder too",
        ),
        "attention_pattern": Limit(
            ("full",),
            "its sliding_window is a causal decoder cache limit, not our bidirectional "
            "encoder window or dilation",
        ),
        "attention": Limit(("mha",), "CTranslate2 has no spec for latent attention"),
    },
    reasons_shown=False,
)

# model/layers.py builds RotaryEmbedding with its default base; the export tests fail if not.
_ROPE_BASE = inspect.signature(RotaryEmbedding).parameters["base"].default


def _np(tensor: Tensor) -> np.ndarray:
    return tensor.detach().to("cpu", torch.float32).contiguous().numpy().copy()


def _set_linear(spec: Any, state: dict[str, Tensor], *names: str) -> None:
    """Fill a LinearSpec; several names are stacked along the output dimension (fusion)."""
    spec.weight = _np(torch.cat([state[f"{n}.weight"] for n in names], dim=0))
    if f"{names[0]}.bias" in state:
        spec.bias = _np(torch.cat([state[f"{n}.bias"] for n in names], dim=0))


def _set_norm(spec: Any, state: dict[str, Tensor], name: str) -> None:
    spec.gamma = _np(state[f"{name}.weight"])
    spec.beta = _np(state[f"{name}.bias"])


def _set_ffn(spec: Any, state: dict[str, Tensor], prefix: str, swiglu: bool) -> None:
    """CTranslate2's GLU is act(linear_0(x)) * linear_0_noact(x); ours splits fc1 into
    [value; gate] and computes value * silu(gate), so linear_0 is the gate half."""
    _set_norm(spec.layer_norm, state, f"{prefix}.ffn_norm")
    if swiglu:
        value_w, gate_w = state[f"{prefix}.ffn.fc1.weight"].chunk(2, dim=0)
        value_b, gate_b = state[f"{prefix}.ffn.fc1.bias"].chunk(2, dim=0)
        spec.linear_0.weight, spec.linear_0.bias = _np(gate_w), _np(gate_b)
        spec.linear_0_noact.weight, spec.linear_0_noact.bias = _np(value_w), _np(value_b)
    else:
        _set_linear(spec.linear_0, state, f"{prefix}.ffn.fc1")
    _set_linear(spec.linear_1, state, f"{prefix}.ffn.fc2")


def _set_attention(spec: Any, state: dict[str, Tensor], prefix: str, norm: str) -> None:
    """Self-attention: linear = [qkv, out]; cross-attention: [q, kv, out]. Shaw's tables,
    where the spec has them (self-attention with `positions: shaw`)."""
    _set_norm(spec.layer_norm, state, norm)
    if hasattr(spec, "relative_position_keys"):
        keys = state[f"{prefix}.relative.key_embeddings"]
        values = state.get(f"{prefix}.relative.value_embeddings", torch.zeros_like(keys))
        spec.relative_position_keys, spec.relative_position_values = _np(keys), _np(values)
    if len(spec.linear) == 2:
        _set_linear(
            spec.linear[0], state, *(f"{prefix}.{p}" for p in ("q_proj", "k_proj", "v_proj"))
        )
    else:
        _set_linear(spec.linear[0], state, f"{prefix}.q_proj")
        _set_linear(spec.linear[1], state, f"{prefix}.k_proj", f"{prefix}.v_proj")
    _set_linear(spec.linear[-1], state, f"{prefix}.out_proj")


def _set_side(spec: Any, model: Seq2SeqTransformer, side: str, cfg: ModelConfig) -> None:
    """Embeddings, positions, layers and final norm of the encoder or the decoder."""
    state = model.state_dict()
    module = getattr(model, side)
    embeddings = spec.embeddings[0] if side == "encoder" else spec.embeddings
    embeddings.weight = _np(module.embed.token_embedding.weight)
    spec.scale_embeddings = cfg.scale_embeddings  # sqrt(d_model), or none, like our Embedder
    positions = module.embed.positions
    if positions is not None:
        # Fixed tables: row t holds position position_offset + t (see the module docstring).
        table = positions.weight if cfg.positions == "learned" else positions.table
        spec.position_encodings.encodings = _np(table)
    for i, layer_spec in enumerate(spec.layer):
        prefix = f"{side}.layers.{i}"
        _set_attention(
            layer_spec.self_attention, state, f"{prefix}.self_attn", f"{prefix}.self_attn_norm"
        )
        if cfg.positions == "t5":  # one table per stack: every layer's spec holds it
            layer_spec.self_attention.relative_attention_bias = _np(module.position_bias.weight)
            layer_spec.self_attention.relative_attention_max_distance = np.int32(
                cfg.relative_max_distance
            )
        if side == "decoder":
            _set_attention(
                layer_spec.attention, state, f"{prefix}.cross_attn", f"{prefix}.cross_attn_norm"
            )
        _set_ffn(layer_spec.ffn, state, prefix, cfg.activation == "swiglu")
    if cfg.pre_norm:
        _set_norm(spec.layer_norm, state, f"{side}.final_norm")


def check_pad_positions(cfg: ModelConfig, specials: SpecialTokens) -> None:
    """Raise TmtError when the model gives pad tokens no position and its search may produce
    the pad id: as the next decoder input, ours would add no position, CTranslate2's would.

    Raises:
        TmtError: naming the option and the pad id.
    """
    if cfg.positions == "sinusoidal_fairseq" and specials.pad not in specials.never:
        raise TmtError(
            "cannot export to CTranslate2: model.positions=sinusoidal_fairseq gives pad tokens "
            f"no position, CTranslate2 gives them one, and search may produce the pad id "
            f"{specials.pad} (it is not among the special tokens' never)"
        )


def _stack_options(cfg: ModelConfig) -> dict[str, Any]:
    """Arguments the encoder and decoder specs share (see the module docstring)."""
    from ctranslate2.specs import common_spec

    rope = cfg.positions == "rope"
    return dict(
        pre_norm=cfg.pre_norm,
        activation=common_spec.Activation[_ACTIVATIONS[cfg.activation]],
        ffn_glu=cfg.activation == "swiglu",
        relative_position=cfg.positions == "shaw",
        relative_attention_bias=cfg.positions == "t5",
        num_heads_kv=None if cfg.kv_heads == cfg.n_heads else cfg.kv_heads,
        rotary_dim=0 if rope else None,  # 0: every feature of the head
        rotary_interleave=False,  # rotate-half pairs (x_i, x_{i + Dh/2})
        rotary_base=_ROPE_BASE,
    )


def _vocabulary(tokenizer: Tokenizer) -> list[str]:
    """The token of every id, in id order. CTranslate2 finds ids by token, so each must be
    unique: an imported table's row without a piece (`id_to_piece` says `<unk>` for it) gets
    a name of its own that no text segments into."""
    if tokenizer.pieces is None:
        return [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    numbered = {i: piece for piece, i in tokenizer.pieces.items()}
    return [numbered.get(i, f"<unnumbered_{i}>") for i in range(tokenizer.vocab_size)]


def _source_side_tokens(
    src_vocab: list[str], tgt_vocab: list[str], specials: SpecialTokens
) -> tuple[str, str]:
    """The unk and eos tokens: CTranslate2 names each by one token for both vocabularies (the
    source's unknown pieces, the appended EOS), so both sides must call the id alike.

    Raises:
        TmtError: the two vocabularies name the unk or eos id differently.
    """
    names = []
    for name, token_id in (("unk", specials.unk), ("eos", specials.eos)):
        if src_vocab[token_id] != tgt_vocab[token_id]:
            raise TmtError(
                f"cannot export to CTranslate2: the {name} id {token_id} is "
                f"{src_vocab[token_id]!r} in the source vocabulary and {tgt_vocab[token_id]!r} "
                "in the target's; CTranslate2 names it by one token"
            )
        names.append(tgt_vocab[token_id])
    return names[0], names[1]


def build_spec(
    model: Seq2SeqTransformer,
    src_tokenizer: Tokenizer,
    tgt_tokenizer: Tokenizer,
    specials: SpecialTokens = OWN_SPECIALS,
) -> Any:
    """A validated `ctranslate2.specs.TransformerSpec` computing the same function as `model`,
    with its special tokens named by `specials`' ids.

    Raises:
        TmtError: an option CTranslate2 cannot express, or vocabularies that do not match the
            model's embedding sizes.
    """
    from ctranslate2.specs import transformer_spec

    cfg = model.cfg
    check_expressible(CT2, cfg)
    check_pad_positions(cfg, specials)
    options = _stack_options(cfg)
    spec = transformer_spec.TransformerSpec(
        transformer_spec.TransformerEncoderSpec(cfg.n_layers, cfg.n_heads, **options),
        # Attention returned (return_attention, replace_unknowns) as `--alignments` and
        # `--replace-unk` read it: the last layer's cross-attention over all heads (0), not
        # CTranslate2's default of its first head.
        transformer_spec.TransformerDecoderSpec(
            cfg.decoder_layers, cfg.n_heads, alignment_heads=0, **options
        ),
    )
    _set_side(spec.encoder, model, "encoder", cfg)
    _set_side(spec.decoder, model, "decoder", cfg)
    spec.decoder.projection.weight = _np(model.output_projection.weight)
    if cfg.output_bias:  # Marian's final_logits_bias
        spec.decoder.projection.bias = _np(model.output_projection.bias)

    src_vocab, tgt_vocab = _vocabulary(src_tokenizer), _vocabulary(tgt_tokenizer)
    spec.register_source_vocabulary(src_vocab)
    spec.register_target_vocabulary(tgt_vocab)
    config = spec.config
    config.unk_token, config.eos_token = _source_side_tokens(src_vocab, tgt_vocab, specials)
    config.bos_token = tgt_vocab[specials.bos]
    config.decoder_start_token = config.bos_token  # the decoder starts from bos's embedding
    config.add_source_eos = True  # like make_source_batches: source pieces + EOS
    config.layer_norm_epsilon = cfg.layer_norm_eps
    # Read only by CTranslate2's tensor-parallel loader: q and k/v projections differ in size.
    config.multi_query_attention = cfg.kv_heads != cfg.n_heads
    try:
        spec.validate()
    except ValueError as err:
        raise TmtError(f"cannot build the CTranslate2 model: {err}") from None
    return spec


def check_shortlist_places(
    shortlist: Shortlist, specials: SpecialTokens, tgt_tokenizer: Tokenizer, path: str | Path
) -> None:
    """Refuse a shortlist whose use CTranslate2 would get wrong for this model.

    A use_vmap call scores its candidates (unk, bos, eos, the empty source's pieces, those
    listed for its source pieces, its target prefix), sorted by id, and turns the ids it is
    given (decoder start, end, target prefix, suppressed ids) into places among them. A
    CTranslate2 4.8 Translator keeps the place each id had in the first call that held it
    (`Decoder::update_output_layer` never clears that map), so an id is right in later calls
    only when no id at or below it is a candidate of some calls and not others. Our models
    number pad, unk, bos, eos first; an OPUS-MT model starts its decoder from pad, the last
    id, and NLLB's language codes, its target prefixes, follow every piece: with one
    Translator, later calls then start from another piece or fail (IndexError).

    Raises:
        SettingError: naming the shortlist, the first such id and its piece.
    """
    steady = {specials.unk, specials.bos, specials.eos, *shortlist.always.tolist()}
    prefixes = set(specials.language_tags.values()) if specials.target_tag else set()
    candidates = steady | prefixes | set(shortlist.table[shortlist.table >= 0].tolist())
    varying = candidates - steady
    # The ids CTranslate2 maps, by what they are to the model (the decoder's start wins).
    roles = {i: "target language code" for i in prefixes}
    roles |= {i: "suppressed" for i in specials.never}
    roles |= {specials.unk: "unk", specials.eos: "eos", specials.bos: "decoder start"}
    moved = sorted(i for i in roles.keys() & candidates if varying and i >= min(varying))
    if moved:
        token_id = moved[0]
        raise SettingError(
            "shortlist",
            path,
            f"CTranslate2 keeps the place a target id had among the pieces of a Translator's "
            f"first use_vmap call, and this model's {roles[token_id]} id {token_id} "
            f"({tgt_tokenizer.id_to_piece(token_id)}) follows pieces only some calls hold, so "
            "later calls would misread it; export this model without a shortlist",
        )


def export_inputs(
    checkpoint: str | Path, shortlist: str | Path | None = None
) -> list[tuple[str | Path | None, str]]:
    """What an export reads, which its directory may not hold (`files.output_folder`): the
    checkpoint and what no command given it may write over (`checkpoint_input_files`), and
    the shortlist."""
    return [*checkpoint_input_files(checkpoint), (shortlist, "shortlist")]


def export_ctranslate2(
    checkpoint: str | Path,
    out_dir: str | Path,
    quantize: str | None = None,
    shortlist: str | Path | None = None,
) -> Path:
    """Write a CTranslate2 model directory, with source.spm / target.spm beside it.

    Args:
        quantize: CTranslate2 weight type, e.g. "int8"; None keeps float32.
        shortlist: a vocabulary map (`tmt shortlist`), checked against the model and saved
            as the model's vmap.txt (`translate_batch(..., use_vmap=True)` reads it).

    Raises:
        TmtError: ctranslate2 is missing, the quantization type is unknown to it, the model uses
            an option it cannot express, the shortlist does not fit the model or CTranslate2
            would misread it (`check_shortlist_places`), or `out_dir` holds other files (see
            `output_folder`).
    """
    try:
        from ctranslate2.specs.model_spec import ACCEPTED_MODEL_TYPES
    except ImportError:
        raise TmtError(
            "the CTranslate2 export needs ctranslate2: pip install 'transformer_mt[ct2]'"
        ) from None
    if quantize is not None and quantize not in ACCEPTED_MODEL_TYPES:
        accepted = ", ".join(ACCEPTED_MODEL_TYPES)
        raise SettingError("quantize", quantize, f"CTranslate2 accepts {accepted}")
    bundle = load_for_inference(checkpoint)
    inputs = export_inputs(checkpoint, shortlist)
    check_output_folder(out_dir, inputs, marker="model.bin")  # before converting
    if shortlist is not None:
        output = bundle.model.output_projection
        src, tgt = bundle.src_tokenizer, bundle.tgt_tokenizer
        loaded = Shortlist.load(shortlist, src, tgt, output.weight, None)
        check_shortlist_places(loaded, bundle.specials, tgt, shortlist)
    with torch.no_grad():
        spec = build_spec(bundle.model, bundle.src_tokenizer, bundle.tgt_tokenizer, bundle.specials)
    if shortlist is not None:
        spec.register_vocabulary_mapping(str(shortlist))
    spec.optimize(quantization=quantize)
    with output_folder(out_dir, inputs) as tmp:
        spec.save(str(tmp))
        (tmp / "source.spm").write_bytes(bundle.src_tokenizer.model_bytes)
        (tmp / "target.spm").write_bytes(bundle.tgt_tokenizer.model_bytes)
    return Path(out_dir)
