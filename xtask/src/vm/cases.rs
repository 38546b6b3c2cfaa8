//! VM test cases (`tests/vm-cases/<case>/`, format in its README.md) and the judgement of a
//! guest's report against a case's `expect.json`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use serde_json::Value;

use super::report::Report;
use crate::iso::Signing;

pub struct Case {
    pub name: String,
    pub recipe: PathBuf,
    /// The schema put on the ISO.
    pub schema: CaseSchema,
    pub expect: Expect,
    pub vm: VmOptions,
}

/// `expect.json`. Unknown keys are an error: a typo must never turn into a case that proves
/// nothing.
#[derive(Debug, PartialEq, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case", deny_unknown_fields)]
pub enum Expect {
    /// The dispatcher succeeded and `target` ran with this environment (`None`: the key must
    /// be absent).
    Dispatched {
        target: String,
        #[serde(default)]
        env: BTreeMap<String, Option<String>>,
        min_dispatcher_ms: Option<u64>,
        /// status.json's `signature.principal`: the media was signed by that trust file line.
        signed_by: Option<String>,
        /// status.json's `secure_boot` (see [`secure_boot`]).
        secure_boot: Option<bool>,
        /// status.json's `disk` (the resolved disk, SPEC §4a) has these values.
        disk: Option<ExpectDisk>,
        /// How the task ends (SPEC §6d), as the follower tells it: status.json's state and
        /// the last result line; `succeeded` when not given.
        #[serde(default)]
        end: TaskEnd,
        /// The units the end names, exactly (the failed ones, or those still running).
        end_units: Option<Vec<String>>,
        /// The guest reboots or powers itself off after the end: judged from the serial
        /// console and QEMU's exit ([`shut_down`]), without the guest's report.
        shuts_down: Option<ShutsDown>,
    },
    /// The dispatcher exited with `exit`, status.json names the kind of `failure` (when
    /// given) and has a detail with each of `codes`, and provision-failed.service named each
    /// path.
    Failed {
        exit: u64,
        failure: Option<String>,
        paths: Vec<String>,
        #[serde(default)]
        codes: Vec<String>,
        /// Words provision-failed.service's output (the journal) must hold.
        #[serde(default)]
        banner_says: Vec<String>,
        secure_boot: Option<bool>,
        disk: Option<ExpectDisk>,
    },
    /// The firmware or shim refused to start what the image's ESP holds: the console shows
    /// the refusal ([`REFUSALS`]) and the guest never reported.
    RefusedByFirmware {},
    /// The boot never reached the root: the initrd's `/init` gave up with `failure` (its own
    /// word) and `exit`, said so on the serial console in a result line of phase `boot`, and
    /// said it again (`result::judge_boot_failed`); the guest never reported. The console also
    /// shows each of `console_says` (the initrd's words).
    BootFailed {
        failure: String,
        exit: u64,
        #[serde(default)]
        console_says: Vec<String>,
    },
}

/// How a dispatched task ends, in status.json's and the line's words.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskEnd {
    #[default]
    Succeeded,
    TaskFailed,
    TimedOut,
}

impl TaskEnd {
    pub fn word(self) -> &'static str {
        match self {
            TaskEnd::Succeeded => "succeeded",
            TaskEnd::TaskFailed => "task_failed",
            TaskEnd::TimedOut => "timed_out",
        }
    }

    /// The OS Boot event of the BMC's SEL for this end, as `ipmitool sel elist` names it.
    pub fn sel_event(self) -> &'static str {
        match self {
            TaskEnd::Succeeded => "Installation completed",
            TaskEnd::TaskFailed => "Installation failed",
            TaskEnd::TimedOut => "Installation aborted",
        }
    }

    /// The subject of its journal catalog entry (`journalctl -x`).
    fn subject(self) -> &'static str {
        match self {
            TaskEnd::Succeeded => "Provisioning task ended: succeeded",
            TaskEnd::TaskFailed => "Provisioning task ended: task_failed",
            TaskEnd::TimedOut => "Provisioning task timed out: still running",
        }
    }
}

/// How a guest ends by itself after the task's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShutsDown {
    Reboot,
    Poweroff,
}

impl ShutsDown {
    /// What the kernel prints on the console as it goes (`kernel/reboot.c`, at KERN_EMERG:
    /// shown whatever the loglevel).
    pub fn kernel_line(self) -> &'static str {
        match self {
            ShutsDown::Reboot => "reboot: Restarting system",
            ShutsDown::Poweroff => "reboot: Power down",
        }
    }
}

/// What status.json's `disk` must hold: each key given, as the machine has it.
#[derive(Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectDisk {
    pub name: Option<String>,
    pub serial: Option<String>,
    pub wwn: Option<String>,
}

impl ExpectDisk {
    fn problems(&self, status: Option<&Value>) -> Vec<String> {
        let disk = status.map(|s| &s["disk"]).cloned().unwrap_or_default();
        let wanted = [("name", &self.name), ("serial", &self.serial), ("wwn", &self.wwn)];
        let wrong = wanted.into_iter().filter_map(|(key, want)| Some((key, want.as_deref()?)));
        wrong
            .filter(|(key, want)| disk[*key].as_str() != Some(*want))
            .map(|(key, want)| format!("status.json's disk.{key} is {}, expected {want:?}", disk[key]))
            .collect()
    }
}

impl Expect {
    /// A dispatch of `target` ending `end`, nothing else stated: the tests' case.
    #[cfg(test)]
    pub fn dispatched(target: &str, end: TaskEnd) -> Expect {
        Expect::Dispatched {
            target: target.into(),
            env: BTreeMap::new(),
            min_dispatcher_ms: None,
            signed_by: None,
            secure_boot: None,
            disk: None,
            end,
            end_units: None,
            shuts_down: None,
        }
    }

    /// A failure with `exit` naming `paths`, nothing else stated: the tests' case.
    #[cfg(test)]
    pub fn failed(exit: u64, paths: &[&str]) -> Expect {
        Expect::Failed {
            exit,
            failure: None,
            paths: paths.iter().map(|path| path.to_string()).collect(),
            codes: vec![],
            banner_says: vec![],
            secure_boot: None,
            disk: None,
        }
    }

    /// How the task ends, for a dispatch.
    pub fn end(&self) -> Option<TaskEnd> {
        match self {
            Expect::Dispatched { end, .. } => Some(*end),
            _ => None,
        }
    }

    /// How the guest ends by itself, when the case says it does.
    pub fn shuts_down(&self) -> Option<ShutsDown> {
        match self {
            Expect::Dispatched { shuts_down, .. } => *shuts_down,
            _ => None,
        }
    }

    /// What status.json must say of Secure Boot, when the case says.
    pub fn secure_boot(&self) -> Option<bool> {
        match self {
            Expect::Dispatched { secure_boot, .. } | Expect::Failed { secure_boot, .. } => *secure_boot,
            Expect::RefusedByFirmware {} | Expect::BootFailed { .. } => None,
        }
    }
}

/// What vm.json's `"ipmi"` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ipmi {
    /// `true`: OpenIPMI's simulator.
    Simulator,
    /// `"silent"`: a BMC that never answers.
    Silent,
}

impl Ipmi {
    /// `true`, `false` or `"silent"`.
    pub fn from_json(value: &Value) -> Result<Option<Ipmi>> {
        match value {
            Value::Bool(true) => Ok(Some(Ipmi::Simulator)),
            Value::Bool(false) | Value::Null => Ok(None),
            Value::String(word) if word == "silent" => Ok(Some(Ipmi::Silent)),
            other => bail!("ipmi {other}: true, false or \"silent\""),
        }
    }
}

/// `vm.json`: every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct VmFile {
    mode: Option<Mode>,
    firmware: Option<Firmware>,
    boot_media: Option<BootMedia>,
    arch: Option<String>,
    attach_media_after_secs: Option<u64>,
    detach_media_after_secs: Option<u64>,
    media_read_bytes_per_sec: Option<u64>,
    boot_read_bytes_per_sec: Option<u64>,
    recipe_padding_bytes: Option<usize>,
    recipe_file: Option<RecipeFile>,
    task_media_damage: Option<Damage>,
    #[serde(default)]
    extra_media: Vec<ExtraMedia>,
    kernel_args: Option<String>,
    fault_while_held: Option<Fault>,
    deadline_secs: Option<u64>,
    /// `true`, `false` or `"silent"` ([`Ipmi::from_json`]).
    #[serde(default)]
    ipmi: Value,
    sign_with: Option<PathBuf>,
    sign_bound_to: Option<String>,
    #[serde(default)]
    recipe_changed_after_signing: bool,
    machine_uuid: Option<String>,
    image_layer: Option<PathBuf>,
    secure_boot: Option<bool>,
    unsigned_grub: Option<bool>,
    /// A compiled-in schema version put on the ISO instead of the canonical one.
    schema: Option<SchemaVersion>,
    /// The server's local disks, in order, instead of two blank virtio disks.
    disks: Option<Vec<DiskSpec>>,
    /// How the task arrives: a `TASK` CD beside the image, or embedded in the image.
    task: Option<TaskArrival>,
    /// The image booted by its menu's `toram` entry: its images copied into RAM, the medium
    /// let go.
    toram: Option<bool>,
}

/// How a case's task reaches the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskArrival {
    /// A task ISO (volume id `TASK`) on a USB CD of its own, a BMC's second virtual drive.
    #[default]
    Cd,
    /// The task ISO written into the image's task area by `media embed`: one ISO, one drive.
    Embedded,
}

