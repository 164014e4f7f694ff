"""The ``cpu`` platform plugin."""
