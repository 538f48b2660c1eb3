"""tether's version, in a module that imports nothing: `tether.__version__`, both ends' handshake
(the child's `initialize` answer, the supervisor's), the ACP client's name for itself and the
command line's `--version` read it here; a test keeps it equal to the installed distribution's
(`importlib.metadata` would cost a process ≈ 30 ms of imports to read it)."""

__version__ = "0.1.0"
