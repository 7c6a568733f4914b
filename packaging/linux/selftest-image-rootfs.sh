#!/bin/sh
# Start the engine inside an image's root file system the way the NVIDIA container toolkit starts a
# compute container, and run its GPU self-test (issue 29, "Proof": a process started inside the image).
#
#   sh packaging/linux/selftest-image-rootfs.sh ROOTFS [BINARY]
#
# ROOTFS: an unpacked image root file system (umoci unpack, or the image's layers extracted in order);
# it is changed as a container's is: files to mount on, the driver's soname links and /etc/ld.so.cache
# (the toolkit's ldconfig hook), so give it a scratch copy.  BINARY: the path inside, default
# /opt/ninfer/bin/ninfer-serve (the image's entrypoint).
#
# What the toolkit does for NVIDIA_DRIVER_CAPABILITIES=compute,utility, done here with mount and chroot:
# the driver's user-space libraries of this host (libcuda, libnvidia-ptxjitcompiler, libnvidia-nvvm,
# libnvidia-gpucomp, libcudadebugger, libnvidia-ml, libnvidia-cfg), found through `ldconfig -p` and the
# folders drivers are installed in (or NVIDIA_DRIVER_LIB_DIR), each bound read-only onto a file of the
# same name in the image's library folder; ldconfig of the image run inside it; /dev/nvidia* and the
# devices every OCI container has bound in; /proc and /sys (read-only) mounted; then BINARY --version
# and BINARY --selftest in a chroot, their output printed as it is.  All of it in a private mount
# namespace (unshare), so nothing stays mounted on the host.  Where no such namespace can be made (or
# SELFTEST_IMAGE_ROOTFS_MODE=loader): loader mode, weaker and said so: the image's own loader and
# libraries with copies of the driver's, no chroot, the host's /dev and /proc.
#
# Exit status: 0 when both ran and the self-test said "selftest: ok"; 1 when the self-test failed
# (including: no NVIDIA driver on this host, said before it runs); 2 on a usage or setup problem;
# 3 when --version failed (the image cannot start the engine at all).
set -eu

LIBDIR_IN_IMAGE=/usr/lib/x86_64-linux-gnu
# The toolkit's compute and utility libraries (libnvidia-container's list); libcuda is the one required.
DRIVER_LIBRARIES="libcuda.so libcudadebugger.so libnvidia-ptxjitcompiler.so libnvidia-nvvm.so libnvidia-gpucomp.so libnvidia-ml.so libnvidia-cfg.so"
DRIVER_FOLDERS="/usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu /usr/lib64 /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/nvidia/current /usr/lib/nvidia /usr/local/cuda/compat"
CONTAINER_DEVICES="null zero full random urandom tty"

say() { printf 'selftest-image-rootfs: %s\n' "$*" >&2; }
fail() { status=$1; shift; say "error: $*"; exit "$status"; }

