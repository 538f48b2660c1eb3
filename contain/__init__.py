"""Containment applied inside a new child process before the child's own code: the
contained-exec sequence shared by the exec trampoline and the zygote's fork path, and the
sandbox it can apply (Landlock, seccomp, privileges, private mounts).

Standard library only, importable without site-packages (the trampoline runs `-I -S`), and
free of tether.parent / tether.child, which may both import it.
"""
