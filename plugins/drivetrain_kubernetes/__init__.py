"""Processes of a Kubernetes PyTorchJob (Kubeflow training operator)."""
