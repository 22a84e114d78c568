//! `sandkeep-keeper`: the local provider's per-sandbox keeper on its own.
//! It is `sandkeep __keeper` in a 2.6 MB executable instead of the whole
//! 25 MB one, which a provider starts for every sandbox about a
//! millisecond sooner. A provider uses it only while it is of its own
//! build (see `sandkeep::provider::local`); otherwise `sandkeep` itself.

#![forbid(unsafe_code)]

fn main() {
    let args = std::env::args().skip(1).collect();
    std::process::exit(sandkeep::provider::local::keeper_main(args));
}
