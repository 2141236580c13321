"""Raw text in, detokenized translations out: the library behind `tmt translate`.

Promises that users rely on in pipelines: one translation per input line, always (an empty
line gives an empty translation), in input order, with n_best hypotheses each; a line longer
than the model's position table is truncated and counted, never dropped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from transformer_mt.artifacts import InferenceBundle, load_for_inference
from transformer_mt.config import DecodeConfig
from transformer_mt.data.batching import make_source_batches
from transformer_mt.data.tokenizer import BOS_ID
from transformer_mt.errors import TmtError
from transformer_mt.inference.quantize import QUANTIZE_OPTIONS, quantize_int8
from transformer_mt.search import SearchResult, search


@dataclass
class Translation:
    """The n-best translations of one input line, best first, with their search scores.

    `alignment` (with alignments on): (source index, target index) subword pairs of the best.
    """

    texts: list[str]
    scores: list[float]
    alignment: list[tuple[int, int]] | None = None


class Translator:
    """A loaded model plus its tokenizers and search settings; translates lists of lines."""

    def __init__(
        self,
        bundle: InferenceBundle,
        decode: DecodeConfig,
        device: torch.device,
        alignment_layer: int | None = None,
    ):
        """`alignment_layer` (None: no alignments) is the decoder layer whose cross-attention
        aligns target to source subwords; negative values count from the last."""
        decode.validate()
        self.bundle = bundle
        self.decode = decode
        self.device = device
        self.alignment_layer = alignment_layer
        if alignment_layer is not None:
            _check_alignment_layer(alignment_layer, bundle.config.model.decoder_layers)
            if decode.n_best > 1:
                raise TmtError("--alignments aligns the 1-best translation: drop --nbest")
        # Source tokens a line may keep: the position table also holds the appended EOS.
        self.max_src_tokens = bundle.config.model.max_positions - 1
        self.truncated_lines = 0

    @classmethod
    def from_checkpoint(
        cls,
        path: str,
        device: str = "cpu",
        quantize: str | None = None,
        alignment_layer: int | None = None,
        **decode_changes: object,
    ) -> Translator:
        """Load `path`; `decode_changes` override the checkpoint's decode section.

        Args:
            quantize: None (float32) or "int8": dynamic int8 linear layers, CPU only (see
                `quantize_int8`).
            alignment_layer: see `__init__`.
        """
        device = _resolve_device(device)
        bundle = load_for_inference(path, device)
        if quantize is not None:
            if quantize not in QUANTIZE_OPTIONS:
                raise TmtError(
                    f"--quantize {quantize}: choose one of {', '.join(QUANTIZE_OPTIONS)}"
                )
            if device.type != "cpu":
                raise TmtError("--quantize int8 runs on CPU only (--device cpu)")
            bundle = dataclasses.replace(bundle, model=quantize_int8(bundle.model))
        decode = dataclasses.replace(bundle.config.decode, **decode_changes)
        return cls(bundle, decode, device, alignment_layer)

    def translate(
        self, lines: Sequence[str], on_batch: Callable[[int], None] | None = None
    ) -> list[Translation]:
        """Translate `lines` (no newlines) in batches sorted by length; results in input order.

        An empty (or blank) line is not searched: its translation is the empty string with score
        0.0 (the log-probability of nothing), repeated n_best times so that n-best output keeps
        n_best lines for every input line. `on_batch(n)` is called after each searched batch of
        n lines (progress reports).
        """
        src_tokenizer = self.bundle.src_tokenizer
        encoded = [
            self._truncate(src_tokenizer.encode(line)) if line.strip() else [] for line in lines
        ]
        todo = [i for i, ids in enumerate(encoded) if ids]
        n_best = self.decode.n_best
        no_pairs = None if self.alignment_layer is None else []
        results: dict[int, Translation] = {
            i: Translation([""] * n_best, [0.0] * n_best, no_pairs)
            for i, ids in enumerate(encoded)
            if not ids
        }
        for batch in make_source_batches([encoded[i] for i in todo], self.decode.max_tokens):
            batch = batch.to(self.device)
            found = search(
                self.bundle.model,
                batch.src_ids,
                batch.src_mask,
                self.decode,
                max_len_cap=self.bundle.config.model.max_positions,
            )
            for row, (j, result) in enumerate(zip(batch.indices.tolist(), found, strict=True)):
                results[todo[j]] = self._detokenize(result)
                if self.alignment_layer is not None:
                    src_ids = batch.src_ids[row, batch.src_mask[row].view(-1)]  # (S,), with EOS
                    tokens = result.hypotheses[0].tokens
                    results[todo[j]].alignment = alignment_pairs(
                        self.bundle.model, src_ids, tokens, self.alignment_layer
                    )
            if on_batch is not None:
                on_batch(len(found))
        return [results[i] for i in range(len(lines))]

    def _truncate(self, ids: list[int]) -> list[int]:
        if len(ids) > self.max_src_tokens:
            self.truncated_lines += 1
            return ids[: self.max_src_tokens]
        return ids

    def _detokenize(self, result: SearchResult) -> Translation:
        decode = self.bundle.tgt_tokenizer.decode
        return Translation(
            [decode(h.tokens) for h in result.hypotheses], [h.score for h in result.hypotheses]
        )


def alignment_pairs(
    model: nn.Module, src_ids: Tensor, tgt_ids: list[int], layer: int
) -> list[tuple[int, int]]:
    """Subword alignment of one sentence pair from cross-attention (plain-math path).

    Target token j is produced by decoder query j (input BOS + tgt_ids[:j]); it aligns to the
    source subword with the largest weight of decoder layer `layer`'s cross-attention,
    averaged over heads. The appended source EOS is never chosen (unless it is all there is).

    Args:
        src_ids: (S,) real source tokens followed by EOS, no padding.
        tgt_ids: the translation's tokens, no BOS or EOS.

    Returns:
        (source index, target index) pairs, one per target token.
    """
    if not tgt_ids:
        return []
    tgt_in = torch.tensor([[BOS_ID, *tgt_ids[:-1]]], device=src_ids.device)  # (1, T)
    with torch.no_grad():
        cross = model.attention_maps(src_ids[None], tgt_in).cross[layer]  # (1, H, T, S)
    n_words = max(src_ids.numel() - 1, 1)  # the subwords, without the EOS
    best = cross[0].mean(0)[:, :n_words].argmax(-1)  # (T,)
    return [(int(s), t) for t, s in enumerate(best.tolist())]


def _check_alignment_layer(layer: int, n_layers: int) -> None:
    if not -n_layers <= layer < n_layers:
        raise TmtError(
            f"--alignment-layer {layer}: the model has {n_layers} decoder layer(s) "
            f"(0..{n_layers - 1}, or -1 for the last)"
        )


def _resolve_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise TmtError("--device cuda: no CUDA device is available")
    return torch.device(name)
