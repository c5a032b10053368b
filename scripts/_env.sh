# Sourced by the other scripts: makes sure uv is there and .venv matches requirements.lock.
# The committed lock is requirements.lock (exact versions with hashes, exported by uv);
# scripts/lock regenerates it after a dependency change in pyproject.toml.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
uv() { "$ROOT/scripts/uv" "$@"; }
stamp=".venv/.feedcollector-synced"
want="$(cat requirements.lock pyproject.toml | cksum)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  [ -x .venv/bin/python ] || uv venv --quiet --python "$(command -v python3)" .venv
  uv pip sync --quiet --python .venv/bin/python requirements.lock
  uv pip install --quiet --python .venv/bin/python --no-deps -e .
  echo "$want" > "$stamp"
fi
