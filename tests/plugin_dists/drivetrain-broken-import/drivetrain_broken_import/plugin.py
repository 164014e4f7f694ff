"""Raises while being imported, as a plugin with a missing or broken dependency would."""

raise RuntimeError("this plugin is broken on purpose")
