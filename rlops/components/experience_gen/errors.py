"""Errors that mean bad input, not a bug: the CLI prints them in one line and exits 2."""

from __future__ import annotations

import difflib
from typing import Sequence


class InputError(ValueError):
    """The config does not fit the data (a mapped column that is not there, a sample that cannot
    tell a feature's kind, inputs without records), or the inputs cannot be reached (no cloud
    credentials). The message names the config key, column or file."""


class CredentialsError(InputError):
    """A gs:// or BigQuery input, and no Google Cloud credentials to read it with."""


def closest(name: str, names: Sequence[str], n: int = 3, shown: int = 40) -> str:
    """'closest: 'a', 'b'' when some names look like `name`, else the names themselves (in their
    order, which is the file's: alphabetical lists leave out the columns that matter)."""
    names = list(dict.fromkeys(names))
    close = difflib.get_close_matches(name, names, n, 0.6)
    if close:
        return "closest: " + ", ".join(repr(c) for c in close)
    listed = ", ".join(repr(c) for c in names[:shown]) + (", ..." if len(names) > shown else "")
    return f"its {len(names)} column(s): {listed}" if names else "it has no columns"
