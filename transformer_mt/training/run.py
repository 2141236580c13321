"""`tmt train`: set up a run directory, tokenizers, data and model, then hand over to Trainer.

Order: config -> device and ranks -> run directory (locked for this process; fresh, or resume
from checkpoints/last.pt) -> tokenizers (trained on the training corpus, or taken from the
checkpoint) -> encoded and batched data -> model -> Trainer. Under torchrun, rank 0 holds the
lock, trains the tokenizer and fills the encoded-corpus cache first; the other ranks then find
both ready.
"""

from __future__ import annotations

import dataclasses
import logging
import platform
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import torch

from transformer_mt import __version__, kernels
from transformer_mt.artifacts import Checkpoint, fit_weights
from transformer_mt.config import (
    DataConfig,
    ExperimentConfig,
    config_to_dict,
    given_keys,
    load_config,
)
from transformer_mt.config.changes import (
    MODEL_SETTINGS,
    config_changes,
    model_setting_changes,
    normalized_config,
)
from transformer_mt.config.reading import read_yaml
from transformer_mt.data.locations import check_sources
from transformer_mt.data.pipeline import (
    prepare_data,
    train_tokenizers_for,
    unused_tokenizer_files,
)
from transformer_mt.data.specials import own_specials
from transformer_mt.data.tokenizer import Tokenizer
from transformer_mt.errors import SettingError, TmtError
from transformer_mt.evaluation import bleu_tokenize, check_tokenize
from transformer_mt.files import check_folder, refuse_read_only
from transformer_mt.langid import names_one_language
from transformer_mt.machine import (
    ThreadGovernor,
    bound_primitive_cache,
    keep_freed_memory,
    resolve_device,
    set_threads,
)
from transformer_mt.model import build_model
from transformer_mt.run_layout import (
    BEST_NAME,
    CHECKPOINTS_DIR,
    CONFIG_NAME,
    HISTORY_NAME,
    LAST_NAME,
    LOCK_NAME,
    LOG_NAME,
    METRICS_NAME,
    TOKENIZER_PREFIX,
)
from transformer_mt.run_lock import lock_run_dir
from transformer_mt.temporaries import temporary_stem_of
from transformer_mt.training import finetune
from transformer_mt.training.checkpoints import resume_checkpoint
from transformer_mt.training.config_history import record_config
from transformer_mt.training.distributed import (
    DistributedContext,
    init_distributed,
    shutdown_distributed,
)
from transformer_mt.training.footprint import check_fits
from transformer_mt.training.logs import log_file, setup_logging
from transformer_mt.training.rng import seed_everything
from transformer_mt.training.trainer import Placement, Trainer

log = logging.getLogger(__name__)
T = TypeVar("T")

# Files a run directory may hold before its first checkpoint (a run that stopped early).
RUN_DIR_FILES = {
    *(CONFIG_NAME, HISTORY_NAME, LOCK_NAME, LOG_NAME, METRICS_NAME),
    *(CHECKPOINTS_DIR, "tensorboard", "curves.png"),
}
# Settings that decide which pairs a run reads and what its checkpoint's data position counts
# (batch i of epoch e of this corpus, read this way): another corpus cannot continue from it.
# With `MODEL_SETTINGS` they are what a resumed run may not change.
CORPUS_SETTINGS = (
    "data.format",
    "data.train",
    "data.hub_name",
    "data.hub_config",
    "data.streaming",
)
# Settings that decide what a validation score measures: the BLEU of these translations (or,
# without BLEU, minus the NLL), of these sentences. A resumed run that changes one compares
# its scores with none of the checkpoint's (`_resume_state`).
VALIDATION_SETTINGS = ("train.valid_bleu", "train.valid_max_sentences", "data.valid")


