"""The weights of a model directory: the file transformers will read, checked before it reads
it, then read through transformers with everything it would make up refused.

transformers reads model.safetensors, else the shards of model.safetensors.index.json, else
pytorch_model.bin, else the shards of pytorch_model.bin.index.json. Each file is checked
first: a regular file (`import_files`), not empty, whole (safetensors' header covers the file
exactly; a zip archive has its central directory), and its tensors' names and shapes fit
config.json. A pickle (pytorch_model.bin) is only ever loaded with `weights_only=True`, which
builds tensors and refuses anything that would run code on loading.

Then transformers loads the model; a tensor the file lacks, which transformers would fill with
random values, or one the config does not describe, which it would skip, is refused: the
imported model would not be the published one.
"""

from __future__ import annotations

import contextlib
import copy
import pickle
import warnings
import zipfile
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from transformer_mt.errors import TmtError, one_line
from transformer_mt.interop.import_files import check_file, present, read_json
from transformer_mt.machine import out_of_memory_message

# In transformers' order of preference; an index names the shards that hold the tensors.
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
NEEDS_WEIGHTS = "the model's weights are needed"


def read_weights(model_class: Any, directory: Path, hf_config: Any) -> dict[str, Tensor]:
    """The state dict of the `model_class` (a transformers class) in `directory`, configured
    by `hf_config` (checked before).

    Raises:
        TmtError: no weights file, or one that is damaged, unsafe, or does not fit the config,
            naming the file and what is wrong.
    """
    source, files = weight_files(directory)
    shapes: dict[str, tuple[tuple[int, ...], Path]] = {}
    for path in files:
        shapes.update({key: (shape, path) for key, shape in tensor_shapes(path).items()})
    check_layer_counts(shapes, hf_config, source)
    check_shapes(model_class, hf_config, shapes)
    try:
        hf_model, info = model_class.from_pretrained(
            directory, config=hf_config, output_loading_info=True
        )
    except Exception as err:  # transformers, safetensors and torch raise many kinds
        if out_of_memory_message(err) is not None:
            raise  # the machine's, not the file's: the CLI says so and exits 1
        raise TmtError(f"{source}: transformers cannot load it ({one_line(err)})") from None
    refuse_made_up_tensors(info, source)
    return hf_model.state_dict()


def weight_files(directory: Path) -> tuple[Path, list[Path]]:
    """The file transformers reads (a weights file or an index) and the weights files it
    names (itself, or the index's shards), each checked to be a readable regular file."""
    for name in WEIGHT_FILES:
        path = directory / name
        if present(path):
            check_file(path, NEEDS_WEIGHTS)
            return path, _shards(path) if name.endswith(".index.json") else [path]
    raise TmtError(
        f"{directory / WEIGHT_FILES[0]}: missing, and so is pytorch_model.bin; {NEEDS_WEIGHTS}"
    )


def _shards(index: Path) -> list[Path]:
    """The shard files an index's `weight_map` (tensor name -> file name) names."""
    weight_map = read_json(index).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise TmtError(f"{index}: weight_map must map tensor names to shard files")
    names = set(weight_map.values())
    for name in sorted(names, key=str):
        if not isinstance(name, str) or Path(name).name != name or name in (".", ".."):
            raise TmtError(f"{index}: weight_map names {name!r}, not a file of this directory")
    shards = [index.parent / name for name in sorted(names)]
    for shard in shards:
        check_file(shard, f"{index.name} names it")
    return shards


def tensor_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """Each tensor's name and shape in the weights file `path` (read without its values where
    the format allows: safetensors' header, a memory-mapped zip archive).

    Raises:
        TmtError: `path` is empty, damaged or cut short, holds something other than tensors
            by name, or is a pickle that would run code on loading.
    """
    if path.stat().st_size == 0:
        raise TmtError(f"{path}: empty; {NEEDS_WEIGHTS}")
    if path.suffix == ".safetensors":
        return _safetensors_shapes(path)
    return _pickle_shapes(path)


def _safetensors_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            names = f.keys()  # a safetensors handle, which cannot be iterated itself
            return {key: tuple(f.get_slice(key).get_shape()) for key in names}
    except (SafetensorError, OSError) as err:
        raise TmtError(f"{path}: not a safetensors file, or cut short ({one_line(err)})") from None


