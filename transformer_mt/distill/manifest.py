"""What a distillation run directory holds: the manifest that makes resuming safe.

A chunk of teacher translations is worth keeping only if the next run would have written the
same one. The manifest records everything a translation depends on: the teacher's weights (a
digest of the checkpoint file, so a moved file is the same teacher and a retrained one is
not), the corpus (a digest of its files and format), the direction, the decode settings that
change output (`config.OUTPUT_NEUTRAL_FIELDS` excepted: batch size changes no translation), int8
or not, and the chunk size (which lines each chunk file holds). A run directory holding
another manifest is refused with one line naming what differs; one holding other files
(a training run, say) is refused too: one run per run directory. The filter rules are not
recorded: they apply when the corpus is assembled, so changing them needs no retranslation.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformer_mt.config import OUTPUT_NEUTRAL_FIELDS, DataConfig, DecodeConfig
from transformer_mt.data.locations import describe_split, split_files
from transformer_mt.errors import TmtError, one_line
from transformer_mt.files import atomic_open

MANIFEST_NAME = "manifest.json"
LOCK_NAME = "distill.lock"  # held while a distillation writes its directory (`run_lock`)
# Fields that say where things were, shown in messages but not compared: the same teacher or
# corpus may be moved or copied between runs of one distillation.
SHOWN_ONLY = ("teacher", "corpus")
READ_BYTES = 1 << 20


@dataclass(frozen=True)
class Manifest:
    """One distillation's settings, as `manifest.json` of its run directory holds them."""

    teacher: str  # the checkpoint's path when the run started
    teacher_sha256: str
    corpus: str  # data.train, as `describe_split` names it
    corpus_sha256: str  # of data.format and the corpus files (a hub split: of its name)
    direction: str  # "de->en"
    decode: dict[str, Any]  # DecodeConfig fields that change output
    quantize: str | None
    chunk_lines: int

    @classmethod
    def of(
        cls,
        checkpoint: str | Path,
        data: DataConfig,
        decode: DecodeConfig,
        quantize: str | None,
        chunk_lines: int,
    ) -> Manifest:
        """The manifest of distilling `data.train` with `checkpoint` (files read to digest)."""
        head = data.format
        if data.format == "hub":  # no local files: its name is all there is to compare
            head += f":{data.hub_name}:{data.hub_config}:{describe_split(data)}"
        settings = _decode_settings(decode)
        return cls(
            teacher=str(checkpoint),
            teacher_sha256=sha256([Path(checkpoint)]),
            corpus=describe_split(data),
            corpus_sha256=sha256(split_files(data, "train"), head),
            direction=f"{data.src_lang}->{data.tgt_lang}",
            decode=settings,
            quantize=quantize,
            chunk_lines=chunk_lines,
        )

    @classmethod
    def read(cls, path: Path) -> Manifest:
        """The manifest in file `path`.

        Raises:
            TmtError: not JSON, or not the fields of a manifest.
        """
        try:
            fields = json.loads(path.read_text(encoding="utf-8"))
            _check_fields(fields)
            # A decode field added since the manifest was written: the search then ran as its
            # default does (new fields default to the earlier behaviour).
            fields["decode"] = {**_decode_settings(DecodeConfig()), **fields["decode"]}
            return cls(**fields)
        except (ValueError, TypeError, RecursionError) as err:
            raise TmtError(f"{path}: not a distillation manifest ({one_line(err)})") from None

    def differences(self, other: Manifest) -> list[str]:
        """`field: this there, other here` for each compared field that differs (decode
        settings one by one; the teacher and corpus named by their paths)."""
        found = []
        for field in dataclasses.fields(self):
            mine, theirs = getattr(self, field.name), getattr(other, field.name)
            if field.name in SHOWN_ONLY or mine == theirs:
                continue
            if field.name == "decode":
                keys = dict.fromkeys([*mine, *theirs])
                found += [
                    f"decode.{key}: {mine.get(key)!r} there, {theirs.get(key)!r} here"
                    for key in keys
                    if mine.get(key) != theirs.get(key)
                ]
            elif field.name == "teacher_sha256":
                found.append(f"teacher: {self.teacher} there, {other.teacher} here, other weights")
            elif field.name == "corpus_sha256":
                found.append(f"corpus: {self.corpus} there, {other.corpus} here, other contents")
            else:
                found.append(f"{field.name}: {mine!r} there, {theirs!r} here")
        return found


def _decode_settings(decode: DecodeConfig) -> dict[str, Any]:
    """The fields of `decode` that change output, by name."""
    return {
        field.name: getattr(decode, field.name)
        for field in dataclasses.fields(decode)
        if field.name not in OUTPUT_NEUTRAL_FIELDS
    }


def claim_run_dir(run_dir: Path, manifest: Manifest) -> bool:
    """Make `run_dir` the directory of `manifest`'s distillation; True when it already was
    (a resume), False when it was new or empty and the manifest was written into it.

    Raises:
        TmtError: `run_dir` (a directory: `run_lock.lock_run_dir` made or checked it) holds
            files but no manifest, or holds the manifest of another distillation (naming
            each setting that differs).
    """
    path = run_dir / MANIFEST_NAME
    if path.is_file():
        differences = Manifest.read(path).differences(manifest)
        if differences:
            raise TmtError(
                f"{run_dir}: holds another distillation ({'; '.join(differences)}); resume it "
                "with its own settings, or distill into another directory"
            )
        return True
    if run_dir.is_dir() and any(path.name != LOCK_NAME for path in run_dir.iterdir()):
        raise TmtError(
            f"{run_dir}: holds files but no {MANIFEST_NAME}, so no distillation of its own; "
            "distill into a new or empty directory"
        )
    with atomic_open(path) as f:
        json.dump(dataclasses.asdict(manifest), f, indent=1)
        f.write("\n")
    return False


def sha256(paths: list[Path], head: str = "") -> str:
    """The SHA-256 of `head` and the bytes of the files `paths` in order, read a megabyte at a
    time."""
    digest = hashlib.sha256(head.encode())
    for path in paths:
        with open(path, "rb") as f:
            while block := f.read(READ_BYTES):
                digest.update(block)
    return digest.hexdigest()


def _check_fields(fields: object) -> None:
    """Refuse what is not a manifest's mapping of fields, in words (not as the constructor's
    TypeError would put it).

    Raises:
        TypeError: not a mapping, a field missing or unknown, or a decode that is not a
            mapping of settings.
    """
    if not isinstance(fields, dict):
        raise TypeError(f"a JSON {type(fields).__name__}, not an object of fields")
    if not isinstance(fields.get("decode", {}), dict):
        raise TypeError("its decode is not a mapping of settings")
    names = [field.name for field in dataclasses.fields(Manifest)]
    missing = [name for name in names if name not in fields]
    unknown = [name for name in fields if name not in names]
    if missing or unknown:
        said = [f"no {', '.join(missing)}"] if missing else []
        said += [f"unknown {', '.join(map(str, unknown))}"] if unknown else []
        raise TypeError("; ".join(said))
