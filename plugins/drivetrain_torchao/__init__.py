"""fp8 training through torchao's Float8Linear (``pip install 'drivetrain[torchao]'``)."""
