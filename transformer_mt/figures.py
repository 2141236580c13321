"""The figures of `tmt plot` and `tmt attention`: matplotlib without a display, and the file
format their `--out` names."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import ModuleType

from transformer_mt.errors import TmtError


def pyplot(command: str) -> ModuleType:
    """`matplotlib.pyplot` drawing into files (the Agg backend: no display is needed).

    Raises:
        TmtError: matplotlib is not installed, saying that `command` needs it.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise TmtError(f"{command} needs matplotlib: pip install 'transformer_mt[plot]'") from None
    return plt


def figure_format(out: str | Path) -> str:
    """The format `out`'s suffix names (`curves.svg`: svg; no suffix: png), checked before
    anything is drawn. A figure is saved under a temporary name, which says no format: written
    as PNG whatever its name, `maps.pdf` was a PNG file.

    Raises:
        TmtError: a suffix that names no format matplotlib writes, listing them, or pgf
            without the TeX program it runs.
    """
    from matplotlib.backend_bases import FigureCanvasBase

    suffix = Path(out).suffix.lower().removeprefix(".")
    if not suffix:
        return "png"
    known = sorted(FigureCanvasBase.get_supported_filetypes())
    if suffix not in known:
        raise TmtError(f"{out}: .{suffix} is no figure format; name one of {', '.join(known)}")
    if suffix == "pgf":  # LaTeX commands, whose text matplotlib measures by running TeX
        import matplotlib

        texsystem = matplotlib.rcParams["pgf.texsystem"]
        if shutil.which(texsystem) is None:
            raise TmtError(
                f"{out}: the pgf format needs {texsystem} (a TeX installation), which is not "
                "on PATH; name another format, e.g. .pdf or .svg"
            )
    return suffix
