#!/usr/bin/env bash
# Set everything up on a fresh machine and run every test: Rust (unit, integration,
# validation, property tests) and Python (pytest, including CLI and reproduction checks).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
# Optional system tools some tests use for independent checks (tshark reads our pcap
# files). Installed when apt is available and we are root; the tests skip those checks,
# saying so, where the tools are missing.
if ! command -v tshark >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "== installing tshark (pcap validation)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends tshark >/dev/null 2>&1 \
    || echo "   (could not install tshark; its checks will be skipped)"
fi
# Debian's chromium for the browser check of the HTML report (tests/test_report_html.py):
# installed the same optional way; that check is skipped, saying so, without it.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "== installing chromium (browser check of the HTML report)"
  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null 2>&1 \
           && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1; }; } \
    || echo "   (could not install chromium; the report's browser check will be skipped)"
fi
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo test (release: the validation tests simulate minutes of traffic)"
cargo test --workspace --release --locked
echo "== pytest"
python -m pytest -q
