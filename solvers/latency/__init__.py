"""The exact latency solver (Tarnawski et al.'s latency IP) and its parts.

:mod:`.ip` builds, warm-starts, solves and reads back the model; :mod:`.data` turns a problem into
the model's numbers, :mod:`.cuts` bounds them, :mod:`.splits` is the exact DP over contiguous
splits, :mod:`.start` loads a placement as a MIP start, :mod:`.search` is the large-neighbourhood
search and :mod:`.report` the certificate. Reached through the ``ip`` solver (:mod:`planmap.solvers.ip`).
"""