def _pickle_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    """A pickled state dict's shapes, loaded with weights_only=True only."""
    zipped = zipfile.is_zipfile(path)  # torch.save's format since 1.6; mmap needs it
    try:
        with warnings.catch_warnings():  # torch warns about pickle protocols, on stderr
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=zipped)
    except pickle.UnpicklingError:
        raise TmtError(_refused_pickle(path, zipped)) from None
    except MemoryError:
        raise  # the machine's, not the file's
    except Exception as err:  # a damaged file trips the unpickler in many ways
        raise TmtError(f"{path}: not a PyTorch weights file, or cut short ({_gist(err)})") from None
    if not isinstance(state, dict) or not all(
        isinstance(key, str) and isinstance(value, Tensor) for key, value in state.items()
    ):
        raise TmtError(f"{path}: holds a {type(state).__name__}, not tensors by name")
    return {key: tuple(value.shape) for key, value in state.items()}


def _refused_pickle(path: Path, zipped: bool) -> str:
    """Why a pickle that `weights_only=True` refused is refused: the code it would call, when
    torch can tell."""
    unsafe: list[str] = []
    find_unsafe = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)
    if zipped and find_unsafe is not None:
        with contextlib.suppress(Exception):
            unsafe = find_unsafe(path)
    safe_load = "loaded with weights_only=True, which builds tensors and runs no code"
    if unsafe:
        return f"{path}: refused: loading it would call {', '.join(unsafe[:3])} ({safe_load})"
    return f"{path}: refused: not a pickle of tensors only, or damaged ({safe_load})"


def _gist(err: BaseException) -> str:
    """The first sentence of another library's message (torch's run on for lines)."""
    return f"{type(err).__name__}: {one_line(err)}".split(". ")[0]


def check_layer_counts(
    shapes: dict[str, tuple[tuple[int, ...], Path]], hf_config: Any, source: Path
) -> None:
    """Refuse weights with more or fewer layers a side than config.json says (transformers
    would skip the extra ones, or make up the missing ones)."""
    for side in ("encoder", "decoder"):
        prefix = f"{side}.layers."
        numbers = {
            name[len(prefix) :].split(".")[0]
            for name in (key.removeprefix("model.") for key in shapes)
            if name.startswith(prefix)
        }
        found = max((int(n) + 1 for n in numbers if n.isdigit()), default=0)
        expected = getattr(hf_config, f"{side}_layers")
        if found != expected:
            raise TmtError(
                f"{source}: holds {found} {side} layers, config.json's {side}_layers is {expected}"
            )


def check_shapes(
    model_class: Any, hf_config: Any, shapes: dict[str, tuple[tuple[int, ...], Path]]
) -> None:
    """Refuse a tensor whose shape is not the one config.json gives it (transformers would
    refuse it with a multi-line report, or fill it in at random), naming the first."""
    with torch.device("meta"):  # shapes only: no memory for the values
        skeleton = model_class(copy.deepcopy(hf_config))
    expected = {key: tuple(t.shape) for key, t in skeleton.state_dict().items()}
    for key, (shape, path) in shapes.items():
        want = expected.get(key, expected.get(f"model.{key}"))
        if want is not None and want != shape:
            raise TmtError(
                f"{path}: {key} has shape {list(shape)}, config.json gives it {list(want)}"
            )


def refuse_made_up_tensors(info: dict[str, Any], source: Path) -> None:
    """Refuse what transformers reports it filled in, reshaped or skipped while loading
    (`info`: from_pretrained's loading info), naming the first tensor. Unexpected position
    tables pass: both architectures compute their sinusoids, and older files carry them."""
    problems = {
        "missing_keys": "lacks {}, which transformers would fill with random values",
        "mismatched_keys": "holds {} in a shape config.json does not give it",
        "unexpected_keys": "holds {}, which config.json has no place for",
        "error_msgs": "cannot be loaded by transformers ({})",
    }
    for key, problem in problems.items():
        found = sorted(" ".join(str(item).split()) for item in info.get(key) or ())
        if key == "unexpected_keys":
            found = [name for name in found if "embed_positions" not in name]
        if found:
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            raise TmtError(f"{source}: {problem.format(found[0])}{more}")
