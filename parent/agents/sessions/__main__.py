"""`python -m tether.parent.agents.sessions schema`: print the session database's schema, as every
migration builds it (docs/sessions.md carries this text; a test keeps them equal)."""

from __future__ import annotations

import sys

from tether.parent.agents.sessions.schema import build, describe


def main(argv: list[str]) -> int:
    if argv != ["schema"]:
        print("usage: python -m tether.parent.agents.sessions schema", file=sys.stderr)
        return 2
    print(describe(build()), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
