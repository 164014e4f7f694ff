"""The ``dvclive`` experiment tracker plugin (DVCLive)."""
