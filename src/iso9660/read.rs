//! Finding a file in an image and reading it as Linux's isofs shows it when the dispatcher mounts
//! the media (no options: Rock Ridge and Joliet on, `map=normal`, `check` unset), so that what
//! `media check` reads is what the boot reads. Each rule below is one of `fs/isofs` (kernel 6.1,
//! Debian 12's):
//!
//! - Which tree (`isofs_fill_super`): the volume descriptors from sector 16 up to 100, the first
//!   primary one, the first Joliet one (which ends the search). Rock Ridge is confirmed by an
//!   `ER` entry of the primary root's `.` record; then the primary tree is read with Rock Ridge
//!   names (unless its root holds fewer than three records and Joliet is there). Else a Joliet
//!   tree wins; else the primary tree, with Rock Ridge names where a record has them.
//! - Names (`isofs_find_entry`): Rock Ridge `NM` (continued entries joined; an `RR` entry
//!   without its `NM` flag, a bad `SP` or an entry shorter than 3 bytes drops the name), a
//!   record with `RE` hidden, an entry that overflows its area hiding the record; otherwise the
//!   Joliet name (UCS-2 to UTF-8, `;1` and trailing dots dropped, compared without case and
//!   trailing dots), otherwise the ISO 9660 name lower-cased with `;1` dropped. Associated files
//!   are hidden. A record shorter than its name ends the search.
//! - Types (`isofs_read_inode`, `parse_rock_ridge_inode`): the directory flag, overridden by
//!   `PX`'s mode; a `CL` entry makes a relocated directory; `ZF` a compressed file.
//! - Data: one extent, or up to 100 sections of a multi-extent file; an interleaved file reads
//!   as empty. Continuation areas: within one block, at most 32 of them for a record.
//!
//! Bounds of this reader beyond the kernel's, so that no image costs more than a few
//! milliseconds and a few kilobytes: a lookup reads at most [`MAX_LOOKUP_SECTORS`] sectors and
//! looks at most at [`MAX_LOOKUP_RECORDS`] records. The image is read in place, a sector at a
//! time; nothing is held but the path being looked up.

use std::fmt;
use std::io;

use super::*;

/// Linux looks for volume descriptors in sectors 16 to 99.
const LAST_DESCRIPTOR: u64 = 100;
/// `RR_MAX_CE_ENTRIES`: continuation areas followed for one record.
const MAX_CONTINUATIONS: u32 = 32;
/// Sections of a multi-extent file that Linux reads.
const MAX_SECTIONS: usize = 100;
/// Names longer than this are truncated by Linux (and so match no name of the media).
const MAX_ROCK_NAME: usize = 254;
/// The most sectors one lookup reads (directories and continuation areas): 8 MiB.
pub const MAX_LOOKUP_SECTORS: u32 = 4096;
/// The most directory records one lookup looks at: far more than a maintenance ISO's largest
/// directory (GRUB's modules, a few hundred), far fewer than a hostile image may claim.
pub const MAX_LOOKUP_RECORDS: u32 = 10_000;

/// Why an image, or a file in it, cannot be read.
#[derive(Debug)]
pub enum Error {
    /// Reading the source failed.
    Io(io::Error),
    /// The image ends before something it says it holds: cut short, or an extent past its end.
    Truncated(String),
    /// Not an ISO 9660 image this reader (and Linux on a CD) takes.
    NotIso(String),
    /// A structure of the image is broken.
    Corrupt(String),
    /// Past a bound of this reader.
    TooLarge(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "cannot be read: {e}"),
            Error::Truncated(what) => write!(f, "ends before {what}: the image is cut short or damaged"),
            Error::NotIso(why) | Error::Corrupt(why) | Error::TooLarge(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for Error {}

impl From<Error> for io::Error {
    /// A cut-short image reads as the end of the data coming too early; a broken or hostile
    /// structure as invalid data.
    fn from(error: Error) -> io::Error {
        match error {
            Error::Io(e) => e,
            e @ Error::Truncated(_) => io::Error::new(io::ErrorKind::UnexpectedEof, e.to_string()),
            e => io::Error::new(io::ErrorKind::InvalidData, e.to_string()),
        }
    }
}

/// What a found name is, as Linux makes the inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Directory,
    Symlink,
    /// A device, a FIFO, a socket, or no type at all: `PX`'s mode.
    Other(u32),
}

/// Where a part of a file's data lies in the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Its first byte.
    pub start: u64,
    pub len: u64,
}

