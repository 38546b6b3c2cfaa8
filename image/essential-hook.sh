#!/bin/sh
# mmdebstrap --essential-hook ROOT: after the Essential packages, before the kernel is
# installed. The initrd is ours (`cargo xtask image` packs initrd/'s /init with the drivers
# image/customize-hook.sh gathers), not initramfs-tools':
# the kernel's postinst and then initramfs-tools' trigger would each build one (under
# qemu-user for arm64, minutes each), so update-initramfs is diverted to a stub until the
# customize hook puts it back.
set -e
chroot "$1" dpkg-divert --quiet --local --rename --add /usr/sbin/update-initramfs
printf '#!/bin/sh\n# Diverted while the base is built: image/customize-hook.sh builds the initrd.\nexit 0\n' \
    > "$1/usr/sbin/update-initramfs"
chmod 755 "$1/usr/sbin/update-initramfs"
