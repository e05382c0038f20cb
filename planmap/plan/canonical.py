"""Hashes of plan inputs by meaning: YAML documents over their parsed content, artifacts over their bytes.

A plan goes stale when an input it was derived from changes. For the spec and the cluster (YAML
documents a person edits), a comment, re-indentation or a reordering of keys changes nothing the
planner reads, so such edits must not stale a plan: their ``canonical_sha256`` is the SHA-256 of
the parsed content written as canonical JSON (sorted keys, no whitespace). Any change of a value,
a key or a list order changes it. Model artifacts keep the hash of their raw bytes (``sha256``).

A file that does not parse as YAML hashes as its bytes behind a marker that no canonical JSON text
can start with, so a broken spec never matches a recorded canonical hash.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from planmap.io import read_input

__all__ = ["CANONICAL_ROLES", "canonical_sha256", "canonical_sha256_of", "canonical_sha256_of_value", "canonical_text"]

CANONICAL_ROLES = frozenset({"spec", "cluster"})  # inputs hashed by meaning; others by bytes
_UNPARSED = b"\x00unparsed-yaml\x00"


def canonical_text(text: str) -> str | None:
    """The document as canonical JSON (sorted keys, compact); None when it does not parse.

    Parsed by the spec loader's bounded reader (:func:`planmap.spec.yamlpos.read_yaml`), so an alias
    bomb or deep nesting in a committed spec is refused here too instead of expanding while ``check``
    hashes it; the one document is written as a one-element list (the stream of documents)."""
    from planmap.spec.yamlpos import read_yaml

    data, _, diagnostics = read_yaml(text.encode("utf-8", "surrogatepass"), "<input>")
    if diagnostics:
        return None
    return _canonical_json(data)


def _canonical_json(value: object) -> str:
    return json.dumps([value], sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def canonical_sha256_of_value(value: object) -> str:
    """:func:`canonical_sha256_of` of a document from the value :func:`planmap.spec.yamlpos.read_yaml` read from it
    without diagnostics (the spec loader keeps it: the file need not be parsed again to hash it)."""
    return hashlib.sha256(_canonical_json(value).encode()).hexdigest()


def canonical_sha256(path: str | Path) -> str:
    """SHA-256 (hex) of the file's canonical parsed content; of its marked bytes when it is not YAML text."""
    return canonical_sha256_of(read_input(path, "spec"))  # spec and cluster share one size cap


def canonical_sha256_of(raw: bytes) -> str:
    """:func:`canonical_sha256` of a document's bytes already read (one read serves both of a plan's hashes)."""
    try:
        text = canonical_text(raw.decode("utf-8"))
    except UnicodeDecodeError:
        text = None
    data = _UNPARSED + raw if text is None else text.encode()
    return hashlib.sha256(data).hexdigest()
