//! A BMC outside the guest (vm.json `"ipmi"`), as a controller sees a server's: QEMU's
//! `ipmi-bmc-extern` on a chardev to OpenIPMI's BMC simulator (`ipmi_sim`) on the host,
//! loopback only, whose System Event Log the harness reads after the case with `ipmitool` over
//! the simulator's LAN interface; or a BMC that never answers (the chardev connected to a
//! socket nobody answers on).
//!
//! amd64 puts the BMC behind `isa-ipmi-kcs`, described to the guest by ACPI and SMBIOS as a
//! server's is; arm64's `virt` machine has no ISA bus, so there it is `pci-ipmi-kcs`, which
//! the kernel's `ipmi_si` finds by its PCI class (IPMI, KCS).

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::cases::{Expect, Ipmi};
use crate::arch::Arch;

/// The user the harness reads the SEL as; the simulator listens on loopback only.
const USER: &str = "vmtest";
const PASSWORD: &str = "vmtest";

/// A BMC for one guest, stopped when dropped.
pub struct Bmc {
    pub kind: Ipmi,
    /// Where QEMU's chardev connects (127.0.0.1).
    pub port: u16,
    /// The simulator's LAN port, for ipmitool (UDP, 127.0.0.1).
    lan_port: Option<u16>,
    simulator: Option<Child>,
    /// The silent BMC's socket: it takes connections and never reads or answers.
    _silent: Option<TcpListener>,
}

impl Bmc {
    /// Starts the BMC of `kind`, its files in `dir`.
    pub fn start(kind: Ipmi, dir: &Path) -> Result<Bmc> {
        match kind {
            Ipmi::Silent => {
                // The backlog takes QEMU's connection; nothing ever accepts or answers it.
                let listener = TcpListener::bind("127.0.0.1:0")?;
                let port = listener.local_addr()?.port();
                Ok(Bmc { kind, port, lan_port: None, simulator: None, _silent: Some(listener) })
            }
            Ipmi::Simulator => {
                let (port, lan_port) = (free_port()?, free_port()?);
                let state = dir.join("ipmi-state");
                std::fs::create_dir_all(&state)?;
                std::fs::write(dir.join("ipmi-lan.conf"), lan_conf(port, lan_port))?;
                std::fs::write(dir.join("ipmi-bmc.emu"), EMU)?;
                let log = std::fs::File::create(dir.join("ipmi-sim.log"))?;
                let child = Command::new("ipmi_sim")
                    .arg("-c")
                    .arg(dir.join("ipmi-lan.conf"))
                    .arg("-f")
                    .arg(dir.join("ipmi-bmc.emu"))
                    .arg("-s")
                    .arg(&state)
                    .arg("-n")
                    .stdin(Stdio::null())
                    .stdout(log.try_clone()?)
                    .stderr(log)
                    .spawn()
                    .context("cannot start ipmi_sim (Debian package openipmi)")?;
                let bmc = Bmc { kind, port, lan_port: Some(lan_port), simulator: Some(child), _silent: None };
                wait_listening(port)?;
                Ok(bmc)
            }
        }
    }

    /// QEMU's arguments for this BMC on `arch`.
    pub fn qemu_args(&self, arch: Arch) -> Vec<String> {
        let interface = match arch {
            Arch::Amd64 => "isa-ipmi-kcs",
            Arch::Arm64 => "pci-ipmi-kcs",
        };
        vec![
            "-chardev".into(),
            format!("socket,id=ipmi0,host=127.0.0.1,port={},reconnect=10", self.port),
            "-device".into(),
            "ipmi-bmc-extern,chardev=ipmi0,id=bmc0".into(),
            "-device".into(),
            format!("{interface},bmc=bmc0"),
        ]
    }

    /// The SEL as `ipmitool sel elist` prints it (the simulator only).
    pub fn sel(&self) -> Result<String> {
        let port = self.lan_port.context("a silent BMC has no SEL to read")?;
        crate::system::output(
            Command::new("ipmitool")
                .args(["-I", "lan", "-H", "127.0.0.1", "-p", &port.to_string(), "-U", USER, "-P", PASSWORD])
                .args(["sel", "elist"]),
        )
    }
}

