"""Where an imported model's files come from: a local directory, or a hub name resolved through
huggingface_hub's own download and cache (the one `transformers.from_pretrained` uses)."""

from __future__ import annotations

from pathlib import Path

from transformer_mt.errors import TmtError, one_line
from transformer_mt.interop.hf_m2m100 import SPM_FILE
from transformer_mt.text_files import path_kind

# The files a converter reads; weights in either format transformers writes.
MODEL_FILES = [
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "pytorch_model.bin",
    "*.spm",
    SPM_FILE,
    "*.json",
]


def model_directory(source: str) -> Path:
    """`source` as a directory of model files: itself when it is one, else the hub snapshot of
    the repository it names (downloaded once into the hub cache).

    Raises:
        TmtError: not a directory and not a hub name that can be fetched (offline, unknown
            repository, huggingface_hub missing), naming it and saying what to pass instead.
    """
    path = Path(source)
    if path.is_dir():
        return path
    if path.exists() or path.is_symlink():  # a link to nothing is local, not a hub name
        kind = path_kind(path)
        raise TmtError(f"{source}: {kind}, not a directory; pass a Hugging Face model directory")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise TmtError(
            f"{source}: no such directory, and fetching hub models needs transformers: "
            "pip install 'transformer_mt[hf]'"
        ) from None
    try:
        return Path(snapshot_download(repo_id=source, allow_patterns=MODEL_FILES))
    except Exception as err:  # huggingface_hub raises many kinds: offline, 404, bad id
        raise TmtError(
            f"{source}: no such directory, and the hub cannot provide it "
            f"({one_line(err)}); pass a local directory holding the model's files"
        ) from None
