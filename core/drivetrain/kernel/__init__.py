"""The kernel: what every other layer stands on, and nothing torch.

Descriptors and hook markers, errors, the version, environment variables, the hook
specifications, loading and calling plugins, and the names plugins contribute. Modules here
import only each other (and the standard library, pluggy, packaging); ``tests/test_layers.py``
holds them to that, imports inside functions included.
"""
