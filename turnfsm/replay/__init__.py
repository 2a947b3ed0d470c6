"""L3: replay scripted conversations through the real engine, and record them.

The script format is ``turnfsm-script/1`` (docs/script-format.md).
"""

from ._recorder import Recorder
from ._runner import Failure, ReplayResult, replay, run_script
from ._script import FORMAT, Script, ScriptError, Step, load_script, parse_script

__all__ = [
    "FORMAT",
    "Failure",
    "Recorder",
    "ReplayResult",
    "Script",
    "ScriptError",
    "Step",
    "load_script",
    "parse_script",
    "replay",
    "run_script",
]
