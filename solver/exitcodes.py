"""The exit status of every ``solve`` command, in one place.

Scripts branch on these: 0 a plan (or the command's output), 2 bad input, 3 no plan, 4 an oracle that
disagrees, 130 Ctrl-C. Nothing here imports more than the standard library, so the Ctrl-C handler can
use it before the CLI is loaded.
"""

from __future__ import annotations

import enum
import signal


class ExitCode(enum.IntEnum):
    """What a ``solve`` process exits with."""

    #: The command did what it was asked.
    OK = 0
    #: ``solve probe``: no NVIDIA GPU, driver or NVML to read.
    NO_GPU = 1
    #: Bad input (a file, an option, a command line): one line on stderr names it.
    INPUT = 2
    #: No plan: the rig is infeasible, or the time ran out before a plan was found.
    NO_PLAN = 3
    #: ``--check``: the oracle found a different optimum than the solver.
    DISAGREE = 4
    #: Stopped by SIGINT (Ctrl-C): 128 + 2, as a shell reports a process the signal ended.
    INTERRUPTED = 128 + signal.SIGINT
