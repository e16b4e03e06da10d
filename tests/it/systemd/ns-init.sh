#!/bin/bash
# PID 1 of a throw-away system: run by `unshare --pid --fork --mount --uts
# --cgroup --propagation private` with the instance's work folder, its
# name, and the folders to keep visible at their own paths. It makes
# a root of its own (the host's / seen through an overlay whose writes go
# to a tmpfs), mounts what systemd needs, pivots into it and becomes
# systemd, starting only a minimal target. Nothing it does is seen outside
# its mount namespace; everything it wrote goes with it.
set -eu
work=$1
name=$2
scratch=$work/scratch
mount -n -t tmpfs -o mode=0755 scratch "$scratch"
mkdir -p "$scratch/upper" "$scratch/work" "$scratch/root"
mount -n -t overlay overlay \
    -o "lowerdir=/,upperdir=$scratch/upper,workdir=$scratch/work" "$scratch/root"
root=$scratch/root

mount -n -t proc proc "$root/proc"
# Read-only: nothing inside touches the host's devices.
mount -n -t sysfs -o ro sysfs "$root/sys"
# The cgroup namespace's root is the instance's `payload` cgroup.
mount -n -t cgroup2 cgroup2 "$root/sys/fs/cgroup"

mount -n -t tmpfs -o mode=0755,nosuid tmpfs "$root/dev"
for dev in null zero full random urandom tty; do
    touch "$root/dev/$dev"
    mount -n --bind "/dev/$dev" "$root/dev/$dev"
done
mkdir -p "$root/dev/pts" "$root/dev/shm"
mount -n -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$root/dev/pts"
ln -s pts/ptmx "$root/dev/ptmx"
mount -n -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$root/dev/shm"
ln -s /proc/self/fd "$root/dev/fd"
ln -s /proc/self/fd/0 "$root/dev/stdin"
ln -s /proc/self/fd/1 "$root/dev/stdout"
ln -s /proc/self/fd/2 "$root/dev/stderr"
touch "$root/dev/console"
mount -n --bind "$work/console.log" "$root/dev/console"

mount -n -t tmpfs -o mode=0755,nosuid,nodev tmpfs "$root/run"
mount -n -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$root/tmp"

# The folders the tests need at their own paths (the checkout, the tested
# binary's), read-only: under /tmp the tmpfs above would hide them.
shift 2
for keep in "$@"; do
    mkdir -p "$root$keep"
    mount -n --bind "$keep" "$root$keep"
    mount -n -o remount,bind,ro "$root$keep"
done

# Only journald: none of the host's enabled services start inside.
mkdir -p "$root/etc/systemd/system"
cat > "$root/etc/systemd/system/$name.target" <<UNIT
[Unit]
Description=throw-away system for jobwarden's tests
Wants=systemd-journald.socket systemd-journald.service
AllowIsolate=yes
UNIT
echo "$name" > "$root/etc/hostname"
hostname "$name"
rm -f "$root/etc/machine-id"
: > "$root/etc/machine-id"

cd "$root"
mkdir -p old-root
pivot_root . old-root
umount -n -l /old-root
rmdir /old-root
exec env -i container="$name" PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /lib/systemd/systemd --unit="$name.target" --show-status=no
