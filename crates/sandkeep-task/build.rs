//! Fingerprints the sources the helper is built from (this crate's and
//! sandkeep-proto's), for `sandkeep-task --version`: a host refuses to
//! upload a helper built from other sources than its own copy of this
//! library, however alike their version numbers.

use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// FNV-1a, 64 bits: stable across toolchains, unlike std's hasher.
fn fnv(hash: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *hash ^= u64::from(b);
        *hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
}

fn main() {
    let here = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let proto = here.join("../sandkeep-proto");
    let mut inputs = Vec::new();
    for root in [&here, &proto] {
        for name in ["Cargo.toml", "src"] {
            let path = root.join(name);
            println!("cargo:rerun-if-changed={}", path.display());
            if path.is_dir() {
                files(&path, &mut inputs);
            } else {
                inputs.push(path);
            }
        }
    }
    let mut named: Vec<(String, PathBuf)> = inputs
        .into_iter()
        .map(|p| {
            let name = p
                .strip_prefix(here.parent().unwrap_or(&here))
                .unwrap_or(&p)
                .to_string_lossy()
                .into_owned();
            (name, p)
        })
        .collect();
    named.sort();
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    for (name, path) in &named {
        fnv(&mut hash, name.as_bytes());
        fnv(&mut hash, &[0]);
        fnv(&mut hash, &std::fs::read(path).unwrap_or_default());
        fnv(&mut hash, &[0]);
    }
    println!("cargo:rustc-env=SANDKEEP_TASK_SOURCE={hash:016x}");
}
