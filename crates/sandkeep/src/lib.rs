//! sandkeep: Linux sandboxes and durable background tasks for AI agents.
//!
//! - [`provider`]: where sandboxes live (the `Provider` trait and the
//!   embedded `local` provider). Knows nothing of MCP or sessions.
//! - [`service`]: one handler per tool of docs/tools.md, sessions, validation,
//!   masking. Shared by every front end; never touches `/proc` or a socket.
//! - [`mcp`]: rmcp glue for stdio and Streamable HTTP. Decides no policy.
//! - [`cli`]: the command line for people, on the same service.
//! - [`e2b`]: `serve --e2b`, the E2B-compatible endpoint (crate
//!   `sandkeep-e2b-endpoint`) served on the edge.
//! - [`edge`]: the HTTP accept loop both listeners share (timeouts, caps).
//! - [`runtime`]: the async runtime every server runs on.

#![forbid(unsafe_code)]

pub mod cli;
pub mod e2b;
mod edge;
pub mod mcp;
pub mod provider;
mod runtime;
pub mod service;
