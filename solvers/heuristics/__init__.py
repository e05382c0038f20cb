"""Placement heuristics and baselines: ``greedy``, ``even``/``single``, ``metis`` and ``local-search``.

Each solver module (:mod:`.greedy`, :mod:`.even`, :mod:`.metis`, :mod:`.local_search`) keeps its
halves beside it (``greedy_latency``/``greedy_throughput``, ``local_search_*``,
:mod:`.throughput_loads`); what they share with other solvers (stages from a device assignment,
repair, per-node memory) lives one level up in :mod:`planmap.solvers`.
"""