/// One local disk of the guest (vm.json `disks`): a blank image on a bus, with the identity
/// QEMU gives it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiskSpec {
    pub bus: DiskBus,
    /// `1G`, `512M`: K, M, G as powers of 1024.
    #[serde(default = "DiskSpec::default_size")]
    pub size: String,
    pub serial: Option<String>,
    /// A SCSI disk's WWN (`0x` and 16 hex digits).
    pub wwn: Option<String>,
}

/// The buses a case's disk may be on: `virtio` (virtio-blk), `scsi` (scsi-hd on virtio-scsi),
/// `nvme`, `usb` (usb-storage on the xHCI bus).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiskBus {
    Virtio,
    Scsi,
    Nvme,
    Usb,
}

impl DiskSpec {
    fn default_size() -> String {
        "1G".into()
    }

    /// The two blank virtio disks of a case that does not say (/dev/vda, /dev/vdb).
    fn blank_pair() -> Vec<DiskSpec> {
        let blank = DiskSpec { bus: DiskBus::Virtio, size: DiskSpec::default_size(), serial: None, wwn: None };
        vec![blank.clone(), blank]
    }

    /// The size in bytes.
    pub fn bytes(&self) -> Result<u64> {
        let (digits, shift) = match self.size.as_bytes().last() {
            Some(b'K') => (&self.size[..self.size.len() - 1], 10),
            Some(b'M') => (&self.size[..self.size.len() - 1], 20),
            Some(b'G') => (&self.size[..self.size.len() - 1], 30),
            _ => (self.size.as_str(), 0),
        };
        let n: u64 = digits.parse().with_context(|| format!("disk size {:?}: digits and K, M or G", self.size))?;
        Ok(n << shift)
    }

    fn check(&self) -> Result<()> {
        self.bytes()?;
        if self.wwn.is_some() && self.bus != DiskBus::Scsi {
            bail!("a disk's wwn is for scsi disks (QEMU's scsi-hd takes one)");
        }
        if let Some(wwn) = &self.wwn {
            let hex = wwn.strip_prefix("0x").unwrap_or_default();
            if hex.len() != 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                bail!("wwn {wwn:?}: 0x and 16 hex digits");
            }
        }
        let bad = |c: char| !(c.is_ascii_alphanumeric() || "-_.".contains(c));
        if self.serial.as_deref().is_some_and(|s| s.is_empty() || s.contains(bad)) {
            bail!("a disk's serial: letters, digits, -, _ and . (it goes on QEMU's command line)");
        }
        Ok(())
    }
}

/// The schema versions of the repository a case may put on its task ISO.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum SchemaVersion {
    V1,
    V2,
}

/// The schema a case's task ISO carries: a version compiled into the dispatcher (the
/// canonical one unless vm.json's `schema` names another), or the case's own file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaseSchema {
    Version(u32),
    Own(PathBuf),
}

impl CaseSchema {
    /// The schema's file in the repository (a compiled-in version's text is its file's).
    pub fn file(&self) -> PathBuf {
        match self {
            CaseSchema::Version(1) => crate::root().join("iso/recipe.schema.json"),
            CaseSchema::Version(_) => crate::root().join("iso/recipe.schema.v2.json"),
            CaseSchema::Own(file) => file.clone(),
        }
    }
}

/// The VM test mode a case was written for, when only one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The maintenance-OS image, booted (the only mode run now).
    Image,
    /// The retired direct-kernel mode (a bare kernel and a hand-made root on /dev/vda).
    Direct,
}

/// The firmware the guest boots with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Firmware {
    #[default]
    Uefi,
    Bios,
}

/// How the maintenance-OS ISO is attached: a virtual CD (a BMC's virtual media), or written
/// to a USB disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BootMedia {
    #[default]
    Cd,
    UsbDisk,
}

/// What `/recipe.json` on the task ISO is, when it is not the case's file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecipeFile {
    /// A symbolic link (to `/etc/hostname`, outside the ISO).
    Symlink,
    /// A directory.
    Directory,
    /// The case's recipe followed by spaces, one byte over the 8 MiB cap.
    Oversize,
}

/// How the task ISO is damaged after it is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Damage {
    /// Cut just after its volume descriptors: the label reads, nothing else does.
    Truncate,
    /// The root directory's extent overwritten with garbage: the label reads, the mount or
    /// the lookup fails.
    CorruptDirectory,
}

/// A fault done in the guest while the dispatcher is held as it publishes its outputs:
/// validated, nothing started (tests/vm-guest's `hold` and `fault`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// `/dev/vdb`, the target disk of the cases, removed: its PCI function is taken away
    /// through sysfs, the kernel's own hot-removal path.
    RemoveTargetDisk,
    /// `systemctl restart dbus.service`: the dispatcher's bus connection breaks, and systemd
    /// leaves the bus and comes back on the new one.
    RestartDbus,
}

impl Fault {
    /// The word the guest's `fault` script takes (and fw_cfg carries).
    pub fn word(self) -> &'static str {
        match self {
            Fault::RemoveTargetDisk => "remove-target-disk",
            Fault::RestartDbus => "restart-dbus",
        }
    }
}

/// Another ISO attached beside the task ISO, made by the harness with this volume id.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtraMedia {
    pub volume_id: String,
}

#[derive(Debug, PartialEq)]
pub struct VmOptions {
    pub mode: Option<Mode>,
    pub firmware: Firmware,
    pub boot_media: BootMedia,
    /// Only on this architecture (BIOS, for one, is amd64's).
    pub arch: Option<String>,
    /// Plug the task CD in this long after the dispatcher starts, instead of at power-on.
    pub attach_media_after: Option<Duration>,
    /// Pull the task CD out this long after the dispatcher starts.
    pub detach_media_after: Option<Duration>,
    /// Throttle reads from the task CD, so that a pull can land while the dispatcher reads.
    pub media_read_bytes_per_sec: Option<u64>,
    /// Throttle reads from the boot medium (the image): a slow BMC virtual-media link.
    pub boot_read_bytes_per_sec: Option<u64>,
    /// Grow the recipe with a string of this many bytes in `metadata` (a longer read).
    pub recipe_padding_bytes: Option<usize>,
    pub recipe_file: Option<RecipeFile>,
    pub task_media_damage: Option<Damage>,
    pub extra_media: Vec<ExtraMedia>,
    /// Boot the image's kernel directly with these arguments added (the image ISO is still
    /// the live medium); `@RECIPE_SHA256@` stands for the SHA-256 of the task ISO's recipe.
    pub kernel_args: Option<String>,
    /// Hold the dispatcher as it publishes its outputs and do this fault meanwhile.
    pub fault_while_held: Option<Fault>,
    /// Kill the guest if it has not reported by then.
    pub deadline: Duration,
    /// A BMC outside the guest, on its IPMI system interface.
    pub ipmi: Option<Ipmi>,
    /// Sign the task ISO's files as a controller does (the key relative to the repository).
    pub signing: Option<Signing>,
    /// After signing, the recipe gets one more newline: still valid, no longer what was signed.
    pub recipe_changed_after_signing: bool,
    /// The guest's SMBIOS system UUID (QEMU `-uuid`).
    pub machine_uuid: Option<String>,
    /// A layer of the case's own in the image, under the test layer (a trust file, say).
    pub image_layer: Option<PathBuf>,
    /// UEFI with Secure Boot enforced and Microsoft's keys enrolled.
    pub secure_boot: bool,
    /// The image's GRUB on the ESP replaced by the same GRUB with its signature taken off.
    pub unsigned_grub: bool,
    /// The server's local disks.
    pub disks: Vec<DiskSpec>,
    pub task: TaskArrival,
    /// The image booted by its menu's `toram` entry.
    pub toram: bool,
}

