//! MCP transports (stdio, Streamable HTTP) over the service. (Being written.)
