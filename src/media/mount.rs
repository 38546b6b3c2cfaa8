//! The task media, mounted read-only for as long as this value lives (SPEC §6.2): a loop
//! device for an image file, `ro,nosuid,nodev,noexec` on a private directory. Dropping it
//! unmounts and detaches the loop device; should the process stop in a hurry instead (a
//! panic, which aborts in the shipped binary, or an allocation failure), the undo actions it
//! registered with [`crate::shutdown`] do the same.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use linux_raw_sys::loop_device;
use rustix::fs::{openat2, Mode, OFlags, ResolveFlags};
use rustix::mount::{mount, unmount, MountFlags, UnmountFlags};

use super::label::Filesystem;
use super::{not_regular, symlink_refused, MediaFile, MediaFiles};
use crate::shutdown::{self, Registration};

/// A mounted filesystem (and the loop device under it, if any).
#[derive(Debug)]
pub struct Mount {
    point: PathBuf,
    loop_device: Option<LoopDevice>,
    /// Set once mounted: the undo action should the process stop before `Drop`.
    mounted: Option<Registration>,
}

impl Mount {
    /// Mounts `source` (a block device, or an image file through a loop device) at `point`,
    /// which is created (0700) and must be empty.
    pub fn new(source: &Path, fs: &Filesystem, point: &Path) -> Result<Mount> {
        let fstype = fs.fstype().context("no filesystem the dispatcher can mount")?;
        let is_image = fs::metadata(source).with_context(|| format!("cannot stat {}", source.display()))?.is_file();
        match fs::DirBuilder::new().mode(0o700).create(point) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                if fs::read_dir(point)?.next().is_some() {
                    bail!("mount point {} is not empty", point.display());
                }
            }
            Err(e) => return Err(e).with_context(|| format!("cannot create mount point {}", point.display())),
        }
        let mut this = Mount { point: point.to_owned(), loop_device: None, mounted: None };
        let device = if is_image {
            let attached = LoopDevice::attach(source).context("cannot attach a loop device")?;
            let path = attached.path.clone();
            this.loop_device = Some(attached);
            path
        } else {
            source.to_owned()
        };
        let flags = MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC;
        mount(&device, point, fstype, flags, None).map_err(|e| match e {
            // The kernel knows no such filesystem: neither built in nor a loadable module.
            rustix::io::Errno::NODEV => {
                anyhow::anyhow!("cannot mount {}: this kernel has no {fstype} filesystem", device.display())
            }
            e => anyhow::Error::new(io::Error::from(e))
                .context(format!("cannot mount {} ({fstype}) read-only", device.display())),
        })?;
        let undo_point = point.to_owned();
        this.mounted = Some(shutdown::register(move || {
            let _ = unmount(&undo_point, UnmountFlags::DETACH);
            let _ = fs::remove_dir(&undo_point);
        }));
        Ok(this)
    }

    pub fn point(&self) -> &Path {
        &self.point
    }

    /// The loop device under the mount, if the source was an image file.
    pub fn loop_device(&self) -> Option<&Path> {
        self.loop_device.as_ref().map(|l| l.path.as_path())
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.mounted.take().is_some() {
            // A reader still holding a file would make a plain unmount fail: detach instead.
            if unmount(&self.point, UnmountFlags::empty()).is_err() {
                let _ = unmount(&self.point, UnmountFlags::DETACH);
            }
        }
        self.loop_device.take();
        let _ = fs::remove_dir(&self.point);
    }
}

/// A loop device bound to an image file, read-only, detached when dropped (and, with
/// autoclear, by the kernel when the last user goes, should this process die first).
#[derive(Debug)]
struct LoopDevice {
    path: PathBuf,
    file: File,
    _undo: Registration,
}

/// linux/loop.h's flags for a read-only device that clears itself when its last user goes.
const LO_FLAGS: u32 = loop_device::LO_FLAGS_READ_ONLY as u32 | loop_device::LO_FLAGS_AUTOCLEAR as u32;

/// A `loop_info64` with `LO_FLAGS`, everything else zero.
fn loop_info() -> loop_device::loop_info64 {
    // SAFETY: loop_info64 is integers and arrays of integers, for which zero is a value.
    let mut info: loop_device::loop_info64 = unsafe { std::mem::zeroed() };
    info.lo_flags = LO_FLAGS;
    info
}