[ $# -ge 1 ] && [ $# -le 2 ] || fail 2 "usage: $0 ROOTFS [BINARY] (ROOTFS: an unpacked image root file system)"
root=$(cd "$1" 2>/dev/null && pwd -P) || fail 2 "ROOTFS $1: not a folder (expected an unpacked image root file system)"
binary=${2:-/opt/ninfer/bin/ninfer-serve}
[ -x "$root$binary" ] || [ -L "$root$binary" ] || fail 2 "$root$binary: not an executable in the root file system (expected the image's entrypoint; pass BINARY)"
[ -d "$root$LIBDIR_IN_IMAGE" ] || fail 2 "$root$LIBDIR_IN_IMAGE: missing (expected a Debian-layout x86-64 image with its library folder)"

# The real file of a driver library: ldconfig's cache first (what the host's programs load), then the
# folders drivers are installed in.  Prints nothing when this host has none.
find_driver_library() {
    name=$1
    for folder in ${NVIDIA_DRIVER_LIB_DIR:-}; do
        for candidate in "$folder/$name".*; do
            [ -e "$candidate" ] && { readlink -f "$candidate"; return 0; }
        done
    done
    found=$( (ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null || true) | awk -v n="$name" '
        $1 ~ ("^" n "\\.[0-9]+$") && /x86-64/ { print $NF; exit }')
    if [ -n "$found" ] && [ -e "$found" ]; then
        readlink -f "$found"
        return 0
    fi
    for folder in $DRIVER_FOLDERS; do
        for candidate in "$folder/$name".*; do
            [ -e "$candidate" ] && { readlink -f "$candidate"; return 0; }
        done
    done
    return 0
}

# Outside the private mount namespace: become root in one (a user namespace when not root), then run
# the rest of this script there.  Mounts made inside vanish when it ends.  Where no namespace can be
# made (a container without CAP_SYS_ADMIN), or SELFTEST_IMAGE_ROOTFS_MODE=loader asks: loader mode below.
if [ "${SELFTEST_IMAGE_ROOTFS_INSIDE:-}" != ns ] && [ "${SELFTEST_IMAGE_ROOTFS_MODE:-}" != loader ]; then
    command -v unshare >/dev/null 2>&1 || fail 2 "unshare (util-linux) is not installed: it makes the private mount namespace"
    if [ "$(id -u)" = 0 ]; then
        set -- unshare --mount --propagation private
    else
        # Not root: a user namespace maps this user to root; a new PID namespace lets it mount its own /proc.
        set -- unshare --user --map-root-user --mount --pid --fork --propagation private
    fi
    if why=$("$@" true 2>&1); then
        exec "$@" env SELFTEST_IMAGE_ROOTFS_INSIDE=ns sh "$0" "$root" "$binary"
    fi
    say "no private mount namespace here ($*: $why)"
    SELFTEST_IMAGE_ROOTFS_MODE=loader
fi

# Both modes: --version, then --selftest, judged by its own words.  run_in_image and how_started differ.
judge() {
    say "running: $how_started $binary --version"
    if ! run_in_image "$binary" --version; then
        fail 3 "$binary --version failed inside $root: the image cannot start the engine"
    fi
    say "running: $how_started $binary --selftest"
    set +e
    output=$(run_in_image "$binary" --selftest 2>&1)
    status=$?
    set -e
    printf '%s\n' "$output"
    case "$output" in
        *"selftest: ok "*) ok=yes ;;
        *) ok=no ;;
    esac
    if [ "$status" -ne 0 ] || [ "$ok" != yes ]; then
        [ -n "$driver_found" ] || fail 1 "$binary --selftest failed (exit $status) on a host without an NVIDIA driver"
        fail 1 "$binary --selftest failed (exit $status) with the driver $driver_found in place ($mode_said)"
    fi
    say "OK: $binary --selftest passed inside the image ($mode_said) with the host's driver $driver_found"
}

# -- loader mode: no namespace, no chroot --------------------------------------------------------------
# The image's own loader runs the binary with only the image's library folders and a private folder of
# copies of the driver's libraries on its path (--inhibit-cache: never the host's ld.so.cache), so every
# library but the driver's still comes from the image; the host's /dev, /proc and /sys are used as they are.
if [ "${SELFTEST_IMAGE_ROOTFS_MODE:-}" = loader ]; then
    image_loader="$root$LIBDIR_IN_IMAGE/ld-linux-x86-64.so.2"
    [ -x "$image_loader" ] || fail 2 "$image_loader: missing (loader mode runs the image's own loader)"
    copies=$(mktemp -d "${TMPDIR:-/tmp}/selftest-image-driver.XXXXXX")
    trap 'rm -rf "$copies"' EXIT
    driver_found=
    for name in $DRIVER_LIBRARIES; do
        file=$(find_driver_library "$name")
        [ -n "$file" ] || continue
        cp "$file" "$copies/" || fail 2 "could not copy $file into $copies"
        say "driver library $file -> $copies/$(basename "$file") (copied: no mount in loader mode)"
        [ "$name" = libcuda.so ] && driver_found=$file
    done
    if [ -n "$driver_found" ]; then
        ldconfig -n "$copies" 2>/dev/null || /sbin/ldconfig -n "$copies" || fail 2 "ldconfig -n $copies failed (it makes the driver's soname links)"
    else
        say "no NVIDIA driver on this host: libcuda.so.* is neither in ldconfig's cache nor in ${NVIDIA_DRIVER_LIB_DIR:+$NVIDIA_DRIVER_LIB_DIR }$DRIVER_FOLDERS (set NVIDIA_DRIVER_LIB_DIR to its folder); the self-test below cannot pass"
    fi
    library_path="$root$LIBDIR_IN_IMAGE:$root/usr/lib:$copies"
    run_in_image() {
        program=$1
        shift
        env -i PATH=/usr/bin:/bin NINFER_HOME="$root/opt/ninfer" "$image_loader" --inhibit-cache --library-path "$library_path" "$root$program" "$@"
    }
    how_started="the image's loader $LIBDIR_IN_IMAGE/ld-linux-x86-64.so.2 --inhibit-cache --library-path <image folders>:<driver copies>"
    mode_said="loader mode: the image's loader and libraries, no chroot"
    judge
    exit 0
