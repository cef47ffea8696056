#!/usr/bin/env bash
# System packages the tests need: Debian's Nsight Systems (non-free), Chromium, and a Java 17
# runtime for Spark's local mode (tests/test_spark.py, the spark extra).
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
if ! command -v nsys >/dev/null || ! command -v chromium >/dev/null || ! command -v java >/dev/null; then
  $SUDO tee /etc/apt/sources.list.d/debian-non-free.sources >/dev/null <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
    nsight-systems-target nsight-systems chromium openjdk-17-jre-headless
fi
# Debian packaging bug: the CLI looks for its importer beside itself.
if [ -d /usr/lib/nsight-systems/host-linux-x64 ] && \
   [ ! -e /usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64 ]; then
  $SUDO ln -sfn /usr/lib/nsight-systems/host-linux-x64 \
    /usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64
fi
nsys --version