/// A name found in the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub kind: Kind,
    /// A Rock Ridge `ZF` entry: Linux decompresses it (zisofs) on reading.
    pub compressed: bool,
    /// A directory moved by Rock Ridge (`CL`): its records are elsewhere.
    pub relocated: bool,
    /// Its data, in order; all of a file's bytes, as long as Linux says it is.
    pub extents: Vec<Extent>,
}

impl Entry {
    pub fn len(&self) -> u64 {
        self.extents.iter().map(|e| e.len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Which names the image shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Names {
    /// The primary tree, with Rock Ridge names where a record has one; `skip` is the `SP`
    /// entry's count of bytes before each record's entries.
    Rock {
        skip: usize,
    },
    Joliet,
}

/// An image, its tree chosen as Linux chooses it.
#[derive(Debug)]
pub struct Image<S> {
    source: S,
    len: u64,
    names: Names,
    root: Extent,
}

/// What one lookup may still read.
struct Budget {
    sectors: u32,
    records: u32,
}

impl Budget {
    fn new() -> Budget {
        Budget { sectors: MAX_LOOKUP_SECTORS, records: MAX_LOOKUP_RECORDS }
    }

    fn sector(&mut self) -> Result<(), Error> {
        self.sectors = self.sectors.checked_sub(1).ok_or_else(|| {
            Error::TooLarge(format!("its directories take more than {MAX_LOOKUP_SECTORS} sectors to search"))
        })?;
        Ok(())
    }

    fn record(&mut self) -> Result<(), Error> {
        self.records = self.records.checked_sub(1).ok_or_else(|| {
            Error::TooLarge(format!("its directories hold more than {MAX_LOOKUP_RECORDS} records to search"))
        })?;
        Ok(())
    }
}

impl<S: ReadAt> Image<S> {
    /// Reads the volume descriptors and the root of the tree Linux would show, from `source`
    /// of `len` bytes. An error here is one that fails Linux's mount.
    pub fn open(source: S, len: u64) -> Result<Image<S>, Error> {
        let mut image = Image { source, len, names: Names::Joliet, root: Extent { start: 0, len: 0 } };
        let (mut primary, mut joliet) = (None, None);
        let mut sector = [0u8; SECTOR];
        for n in FIRST_DESCRIPTOR..LAST_DESCRIPTOR {
            image.read_exact_at(&mut sector, n * SECTOR_U64, "its volume descriptors end")?;
            if &sector[1..6] == STANDARD_ID {
                match sector[0] {
                    TERMINATOR => break,
                    PRIMARY if primary.is_none() => primary = Some(sector),
                    SUPPLEMENTARY if JOLIET_ESCAPES.contains(&&sector[ESCAPES..ESCAPES + 3]) => {
                        joliet = Some(sector);
                        break;
                    }
                    _ => {}
                }
            } else if &sector[9..14] == b"CDROM" {
                return Err(Error::NotIso("it is a High Sierra image, which is not read".into()));
            }
        }
        let descriptor = primary.or(joliet).ok_or_else(|| Error::NotIso("it holds no ISO 9660 volume".into()))?;
        let block = le_u16(&descriptor, BLOCK_SIZE_FIELD);
        if usize::from(block) != SECTOR {
            return Err(Error::NotIso(format!(
                "its logical block is {block} bytes; only {SECTOR}-byte blocks are read"
            )));
        }
        let zone = |d: &[u8; SECTOR]| {
            let root = &d[ROOT_RECORD..ROOT_RECORD + 34];
            u64::from(le_u32(root, 2)) + u64::from(root[1])
        };
        let mut root = image.root_of(zone(&descriptor), primary.is_some())?;
        // Rock Ridge is taken when confirmed (unless the primary root looks broken beside a
        // Joliet tree), or when there is no Joliet tree to take instead.
        let broken_beside_joliet = joliet.is_some() && image.fewer_than_three_records(zone(&descriptor))?;
        let rock = primary.is_some() && (root.rock_confirmed && !broken_beside_joliet || joliet.is_none());
        image.names = match (rock, &joliet) {
            (true, _) | (false, None) => Names::Rock { skip: root.skip },
            (false, Some(joliet)) => {
                if primary.is_some() {
                    root = image.root_of(zone(joliet), false)?;
                }
                Names::Joliet
            }
        };
        if root.kind != Kind::Directory {
            return Err(Error::NotIso("its root directory is not a directory".into()));
        }
        image.root = root.extent;
        Ok(image)
    }

    /// The entry at `path` (names joined by `/`, from the root), or `None` if a name is not
    /// there. A name before the last must be a directory.
    pub fn lookup(&self, path: &str) -> Result<Option<Entry>, Error> {
        let mut budget = Budget::new();
        let mut dir = self.root;
        let mut names = path.split('/').filter(|n| !n.is_empty()).peekable();
        while let Some(name) = names.next() {
            let Some(entry) = self.find(dir, name.as_bytes(), &mut budget)? else { return Ok(None) };
            if names.peek().is_none() {
                return Ok(Some(entry));
            }
            match (entry.kind, entry.relocated, entry.extents.as_slice()) {
                (Kind::Directory, false, [extent]) => dir = *extent,
                _ => return Err(Error::Corrupt(format!("{name} is not a directory that can be searched"))),
            }
        }
        Ok(Some(Entry { kind: Kind::Directory, compressed: false, relocated: false, extents: vec![self.root] }))
    }

    /// The data of `entry`, to read.
    pub fn data<'a>(&'a self, entry: &Entry) -> Data<'a, S> {
        Data { image: self, extents: entry.extents.clone(), at: 0, offset: 0 }
    }

    /// The root directory's `.` record in zone `zone`, as an inode (Rock Ridge looked for when
    /// `rock`): its type, its extent, and what Rock Ridge's `SP` and `ER` said.
    fn root_of(&self, zone: u64, rock: bool) -> Result<Root, Error> {
        let mut header = [0u8; 1];
        let start = zone * SECTOR_U64;
        self.read_exact_at(&mut header, start, "its root directory")?;
        let mut record = vec![0u8; usize::from(header[0])];
        self.read_exact_at(&mut record, start, "its root directory")?;
        if record.len() < RECORD_HEADER + 1 || record.len() < RECORD_HEADER + usize::from(record[32]) {
            return Err(Error::NotIso("the first record of its root directory is corrupt".into()));
        }
        let mut root =
            Root { kind: Kind::Directory, extent: Extent { start: 0, len: 0 }, rock_confirmed: false, skip: 0 };
        let inode = self.inode(&record, rock.then_some(&mut root), &mut Budget::new())?;
        root.kind = inode.kind;
        root.extent = inode.extents.first().copied().unwrap_or(Extent { start: 0, len: 0 });
        Ok(root)
    }

    /// Linux's `rootdir_empty`: the first sector of the primary root holds fewer than three
    /// records (a broken primary tree beside a good Joliet one).
    fn fewer_than_three_records(&self, zone: u64) -> Result<bool, Error> {
        let mut sector = [0u8; SECTOR];
        self.read_exact_at(&mut sector, zone * SECTOR_U64, "its root directory")?;
        let (mut at, mut records) = (0, 0);
        while records < 3 && at < SECTOR && sector[at] != 0 {
            records += 1;
            at += usize::from(sector[at]);
        }
        Ok(records < 3)
    }

    /// The entry named `name` in `dir`, as `isofs_find_entry` finds it.
    fn find(&self, dir: Extent, name: &[u8], budget: &mut Budget) -> Result<Option<Entry>, Error> {
        let allocated = dir.len.next_multiple_of(SECTOR_U64);
        let mut sector = Sector::new(self);
        let mut at = 0;
        while at < dir.len {
            let record_len = sector.byte(dir.start + at, budget)?;
            if record_len == 0 {
                at = (at + 1).next_multiple_of(SECTOR_U64);
                continue;
            }
            budget.record()?;
            let position = at;
            at += u64::from(record_len);
            if at > allocated {
                return Err(Error::Corrupt(format!("a record at byte {position} of a directory runs past its end")));
            }
            let record = sector.bytes(dir.start + position, usize::from(record_len), budget)?;
            if record.len() < RECORD_HEADER || record.len() < RECORD_HEADER + usize::from(record[32]) {
                return Err(Error::Corrupt(format!(
                    "the record at byte {position} of a directory is shorter than its name"
                )));
            }
            if record[25] & FLAG_ASSOCIATED != 0 {
                continue;
            }
            let shown = match self.names {
                Names::Rock { .. } => match self.rock_name(&record, budget)? {
                    RockName::Name(shown) => shown,
                    RockName::Hidden => continue,
                    RockName::None => translated(&record),
                },
                Names::Joliet => joliet(&record),
            };
            if shown.is_empty() || (shown.len() == 1 && shown[0] <= 1) {
                continue;
            }
            let same = match self.names {
                Names::Joliet => trim_dots(&shown).eq_ignore_ascii_case(trim_dots(name)),
                Names::Rock { .. } => shown == name,
            };
            if same {
                let mut inode = self.inode(&record, None, budget)?;
                if record[25] & FLAG_MULTI_EXTENT != 0 && inode.kind == Kind::File {
                    inode.extents = self.sections(dir.start + position, budget)?;
                }
                return Ok(Some(inode));
            }
        }
        Ok(None)
    }

    /// A record as an inode: its type and data, what Rock Ridge says of it. With `root`, this
    /// is the root's `.` and its `SP` and `ER` are noted there.
    fn inode(&self, record: &[u8], mut root: Option<&mut Root>, budget: &mut Budget) -> Result<Entry, Error> {
        let flags = record[25];
        let mut mode = if flags & FLAG_DIRECTORY != 0 { S_IFDIR } else { S_IFREG };
        let (mut relocated, mut compressed) = (false, false);
        let rock = root.is_some() || matches!(self.names, Names::Rock { .. });
        if rock {
            let skip = root.as_ref().map_or_else(|| self.skip(), |r| r.skip);
            self.walk(record, skip, budget, |entry| {
                let bytes = entry.bytes;
                match entry.kind() {
                    b"SP" if bytes[4..6] != [0xBE, 0xEF] => return Walk::Stop,
                    b"SP" => {
                        if let Some(root) = root.as_deref_mut() {
                            root.skip = usize::from(bytes[6]);
                        }
                    }
                    b"ER" if usize::from(bytes[4]) + 8 > entry.len => return Walk::Stop,
                    b"ER" => {
                        if let Some(root) = root.as_deref_mut() {
                            root.rock_confirmed = true;
                        }
                    }
                    b"PX" => mode = le_u32(bytes, 4),
                    b"CL" => relocated = true,
                    b"RE" => return Walk::Stop,
                    // zisofs, with a block size Linux takes (up to 2^17).
                    b"ZF" if &bytes[4..6] == b"pz" && bytes[7] <= 17 => compressed = true,
                    _ => {}
                }
                Walk::Next
            })?;
        }
        let kind = match mode & S_IFMT {
            _ if relocated => Kind::Directory,
            S_IFREG => Kind::File,
            S_IFDIR => Kind::Directory,
            S_IFLNK => Kind::Symlink,
            _ => Kind::Other(mode),
        };
        // Interleaved files are read as empty (`Interleaved files not (yet) supported`).
        let len = if record[27] != 0 { 0 } else { u64::from(le_u32(record, 10)) };
        let extent = Extent { start: first_sector(record) * SECTOR_U64, len };
        Ok(Entry { kind, compressed, relocated, extents: vec![extent] })
    }

    fn skip(&self) -> usize {
        match self.names {
            Names::Rock { skip } => skip,
            Names::Joliet => 0,
        }
    }

    /// A multi-extent file's sections, from its first record at `at` (`isofs_read_level3_size`):
    /// each record after it is the next section while the one before says more follow.
    fn sections(&self, mut at: u64, budget: &mut Budget) -> Result<Vec<Extent>, Error> {
        let mut sector = Sector::new(self);
        let mut sections: Vec<Extent> = Vec::new();
        loop {
            let record_len = sector.byte(at, budget)?;
            if record_len == 0 {
                at = (at + 1).next_multiple_of(SECTOR_U64);
                continue;
            }
            let record = sector.bytes(at, usize::from(record_len), budget)?;
            if record.len() < RECORD_HEADER {
                return Err(Error::Corrupt("a section of a multi-extent file has a corrupt record".into()));
            }
            let extent = Extent { start: first_sector(&record) * SECTOR_U64, len: u64::from(le_u32(&record, 10)) };
            if sections.last().is_some_and(|before| before.len % SECTOR_U64 != 0) {
                return Err(Error::Corrupt(
                    "a section of a multi-extent file before its last is not whole blocks".into(),
                ));
            }
            sections.push(extent);
            if record[25] & FLAG_MULTI_EXTENT == 0 {
                return Ok(sections);
            }
            if sections.len() > MAX_SECTIONS {
                return Err(Error::TooLarge(format!("a file is in more than {MAX_SECTIONS} sections")));
            }
            at += u64::from(record_len);
        }
    }

    /// A record's Rock Ridge name, as `get_rock_ridge_filename` reads it.
    fn rock_name(&self, record: &[u8], budget: &mut Budget) -> Result<RockName, Error> {
        let (mut name, mut truncated, mut hidden) = (Vec::new(), false, false);
        let walked = self.walk(record, self.skip(), budget, |entry| {
            let bytes = entry.bytes;
            match entry.kind() {
                b"RR" if bytes[4] & 8 == 0 => return Walk::Stop,
                b"SP" if bytes[4..6] != [0xBE, 0xEF] => return Walk::Stop,
                // Linux takes the name of neither `.` nor `..`, nor of unknown flags.
                b"NM" if truncated || entry.len < 5 || bytes[4] & !1 != 0 => {}
                b"NM" if name.len() + entry.len - 5 >= MAX_ROCK_NAME => truncated = true,
                // A NUL ends the C string Linux builds, not its count: no name matches that.
                b"NM" if bytes[5..entry.len].contains(&0) => hidden = true,
                b"NM" => name.extend_from_slice(&bytes[5..entry.len]),
                b"RE" => {
                    hidden = true;
                    return Walk::Stop;
                }
                _ => {}
            }
            Walk::Next
        })?;
        Ok(match walked {
            _ if hidden => RockName::Hidden,
            Walked::Broken => RockName::Hidden,
            Walked::Stopped => RockName::None,
            Walked::Done if name.is_empty() => RockName::None,
            Walked::Done => RockName::Name(name),
        })
    }

    /// Walks the System Use entries of `record` (after `skip` bytes of it), continuation areas
    /// included, as `rock.c` does; `visit` sees each entry but `CE`, whole and at least as long
    /// as its kind requires.
    fn walk(
        &self,
        record: &[u8],
        skip: usize,
        budget: &mut Budget,
        mut visit: impl FnMut(SystemUse) -> Walk,
    ) -> Result<Walked, Error> {
        let mut start = RECORD_HEADER + usize::from(record[32]);
        start += start % 2 + skip;
        let mut area = record.get(start..).unwrap_or_default().to_vec();
        let mut continuations = 0;
        loop {
            let mut continuation = None;
            let mut rest = area.as_slice();
            while rest.len() > 2 {
                let len = usize::from(rest[2]);
                if len < 3 {
                    return Ok(Walked::Stopped);
                }
                let least = least_len(&rest[..2]);
                if least > rest.len() {
                    return Ok(Walked::Broken);
                }
                if len > rest.len() {
                    return Ok(Walked::Stopped);
                }
                // An entry's fields are read where its kind puts them, past its own length if
                // it says it is shorter (Linux reads them so); it ends where its length says.
                let entry = SystemUse { bytes: &rest[..len.max(least)], len };
                rest = &rest[len..];
                if entry.kind() == b"CE" {
                    let bytes = entry.bytes;
                    continuation = Some((le_u32(bytes, 4), le_u32(bytes, 12), le_u32(bytes, 20)));
                } else if visit(entry) == Walk::Stop {
                    return Ok(Walked::Stopped);
                }
            }
            let Some((block, offset, size)) = continuation else { return Ok(Walked::Done) };
            let (offset, size) = (offset as usize, size as usize);
            if offset > SECTOR - 4 || size > SECTOR || offset + size > SECTOR {
                return Ok(Walked::Broken);
            }
            if block == 0 {
                return Ok(Walked::Done);
            }
            continuations += 1;
            if continuations >= MAX_CONTINUATIONS {
                return Ok(Walked::Broken);
            }
            budget.sector()?;
            let mut sector = [0u8; SECTOR];
            if read_at_most(&self.source, &mut sector, u64::from(block) * SECTOR_U64).map_err(Error::Io)? < SECTOR {
                return Ok(Walked::Broken);
            }
            area = sector[offset..offset + size].to_vec();
        }
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64, what: &str) -> Result<(), Error> {
        if offset.checked_add(buf.len() as u64).is_none_or(|end| end > self.len)
            || read_at_most(&self.source, buf, offset).map_err(Error::Io)? < buf.len()
        {
            return Err(Error::Truncated(what.to_owned()));
        }
        Ok(())
    }
}

/// A System Use entry: its bytes, at least as many as its kind's fields take, and its length.
#[derive(Clone, Copy)]
struct SystemUse<'a> {
    bytes: &'a [u8],
    len: usize,
}

