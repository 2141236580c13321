"""`tmt train`: set up a run directory, tokenizers, data and model, then hand over to Trainer.

Order: config -> device and ranks -> run directory (fresh, or resume from checkpoints/last.pt)
-> tokenizers (trained on the training corpus, or taken from the checkpoint) -> encoded and
batched data -> model -> Trainer. Under torchrun, rank 0 trains the tokenizer and fills the
encoded-corpus cache first; the other ranks then find both ready.
"""

from __future__ import annotations

import logging
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from transformer_mt import __version__
from transformer_mt.config import (
    ExperimentConfig,
    config_from_dict,
    config_to_dict,
    dump_config,
    load_config,
)
from transformer_mt.data.batching import (
    BatchIterator,
    collate,
    make_batches,
    make_source_batches,
)
from transformer_mt.data.dataset import column_texts
from transformer_mt.data.encoding import DropoutCorpus
from transformer_mt.data.pipeline import encode_splits, train_tokenizers_for
from transformer_mt.data.tokenizer import PAD_ID, Tokenizer
from transformer_mt.errors import TmtError
from transformer_mt.model import build_model
from transformer_mt.training import checkpoint as ckpt
from transformer_mt.training.distributed import (
    DistributedContext,
    init_distributed,
    shutdown_distributed,
)
from transformer_mt.training.rng import seed_everything
from transformer_mt.training.trainer import TrainData, Trainer

log = logging.getLogger(__name__)
T = TypeVar("T")

# Files a run directory may hold before its first checkpoint (a run that stopped early).
RUN_DIR_FILES = {"config.yaml", "metrics.jsonl", "checkpoints", "tensorboard", "curves.png"}


def run_training(config_path: str, run_dir: str | None, overrides: list[str]) -> int:
    """Train (or resume) the experiment of `config_path`; returns the process exit code."""
    config = load_config(config_path, overrides)
    run_path = Path(run_dir) if run_dir else Path("runs") / Path(config_path).stem
    device = resolve_device(config.train.device)
    dist = init_distributed(device.type)
    _setup_logging(dist.is_main)
    if dist.enabled and device.type == "cuda":
        device = torch.device("cuda", dist.local_rank)
        torch.cuda.set_device(device)
    try:
        resume = _resume_state(run_path, config)
        src_tok, tgt_tok = _main_rank_first(dist, lambda: _tokenizers(config, run_path, resume))
        data = _main_rank_first(dist, lambda: prepare_data(config, src_tok, tgt_tok, dist))
        seed_everything(config.train.seed)
        model = build_model(config.model, src_tok.vocab_size, tgt_tok.vocab_size, PAD_ID)
        # Same initial weights on every rank (DDP checks), different dropout masks afterwards.
        torch.manual_seed(config.train.seed + dist.rank)
        if dist.is_main:
            dump_config(config, run_path / "config.yaml")
            _log_start(config, run_path, model, device, dist)
        trainer = Trainer(config, model, data, src_tok, tgt_tok, run_path, dist, device)
        if resume is not None:
            trainer.load_state_dict(resume)
            log.info("resumed from %s at step %d", run_path / "checkpoints/last.pt", trainer.step)
        return trainer.train().exit_code
    finally:
        shutdown_distributed(dist)


def resolve_device(choice: str) -> torch.device:
    if choice == "cuda" and not torch.cuda.is_available():
        raise TmtError("train.device: cuda requested but no CUDA device is available")
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(choice)


