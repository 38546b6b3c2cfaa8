//! An image of a few files, as `xorriso -as mkisofs -R -J` would lay them out: a primary tree
//! whose Rock Ridge entries carry the real names and types (what Linux shows when Rock Ridge is
//! there), and a Joliet tree of the same files (what other systems show). The same entries give
//! the same bytes: no clock is read (every date is 1980-01-01), and every list is sorted.
//!
//! Layout, in sectors: 16 empty, the primary and Joliet descriptors and the terminator, the
//! four path tables, the continuation area holding Rock Ridge's `ER`, the primary tree's
//! directories, the Joliet tree's, each file's data, and 150 empty sectors.

use std::io;

use super::*;

/// What an image holds: files for media (`media build`); links and directories only for the
/// tests' hostile media.
#[derive(Debug, Clone, Copy)]
pub enum Node<'a> {
    File(&'a [u8]),
    Symlink(&'a str),
    Directory(&'a [Entry<'a>]),
}

/// A named node. Names are what Linux shows (Rock Ridge `NM`) and Joliet holds.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    pub name: &'a str,
    pub node: Node<'a>,
}

impl<'a> Entry<'a> {
    pub fn file(name: &'a str, bytes: &'a [u8]) -> Entry<'a> {
        Entry { name, node: Node::File(bytes) }
    }
}

/// Names longer than this do not fit one directory record with their Rock Ridge entries (nor
/// Joliet's 64 characters).
const MAX_NAME: usize = 64;
/// Rock Ridge's extension reference (RRIP 1.10), in the root's continuation area.
const RRIP_ID: &str = "RRIP_1991A";
const RRIP_DESCRIPTOR: &str = "THE ROCK RIDGE INTERCHANGE PROTOCOL PROVIDES SUPPORT FOR POSIX FILE SYSTEM SEMANTICS";
const RRIP_SOURCE: &str = "PLEASE CONTACT DISC PUBLISHER FOR SPECIFICATION SOURCE.  SEE PUBLISHER IDENTIFIER IN PRIMARY VOLUME DESCRIPTOR FOR CONTACT INFORMATION.";
/// Every date of the image: 1980-01-01 00:00:00 UTC, as a directory record has it.
const DATE: [u8; 7] = [80, 1, 1, 0, 0, 0, 0];
const DESCRIPTOR_DATE: &[u8; 16] = b"1980010100000000";
const APPLICATION: &str = "PROVISION-DISPATCHER MEDIA BUILD";
/// Empty sectors after the last file, as mkisofs adds (`-pad`): a CD drive's read-ahead past
/// the last file then reads padding, not past the end of the medium (and xorriso counts the
/// session's blocks only with them).
const PADDING: u32 = 150;

