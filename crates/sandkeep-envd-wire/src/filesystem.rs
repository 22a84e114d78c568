//! The filesystem service's messages (`/filesystem.Filesystem/*`) and
//! `/files`' upload answer.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The request of Stat, MakeDir and Remove.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PathRequest {
    #[serde(default)]
    pub path: String,
}

/// ListDir's request; a depth of 0 counts as 1.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ListDirRequest {
    #[serde(default)]
    pub path: String,
    #[serde(default)]
    pub depth: u32,
}

/// Move's request; envd creates the destination's parents.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MoveRequest {
    #[serde(default)]
    pub source: String,
    #[serde(default)]
    pub destination: String,
}

/// A file's `EntryInfo` as envd's JSON spells it (size a string: proto3
/// JSON's int64).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EntryInfo {
    pub name: String,
    /// `FILE_TYPE_FILE`, `FILE_TYPE_DIRECTORY`, `FILE_TYPE_SYMLINK` or
    /// `FILE_TYPE_UNSPECIFIED`.
    #[serde(rename = "type")]
    pub file_type: String,
    pub path: String,
    pub size: String,
    pub mode: u32,
    pub permissions: String,
    pub owner: String,
    pub group: String,
    /// RFC 3339, seconds, UTC.
    pub modified_time: String,
    /// A symbolic link's resolved absolute target; `type` is then the
    /// target's type (envd 0.6.13 has no separate "is a link" field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symlink_target: Option<String>,
    /// The file's metadata (`user.e2b.*` extended attributes).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

/// The answer of Stat, MakeDir and Move.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EntryResponse {
    pub entry: EntryInfo,
}

/// ListDir's answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ListDirResponse {
    #[serde(default)]
    pub entries: Vec<EntryInfo>,
}

/// One file written by `POST /files`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WrittenFile {
    pub path: String,
    pub name: String,
    /// Always `file`.
    #[serde(rename = "type")]
    pub file_type: String,
    /// The file's metadata after an upload that set some.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<BTreeMap<String, String>>,
}

/// The request of WatchDir and CreateWatcher.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchRequest {
    #[serde(default)]
    pub path: String,
    #[serde(default)]
    pub recursive: bool,
    /// Whether create, write and chmod events carry the entry.
    #[serde(default)]
    pub include_entry: bool,
    /// envd refuses a network file system without it; a sandbox here has
    /// none, so either way is the same.
    #[serde(default)]
    pub allow_network_mounts: bool,
}

/// A change under a watched directory: its path relative to it and the
/// kind, `EVENT_TYPE_CREATE`, `_WRITE`, `_REMOVE`, `_RENAME` or `_CHMOD`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FilesystemEvent {
    pub name: String,
    #[serde(rename = "type")]
    pub event_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<Box<EntryInfo>>,
}

/// WatchDir's stream message, a oneof at its top level (no `event`
/// wrapper, unlike the process service's): `start` first, then
/// `filesystem` and `keepalive`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WatchDirResponse {
    Start {},
    Filesystem(FilesystemEvent),
    Keepalive {},
}

/// CreateWatcher's answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WatcherId {
    #[serde(default)]
    pub watcher_id: String,
}

/// GetWatcherEvents' answer: what happened since the previous call.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WatcherEvents {
    #[serde(default)]
    pub events: Vec<FilesystemEvent>,
}
