"""How the HTTP model providers retry: bounded attempts, exponential backoff with jitter, and
the server's `Retry-After` honoured up to a cap. No httpx here, so it imports cheaply."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 3
    """Attempts in all, the first included (so 3 means up to 2 retries)."""
    initial_delay: float = 0.5
    """Wait before the first retry; doubles on each further retry."""
    max_delay: float = 8.0
    """Cap on the computed backoff."""
    jitter: float = 0.25
    """The computed backoff is shortened by up to this fraction, at random."""
    max_retry_after: float = 60.0
    """Cap on a server's `Retry-After`; a longer ask is waited out only this long."""

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if min(self.initial_delay, self.max_delay, self.max_retry_after) < 0:
            raise ValueError("retry delays must not be negative")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be between 0 and 1")

    def backoff(self, retry: int) -> float:
        """The wait before retry number `retry` (0 for the first) when the server names none."""
        delay = min(self.max_delay, self.initial_delay * (2.0**retry))
        return delay * (1 - self.jitter * random.random())
