"""Install PyTorch for this machine unless one is already installed.

Why a script: a bare `torch` requirement on a machine without CUDA pulls a multi-GB CUDA build.
So: an existing torch is kept (GPU users choose theirs); with an NVIDIA driver present, pip's
default (CUDA) build is installed; otherwise the CPU build, from a local wheel or pip's
configured indexes first, then from the PyTorch CPU index.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys

CPU_VERSION = "2.13.0+cpu"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def pip(*args: str) -> bool:
    return subprocess.call([sys.executable, "-m", "pip", "install", *args]) == 0


def main() -> int:
    if importlib.util.find_spec("torch") is not None:
        import torch

        print(f"install_torch: keeping the installed torch {torch.__version__}")
        return 0
    if shutil.which("nvidia-smi"):
        print("install_torch: NVIDIA driver found, installing the default (CUDA) torch build")
        return 0 if pip("torch") else 1
    print(f"install_torch: no CUDA, installing the CPU build torch=={CPU_VERSION}")
    if pip(f"torch=={CPU_VERSION}") or pip(f"torch=={CPU_VERSION}", "--extra-index-url", CPU_INDEX):
        return 0
    return (
        0
        if pip("torch", "--index-url", CPU_INDEX, "--extra-index-url", "https://pypi.org/simple")
        else 1
    )


if __name__ == "__main__":
    sys.exit(main())
