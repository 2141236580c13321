"""Choices between kernels that are made by timing them: made once per machine, then reused.

Two libraries that compute the same product (MKL's sgemm and oneDNN with packed weights in
float32; fbgemm and oneDNN in int8) round differently in the last bits, and after a few dozen
decoding steps those bits can change which word a beam keeps. Choosing the faster one by timing
it at every load would make a translation depend on what else the machine was doing at the
time: a busy core slows one library more than the other and flips the choice (58 of 300 lines
of an int8 model changed while two other processes kept both cores busy). So each question
("is this shape faster packed?", "which int8 engine for this shape?") is timed the first time
it is asked on a machine, and the answer is kept in a small JSON file beside the user's data,
keyed by what decides which kernel is faster: the CPU (model and flags), torch's version and
vector capability, and the quantised engines it has. Every later load, in any process, reads
the answer back, so one checkpoint and one input give the same translation on that machine
whatever it is doing.

Where the file lives: `$TMT_CACHE_DIR`, else `$XDG_CACHE_HOME/transformer_mt`, else
`~/.cache/transformer_mt`; each load logs its name. Deleting it makes the next load time the
kernels again (after a BIOS, driver or library change the fingerprint changes by itself). A
folder that cannot be written is said once in the log; the answers are then kept for this
process only.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import platform
from collections.abc import Callable, Collection
from pathlib import Path

import torch

from transformer_mt.errors import one_line
from transformer_mt.files import atomic_open

log = logging.getLogger(__name__)

FORMAT = 1  # of the JSON file; a file of another format is timed afresh


class TimedChoices:
    """The answers of timed questions on this machine, read from and written to `path`.

    An answer is a short string (a kernel's name); `choose` returns the kept answer of a
    question, or times it (`measure`) and keeps what it returns.
    """

    def __init__(self, path: Path | None, machine: dict[str, str]):
        self.path, self.machine = path, machine
        self.answers: dict[str, str] = self._read() if path is not None else {}

    def choose(self, question: str, measure: Callable[[], str], allowed: Collection[str]) -> str:
        """The answer to `question`, one of `allowed`: kept from an earlier load on this
        machine, else measured now and kept for every later one (a kept answer that is not
        allowed, from a hand-edited file, is measured again)."""
        answer = self.answers.get(question)
        if answer not in allowed:
            answer = measure()
            self.answers[question] = answer
            self._write()
        return answer

    def _read(self) -> dict[str, str]:
        """The answers in the file; none when it is missing, damaged, of another format or of
        another machine (said in the log, and then timed again)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, RecursionError) as err:
            log.warning("%s: unreadable kernel choices, timed again (%s)", self.path, one_line(err))
            return {}
        if not isinstance(data, dict):
            log.warning("%s: damaged kernel choices, timed again", self.path)
            return {}
        if data.get("format") != FORMAT or data.get("machine") != self.machine:
            return {}
        answers = data.get("answers")
        if not isinstance(answers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in answers.items()
        ):
            log.warning("%s: damaged kernel choices, timed again", self.path)
            return {}
        return answers

    def _write(self) -> None:
        """Keep the answers; a folder that cannot be written keeps them for this process."""
        if self.path is None:
            return
        data = {"format": FORMAT, "machine": self.machine, "answers": self.answers}
        try:
            with atomic_open(self.path) as f:
                json.dump(data, f, indent=1, sort_keys=True)
                f.write("\n")
        except Exception as err:  # a cache must never stop a translation
            log.warning(
                "kernel choices cannot be kept in %s (%s): translations of later runs may "
                "differ in the last digits when the machine is busy; set TMT_CACHE_DIR",
                self.path,
                one_line(err),
            )
            self.path = None


@functools.cache
def machine_choices() -> TimedChoices:
    """This process's view of the machine's timed choices (one per process, so that every
    model loaded in it takes the same kernels even where the file cannot be written)."""
    machine = machine_fingerprint()
    digest = hashlib.sha256(json.dumps(machine, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_dir() / f"kernel-choices-{digest}.json"
    choices = TimedChoices(path, machine)
    log.info("kernel choices: %s (delete it to time the kernels again)", path)
    return choices


def cache_dir() -> Path:
    """Where the package keeps what it learned about this machine (see the module)."""
    explicit = os.environ.get("TMT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "transformer_mt"


def machine_fingerprint() -> dict[str, str]:
    """What decides which of two kernels is faster here: the CPU's model and flags, torch's
    version and the vector capability it dispatches to, its quantised engines and oneDNN."""
    return {
        "cpu": _cpu_model(),
        "cpu_flags": hashlib.sha256(_cpu_flags().encode()).hexdigest()[:16],
        "torch": torch.__version__,
        "capability": torch.backends.cpu.get_cpu_capability(),
        "quantized_engines": ",".join(torch.backends.quantized.supported_engines),
        "onednn": str(torch.backends.mkldnn.is_available()),
    }


def _cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux; `platform` elsewhere)."""
    return _cpuinfo_field("model name") or platform.processor() or platform.machine()


def _cpu_flags() -> str:
    """The CPU's feature flags as the kernel lists them (empty where there is no /proc)."""
    return _cpuinfo_field("flags")


def _cpuinfo_field(name: str) -> str:
    """The first value of `name` in /proc/cpuinfo, or ""."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == name:
                    return value.strip()
    except OSError:
        pass
    return ""
