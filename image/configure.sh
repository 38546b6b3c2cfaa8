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
# fusectl's mount loads the fuse driver at each boot for nobody (measured: 90 KiB read from
# the boot medium before the result); a FUSE mount still loads it when one is made.
mask sys-fs-fuse-connections.mount
printf '[Journal]\nStorage=volatile\nRuntimeMaxUse=32M\n' | put /etc/systemd/journald.conf.d/maintenance-os.conf 644

# The loop devices of the root in RAM (the initrd's, over the images on the boot medium or
# their copies in RAM) hold squashfs images nobody looks up by label or UUID: udev's blkid
# probe of each would read its first and last 256 KiB from the boot medium at every boot.
printf '%s\n' '# The root in RAM: see image/configure.sh.' \
    'SUBSYSTEM=="block", KERNEL=="loop*", ATTR{loop/backing_file}=="/run/live/*", ENV{UDEV_DISABLE_PERSISTENT_STORAGE_BLKID_FLAG}="1"' |
    put /etc/udev/rules.d/59-live-root-loops.rules 644

# udev's hardware database (vendor and model names, keyboard maps of laptops): udevd reads
# most of its 13 MB at start, 0.8 MiB from the boot medium before the result; nothing a
# provisioning server runs needs it. An image builder's layer can bring one back
# (/etc/udev/hwdb.bin).
rm -f "$root/usr/lib/udev/hwdb.bin"
# Its sources too (8.8 MiB): without hwdb.bin udev never reads them, and systemd-hwdb-update
# would build it again from them.
rm -f "$root"/usr/lib/udev/hwdb.d/*.hwdb

# arm64's device trees (/usr/lib/linux-image-VERSION, 25 MiB; amd64 has none): the image
# boots by UEFI, whose firmware gives the kernel the machine's ACPI tables or its own device
# tree; nothing in the running system reads these (flash-kernel would, for U-Boot boards).
rm -rf "$root"/usr/lib/linux-image-*
# debconf's copies of its caches from before the last package's configuration.
rm -f "$root"/var/cache/debconf/*-old

# apt and what only it uses (17 MiB): nothing installs packages in the RAM root at run time
# (an image builder adds files in a layer; our package's layer is installed by dpkg).
chroot "$root" dpkg --purge apt libapt-pkg6.0 libstdc++6 libgnutls30 libxxhash0 gpgv \
    debian-archive-keyring libhogweed6 libnettle8 libidn2-0 libunistring2 libtasn1-6 > /dev/null

# Kernel modules no provisioning server needs: sound, video capture, wireless, bluetooth,
# industrial I/O, and so on; KVM and hypervisor guests other than virtio; exotic file systems;
# DRM drivers but the BMC's VGA (ast, mgag200) and the virtual ones. Kept: every storage,
# Ethernet and USB driver, md/dm, and what they need: RDMA (InfiniBand and RoCE NICs, NVMe
# over RDMA), PCMCIA's core (b44 and the *_cs NICs), MTD's core (sfc).
drivers="$root/lib/modules/$kernel/kernel"
for dir in sound drivers/media drivers/staging drivers/net/wireless \
    net/wireless net/mac80211 drivers/bluetooth net/bluetooth drivers/iio drivers/comedi \
    drivers/isdn drivers/nfc net/nfc drivers/input/joystick drivers/input/touchscreen \
    drivers/input/tablet drivers/net/can net/can drivers/net/wan drivers/net/hamradio \
    drivers/atm net/atm drivers/usb/gadget drivers/target \
    drivers/thunderbolt drivers/firewire drivers/platform/chrome drivers/memstick drivers/w1 \
    drivers/gnss drivers/greybus drivers/net/ethernet/mellanox/mlxsw drivers/net/ipa \
    drivers/net/ieee802154 net/ieee802154 net/mac802154 drivers/vfio arch/x86/kvm arch/arm64/kvm \
    drivers/xen drivers/hv fs/ocfs2 fs/gfs2 fs/ubifs fs/jffs2 fs/orangefs fs/nilfs2 fs/reiserfs \
    fs/afs fs/ceph fs/coda drivers/accessibility drivers/soundwire drivers/usb/typec \
    drivers/net/arcnet drivers/net/fddi drivers/net/wwan fs/nfsd; do
    rm -rf "${drivers:?}/$dir"
done
# HID: the generic drivers a BMC's virtual keyboard and mouse use; not the quirks of game
# pads and laptop keyboards. Framebuffers: DRM's (the BMC's VGA), not the legacy fbdev
# drivers, whose helpers in fbdev/core DRM uses.
find "$drivers/drivers/hid" -name '*.ko' ! -name hid.ko ! -name hid-generic.ko ! -path '*/usbhid/*' -delete
find "$drivers/drivers/video/fbdev" -name '*.ko' ! -path '*/fbdev/core/*' -delete
rm -f "$drivers"/drivers/base/regmap/regmap-sdw*.ko
# Flash chips (MTD): their core only, which Solarflare's NIC drivers (sfc) need for their
# firmware partitions; the image before this kept none, and sfc could not load.
find "$drivers/drivers/mtd" -name '*.ko' ! -name mtd.ko -delete
for dir in "$drivers"/drivers/gpu/drm/*; do
    case ${dir##*/} in
        ast | mgag200 | tiny | bochs | qxl | virtio | ttm | display | scheduler | *.ko) ;;
        *) rm -rf "$dir" ;;
    esac
done

# A driver that needs one removed above could never load: it goes too, and the build says
# which (Hyper-V's guest drivers without their bus, ATM's USB modems, ...). No storage or
# Ethernet driver may go that way: the build stops.
cd "$root/lib/modules/$kernel"
while :; do
    orphans=$(awk -F': *' '{ n = split($2, dep, " "); for (i = 1; i <= n; i++) print $1, dep[i] }' modules.dep |
        while read -r user dep; do if [ -e "$user" ] && [ ! -e "$dep" ]; then echo "$user"; fi; done | sort -u)
    [ -n "$orphans" ] || break
    for ko in $orphans; do
        case $ko in
            # Hyper-V's disks without its bus; SCSI target mode (serving disks, not using them).
            kernel/drivers/scsi/hv_storvsc.ko | kernel/drivers/scsi/*/tcm_*.ko) ;;
            kernel/drivers/net/ethernet/* | kernel/drivers/scsi/* | kernel/drivers/ata/* | kernel/drivers/nvme/* | \
                kernel/drivers/md/* | kernel/drivers/usb/storage/* | kernel/drivers/block/*)
                echo "configure.sh: $ko needs a driver that was removed" >&2
                exit 1
                ;;
        esac
        echo "configure.sh: $ko removed: it needs a driver removed above"
        rm "$ko"
    done
done
cd - > /dev/null
# The module index again, without the drivers removed above (the initrd's drivers were
# copied from the root by the customize hook).
chroot "$root" depmod "$kernel"
