"""The files a command reads, named so that it never writes over them.

A command that writes (`tmt translate --output`, `tmt average`, `tmt export`, `tmt train`'s
run directory ...) checks its outputs against these with `files.check_output`: the checkpoint
it was given, the corpus and tokenizer files that checkpoint was trained from, the model
directory it was imported from and, for a config, the files the run will read. Owned here
rather than by the checkpoint format (artifacts.py), which reads and writes checkpoints but
does not know what commands do with them.
"""

from __future__ import annotations

from pathlib import Path

from transformer_mt.artifacts import stored_origin
from transformer_mt.config import ExperimentConfig
from transformer_mt.data.locations import split_files


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
    they come from). `workdir`: the directory a checkpoint's run read them from (`in_workdir`;
    None: this process's)."""

    files: list[tuple[Path, str]] = []
    for split, corpus in (("train", "training"), ("valid", "validation"), ("test", "test")):
        if getattr(config.data, split) is not None:
            what = f"{corpus} corpus (data.{split}) of {owner}"
            files += [(path, what) for path in split_files(config.data, split)]
    what = f"tokenizer text (tokenizer.extra_text) of {owner}"
    files += [(Path(text), what) for text in config.tokenizer.extra_text]
    for key in ("model_file", "tgt_model_file"):
        given = getattr(config.tokenizer, key)
        if given is not None:
            files.append((Path(given), f"tokenizer model (tokenizer.{key}) of {owner}"))
    if config.train.init_from is not None:
        what = f"parent checkpoint (train.init_from) of {owner}"
        files.append((Path(config.train.init_from), what))
    unique: dict[Path, str] = {}  # a language's file of several training sources, once
    for path, what in files:
        unique.setdefault(Path(in_workdir(str(path), workdir)), what)
    return list(unique.items())


def in_workdir(path: str, workdir: str | None) -> str:
    """A path a checkpoint's config gives, as its run read it: a relative one from `workdir`,
    the directory `tmt train` ran in (`Checkpoint.workdir`), where that still exists; as it
    stands otherwise (None: a checkpoint that predates the record, or an import). A command
    run from another directory had read `../data/train.tsv` from there: it wrote over the
    training corpus it was meant to refuse as an output, and looked for the test set in the
    wrong place."""
    if workdir is None or Path(path).is_absolute() or not Path(workdir).is_dir():
        return path
    return str(Path(workdir) / path)
