"""Raw text in, detokenized translations out: the library behind `tmt translate`.

Promises that users rely on in pipelines: one output line per input line, always (an empty
line gives an empty line), in input order, or exactly n_best lines per input line with n-best
output; a line longer than the model's position table is truncated and counted, never
dropped; invalid UTF-8 stops with the line number.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO, TextIO

import torch
from torch import Tensor, nn
from tqdm import tqdm

from transformer_mt.artifacts import InferenceBundle, load_for_inference
from transformer_mt.config import DecodeConfig
from transformer_mt.data.batching import make_source_batches
from transformer_mt.data.tokenizer import BOS_ID
from transformer_mt.errors import TmtError
from transformer_mt.machine import cpu_has, native_bf16
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


QUANTIZE_OPTIONS = ("int8",)


def quantize_int8(model: nn.Module) -> nn.Module:
    """A copy of `model` whose nn.Linear layers run with int8 weights and int8 activations.

    Dynamic quantisation: weights are quantised once (symmetric, one scale per matrix) and
    activations per call at run time, so no calibration data is needed; embeddings, LayerNorm
    and softmax stay float32. Linear layers hold ~all of a Transformer's multiply-adds, which is
    where int8 GEMMs save time. The output projection tied to the target embedding becomes its
    own int8 copy of that matrix; the embedding itself stays float32, so input embeddings are
    unchanged.

    `torch.ao.quantization.quantize_dynamic` is deprecated in favour of torchao's `quantize_`
    API (its warning announces removal in 2.10), but it is still present and working in torch
    2.13 and needs no extra dependency; its deprecation warnings are silenced here.
    TODO(#7): move to torchao once it is a dependency.

    The GEMM library is the one the weights are packed for at quantisation time (the engine in
    force when the model runs does not matter): oneDNN where the CPU has AMX int8 tiles, whose
    matrix units it uses (beam 5, batch 64, one core of an Intel Xeon: 1.45x fp32 vs 1.21x
    with torch's default x86/fbgemm engine), else torch's default.

    Once the matrix products are int8, beam search spends much of its time moving the
    decoding cache: reordering it after every step and reading it in attention, both bound by
    memory bandwidth. Where the CPU computes bfloat16 natively (`machine.native_bf16`), the
    copy stores keys and values in bfloat16 (`cache_dtype`), half the bytes; elsewhere
    bfloat16 arithmetic is emulated and slower, so the cache stays float32. Measured (beam 5,
    batch 64, one core of an Intel Xeon, docs/benchmarks.md): int8 with the bfloat16 cache
    1.60-1.68x fp32, at -0.27 BLEU on Multi30k test2016 en-de.
    """
    from torch.ao.quantization import quantize_dynamic

    engine = torch.backends.quantized.engine
    if cpu_has("amx_tile") and "onednn" in torch.backends.quantized.supported_engines:
        engine = "onednn"
    with warnings.catch_warnings(), _quantized_engine(engine):
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", message=".*quantize.*deprecated", category=UserWarning)
        quantized = quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8).eval()
    if native_bf16().value:
        quantized.cache_dtype = torch.bfloat16
    return quantized


@contextlib.contextmanager
def _quantized_engine(engine: str) -> Iterator[None]:
    """Pack quantised weights for `engine`, leaving the global setting as it was."""
    before = torch.backends.quantized.engine
    torch.backends.quantized.engine = engine
    try:
        yield
    finally:
        torch.backends.quantized.engine = before


def _resolve_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise TmtError("--device cuda: no CUDA device is available")
    return torch.device(name)


def read_lines(stream: BinaryIO, name: str) -> Iterator[str]:
    """Decode a byte stream line by line; invalid UTF-8 is an error naming the line."""
    for number, raw in enumerate(stream, start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise TmtError(
                f"{name}:{number}: invalid UTF-8 ({err.reason} at byte {err.start})"
            ) from None
        yield text.rstrip("\r\n")


def format_translation(translation: Translation, index: int, nbest: int) -> str:
    """One line for 1-best; `index ||| text ||| score` lines (Moses n-best style) otherwise.

    With alignments: the translation, a TAB, then space-separated `src_idx-tgt_idx` pairs.
    """
    if translation.alignment is not None:
        pairs = " ".join(f"{s}-{t}" for s, t in translation.alignment)
        return f"{translation.texts[0]}\t{pairs}"
    if nbest == 1:
        return translation.texts[0]
    return "\n".join(
        f"{index} ||| {text} ||| {score:.4f}"
        for text, score in zip(translation.texts, translation.scores, strict=True)
    )


def translate_stream(
    translator: Translator,
    lines: Iterable[str],
    out: TextIO,
    chunk_lines: int,
    progress: bool = False,
    total: int | None = None,
    collect: list[str] | None = None,
    report_every_s: float | None = None,
) -> int:
    """Translate `lines` in chunks of `chunk_lines`, writing (and flushing) each chunk.

    `chunk_lines=1` gives interactive line-by-line behaviour on a terminal; a large chunk
    lets length-sorted batching keep padding low. The best translations are appended to
    `collect` when given (for scoring). Returns the number of lines translated.

    Args:
        progress: draw a tqdm bar on stderr (a terminal).
        report_every_s: without a bar, write a plain progress line on stderr at most this
            often (a log file, where a bar is switched off and would be unreadable); None: none.
    """
    count = 0
    report = ProgressReport(total, progress, report_every_s)
    for chunk in _chunks(lines, chunk_lines):
        for translation in translator.translate(chunk, on_batch=report.update):
            print(format_translation(translation, count, translator.decode.n_best), file=out)
            if collect is not None:
                collect.append(translation.texts[0])
            count += 1
        out.flush()
        report.update(count - report.done)  # the chunk's empty lines, never searched
    report.close()
    return count


class ProgressReport:
    """Lines translated so far, on stderr: a tqdm bar, or plain lines for a log file.

    A plain line reads `translated 1200/5000 lines (24%), 41.3 sentences/s, ETA 1m32s`, written
    when at least `every_s` seconds have passed since the last one (the first after `every_s`),
    so short inputs print nothing but the caller's final count.
    """

    def __init__(
        self,
        total: int | None,
        bar: bool,
        every_s: float | None,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.every_s = None if bar else every_s
        self.clock = clock
        self.bar = tqdm(total=total, unit="line", disable=not bar, file=self.stream)
        self.done = 0
        self.start = self.last = clock()

    def update(self, n: int) -> None:
        self.bar.update(n)
        self.done += n
        now = self.clock()
        if self.every_s is not None and n and now - self.last >= self.every_s:
            self.last = now
            print(self.line(now - self.start), file=self.stream, flush=True)

    def line(self, elapsed: float) -> str:
        rate = self.done / elapsed if elapsed > 0 else 0.0
        if self.total is None:
            return f"translated {self.done} lines, {rate:.1f} sentences/s"
        percent = 100.0 * self.done / max(self.total, 1)
        eta = _duration((self.total - self.done) / rate) if rate > 0 else "unknown"
        return (
            f"translated {self.done}/{self.total} lines ({percent:.0f}%), "
            f"{rate:.1f} sentences/s, ETA {eta}"
        )

    def close(self) -> None:
        self.bar.close()


def _duration(seconds: float) -> str:
    """`1h02m`, `3m07s` or `12s`."""
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _chunks(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
