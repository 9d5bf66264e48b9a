# Sourced by the other scripts: create .venv and install asymlink into it (builds the Rust
# extension, which also holds the live box; ~1-2 min cold on 2 cores). Idempotent.
# ASYMLINK_EXTRAS chooses the extras (default "dev": the test and lint tools).
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
  echo "   creating .venv"
  "$PY" -m venv .venv
fi
. .venv/bin/activate
extras=${ASYMLINK_EXTRAS-dev}
echo "   installing asymlink${extras:+[$extras]} into .venv (log: .venv/install.log)"
python -m pip install -q --upgrade pip >.venv/install.log 2>&1
# -v shows cargo's progress: print one line per crate compiled so a cold build is not
# silent, and keep the whole output in the log.
if ! (set -o pipefail
      python -m pip install -v -e ".${extras:+[$extras]}" </dev/null 2>&1 \
        | tee -a .venv/install.log \
        | { grep --line-buffered -E '^\s*(Compiling|Finished|error)' || true; } \
        | sed -u -E 's/^\s+/   /'); then
  tail -n 40 .venv/install.log >&2
  echo "installing asymlink failed; the whole log is .venv/install.log" >&2
  exit 1
fi