impl SystemUse<'_> {
    fn kind(&self) -> &[u8] {
        &self.bytes[..2]
    }
}

/// What the root's `.` record says.
struct Root {
    kind: Kind,
    extent: Extent,
    /// An `ER` entry: Rock Ridge in use (`s_rock = 1`).
    rock_confirmed: bool,
    skip: usize,
}

enum RockName {
    /// No `NM`: the record's other name is shown.
    None,
    Name(Vec<u8>),
    /// Not shown at all.
    Hidden,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Walk {
    Next,
    Stop,
}

/// How a walk over System Use entries ended: every entry seen, stopped early (Linux's `out`,
/// what was read stands), or broken (Linux's `-EIO`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Walked {
    Done,
    Stopped,
    Broken,
}

/// `rock_check_overflow`: the bytes an entry of each kind needs.
fn least_len(signature: &[u8]) -> usize {
    4 + match signature {
        b"SP" => 3,
        b"CE" => 24,
        b"ER" => 4,
        b"RR" | b"NM" | b"TF" => 1,
        b"PX" => 32,
        b"PN" => 16,
        b"SL" => 3,
        b"CL" | b"PL" => 8,
        b"ZF" => 12,
        _ => 0,
    }
}

/// The sector a record's data starts at: its extent after its extended attributes.
fn first_sector(record: &[u8]) -> u64 {
    u64::from(le_u32(record, 2)) + u64::from(record[1])
}

