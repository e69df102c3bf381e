//! The core's name for each of the model's admission paths (for the test
//! files that check the core against `model/mod.rs`; the model itself names
//! nothing of the core).

use crate::model::MPath;
use pacer_core::AdmitPath;

/// The core's path for the model's `path`.
pub fn core_path(path: MPath) -> AdmitPath {
    match path {
        MPath::Disabled => AdmitPath::Disabled,
        MPath::Paced => AdmitPath::Paced,
        MPath::Shaped => AdmitPath::Shaped,
        MPath::Overflow => AdmitPath::Overflow,
    }
}