fi

# -- inside the private mount namespace --------------------------------------------------------------

bind_file() {  # bind_file SOURCE TARGET [ro]: the toolkit mounts a file onto an empty file of the same name
    [ -e "$2" ] || [ -L "$2" ] || : > "$2"
    mount --bind "$1" "$2" || fail 2 "could not bind $1 onto $2"
    if [ "${3:-}" = ro ]; then
        mount -o remount,bind,ro "$2" 2>/dev/null || say "note: $2 stays writable (a read-only remount was refused here)"
    fi
}

driver_found=
for name in $DRIVER_LIBRARIES; do
    file=$(find_driver_library "$name")
    [ -n "$file" ] || continue
    target="$root$LIBDIR_IN_IMAGE/$(basename "$file")"
    bind_file "$file" "$target" ro
    say "driver library $file -> $LIBDIR_IN_IMAGE/$(basename "$file") (read-only bind)"
    [ "$name" = libcuda.so ] && driver_found=$file
done
if [ -n "$driver_found" ]; then
    # The toolkit's update-ldcache hook: ldconfig makes the soname links (libcuda.so.1) and the cache for
    # the final file system; the image's own when it has one (its glibc's cache format), else this host's
    # with -r, as the toolkit's default (ldconfig = "@/sbin/ldconfig") does.
    if [ -x "$root/usr/sbin/ldconfig" ]; then
        chroot "$root" /usr/sbin/ldconfig || fail 2 "the image's ldconfig failed inside $root"
    else
        ldconfig -r "$root" || /sbin/ldconfig -r "$root" || fail 2 "ldconfig -r $root failed (the image has no ldconfig of its own)"
    fi
else
    say "no NVIDIA driver on this host: libcuda.so.* is neither in ldconfig's cache nor in ${NVIDIA_DRIVER_LIB_DIR:+$NVIDIA_DRIVER_LIB_DIR }$DRIVER_FOLDERS (set NVIDIA_DRIVER_LIB_DIR to its folder); the self-test below cannot pass"
fi

# The toolkit has nvidia-modprobe load nvidia-uvm and make its device nodes first: the driver makes
# /dev/nvidia-uvm on first use only, and nothing inside the image can make it.
if [ -n "$driver_found" ] && command -v nvidia-modprobe >/dev/null 2>&1; then
    nvidia-modprobe -u -c=0 || say "note: nvidia-modprobe -u -c=0 failed; /dev/nvidia-uvm may be missing"
fi
mkdir -p "$root/dev" "$root/proc" "$root/sys" "$root/tmp"
mount -t tmpfs -o mode=755,nosuid tmpfs "$root/dev" || fail 2 "could not mount a tmpfs on $root/dev"
for device in $CONTAINER_DEVICES; do
    [ -e "/dev/$device" ] && bind_file "/dev/$device" "$root/dev/$device"
done
for device in /dev/nvidia*; do
    [ -e "$device" ] || continue
    if [ -d "$device" ]; then  # /dev/nvidia-caps
        mkdir -p "$root$device" && mount --rbind "$device" "$root$device"
    else
        bind_file "$device" "$root$device"
    fi
    say "device $device bound in"
done
mkdir -p "$root/dev/shm" && mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$root/dev/shm"
mount -t proc proc "$root/proc" || fail 2 "could not mount /proc in $root"
mount --rbind /sys "$root/sys" || fail 2 "could not bind /sys into $root"
mount -o remount,bind,ro "$root/sys" 2>/dev/null || true

run_in_image() {  # the image's environment (its config's PATH and NINFER_HOME), nothing of this host's; the image has no env
    env -i PATH=/opt/ninfer/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin NINFER_HOME=/opt/ninfer "$(command -v chroot)" "$root" "$@"
}

how_started="chroot $root"
mode_said="chroot in a private mount namespace, as the container toolkit does"
judge
