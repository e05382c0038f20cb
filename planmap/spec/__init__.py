"""The user's documents (PlanSpec, Cluster): models, positioned loading, diagnostics."""

from planmap.spec.diagnostics import Diagnostic, SpecError, render
from planmap.spec.loader import KINDS, LoadedSpec, load_cluster, load_document, load_spec
from planmap.spec.models import API_VERSION, Cluster, ClusterBody, PlanSpec

__all__ = [
    "API_VERSION",
    "Cluster",
    "ClusterBody",
    "Diagnostic",
    "KINDS",
    "LoadedSpec",
    "PlanSpec",
    "SpecError",
    "load_cluster",
    "load_document",
    "load_spec",
    "render",
]
