//! The service as a process and a listener: start-up, shutdown, its log
//! output, its metrics and readiness, and hostile clients on a raw socket.

pub mod hostile;
pub mod lifecycle;
pub mod log_pipe;
pub mod telemetry;