def prepare_data(
    config: ExperimentConfig, src_tok: Tokenizer, tgt_tok: Tokenizer, dist: DistributedContext
) -> TrainData:
    """Read, encode (cached), clean and batch the training set; batch the validation set.

    The validation set is not cleaned (it is scored against all its references); its loss
    batches get a budget large enough for its longest pair.
    """
    data_cfg, train_cfg = config.data, config.train
    splits = encode_splits(data_cfg, src_tok, tgt_tok)
    resample = None
    if config.tokenizer.bpe_dropout > 0:
        src_texts, tgt_texts = (
            [texts[i] for i in splits.train_keep.tolist()]
            for texts in (column_texts(splits.train_text, side) for side in ("src", "tgt"))
        )
        resample = DropoutCorpus(
            src_texts,
            tgt_texts,
            src_tok,
            tgt_tok,
            deterministic=splits.train,
            dropout=config.tokenizer.bpe_dropout,
            seed=train_cfg.seed,
            max_len=data_cfg.max_len,
            target=config.tokenizer.bpe_dropout_sides == "both",
        )
    train = BatchIterator(
        splits.train, train_cfg.max_tokens, train_cfg.seed, dist.rank, dist.world_size, resample
    )
    valid = splits.valid
    longest = int(np.maximum(valid.src.lengths, valid.tgt.lengths).max()) + 1
    budget = max(train_cfg.max_tokens, longest)
    valid_batches = [
        collate(valid, indices)
        for indices in make_batches(valid.src.lengths, valid.tgt.lengths, budget, seed=0, epoch=0)
    ]
    n_bleu = min(len(valid), train_cfg.valid_max_sentences or len(valid))
    sources = valid.src.select(np.arange(n_bleu))
    return TrainData(
        train=train,
        valid_batches=valid_batches,
        valid_sources=make_source_batches(sources, config.decode.max_tokens),
        valid_references=list(splits.valid_text["tgt"][:n_bleu]),
    )


def _resume_state(run_dir: Path, config: ExperimentConfig) -> dict[str, Any] | None:
    """The checkpoint to resume from (`checkpoint.resume_checkpoint`) when it fits `config`.

    Returns None for a fresh run.

    Raises:
        TmtError: the directory holds other files, a run with another model or tokenizer, or
            checkpoints none of which can resume training.
    """
    found = ckpt.resume_checkpoint(run_dir / "checkpoints")
    if found is None:
        stray = [
            p.name
            for p in run_dir.glob("*")
            if p.name not in RUN_DIR_FILES and not p.name.startswith("spm-")
        ]
        if stray:
            raise TmtError(
                f"{run_dir} is not empty and holds no run ({', '.join(sorted(stray)[:3])}); "
                "choose another --run-dir"
            )
        return None
    last, state = found
    # Parsed and dumped again, so that fields added to the config since the run started
    # compare at their defaults instead of counting as changes.
    stored = config_to_dict(config_from_dict(state["config"], source=f"{last} (stored config)"))
    new = config_to_dict(config)
    for section in ("model", "tokenizer"):
        if stored[section] != new[section]:
            keys = sorted(
                f"{section}.{k}" for k in new[section] if stored[section][k] != new[section][k]
            )
            raise TmtError(
                f"{run_dir} holds a run with a different {section} config ({', '.join(keys)}); "
                "resume it with its own config.yaml or choose another --run-dir"
            )
    if stored != new:
        changed = sorted(
            f"{s}.{k}" for s in new for k in new[s] if stored.get(s, {}).get(k) != new[s][k]
        )
        log.warning("resuming with changed settings: %s", ", ".join(changed))
    return state


def _tokenizers(
    config: ExperimentConfig, run_dir: Path, resume: dict[str, Any] | None
) -> tuple[Tokenizer, Tokenizer]:
    """The checkpoint's tokenizers when resuming; else train (or reuse) them into run_dir."""
    if resume is not None:
        return (
            Tokenizer.from_bytes(resume["tokenizers"]["src"]),
            Tokenizer.from_bytes(resume["tokenizers"]["tgt"]),
        )
    pair = train_tokenizers_for(config.data, config.tokenizer, run_dir)
    return pair.src, pair.tgt


def _main_rank_first(dist: DistributedContext, work: Callable[[], T]) -> T:
    """Run `work` on rank 0, then on the others (which then find caches filled)."""
    if not dist.is_main:
        dist.barrier()
    result = work()
    if dist.is_main:
        dist.barrier()
    return result


def _setup_logging(is_main: bool) -> None:
    """Logs on stderr; only rank 0 speaks below WARNING."""
    logging.basicConfig(
        level=logging.INFO if is_main else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _log_start(
    config: ExperimentConfig,
    run_dir: Path,
    model: torch.nn.Module,
    device: torch.device,
    dist: DistributedContext,
) -> None:
    n_params = sum(p.numel() for p in model.parameters())
    log.info(
        "transformer_mt %s, torch %s, python %s; device %s x %d ranks, %d threads",
        *(__version__, torch.__version__, platform.python_version(), device, dist.world_size),
        torch.get_num_threads(),
    )
    log.info("run directory %s; model has %.2fM parameters", run_dir, n_params / 1e6)
    log.info("config: %s", config_to_dict(config))
