"""Print the README's results table (markdown) from the `results.json` of finished runs.

python scripts/results_table.py runs/multi30k_de_en runs/multi30k_en_de
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

HEADER = (
    "| direction | test set | BLEU (cased, detok.) | BLEU (lowercased) | chrF | parameters "
    "| training | machine | checkpoint |\n|---|---|---:|---:|---:|---:|---:|---|---|"
)


def machine() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return f"{line.split(':', 1)[1].strip()}, {platform.system()}"
    return platform.processor() or platform.machine()


def row(run_dir: Path) -> str:
    r = json.loads((run_dir / "results.json").read_text(encoding="utf-8"))
    return (
        f"| {r['direction']} | {Path(r['test']).name} | {r['bleu']:.1f} | "
        f"{r['bleu_lowercase']:.1f} | {r['chrf']:.1f} | {r['parameters'] / 1e6:.1f}M | "
        f"{r['train_minutes']:.0f} min | {machine()} | {r['checkpoint']}, beam {r['beam_size']}, "
        f"length penalty {r['length_penalty']} |"
    )


def main(run_dirs: list[str]) -> int:
    print(HEADER)
    for run_dir in run_dirs:
        print(row(Path(run_dir)))
    signatures = {
        json.loads((Path(d) / "results.json").read_text())["bleu_signature"] for d in run_dirs
    }
    print("\nsacreBLEU signature(s): " + "; ".join(f"`{s}`" for s in sorted(signatures)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