/// The image of `entries` at the root, with `volume_id` (at most 32 printable ASCII
/// characters). Refused: a name that is empty, `.` or `..`, longer than 64 bytes, or holds a
/// character other than printable ASCII or one of `/\:;*?`; a name twice in one directory; a
/// file of 4 GiB or more.
pub fn image(volume_id: &str, entries: &[Entry<'_>]) -> io::Result<Vec<u8>> {
    if volume_id.is_empty() || volume_id.len() > 32 || !volume_id.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        return Err(invalid(format!("volume id {volume_id:?}: 1 to 32 printable ASCII characters")));
    }
    let nodes = flatten(entries)?;
    let primary = Tree::new(&nodes, Names::Primary);
    let joliet = Tree::new(&nodes, Names::Joliet);
    let mut next = FIRST_DESCRIPTOR as u32 + 3;
    let mut tables = |tree: &Tree| {
        let sectors = tree.path_table_len().div_ceil(SECTOR) as u32;
        let at = [next, next + sectors];
        next += 2 * sectors;
        at
    };
    let tables = [tables(&primary), tables(&joliet)];
    let continuation = next;
    next += 1;
    let lens = [primary.dir_lens(), joliet.dir_lens()];
    let mut place = |lens: &[usize]| -> Vec<u32> {
        lens.iter()
            .map(|len| {
                let at = next;
                next += (len / SECTOR) as u32;
                at
            })
            .collect()
    };
    let dirs = [place(&lens[0]), place(&lens[1])];
    let mut data = vec![0u32; nodes.len()];
    // In the primary tree's order, which the order of `entries` does not change.
    for &i in primary.dirs.iter().flat_map(|&dir| &primary.children[dir]) {
        if let Kind::File(bytes) = nodes[i].kind {
            data[i] = next;
            next = u32::try_from(bytes.len().div_ceil(SECTOR))
                .ok()
                .and_then(|sectors| next.checked_add(sectors))
                .ok_or_else(|| invalid("the image would be larger than ISO 9660 allows"))?;
        }
    }
    let total = next + PADDING;
    let mut out = vec![0u8; total as usize * SECTOR];
    for (i, tree) in [&primary, &joliet].into_iter().enumerate() {
        let places = Places { dirs: &dirs[i], lens: &lens[i], data: &data, continuation };
        let descriptor = Descriptor {
            volume_id,
            total,
            tables: tables[i],
            table_len: tree.path_table_len(),
            root: (dirs[i][0], lens[i][0]),
        };
        descriptor.write(tree.names, sector_mut(&mut out, FIRST_DESCRIPTOR as u32 + i as u32));
        tree.write_path_tables(&places, tables[i], &mut out);
        tree.write_directories(&places, &mut out);
    }
    let end = sector_mut(&mut out, FIRST_DESCRIPTOR as u32 + 2);
    end[0] = TERMINATOR;
    end[1..6].copy_from_slice(STANDARD_ID);
    end[6] = 1;
    write_er(sector_mut(&mut out, continuation));
    for (node, &at) in nodes.iter().zip(&data) {
        if let Kind::File(bytes) = node.kind {
            let start = at as usize * SECTOR;
            out[start..start + bytes.len()].copy_from_slice(bytes);
        }
    }
    Ok(out)
}

fn invalid(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message.into())
}

fn sector_mut(out: &mut [u8], sector: u32) -> &mut [u8] {
    let start = sector as usize * SECTOR;
    &mut out[start..start + SECTOR]
}

/// A node of the tree, the root first, each directory's children by index.
struct Flat<'a> {
    name: &'a str,
    parent: usize,
    kind: Kind<'a>,
}

enum Kind<'a> {
    File(&'a [u8]),
    Symlink(&'a str),
    Directory(Vec<usize>),
}

fn flatten<'a>(entries: &'a [Entry<'a>]) -> io::Result<Vec<Flat<'a>>> {
    let mut nodes = vec![Flat { name: "", parent: 0, kind: Kind::Directory(Vec::new()) }];
    let mut pending = vec![(0, entries)];
    while let Some((parent, entries)) = pending.pop() {
        let mut children = Vec::new();
        for entry in entries {
            check_name(entry.name)?;
            if entries.iter().filter(|e| e.name == entry.name).count() > 1 {
                return Err(invalid(format!("{:?} is named twice in one directory", entry.name)));
            }
            let kind = match entry.node {
                Node::File(bytes) if u32::try_from(bytes.len()).is_err() => {
                    return Err(invalid(format!("{:?} is 4 GiB or larger", entry.name)))
                }
                Node::File(bytes) => Kind::File(bytes),
                Node::Symlink(target) if target.is_empty() || target.len() > 200 => {
                    return Err(invalid(format!("{:?}: a link's target is 1 to 200 bytes", entry.name)))
                }
                Node::Symlink(target) => Kind::Symlink(target),
                Node::Directory(inner) => {
                    pending.push((nodes.len(), inner));
                    Kind::Directory(Vec::new())
                }
            };
            children.push(nodes.len());
            nodes.push(Flat { name: entry.name, parent, kind });
        }
        if let Kind::Directory(list) = &mut nodes[parent].kind {
            *list = children;
        }
    }
    Ok(nodes)
}

fn check_name(name: &str) -> io::Result<()> {
    let bad = |b: u8| !b.is_ascii_graphic() && b != b' ' || b"/\\:;*?".contains(&b);
    if name.is_empty() || name == "." || name == ".." || name.len() > MAX_NAME || name.bytes().any(bad) {
        return Err(invalid(format!(
            "name {name:?}: 1 to {MAX_NAME} printable ASCII characters, none of /\\:;*?, not . or .."
        )));
    }
    Ok(())
}

/// Which directory tree: ISO 9660 names with Rock Ridge, or Joliet's UCS-2 names.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Names {
    Primary,
    Joliet,
}

/// Where things went: each directory of a tree (sector, bytes, in path-table order), each
/// file (its first sector, by node), the continuation area.
struct Places<'a> {
    dirs: &'a [u32],
    lens: &'a [usize],
    data: &'a [u32],
    continuation: u32,
}

