//! envd's wire format, as sandkeep speaks it on both sides: the e2b
//! provider (`sandkeep-e2b`, a client of E2B's envd) and the E2B endpoint
//! (`sandkeep-e2b-endpoint`, a server that stands in for envd).
//!
//! This crate owns what the two must agree on byte for byte: Connect's
//! envelope framing and error shape ([`connect`]), the port and header
//! names ([`ENVD_PORT`], [`header`]), the typed JSON messages of the
//! process and filesystem services ([`process`], [`filesystem`]), and the
//! rule that turns a signal death into envd's `signal: NAME` status and
//! back ([`process::End`]). Field names and shapes follow envd's proto3
//! JSON mapping (docs/e2b.md).
//!
//! It does no I/O and knows no HTTP library: each side puts these bytes
//! on its own transport (reqwest, axum), and answers them with its own
//! policy.

#![forbid(unsafe_code)]

pub mod connect;
pub mod filesystem;
pub mod process;

/// The port envd listens on inside an E2B sandbox; E2B's proxy routes a
/// host name `{port}-{id}.{domain}` to it.
pub const ENVD_PORT: u16 = 49983;

/// The header names envd's clients send, lower-case as HTTP/2 carries them
/// (HTTP/1.1 compares them without case).
pub mod header {
    /// The sandbox an envd request is for (E2B's proxy routes on it).
    pub const SANDBOX_ID: &str = "e2b-sandbox-id";
    /// The port inside the sandbox, [`crate::ENVD_PORT`] for envd.
    pub const SANDBOX_PORT: &str = "e2b-sandbox-port";
    /// The sandbox's envd access token.
    pub const ACCESS_TOKEN: &str = "x-access-token";
    /// Seconds without data after which a stream gets a keepalive event.
    pub const KEEPALIVE_PING_INTERVAL: &str = "keepalive-ping-interval";
    /// A call's deadline; on Start, envd kills the process when it passes.
    pub const CONNECT_TIMEOUT_MS: &str = "connect-timeout-ms";
    /// Connect's protocol version header; its one value is `1`.
    pub const CONNECT_PROTOCOL_VERSION: &str = "connect-protocol-version";
}

/// Bytes as Connect's JSON codec carries them: standard base64.
pub mod base64_bytes {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;

    pub fn encode(bytes: &[u8]) -> String {
        STANDARD.encode(bytes)
    }

    pub fn decode(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
        STANDARD.decode(text)
    }
}
