# Sourced by scripts/*: create or refresh .venv with the project and the extras the sourcing
# script names in TETHER_EXTRAS (comma-separated, default `test,ray`: the test runners, linters,
# type checker and nox, and the Ray cluster the scale-out tests start on loopback).
# scripts/demo asks for none: it needs tether's runtime dependencies only.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "tether needs Python 3.11 or newer (found: $("$PY" --version 2>&1))" >&2
  exit 2
fi
# pip: the venv's own, or, for a new venv, this interpreter's when it can install into another
# (pip 22.3+): the venv is then made without ensurepip's copy of pip, which takes longer than
# everything else the demo installs, and gets pip from the same install as tether.
pip=(.venv/bin/python -m pip)
with_pip=()
if [ ! -x .venv/bin/python ]; then
  if "$PY" -m pip --python "$PY" --version >/dev/null 2>&1; then
    "$PY" -m venv --without-pip .venv
    pip=("$PY" -m pip --python .venv/bin/python)
    with_pip=(pip)
  else
    "$PY" -m venv .venv
  fi
fi
extras="${TETHER_EXTRAS-test,ray}"
# Reinstall when pyproject.toml or the module list changed (the strict editable install maps
# each file, so a new module needs a fresh install), or when this script needs an extra the
# last install did not include; cheap when nothing changed. The stamp holds the hash and the
# extras installed with it: a runtime-only script is content with a fuller install.
stamp=.venv/.tether-install-stamp
want="$( (cat pyproject.toml; find api parent child protocol wire contain -name '*.py' | sort) | sha256sum | cut -d' ' -f1)"
have_hash=""
have_extras=""
if [ -f "$stamp" ]; then
  read -r have_hash have_extras < "$stamp" || true
fi
missing=0
if [ "$have_hash" != "$want" ]; then
  missing=1
else
  IFS=, read -r -a needed <<< "$extras"
  for extra in "${needed[@]}"; do
    case ",$have_extras," in *",$extra,"*) ;; *) missing=1 ;; esac
  done
fi
if [ "$missing" -eq 1 ]; then
  # Keep the extras an earlier install had: a demo after the tests takes nothing away.
  extras="$have_extras,$extras"
  extras="$(tr ',' '\n' <<< "$extras" | sed '/^$/d' | sort -u | paste -sd, -)"
  "${pip[@]}" install -q --disable-pip-version-check \
    -e ".${extras:+[$extras]}" "${with_pip[@]}" --config-settings editable_mode=strict
  echo "$want $extras" > "$stamp"
fi
