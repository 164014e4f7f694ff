"""The selection layer: which platform, strategy and precision a run uses, from what was asked.

Requests and Accelerate's ``USE_<NAME>`` variables (``backend_variables.py``), what is installed
and usable (``detection.py``), the choice itself (``choice.py``), Accelerate's enums, file
names and version checks, and where the ``Accelerator``'s backend arguments go
(``backend_arguments.py``). Nothing here starts a process or imports torch at import time.
"""

