"""The training workload the training benchmarks share (bench_train, bench_shapes): the model
sizes, a synthetic corpus of Multi30k-like lengths and its batch shapes, and each system's
update: ours as `tmt train` makes it (eager, or replayed from CUDA graphs) and Hugging Face
Marian with our weights.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout, uninstalled

import numpy as np  # noqa: E402
import torch  # noqa: E402

from transformer_mt import kernels  # noqa: E402
from transformer_mt.config import ModelConfig, TrainConfig  # noqa: E402
from transformer_mt.data.batching import Batch  # noqa: E402
from transformer_mt.data.cursor import BatchIterator  # noqa: E402
from transformer_mt.data.encoding import EncodedCorpus  # noqa: E402
from transformer_mt.data.token_column import TokenColumn  # noqa: E402
from transformer_mt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID  # noqa: E402
from transformer_mt.interop.hf_marian import to_marian  # noqa: E402
from transformer_mt.model import build_model  # noqa: E402
from transformer_mt.training.loss import LossSums  # noqa: E402
from transformer_mt.training.update import Updater  # noqa: E402

SIZES = {
    # configs/quickstart-like: what a laptop trains on Multi30k
    "quickstart": ModelConfig(d_model=256, n_heads=4, n_layers=3, d_ff=1024),
    # Vaswani et al. (2017) base
    "base": ModelConfig(d_model=512, n_heads=8, n_layers=6, d_ff=2048),
}
SYSTEMS = ["ours", "ours-graphs", "hf", "hf-eager"]
# ours-graphs: our update replayed from a CUDA graph per batch shape (train.cuda_graphs; CUDA
# only): with --warm-shapes every timed update is a replay.
# hf: MarianMTModel as transformers builds it (SDPA attention); hf-eager: its plain-math
# attention (`attn_implementation="eager"`), a choice HF users have too.
HF_ATTENTION = {"hf": "sdpa", "hf-eager": "eager"}
# Pairs of the synthetic corpus: as many as Multi30k's training set, so that the batcher finds
# as many neighbours of similar length as in real training and pads as much (10% of target
# positions here, 12% in Multi30k de-en's own batches). A corpus a fifth this size pads a
# quarter, which MFU, counting no padding, would read as a slower model.
MULTI30K_PAIRS = 29_000


class MarianForUpdater(torch.nn.Module):
    """A `MarianMTModel` called like our model, so `Updater.update` runs the same update on it.

    Shape:
        src_ids: (B, S) int64; tgt_in_ids: (B, T) int64; src_mask: (B, 1, 1, S) bool, True at
        real source tokens. Returns logits (B, T, V).
    """

    def __init__(self, marian: torch.nn.Module) -> None:
        super().__init__()
        self.marian = marian
        self.pad_id = marian.config.pad_token_id  # the loss ignores it, as `Updater` reads

    def forward(
        self, src_ids: torch.Tensor, tgt_in_ids: torch.Tensor, src_mask: torch.Tensor
    ) -> torch.Tensor:
        # HF wants the source mask as (B, S) 1/0. The decoder gets no padding mask, like ours:
        # HF's own causal mask and the loss hide right padding. use_cache=False is what HF sets
        # when it trains (labels given): a key/value cache only serves decoding.
        attention_mask = src_mask.reshape(src_ids.shape).long()  # (B, S)
        output = self.marian(
            input_ids=src_ids,
            attention_mask=attention_mask,
            decoder_input_ids=tgt_in_ids,
            use_cache=False,
        )
        return output.logits


def hf_label_smoothed_loss(
    logits: torch.Tensor, labels: torch.Tensor, epsilon: float, pad_id: int
) -> LossSums:
    """The loss a Hugging Face training loop computes: transformers' `LabelSmoother` (log-softmax
    in the logits' dtype), as sums over non-pad tokens (`num_items_in_batch=1`). Its NLL is not
    computed separately (the benchmark reports none), so `nll` repeats the loss."""
    from transformers.trainer_pt_utils import LabelSmoother

    loss = LabelSmoother(epsilon, ignore_index=pad_id)(
        {"logits": logits}, labels, num_items_in_batch=1
    )
    return LossSums(loss=loss, nll=loss.detach(), n_tokens=labels.ne(pad_id).sum())


def build_updater(system: str, size: str, args: SimpleNamespace, device: torch.device) -> Updater:
    """The training update of `system` at `size`; the same seed gives every system the same
    initial weights."""
    train = TrainConfig(
        max_tokens=args.max_tokens,
        precision=args.precision,
        compile=args.compile,
        cuda_graphs=system == "ours-graphs",
    )
    torch.manual_seed(0)
    vocab = args.vocab_size
    model = build_model(SIZES[size], vocab, vocab, PAD_ID, kernel=kernels.attention)
    criterion = None
    if system in HF_ATTENTION:
        marian = to_marian(model, BOS_ID, EOS_ID)
        marian.set_attn_implementation(HF_ATTENTION[system])
        model, criterion = MarianForUpdater(marian), hf_label_smoothed_loss
    # train(): to_marian returns an eval-mode model, and dropout is part of a training step.
    return Updater(model.train(), train, SIZES[size].d_model, device, criterion=criterion)


def distinct_shapes(batches: BatchIterator, count: int | None = None) -> list[Batch]:
    """The first batch of each shape (sentences, source length, target length) of the epoch
    `batches` stands at, in the order the epoch meets them; the first `count` shapes only when
    given."""
    found: dict[tuple[int, ...], Batch] = {}
    for _ in range(len(batches.batch_indices(batches.position.epoch))):
        batch = next(batches)
        found.setdefault((*batch.src_ids.shape, *batch.tgt_in_ids.shape), batch)
        if len(found) == count:
            break
    return list(found.values())


def upcoming_pair_lengths(batches: BatchIterator, n_batches: int) -> tuple[np.ndarray, np.ndarray]:
    """Source and target lengths, as the model reads them, of the next `n_batches` batches: read
    ahead, then the iterator put back where it was (`_finish_run` checks the target token count
    against the updates' own)."""
    saved = batches.state()
    indices = np.concatenate([next(batches).indices.numpy() for _ in range(n_batches)])
    batches.restore(saved)
    corpus = batches.corpus
    return corpus.src.lengths[indices] + 1, corpus.tgt.lengths[indices] + 1  # + EOS / + BOS


def synthetic_corpus(n_pairs: int, vocab_size: int, seed: int = 0) -> EncodedCorpus:
    """Pairs with Multi30k-like lengths: source ~ N(14, 4) tokens, target ~ source +- 20%."""
    rng = np.random.default_rng(seed)
    src_lens = np.clip(rng.normal(14, 4, n_pairs).round(), 3, 40).astype(int)
    tgt_lens = np.clip((src_lens * rng.normal(1.0, 0.2, n_pairs)).round(), 3, 40).astype(int)

    def column(lengths: np.ndarray) -> TokenColumn:
        return TokenColumn.from_lists([rng.integers(4, vocab_size, n).tolist() for n in lengths])

    return EncodedCorpus(column(src_lens), column(tgt_lens))
