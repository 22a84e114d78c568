//! Fingerprints the sources the helper is built from (this crate's and
//! sandkeep-proto's), for `sandkeep-task --version`: a host refuses to
//! upload a helper built from other sources than its own copy of this
//! library, however alike their version numbers.

include!("../sandkeep-proto/build/fingerprint.rs");

fn main() {
    let source = fingerprint(&["sandkeep-task", "sandkeep-proto"]);
    println!("cargo:rustc-env=SANDKEEP_TASK_SOURCE={source}");
}
