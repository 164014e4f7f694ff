"""fp8 through NVIDIA Transformer Engine (``pip install 'drivetrain[te]'``)."""