def run_training(
    config_path: str | Path, run_dir: str | Path | None = None, overrides: Sequence[str] = ()
) -> int:
    """Train (or resume) the experiment of `config_path`; returns the process exit code.

    Raises:
        TmtError: a bad config, a run directory that is a file or holds something else, or one
            another training process is using.
    """
    config = load_config(config_path, list(overrides))
    run_path = Path(run_dir) if run_dir else Path("runs") / Path(config_path).stem
    check_sources(config.data, ("train", "valid"))  # every path, before any work
    if config.train.valid_bleu:
        _check_valid_bleu(config.data.tgt_lang)
    _note_unknown_languages(config.data)
    device = _train_device(config.train.device)
    dist = init_distributed(device.type)
    setup_logging(dist.is_main)
    if device.type == "cpu":
        bound_primitive_cache()
    keep_freed_memory()
    if dist.enabled and device.type == "cuda":
        device = torch.device("cuda", dist.local_rank)
        torch.cuda.set_device(device)
    try:
        # A checkpoints folder it cannot write: the run would train up to its first save and
        # lose that work there.
        check_folder(run_path / CHECKPOINTS_DIR, "the run keeps its checkpoints")
        for name in (LAST_NAME, BEST_NAME):  # replaced at every save: refused there, too late
            refuse_read_only(run_path / CHECKPOINTS_DIR / name)
        # Read once: a fine-tuning run takes its config from it (or from its parent), then any
        # run resumes from it. A refused fine-tuning config leaves the run directory unmade.
        stamp = _checkpoints_stamp(run_path / CHECKPOINTS_DIR)
        found = resume_checkpoint(run_path / CHECKPOINTS_DIR)
        parent = None
        if config.train.init_from is not None:
            given = given_keys(config_path, list(overrides))
            config, parent = finetune.resolve(config, given, found)
        if device.type == "cpu" and config.model.attention_backend == "flex":
            raise TmtError(
                "model.attention_backend=flex: trains on CUDA only (torch's FlexAttention has "
                "no backward pass on a CPU); use sdpa to train on a CPU"
            )
        origin = parent or (found[1] if found else None)
        check_fits(config, origin.weights if origin else None, device)
        with _run_dir_lock(run_path, dist), log_file(run_path, dist.is_main):
            # Read before the lock: a run that held it may have saved since, then ended.
            if _checkpoints_stamp(run_path / CHECKPOINTS_DIR) != stamp:
                raise TmtError(
                    f"{run_path}: another run saved checkpoints there while this one started; "
                    "run the command again to resume from them"
                )
            # Chosen here, so that train.log holds the count and its reason too.
            governor = _set_threads(config.train.threads) if device.type == "cpu" else None
            code = _train(config, run_path, device, dist, governor, found, parent)
        dist.barrier()  # rank 0 may still be saving: the ranks leave the group together
        return code
    finally:
        shutdown_distributed(dist)


def _check_valid_bleu(tgt_lang: str) -> None:
    """Refuse, before any work, a target language whose BLEU tokenizer is not installed:
    validation would fail at its first BLEU, after the first `valid_every` updates.

    Raises:
        TmtError: naming data.tgt_lang, the extra and the setting that does without.
    """
    try:
        check_tokenize(bleu_tokenize(tgt_lang))
    except SettingError as err:
        raise TmtError(
            f"data.tgt_lang={tgt_lang}: validation BLEU is tokenised by {err.value}, "
            f"{err.reason}; or set train.valid_bleu: false"
        ) from None


def _note_unknown_languages(data: DataConfig) -> None:
    """Warn about a language code that names no one language (`french` for fr): its text is
    split into sentences by English rules and its BLEU tokenised by 13a, whatever it is."""
    for code in dict.fromkeys(code for pair in data.directions() for code in pair):
        if not names_one_language(code):
            log.warning(
                "data language %r names no one language (ISO 639: fr, fra, pt-BR): sentences "
                "are split by English rules and BLEU is tokenised by 13a",
                code,
            )


