//! Fingerprints the sources the keeper is built from (this crate's and
//! the two it speaks through), so that a provider runs only a keeper
//! executable of its own build (see `keeper::BUILD`).

include!("../sandkeep-proto/build/fingerprint.rs");

fn main() {
    let source = fingerprint(&["sandkeep-local", "sandkeep-proto", "sandkeep-provider"]);
    println!("cargo:rustc-env=SANDKEEP_LOCAL_SOURCE={source}");
}
