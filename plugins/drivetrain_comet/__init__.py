"""The ``comet_ml`` experiment tracker plugin (Comet)."""