def _checkpoints_stamp(folder: Path) -> tuple[tuple[str, int, int], ...]:
    """The name, size and modification time of each checkpoint in a run's checkpoints folder
    (not the temporaries of a save, which reading the checkpoint to resume may remove)."""
    found = []
    for path in folder.iterdir() if folder.is_dir() else ():
        if path.name.startswith("."):  # `temporaries.temporary_name`
            continue
        try:
            stat = path.stat()
        except FileNotFoundError:  # pruned by a run saving now: the stamps will differ
            continue
        found.append((path.name, stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(found))


def _train_device(choice: str) -> torch.device:
    try:
        return resolve_device(choice)
    except SettingError as err:
        raise TmtError(f"train.device: {choice}: {err.reason}") from None


def _set_threads(requested: int) -> ThreadGovernor | None:
    """Set torch's CPU threads (`machine.set_threads`), logged with the reason."""
    threads, governor = set_threads(requested)
    log.info("threads %d: %s", threads.value, threads.reason)
    return governor


def _train(
    config: ExperimentConfig,
    run_path: Path,
    device: torch.device,
    dist: DistributedContext,
    governor: ThreadGovernor | None,
    found: tuple[Path, Checkpoint] | None,
    parent: Checkpoint | None,
) -> int:
    """Train in `run_path`: resume the run there (`found`: `checkpoints.resume_checkpoint`'s
    answer), else start one, from `parent`'s weights, tokenizers and special ids when
    fine-tuning."""
    resume_path, resume = _resume_state(run_path, config, found)
    # What the tokenizers and special ids come from: the run's last checkpoint, else the parent.
    origin, origin_path = (resume, resume_path) if resume else (parent, config.train.init_from)
    src_tok, tgt_tok = _main_rank_first(
        dist, lambda: _tokenizers(config, run_path, origin, origin_path)
    )
    if origin is None:
        specials = own_specials(tgt_tok, config.tokenizer.language_tags)
    else:
        specials = origin.special_tokens(origin_path)
    data = _main_rank_first(
        dist,
        lambda: prepare_data(config, src_tok, tgt_tok, specials, dist.rank, dist.world_size),
    )
    seed_everything(config.train.seed)
    vocab_sizes = (src_tok.vocab_size, tgt_tok.vocab_size)
    model = build_model(config.model, *vocab_sizes, specials.pad, kernel=kernels.attention)
    if resume is None and parent is not None:
        _load_parent_weights(model, parent, config.train.init_from)
    # Same initial weights on every rank (DDP checks), different dropout masks afterwards.
    torch.manual_seed(config.train.seed + dist.rank)
    place = Placement(device, dist, governor)
    # Made and restored first: it refuses settings this machine cannot train with (fp16 or
    # CUDA graphs on a CPU), and a resume a replaced corpus, before config.yaml makes the
    # directory this run's or config_history.yaml records the resume.
    trainer = Trainer(
        config, model, data, (src_tok, tgt_tok), run_path, place=place, specials=specials
    )
    if resume is not None:
        trainer.restore(resume)
    if dist.is_main:
        record_config(run_path, config, resume)
        _log_start(config, run_path, model, device, dist)
    if resume is not None:
        log.info("resumed from %s at step %d", resume_path, trainer.step)
    return trainer.train().exit_code


@contextmanager
def _run_dir_lock(run_dir: Path, dist: DistributedContext) -> Iterator[None]:
    """Rank 0 holds the run directory's lock; every rank learns whether it got it, so that no
    rank waits at a barrier for a rank 0 that gave up."""
    with ExitStack() as stack:
        refusal = None
        if dist.is_main:
            try:
                stack.enter_context(lock_run_dir(run_dir))
            except TmtError as err:
                refusal = str(err)
        refusal = dist.broadcast(refusal)
        if refusal is not None:
            raise TmtError(refusal)
        yield


def _resume_state(
    run_dir: Path, config: ExperimentConfig, found: tuple[Path, Checkpoint] | None
) -> tuple[Path | None, Checkpoint | None]:
    """The checkpoint to resume from (`found`, `checkpoints.resume_checkpoint`'s answer) when it
    fits `config`: its path and contents, or (None, None) for a fresh run.

    Raises:
        TmtError: the directory holds other files, or a run of another model or corpus.
    """
    if found is None:
        stray = [p.name for p in run_dir.glob("*") if not _written_by_a_run(p.name)]
        if stray:
            raise TmtError(
                f"{run_dir} is not empty and holds no run ({', '.join(sorted(stray)[:3])}); "
                "choose another run directory"
            )
        started = _started_config(run_dir / CONFIG_NAME)
        if started is not None:  # a run stopped before its first checkpoint
            _refuse_another_run(run_dir, started, config_to_dict(config))
        return None, None
    last, checkpoint = found
    stored = normalized_config(checkpoint.config, f"{last} (stored config)")
    current = config_to_dict(config)
    _refuse_another_run(run_dir, stored, current)
    changes = config_changes(stored, current)
    if changes:
        log.warning("resuming with changed settings: %s", ", ".join(changes))
    rebased = [k for k in changes if k in VALIDATION_SETTINGS or k.startswith("decode.")]
    if rebased and checkpoint.training is not None:
        log.warning(
            "validation scores are measured anew (%s changed): the best score and the patience "
            "count start again, and the next validation writes best.pt",
            ", ".join(rebased),
        )
        fresh = dataclasses.replace(checkpoint.training, best_score=None, bad_validations=0)
        checkpoint = dataclasses.replace(checkpoint, training=fresh)
    return last, checkpoint


def _written_by_a_run(name: str) -> bool:
    """Whether a file `name` in a run directory is one a run writes before its first
    checkpoint, or the temporary of one (`temporaries.temporary_name`): rank 0 of a run writes its
    tokenizer while the other ranks look at the directory."""
    name = temporary_stem_of(name) or name
    return name in RUN_DIR_FILES or name.startswith(TOKENIZER_PREFIX)


def _refuse_another_run(run_dir: Path, stored: dict[str, Any], current: dict[str, Any]) -> None:
    """Refuse `current` where the run of `run_dir` (its config `stored`) has another model or
    corpus: one run per directory."""
    defining = model_setting_changes(stored, current, (*MODEL_SETTINGS, *CORPUS_SETTINGS))
    if defining:
        raise TmtError(
            f"{run_dir} holds a run of another model or corpus ({', '.join(defining)} differ); "
            "resume it with its own config.yaml or choose another run directory"
        )


def _started_config(path: Path) -> dict[str, Any] | None:
    """The config a run wrote at `path` when it started (None: none, or not one we can read,
    which a fresh run replaces)."""
    if not path.is_file():
        return None
    try:
        return normalized_config(read_yaml(path), str(path))
    except TmtError:
        return None


def _load_parent_weights(model: torch.nn.Module, parent: Checkpoint, path: str | None) -> None:
    fit_weights(model, parent.weights, f"train.init_from {path}")  # naming the keys
    log.info("fine-tuning from %s (step %d of its run)", path, parent.step)


def _tokenizers(
    config: ExperimentConfig, run_dir: Path, origin: Checkpoint | None, source: str | Path | None
) -> tuple[Tokenizer, Tokenizer]:
    """The tokenizers of the checkpoint the run resumes or fine-tunes (the file `source`);
    else train (or reuse) them into run_dir."""
    if origin is not None:
        src, tgt = origin.unpack_tokenizers(source)
        for name in unused_tokenizer_files(config.data, config.tokenizer, src, tgt):
            log.warning(
                "%s: not the tokenizer model %s holds (replaced since?); the run goes on with "
                "the checkpoint's, which its weights were trained on",
                *(name, source),
            )
        return src, tgt
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
    train = config.train
    log.info(
        "batch: train.max_tokens %d per rank x %d ranks x update_freq %d = %d tokens an update",
        *(train.max_tokens, dist.world_size, train.update_freq),
        train.max_tokens * dist.world_size * train.update_freq,
    )
    log.info("config: %s", config_to_dict(config))
