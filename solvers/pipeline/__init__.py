"""Pipeline planners over contiguous stages: the ``dp`` solver, PipeDream and the throughput IP.

:mod:`.stage_units` groups nodes into the units stages are made of, :mod:`.ideals` enumerates the
ideals of the unit graph, :mod:`.stage_costs` costs candidate stages, :mod:`.engine` is the DP over
ideals that :mod:`.dp` (``dp``) and :mod:`.pipedream` (``pipedream``) run; :mod:`.ip` with
:mod:`.ip_data` is the throughput IP behind the ``ip`` solver.
"""
