"""The ``mlflow`` experiment tracker plugin (MLflow)."""
