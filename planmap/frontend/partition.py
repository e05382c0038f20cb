"""A partition of a DAG's nodes into groups whose quotient graph stays a DAG — by construction.

Coarsening merges operators into groups; a careless merge creates a cycle between groups (A feeds B
and B feeds A), and a graph with a cycle cannot be scheduled or pipelined. :class:`Partition`
maintains the quotient graph (group predecessor/successor sets) and a *position* per group that is
always a valid topological order of the quotient, and offers only merges that provably keep it
acyclic:

* :meth:`absorb` merges a group into its **earliest successor** or its **latest predecessor** (its
  unique consumer or producer being special cases). No path can leave the merged group and come back:
  a return path would have to run backwards in the topological order. The merged group takes the
  absorbing group's position, which keeps the positions a valid topological order.
* :meth:`contract` merges an arbitrary set of groups only when the set is **convex** (no outside group
  is both reachable from it and reaches it); contracting a convex set of a DAG gives a DAG. The
  positions inside the set's window are then reordered (its ancestors, the set, the rest), which
  keeps them a valid topological order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import numpy as np

__all__ = ["Partition"]


class Partition:
    """Groups over nodes ``0..n-1`` of a DAG given by unique edges ``(src, dst)`` with ``src < dst``.

    ``label[g]`` is a free-form tag per group kept by the caller (e.g. ``(scope id, backward)``).
    """

    def __init__(self, n: int, src: np.ndarray, dst: np.ndarray) -> None:
        self.n = n
        self.parent = list(range(n))
        # deques, so that a merge costs the smaller group's size whichever side is larger (union by size)
        self.members: dict[int, deque[int]] = dict(zip(range(n), map(deque, zip(range(n))), strict=True))
        keep = src != dst
        # indexed by group id (lists: cheaper than dicts per merge); None once the group is merged away
        self.succs: list[set[int] | None] = _adjacency(n, src[keep], dst[keep])
        self.preds: list[set[int] | None] = _adjacency(n, dst[keep], src[keep])
        self.pos: list[int] = list(range(n))  # stale for merged-away groups (only live ones are read)

    # --------------------------------------------------------------------------- queries
    def find(self, i: int) -> int:
        root = i
        parent = self.parent
        while parent[root] != root:
            root = parent[root]
        while parent[i] != root:
            parent[i], i = root, parent[i]
        return root

    @property
    def groups(self) -> list[int]:
        """Current group ids in position (topological) order."""
        return sorted(self.members, key=self.pos.__getitem__)

    def earliest_succ(self, g: int) -> int | None:
        s = self.succs[g]
        return min(s, key=self.pos.__getitem__) if s else None

    def latest_pred(self, g: int) -> int | None:
        p = self.preds[g]
        return max(p, key=self.pos.__getitem__) if p else None

    # ---------------------------------------------------------------------------- merges
    def _merge(self, x: int, y: int) -> None:
        """Fold group ``x`` into group ``y`` (y keeps its id and position). Callers check safety.

        The members become y's followed by x's, as always; the smaller list is copied into the larger
        (at its front when y is the smaller), so chains of merges stay near-linear.
        """
        succs: list[set[int]] = self.succs  # type: ignore[assignment]  # live groups' entries are never None
        preds: list[set[int]] = self.preds  # type: ignore[assignment]
        sy, py, sx, px = succs[y], preds[y], succs[x], preds[x]
        self.succs[x] = self.preds[x] = None
        for p in px:
            sp = succs[p]
            sp.discard(x)
            if p != y:
                sp.add(y)
                py.add(p)
        for s in sx:
            ps = preds[s]
            ps.discard(x)
            if s != y:
                ps.add(y)
                sy.add(s)
        py.discard(x)
        sy.discard(x)
        self.parent[x] = y
        members = self.members
        xm, ym = members.pop(x), members[y]
        if len(xm) > len(ym):
            xm.extendleft(reversed(ym))
            members[y] = xm
        else:
            ym.extend(xm)

    def absorb_targets(self, g: int) -> list[int]:
        """Groups that ``g`` can safely be merged into, in order of preference (see module docstring).

        Its earliest successor and its latest predecessor are always safe: a path leaving the merged
        group and coming back would have to run against the topological order. The successor comes
        first when it is ``g``'s unique consumer or ``g`` has no producer, else the predecessor.
        """
        s, p = self.succs[g], self.preds[g]
        if not s:
            return [max(p, key=self.pos.__getitem__)] if p else []
        first_succ = next(iter(s)) if len(s) == 1 else min(s, key=self.pos.__getitem__)
        if not p:
            return [first_succ]
        last_pred = next(iter(p)) if len(p) == 1 else max(p, key=self.pos.__getitem__)
        return [first_succ, last_pred] if len(s) == 1 else [last_pred, first_succ]

    def absorb(self, g: int, target: int) -> None:
        """Merge ``g`` into ``target``, which must be one of :meth:`absorb_targets` of ``g``."""
        self._merge(g, target)

    def convex_closure(self, groups: Iterable[int]) -> tuple[set[int], set[int]]:
        """``(S, violators)``: groups outside ``S`` that lie on a path from ``S`` back into ``S``."""
        S = set(groups)
        pos = self.pos
        lo = min(pos[g] for g in S)
        hi = max(pos[g] for g in S)
        fwd = self._reach(S, self.succs, lambda q: q < hi)
        back = self._reach(S, self.preds, lambda q: q > lo)
        return S, fwd & back

    def _reach(self, S: set[int], nbrs, within) -> set[int]:
        """Groups outside ``S`` reachable from it along ``nbrs`` (succs or preds) through groups whose
        position satisfies ``within`` (positions outside the window cannot lead back into it)."""
        pos = self.pos
        seen: set[int] = set()
        stack = list(S)
        while stack:
            g = stack.pop()
            for h in nbrs[g]:
                if h not in S and h not in seen and within(pos[h]):
                    seen.add(h)
                    stack.append(h)
        return seen

    def contract(self, groups: Iterable[int]) -> int:
        """Merge a convex set of groups into one (the caller checked :meth:`convex_closure`)."""
        S = sorted(set(groups), key=self.pos.__getitem__)
        if len(S) == 1:
            return S[0]
        pos = self.pos
        lo, hi = pos[S[0]], pos[S[-1]]
        Sset = set(S)
        # ancestors of S inside the window must stay before it; everything else goes after it
        anc = self._reach(Sset, self.preds, lambda q: q > lo)
        window = sorted((g for g in self.members if lo <= pos[g] <= hi), key=pos.__getitem__)
        slots = [pos[g] for g in window]
        head = S[0]
        order = [g for g in window if g in anc] + [head] + [g for g in window if g not in anc and g not in Sset]
        for g in S[1:]:
            self._merge(g, head)
        for g, slot in zip(order, slots, strict=False):
            pos[g] = slot
        return head

    def assignment(self) -> tuple[np.ndarray, list[int]]:
        """``(node -> group index, groups in order)``: group indices follow the topological positions."""
        order = self.groups
        index = {g: i for i, g in enumerate(order)}
        out = np.empty(self.n, np.int64)
        for g in order:
            out[self.members[g]] = index[g]
        return out, order


def _adjacency(n: int, frm: np.ndarray, to: np.ndarray) -> list[set[int] | None]:
    """``[set of to[k] for every k with frm[k] == i for i in 0..n-1]`` (one sort, no per-edge loop)."""
    order = np.argsort(frm, kind="stable")
    bounds = np.searchsorted(frm[order], np.arange(n + 1)).tolist()
    targets = to[order].tolist()
    return [set(targets[a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
