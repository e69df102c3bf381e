//! Progress bars on stderr, only when stderr is a terminal (so pipes, files
//! and tests see clean output).

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar of `len` steps labelled `what`; hidden unless stderr is a terminal
/// and `worth_showing`.
pub fn bar(len: u64, what: &str, worth_showing: bool) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::hidden());
    if worth_showing && std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::stderr());
        let style = ProgressStyle::with_template(
            "{msg} [{bar:40}] {percent:>3}% {elapsed_precise} eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        bar.set_style(style);
        bar.set_message(what.to_string());
    }
    bar
}