impl Drop for Bmc {
    fn drop(&mut self) {
        if let Some(child) = &mut self.simulator {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// What is wrong with the BMC's side of a case: the SEL holds the event the outcome calls
/// for (the simulator), and status.json says what became of it; a silent BMC changes nothing
/// and costs at most the dispatcher's bound (2 s) plus a margin, as status.json's
/// `timings_ms.bmc` has it (a silent BMC without that figure is a problem too).
pub fn judge(
    kind: Ipmi,
    expect: &Expect,
    status: Option<&Value>,
    sel: &Result<String>,
    waited_ms: Option<f64>,
) -> Vec<String> {
    let mut problems = vec![];
    let recorded = status.map(|s| s["bmc_event"].clone()).unwrap_or(Value::Null);
    match kind {
        Ipmi::Simulator => {
            // The dispatch's event, then the end's (SPEC §6d).
            let wanted = match expect {
                Expect::Dispatched { end, .. } => vec!["Installation started", end.sel_event()],
                Expect::Failed { .. } => vec!["Installation failed"],
                // Nothing booted: there is no event to look for.
                Expect::RefusedByFirmware {} | Expect::BootFailed { .. } => return problems,
            };
            for wanted in wanted {
                match sel {
                    Ok(sel) if sel.lines().any(|l| l.contains("OS Boot") && l.contains(wanted)) => {}
                    Ok(sel) => {
                        problems.push(format!("the BMC's SEL has no OS Boot event {wanted:?}: {:?}", sel.trim()))
                    }
                    Err(e) => problems.push(format!("cannot read the BMC's SEL: {e:#}")),
                }
            }
            for (what, recorded) in recorded_events(expect, &recorded, status) {
                if recorded != "logged" {
                    problems.push(format!("status.json {what} is {recorded}, expected \"logged\""));
                }
            }
        }
        Ipmi::Silent => {
            for (what, recorded) in recorded_events(expect, &recorded, status) {
                if !(recorded == "no_answer" || recorded == "no_bmc") {
                    problems.push(format!("status.json {what} is {recorded}, expected \"no_answer\" or \"no_bmc\""));
                }
            }
            match waited_ms {
                Some(ms) if ms > SILENT_BOUND_MS => problems
                    .push(format!("the silent BMC cost the dispatcher {ms:.0} ms, more than {SILENT_BOUND_MS} ms")),
                Some(_) => {}
                None => problems.push("status.json has no timings_ms.bmc for the BMC's wait".into()),
            }
        }
    }
    problems
}

/// What status.json says became of each event of the case: the run's (`bmc_event`), and for a
/// dispatch the end's (`end.bmc_event`).
fn recorded_events(expect: &Expect, run: &Value, status: Option<&Value>) -> Vec<(&'static str, Value)> {
    let mut events = vec![("bmc_event", run.clone())];
    if matches!(expect, Expect::Dispatched { .. }) {
        events.push(("end.bmc_event", status.map(|s| s["end"]["bmc_event"].clone()).unwrap_or_default()));
    }
    events
}

/// The dispatcher's 2 s for the BMC, and a margin for a loaded host's scheduling.
const SILENT_BOUND_MS: f64 = 3500.0;

/// A port free on loopback now (the simulator binds it a moment later).
fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn wait_listening(port: u16) -> Result<()> {
    let started = Instant::now();
    while !listening(port) {
        if started.elapsed() > Duration::from_secs(10) {
            bail!("ipmi_sim does not listen on 127.0.0.1:{port} (see ipmi-sim.log)");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Whether a socket listens on 127.0.0.1:`port`, from the kernel's table: a connection to
/// find out would take the simulator's one serial connection from QEMU.
fn listening(port: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    let local = format!("0100007F:{port:04X}");
    table.lines().any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.get(1) == Some(&local.as_str()) && fields.get(3) == Some(&"0A")
    })
}

/// The simulator's configuration (ipmi_lan(5)): its LAN interface for ipmitool and its
/// system interface for QEMU (the "VM" codec of `ipmi-bmc-extern`), both on loopback.
fn lan_conf(port: u16, lan_port: u16) -> String {
    format!(
        "name \"vmtest\"\n\
         set_working_mc 0x20\n\
         startlan 1\n\
         addr 127.0.0.1 {lan_port}\n\
         priv_limit admin\n\
         allowed_auths_callback none md2 md5 straight\n\
         allowed_auths_user none md2 md5 straight\n\
         allowed_auths_operator none md2 md5 straight\n\
         allowed_auths_admin none md2 md5 straight\n\
         guid a123456789abcdefa123456789abcdef\n\
         endlan\n\
         serial kcs 127.0.0.1 {port} codec VM\n\
         user 2 true \"{USER}\" \"{PASSWORD}\" admin 10 none md2 md5 straight\n"
    )
}

/// The simulated BMC (ipmi_sim_cmd(5)): one management controller at 20h with a SEL.
const EMU: &str = "mc_setbmc 0x20\n\
                   mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr\n\
                   sel_enable 0x20 1000 0x0a\n\
                   mc_enable 0x20\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_bmc_cases_ask_for_their_bmc() {
        let cases = crate::root().join("tests/vm-cases");
        for (name, kind) in
            [("seed-esxi", Ipmi::Simulator), ("special-target-refused", Ipmi::Simulator), ("bmc-silent", Ipmi::Silent)]
        {
            assert_eq!(super::super::cases::load(&cases.join(name)).unwrap().vm.ipmi, Some(kind), "{name}");
        }
    }

    #[test]
    fn the_sel_must_hold_the_outcomes_event() {
        let failed = Expect::Failed {
            exit: 65,
            failure: None,
            paths: vec![],
            codes: vec![],
            banner_says: vec![],
            secure_boot: None,
            disk: None,
        };
        let status = serde_json::json!({"bmc_event": "logged"});
        let sel = "   1 |  Pre-Init  |0000000995| OS Boot | Installation failed | Asserted\n";
        assert_eq!(judge(Ipmi::Simulator, &failed, Some(&status), &Ok(sel.into()), None), Vec::<String>::new());
        let started = "   1 |  Pre-Init  |0000000995| OS Boot | Installation started | Asserted\n";
        assert_eq!(
            judge(Ipmi::Simulator, &failed, Some(&status), &Ok(started.into()), None),
            [format!("the BMC's SEL has no OS Boot event \"Installation failed\": {:?}", started.trim())]
        );
        // A dispatch: its event, then the end's (SPEC §6d).
        let dispatched = Expect::dispatched("t.target", super::super::cases::TaskEnd::Succeeded);
        let both = format!("{started}   2 |  Pre-Init  |0000000999| OS Boot | Installation completed | Asserted\n");
        let ended = serde_json::json!({"bmc_event": "logged", "end": {"bmc_event": "logged"}});
        assert_eq!(judge(Ipmi::Simulator, &dispatched, Some(&ended), &Ok(both.clone()), None), Vec::<String>::new());
        assert_eq!(
            judge(Ipmi::Simulator, &dispatched, Some(&ended), &Ok(started.into()), None),
            [format!("the BMC's SEL has no OS Boot event \"Installation completed\": {:?}", started.trim())]
        );
        assert_eq!(
            judge(Ipmi::Simulator, &dispatched, Some(&status), &Ok(both), None),
            ["status.json end.bmc_event is null, expected \"logged\""]
        );
        let silent = serde_json::json!({"bmc_event": "no_answer"});
        assert_eq!(judge(Ipmi::Silent, &failed, Some(&silent), &Ok(String::new()), Some(2100.0)), Vec::<String>::new());
        assert_eq!(
            judge(Ipmi::Silent, &failed, Some(&status), &Ok(String::new()), Some(9000.0)),
            [
                "status.json bmc_event is \"logged\", expected \"no_answer\" or \"no_bmc\"",
                "the silent BMC cost the dispatcher 9000 ms, more than 3500 ms"
            ]
        );
        assert_eq!(
            judge(Ipmi::Silent, &failed, Some(&silent), &Ok(String::new()), None),
            ["status.json has no timings_ms.bmc for the BMC's wait"]
        );
    }

    /// The simulator as the harness runs it, the SEL read as the harness reads it, and the
    /// event written as the dispatcher writes it through `ipmi-bmc-extern`'s wire format (only
    /// where openipmi and ipmitool are installed).
    #[test]
    fn the_simulator_logs_the_dispatchers_sel_record() {
        if !crate::system::has("ipmi_sim") || !crate::system::has("ipmitool") {
            eprintln!("skipped: ipmi_sim and ipmitool (Debian openipmi, ipmitool) are not installed");
            return;
        }
        let dir = std::env::temp_dir().join(format!("vm-bmc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bmc = Bmc::start(Ipmi::Simulator, &dir).unwrap();
        // Add SEL Entry (NetFn 0Ah, cmd 44h) with src/bmc.rs's record of "installation failed".
        let record = [0, 0, 0x02, 0, 0, 0, 0, 0x41, 0x00, 0x04, 0x1f, 0x00, 0x6f, 0x0a, 0xff, 0xff];
        let answer = vm_request(bmc.port, 0x0a, 0x44, &record);
        assert_eq!(answer.get(3), Some(&0), "completion code of {answer:02x?}");
        let sel = bmc.sel().unwrap();
        assert!(sel.contains("OS Boot") && sel.contains("Installation failed"), "{sel}");
        drop(bmc);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// One request in the "VM" codec QEMU's `ipmi-bmc-extern` speaks (seq, netfn/lun, cmd,
    /// data, checksum, escaped, A0h to end) and the answer's bytes.
    fn vm_request(port: u16, netfn: u8, cmd: u8, data: &[u8]) -> Vec<u8> {
        use std::io::{Read, Write};
        use std::net::TcpStream;
        const MSG: u8 = 0xa0;
        const CMD: u8 = 0xa1;
        const ESC: u8 = 0xaa;
        let mut body = vec![1, netfn << 2, cmd];
        body.extend_from_slice(data);
        body.push(body.iter().fold(0u8, |sum, b| sum.wrapping_add(*b)).wrapping_neg());
        let mut wire = vec![];
        for b in body {
            if [MSG, CMD, ESC].contains(&b) {
                wire.extend([ESC, b | 0x10]);
            } else {
                wire.push(b);
            }
        }
        wire.push(MSG);
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        stream.write_all(&wire).unwrap();
        let mut got = vec![];
        let mut byte = [0u8];
        // The simulator first sends its own commands (ended by A1h); the answer ends with A0h.
        loop {
            stream.read_exact(&mut byte).unwrap();
            match byte[0] {
                CMD => got.clear(),
                MSG => return got,
                b => got.push(b),
            }
        }
    }
}
