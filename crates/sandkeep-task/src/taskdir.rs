//! The private per-user task directory and the files of one task in it.
//!
//! Owns where task data lives, the safety checks of SPEC.md §5 on the
//! private directory, and every file operation on a task directory (state
//! record written atomically, logs, control FIFO, terminal size; the
//! input queue's own files are crate::input's). All access below the
//! private directory goes through directory descriptors opened without
//! following symlinks, so a path swapped after the check is not followed.
//! It decides nothing about task states.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, FlockOperation, Mode, OFlags};
use rustix::io::Errno;
use sandkeep_proto::page::{ByteOffset, Page, page_range};
use sandkeep_proto::shell::state_base;
use sandkeep_proto::wire::TermSize;
use sandkeep_proto::{StateRecord, TaskId};

use crate::error::{HelperError, IoContext};

pub const STATE_FILE: &str = "state.json";
const STATE_TEMP: &str = "state.json.tmp";
pub const STDOUT_LOG: &str = "stdout.log";
pub const STDERR_LOG: &str = "stderr.log";
pub const CONTROL_FIFO: &str = "control";
/// The start of the task's command, redacted, for `list`.
pub const COMMAND_FILE: &str = "command";
/// An interactive task's input queue (crate::input); absent for a task
/// whose stdin is `/dev/null`.
pub const INPUT_DIR: &str = "input";
/// A pty task's terminal size, `COLS ROWS`; absent for other tasks.
pub const WINSIZE_FILE: &str = "winsize";
const WINSIZE_TEMP: &str = "winsize.tmp";

/// `${XDG_STATE_HOME:-$HOME/.local/state}/sandkeep/tasks`, from `env`.
pub fn root_path_from(
    xdg_state_home: Option<OsString>,
    home: Option<OsString>,
) -> Result<PathBuf, HelperError> {
    let base = state_base(xdg_state_home.as_deref(), home.as_deref()).ok_or_else(|| {
        HelperError::Internal(
            "neither XDG_STATE_HOME (absolute) nor HOME is set: set HOME so the helper \
             knows where this user's task directories live"
                .into(),
        )
    })?;
    Ok(base.join("sandkeep").join("tasks"))
}

