#!/usr/bin/env bash
# What the container tests (tests/containers) need on this kind of machine, each step done only
# when missing, so that a second run takes a second:
#
#   1. podman, podman-compose, runc and mmdebstrap, Debian's packages (as root; apt retried).
#   2. A Debian bookworm base image with Python 3.11, made with mmdebstrap from the Debian
#      mirror apt already uses, since no image registry is reachable here; kept as a tarball
#      in $DECISIONS_CACHE_DIR (default /var/cache/decision-worker) between runs. Delete the
#      tarball to make a fresh one.
#   3. That tarball imported as localhost/base:bookworm.
#
# Run by `make test`, `make containers` and .ci/run. Podman reads deploy/ci/containers.conf
# (CONTAINERS_CONF; runc, cgroupfs, the limits this host allows). On failure it says what
# failed and what to do, and exits non-zero; the container tests then fail under CI=true
# (skip elsewhere) naming this script.
set -euo pipefail
cd "$(dirname "$0")/../.."

CACHE=${DECISIONS_CACHE_DIR:-/var/cache/decision-worker}
BASE_IMAGE=localhost/base:bookworm
TARBALL=$CACHE/base-bookworm.tar
PACKAGES=(podman podman-compose runc mmdebstrap)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/deploy/ci/containers.conf}

say() { echo "deploy/ci/prepare.sh: $*" >&2; }
fail() { say "$*"; exit 1; }
took() { say "$1 took $(($(date +%s) - $2)) s"; }

retry() {  # retry COMMAND...: three tries, 5 s then 10 s apart (mirrors and locks hiccup)
  local try
  for try in 1 2 3; do
    "$@" && return 0
    [ "$try" = 3 ] || { say "failed ($try/3), trying again: $*"; sleep $((try * 5)); }
  done
  return 1
}

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

# --- 1. the tools ---------------------------------------------------------------------------
missing=()
for package in "${PACKAGES[@]}"; do
  installed "$package" || missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    fail "missing ${missing[*]}: as root, run: apt-get update && apt-get install -y ${missing[*]}"
  fi
  started=$(date +%s)
  say "installing ${missing[*]}"
  apt=(apt-get -q -o DPkg::Lock::Timeout=300 -o Dpkg::Use-Pty=0)
  retry "${apt[@]}" update -qq || fail "apt-get update failed: is the Debian mirror reachable?"
  retry env DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y -qq "${missing[@]}" >/dev/null \
    || fail "apt-get install ${missing[*]} failed (see apt's output above)"
  took "installing ${missing[*]}" "$started"
fi
podman info >/dev/null 2>&1 \
  || fail "podman does not run here: $(podman info 2>&1 | tail -n 1) (CONTAINERS_CONF=$CONTAINERS_CONF)"

# --- 2. and 3. the base image ---------------------------------------------------------------
if podman image exists "$BASE_IMAGE"; then
  exit 0
fi
if [ ! -s "$TARBALL" ]; then
  [ "$(id -u)" = 0 ] || fail "no $TARBALL: run this script as root once to make it"
  mkdir -p "$CACHE"
  # The mirror apt uses (deb822 or one-line sources), else Debian's own.
  mirror=$(grep -hsoE '^(URIs:|deb) +[^ ]+' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list \
    | awk '{print $2}' | grep -E '/debian/?$' | head -n 1 || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  started=$(date +%s)
  say "making the base image with mmdebstrap from $mirror (a minute or two, once)"
  partial=$(mktemp --suffix=.tar "$CACHE/base-bookworm.XXXXXX")
  # stdin from /dev/null: mmdebstrap reads extra sources from a stdin that is no terminal.
  if ! retry mmdebstrap --quiet --variant=minbase \
      --include=python3,python3-venv,python3-pip,python-is-python3,ca-certificates \
      bookworm "$partial" "$mirror" </dev/null; then
    rm -f "$partial"
    fail "mmdebstrap failed (output above): is $mirror reachable?"
  fi
  mv "$partial" "$TARBALL"
  took "mmdebstrap" "$started"
fi
started=$(date +%s)
if ! podman import --quiet "$TARBALL" "$BASE_IMAGE" >/dev/null; then
  rm -f "$TARBALL"
  fail "podman import of $TARBALL failed; the tarball is deleted, run this script again"
fi
took "podman import" "$started"
