"""The files a command reads, named so that it never writes over them.

A command that writes (`tmt translate --output`, `tmt average`, `tmt export`, `tmt train`'s
run directory ...) checks its outputs against these with `files.check_output`: the checkpoint
it was given, the corpus and tokenizer files that checkpoint was trained from, the model
directory it was imported from and, for a config, the files the run will read. Owned here
rather than by the checkpoint format (artifacts.py), which reads and writes checkpoints but
does not know what commands do with them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from transformer_mt.artifacts import stored_origin
from transformer_mt.config import DataConfig, ExperimentConfig
from transformer_mt.data.locations import source_faults, split_files


def checkpoint_input_files(path: str | Path, what: str = "checkpoint") -> list[tuple[Path, str]]:
    """The checkpoint file `path` (`what` it is, in messages), the files it was made from
    (`config_input_files` of its stored config) and the model directory it was imported from
    (`imported_from`, where it names a directory here: an export into it would replace that
    model's files), as (path, what it is) pairs: what no command given this checkpoint may
    write over (`files.check_output`).

    Only the stored config is read (`artifacts.stored_origin`), without the checks of
    `load_checkpoint`, which the command's own loading makes and reports: a file that cannot
    be read here lists only itself.
    """
    files = [(Path(path), what)]
    if not Path(path).is_file():  # missing, a folder, a FIFO (which a read would block on)
        return files
    origin = stored_origin(Path(path))
    if origin is None:  # not a checkpoint, or damaged: the loader names why
        return files
    files += config_input_files(origin.config, f"{what} {path}", origin.workdir)
    imported = origin.imported_from  # as given to tmt import: a hub name or a directory
    if imported is not None and Path(imported).is_dir():
        files.append((Path(imported), f"model {what} {path} was imported from"))
    return files


def config_input_files(
    config: ExperimentConfig, owner: str, workdir: str | None = None
) -> list[tuple[Path, str]]:
    """The local files a run of `config` reads besides the config file itself: its corpus
    (data.train, data.valid, data.test), tokenizer.extra_text, the given tokenizer models and
    train.init_from, as (path, what it is) pairs naming `owner` (the config file or checkpoint
    they come from). `workdir`: the directory a checkpoint's run read them from (`as_read`)."""
    splits = [split for split in ("train", "valid", "test") if getattr(config.data, split)]
    data = as_read(config.data, workdir, splits)
    files: list[tuple[Path, str]] = []
    for split, corpus in (("train", "training"), ("valid", "validation"), ("test", "test")):
        if split in splits:
            what = f"{corpus} corpus (data.{split}) of {owner}"
            files += [(path, what) for path in split_files(data, split)]
    named = [(text, f"tokenizer text (tokenizer.extra_text) of {owner}")
             for text in config.tokenizer.extra_text]  # fmt: skip
    for key in ("model_file", "tgt_model_file"):
        given = getattr(config.tokenizer, key)
        if given is not None:
            named.append((given, f"tokenizer model (tokenizer.{key}) of {owner}"))
    if config.train.init_from is not None:
        named.append((config.train.init_from, f"parent checkpoint (train.init_from) of {owner}"))
    for path, what in named:
        there = Path(_moved(path, workdir))
        files.append((there if there.exists() else Path(path), what))
    unique: dict[Path, str] = {}  # a language's file of several training sources, once
    for path, what in files:
        unique.setdefault(path, what)
    return list(unique.items())


def as_read(data: DataConfig, workdir: str | None, splits: Sequence[str]) -> DataConfig:
    """`data` as the run of a checkpoint read it: its relative corpus paths from `workdir`,
    the directory `tmt train` ran in (`Checkpoint.workdir`), where the files of `splits` are
    there; else `data` as it stands here (the directory gone or moved, a checkpoint that
    predates the record or an import: None). A command run from another directory had read
    `../data/train.tsv` from there: it wrote over the training corpus it was meant to refuse
    as an output, and looked for the test set in the wrong place."""
    if workdir is None or data.format == "hub" or not Path(workdir).is_dir():
        return data
    train = data.train
    if isinstance(train, str):
        train = _moved(train, workdir)
    elif train is not None:
        train = tuple(dataclasses.replace(s, path=_moved(s.path, workdir)) for s in train)
    valid, test = (None if p is None else _moved(p, workdir) for p in (data.valid, data.test))
    there = dataclasses.replace(data, train=train, valid=valid, test=test)
    return data if source_faults(there, splits) else there


def _moved(path: str, workdir: str | None) -> str:
    """A relative `path` from `workdir` (None: as it stands)."""
    if workdir is None or Path(path).is_absolute():
        return path
    return str(Path(workdir) / path)
