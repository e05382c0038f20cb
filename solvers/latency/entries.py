"""What a call pays to take in the values of the nodes around it: summed receives for the call bound.

:mod:`.calls` charges a call ``C`` that runs ``m`` the compute of a set it must hold (the cone
``{y : x <= y <= m}`` of the node ``x`` where a path enters it, or the late set of a start time) plus the
one receive of the path's cut. But a call receives every value entering it, one after another, within its
duration (:func:`planmap.evaluate.evaluate`), and the set it holds usually has many inputs: GNMT's first
encoder layer takes sixteen LSTM outputs, one from each step of the two chains under it.

For a set ``S ⊆ C`` (a cone or a late set) let its outside producers be the nodes ``y ∉ S`` whose value a
node of ``S`` reads. Each one is either in ``C`` too — then ``C`` computes it, and it is not in ``S`` — or
not — then ``C`` receives its value (once, whatever else in ``C`` reads it). So ``C``'s duration holds, for
each outside producer, the cheaper of its compute on ``C``'s device and the least receive of one of its
values there, on top of ``S``'s compute: :func:`producer_terms` is that per node and device, and
:func:`cone_entries` / :func:`set_entries` sum it over the outside producers of cones and of late sets.
The producer over whose edge a path enters ``C`` is paid by the cut itself (its send and receive), so
the cut subtracts its term (:func:`.calls.call_bounds`). That producer ``p`` is outside ``C``, and so is every
ancestor of ``p`` (an ancestor in ``C`` would put ``p`` between two nodes of ``C``): an outside producer
among them is received, not computed (GNMT's decoder steps all read the encoder's output: a call that
takes over the decoder half-way receives it again).

Checked against every feasible placement of small graphs (tests/solvers/latency/test_entries.py); figures
in ``docs/notes/latency-bounds.md``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["producer_terms", "value_feeds", "cone_entries", "set_entries", "ENTRIES_MAX_CELLS"]

ENTRIES_MAX_CELLS = 40_000_000  # nodes³ the cone sums may multiply; beyond, cones take no entry charges


def value_feeds(n: int, val_prod: np.ndarray, pair_val: np.ndarray, pair_cons: np.ndarray) -> np.ndarray:
    """(n, n) float: ``F[y, z] = 1`` when ``z`` reads a value of ``y`` (edges without a value cost nothing)."""
    F = np.zeros((n, n))
    if len(pair_val):
        F[val_prod[pair_val], pair_cons] = 1.0
    np.fill_diagonal(F, 0.0)
    return F


def producer_terms(t: np.ndarray, allowed: np.ndarray, val_prod: np.ndarray, recv: np.ndarray, cross: np.ndarray,
                   acc_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n, A) twice, per node and accelerator: the least a call there pays for needing the node's value — its
    compute there (the call runs it) or the least receive of one of its values (from any unit the node may
    run on that can feed the call) — and the least receive alone (where the node cannot be in the call;
    the first where no receive is possible)."""
    n = len(t)
    rmin = np.full((n, t.shape[1]), np.inf)
    if len(val_prod):
        per_val = np.where(cross[None] & allowed[val_prod][:, :, None], recv, np.inf).min(axis=1)
        np.minimum.at(rmin, val_prod, per_val)
    term = np.minimum(np.where(allowed, t, np.inf), rmin)[:, acc_ids]
    term = np.where(np.isfinite(term), term, 0.0)
    received = rmin[:, acc_ids]
    return term, np.where(np.isfinite(received), received, term)


def cone_entries(R: np.ndarray, F: np.ndarray, term: np.ndarray, received: np.ndarray, src: np.ndarray,
                 dst: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``E`` (n, n, A): the terms summed over the outside producers of ``cone(x, m)`` (0 where ``x !<= m``);
    and per node edge ``p -> x`` (E, n, A) what a call entered over that edge pays on top: ``p`` is outside
    the call, so (convexity) are its ancestors, and an outside producer among them is received, not
    computed. None when the graph is too large for the products."""
    n = len(R)
    if n ** 3 > ENTRIES_MAX_CELLS:
        return None
    Rf = R.astype(float)
    RT = Rf.T  # RT[m, z]: z <= m
    out = np.zeros((n, n, term.shape[1]))
    extra = np.zeros((len(src), n, term.shape[1]))
    gain = received - term  # (n, A) >= 0
    into: list[list[int]] = [[] for _ in range(n)]
    for e, x in enumerate(dst.tolist()):
        into[x].append(e)
    for x in range(n):
        cone = RT * Rf[x][None, :]  # (m, z): z in cone(x, m)
        ext = (((cone @ F.T) > 0.5) & (cone < 0.5)).astype(float)  # (m, y): y feeds the cone from outside
        ext[~R[x]] = 0.0
        out[x] = ext @ term
        for e in into[x]:
            p = int(src[e])
            above = Rf[:, p].copy()  # ancestors of p, p itself left to the cut
            above[p] = 0.0
            extra[e] = ext @ (gain * above[:, None])
    return out, extra


def set_entries(RT: np.ndarray, up: np.ndarray, F: np.ndarray, term: np.ndarray) -> np.ndarray:
    """(n, A) over ``m``: the terms summed over the outside producers of ``U(m) = {y <= m : up[y]} ∪ {m}``,
    with ``RT[m, y]`` (float) when ``y <= m`` and ``up`` (n,) bool."""
    idx = np.flatnonzero(up)
    fed = RT[:, idx] @ F[:, idx].T + F.T  # (m, y): y feeds a node of U(m)
    inside = (RT * up[None, :]) > 0.5
    np.fill_diagonal(inside, True)
    return ((fed > 0.5) & ~inside).astype(term.dtype) @ term