impl VmFile {
    fn options(self) -> Result<VmOptions> {
        if self.boot_media == Some(BootMedia::UsbDisk) && self.kernel_args.is_some() {
            bail!("kernel_args boot the image's kernel directly, with the image as a CD: not with boot_media usb-disk");
        }
        if let Some(arch) = self.arch.as_deref().filter(|a| !["amd64", "arm64"].contains(a)) {
            bail!("arch '{arch}': amd64 or arm64");
        }
        let uefi = self.firmware.unwrap_or_default() == Firmware::Uefi;
        let boots_image = self.kernel_args.is_none();
        if self.secure_boot == Some(true) && !(uefi && boots_image) {
            bail!(
                "secure_boot needs UEFI booting the image: SeaBIOS has none, and a kernel given directly \
                 (kernel_args) is not signed by a key the firmware holds"
            );
        }
        if self.unsigned_grub == Some(true) && !(uefi && boots_image) {
            bail!("unsigned_grub swaps the GRUB that UEFI boots from the image: not with bios or kernel_args");
        }
        if self.fault_while_held.is_some() && self.attach_media_after_secs.is_none_or(|secs| secs < 5) {
            bail!(
                "fault_while_held needs attach_media_after_secs of 5 or more: the hold attaches to the dispatcher \
                 while it waits for the media"
            );
        }
        if self.boot_read_bytes_per_sec == Some(0) || self.media_read_bytes_per_sec == Some(0) {
            bail!("a link of 0 bytes a second reads nothing (QEMU would take 0 as no limit)");
        }
        let embedded = self.task == Some(TaskArrival::Embedded);
        let cd_only = [
            ("attach_media_after_secs", self.attach_media_after_secs.is_some()),
            ("detach_media_after_secs", self.detach_media_after_secs.is_some()),
            ("media_read_bytes_per_sec", self.media_read_bytes_per_sec.is_some()),
            ("task_media_damage", self.task_media_damage.is_some()),
            ("recipe_file", self.recipe_file.is_some()),
            ("recipe_changed_after_signing", self.recipe_changed_after_signing),
            ("unsigned_grub", self.unsigned_grub == Some(true)),
        ];
        if let Some((key, _)) = cd_only.iter().find(|(_, given)| embedded && *given) {
            bail!("{key} is about a task CD (or media `media embed` would refuse to make): not with task embedded");
        }
        if self.toram == Some(true) && !boots_image {
            bail!("toram is the image's menu entry: not with kernel_args, which boot its kernel directly");
        }
        if self.sign_with.is_none() && (self.sign_bound_to.is_some() || self.recipe_changed_after_signing) {
            bail!("sign_bound_to and recipe_changed_after_signing need sign_with");
        }
        for disk in self.disks.iter().flatten() {
            disk.check()?;
        }
        let signing = self.sign_with.map(|key| Signing {
            key: crate::root().join(key),
            bind: self.sign_bound_to.map(|uuid| uuid.to_ascii_lowercase()),
        });
        Ok(VmOptions {
            mode: self.mode,
            firmware: self.firmware.unwrap_or_default(),
            boot_media: self.boot_media.unwrap_or_default(),
            arch: self.arch,
            attach_media_after: self.attach_media_after_secs.map(Duration::from_secs),
            detach_media_after: self.detach_media_after_secs.map(Duration::from_secs),
            media_read_bytes_per_sec: self.media_read_bytes_per_sec,
            boot_read_bytes_per_sec: self.boot_read_bytes_per_sec,
            recipe_padding_bytes: self.recipe_padding_bytes,
            recipe_file: self.recipe_file,
            task_media_damage: self.task_media_damage,
            extra_media: self.extra_media,
            kernel_args: self.kernel_args,
            fault_while_held: self.fault_while_held,
            deadline: Duration::from_secs(self.deadline_secs.unwrap_or(DEFAULT_DEADLINE_SECS)),
            ipmi: Ipmi::from_json(&self.ipmi)?,
            signing,
            recipe_changed_after_signing: self.recipe_changed_after_signing,
            machine_uuid: self.machine_uuid,
            image_layer: self.image_layer.map(|layer| crate::root().join(layer)),
            secure_boot: self.secure_boot.unwrap_or(uefi && boots_image && SECURE_BOOT_BY_DEFAULT),
            unsigned_grub: self.unsigned_grub.unwrap_or(false),
            disks: self.disks.unwrap_or_else(DiskSpec::blank_pair),
            task: self.task.unwrap_or_default(),
            toram: self.toram.unwrap_or(false),
        })
    }
}

/// Whether a UEFI case that does not say boots with Secure Boot enforced.
const SECURE_BOOT_BY_DEFAULT: bool = true;

/// Enough for a boot of the image under TCG on a loaded machine (about a minute idle) plus
/// the dispatcher's full 120 s wait for media; the reporter gives up waiting at 200 s.
const DEFAULT_DEADLINE_SECS: u64 = 330;

/// Every case folder under `dir`, by name (or `dir` itself if it is a case). A folder that is
/// not a valid case is an error, not a skip.
pub fn load_all(dir: &Path) -> Result<Vec<Case>> {
    if dir.join("recipe.json").is_file() {
        return Ok(vec![load(dir).with_context(|| format!("case {}", dir.display()))?]);
    }
    let mut cases = vec![];
    for entry in std::fs::read_dir(dir).with_context(|| format!("read cases from {}", dir.display()))? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            cases.push(load(&entry.path()).with_context(|| format!("case {}", entry.path().display()))?);
        }
    }
    cases.sort_by(|a, b| a.name.cmp(&b.name));
    if cases.is_empty() {
        bail!("no cases in {}", dir.display());
    }
    Ok(cases)
}

pub fn load(dir: &Path) -> Result<Case> {
    let recipe = dir.join("recipe.json");
    if !recipe.is_file() {
        bail!("no recipe.json");
    }
    let own_schema = Some(dir.join("recipe.schema.json")).filter(|p| p.is_file());
    let expect = read_json(&dir.join("expect.json"))?;
    let vm_file = dir.join("vm.json");
    let vm: VmFile = if vm_file.is_file() { read_json(&vm_file)? } else { VmFile::default() };
    let schema = match (own_schema, vm.schema) {
        (Some(_), Some(_)) => bail!("a recipe.schema.json and vm.json's \"schema\": one schema for the ISO"),
        (Some(own), None) => CaseSchema::Own(own),
        (None, Some(SchemaVersion::V2)) => CaseSchema::Version(2),
        (None, Some(SchemaVersion::V1) | None) => CaseSchema::Version(1),
    };
    let name = dir.file_name().context("a case folder has a name")?.to_string_lossy().into_owned();
    Ok(Case { name, recipe, schema, expect, vm: vm.options().context("vm.json")? })
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not a valid {}", path.display(), file_name(path)))
}

fn file_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// What is wrong with the guest's report and serial console, judged against `expect`: empty
/// means pass. Every check is on an explicit fact (unit properties, files, recorded bytes,
/// console lines), never on whether the system ended up "running" or "degraded".
pub fn judge(expect: &Expect, report: &Report, console: &str) -> Vec<String> {
    let mut problems = vec![];
    let dispatcher = report.dispatcher();
    let failed_unit = report.failed_unit();
    let status = report.status();
    let state = status.as_ref().and_then(|s| s["state"].as_str().map(String::from));
    let recorded = report.recorded_targets();
    let describe = || {
        format!(
            "dispatcher {}/{} exit {}",
            dispatcher.get("ActiveState"),
            dispatcher.get("Result"),
            dispatcher.get("ExecMainStatus")
        )
    };
    match expect {
        Expect::Dispatched { target, env, min_dispatcher_ms, signed_by, disk, end, end_units, .. } => {
            problems.extend(disk.iter().flat_map(|disk| disk.problems(status.as_ref())));
            problems.extend(end_problems(*end, end_units.as_deref(), report));
            if (dispatcher.get("ActiveState"), dispatcher.get("Result"), dispatcher.get("ExecMainStatus"))
                != ("active", "success", "0")
            {
                problems.push(format!("{}, expected active/success exit 0", describe()));
            }
            if failed_unit.ran() {
                problems.push("provision-failed.service ran".into());
            }
            if state.as_deref() != Some(end.word()) {
                problems.push(format!("status.json state {state:?}, expected {:?}", end.word()));
            }
            // A target whose unit failed, or that still runs past its deadline, is not active.
            if *end == TaskEnd::Succeeded && !report.active_targets().contains(target) {
                problems.push(format!("{target} is not active"));
            }
            if let Some(other) = recorded.iter().find(|t| *t != target) {
                problems.push(format!("{other} ran too"));
            }
            match report.recorded_env(target) {
                None => problems.push(format!("{target}'s service recorded no environment")),
                Some(seen) => {
                    problems.extend(recipe_file_problem(&seen, report, target, status.as_ref()));
                    for (key, want) in env {
                        let got = seen.iter().rev().find(|(k, _)| *k == key.as_bytes()).map(|(_, v)| *v);
                        match (want, got) {
                            (Some(want), Some(got)) if want.as_bytes() == got => {}
                            (None, None) => {}
                            (Some(want), Some(got)) => problems
                                .push(format!("{key} was {:?}, expected {want:?}", String::from_utf8_lossy(got))),
                            (Some(_), None) => problems.push(format!("{key} was not set")),
                            (None, Some(got)) => {
                                problems.push(format!("{key} was {:?}, expected absent", String::from_utf8_lossy(got)))
                            }
                        }
                    }
                }
            }
            if !report.text("dispatcher.journal-x").contains("Provisioning task dispatched") {
                problems.push("journalctl -x does not explain the dispatch (the message catalog)".into());
            }
            if let Some(principal) = signed_by {
                let signature = status.as_ref().map(|s| s["signature"].clone()).unwrap_or_default();
                let fingerprint = signature["fingerprint"].as_str().unwrap_or_default();
                if signature["principal"].as_str() != Some(principal.as_str()) || !fingerprint.starts_with("SHA256:") {
                    problems.push(format!("status.json signature {signature}, expected one by {principal}"));
                }
            }
            if let (Some(min), Some(ran)) = (min_dispatcher_ms, dispatcher.run_time_ms()) {
                if ran < *min as f64 {
                    problems.push(format!("the dispatcher ran {ran:.0} ms, expected at least {min} ms (did it wait?)"));
                }
            }
        }
        Expect::Failed { exit, failure, paths, codes, banner_says, disk, .. } => {
            problems.extend(disk.iter().flat_map(|disk| disk.problems(status.as_ref())));
            if dispatcher.get("Result") == "success" || dispatcher.get("ExecMainStatus") != exit.to_string() {
                problems.push(format!("{}, expected exit {exit}", describe()));
            }
            if !failed_unit.ran() {
                problems.push("provision-failed.service did not run".into());
            } else if failed_unit.get("Result") != "success" {
                problems.push(format!(
                    "provision-failed.service {} exit {}",
                    failed_unit.get("Result"),
                    failed_unit.get("ExecMainStatus")
                ));
            }
            let banner = report.text("failed.journal");
            let tty1 = report.text("tty1.screen");
            if !tty1.contains("PROVISIONING FAILED") {
                problems.push("the video console (tty1) does not show the failure banner".into());
            }
            let serial = console_banner(console).unwrap_or_default();
            if serial.is_empty() {
                problems.push("the serial console does not show the failure banner".into());
            }
            if !report.text("dispatcher.journal-x").contains("Provisioning failed: nothing was started") {
                problems.push("journalctl -x does not explain the failure (the message catalog)".into());
            }
            let run = report.text("run-listing");
            if run.lines().any(|l| l.starts_with(".provision.staging-")) {
                problems.push("a staging directory is left in /run".into());
            }
            if run.split("/run/provision-dispatcher:").nth(1).is_some_and(|l| l.lines().any(|l| l == "media")) {
                problems.push("the media's mount point is left in /run/provision-dispatcher".into());
            }
            for words in banner_says {
                if !banner.contains(words.as_str()) {
                    problems.push(format!("provision-failed.service's output does not say {words:?}"));
                }
            }
            for path in paths {
                if !names_pointer(&banner, path) {
                    problems.push(format!("provision-failed.service's output does not name {path}"));
                    continue;
                }
                if !names_pointer(&serial, path) {
                    problems.push(format!("the serial console's banner does not show {path}"));
                }
                if !names_pointer(&tty1, path) {
                    problems.push(format!("the video console (tty1) does not show {path}"));
                }
            }
            match &status {
                None => problems.push("no status.json".into()),
                Some(status) => {
                    if state.as_deref() != Some("failed") {
                        problems.push(format!("status.json state {state:?}, expected \"failed\""));
                    }
                    if status["exit_code"].as_u64() != Some(*exit) {
                        problems.push(format!("status.json exit_code {}, expected {exit}", status["exit_code"]));
                    }
                    if let Some(failure) = failure.as_deref().filter(|f| status["failure"] != *f) {
                        problems.push(format!("status.json failure {}, expected {failure:?}", status["failure"]));
                    }
                    let details = status["details"].as_array().map(Vec::as_slice).unwrap_or_default();
                    for code in codes.iter().filter(|code| !details.iter().any(|d| d["code"] == code.as_str())) {
                        let found: Vec<&str> = details.iter().filter_map(|d| d["code"].as_str()).collect();
                        problems.push(format!("status.json has no detail with code {code} (it has {found:?})"));
                    }
                }
            }
            if let Some(target) = recorded.first() {
                problems.push(format!("{target} ran"));
            }
        }
        Expect::RefusedByFirmware {} => problems.push("the guest booted and reported, expected a refusal".into()),
        Expect::BootFailed { .. } => {
            problems.push("the guest reached its root and reported, expected the initrd to stop".into())
        }
    }
    problems
}

