"""The store's exceptions, each named by who is to blame.

Outcomes a caller is expected to handle in the normal course (the agent is busy, unknown or
closed) are values (`Busy`, `Unavailable`), not exceptions.
"""

from __future__ import annotations


class SessionError(Exception):
    """Base of the store's exceptions."""


class SchemaTooNew(SessionError):
    """The database was written by a newer tether (its schema version is past ours)."""


class StoreBusy(SessionError):
    """Other processes kept the database locked past the busy timeout and every retry."""


class StoreUnavailable(SessionError):
    """The database cannot be used here: WAL refused (a network or read-only filesystem), the
    path is not a regular file we own, or the store was closed."""


class LeaseLost(SessionError):
    """This activation's lease was taken over (its heartbeat went stale, or it was released):
    whoever holds it now owns the session, and this activation must stop writing and end."""


class TranscriptFull(SessionError):
    """A turn would take the stored transcript past its bound; nothing of it was stored."""