/// One tree: its directories in path-table order (breadth first, by parent, by name), each
/// directory's children sorted by their identifier in this tree.
struct Tree<'a> {
    names: Names,
    nodes: &'a [Flat<'a>],
    /// Node indices of the directories, the root first.
    dirs: Vec<usize>,
    /// For each node: its identifier in this tree.
    ids: Vec<Vec<u8>>,
    /// For each directory (by node index): its children in record order.
    children: Vec<Vec<usize>>,
}

impl<'a> Tree<'a> {
    fn new(nodes: &'a [Flat<'a>], names: Names) -> Tree<'a> {
        let mut ids = vec![vec![0u8]; nodes.len()];
        let mut children = vec![Vec::new(); nodes.len()];
        for (index, node) in nodes.iter().enumerate() {
            let Kind::Directory(list) = &node.kind else { continue };
            // Joliet has no symbolic links: they are left out of its tree, as mkisofs does.
            let mut list: Vec<usize> = list
                .iter()
                .copied()
                .filter(|&c| names == Names::Primary || !matches!(nodes[c].kind, Kind::Symlink(_)))
                .collect();
            // Identifiers are given in the names' order, so that the entries' order changes none.
            list.sort_by_key(|&c| nodes[c].name);
            let mut taken: Vec<Vec<u8>> = Vec::new();
            for &child in &list {
                let is_dir = matches!(nodes[child].kind, Kind::Directory(_));
                let id = match names {
                    Names::Primary => iso_identifier(nodes[child].name, is_dir, &taken),
                    Names::Joliet => joliet_identifier(nodes[child].name, is_dir),
                };
                taken.push(id.clone());
                ids[child] = id;
            }
            let mut sorted = list;
            sorted.sort_by(|&a, &b| ids[a].cmp(&ids[b]));
            children[index] = sorted;
        }
        let mut dirs = vec![0];
        let mut at = 0;
        while at < dirs.len() {
            let subdirs = children[dirs[at]].iter().copied().filter(|&c| matches!(nodes[c].kind, Kind::Directory(_)));
            dirs.extend(subdirs.collect::<Vec<_>>());
            at += 1;
        }
        Tree { names, nodes, dirs, ids, children }
    }

    /// The records of directory `dir` (a node index), each as its bytes, `.` and `..` first.
    /// Their lengths do not depend on `places`.
    fn records(&self, dir: usize, places: &Places) -> Vec<Vec<u8>> {
        let at = |node: usize| {
            let number = self.dirs.iter().position(|&d| d == node).expect("a directory");
            (places.dirs[number], places.lens[number] as u32)
        };
        let parent = self.nodes[dir].parent;
        let mut records = vec![
            record(&[0], at(dir), FLAG_DIRECTORY, self.own_entries(dir, true, places.continuation)),
            record(&[1], at(parent), FLAG_DIRECTORY, self.own_entries(dir, false, places.continuation)),
        ];
        for &child in &self.children[dir] {
            let (extent, flags) = match self.nodes[child].kind {
                Kind::File(bytes) => ((places.data[child], bytes.len() as u32), 0),
                Kind::Symlink(_) => ((0, 0), 0),
                Kind::Directory(_) => (at(child), FLAG_DIRECTORY),
            };
            records.push(record(&self.ids[child], extent, flags, self.rock_ridge(child)));
        }
        records
    }

    /// Each directory's size, in path-table order: its records, none across a sector boundary,
    /// in whole sectors.
    fn dir_lens(&self) -> Vec<usize> {
        let (dirs, lens, data) = (vec![0; self.dirs.len()], vec![0; self.dirs.len()], vec![0; self.nodes.len()]);
        let places = Places { dirs: &dirs, lens: &lens, data: &data, continuation: 0 };
        let len = |dir: usize| {
            let mut len = 0;
            for record in self.records(dir, &places) {
                if len % SECTOR + record.len() > SECTOR {
                    len = len.next_multiple_of(SECTOR);
                }
                len += record.len();
            }
            len.next_multiple_of(SECTOR)
        };
        self.dirs.iter().map(|&dir| len(dir)).collect()
    }

    fn write_directories(&self, places: &Places, out: &mut [u8]) {
        for (number, &dir) in self.dirs.iter().enumerate() {
            let mut at = places.dirs[number] as usize * SECTOR;
            for record in self.records(dir, places) {
                if at % SECTOR + record.len() > SECTOR {
                    at = at.next_multiple_of(SECTOR);
                }
                out[at..at + record.len()].copy_from_slice(&record);
                at += record.len();
            }
        }
    }

    /// Rock Ridge entries of a directory's `.` (`current`) or `..` record: its type, and on the
    /// root's `.` the SUSP indicator and the continuation holding `ER`.
    fn own_entries(&self, dir: usize, current: bool, continuation: u32) -> Vec<u8> {
        if self.names == Names::Joliet {
            return Vec::new();
        }
        let mut entries = Vec::new();
        if dir == 0 && current {
            entries.extend_from_slice(&[b'S', b'P', 7, 1, 0xBE, 0xEF, 0]);
        }
        entries.extend(px(S_IFDIR | 0o555, 2));
        if dir == 0 && current {
            entries.extend_from_slice(&[b'C', b'E', 28, 1]);
            entries.extend_from_slice(&both_u32(continuation));
            entries.extend_from_slice(&both_u32(0));
            entries.extend_from_slice(&both_u32(er().len() as u32));
        }
        entries
    }

    /// Rock Ridge entries of a child: its type (`PX`), its name (`NM`), a link's target (`SL`).
    fn rock_ridge(&self, node: usize) -> Vec<u8> {
        if self.names == Names::Joliet {
            return Vec::new();
        }
        let flat = &self.nodes[node];
        let mut entries = match flat.kind {
            Kind::File(_) => px(S_IFREG | 0o444, 1),
            Kind::Symlink(_) => px(S_IFLNK | 0o777, 1),
            Kind::Directory(_) => px(S_IFDIR | 0o555, 2),
        };
        entries.extend_from_slice(&[b'N', b'M', 5 + flat.name.len() as u8, 1, 0]);
        entries.extend_from_slice(flat.name.as_bytes());
        if let Kind::Symlink(target) = flat.kind {
            entries.extend(sl(target));
        }
        entries
    }

    /// The path table's length in bytes (9.4).
    fn path_table_len(&self) -> usize {
        self.dirs.iter().map(|&d| 8 + self.ids[d].len().next_multiple_of(2)).sum()
    }

    fn write_path_tables(&self, places: &Places, [little, big]: [u32; 2], out: &mut [u8]) {
        let mut tables = [Vec::new(), Vec::new()];
        for (number, &dir) in self.dirs.iter().enumerate() {
            let parent = self.dirs.iter().position(|&d| d == self.nodes[dir].parent).unwrap_or(0) as u16 + 1;
            let id = &self.ids[dir];
            for (table, big_endian) in tables.iter_mut().zip([false, true]) {
                table.push(id.len() as u8);
                table.push(0);
                let (place, parent) = match big_endian {
                    false => (places.dirs[number].to_le_bytes(), parent.to_le_bytes()),
                    true => (places.dirs[number].to_be_bytes(), parent.to_be_bytes()),
                };
                table.extend_from_slice(&place);
                table.extend_from_slice(&parent);
                table.extend_from_slice(id);
                if id.len() % 2 == 1 {
                    table.push(0);
                }
            }
        }
        for (table, sector) in tables.iter().zip([little, big]) {
            let start = sector as usize * SECTOR;
            out[start..start + table.len()].copy_from_slice(table);
        }
    }
}

