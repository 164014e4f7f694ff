"""Launchers built on PyTorch's elastic launcher."""
