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
    path is not a regular file we own or is open to others, or the store was closed. The
    message is one line that names the path and what to do; the subclasses say why."""


class StoreFull(StoreUnavailable):
    """The file system that holds the store is full (ENOSPC, SQLite's `SQLITE_FULL`): the write
    that met it was rolled back whole, and everything stored before it is intact."""


class StoreReadOnly(StoreUnavailable):
    """The store cannot be written: a read-only file system, or a file or directory we may not
    write. SQLite writes its WAL index even to read, so reads fail too."""


class StoreCorrupt(StoreUnavailable):
    """The database file is damaged: its header (not a database at all) or one of its pages."""


class LeaseLost(SessionError):
    """This activation's lease was taken over (its heartbeat went stale, or it was released):
    whoever holds it now owns the session, and this activation must stop writing and end."""


class TranscriptFull(SessionError):
    """A turn would take the stored transcript past its bound; nothing of it was stored."""
