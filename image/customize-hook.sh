#!/bin/sh
# mmdebstrap --customize-hook ROOT: at the end. In the Essential phase apt satisfies
# init-system-helpers' "usrmerge | usr-is-merged" with usrmerge, which pulls in perl (47 MiB
# unpacked); the tree is merged-/usr already and usr-is-merged is installed, so both go.
set -e
chroot "$1" dpkg --purge usrmerge libfile-find-rule-perl libnumber-compare-perl libtext-glob-perl \
    perl libperl5.36 perl-modules-5.36
# The initrd, once (see essential-hook.sh): update-initramfs back in place, then run.
rm "$1/usr/sbin/update-initramfs"
chroot "$1" dpkg-divert --quiet --local --rename --remove /usr/sbin/update-initramfs
chroot "$1" update-initramfs -c -k "$(ls "$1/lib/modules")"
