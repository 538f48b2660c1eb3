# Sourced by scripts/*: create or refresh .venv with the project, its test extras and the ray
# extra (the scale-out tests start a real Ray cluster on loopback).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "tether needs Python 3.11 or newer (found: $("$PY" --version 2>&1))" >&2
  exit 2
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# Reinstall when pyproject.toml or the module list changed (the strict editable install maps
# each file, so a new module needs a fresh install); cheap when nothing changed.
stamp=.venv/.tether-install-stamp
want="$( (cat pyproject.toml; find api parent child protocol wire contain -name '*.py' | sort) | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check \
    -e '.[test,ray]' --config-settings editable_mode=strict
  echo "$want" > "$stamp"
fi
