//! A namespaced sandbox's own kernel boot id: a file on the sandbox's
//! disk, bound read-only over its `/proc/sys/kernel/random/boot_id`, and
//! written by the init alone (through the descriptor it keeps): once at
//! build, and anew at a filesystem-only pause, whose resume is then a cold
//! boot to programs that tell boots apart by it (E2B's SDKs and their
//! tests do).
//!
//! The file lives on the disk, not in the sandbox's directory on the host:
//! a bind's mount-table entry names its source's path within its
//! filesystem, and on the disk that is `/boot_id`, which says nothing of
//! where the sandbox lives on the host. A process-only sandbox shows the
//! host's boot id.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

use rustix::rand::GetRandomFlags;

/// The writable side of a sandbox's boot id: the init's alone.
pub struct BootId(File);

impl BootId {
    /// Creates `path` with a new boot id, readable by all and writable by
    /// no one but through the returned descriptor.
    pub fn create(path: &Path) -> io::Result<Self> {
        let file = File::options()
            .write(true)
            .create_new(true)
            .mode(0o444)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)?;
        let id = Self(file);
        id.renew()?;
        Ok(id)
    }

    /// Writes a new boot id over the old one (always the same length, so
    /// a reader sees one or the other).
    pub fn renew(&self) -> io::Result<()> {
        // The system call itself: the getrandom crate may fall back to a
        // /dev/urandom descriptor it opened in the keeper, which the init
        // has closed.
        let mut bytes = [0u8; 16];
        let mut filled = 0;
        while filled < bytes.len() {
            filled += rustix::rand::getrandom(&mut bytes[filled..], GetRandomFlags::empty())?;
        }
        self.0.write_all_at(uuid_v4(bytes).as_bytes(), 0)
    }

    pub fn as_raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.0)
    }
}

/// A version-4 UUID as the kernel writes a boot id (with its newline).
fn uuid_v4(mut bytes: [u8; 16]) -> String {
    bytes[6] = bytes[6] & 0x0f | 0x40;
    bytes[8] = bytes[8] & 0x3f | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}\n",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_boot_id_is_a_version_4_uuid_as_the_kernel_writes_it() {
        let bytes = [
            0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54,
            0x32, 0x10,
        ];
        assert_eq!(uuid_v4(bytes), "01234567-89ab-4def-bedc-ba9876543210\n");
        assert_eq!(
            uuid_v4([0xff; 16]),
            "ffffffff-ffff-4fff-bfff-ffffffffffff\n"
        );
    }

    #[test]
    fn a_renewal_replaces_the_id_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("boot_id");
        let id = BootId::create(&path).unwrap();
        let first = std::fs::read_to_string(&path).unwrap();
        id.renew().unwrap();
        let second = std::fs::read_to_string(&path).unwrap();
        assert_eq!(first.len(), 37, "{first:?}");
        assert_eq!(second.len(), 37, "{second:?}");
        assert_ne!(first, second);
        assert!(
            BootId::create(&path).is_err(),
            "an existing file was reused"
        );
    }
}
