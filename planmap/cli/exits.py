"""Exit statuses of every ``planmap`` command, in Terraform's detailed style.

CI scripts branch on them: 0 means up to date / no differences, 2 means the answer is "stale" or
"different" (the command worked; something needs regenerating or reviewing), 1 means an error: bad
input, a missing file, a broken or tampered plan, or a usage error (an unknown option). A signal
gives 128 + its number.
"""

from __future__ import annotations

__all__ = ["OK", "ERROR", "CHANGED", "EPILOG"]

OK = 0
ERROR = 1
CHANGED = 2

EPILOG = ("Exit status: 0 up to date / no differences; 2 stale or different; 1 error (bad input, missing file, "
          "broken or tampered plan, usage error); 128 + N after signal N.")
