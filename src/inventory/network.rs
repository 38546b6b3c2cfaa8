//! The machine's network interfaces (`class/net`): those with a device behind them (a `device`
//! link: a PCI, USB, virtio or platform NIC, an SR-IOV function), not `lo` nor the interfaces
//! software makes (bridges, bonds, VLANs, tun, veth), whose MACs are made up at each boot and
//! which no controller's record of the server holds.

use std::path::Path;

use serde::Serialize;

use super::machine_string;
use crate::disks;

/// At most this many interfaces are read; more are counted, not read (a NIC may expose
/// thousands of SR-IOV functions).
pub const MAX_INTERFACES: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Interface {
    /// The kernel's name: `eno1`, `enp3s0f1`, `eth0`.
    pub name: String,
    /// `address`: the MAC, lower-case hex pairs joined by `:` (InfiniBand's are 20 bytes).
    pub mac: Option<String>,
    /// The driver bound to its device (`device/driver`): `ixgbe`, `mlx5_core`, `virtio_net`.
    pub driver: Option<String>,
    /// `operstate` as the kernel says it: `up`, `down`, `dormant`, `lowerlayerdown`,
    /// `notpresent`, `testing` or `unknown`. An interface nothing brought up is `down` whether
    /// or not a cable is in.
    pub link: Option<String>,
    /// Whether the port sees a link partner (`carrier`); null while the interface is down,
    /// when the kernel cannot tell.
    pub carrier: Option<bool>,
}

/// The interfaces under `sysfs`, by name; and how many more there were than
/// [`MAX_INTERFACES`].
pub fn read(sysfs: &Path) -> (Vec<Interface>, usize) {
    let class = sysfs.join("class/net");
    let mut names: Vec<String> = std::fs::read_dir(&class)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| class.join(name).join("device").exists())
        .collect();
    names.sort();
    let omitted = names.len().saturating_sub(MAX_INTERFACES);
    names.truncate(MAX_INTERFACES);
    let interfaces = names.into_iter().filter_map(|name| interface(&class.join(&name), name)).collect();
    (interfaces, omitted)
}

fn interface(dir: &Path, name: String) -> Option<Interface> {
    let attr = |file: &str| disks::attr(&dir.join(file));
    let driver = std::fs::read_link(dir.join("device/driver")).ok();
    Some(Interface {
        name: machine_string(name.as_bytes())?,
        mac: attr("address").as_deref().and_then(machine_string),
        driver: driver.as_deref().and_then(Path::file_name).and_then(|n| machine_string(n.as_encoded_bytes())),
        link: attr("operstate").as_deref().and_then(machine_string),
        carrier: match attr("carrier").as_deref() {
            Some(b"1") => Some(true),
            Some(b"0") => Some(false),
            _ => None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::tests::{put, sources};
    use std::os::unix::fs::symlink;

    #[test]
    fn interfaces_with_a_device_by_name() {
        let (dir, sources) = sources();
        let root = dir.path().join("sys");
        assert_eq!(read(&root), (vec![], 0));
        let nic = |name: &str, pci: &str, driver: &str, mac: &str, state: &str, carrier: Option<&str>| {
            let device = format!("sys/devices/pci0000:00/{pci}");
            put(dir.path(), &format!("{device}/vendor"), "0x8086\n");
            std::fs::create_dir_all(dir.path().join(format!("sys/bus/pci/drivers/{driver}"))).unwrap();
            symlink(format!("../../../bus/pci/drivers/{driver}"), dir.path().join(format!("{device}/driver"))).unwrap();
            let net = format!("{device}/net/{name}");
            put(dir.path(), &format!("{net}/address"), &format!("{mac}\n"));
            put(dir.path(), &format!("{net}/operstate"), &format!("{state}\n"));
            if let Some(carrier) = carrier {
                put(dir.path(), &format!("{net}/carrier"), &format!("{carrier}\n"));
            }
            symlink("../..", dir.path().join(format!("{net}/device"))).unwrap();
            std::fs::create_dir_all(root.join("class/net")).unwrap();
            symlink(format!("../../devices/pci0000:00/{pci}/net/{name}"), root.join(format!("class/net/{name}")))
                .unwrap();
        };
        nic("eno2", "0000:19:00.1", "ixgbe", "3c:ec:ef:00:11:23", "down", None);
        nic("eno1", "0000:19:00.0", "ixgbe", "3c:ec:ef:00:11:22", "up", Some("1"));
        // Software's interfaces: no device behind them.
        for (name, mac) in [("lo", "00:00:00:00:00:00"), ("br0", "9e:12:aa:00:00:01")] {
            put(dir.path(), &format!("sys/devices/virtual/net/{name}/address"), &format!("{mac}\n"));
            symlink(format!("../../devices/virtual/net/{name}"), root.join(format!("class/net/{name}"))).unwrap();
        }
        let (interfaces, omitted) = read(sources.sysfs.root());
        assert_eq!(omitted, 0);
        assert_eq!(
            interfaces,
            [
                Interface {
                    name: "eno1".into(),
                    mac: Some("3c:ec:ef:00:11:22".into()),
                    driver: Some("ixgbe".into()),
                    link: Some("up".into()),
                    carrier: Some(true),
                },
                Interface {
                    name: "eno2".into(),
                    mac: Some("3c:ec:ef:00:11:23".into()),
                    driver: Some("ixgbe".into()),
                    link: Some("down".into()),
                    carrier: None,
                },
            ]
        );
    }

    #[test]
    fn this_machine_lists_no_loopback() {
        let (interfaces, _) = read(Path::new(disks::SYSFS));
        assert!(interfaces.iter().all(|i| i.name != "lo"), "{interfaces:?}");
    }
}
