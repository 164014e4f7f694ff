"""The base of a cluster-environment plugin: what its factory returns."""

from ..kernel.cluster import SINGLE_PROCESS, ClusterEnvironment, int_var

__all__ = ["SINGLE_PROCESS", "ClusterEnvironment", "int_var"]
