#!/usr/bin/env bash
# Set everything up on a fresh machine and run every test: lint (rustfmt, clippy, ruff,
# mypy), Rust (unit, integration, validation, property tests, fuzz corpus replay) and
# Python (pytest: CLI, reproductions, and — as root — the namespace lab with real Linux
# TCP through the live box).
#
# System packages: as root with apt, installs what the tests use and is missing:
# iproute2 and ethtool (the lab), tshark (independent pcap checks), chromium (the HTML
# report's browser check). Run as root with those present, every test must run: a
# skipped test fails (ASYMLINK_NO_SKIPS=1). Without root the lab tests skip, saying why.
set -euo pipefail
cd "$(dirname "$0")/.."
# Nothing here reads the terminal. Whatever the caller's stdin holds must not reach a tool
# that reads it: cargo's rustc probe (`rustc -`) compiles stdin, and caches a failure.
if [ ! -c /dev/null ]; then
  echo "/dev/null is not a character device (something replaced it with a file); as root:" >&2
  echo "  rm -f /dev/null && mknod -m 666 /dev/null c 1 3" >&2
  exit 1
fi
exec </dev/null

T0=$SECONDS
STAGES=()
stage() {   # stage NAME: close the previous stage's timer, open a new one
  local now=$SECONDS
  if [ -n "${STAGE_NAME:-}" ]; then STAGES+=("$(printf '%-34s %5ds' "$STAGE_NAME" $((now - STAGE_T)))"); fi
  STAGE_NAME=$1 STAGE_T=$now
  [ -n "$1" ] && echo "== $1"
  return 0
}
report() {
  local rc=$?
  stage ""
  echo "== time per stage"
  printf '   %s\n' "${STAGES[@]}"
  printf '   %-34s %5ds  (exit %d)\n' "total" $((SECONDS - T0)) "$rc"
}
trap report EXIT

stage "system packages"
missing=()
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v ethtool >/dev/null 2>&1 || missing+=(ethtool)
command -v tshark >/dev/null 2>&1 || missing+=(tshark)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "   installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 \
           && apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; } \
      || echo "   (could not install ${missing[*]})"
  else
    echo "   missing ${missing[*]} (not root or no apt): the tests that need them skip"
  fi
fi
if [ "$(id -u)" = 0 ] && command -v ip >/dev/null && command -v ethtool >/dev/null \
   && command -v tshark >/dev/null && command -v chromium >/dev/null; then
  export ASYMLINK_NO_SKIPS=1
  echo "   root with every tool: a skipped test is a failure"
fi

# One build for the extension and the Rust tests, tuned for build time: no cross-crate
# LTO and line tables only (linking dominates on 2 cores). Benchmarks and normal installs
# keep the full release profile.
export CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_DEBUG=line-tables-only

stage "python environment (builds the extension)"
. scripts/env.sh

stage "cargo fmt --check"
cargo fmt --all -- --check
stage "cargo clippy"
cargo clippy --workspace --release --all-targets --locked -q -- -D warnings
stage "ruff"
ruff check -q python tests
stage "mypy"
mypy
stage "cargo test (release; benches: cargo bench -p asymlink-bench)"
cargo test --workspace --exclude asymlink-bench --release --locked -q
stage "pytest"
python -m pytest -q -p no:cacheprovider -n 2 --dist loadgroup --durations=15
