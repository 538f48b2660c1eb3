"""The child's environment: built up from an allowlist, never inherited wholesale.

Order of construction: the allowlist (and `LC_*`), then named or glob pass-through, then
explicit values merged over it. Secret-looking names are dropped from the first two layers
unless named exactly in `pass_through`; explicit values are always kept because the caller
wrote them down. Values that start with `()` (exported shell functions, the Shellshock shape)
are dropped from the inherited layers.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping

ALLOWLIST: frozenset[str] = frozenset(
    {"PATH", "HOME", "LANG", "TZ", "TERM", "TMPDIR", "USER", "LOGNAME", "SHELL"}
)
ALLOW_PREFIXES: tuple[str, ...] = ("LC_",)

_SECRET = re.compile(
    r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|"
    r"_PAT$|^PAT_|DSN|CONN(ECTION)?_?STR)",
    re.IGNORECASE,
)


def looks_secret(name: str) -> bool:
    return bool(_SECRET.search(name))


def build_child_env(
    base: Mapping[str, str],
    *,
    pass_through: Iterable[str] = (),
    explicit: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Return the environment a child starts with.

    `pass_through` holds names or glob patterns (`"MYAPP_*"`) to inherit from `base`. A
    secret-looking variable passes only when named exactly, never through a glob.
    """
    names = set()
    patterns = []
    for item in pass_through:
        if any(ch in item for ch in "*?["):
            patterns.append(item)
        else:
            names.add(item)
    env: dict[str, str] = {}
    for key, value in base.items():
        if value.startswith("()"):
            continue
        if key in names:
            env[key] = value
            continue
        allowed = key in ALLOWLIST or key.startswith(ALLOW_PREFIXES)
        globbed = any(fnmatch.fnmatchcase(key, pat) for pat in patterns)
        if (allowed or globbed) and not looks_secret(key):
            env[key] = value
    if explicit:
        env.update(explicit)
    return env