/// The task's end as the guest reported it (SPEC §6d): status.json's `end` names `units` when
/// the case gives them, the follower's unit is ready (active) only after a real end and still
/// activating past the deadline, and `journalctl -x` explains the end (the message catalog).
fn end_problems(end: TaskEnd, units: Option<&[String]>, report: &Report) -> Vec<String> {
    let mut problems = vec![];
    let told = report.status().map(|s| s["end"].clone()).unwrap_or_default();
    if !told.is_object() {
        problems.push("status.json has no end".into());
    }
    if let Some(units) = units {
        if told["units"] != serde_json::json!(units) {
            problems.push(format!("status.json's end names {}, expected {units:?}", told["units"]));
        }
    }
    let follower = report.unit("task-end.show");
    let want = if end == TaskEnd::TimedOut { "activating" } else { "active" };
    if follower.get("ActiveState") != want {
        problems.push(format!(
            "provision-task-end.service is {:?}, expected {want:?} (ready only once the end is told)",
            follower.get("ActiveState")
        ));
    }
    if !report.text("task-end.journal-x").contains(end.subject()) {
        problems.push(format!("journalctl -x does not explain the end ({:?}: the message catalog)", end.subject()));
    }
    problems
}

/// What the firmware (OVMF, AAVMF), shim or GRUB prints on the serial console when Secure
/// Boot refuses something: shim's check of GRUB, the firmware's check of what it loads (shim
/// itself, or a kernel given directly: `BdsDxe: failed to load Boot0001 ...: Access Denied`),
/// GRUB's check of the kernel, GRUB refusing to read a module from disk.
pub const REFUSALS: &[&str] = &[
    "Verification failed: (0x1A) Security Violation",
    ": Access Denied",
    "bad shim signature",
    "prohibited by secure boot policy",
];

/// The refusal the console shows, if it shows one (shim draws it in a dialog with cursor
/// moves and box lines, so the words, not the line).
pub fn refusal(console: &str) -> Option<String> {
    REFUSALS.iter().find(|r| console.contains(*r)).map(|r| r.trim_start_matches(": ").to_owned())
}

/// A `refused_by_firmware` case passes when the console showed the refusal and the guest never
/// got as far as reporting.
pub fn refused(refusal: Option<&str>, reported: bool) -> Vec<String> {
    let mut problems = vec![];
    if refusal.is_none() {
        problems.push(format!("the console shows no refusal by the firmware or shim (looked for {REFUSALS:?})"));
    }
    if reported {
        problems.push("the guest booted and reported".into());
    }
    problems
}

/// Where status.json says the task came from, against how the case gave it (SPEC §6c): a task
/// embedded in the image is `embedded`, a task CD its device; `null` only before any task was
/// taken (a refusal while looking for it).
pub fn task_media(task: TaskArrival, expect: &Expect, report: &Report) -> Vec<String> {
    let Some(status) = report.status() else { return vec![] };
    let media = &status["media"];
    let dispatched = matches!(expect, Expect::Dispatched { .. });
    let fits = match (task, media.as_str()) {
        (_, None) => !dispatched && media.is_null(),
        (TaskArrival::Embedded, Some(media)) => media == "embedded",
        (TaskArrival::Cd, Some(media)) => media.starts_with("/dev/"),
    };
    match fits {
        true => vec![],
        false => vec![format!("status.json's media is {media}, for a task {task:?}")],
    }
}

/// Secure Boot as the guest saw it, judged twice: the guest's own reading (the `SecureBoot`
/// EFI variable and the kernel's lockdown, from the reporter's `firmware` file) against how
/// the harness started it, and status.json's `secure_boot` against `expected` when the case
/// states it (until the dispatcher records the field, a case that does not state it is not
/// held to it).
pub fn secure_boot(firmware: Firmware, enforced: bool, expected: Option<bool>, report: &Report) -> Vec<String> {
    let mut problems = secure_boot_seen(firmware, enforced, report);
    problems.extend(secure_boot_stated(expected, report));
    problems
}

/// Secure Boot as the guest's firmware and kernel saw it, against how the harness started it:
/// a fact of the boot, judged once (in its first round).
fn secure_boot_seen(firmware: Firmware, enforced: bool, report: &Report) -> Vec<String> {
    let mut problems = vec![];
    let seen = report.text("firmware");
    let field = |key: &str| seen.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix('=')).unwrap_or("");
    let (variable, lockdown) = (field("secure_boot"), field("lockdown"));
    let want = match (firmware, enforced) {
        (Firmware::Bios, _) => "none",
        (Firmware::Uefi, true) => "1",
        (Firmware::Uefi, false) => "0",
    };
    if variable != want {
        problems.push(format!("the guest read SecureBoot {variable:?}, expected {want:?}"));
    }
    // Debian's kernel locks itself down when Secure Boot is on, and only then.
    let locked = lockdown.contains("[integrity]") || lockdown.contains("[confidentiality]");
    if locked != enforced || lockdown.is_empty() {
        problems.push(format!("the guest's kernel lockdown is {lockdown:?} with Secure Boot enforced: {enforced}"));
    }
    problems
}

/// status.json's `secure_boot` against `expected`, when the case states it: a fact of the run.
pub fn secure_boot_stated(expected: Option<bool>, report: &Report) -> Vec<String> {
    let mut problems = vec![];
    if let Some(expected) = expected {
        match report.status() {
            None => problems.push("no status.json to say whether Secure Boot was on".into()),
            Some(status) => match status.get("secure_boot") {
                None => problems.push("status.json has no secure_boot".into()),
                Some(got) if *got != expected => {
                    problems.push(format!("status.json secure_boot {got}, expected {expected}"))
                }
                Some(_) => {}
            },
        }
    }
    problems
}

/// A `fault_while_held` case proves its fault only if the fault was done while the dispatcher
/// was held: the hold's own lines (`hold.log`) say so, or the case proves nothing.
pub fn held(fault: Fault, report: &Report) -> Vec<String> {
    let log = report.text("hold.log");
    let held = log.contains("vm-test: the dispatcher is held as it publishes its outputs");
    let done = log.contains("vm-test: released the dispatcher after the fault");
    if !(held && done) {
        return vec![format!(
            "the fault {} was not done while the dispatcher was held: {:?}",
            fault.word(),
            log.trim()
        )];
    }
    // The bus restarted under an open connection: the dispatcher must have noticed and said so.
    let journal = report.text("dispatcher.journal");
    if fault == Fault::RestartDbus && !journal.contains("the connection to the system bus broke") {
        return vec!["the dispatcher's journal does not say that it connected to the bus again".into()];
    }
    vec![]
}