fn root_path() -> Result<PathBuf, HelperError> {
    root_path_from(std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME"))
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// The private directory holding this user's task directories.
pub struct TaskRoot {
    fd: OwnedFd,
    path: PathBuf,
}

impl TaskRoot {
    /// Opens the private directory, creating it (mode 0700) if missing.
    pub fn open_or_create() -> Result<Self, HelperError> {
        let path = root_path()?;
        // A symlink or foreign directory already there makes creation pass
        // or fail depending on its target; the checks of `open_at` decide.
        let created = fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&path);
        match Self::open_at(path.clone())? {
            Some(root) => Ok(root),
            None => Err(match created {
                Err(e) => HelperError::Io {
                    context: format!("creating the private task directory {}", path.display()),
                    source: e,
                },
                Ok(()) => HelperError::Internal(format!(
                    "{} vanished while it was being created; retry",
                    path.display()
                )),
            }),
        }
    }

    /// Opens the private directory if it exists.
    pub fn open_existing() -> Result<Option<Self>, HelperError> {
        Self::open_at(root_path()?)
    }

    fn open_at(path: PathBuf) -> Result<Option<Self>, HelperError> {
        let unsafe_dir = |reason: String| HelperError::UnsafeTaskDir {
            path: path.clone(),
            reason,
        };
        let fd = match rustix::fs::open(&path, dir_flags(), Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP) | Err(Errno::NOTDIR) => {
                return Err(unsafe_dir(
                    "it is a symlink or not a directory; remove it so the helper can create a \
                     private directory"
                        .into(),
                ));
            }
            Err(e) => {
                return Err(e).context(|| format!("opening {}", path.display()));
            }
        };
        let st = rustix::fs::fstat(&fd).context(|| format!("inspecting {}", path.display()))?;
        let me = rustix::process::geteuid().as_raw();
        if st.st_uid != me {
            return Err(unsafe_dir(format!(
                "it is owned by uid {}, not by this user (uid {me})",
                st.st_uid
            )));
        }
        if st.st_mode & 0o077 != 0 {
            return Err(unsafe_dir(format!(
                "it is accessible to group or others (mode {:o}); run chmod 700 on it",
                st.st_mode & 0o7777
            )));
        }
        Ok(Some(Self { fd, path }))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serialises starts, so two concurrent starts cannot both take the
    /// last free slot. Released when the returned descriptor is dropped.
    pub fn lock(&self) -> Result<OwnedFd, HelperError> {
        let fd = rustix::fs::openat(&self.fd, ".", dir_flags(), Mode::empty())
            .context(|| format!("opening {}", self.path.display()))?;
        rustix::fs::flock(&fd, FlockOperation::LockExclusive)
            .context(|| format!("locking {}", self.path.display()))?;
        Ok(fd)
    }

    /// The ids of every task directory, sorted.
    pub fn task_ids(&self) -> Result<Vec<TaskId>, HelperError> {
        let dir = rustix::fs::Dir::read_from(&self.fd)
            .context(|| format!("listing {}", self.path.display()))?;
        let mut ids = Vec::new();
        for entry in dir {
            let entry = entry.context(|| format!("listing {}", self.path.display()))?;
            if let Some(id) = entry
                .file_name()
                .to_str()
                .ok()
                .and_then(|n| TaskId::parse(n).ok())
            {
                ids.push(id);
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// Creates the directory of a new task; refuses an existing id.
    pub fn create_task_dir(&self, id: &TaskId) -> Result<TaskDir, HelperError> {
        match rustix::fs::mkdirat(&self.fd, id.as_str(), Mode::from_raw_mode(0o700)) {
            Ok(()) => {}
            Err(Errno::EXIST) => return Err(HelperError::TaskExists(id.clone())),
            Err(e) => {
                return Err(e).context(|| format!("creating the directory of task {id}"));
            }
        }
        self.open_task_dir(id)?
            .ok_or_else(|| HelperError::Internal(format!("task directory {id} vanished")))
    }

    pub fn open_task_dir(&self, id: &TaskId) -> Result<Option<TaskDir>, HelperError> {
        match rustix::fs::openat(&self.fd, id.as_str(), dir_flags(), Mode::empty()) {
            Ok(fd) => Ok(Some(TaskDir {
                fd,
                path: self.path.join(id.as_str()),
            })),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(e).context(|| format!("opening the directory of task {id}")),
        }
    }
}

/// One task's directory.
pub struct TaskDir {
    fd: OwnedFd,
    path: PathBuf,
}

fn file_flags() -> OFlags {
    OFlags::CLOEXEC | OFlags::NOFOLLOW
}

impl TaskDir {
    /// Opens a task directory by its full path (the supervisor's way in).
    pub fn open_path(path: PathBuf) -> io::Result<Self> {
        let fd = rustix::fs::open(&path, dir_flags(), Mode::empty())?;
        Ok(Self { fd, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the directory of a task that never started.
    pub fn remove(self) {
        let _ = fs::remove_dir_all(&self.path);
    }

    /// Removes the directory of a settled task with everything in it.
    pub fn delete(self) -> io::Result<()> {
        fs::remove_dir_all(&self.path)
    }

    /// Seconds since the directory was created (its ctime), for telling a
    /// task still being started from one whose start failed long ago.
    pub fn age_secs(&self) -> io::Result<u64> {
        let st = rustix::fs::fstat(&self.fd)?;
        let now = sandkeep_proto::record::unix_now();
        Ok(now.saturating_sub(u64::try_from(st.st_ctime).unwrap_or(0)))
    }

    /// Saves the (already redacted and shortened) command for `list`.
    pub fn write_command(&self, command: &str) -> io::Result<()> {
        let fd = rustix::fs::openat(
            &self.fd,
            COMMAND_FILE,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | file_flags(),
            Mode::from_raw_mode(0o600),
        )?;
        File::from(fd).write_all(command.as_bytes())
    }

    /// The saved command; empty when none was saved.
    pub fn read_command(&self) -> io::Result<String> {
        let fd = match rustix::fs::openat(
            &self.fd,
            COMMAND_FILE,
            OFlags::RDONLY | file_flags(),
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(String::new()),
            Err(e) => return Err(e.into()),
        };
        let mut bytes = Vec::new();
        File::from(fd).read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The number of bytes saved in a log (0 before it exists).
    pub fn log_len(&self, name: &str) -> io::Result<u64> {
        match rustix::fs::statat(&self.fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(st.st_size as u64),
            Err(Errno::NOENT) => Ok(0),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes the record atomically: a reader sees the old or the new one.
    /// There is no fsync: the record lives exactly as long as the sandbox's
    /// filesystem, and a crash that loses the page cache also kills the
    /// supervisor, whose task then reads `unknown` anyway; an fsync would
    /// add milliseconds to start and to every exit.
    pub fn write_record(&self, record: &StateRecord) -> io::Result<()> {
        let json = serde_json::to_vec(record).map_err(io::Error::other)?;
        self.replace(STATE_TEMP, STATE_FILE, &json)
    }

    /// Writes `bytes` to `temp`, then renames it over `name`.
    fn replace(&self, temp: &str, name: &str, bytes: &[u8]) -> io::Result<()> {
        let fd = rustix::fs::openat(
            &self.fd,
            temp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | file_flags(),
            Mode::from_raw_mode(0o600),
        )?;
        File::from(fd).write_all(bytes)?;
        rustix::fs::renameat(&self.fd, temp, &self.fd, name)?;
        Ok(())
    }

    /// Creates the input queue of an interactive task.
    pub fn create_input_dir(&self) -> io::Result<()> {
        rustix::fs::mkdirat(&self.fd, INPUT_DIR, Mode::from_raw_mode(0o700))?;
        Ok(())
    }

    /// The input queue's directory; `None` for a task without one.
    pub fn open_input_dir(&self) -> io::Result<Option<OwnedFd>> {
        match rustix::fs::openat(&self.fd, INPUT_DIR, dir_flags(), Mode::empty()) {
            Ok(fd) => Ok(Some(fd)),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Records a pty task's terminal size, atomically. Callers serialise
    /// on the input queue's lock, since they share the temporary name.
    pub fn write_winsize(&self, size: TermSize) -> io::Result<()> {
        let text = format!("{} {}\n", size.cols, size.rows);
        self.replace(WINSIZE_TEMP, WINSIZE_FILE, text.as_bytes())
    }

    /// A pty task's terminal size; `None` for a task without a terminal.
    pub fn read_winsize(&self) -> io::Result<Option<TermSize>> {
        let fd = match rustix::fs::openat(
            &self.fd,
            WINSIZE_FILE,
            OFlags::RDONLY | file_flags(),
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let mut text = String::new();
        File::from(fd).read_to_string(&mut text)?;
        let mut words = text.split_whitespace().map(str::parse::<u16>);
        match (words.next(), words.next()) {
            (Some(Ok(cols)), Some(Ok(rows))) => Ok(Some(TermSize { cols, rows })),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{WINSIZE_FILE} holds {text:?}, not `COLS ROWS`"),
            )),
        }
    }

    /// The current record; `None` when none was written yet or it cannot
    /// be read (both read as `unknown`).
    pub fn read_record(&self) -> io::Result<Option<StateRecord>> {
        let fd = match rustix::fs::openat(
            &self.fd,
            STATE_FILE,
            OFlags::RDONLY | file_flags(),
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let mut bytes = Vec::with_capacity(512);
        File::from(fd).read_to_end(&mut bytes)?;
        Ok(serde_json::from_slice::<StateRecord>(&bytes)
            .ok()
            .filter(|r| r.version == sandkeep_proto::record::RECORD_VERSION))
    }

    /// Creates an empty log for the supervisor to fill.
    pub fn create_log(&self, name: &str) -> io::Result<File> {
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | file_flags(),
            Mode::from_raw_mode(0o600),
        )?;
        Ok(File::from(fd))
    }

    /// One page of a log and the number of bytes saved in it. A log not
    /// created yet is empty.
    pub fn read_log_page(&self, name: &str, offset: u64, limit: u64) -> io::Result<(Page, u64)> {
        let fd = match rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDONLY | file_flags(),
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok((Page::from_raw(&[], ByteOffset(offset)), 0)),
            Err(e) => return Err(e.into()),
        };
        let saved = rustix::fs::fstat(&fd)?.st_size as u64;
        let range = page_range(saved, ByteOffset(offset), limit);
        let mut raw = vec![0u8; (range.end - range.start) as usize];
        let mut filled = 0;
        while filled < raw.len() {
            let n = rustix::io::pread(&fd, &mut raw[filled..], range.start + filled as u64)?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        raw.truncate(filled);
        Ok((Page::from_raw(&raw, ByteOffset(offset)), saved))
    }

    /// Creates the FIFO through which cancel reaches the supervisor.
    pub fn create_control(&self) -> io::Result<()> {
        rustix::fs::mknodat(
            &self.fd,
            CONTROL_FIFO,
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )?;
        Ok(())
    }

    /// The supervisor's end of the control FIFO. Opened read-write so it
    /// never sees end-of-file when a canceller closes its end.
    pub fn open_control_for_reading(&self) -> io::Result<OwnedFd> {
        Ok(rustix::fs::openat(
            &self.fd,
            CONTROL_FIFO,
            OFlags::RDWR | OFlags::NONBLOCK | file_flags(),
            Mode::empty(),
        )?)
    }

    /// A canceller's end of the control FIFO; `None` when no supervisor
    /// holds the other end (it is gone).
    pub fn open_control_for_writing(&self) -> io::Result<Option<OwnedFd>> {
        match rustix::fs::openat(
            &self.fd,
            CONTROL_FIFO,
            OFlags::WRONLY | OFlags::NONBLOCK | file_flags(),
            Mode::empty(),
        ) {
            Ok(fd) => Ok(Some(fd)),
            Err(Errno::NXIO) | Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_follows_xdg_then_home() {
        let p = root_path_from(Some("/x".into()), Some("/h".into())).unwrap();
        assert_eq!(p, Path::new("/x/sandkeep/tasks"));
        let p = root_path_from(Some("relative".into()), Some("/h".into())).unwrap();
        assert_eq!(p, Path::new("/h/.local/state/sandkeep/tasks"));
        assert!(root_path_from(None, None).is_err());
    }
}
