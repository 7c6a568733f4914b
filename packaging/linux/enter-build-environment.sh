#!/bin/sh
# Enter the pinned Linux build environment (packaging/linux/build-environment.toml) inside its container:
# apt reads only the dated Debian snapshot, then the tools the pipeline needs and the lane's build-host
# packages (.github/scripts/host_packages.py <lane> debian) are installed from it.  Run as root in the
# container, from the root of a checkout of this repository; the release workflow's Linux build job does,
# and so does an outsider's `podman run … rebuild --verify` (docs/provenance.md).
#
#   sh packaging/linux/enter-build-environment.sh SNAPSHOT SUITE LANE
#   e.g. sh packaging/linux/enter-build-environment.sh 20251229T000000Z bookworm rtx5090-container
set -eu
if [ "$#" -ne 3 ]; then
    echo "usage: enter-build-environment.sh SNAPSHOT SUITE LANE" >&2
    exit 2
fi
snapshot="$1"
suite="$2"
lane="$3"
case "$snapshot" in
    [0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]T[0-9][0-9][0-9][0-9][0-9][0-9]Z) ;;
    *) echo "::error::$snapshot is not a snapshot.debian.org timestamp (YYYYMMDDTHHMMSSZ)" >&2; exit 2 ;;
esac
case "$suite" in
    "" | *[!a-z]*) echo "::error::$suite is not a Debian suite name" >&2; exit 2 ;;
esac
case "$lane" in
    "" | *[!a-z0-9-]*) echo "::error::$lane is not a lane id" >&2; exit 2 ;;
esac
# Only the snapshot: the image's own sources would follow the live archive.  Plain http is what
# snapshot.debian.org serves apt; apt checks every index against the archive keyring of the image.
rm -f /etc/apt/sources.list /etc/apt/sources.list.d/*
cat > /etc/apt/sources.list.d/snapshot.sources <<SOURCES
Types: deb
URIs: http://snapshot.debian.org/archive/debian/$snapshot/
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
Check-Valid-Until: no

Types: deb
URIs: http://snapshot.debian.org/archive/debian-security/$snapshot/
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
Check-Valid-Until: no
SOURCES
export DEBIAN_FRONTEND=noninteractive
apt-get -o Acquire::Retries=3 update -qq
apt-get install -y -qq --no-install-recommends ca-certificates git python3 python3-venv
# Assigned on its own line: a malformed lane file stops here (set -e) before apt-get runs.
packages="$(python3 .github/scripts/host_packages.py "$lane" debian)"
# One package name per word; the helper checked each against Debian's naming rules.
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $packages
