# Sourced by the other scripts: create .venv and install asymlink with its test extras
# (builds the Rust extension; ~1-2 min cold on 2 cores). Idempotent.
if ! command -v cargo >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    echo "asymlink needs Rust (>= 1.88): https://rustup.rs" >&2
    exit 1
  fi
fi
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q -e ".[dev]"
