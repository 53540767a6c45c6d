//! Limits on client connections, so that clients that send nothing, send
//! slowly or open too many connections cannot starve real deliveries.

use std::time::Duration;

use clap::Args;

/// What one client connection may hold, and how many may be open at once.
#[derive(Debug, Clone, Args)]
pub struct ConnectionSettings {
    /// Longest a client may take to send a request head (request line and
    /// headers), counted from when the server starts waiting for it: on a
    /// new connection, and again after each response on a kept-alive one,
    /// so it is also the idle keep-alive timeout. Past it the connection is
    /// closed without an answer.
    #[arg(long, env = "WEBHOOKD_HEADER_READ_TIMEOUT", value_parser = parse_timeout, default_value = "10s")]
    pub header_read_timeout: Duration,

    /// Longest a response may wait for the client to read it (a write that
    /// makes no progress): past it the connection is closed, so a client
    /// that sends requests but never reads cannot keep its connection.
    #[arg(long, env = "WEBHOOKD_WRITE_TIMEOUT", value_parser = parse_timeout, default_value = "10s")]
    pub write_timeout: Duration,

    /// Largest request head (request line and headers) in bytes; a larger
    /// one is answered 431 and the connection closed. It also bounds each
    /// connection's read buffer.
    #[arg(long, env = "WEBHOOKD_MAX_HEADER_BYTES", default_value_t = 64 * 1024,
          value_parser = clap::value_parser!(u64).range(8192..=(1024 * 1024)))]
    pub max_header_bytes: u64,

    /// Most client connections open at once; past it a new connection is
    /// closed as soon as it is accepted. Held below the open-file limit,
    /// less a reserve for the database pool, sink connections and the
    /// process's own files (the value in force is logged at start-up).
    #[arg(long, env = "WEBHOOKD_MAX_CONNECTIONS", default_value_t = 4096,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_connections: u64,
}

/// A duration above zero (a zero timeout would refuse every request).
fn parse_timeout(raw: &str) -> Result<Duration, String> {
    match humantime::parse_duration(raw) {
        Ok(timeout) if timeout.is_zero() => Err("must be above zero".to_owned()),
        Ok(timeout) => Ok(timeout),
        Err(error) => Err(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::ServeSettings;
    use super::*;

    #[test]
    fn connection_defaults_match_the_design() {
        let connections = ServeSettings::default().connections;
        assert_eq!(connections.header_read_timeout, Duration::from_secs(10));
        assert_eq!(connections.write_timeout, Duration::from_secs(10));
        assert_eq!(connections.max_header_bytes, 65_536);
        assert_eq!(connections.max_connections, 4096);
    }

    #[test]
    fn a_zero_header_timeout_is_refused() {
        assert!(parse_timeout("0s").is_err());
        assert_eq!(parse_timeout("1s"), Ok(Duration::from_secs(1)));
    }
}
