#!/bin/sh
# mmdebstrap --customize-hook ROOT: at the end. In the Essential phase apt satisfies
# init-system-helpers' "usrmerge | usr-is-merged" with usrmerge, which pulls in perl (47 MiB
# unpacked); the tree is merged-/usr already and usr-is-merged is installed, so both go.
set -e
root=$1
here=$(dirname "$0")
chroot "$root" dpkg --purge usrmerge libfile-find-rule-perl libnumber-compare-perl libtext-glob-perl \
    perl libperl5.36 perl-modules-5.36
# update-initramfs back in place (see essential-hook.sh), unused: the initrd is ours.
rm "$root/usr/sbin/update-initramfs"
chroot "$root" dpkg-divert --quiet --local --rename --remove /usr/sbin/update-initramfs

# The drivers of the initrd (image/initrd-modules) with what they depend on, in load order:
# /boot/initrd-modules/load-order and the modules beside it. `cargo xtask image` puts them in
# the initrd with its /init (initrd/, xtask/src/initrd.rs); the root's udev loads every other
# driver after the switch.
version=$(ls "$root/lib/modules")
out="$root/boot/initrd-modules"
rm -rf "$out"
mkdir -p "$out"
grep -v '^#' "$here/initrd-modules" | while read -r module; do
    [ -n "$module" ] || continue
    if ! chroot "$root" modprobe -S "$version" --show-depends "$module" > "$out/depends" 2> /dev/null; then
        echo "initrd: no module $module in $version: left out" >&2
        continue
    fi
    sed -n "s|^insmod /lib/modules/$version/||p" "$out/depends"
done | awk '!seen[$1]++ { print $1 }' > "$out/load-order"
rm "$out/depends"
while read -r module; do
    mkdir -p "$out/$(dirname "$module")"
    cp "$root/lib/modules/$version/$module" "$out/$module"
done < "$out/load-order"
