//! The `pacer` command's library: the simulator, the matrix checker, the
//! trace replayer, the settings explainer, the fleet hammer and the bucket
//! watch. `main.rs` is only the argument parsing around these.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod advice;
pub mod client;
pub mod engine;
pub mod explain;
pub mod gate;
pub mod grid;
pub mod hammer;
pub mod matrix;
pub mod plot;
pub mod progress;
pub mod redis_target;
pub mod replay;
pub mod rng;
pub mod sim;
pub mod stats;
pub mod sweep;
pub mod upstream_sweep;
pub mod watch;
