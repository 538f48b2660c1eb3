"""One run: its spec and plan, the supervisor, the run handle, the broker and the result."""
