"""What this machine has, and the choices that follow from it: native bfloat16, torch threads,
how freed memory and oneDNN's kernels are kept.

A default that suits one CPU can be ten times wrong on another: bfloat16 autocast is 25% faster
than float32 where the CPU computes bfloat16 natively (AMX tiles, avx512_bf16) and about ten
times slower where it is emulated (AVX2-only CPUs). Two torch threads beat one on an idle
2-core machine and lose badly when another process holds a core, because OpenMP threads wait
for each other at every barrier. So these choices are made here, at start, from what the
machine reports, and each comes with the reason that is logged beside it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from transformer_mt.errors import SettingError

# torch's vector kernels for bfloat16 are native only in its AVX-512 builds of each operator.
_AVX512_CAPABILITIES = ("AVX512", "AVX512_BF16", "AMX")
# A core counts as busy when other processes kept it this share of the sampled time.
BUSY_SHARE = 0.5


@dataclass(frozen=True)
class Choice:
    """A machine-dependent setting and the reason it was taken (a log line)."""

    value: object
    reason: str


def cpu_capability() -> str:
    """The vector instruction set torch dispatches to ('AVX2', 'AVX512', ...).

    `ATEN_CPU_CAPABILITY=avx2` lowers it, and then torch runs its AVX2 kernels even on an
    AVX-512 CPU; every choice below follows what torch will actually run.
    """
    return torch.backends.cpu.get_cpu_capability()


def native_bf16() -> Choice:
    """Whether this CPU computes bfloat16 natively (value: bool), with the reason.

    Native means torch's AVX-512 kernels are in use and the CPU has AMX tiles or
    avx512_bf16 instructions; anything else emulates bfloat16 through float32 conversions.
    """
    capability = cpu_capability()
    if not capability.startswith(_AVX512_CAPABILITIES):
        return Choice(False, f"CPU capability {capability} has no native bf16")
    if cpu_has("amx_tile"):
        return Choice(True, f"CPU capability {capability} with AMX tiles")
    if cpu_has("avx512_bf16"):
        return Choice(True, f"CPU capability {capability} with avx512_bf16")
    return Choice(False, f"CPU capability {capability} without avx512_bf16 or AMX")


def cpu_has(feature: str) -> bool:
    """Whether torch reports the CPU feature (`torch.cpu._is_<feature>_supported`, e.g.
    amx_tile, avx512_bf16); False on a torch without that probe."""
    return getattr(torch.cpu, f"_is_{feature}_supported", lambda: False)()


def choose_threads(requested: int, sample_seconds: float = 0.3) -> Choice:
    """Torch threads for this process (value: int), with the reason.

    `requested` > 0 is taken as given, then OMP_NUM_THREADS (torchrun sets it to share the
    cores among its processes). Otherwise (auto) the cores this process may run on
    (`os.sched_getaffinity`) less those that other processes kept busy during a short sample:
    an OpenMP thread that shares its core with another busy process makes every other thread
    wait for it at each barrier, so one thread per free core is faster than one per core.
    """
    if requested > 0:
        return Choice(requested, f"{requested} thread(s) as configured")
    env = _env_threads()
    if env is not None:
        return Choice(env, f"{env} thread(s) from OMP_NUM_THREADS")
    cores = allowed_cores()
    if not cores:
        n = os.cpu_count() or 1
        return Choice(n, f"{n} thread(s), one per core")
    busy = busy_cores(cores, sample_seconds)
    free = max(len(cores) - len(busy), 1)
    if not busy:
        return Choice(free, f"{free} thread(s), one per idle core")
    return Choice(
        free,
        f"{free} thread(s): core(s) {', '.join(map(str, busy))} of {len(cores)} busy with "
        "other work (OMP_NUM_THREADS, or train.threads in training, sets the count)",
    )


class OtherWork:
    """The CPU time other processes take on a set of cores: the cores' busy time
    (/proc/stat; steal counts as busy, the core was not ours) less this process's own CPU
    time, measured from one reading to the next, in cores (1.0: one core's time).

    What tells a training run how many threads the machine leaves it (`ThreadGovernor`), and
    a benchmark whether another process shared the cores it timed on (scripts/).
    """

    def __init__(self, cores: list[int]) -> None:
        self.cores = cores
        self._mark = (_cpu_times(), time.process_time(), time.monotonic())

    def seconds(self) -> float:
        """Seconds since the last reading."""
        return time.monotonic() - self._mark[2]

    def read(self) -> float | None:
        """Other processes' share of `cores` since the last reading, in cores; starts the next
        measurement. None where there is no /proc/stat, or no time passed."""
        before, own_before, then = self._mark
        after, own, now = _cpu_times(), time.process_time(), time.monotonic()
        self._mark = (after, own, now)
        if not before or now <= then:
            return None
        busy = sum(
            (after[c][1] - after[c][0]) - (before[c][1] - before[c][0])
            for c in self.cores
            if c in before and c in after
        )
        return max(busy / os.sysconf("SC_CLK_TCK") - (own - own_before), 0.0) / (now - then)


class ThreadGovernor:
    """Keeps torch's thread count at the cores other processes leave free, while training runs.

    A choice made at start goes stale when the user starts something else: with two threads
    and one core taken, every OpenMP barrier waits for the parked thread and training runs
    several times slower than on one thread (docs/machines.md). `update()`, called from the
    training loop's thread (thread counts are per calling thread in OpenMP), reads the other
    processes' share of the cores (`OtherWork`) since the last measurement.
    """

    MIN_SECONDS = 5.0  # measure over at least this long, so one slow step does not decide

    def __init__(self, cores: list[int], threads: int) -> None:
        self.cores = cores
        self.threads = threads
        self._others = OtherWork(cores)

    def update(self) -> Choice | None:
        """Set and return a new thread count when the free cores changed, else None."""
        if self._others.seconds() < self.MIN_SECONDS:
            return None
        others = self._others.read()
        if others is None:
            return None
        free = max(len(self.cores) - int(others + 1 - BUSY_SHARE), 1)
        if free == self.threads:
            return None
        self.threads = free
        torch.set_num_threads(free)
        return Choice(
            free, f"{free} thread(s): other processes use {others:.1f} of {len(self.cores)} cores"
        )


def set_threads(requested: int) -> tuple[Choice, ThreadGovernor | None]:
    """Set torch's CPU threads (`choose_threads`); returns the choice and, when the count was
    chosen automatically on a machine of two or more cores, the governor that can keep it
    following the load (None where the count is fixed by the config or OMP_NUM_THREADS)."""
    threads = choose_threads(requested)
    torch.set_num_threads(threads.value)
    cores = allowed_cores()
    if requested > 0 or _env_threads() is not None or len(cores) < 2:
        return threads, None
    return threads, ThreadGovernor(cores, threads.value)


def _env_threads() -> int | None:
    """OMP_NUM_THREADS when it is a positive count (OpenMP ignores anything else)."""
    env = os.environ.get("OMP_NUM_THREADS", "")
    # ASCII digits only: "²" is a digit to str.isdigit and no number to int().
    return int(env) if env.isascii() and env.isdigit() and int(env) > 0 else None


def resolve_device(choice: str) -> torch.device:
    """`choice` (auto, cpu, cuda) as a device; auto takes CUDA when there is one.

    Raises:
        SettingError: another name (`cuda:1` is taken), or cuda asked for where there is no
            CUDA device.
    """
    if choice not in ("auto", "cpu") and choice.partition(":")[0] != "cuda":
        raise SettingError("device", choice, "choose auto, cpu or cuda")
    if choice.startswith("cuda") and not torch.cuda.is_available():
        raise SettingError("device", choice, "no CUDA device is available")
    if choice == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(choice)


def allowed_cores() -> list[int]:
    """The CPUs this process may run on; [] where the OS does not say."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def busy_cores(cores: list[int], sample_seconds: float) -> list[int]:
    """The cores of `cores` that were busy at least BUSY_SHARE of a short sample (Linux).

    Read from /proc/stat, the kernel's per-CPU time counters; elsewhere returns [] (no core is
    known to be busy, so every core is used).
    """
    before = _cpu_times()
    if not before:
        return []
    time.sleep(sample_seconds)
    after = _cpu_times()
    busy = []
    for core in cores:
        if core not in before or core not in after:
            continue
        (idle0, total0), (idle1, total1) = before[core], after[core]
        elapsed = total1 - total0
        if elapsed > 0 and 1 - (idle1 - idle0) / elapsed >= BUSY_SHARE:
            busy.append(core)
    return busy


def _cpu_times() -> dict[int, tuple[int, int]]:
    """{cpu: (idle ticks, total ticks)} from /proc/stat; {} where there is none."""
    stat = Path("/proc/stat")
    if not stat.exists():
        return {}
    times = {}
    for line in stat.read_text().splitlines():
        name, *fields = line.split()
        if name.startswith("cpu") and name != "cpu":
            ticks = [int(f) for f in fields[:8]]  # user nice system idle iowait irq softirq steal
            times[int(name[3:])] = (ticks[3] + ticks[4], sum(ticks))
    return times


# glibc's mallopt parameters (malloc.h) and the size below which freed memory is kept.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
KEEP_FREED_BYTES = 1 << 30


def keep_freed_memory() -> bool:
    """Let glibc keep freed blocks up to KEEP_FREED_BYTES for reuse; False where there is no
    glibc (its defaults stand).

    Decoding allocates tensors of tens of MB every step (log-probs over the vocabulary, the
    gathered cache), training every update (activations, the loss gradient over the
    vocabulary). By default glibc serves each with a fresh mmap and unmaps it when freed, so
    every step pays the kernel's page faults again; kept in the heap, the pages are reused.
    Measured on `Translator.translate` of Multi30k test2016, one thread: 75 -> 82 sentences/s,
    peak memory 896 -> 976 MB; a base-size bf16 training update: ~60,000 -> ~150 page faults
    (docs/results.md, 2026-12-02).

    Every thread allocates from the one main heap (at most one arena): a thread's own arena is
    a set of mmapped heaps of at most 64 MiB that glibc trims and maps again, so the server's
    decoding thread paid the faults regardless (docs/results.md, 2026-12-02).
    Call it before the threads that decode start.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(
        mallopt(_M_MMAP_THRESHOLD, KEEP_FREED_BYTES)
        and mallopt(_M_TRIM_THRESHOLD, KEEP_FREED_BYTES)
        and mallopt(_M_ARENA_MAX, 1)
    )


# oneDNN primitives a training process keeps (oneDNN's own default: 1,024): see
# `bound_primitive_cache`.
TRAINING_PRIMITIVES = 16


def bound_primitive_cache(capacity: int = TRAINING_PRIMITIVES) -> None:
    """Keep at most `capacity` oneDNN primitives in this process (oneDNN's
    ONEDNN_PRIMITIVE_CACHE_CAPACITY), unless the user set that variable.

    Training in bfloat16 on a CPU runs its matrix products through oneDNN, which keeps a
    primitive (kernels and their buffers, several MB each at the quickstart model's sizes) for
    every shape it meets, 1,024 of them by default. Batches whose lengths are not padded
    (train.pad_to_multiple 1) bring a few hundred shapes an epoch: the quickstart training's
    resident memory grew from 1.0 to 3.2 GB in three minutes; with 16 kept, to 1.8 GB, in
    494-515 updates instead of 457-467; padded to 8, 1.1-1.2 GB either way at the same speed.
    Decoding test2016 is as fast with 16 and translates the same (docs/results.md,
    2026-12-05). oneDNN reads the variable when it first makes a primitive, so this is called
    before the first product.
    """
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(capacity))


_ALLOCATION = re.compile(r"can't allocate memory: you tried to allocate (\d+) bytes")


def out_of_memory_message(err: BaseException) -> str | None:
    """One line for an allocation the machine could not satisfy, or None for another error.

    torch's CPU allocator raises a `RuntimeError` quoting the bytes asked for; Python raises
    `MemoryError`. The line says how much was asked and how much the machine has available
    (`MemAvailable` of /proc/meminfo), so the user can pick a smaller model or batch.
    """
    if isinstance(err, MemoryError):
        asked = "more memory than is available"
    else:
        match = _ALLOCATION.search(str(err))
        if match is None:
            return None
        asked = f"{gib(int(match.group(1)))} in one allocation"
    cpu = torch.device("cpu")
    available = available_memory(cpu)
    have = "" if available is None else f"; {memory_left(cpu, available)}"
    limit = address_space_limit()
    if limit is not None:  # the machine may have plenty: this process may not take it
        have += f", this process may address at most {gib(limit)} (ulimit -v)"
    return (
        f"out of memory: the work asked for {asked}{have} (use a smaller model, batch, beam "
        "or input)"
    )


def address_space_limit() -> int | None:
    """The bytes of address space this process may map (`ulimit -v`), None for no limit."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def available_memory(device: torch.device) -> int | None:
    """Bytes of memory available to new allocations on `device`: a GPU's free memory, or the
    machine's `MemAvailable` (Linux); None where that is not known."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    if device.type != "cpu":
        return None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def gib(count: int) -> str:
    """`count` bytes in GiB, as messages show memory."""
    return f"{count / 2**30:,.1f} GiB"


def memory_left(device: torch.device, available: int) -> str:
    """How refusals say `available_memory`: "this machine has 22.6 GiB available" on a CPU,
    "cuda:0 has ..." on a GPU."""
    where = "this machine" if device.type == "cpu" else str(device)
    return f"{where} has {gib(available)} available"