impl LoopDevice {
    fn attach(image: &Path) -> io::Result<LoopDevice> {
        let backing = File::open(image)?;
        let control = OpenOptions::new().read(true).write(true).open("/dev/loop-control")?;
        // Another process may take the free device between the two calls: try a few times.
        for _ in 0..8 {
            // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns a device number.
            let number = unsafe { libc::ioctl(control.as_raw_fd(), loop_device::LOOP_CTL_GET_FREE as _) };
            if number < 0 {
                return Err(io::Error::last_os_error());
            }
            let path = PathBuf::from(format!("/dev/loop{number}"));
            let file = OpenOptions::new().read(true).custom_flags(libc::O_CLOEXEC).open(&path)?;
            // SAFETY: loop_config is integers, arrays of integers and a loop_info64: zero is a value.
            let mut config: loop_device::loop_config = unsafe { std::mem::zeroed() };
            config.fd = backing.as_raw_fd() as u32;
            config.info = loop_info();
            // SAFETY: `config` is a valid loop_config that outlives the call.
            let configured = unsafe { libc::ioctl(file.as_raw_fd(), loop_device::LOOP_CONFIGURE as _, &config) };
            if configured == 0 {
                return Ok(LoopDevice::new(path, file));
            }
            let error = io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::EBUSY) => continue,
                // Kernels before 5.8: the two-step way.
                Some(libc::EINVAL) | Some(libc::ENOTTY) => return Self::attach_old(path, file, &backing),
                _ => return Err(error),
            }
        }
        Err(io::Error::new(io::ErrorKind::ResourceBusy, "every free loop device was taken by another process"))
    }

    fn attach_old(path: PathBuf, file: File, backing: &File) -> io::Result<LoopDevice> {
        // SAFETY: LOOP_SET_FD takes a file descriptor by value.
        if unsafe { libc::ioctl(file.as_raw_fd(), loop_device::LOOP_SET_FD as _, backing.as_raw_fd()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let device = LoopDevice::new(path, file);
        let info = loop_info();
        // SAFETY: `info` is a valid loop_info64 that outlives the call.
        if unsafe { libc::ioctl(device.file.as_raw_fd(), loop_device::LOOP_SET_STATUS64 as _, &info) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(device)
    }
}

impl LoopDevice {
    fn new(path: PathBuf, file: File) -> LoopDevice {
        let fd = file.as_raw_fd();
        let undo = shutdown::register(move || detach_loop(fd));
        LoopDevice { path, file, _undo: undo }
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        detach_loop(self.file.as_raw_fd());
    }
}

/// Detaches the loop device open on `fd`. Already detached (autoclear) is fine.
fn detach_loop(fd: i32) {
    // SAFETY: LOOP_CLR_FD takes no argument; a stale or foreign fd only makes it fail.
    unsafe { libc::ioctl(fd, loop_device::LOOP_CLR_FD as _) };
}

/// The media's root directory, from which files are opened beneath without following any
/// symlink (a hostile ISO may carry `recipe.json -> /etc/shadow`).
#[derive(Debug)]
pub struct Root {
    dir: OwnedFd,
    /// The device the tree lives on (`st_dev`), for the host checks.
    pub device: u64,
}

impl Root {
    pub fn open(path: &Path) -> io::Result<Root> {
        let dir = rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        let device = fs::metadata(path)?.dev();
        Ok(Root { dir, device })
    }

    /// Opens the regular file `name` beneath the root: `openat2` with RESOLVE_BENEATH and
    /// RESOLVE_NO_SYMLINKS; on kernels without openat2, O_NOFOLLOW on a single component,
    /// which is equivalent for the names used here (a name of several components is refused
    /// there). O_NONBLOCK so that a FIFO cannot block;
    /// anything but a regular file is refused.
    pub fn open_file(&self, name: &str) -> io::Result<File> {
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS;
        let fd = match openat2(&self.dir, name, flags, Mode::empty(), resolve) {
            Err(rustix::io::Errno::NOSYS) if !name.contains('/') => {
                rustix::fs::openat(&self.dir, name, flags, Mode::empty())
            }
            // Without openat2 (kernels before 5.6, qemu-user 7.2) a path of several
            // components cannot be resolved safely: refused as a name, not as a failed system.
            Err(rustix::io::Errno::NOSYS) => {
                return Err(io::Error::new(io::ErrorKind::InvalidData, "is not a file directly on the media"))
            }
            other => other,
        }
        .map_err(|e| match e {
            rustix::io::Errno::LOOP | rustix::io::Errno::XDEV => symlink_refused(),
            // A device node on a `nodev` mount cannot be opened at all: say what it is.
            rustix::io::Errno::ACCESS if !self.is_regular(name) => not_regular(),
            e => e.into(),
        })?;
        let file = File::from(fd);
        if !file.metadata()?.is_file() {
            return Err(not_regular());
        }
        Ok(file)
    }

    /// Whether `name`, not followed if a symlink, is a regular file (or cannot be looked at).
    fn is_regular(&self, name: &str) -> bool {
        rustix::fs::statat(&self.dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
            .map_or(true, |st| rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile)
    }
}

impl MediaFiles for Root {
    fn open(&self, name: &str) -> io::Result<MediaFile<'_>> {
        let file = self.open_file(name)?;
        let len = file.metadata()?.len();
        Ok(MediaFile { reader: Box::new(file), len })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn files_beneath_open_but_symlinks_and_specials_do_not() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("recipe.json"), "{}").unwrap();
        symlink("/etc/passwd", dir.path().join("link.json")).unwrap();
        symlink("recipe.json", dir.path().join("relative.json")).unwrap();
        fs::create_dir(dir.path().join("sub")).unwrap();
        rustix::fs::mknodat(rustix::fs::CWD, dir.path().join("fifo"), rustix::fs::FileType::Fifo, Mode::RUSR, 0)
            .unwrap();
        let root = Root::open(dir.path()).unwrap();
        assert!(root.open_file("recipe.json").is_ok());
        for name in ["link.json", "relative.json"] {
            let err = root.open_file(name).unwrap_err();
            assert!(err.to_string().contains("symbolic link"), "{name}: {err}");
        }
        assert!(root.open_file("sub").unwrap_err().to_string().contains("not a regular file"));
        assert!(root.open_file("fifo").unwrap_err().to_string().contains("not a regular file"));
        assert_eq!(root.open_file("../etc/passwd").unwrap_err().kind(), io::ErrorKind::InvalidData);
        assert_eq!(root.open_file("missing.json").unwrap_err().kind(), io::ErrorKind::NotFound);
    }
}