/// The units that ran are the package's, enabled by its preset, with nothing added: the test
/// layer must not be what made the dispatcher run (`systemctl show` in the guest).
///
/// A drop-in for `provision-task-end.service` in a case's image layer is the image builder's
/// configuration of the deadline, and allowed there (`follower_dropins`).
pub fn packaged(report: &Report, follower_dropins: bool) -> Vec<String> {
    let mut problems = vec![];
    for (unit, show) in [
        ("provision-dispatcher.service", report.dispatcher()),
        ("provision-failed.service", report.failed_unit()),
        ("provision-task-end.service", report.unit("task-end.show")),
    ] {
        // Debian 12's systemd names /usr/lib by its /lib alias (merged /usr: the same file).
        let packaged = format!("/usr/lib/systemd/system/{unit}");
        let fragment = show.get("FragmentPath");
        if fragment != packaged && fragment != &packaged["/usr".len()..] {
            problems.push(format!("{unit} was loaded from {fragment:?}, not the package's {packaged}"));
        }
        let allowed = follower_dropins && unit == "provision-task-end.service";
        if !show.get("DropInPaths").is_empty() && !allowed {
            problems.push(format!("{unit} has drop-ins: {}", show.get("DropInPaths")));
        }
    }
    let dispatcher = report.dispatcher();
    if (dispatcher.get("UnitFileState"), dispatcher.get("UnitFilePreset")) != ("enabled", "enabled") {
        problems.push(format!(
            "provision-dispatcher.service is {} with preset {}, expected enabled by its preset",
            dispatcher.get("UnitFileState"),
            dispatcher.get("UnitFilePreset")
        ));
    }
    problems
}

/// SPEC §3: no recipe content reaches the journal, the console or status.json. Each string
/// value of the recipe must be absent from the dispatcher's journal, provision-failed.service's
/// output and status.json; except `task_target`, which status.json records and messages quote
/// from the schema, and `$schema`, an editor hint. Values under 8 bytes are not looked for:
/// sizes, type codes and labels such as "EFI" or "Windows" occur in ordinary messages.
pub fn leaks(recipe: &[u8], report: &Report) -> Vec<String> {
    const MIN_BYTES: usize = 8;
    let Ok(Value::Object(recipe)) = serde_json::from_slice::<Value>(recipe) else { return vec![] };
    let mut values = vec![];
    for (key, value) in recipe.iter().filter(|(k, _)| !matches!(k.as_str(), "task_target" | "$schema")) {
        collect_strings(&format!("/{key}"), value, &mut values);
    }
    let outputs = ["dispatcher.journal", "failed.journal", "task-end.journal", "status.json"];
    let machine = machine_values(report);
    let mut problems = vec![];
    let looked_for = |value: &String| value.len() >= MIN_BYTES && !machine.contains(value);
    for (path, value) in values.iter().filter(|(_, v)| looked_for(v)) {
        for output in outputs {
            let text = report.file(output).unwrap_or_default();
            if text.windows(value.len()).any(|w| w == value.as_bytes()) {
                problems.push(format!("{output} holds the recipe's value of {path}"));
            }
        }
    }
    problems
}

/// The disks' identity as the machine gives it (status.json's `disk` and `disks`, and the
/// inventory's disks, which are `disks --format json`'s: node, names, WWN, serial, model): the
/// dispatcher may write those, even where a recipe's value (a hint, `target_disk`) holds the
/// same string.
fn machine_values(report: &Report) -> Vec<String> {
    let json = |name: &str| report.file(name).and_then(|b| serde_json::from_slice::<Value>(b).ok());
    let (status, listed) = (json("status.json").unwrap_or_default(), json("disks.json").unwrap_or_default());
    let disks = std::iter::once(&status["disk"])
        .chain(status["disks"].as_array().into_iter().flatten())
        .chain(listed["disks"].as_array().into_iter().flatten());
    let mut values = vec![];
    for disk in disks {
        for key in ["name", "node", "wwn", "serial", "model", "vendor"] {
            values.extend(disk[key].as_str().map(str::to_owned));
        }
        for key in ["by_id", "by_path"] {
            values.extend(disk[key].as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_owned));
        }
    }
    values
}

fn collect_strings(path: &str, value: &Value, out: &mut Vec<(String, String)>) {
    match value {
        Value::String(s) => out.push((path.to_owned(), s.clone())),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                collect_strings(&format!("{path}/{i}"), item, out);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                collect_strings(&format!("{path}/{key}"), item, out);
            }
        }
        _ => {}
    }
}

/// Whether `text` names the JSON pointer `path` as a whole: `/target_disk` is not named by
/// `/target_disk_id` or `/x/target_disk`, nor `/partition_layout` by `/partition_layout/0`.
/// The last failure banner on the serial console, as an operator reads it there: from the
/// The dispatcher's disks (`disks --format json` in the guest) against udev's own view of
/// them (its links under /dev/disk): the names it derives from the kernel must be exactly the
/// links udev made for each whole disk, no more and no fewer (SPEC §4a).
pub fn udev_disagreements(report: &Report) -> Vec<String> {
    let Some(disks) = report.file("disks.json").and_then(|b| serde_json::from_slice::<Value>(b).ok()) else {
        return vec![format!(
            "the guest's `provision-dispatcher disks --format json` failed: {}",
            report.text("disks.err")
        )];
    };
    let links = report.text("udev-links");
    let mut problems = vec![];
    for disk in disks["disks"].as_array().into_iter().flatten() {
        let node = disk["node"].as_str().unwrap_or_default();
        let udev: std::collections::BTreeSet<&str> = links
            .lines()
            .filter_map(|line| line.split_once(' '))
            .filter(|(_, target)| *target == node)
            .map(|(link, _)| link)
            .collect();
        let derived: std::collections::BTreeSet<&str> = ["by_id", "by_path"]
            .iter()
            .flat_map(|key| disk[*key].as_array().into_iter().flatten().filter_map(Value::as_str))
            .collect();
        for only in udev.difference(&derived) {
            problems.push(format!("udev links {only} to {node}; the dispatcher does not derive it"));
        }
        for only in derived.difference(&udev) {
            problems.push(format!("the dispatcher derives {only} for {node}; udev made no such link"));
        }
    }
    problems
}

/// The recipe as the target saw it (issue 28): `RECIPE_FILE` names `/run/provision/recipe.json`
/// and its SHA-256, taken by the target's service, is the one the dispatcher read from the
/// media (status.json's `recipe_sha256`): byte for byte, fields it does not interpret
/// included.
fn recipe_file_problem(
    env: &[(&[u8], &[u8])],
    report: &Report,
    target: &str,
    status: Option<&Value>,
) -> Option<String> {
    let file = env.iter().rev().find(|(k, _)| *k == b"RECIPE_FILE").map(|(_, v)| String::from_utf8_lossy(v));
    if file.as_deref() != Some("/run/provision/recipe.json") {
        return Some(format!("RECIPE_FILE was {file:?}, expected \"/run/provision/recipe.json\""));
    }
    let seen = report.text(&format!("record.{target}.recipe-sha256"));
    let seen = seen.split_whitespace().next().unwrap_or_default();
    let read = status.and_then(|s| s["recipe_sha256"].as_str()).unwrap_or_default();
    (seen.is_empty() || seen != read)
        .then(|| format!("the target's RECIPE_FILE has sha256 {seen:?}, the dispatcher read {read:?} from the media"))
}

/// rule above `PROVISIONING FAILED` to the rule that closes the banner (not the one right
/// under the title), the getty's prompt taken off the lines it shares.
pub fn console_banner(console: &str) -> Option<String> {
    const RULE: &str = "========";
    const TITLE: &str = "PROVISIONING FAILED";
    let lines: Vec<&str> = console.lines().map(|l| l.trim_end_matches('\r')).collect();
    let title = lines.iter().rposition(|l| l.contains(TITLE))?;
    let start = title.checked_sub(1).filter(|&i| lines[i].contains(RULE)).unwrap_or(title);
    let body = title + 1 + usize::from(lines.get(title + 1).is_some_and(|l| l.starts_with(RULE)));
    let end = lines[body..].iter().position(|l| l.starts_with(RULE)).map_or(lines.len() - 1, |i| body + i);
    let shown = lines[start..=end].iter().map(|l| l.trim_start_matches("maintenance login: "));
    Some(shown.collect::<Vec<_>>().join("\n"))
}