/// The ISO 9660 name as `isofs_name_translate` shows it: lower case, `;1` (and a `.` right
/// before it) dropped, other `;` and `/` as `.`, up to a NUL.
fn translated(record: &[u8]) -> Vec<u8> {
    let id = &record[RECORD_HEADER..RECORD_HEADER + usize::from(record[32])];
    let mut name = Vec::with_capacity(id.len());
    for (i, &c) in id.iter().enumerate() {
        match c {
            0 => break,
            b'.' if i + 3 == id.len() && &id[i + 1..] == b";1" => break,
            b';' if i + 2 == id.len() && id[i + 1] == b'1' => break,
            b';' | b'/' => name.push(b'.'),
            c => name.push(c.to_ascii_lowercase()),
        }
    }
    name
}

/// The Joliet name as `get_joliet_filename` shows it (UTF-8, the kernel's default character
/// set): UCS-2 units up to a NUL, each not a character as `?`; `;1` and trailing dots dropped.
fn joliet(record: &[u8]) -> Vec<u8> {
    let id = &record[RECORD_HEADER..RECORD_HEADER + usize::from(record[32])];
    let mut name = String::new();
    for unit in id.chunks_exact(2).map(|pair| u16::from_be_bytes([pair[0], pair[1]])) {
        if unit == 0 {
            break;
        }
        name.push(char::from_u32(unit.into()).unwrap_or('?'));
    }
    let mut name = name.into_bytes();
    if name.len() > 2 && name.ends_with(b";1") {
        name.truncate(name.len() - 2);
    }
    while name.len() >= 2 && name.last() == Some(&b'.') {
        name.pop();
    }
    name
}

