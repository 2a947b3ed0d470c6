"""The ``turnfsm`` command's entry point, outside the ``turnfsm`` package.

Importing ``turnfsm`` takes a moment (pydantic models, the declared machine);
a Ctrl-C in that moment would otherwise end in a Python traceback. Here it
ends as a later Ctrl-C does: one line, exit 130 (``turnfsm --help``). This
module imports nothing but ``sys`` before it is ready for that.
"""

import contextlib
import sys

__all__ = ["main"]

EXIT_INTERRUPTED = 130  # turnfsm.cli._errors.EXIT_INTERRUPTED, not imported: the point


def main() -> int:
    """Run ``turnfsm`` (:func:`turnfsm.cli.main`) with the arguments given."""
    try:
        from turnfsm.cli import main as run

        return run()
    except KeyboardInterrupt:  # while the package loads (later ones: run_guarded)
        with contextlib.suppress(OSError, ValueError):
            print("turnfsm: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