fn names_pointer(text: &str, path: &str) -> bool {
    let part_of_pointer = |c: char| c.is_alphanumeric() || matches!(c, '_' | '/' | '~' | '-' | '.');
    text.match_indices(path).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + path.len()..].chars().next();
        !before.is_some_and(part_of_pointer) && !after.is_some_and(part_of_pointer)
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn vm_json_takes_ipmi_true_false_or_silent() {
        assert_eq!(Ipmi::from_json(&Value::Bool(true)).unwrap(), Some(Ipmi::Simulator));
        assert_eq!(Ipmi::from_json(&Value::Bool(false)).unwrap(), None);
        assert_eq!(Ipmi::from_json(&"silent".into()).unwrap(), Some(Ipmi::Silent));
        assert!(Ipmi::from_json(&"loud".into()).is_err());
    }

    fn expect(text: &str) -> Result<Expect> {
        Ok(serde_json::from_str(text)?)
    }

    #[test]
    fn the_derived_names_must_be_udevs_links() {
        let disks = br#"{"disks": [{"node": "/dev/sda", "by_id": ["/dev/disk/by-id/wwn-0x1"], "by_path": ["/dev/disk/by-path/pci-x"]}]}"#;
        let links = b"/dev/disk/by-id/wwn-0x1 /dev/sda\n/dev/disk/by-path/pci-x /dev/sda\n/dev/disk/by-id/wwn-0x1-part1 /dev/sda1\n";
        let same = report(&[("disks.json", disks), ("udev-links", links)]);
        assert_eq!(udev_disagreements(&same), Vec::<String>::new());
        let more = report(&[
            ("disks.json", disks),
            ("udev-links", b"/dev/disk/by-id/scsi-0Q /dev/sda\n/dev/disk/by-id/wwn-0x1 /dev/sda\n"),
        ]);
        assert_eq!(
            udev_disagreements(&more),
            [
                "udev links /dev/disk/by-id/scsi-0Q to /dev/sda; the dispatcher does not derive it",
                "the dispatcher derives /dev/disk/by-path/pci-x for /dev/sda; udev made no such link"
            ]
        );
        assert!(udev_disagreements(&report(&[("disks.err", b"boom")]))[0].contains("boom"));
    }

    #[test]
    fn expect_json_forms() {
        assert_eq!(
            expect(r#"{"outcome": "failed", "exit": 65, "paths": ["/target_disk"]}"#).unwrap(),
            Expect::Failed {
                exit: 65,
                failure: None,
                paths: vec!["/target_disk".into()],
                codes: vec![],
                banner_says: vec![],
                secure_boot: None,
                disk: None,
            }
        );
        let Expect::Dispatched { target, env, .. } =
            expect(r#"{"outcome": "dispatched", "target": "install-esxi.target", "env": {"A": "x", "B": null}}"#)
                .unwrap()
        else {
            panic!("not dispatched")
        };
        assert_eq!(target, "install-esxi.target");
        assert_eq!(env["A"].as_deref(), Some("x"));
        assert_eq!(env["B"], None);
        assert!(expect(r#"{"outcome": "failed", "exit": 65, "path": ["/x"]}"#).is_err(), "typo in a key");
        assert!(expect(r#"{"outcome": "dispatched", "target": "t.target", "evn": {}}"#).is_err(), "typo");
        assert!(expect(r#"{"outcome": "ok"}"#).is_err());
        assert!(serde_json::from_str::<VmFile>(r#"{"attach_media_after": 3}"#).is_err(), "typo in vm.json");
    }

    #[test]
    fn signed_media_options_parse_and_need_a_key() {
        let vm = |text: &str| serde_json::from_str::<VmFile>(text).unwrap().options();
        let options = vm(
            r#"{"sign_with": "tests/keys/test-only-trusted", "sign_bound_to": "4C4C4544-0042-3510-8052-B4C04F4D4E31",
                            "machine_uuid": "4c4c4544-0042-3510-8052-b4c04f4d4e31", "image_layer": "tests/vm-trust",
                            "recipe_changed_after_signing": true}"#,
        )
        .unwrap();
        let signing = options.signing.unwrap();
        assert_eq!(signing.key, crate::root().join("tests/keys/test-only-trusted"));
        assert_eq!(signing.namespace(), "provision-dispatcher@4c4c4544-0042-3510-8052-b4c04f4d4e31");
        assert!(options.recipe_changed_after_signing);
        assert_eq!(options.machine_uuid.as_deref(), Some("4c4c4544-0042-3510-8052-b4c04f4d4e31"));
        assert_eq!(options.image_layer, Some(crate::root().join("tests/vm-trust")));
        let unsigned = vm("{}").unwrap();
        assert_eq!((unsigned.signing, unsigned.image_layer, unsigned.machine_uuid), (None, None, None));
        assert_eq!(vm(r#"{"sign_with": "k"}"#).unwrap().signing.unwrap().namespace(), "provision-dispatcher");
        assert!(vm(r#"{"sign_bound_to": "4c4c4544-0042-3510-8052-b4c04f4d4e31"}"#).is_err(), "bound, but unsigned");
        assert!(vm(r#"{"recipe_changed_after_signing": true}"#).is_err(), "changed, but unsigned");
        assert!(serde_json::from_str::<VmFile>(r#"{"sign": "k"}"#).is_err(), "typo");
    }

    /// The committed test keys and trust layer agree, as `ssh-keygen -Y verify` sees them:
    /// what the harness signs with the trusted key verifies, the untrusted key's does not.
    #[test]
    fn the_trust_layer_trusts_the_trusted_test_key_only() {
        let dir = std::env::temp_dir().join(format!("xtask-trust-layer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("recipe.json");
        std::fs::write(&file, "{}").unwrap();
        let trust = crate::root().join("tests/vm-trust/etc/provision-dispatcher/allowed_signers");
        for (key, trusted) in [("test-only-trusted", true), ("test-only-untrusted", false)] {
            let signing = Signing { key: crate::root().join("tests/keys").join(key), bind: None };
            signing.sign(std::slice::from_ref(&file)).unwrap();
            let verified = std::process::Command::new("ssh-keygen")
                .args(["-Y", "verify", "-I", "vm-test@example.invalid", "-n", "provision-dispatcher", "-f"])
                .arg(&trust)
                .arg("-s")
                .arg(dir.join("recipe.json.sig"))
                .stdin(std::fs::File::open(&file).unwrap())
                .output()
                .unwrap();
            assert_eq!(verified.status.success(), trusted, "{key}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
        for case in load_all(&crate::root().join("tests/vm-cases")).unwrap() {
            assert!(case.vm.signing.as_ref().is_none_or(|s| s.key.is_file()), "{}: no such key", case.name);
            assert!(case.vm.image_layer.as_ref().is_none_or(|l| l.is_dir()), "{}: no such layer", case.name);
        }
    }

    #[test]
    fn the_units_must_be_the_package_s_enabled_by_its_preset() {
        let packaged_show = |unit: &str, state: &str| {
            format!("FragmentPath=/usr/lib/systemd/system/{unit}\nDropInPaths=\nUnitFileState={state}\nUnitFilePreset=enabled\n")
        };
        let dispatcher = packaged_show("provision-dispatcher.service", "enabled");
        let failed = packaged_show("provision-failed.service", "static");
        let follower = packaged_show("provision-task-end.service", "static");
        let files = |dispatcher: &str, follower: &str| {
            report(&[
                ("dispatcher.show", dispatcher.as_bytes()),
                ("failed.show", failed.as_bytes()),
                ("task-end.show", follower.as_bytes()),
            ])
        };
        assert_eq!(packaged(&files(&dispatcher, &follower), false), Vec::<String>::new());
        let layered = dispatcher
            .replace("/usr/lib/systemd/system/", "/etc/systemd/system/")
            .replace("enabled\nUnitFilePreset", "disabled\nUnitFilePreset");
        assert_eq!(
            packaged(&files(&layered, &follower), false),
            vec![
                "provision-dispatcher.service was loaded from \"/etc/systemd/system/provision-dispatcher.service\", not the package's /usr/lib/systemd/system/provision-dispatcher.service",
                "provision-dispatcher.service is disabled with preset enabled, expected enabled by its preset",
            ]
        );
        // A deadline of the image builder's, in a case's image layer: allowed for the follower
        // there, and only there.
        let deadline = follower
            .replace("DropInPaths=\n", "DropInPaths=/etc/systemd/system/provision-task-end.service.d/deadline.conf\n");
        assert_eq!(packaged(&files(&dispatcher, &deadline), true), Vec::<String>::new());
        assert_eq!(
            packaged(&files(&dispatcher, &deadline), false),
            ["provision-task-end.service has drop-ins: /etc/systemd/system/provision-task-end.service.d/deadline.conf"]
        );
        let dispatcher_dropin = deadline.replace("task-end", "dispatcher").replace("static", "enabled");
        assert_eq!(
            packaged(&files(&dispatcher_dropin, &follower), true),
            ["provision-dispatcher.service has drop-ins: /etc/systemd/system/provision-dispatcher.service.d/deadline.conf"]
        );
    }

    #[test]
    fn recipe_values_must_not_reach_the_journal_or_status() {
        let recipe = br#"{"task_target": "install-linux.target", "user_data": "password: hunter22",
            "partition_layout": [{"label": "Windows"}], "metadata": {"ticket": "INC-12345"}}"#;
        let clean = report(&[("dispatcher.journal", b"dispatched install-linux.target for Windows\n")]);
        assert_eq!(leaks(recipe, &clean), Vec::<String>::new());
        let leaky =
            report(&[("failed.journal", b"ticket INC-12345\n"), ("status.json", b"{\"x\": \"password: hunter22\"}")]);
        assert_eq!(
            leaks(recipe, &leaky),
            vec![
                "failed.journal holds the recipe's value of /metadata/ticket",
                "status.json holds the recipe's value of /user_data",
            ]
        );
        // The inventory in the journal names the disks as the machine does: `/dev/vdb` there is
        // the machine's value, the one `disks --format json` lists too.
        let recipe = br#"{"task_target": "install-linux.target", "target_disk": "/dev/vdb"}"#;
        let journal: &[u8] = b"PROVISION-INVENTORY v1 1/1 00 10 {\"node\":\"/dev/vdb\"}\n";
        assert_eq!(leaks(recipe, &report(&[("dispatcher.journal", journal)])).len(), 1);
        let listed: &[u8] = br#"{"disks": [{"name": "vdb", "node": "/dev/vdb"}]}"#;
        assert_eq!(
            leaks(recipe, &report(&[("dispatcher.journal", journal), ("disks.json", listed)])),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_pointer_is_named_only_as_a_whole() {
        let banner = "provision failed (phase recipe, exit 65)\n  /target_disk: is required [required]\n  /partition_layout/0/size: bad\n";
        assert!(names_pointer(banner, "/target_disk"));
        assert!(names_pointer(banner, "/partition_layout/0/size"));
        assert!(!names_pointer(banner, "/partition_layout"));
        assert!(!names_pointer(banner, "/target"));
        assert!(names_pointer("at '/oci_url'", "/oci_url"));
    }

    /// A guest's report of these files.
    pub fn report(files: &[(&str, &[u8])]) -> Report {
        let encoded: serde_json::Map<String, Value> =
            files.iter().map(|(name, bytes)| (name.to_string(), Value::String(encode(bytes)))).collect();
        Report::parse(serde_json::json!({"format": 1, "files": encoded}).to_string().as_bytes()).unwrap()
    }

    /// Base64, as the reporter's `base64 -w0` writes it.
    pub fn encode(bytes: &[u8]) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
            for i in 0..=chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            }
        }
        out
    }

    const DISPATCHED: &[u8] = b"ActiveState=active\nResult=success\nExecMainStatus=0\nExecMainStartTimestampMonotonic=5000000\nExecMainExitTimestampMonotonic=5080000\n";
    const NOT_RUN: &[u8] =
        b"ActiveState=inactive\nResult=success\nExecMainStatus=0\nExecMainStartTimestampMonotonic=0\n";

    #[test]
    fn a_dispatched_boot_is_judged_on_target_and_exact_environment() {
        let mut files: Vec<(&str, &[u8])> = vec![
            ("dispatcher.show", DISPATCHED),
            ("failed.show", NOT_RUN),
            ("status.json", br#"{"state": "succeeded", "recipe_sha256": "ab12", "end": {"units": []}}"#),
            ("task-end.show", b"ActiveState=active\n"),
            ("task-end.journal-x", b"-- Subject: Provisioning task ended: succeeded\n"),
            (
                "active-targets",
                b"basic.target loaded active active Basic\ninstall-esxi.target loaded active active x\n",
            ),
            (
                "record.install-esxi.target.env",
                "PATH=/bin\0RECIPE_VERSION=it's \\ $é\0RECIPE_FILE=/run/provision/recipe.json\0".as_bytes(),
            ),
            ("record.install-esxi.target.recipe-sha256", b"ab12  /run/provision/recipe.json\n"),
            ("dispatcher.journal-x", b"-- Subject: Provisioning task dispatched: its target was started\n"),
        ];
        let good = report(&files);
        let want = |version: &str| Expect::Dispatched {
            target: "install-esxi.target".into(),
            env: [("RECIPE_VERSION".to_string(), Some(version.to_string())), ("TARGET_DISK".to_string(), None)].into(),
            min_dispatcher_ms: Some(50),
            signed_by: None,
            secure_boot: None,
            disk: None,
            end: TaskEnd::Succeeded,
            end_units: None,
            shuts_down: None,
        };
        assert_eq!(judge(&want("it's \\ $é"), &good, ""), Vec::<String>::new());
        // The target's recipe file must be the recipe the dispatcher read, byte for byte.
        files.retain(|(name, _)| !name.ends_with(".recipe-sha256"));
        files.push(("record.install-esxi.target.recipe-sha256", b"cd34  x\n"));
        let other_recipe = report(&files);
        assert_eq!(
            judge(&want("it's \\ $é"), &other_recipe, ""),
            vec![r#"the target's RECIPE_FILE has sha256 "cd34", the dispatcher read "ab12" from the media"#]
        );
        assert_eq!(
            judge(&want("it's \\ $e"), &good, ""),
            vec![r#"RECIPE_VERSION was "it's \\ $é", expected "it's \\ $e""#]
        );
        let mut signed = want("it's \\ $é");
        if let Expect::Dispatched { signed_by, .. } = &mut signed {
            *signed_by = Some("vm-test@example.invalid".into());
        }
        assert_eq!(
            judge(&signed, &good, ""),
            vec!["status.json signature null, expected one by vm-test@example.invalid"]
        );
    }

    /// SPEC §6d: a dispatched case is judged on its end too: status.json's state and end, the
    /// follower ready only after a real end, the catalog's words.
    #[test]
    fn a_dispatched_boot_is_judged_on_the_tasks_end() {
        let base: Vec<(&str, &[u8])> = vec![("dispatcher.show", DISPATCHED), ("failed.show", NOT_RUN)];
        let expect = |end: TaskEnd, units: Option<&[&str]>| {
            let mut expect = Expect::dispatched("vm-test-hang.target", end);
            if let Expect::Dispatched { end_units, .. } = &mut expect {
                *end_units = units.map(|u| u.iter().map(|s| s.to_string()).collect());
            }
            expect
        };
        let timed_out = [
            ("status.json", &br#"{"state": "timed_out", "end": {"units": ["vm-test-hang.service"]}}"#[..]),
            ("task-end.show", b"ActiveState=activating\n"),
            ("task-end.journal-x", b"-- Subject: Provisioning task timed out: still running\n"),
        ];
        let mut files = base.clone();
        files.extend(timed_out);
        let units = Some(&["vm-test-hang.service"][..]);
        let problems = end_problems(TaskEnd::TimedOut, Some(&["vm-test-hang.service".to_owned()]), &report(&files));
        assert_eq!(problems, Vec::<String>::new());
        let all = judge(&expect(TaskEnd::TimedOut, units), &report(&files), "");
        assert!(!all.iter().any(|p| p.contains("is not active") || p.contains("state")), "{all:?}");
        assert_eq!(
            end_problems(TaskEnd::Succeeded, Some(&["other.service".into()]), &report(&files)),
            [
                r#"status.json's end names ["vm-test-hang.service"], expected ["other.service"]"#,
                r#"provision-task-end.service is "activating", expected "active" (ready only once the end is told)"#,
                r#"journalctl -x does not explain the end ("Provisioning task ended: succeeded": the message catalog)"#,
            ]
        );
        let none = report(&[("status.json", br#"{"state": "dispatched"}"#)]);
        assert!(judge(&expect(TaskEnd::Succeeded, None), &none, "").contains(&"status.json has no end".to_owned()));
        assert!(judge(&expect(TaskEnd::Succeeded, None), &none, "")
            .contains(&r#"status.json state Some("dispatched"), expected "succeeded""#.to_owned()));
    }

    #[test]
    fn a_failed_boot_needs_the_exit_status_and_the_banner() {
        let failed = b"ActiveState=failed\nResult=exit-code\nExecMainStatus=65\nExecMainStartTimestampMonotonic=1\n";
        let ran = b"ActiveState=inactive\nResult=success\nExecMainStatus=0\nExecMainStartTimestampMonotonic=9\n";
        let want = Expect::Failed {
            exit: 65,
            failure: None,
            paths: vec!["/target_disk".into()],
            codes: vec![],
            banner_says: vec![],
            secure_boot: None,
            disk: None,
        };
        let files: Vec<(&str, &[u8])> = vec![
            ("dispatcher.show", failed),
            ("failed.show", ran),
            ("failed.journal", b"PROVISIONING FAILED\n  /target_disk: is required\n"),
            ("status.json", br#"{"state": "failed", "exit_code": 65}"#),
            ("tty1.screen", b"login:   PROVISIONING FAILED    /target_disk"),
            ("dispatcher.journal-x", b"Subject: Provisioning failed: nothing was started\n"),
            ("run-listing", b"/run:\n.\n..\nprovision-dispatcher\n\n/run/provision-dispatcher:\n.\nstatus.json\n"),
        ];
        let good = report(&files);
        let rule = "=".repeat(72);
        let console = format!(
            "{rule}\nPROVISIONING FAILED\n{rule}\nexit code:  65\n  recipe.json:2:3: /target_disk: is required [required]\n{rule}\n"
        );
        let console = console.as_str();
        assert_eq!(judge(&want, &good, console), Vec::<String>::new());
        // The pointer only in a journal line echoed to the console, not in the banner.
        let echoed = format!(
            "{rule}\nPROVISIONING FAILED\n{rule}\nexit code:  65\n{rule}\n[ 11.5] x[257]: /target_disk: is required\n"
        );
        assert_eq!(judge(&want, &good, &echoed), vec!["the serial console's banner does not show /target_disk"]);
        let with_code = |code: &str| Expect::Failed {
            exit: 65,
            failure: None,
            paths: vec!["/target_disk".into()],
            codes: vec![code.into()],
            banner_says: vec![],
            secure_boot: None,
            disk: None,
        };
        let mut coded = files.clone();
        coded[3].1 = br#"{"state": "failed", "exit_code": 65, "details": [{"code": "systemDisk"}]}"#;
        let coded = report(&coded);
        assert_eq!(judge(&with_code("systemDisk"), &coded, console), Vec::<String>::new());
        assert_eq!(
            judge(&with_code("mediaDisk"), &coded, console),
            vec![r#"status.json has no detail with code mediaDisk (it has ["systemDisk"])"#]
        );
        assert_eq!(
            judge(&want, &good, ""),
            vec![
                "the serial console does not show the failure banner",
                "the serial console's banner does not show /target_disk"
            ]
        );
        let left = report(&[
            ("dispatcher.show", failed),
            ("failed.show", ran),
            ("failed.journal", b"PROVISIONING FAILED\n  /target_disk: is required\n"),
            ("status.json", br#"{"state": "failed", "exit_code": 65}"#),
            ("dispatcher.journal-x", b"Subject: Provisioning failed: nothing was started\n"),
            ("run-listing", b"/run:\n.provision.staging-12\n\n/run/provision-dispatcher:\nmedia\n"),
        ]);
        assert_eq!(
            judge(&want, &left, console),
            vec![
                "the video console (tty1) does not show the failure banner",
                "a staging directory is left in /run",
                "the media's mount point is left in /run/provision-dispatcher",
                "the video console (tty1) does not show /target_disk"
            ]
        );
        let silent = report(&[
            ("dispatcher.show", failed),
            ("failed.show", NOT_RUN),
            ("status.json", br#"{"state": "failed", "exit_code": 65}"#),
        ]);
        let problems = judge(&want, &silent, console);
        assert!(problems.contains(&"provision-failed.service did not run".to_owned()), "{problems:?}");
        assert!(problems.contains(&"provision-failed.service's output does not name /target_disk".to_owned()));
    }

    #[test]
    fn the_console_banner_runs_past_the_rule_under_its_title() {
        let rule = "=".repeat(72);
        let console = format!(
            "boot\n{rule}\nPROVISIONING FAILED\n{rule}\nexit code:  65\n  /a: x\n{rule}\nmaintenance login: \n"
        );
        assert_eq!(
            console_banner(&console).unwrap(),
            format!("{rule}\nPROVISIONING FAILED\n{rule}\nexit code:  65\n  /a: x\n{rule}")
        );
        assert_eq!(console_banner("no banner here\n"), None);
    }

    #[test]
    fn a_fault_counts_only_when_it_was_done_while_the_dispatcher_was_held() {
        let vm = |text: &str| serde_json::from_str::<VmFile>(text).unwrap().options();
        let held = vm(r#"{"attach_media_after_secs": 8, "fault_while_held": "restart-dbus"}"#).unwrap();
        assert_eq!(held.fault_while_held, Some(Fault::RestartDbus));
        assert!(vm(r#"{"fault_while_held": "remove-target-disk"}"#).is_err(), "nothing to attach to in time");
        assert!(serde_json::from_str::<VmFile>(r#"{"fault_while_held": "pull-the-plug"}"#).is_err());

        let log: &[u8] = b"vm-test: following the dispatcher (pid 7) to the publication of /run/provision\n\
            vm-test: the dispatcher is held as it publishes its outputs; running: fault remove-target-disk\n\
            vm-test: fault: /dev/vdb is gone\nvm-test: released the dispatcher after the fault\n";
        assert_eq!(held_problems(Fault::RemoveTargetDisk, &[("hold.log", log)]), Vec::<String>::new());
        let ended: &[u8] = b"vm-test: hold: the dispatcher ended before it published /run/provision\n";
        assert_eq!(held_problems(Fault::RemoveTargetDisk, &[("hold.log", ended)]).len(), 1);
        assert_eq!(held_problems(Fault::RemoveTargetDisk, &[]).len(), 1, "no hold at all");
        // A restarted bus must be seen by the dispatcher, or the case proved nothing about it.
        assert_eq!(
            held_problems(Fault::RestartDbus, &[("hold.log", log), ("dispatcher.journal", b"dispatched\n")]),
            vec!["the dispatcher's journal does not say that it connected to the bus again"]
        );
        let journal: &[u8] = b"the connection to the system bus broke (EOF); connecting again\ndispatched\n";
        assert!(held_problems(Fault::RestartDbus, &[("hold.log", log), ("dispatcher.journal", journal)]).is_empty());
    }

    #[test]
    fn secure_boot_is_judged_from_the_guest_and_from_status_json_when_stated() {
        let on: &[u8] = b"secure_boot=1\nlockdown=none [integrity] confidentiality\n";
        let off: &[u8] = b"secure_boot=0\nlockdown=[none] integrity confidentiality\n";
        let bios: &[u8] = b"secure_boot=none\nlockdown=[none] integrity confidentiality\n";
        let judge = |firmware, enforced, expected, files: &[(&str, &[u8])]| {
            secure_boot(firmware, enforced, expected, &report(files))
        };
        assert!(judge(Firmware::Uefi, true, None, &[("firmware", on)]).is_empty());
        assert!(judge(Firmware::Uefi, false, None, &[("firmware", off)]).is_empty());
        assert!(judge(Firmware::Bios, false, None, &[("firmware", bios)]).is_empty());
        assert_eq!(
            judge(Firmware::Uefi, true, None, &[("firmware", off)]),
            vec![
                r#"the guest read SecureBoot "0", expected "1""#,
                r#"the guest's kernel lockdown is "[none] integrity confidentiality" with Secure Boot enforced: true"#
            ]
        );
        assert_eq!(judge(Firmware::Uefi, true, None, &[]).len(), 2, "the guest said nothing");
        // status.json without the field (the dispatcher before it records it): a problem only
        // when the case states what it should say.
        let old_status: &[u8] = br#"{"state": "dispatched"}"#;
        assert!(judge(Firmware::Uefi, true, None, &[("firmware", on), ("status.json", old_status)]).is_empty());
        assert_eq!(
            judge(Firmware::Uefi, true, Some(true), &[("firmware", on), ("status.json", old_status)]),
            vec!["status.json has no secure_boot"]
        );
        let said = |value: &str| format!(r#"{{"state": "dispatched", "secure_boot": {value}}}"#).into_bytes();
        let (yes, null) = (said("true"), said("null"));
        assert!(judge(Firmware::Uefi, true, Some(true), &[("firmware", on), ("status.json", &yes)]).is_empty());
        assert_eq!(
            judge(Firmware::Uefi, false, Some(false), &[("firmware", off), ("status.json", &yes)]),
            vec!["status.json secure_boot true, expected false"]
        );
        assert_eq!(
            judge(Firmware::Uefi, true, Some(true), &[("firmware", on), ("status.json", &null)]),
            vec!["status.json secure_boot null, expected true"]
        );
        assert_eq!(
            judge(Firmware::Uefi, true, Some(true), &[("firmware", on)]),
            vec!["no status.json to say whether Secure Boot was on"]
        );
    }

    #[test]
    fn a_refusal_is_read_from_the_console_and_is_the_only_pass_of_a_refused_case() {
        let shim =
            "BdsDxe: starting Boot0001\r\nVerification failed: (0x1A) Security Violation\r\nFailed to load image\r\n";
        assert_eq!(refusal(shim).as_deref(), Some("Verification failed: (0x1A) Security Violation"));
        assert_eq!(refusal("Linux version 6.1.0\nWelcome to Debian\n"), None);
        assert!(refused(refusal(shim).as_deref(), false).is_empty());
        assert_eq!(refused(None, true).len(), 2);
        assert_eq!(expect(r#"{"outcome": "refused_by_firmware"}"#).unwrap(), Expect::RefusedByFirmware {});
        assert!(expect(r#"{"outcome": "refused_by_firmware", "secure_boot": true}"#).is_err());
        let stated = expect(r#"{"outcome": "dispatched", "target": "t.target", "secure_boot": true}"#).unwrap();
        assert_eq!(stated.secure_boot(), Some(true));
    }

    #[test]
    fn a_boot_that_stops_in_the_initrd_names_its_failure_and_exit() {
        let stated = expect(r#"{"outcome": "boot_failed", "failure": "boot_medium_not_found", "exit": 66}"#).unwrap();
        assert_eq!(
            stated,
            Expect::BootFailed { failure: "boot_medium_not_found".into(), exit: 66, console_says: vec![] }
        );
        assert_eq!(stated.secure_boot(), None);
        assert!(expect(r#"{"outcome": "boot_failed", "exit": 66}"#).is_err(), "the failure is required");
        assert!(expect(r#"{"outcome": "boot_failed", "failure": "x", "exit": 66, "paths": []}"#).is_err());
    }

    #[test]
    fn secure_boot_is_the_default_where_uefi_boots_the_image() {
        let vm = |text: &str| serde_json::from_str::<VmFile>(text).unwrap().options();
        assert!(vm("{}").unwrap().secure_boot);
        assert!(!vm(r#"{"secure_boot": false}"#).unwrap().secure_boot);
        assert!(!vm(r#"{"firmware": "bios"}"#).unwrap().secure_boot);
        assert!(!vm(r#"{"kernel_args": "x=1"}"#).unwrap().secure_boot, "a kernel given directly is not signed");
        assert!(vm(r#"{"firmware": "bios", "secure_boot": true}"#).is_err());
        assert!(vm(r#"{"kernel_args": "x=1", "secure_boot": true}"#).is_err());
        assert!(vm(r#"{"firmware": "bios", "unsigned_grub": true}"#).is_err());
    }

    #[test]
    fn an_embedded_task_has_no_task_cd_to_be_late_pulled_or_damaged() {
        let vm = |text: &str| serde_json::from_str::<VmFile>(text).unwrap().options();
        let embedded = vm(r#"{"task": "embedded", "firmware": "bios", "boot_media": "usb-disk"}"#).unwrap();
        assert_eq!((embedded.task, embedded.toram), (TaskArrival::Embedded, false));
        assert_eq!(vm("{}").unwrap().task, TaskArrival::Cd);
        assert!(vm(r#"{"task": "embedded", "toram": true, "extra_media": [{"volume_id": "TASK"}]}"#).is_ok());
        for cd_only in [
            r#""attach_media_after_secs": 5"#,
            r#""detach_media_after_secs": 5"#,
            r#""media_read_bytes_per_sec": 1000"#,
            r#""task_media_damage": "truncate""#,
            r#""recipe_file": "symlink""#,
            r#""unsigned_grub": true"#,
        ] {
            let text = format!(r#"{{"task": "embedded", {cd_only}}}"#);
            assert!(vm(&text).unwrap_err().to_string().contains("not with task embedded"), "{text}");
        }
        assert!(vm(r#"{"toram": true, "kernel_args": "x=1"}"#).is_err());
    }

    fn held_problems(fault: Fault, files: &[(&str, &[u8])]) -> Vec<String> {
        held(fault, &report(files))
    }
}
