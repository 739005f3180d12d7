"""Files: a compiled program's plan as a JSON document and back (``encoding.py``), a program
saved with its plan and loaded again (``artifact.py``), and dynamic-storage-allocation
instances as CSV (``dsa.py``)."""
