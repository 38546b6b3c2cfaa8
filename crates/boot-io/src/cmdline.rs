//! The kernel command line, read as the kernel keeps it: bytes, split as the kernel splits them
//! (`next_arg` in lib/cmdline.c). A byte that is not UTF-8 somewhere on the line (a host name in
//! Latin-1, from a controller's iPXE script) is no reason to read the rest differently.

/// The most of `/proc/cmdline` read: far more than any architecture's `COMMAND_LINE_SIZE`.
pub const MAX_BYTES: u64 = 64 * 1024;

/// `/proc/cmdline` (or a test's file), at most [`MAX_BYTES`].
pub fn read(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut line = Vec::new();
    std::fs::File::open(path)?.take(MAX_BYTES).read_to_end(&mut line)?;
    Ok(line)
}

/// Whitespace as the kernel's `isspace` has it (lib/ctype.c): the ASCII six, and 0xA0, which
/// its Latin-1 table marks as a space too.
pub fn kernel_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | 0xa0)
}

/// The parameters of a kernel command line, as the kernel splits them (`next_arg` in
/// lib/cmdline.c): whitespace separates them except inside double quotes; a parameter may be
/// quoted whole (`"a=b c"`) or in its value (`a="b c"`), and those outer quotes are not part
/// of the value. `(name, value)`; a parameter without `=` has no value.
pub fn kernel_args(cmdline: &[u8]) -> Vec<(&[u8], Option<&[u8]>)> {
    let skip_spaces = |bytes: &[u8]| bytes.iter().position(|&b| !kernel_space(b)).unwrap_or(bytes.len());
    let mut args = Vec::new();
    let mut rest = &cmdline[skip_spaces(cmdline)..];
    while !rest.is_empty() {
        let quoted = rest[0] == b'"';
        let arg_start = usize::from(quoted);
        let mut in_quote = quoted;
        let mut end = rest.len();
        let mut equals = None;
        for (i, &b) in rest.iter().enumerate().skip(arg_start) {
            if kernel_space(b) && !in_quote {
                end = i;
                break;
            }
            if equals.is_none() && b == b'=' {
                equals = Some(i);
            }
            if b == b'"' {
                in_quote = !in_quote;
            }
        }
        let mut arg = &rest[arg_start..end];
        // The closing quote of a parameter quoted whole, or of its value.
        let value_quoted = equals.is_some_and(|i| rest[i + 1..].starts_with(b"\""));
        if (quoted || value_quoted) && arg.ends_with(b"\"") && arg.len() > usize::from(value_quoted) {
            arg = &arg[..arg.len() - 1];
        }
        args.push(match equals {
            Some(i) if i - arg_start <= arg.len() => {
                let (name, value) = (&arg[..i - arg_start], &arg[(i - arg_start + 1).min(arg.len())..]);
                (name, Some(value.strip_prefix(b"\"").unwrap_or(value)))
            }
            _ => (arg, None),
        });
        rest = &rest[end..];
        rest = &rest[skip_spaces(rest)..];
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<(&str, Option<&str>)> {
        let text = |bytes: &[u8]| std::str::from_utf8(bytes).unwrap().to_owned().leak() as &str;
        kernel_args(line.as_bytes()).into_iter().map(|(name, value)| (text(name), value.map(text))).collect()
    }

    #[test]
    fn quoted_values_are_read_as_the_kernel_reads_them() {
        assert_eq!(
            args(r#"a b= c="" "d" e="x y"z f="unterminated g"#),
            [
                ("a", None),
                ("b", Some("")),
                ("c", Some("")),
                ("d", None),
                ("e", Some("x y\"z")),
                ("f", Some("unterminated g"))
            ]
        );
        // Quotes inside a value toggle like any other: the kernel reads this as one parameter.
        assert_eq!(args(r#"h="x"y" i=1"#), [("h", Some("x\"y\" i=1"))]);
        assert_eq!(args("  \t\n"), []);
        // The kernel's whitespace: its ASCII six and Latin-1's no-break space; not Unicode's.
        assert_eq!(
            kernel_args(b"a=1\x0bb=2\xa0c=3"),
            [(&b"a"[..], Some(&b"1"[..])), (b"b", Some(b"2")), (b"c", Some(b"3"))]
        );
        assert_eq!(args("a=1\u{2003}b=2"), [("a", Some("1\u{2003}b=2"))]);
    }

    #[test]
    fn a_byte_that_is_not_utf8_is_a_byte_of_its_parameter() {
        let line = b"quiet hostname=caf\xe9 console=ttyS0\n";
        assert_eq!(
            kernel_args(line),
            [(&b"quiet"[..], None), (b"hostname", Some(&b"caf\xe9"[..])), (b"console", Some(b"ttyS0"))]
        );
    }

    #[test]
    fn the_line_is_read_capped() {
        let dir = std::env::temp_dir().join(format!("boot-io-cmdline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("cmdline");
        std::fs::write(&file, vec![b'a'; MAX_BYTES as usize + 10]).unwrap();
        assert_eq!(read(&file).unwrap().len() as u64, MAX_BYTES);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
