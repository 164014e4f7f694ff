"""The facade: the one ``Accelerator`` class (accelerator.py) and the collaborators its members
delegate to, one job each. The top layer of the core below the command line."""
