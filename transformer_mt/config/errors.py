"""ConfigError: a config file or override that cannot be used, with the keys it blames."""

from __future__ import annotations

from collections.abc import Iterable

from transformer_mt.errors import TmtError


class ConfigError(TmtError, ValueError):
    """A config file or override is wrong; the message is one line naming the dotted key.

    `keys` holds the dotted keys the error blames ("train.lr", "data.train[0].weight") in the
    order the message names them; a rule across fields carries every key whose value it read.
    Whoever reports the error reads them here, not from the message: the loader to say which
    override or file set them, the server to name a request's field. Empty for an error of the
    file itself (not found, not YAML), which blames no key.
    """

    def __init__(self, message: str, *, keys: Iterable[str] = ()):
        super().__init__(message)
        self.keys = tuple(keys)
