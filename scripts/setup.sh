#!/usr/bin/env bash
# Idempotent set-up on a fresh machine: Python venv with the pinned packages, and the JVM jars
# (Spark Kafka connector + Delta, hadoop-aws + the AWS SDK for s3a:// lakes, the Kafka broker,
# and Derby's network server and client for the embedded catalog)
# resolved by Maven from jvm/*/pom.xml; and the routing scan's compiled library
# (pipeline/urb/native), where rustc is installed.
# Each step is skipped when its stamp is newer than its manifest. Usage: scripts/setup.sh [--tools]
#   --tools  also install test tools from Debian: docker-compose (to validate docker-compose.yml),
#            prometheus (promtool, and the server the e2e test scrapes the job with) and
#            prometheus-alertmanager (amtool, and the Alertmanager the alert tests post to)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
say() { printf '[setup] %s\n' "$*" >&2; }

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
    || { echo "error: Python 3.11 is required (set PYTHON=/path/to/python3.11)" >&2; exit 2; }
  say "creating .venv"
  "$PYTHON" -m venv .venv
fi
if [ ! -f .venv/.installed ] || [ pyproject.toml -nt .venv/.installed ]; then
  say "installing Python packages (pinned in pyproject.toml)"
  # uv (PyPI) resolves and installs the same pins in about half pip's time; pip when it fails
  if .venv/bin/pip install -q uv && .venv/bin/uv pip install -q --python .venv/bin/python \
      -e '.[dev]'; then :; else
    say "uv failed: installing with pip"
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q -e '.[dev]'
  fi
  touch .venv/.installed
fi

# The routing scan's compiled common case (pipeline/urb/native): safe Rust, no crates, ~2 s.
# Without rustc the job runs the pure-Python scan (same rows, slower) and says so at start.
native_src=pipeline/urb/native/urbwalk.rs native_lib=pipeline/urb/native/liburbwalk.so
if [ ! -f "$native_lib" ] || [ "$native_src" -nt "$native_lib" ]; then
  RUSTC=$(command -v rustc || true)
  [ -n "$RUSTC" ] || [ ! -x "$HOME/.cargo/bin/rustc" ] || RUSTC="$HOME/.cargo/bin/rustc"
  if [ -n "$RUSTC" ]; then
    say "building $native_lib with $RUSTC"
    "$RUSTC" --edition 2021 -O -C strip=symbols --crate-type cdylib "$native_src" \
        -o "$native_lib.tmp" && mv "$native_lib.tmp" "$native_lib"
  else
    say "warning: no rustc: the routing scan runs in pure Python (slower; same rows)"
  fi
fi

resolve() {  # resolve <manifest dir> <output dir>
  local pom="jvm/$1/pom.xml" out=".jars/$2"
  if [ -f "$out/.stamp" ] && [ "$out/.stamp" -nt "$pom" ]; then return; fi
  say "resolving JVM jars from $pom into $out (Maven Central)"
  rm -rf "$out"
  mvn -q -B -Dstyle.color=never -s jvm/settings.xml -f "$pom" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$PWD/$out"
  touch "$out/.stamp"
}
command -v mvn >/dev/null || { echo "error: Maven (mvn) is required for the JVM jars" >&2; exit 2; }
command -v java >/dev/null || { echo "error: Java 17 is required" >&2; exit 2; }
resolve spark spark
# the project's own JVM classes, beside the jars Spark gets: its Delta log stores (jvm/logstore,
# decisions 0017 and 0019) and its local file system (jvm/localfs, decision 0020)
build_jar() {
  local jar=".jars/spark/urbpipe-$1-1.jar"
  if [ ! -f "$jar" ] || [ -n "$(find "jvm/$1" -newer "$jar" -type f \
      -not -path '*/target/*' | head -1)" ]; then
    say "building $jar from jvm/$1"
    mvn -q -B -Dstyle.color=never -s jvm/settings.xml -f "jvm/$1/pom.xml" package
    cp "jvm/$1/target/urbpipe-$1-1.jar" "$jar"
  fi
}
build_jar logstore
build_jar localfs
# ~20 MB, ~20 s once: small enough to resolve for everyone, so `make setup` is all a lake on
# s3a:// needs and the object-store test finds them; Spark gets them only for an s3a:// lake.
resolve s3 s3
resolve kafka kafka
# ~1 MB: Derby's network server and client, the embedded catalog's metastore (catalog.local)
resolve catalog catalog

if [ "${1:-}" = "--tools" ] && ! command -v docker-compose >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing docker-compose (Debian) to validate docker-compose.yml"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose) \
      >/dev/null 2>&1 || say "warning: could not install docker-compose; its test will fail"
  else
    say "warning: docker-compose not installed (needs root + apt-get); its test will fail"
  fi
fi
if [ "${1:-}" = "--tools" ] && ! { command -v promtool && command -v amtool \
    && command -v prometheus && command -v prometheus-alertmanager; } >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing prometheus and prometheus-alertmanager (Debian) for the monitoring tests"
    # Their packages would start both services (Prometheus on 9090, Alertmanager on 9093: the
    # demo broker's controller port); a policy-rc.d that refuses keeps them from starting.
    made_policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
      printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
      made_policy=1
    fi
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends prometheus prometheus-alertmanager) >/dev/null 2>&1 \
      || say "warning: could not install prometheus/prometheus-alertmanager; their tests will fail"
    [ -z "$made_policy" ] || rm -f /usr/sbin/policy-rc.d
  else
    say "warning: prometheus/prometheus-alertmanager not installed (needs root + apt-get); the" \
        "monitoring tests will fail"
  fi
fi
say "ready"