/// A directory record (9.1): `extent` is (sector, bytes).
pub(super) fn record(id: &[u8], (sector, len): (u32, u32), flags: u8, system_use: Vec<u8>) -> Vec<u8> {
    let mut record = vec![0u8; RECORD_HEADER];
    record[2..10].copy_from_slice(&both_u32(sector));
    record[10..18].copy_from_slice(&both_u32(len));
    record[18..25].copy_from_slice(&DATE);
    record[25] = flags;
    record[28..32].copy_from_slice(&both_u16(1));
    record[32] = id.len() as u8;
    record.extend_from_slice(id);
    if id.len().is_multiple_of(2) {
        record.push(0);
    }
    record.extend_from_slice(&system_use);
    if !record.len().is_multiple_of(2) {
        record.push(0);
    }
    record[0] = record.len() as u8;
    record
}

/// `PX`: POSIX mode and link count, owner and group root (RRIP 1.10's 36 bytes).
pub(super) fn px(mode: u32, links: u32) -> Vec<u8> {
    let mut entry = vec![b'P', b'X', 36, 1];
    for value in [mode, links, 0, 0] {
        entry.extend_from_slice(&both_u32(value));
    }
    entry
}

/// `SL`: a link's target, one component per path segment (`/` at the start is the root).
fn sl(target: &str) -> Vec<u8> {
    let mut components = Vec::new();
    if target.starts_with('/') {
        components.extend_from_slice(&[8, 0]);
    }
    for part in target.split('/').filter(|p| !p.is_empty()) {
        match part {
            "." => components.extend_from_slice(&[2, 0]),
            ".." => components.extend_from_slice(&[4, 0]),
            _ => {
                components.extend_from_slice(&[0, part.len() as u8]);
                components.extend_from_slice(part.as_bytes());
            }
        }
    }
    let mut entry = vec![b'S', b'L', 5 + components.len() as u8, 1, 0];
    entry.extend(components);
    entry
}

