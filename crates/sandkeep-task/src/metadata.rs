//! `metadata`: E2B's file metadata, kept as envd keeps it, in extended
//! attributes `user.e2b.KEY` of the file (so it follows the file through
//! a rename and is what any other program sets there). Run as the user
//! whose files they are: the kernel decides who may set what.

use std::collections::BTreeMap;

use sandkeep_proto::wire::{METADATA_XATTR_PREFIX, MetadataReply, MetadataRequest};

use crate::error::{HelperError, IoContext};

/// The `user.e2b.*` attributes of `path`, keys without the prefix; empty
/// when it has none or they cannot be read.
fn read(path: &str) -> BTreeMap<String, String> {
    let mut names = vec![0u8; 64 * 1024];
    let Ok(n) = rustix::fs::listxattr(path, &mut names[..]) else {
        return BTreeMap::new();
    };
    names[..n]
        .split(|&b| b == 0)
        .filter_map(|name| std::str::from_utf8(name).ok())
        .filter_map(|name| {
            let key = name.strip_prefix(METADATA_XATTR_PREFIX)?;
            let mut value = vec![0u8; 64 * 1024];
            let len = rustix::fs::getxattr(path, name, &mut value[..]).ok()?;
            value.truncate(len);
            Some((key.to_owned(), String::from_utf8_lossy(&value).into_owned()))
        })
        .collect()
}

pub fn metadata(request: MetadataRequest) -> Result<MetadataReply, HelperError> {
    for (path, pairs) in &request.set {
        for (key, value) in pairs {
            if key.is_empty() || key.contains('\0') {
                return Err(HelperError::BadRequest(format!(
                    "metadata key {key:?} is not a name"
                )));
            }
            let name = format!("{METADATA_XATTR_PREFIX}{key}");
            rustix::fs::setxattr(
                path.as_str(),
                name.as_str(),
                value.as_bytes(),
                rustix::fs::XattrFlags::empty(),
            )
            .context(|| format!("cannot set metadata {key:?} on {path}"))?;
        }
    }
    Ok(MetadataReply {
        metadata: request.get.iter().map(|p| read(p)).collect(),
    })
}
