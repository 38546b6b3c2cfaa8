#!/bin/bash
# configure.sh ROOT: turns a fresh mmdebstrap tree (a private copy, run as root on the build
# host) into the maintenance OS's base: identity, units a RAM-only OS does not need and kernel
# modules a server never needs.
set -euo pipefail
root=$1
kernel=$(ls "$root/lib/modules")

put() { # put PATH MODE < content: replaces the file, never writes through it
    rm -f "$root$1"; mkdir -p "$(dirname "$root$1")"; cat > "$root$1"; chmod "$2" "$root$1"
}

# Identity. root stays locked (no password): an image builder who wants console or SSH access
# adds it in a layer. machine-id empty: systemd makes a transient one at each boot.
echo maintenance | put /etc/hostname 644
printf '127.0.0.1\tlocalhost\n127.0.1.1\tmaintenance\n::1\tlocalhost ip6-localhost ip6-loopback\n' | put /etc/hosts 644
echo '# The initrd mounts the root (squashfs layers under an overlay in RAM: /init)' | put /etc/fstab 644
: | put /etc/machine-id 444

# Units a short-lived OS in RAM has no use for. systemd-firstboot would prompt on the console
# for a locale and a root password (an empty machine-id means "first boot").
mask() {
    for unit; do
        rm -f "$root"/etc/systemd/system/*.wants/"$unit"
        ln -sfn /dev/null "$root/etc/systemd/system/$unit"
    done
}
mask systemd-firstboot.service apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer \
    e2scrub_all.timer e2scrub_reap.service fstrim.timer systemd-pstore.service \
    systemd-repart.service systemd-pcrphase.service systemd-pcrphase-sysinit.service \
    proc-sys-fs-binfmt_misc.automount systemd-binfmt.service
printf '[Journal]\nStorage=volatile\nRuntimeMaxUse=32M\n' | put /etc/systemd/journald.conf.d/maintenance-os.conf 644

# Kernel modules no provisioning server needs: sound, video capture, wireless, bluetooth,
# industrial I/O, and so on; KVM and hypervisor guests other than virtio; exotic file systems;
# DRM drivers but the BMC's VGA (ast, mgag200) and the virtual ones. Kept: every storage,
# Ethernet and USB driver, md/dm.
drivers="$root/lib/modules/$kernel/kernel"
for dir in sound drivers/media drivers/staging drivers/infiniband drivers/net/wireless \
    net/wireless net/mac80211 drivers/bluetooth net/bluetooth drivers/iio drivers/comedi \
    drivers/isdn drivers/nfc net/nfc drivers/input/joystick drivers/input/touchscreen \
    drivers/input/tablet drivers/net/can net/can drivers/net/wan drivers/net/hamradio \
    drivers/atm net/atm drivers/usb/gadget drivers/pcmcia drivers/mtd drivers/target \
    drivers/thunderbolt drivers/firewire drivers/platform/chrome drivers/memstick drivers/w1 \
    drivers/gnss drivers/greybus drivers/net/ethernet/mellanox/mlxsw drivers/net/ipa \
    drivers/net/ieee802154 net/ieee802154 net/mac802154 drivers/vfio arch/x86/kvm arch/arm64/kvm \
    drivers/xen drivers/hv fs/ocfs2 fs/gfs2 fs/ubifs fs/jffs2 fs/orangefs fs/nilfs2 fs/reiserfs \
    fs/afs fs/ceph fs/coda; do
    rm -rf "${drivers:?}/$dir"
done
for dir in "$drivers"/drivers/gpu/drm/*; do
    case ${dir##*/} in
        ast | mgag200 | tiny | bochs | qxl | virtio | ttm | display | scheduler | *.ko) ;;
        *) rm -rf "$dir" ;;
    esac
done

# The module index again, without the drivers removed above. The initrd needs no rebuild: the
# essential hook configured it before the kernel's postinst built it, and a driver it still
# holds serves only until the switch to the root.
chroot "$root" depmod "$kernel"