/// `ER`: the extension reference that tells readers Rock Ridge is in use.
fn er() -> Vec<u8> {
    let (id, descriptor, source) = (RRIP_ID.as_bytes(), RRIP_DESCRIPTOR.as_bytes(), RRIP_SOURCE.as_bytes());
    let mut entry = vec![b'E', b'R', 0, 1, id.len() as u8, descriptor.len() as u8, source.len() as u8, 1];
    entry.extend_from_slice(id);
    entry.extend_from_slice(descriptor);
    entry.extend_from_slice(source);
    entry[2] = entry.len() as u8;
    entry
}

fn write_er(sector: &mut [u8]) {
    let entry = er();
    sector[..entry.len()].copy_from_slice(&entry);
}

/// An ISO 9660 file or directory identifier of d-characters (`A-Z0-9_`), a file's with its
/// extension and `;1`, unique among `taken`: what other systems show when they ignore Rock
/// Ridge and Joliet.
fn iso_identifier(name: &str, is_dir: bool, taken: &[Vec<u8>]) -> Vec<u8> {
    let d_chars = |s: &str, max: usize| -> String {
        s.bytes()
            .take(max)
            .map(|b| if b.is_ascii_alphanumeric() { b.to_ascii_uppercase() as char } else { '_' })
            .collect()
    };
    let (base, extension) = match name.rsplit_once('.') {
        Some((base, extension)) if !is_dir && !base.is_empty() => (base, extension),
        _ => (name, ""),
    };
    let extension = d_chars(extension, 8);
    for n in 0u32.. {
        let suffix = if n == 0 { String::new() } else { format!("_{n}") };
        let room = if is_dir { 31 } else { 30 - extension.len() - 1 } - suffix.len();
        let id = match is_dir {
            true => format!("{}{suffix}", d_chars(base, room)),
            false => format!("{}{suffix}.{extension};1", d_chars(base, room)),
        };
        if !taken.iter().any(|t| t == id.as_bytes()) {
            return id.into_bytes();
        }
    }
    unreachable!("some suffix is free")
}

