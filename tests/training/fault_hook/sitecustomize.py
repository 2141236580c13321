"""Fault injection for test_fault_injection.py; Python imports it at start-up when this folder
is on PYTHONPATH. Nothing happens unless TMT_KILL_AT_RENAME is set.

TMT_KILL_AT_RENAME=k: the process SIGKILLs itself just before its k-th rename into a folder
named `checkpoints`, that is in the middle of a checkpoint save: the temporary file is written,
the final name not yet replaced. A kill from outside could not hit that window reliably.
"""

import os
import signal

_KILL_AT = int(os.environ.get("TMT_KILL_AT_RENAME", "0"))

if _KILL_AT:
    _real_replace = os.replace
    _renames = 0

    def _replace(src, dst, *args, **kwargs):
        global _renames
        if os.path.basename(os.path.dirname(os.path.abspath(dst))) == "checkpoints":
            _renames += 1
            if _renames == _KILL_AT:
                os.kill(os.getpid(), signal.SIGKILL)
        return _real_replace(src, dst, *args, **kwargs)

    os.replace = _replace
