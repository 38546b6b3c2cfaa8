#!/bin/sh
# mmdebstrap --essential-hook ROOT: after the Essential packages, before the kernel and
# live-boot are installed. The initrd is built once, by the customize hook, with these
# settings: the kernel's postinst and then initramfs-tools' trigger (for the packages that
# come after it) would each build it, and under qemu-user for arm64 one build costs minutes,
# so update-initramfs is diverted to a stub until then.
set -e
chroot "$1" dpkg-divert --quiet --local --rename --add /usr/sbin/update-initramfs
printf '#!/bin/sh\n# Diverted while the base is built: image/customize-hook.sh builds the initrd once.\nexit 0\n' \
    > "$1/usr/sbin/update-initramfs"
chmod 755 "$1/usr/sbin/update-initramfs"
mkdir -p "$1/etc/initramfs-tools/conf.d"
cat > "$1/etc/initramfs-tools/conf.d/maintenance-os.conf" <<'EOC'
# 'most': storage, file-system, USB and input drivers, so that the initrd finds the boot
# medium on any server (AHCI, NVMe, SAS/RAID, a USB CD through xhci/uas/usb-storage, virtio).
MODULES=most
COMPRESS=zstd
EOC
# live-boot's initrd: no dm-verity (it would bring util-linux's mount and libcrypto), FUSE or
# NTFS; and a hook, run after all others, that drops what finding the medium never needs
# (live-boot adds every NIC driver, its kms hook the big GPU drivers).
mkdir -p "$1/etc/live" "$1/etc/initramfs-tools/hooks"
printf 'DISABLE_DM_VERITY=true\nDISABLE_FUSE=true\nDISABLE_NTFS=true\n' > "$1/etc/live/boot.conf"
cat > "$1/etc/initramfs-tools/hooks/zzz-maintenance-prune" <<'EOH'
#!/bin/sh
[ "$1" = prereqs ] && exit 0
modules="${DESTDIR}/usr/lib/modules/${version}/kernel"
[ -d "$modules" ] || modules="${DESTDIR}/lib/modules/${version}/kernel"
for dir in drivers/net drivers/gpu drivers/infiniband drivers/media net sound fs/nfs fs/nfsd \
    fs/lockd fs/btrfs fs/xfs fs/f2fs fs/ocfs2 fs/gfs2 fs/smb fs/cifs fs/jffs2 fs/ubifs fs/nilfs2 \
    fs/reiserfs fs/jfs fs/hfs fs/hfsplus fs/ntfs3 fs/ceph fs/afs fs/9p fs/orangefs fs/dlm; do
    rm -rf "${modules:?}/$dir"
done
exit 0
EOH
chmod 755 "$1/etc/initramfs-tools/hooks/zzz-maintenance-prune"
