"""What a benchmark figure depends on: CPU model, core and thread counts, library versions, load.

Every benchmark record carries this so that numbers from different machines or a busy machine
are never compared unknowingly. Used by `scripts/benchmark.py` and the bench_* scripts.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout, uninstalled
from transformer_mt.machine import allowed_cores, cpu_capability, native_bf16  # noqa: E402


def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo (Linux), else `platform.processor()`."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def load_average() -> float:
    """1-minute load average: other processes competing for the cores while we measure."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else float("nan")


def usable_cores() -> int:
    """The cores this process may run on: 1 when pinned (`taskset -c 1`), which is how the
    benchmarks that time one call at a time are meant to run."""
    return len(allowed_cores()) or os.cpu_count() or 1


def run_conditions() -> dict:
    """What a CPU timing taken now depends on beside the code: torch's threads, the usable
    cores and the 1-minute load; fields of each row of the benchmarks that translate."""
    return {"threads": torch.get_num_threads(), "cpus": usable_cores(), "load": load_average()}


def conditions_text(row: dict) -> str:
    """A row's `run_conditions` as the line under its table says them."""
    return f"{row['threads']} thread(s), {row['cpus']} core(s), load {row['load']}"


def machine_info() -> dict:
    """CPU, cores, torch threads, versions and current load, as one JSON-serialisable dict."""
    info = {
        "cpu": cpu_model(),
        "capability": cpu_capability(),
        "native_bf16": bool(native_bf16().value),
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "load_1min": load_average(),
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def package_version(distribution: str) -> str:
    """`name version` of an installed distribution, for the rows of a benchmark of libraries."""
    return f"{distribution} {importlib.metadata.version(distribution)}"


def install_mb(distribution: str) -> float:
    """The size of the distribution's installed files (its own, not its dependencies'), in MB:
    what choosing it adds to an install."""
    files = importlib.metadata.distribution(distribution).files or []
    paths = [Path(file.locate()) for file in files]
    return round(sum(path.stat().st_size for path in paths if path.is_file()) / 1e6, 1)


def pick_device(name: str | None) -> torch.device:
    """`--device` as given, else CUDA when there is one: the rule of every benchmark."""
    return torch.device(name or ("cuda" if torch.cuda.is_available() else "cpu"))


def table_footer(row: dict) -> str:
    """The machine line under a benchmark table: CPU, threads, torch."""
    capability = row.get("capability", "?")
    return f"{row['cpu']} ({capability}), {row['threads']} threads, torch {row['torch']}"


def print_markdown_table(headers: list[str], aligns: str, rows: list[list], file) -> None:
    """A Markdown table, as docs/benchmarks.md holds them: `aligns` has one letter a column,
    `r` (right-aligned: numbers) or `l`."""
    print("| " + " | ".join(headers) + " |", file=file)
    print("|" + "".join("---:|" if a == "r" else "---|" for a in aligns), file=file)
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |", file=file)


# A bare python that runs the command after its first argument, writes the command's peak
# resident memory (KiB) into the file named by that argument, and exits with its status.
_PEAK_LAUNCHER = (
    "import resource, subprocess, sys; status = subprocess.call(sys.argv[2:]); "
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); "
    "sys.exit(status)"
)


def own_peak_rss(command: list[str], report: Path) -> list[str]:
    """`command`, started by a small launcher that writes the command's peak resident memory
    (KiB) to `report` when it exits, and exits with its status; standard streams pass through.

    On Linux a child's `ru_maxrss` starts at the resident size of the process it was forked
    from, whose copy counts until the exec: from a process that has imported torch (~230 MiB,
    ~360 MiB for pytest with the test fixtures) a command can never read lower, and a
    memory figure or test of a smaller command measures its starter. Forked from the launcher
    (~14 MiB), the command's figure is its own."""
    return [sys.executable, "-c", _PEAK_LAUNCHER, str(report), *command]


def run_standalone(
    doc: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], list[dict]],
    print_table: Callable[..., None],
) -> None:
    """`python scripts/bench_<name>.py`: JSON lines on stdout, then the table on stderr."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    add_arguments(parser)
    results = run(parser.parse_args())
    for row in results:
        print(json.dumps(row))
    print(file=sys.stderr)
    print_table(results, file=sys.stderr)