/// A Joliet identifier: the name in UCS-2, big-endian, a file's with `;1`.
fn joliet_identifier(name: &str, is_dir: bool) -> Vec<u8> {
    let version = if is_dir { "" } else { ";1" };
    name.chars().chain(version.chars()).flat_map(|c| (c as u16).to_be_bytes()).collect()
}

/// A volume descriptor of one tree: the primary one, or Joliet's supplementary one.
struct Descriptor<'a> {
    volume_id: &'a str,
    total: u32,
    /// The path tables' sectors (little-endian, big-endian) and length.
    tables: [u32; 2],
    table_len: usize,
    /// The root directory: sector, bytes.
    root: (u32, usize),
}

impl Descriptor<'_> {
    fn write(&self, names: Names, sector: &mut [u8]) {
        let text = |field: &mut [u8], value: &str| match names {
            Names::Primary => {
                field.fill(b' ');
                field[..value.len()].copy_from_slice(value.as_bytes());
            }
            Names::Joliet => {
                for (i, pair) in field.chunks_mut(2).enumerate() {
                    let c = value.as_bytes().get(i).copied().unwrap_or(b' ');
                    pair.copy_from_slice(&[0, c][..pair.len()]);
                }
            }
        };
        sector[0] = if names == Names::Primary { PRIMARY } else { SUPPLEMENTARY };
        sector[1..6].copy_from_slice(STANDARD_ID);
        sector[6] = 1;
        text(&mut sector[8..40], "LINUX");
        let volume_id = match names {
            Names::Primary => self.volume_id,
            Names::Joliet => &self.volume_id[..self.volume_id.len().min(16)],
        };
        text(&mut sector[VOLUME_ID..VOLUME_ID + 32], volume_id);
        sector[80..88].copy_from_slice(&both_u32(self.total));
        if names == Names::Joliet {
            sector[ESCAPES..ESCAPES + 3].copy_from_slice(JOLIET_ESCAPES[2]);
        }
        sector[120..124].copy_from_slice(&both_u16(1));
        sector[124..128].copy_from_slice(&both_u16(1));
        sector[BLOCK_SIZE_FIELD..BLOCK_SIZE_FIELD + 4].copy_from_slice(&both_u16(SECTOR as u16));
        sector[132..140].copy_from_slice(&both_u32(self.table_len as u32));
        sector[140..144].copy_from_slice(&self.tables[0].to_le_bytes());
        sector[148..152].copy_from_slice(&self.tables[1].to_be_bytes());
        let mut root = vec![34, 0];
        root.extend_from_slice(&both_u32(self.root.0));
        root.extend_from_slice(&both_u32(self.root.1 as u32));
        root.extend_from_slice(&DATE);
        root.extend_from_slice(&[FLAG_DIRECTORY, 0, 0]);
        root.extend_from_slice(&both_u16(1));
        root.extend_from_slice(&[1, 0]);
        sector[ROOT_RECORD..ROOT_RECORD + 34].copy_from_slice(&root);
        for (start, len) in [(190, 128), (318, 128), (446, 128)] {
            text(&mut sector[start..start + len], "");
        }
        text(&mut sector[574..702], APPLICATION);
        for (start, len) in [(702, 37), (739, 37), (776, 37)] {
            text(&mut sector[start..start + len], "");
        }
        for (start, date) in [(813, DESCRIPTOR_DATE), (830, DESCRIPTOR_DATE), (847, &[b'0'; 16]), (864, &[b'0'; 16])] {
            sector[start..start + 16].copy_from_slice(date);
        }
        sector[881] = 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_identifiers_are_d_characters_and_unique() {
        assert_eq!(iso_identifier("recipe.schema.json", false, &[]), b"RECIPE_SCHEMA.JSON;1");
        assert_eq!(iso_identifier("boot", true, &[]), b"BOOT");
        assert_eq!(iso_identifier("README", false, &[]), b"README.;1");
        let taken = [b"RECIPE_JSON.SIG;1".to_vec()];
        assert_eq!(iso_identifier("recipe.json.sig", false, &taken), b"RECIPE_JSON_1.SIG;1");
        let long = iso_identifier(&"a".repeat(64), false, &[]);
        assert!(long.len() <= 32, "{}", String::from_utf8_lossy(&long));
    }
}
