"""The base of a cluster-environment plugin: what its factory returns."""

from ..cluster import SINGLE_PROCESS, ClusterEnvironment, int_var

__all__ = ["SINGLE_PROCESS", "ClusterEnvironment", "int_var"]
