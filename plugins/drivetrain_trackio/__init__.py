"""The ``trackio`` experiment tracker plugin (Trackio)."""
