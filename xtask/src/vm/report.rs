//! What a guest sent: the files its reporter collected (tests/vm-guest/usr/lib/vm-test/report),
//! decoded byte for byte, with readers for the few formats in them.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};

pub struct Report {
    files: BTreeMap<String, Vec<u8>>,
    /// Each unit's invocation as the round began (`round-start`: `UNIT=ID` lines), in a boot's
    /// later rounds: a unit ran in the round only under another one.
    invocations: BTreeMap<String, String>,
}

impl Report {
    /// Parses `{"format":1,"files":{"NAME":"BASE64",...}}`.
    pub fn parse(bytes: &[u8]) -> Result<Report> {
        let value: serde_json::Value = serde_json::from_slice(bytes).context("the report is not JSON")?;
        if value["format"] != 1 {
            bail!("the report is not of format 1");
        }
        let Some(entries) = value["files"].as_object() else { bail!("the report has no files") };
        let mut files = BTreeMap::new();
        for (name, encoded) in entries {
            let encoded = encoded.as_str().with_context(|| format!("report file {name} is not a string"))?;
            files.insert(name.clone(), base64_decode(encoded).with_context(|| format!("report file {name}"))?);
        }
        let start = String::from_utf8_lossy(files.get("round-start").map(Vec::as_slice).unwrap_or_default());
        let invocations = start
            .lines()
            .filter_map(|line| line.split_once('='))
            .map(|(unit, id)| (unit.to_owned(), id.to_owned()))
            .collect();
        Ok(Report { files, invocations })
    }

    pub fn file(&self, name: &str) -> Option<&[u8]> {
        self.files.get(name).map(Vec::as_slice)
    }

    /// A file as text (empty if absent).
    pub fn text(&self, name: &str) -> String {
        String::from_utf8_lossy(self.file(name).unwrap_or_default()).into_owned()
    }

    /// `systemctl show` of `provision-dispatcher.service` or `provision-failed.service`.
    pub fn dispatcher(&self) -> Unit {
        self.unit("dispatcher.show")
    }

    pub fn failed_unit(&self) -> Unit {
        self.unit("failed.show")
    }

    /// `systemctl show` of a unit, as the reporter saved it in `file`, with its invocation as
    /// the round began.
    pub fn unit(&self, file: &str) -> Unit {
        let mut unit = Unit::parse(&self.text(file));
        unit.before = self.invocations.get(unit.get("Id")).cloned();
        unit
    }

    /// The dispatcher's status file, if it wrote one.
    pub fn status(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(self.file("status.json")?).ok()
    }

    /// Names of the targets that were active when the boot settled.
    pub fn active_targets(&self) -> Vec<String> {
        self.text("active-targets").lines().filter_map(|l| l.split_whitespace().next()).map(String::from).collect()
    }

    /// Targets whose stand-in service recorded an environment.
    pub fn recorded_targets(&self) -> Vec<String> {
        self.files.keys().filter_map(|n| n.strip_prefix("record.")?.strip_suffix(".env")).map(String::from).collect()
    }

    /// The environment the stand-in service of `target` received (`env -0`), as byte pairs.
    pub fn recorded_env(&self, target: &str) -> Option<Vec<(&[u8], &[u8])>> {
        let bytes = self.file(&format!("record.{target}.env"))?;
        Some(parse_env0(bytes))
    }

    pub fn recorded_listing(&self, target: &str) -> String {
        self.text(&format!("record.{target}.listing"))
    }
}

/// `systemctl show -p ...` output: `Key=value` lines.
pub struct Unit {
    properties: BTreeMap<String, String>,
    /// Its `InvocationID` as the round began, in a boot's later rounds.
    before: Option<String>,
}

impl Unit {
    fn parse(text: &str) -> Unit {
        let properties =
            text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_owned(), v.to_owned())).collect();
        Unit { properties, before: None }
    }

    pub fn get(&self, key: &str) -> &str {
        self.properties.get(key).map(String::as_str).unwrap_or("")
    }

    fn micros(&self, key: &str) -> u64 {
        self.get(key).parse().unwrap_or(0)
    }

    /// Whether its main process started in this round: ever in this boot for the first, under
    /// another invocation than the one the round began with for the later ones.
    pub fn ran(&self) -> bool {
        self.micros("ExecMainStartTimestampMonotonic") != 0 && self.before.as_deref() != Some(self.get("InvocationID"))
    }

    /// How long its main process ran (from the unit's monotonic timestamps, as systemd-analyze
    /// computes them), if it ran to the end.
    pub fn run_time_ms(&self) -> Option<f64> {
        let (start, exit) =
            (self.micros("ExecMainStartTimestampMonotonic"), self.micros("ExecMainExitTimestampMonotonic"));
        (start != 0 && exit >= start).then(|| (exit - start) as f64 / 1000.0)
    }

    /// The CPU time its processes used (cgroup accounting): its own work, without the waits.
    pub fn cpu_ms(&self) -> Option<f64> {
        self.get("CPUUsageNSec").parse::<u64>().ok().filter(|&ns| ns != u64::MAX).map(|ns| ns as f64 / 1e6)
    }
}

fn parse_env0(bytes: &[u8]) -> Vec<(&[u8], &[u8])> {
    bytes
        .split(|&b| b == 0)
        .filter(|entry| !entry.is_empty())
        .map(|entry| match entry.iter().position(|&b| b == b'=') {
            Some(i) => (&entry[..i], &entry[i + 1..]),
            None => (entry, &[][..]),
        })
        .collect()
}

fn base64_decode(text: &str) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.trim_end_matches('=').bytes() {
        let sextet = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => bail!("not base64: {:?}", c as char),
        };
        acc = (acc << 6) | u32::from(sextet);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_what_coreutils_writes() {
        // `printf 'it'"'"'s \\ $é\0x' | base64 -w0`
        assert_eq!(base64_decode("aXQncyBcICTDqQB4").unwrap(), b"it's \\ $\xc3\xa9\0x");
        assert_eq!(base64_decode("YQ==").unwrap(), b"a");
        assert_eq!(base64_decode("YWI=").unwrap(), b"ab");
        assert_eq!(base64_decode("").unwrap(), b"");
        assert!(base64_decode("a b").is_err());
    }

    #[test]
    fn env0_splits_on_the_first_equals_only() {
        let env = parse_env0(b"A=1\0B=x=y\0C=\0");
        assert_eq!(env, vec![(&b"A"[..], &b"1"[..]), (&b"B"[..], &b"x=y"[..]), (&b"C"[..], &b""[..])]);
    }

    #[test]
    fn unit_run_time_comes_from_the_exec_timestamps() {
        let unit = Unit::parse(
            "Result=success\nExecMainStartTimestampMonotonic=1000000\nExecMainExitTimestampMonotonic=1085500\n",
        );
        assert_eq!(unit.get("Result"), "success");
        assert!(unit.ran());
        assert_eq!(unit.run_time_ms(), Some(85.5));
        assert!(!Unit::parse("ExecMainStartTimestampMonotonic=0\n").ran());
    }
}
