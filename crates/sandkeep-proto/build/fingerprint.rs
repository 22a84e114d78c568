// Included by the build scripts of sandkeep-task and sandkeep-local (not
// a module of sandkeep-proto): both fingerprint the sources a binary is
// built from, so that a process can tell a helper or keeper executable
// of its own build from one built from other sources.

/// Every file under `dir`.
fn files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
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

/// A hash of the `Cargo.toml` and `src` of each of the workspace's
/// `crates` (directory names beside this crate's), for `cargo` to rerun
/// the build script whenever one of them changes.
fn fingerprint(crates: &[&str]) -> String {
    let here = std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let workspace = here.parent().unwrap_or(&here).to_path_buf();
    let mut inputs = Vec::new();
    for name in crates {
        for part in ["Cargo.toml", "src"] {
            let path = workspace.join(name).join(part);
            println!("cargo:rerun-if-changed={}", path.display());
            if path.is_dir() {
                files(&path, &mut inputs);
            } else {
                inputs.push(path);
            }
        }
    }
    let mut named: Vec<(String, std::path::PathBuf)> = inputs
        .into_iter()
        .map(|p| {
            let name = p
                .strip_prefix(&workspace)
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
    format!("{hash:016x}")
}
