//! The e2b provider (against the E2B-compatible endpoint) and the endpoint
//! judged by E2B's official SDKs, one module per former test file, in one
//! test binary (one static link instead of two). The SDKs' scripts beside
//! these modules (`sdk.py`, `sdk.mjs`) are run by `sdk`.

#[path = "../support/mod.rs"]
mod support;

mod provider;
mod sdk;
