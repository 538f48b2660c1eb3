"""tether's child runtime: `python -I -m tether.child` speaks wire protocol v1 on stdio.

Kept import-free on purpose: `__main__` must be able to import `tether.child.fdguard` and move
the wire off fds 0/1 before any other module (or its import-time side effects) loads.
"""