/// A name without its trailing dots (Joliet's names compare so).
fn trim_dots(name: &[u8]) -> &[u8] {
    let end = name.iter().rposition(|&c| c != b'.').map_or(0, |last| last + 1);
    &name[..end]
}

/// The sector last read of a directory, so that its records are read a sector at a time.
struct Sector<'a, S> {
    image: &'a Image<S>,
    number: Option<u64>,
    bytes: [u8; SECTOR],
}

impl<'a, S: ReadAt> Sector<'a, S> {
    fn new(image: &'a Image<S>) -> Self {
        Sector { image, number: None, bytes: [0; SECTOR] }
    }

    fn load(&mut self, number: u64, budget: &mut Budget) -> Result<(), Error> {
        if self.number != Some(number) {
            budget.sector()?;
            self.image.read_exact_at(&mut self.bytes, number * SECTOR_U64, "a directory's records")?;
            self.number = Some(number);
        }
        Ok(())
    }

    fn byte(&mut self, at: u64, budget: &mut Budget) -> Result<u8, Error> {
        self.load(at / SECTOR_U64, budget)?;
        Ok(self.bytes[(at % SECTOR_U64) as usize])
    }

    /// `len` bytes from `at`, across a sector boundary if a record lies so.
    fn bytes(&mut self, at: u64, len: usize, budget: &mut Budget) -> Result<Vec<u8>, Error> {
        let mut out = Vec::with_capacity(len);
        let mut at = at;
        while out.len() < len {
            self.load(at / SECTOR_U64, budget)?;
            let offset = (at % SECTOR_U64) as usize;
            let take = (len - out.len()).min(SECTOR - offset);
            out.extend_from_slice(&self.bytes[offset..offset + take]);
            at += take as u64;
        }
        Ok(out)
    }
}

/// A file's data, read in order; past the image's end, an error (Linux's `EIO`).
pub struct Data<'a, S> {
    image: &'a Image<S>,
    extents: Vec<Extent>,
    /// The extent being read, and the offset in it.
    at: usize,
    offset: u64,
}

impl<S: ReadAt> io::Read for Data<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while let Some(extent) = self.extents.get(self.at) {
            let left = extent.len - self.offset;
            if left == 0 {
                self.at += 1;
                self.offset = 0;
                continue;
            }
            let n = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            self.image.read_exact_at(&mut buf[..n], extent.start + self.offset, "a file's data")?;
            self.offset += n as u64;
            return Ok(n);
        }
        Ok(0)
    }
}
