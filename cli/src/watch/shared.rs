//! A shared-memory bucket read from its file: opened read-only (never
//! created, written or mapped), its header checked once, then each reading
//! a positioned read of the state word, the control word and the counters
//! (docs/shared-memory.md, layout 4), decoded by the core.
//!
//! The library's own header checks (`ffi/src/shm.rs`) compare the header
//! with the opener's configuration and sit on the path that creates and
//! maps the file, so the checks a reader needs are made here, each with
//! its own message: the same magic number, layout version, file size,
//! ready mark and word offsets, then the configuration taken from the
//! header instead of compared with one. Where each field is, the sizes and
//! the version come from the library (`pacer::shm::header`).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use pacer::shm::header::{
    self, u32_field as u32_at, u64_field as u64_at, FILE_MAGIC, H_CONTROL_OFFSET,
    H_COUNTERS_OFFSET, H_FILE_SIZE, H_LAYOUT, H_MAGIC, H_READY, H_STATE_OFFSET, READY,
    WORDS_IN_FILE,
};
use pacer::shm::{PACER_SHARED_FILE_SIZE, PACER_SHARED_HEADER_SIZE, PACER_SHARED_LAYOUT_VERSION};
use pacer_core::{
    Config, ControlView, CounterSnapshot, Params, ReleasePolicy, StateView, COUNTER_WORDS,
    UNITS_PER_TOKEN,
};

use super::{Bucket, BucketConfig, Counts, Queue, Reading};

/// Where bare names live.
const SHM_DIR: &str = "/dev/shm";

/// The state word, the control word (16 bytes each), then the counters:
/// contiguous from the page boundary.
const STATE_AT: u64 = WORDS_IN_FILE[0];
const CONTROL_AT: u64 = WORDS_IN_FILE[1];
const COUNTERS_AT: u64 = WORDS_IN_FILE[2];
const WORDS_LEN: usize = 32 + 8 * COUNTER_WORDS;
const _: () = assert!(CONTROL_AT == STATE_AT + 16 && COUNTERS_AT == CONTROL_AT + 16);
const _: () = assert!(COUNTERS_AT + 8 * COUNTER_WORDS as u64 <= PACER_SHARED_FILE_SIZE);

/// The file a shared name means: a bare name is `/dev/shm/<name>`, anything
/// with a `/` a path (as `pacer_shared_open` reads it).
pub fn path_of(name: &str) -> PathBuf {
    match name.contains('/') {
        true => PathBuf::from(name),
        false => PathBuf::from(SHM_DIR).join(name),
    }
}

/// An open shared bucket, read-only.
#[derive(Debug)]
pub struct SharedBucket {
    file: File,
    path: PathBuf,
    config: BucketConfig,
    params: Params,
}

impl SharedBucket {
    /// Opens `name` read-only and checks its header: a missing file, one
    /// that is not a bucket, of another layout, truncated or incomplete is
    /// an error that names the file and creates nothing.
    pub fn open(name: &str) -> Result<SharedBucket, String> {
        if name.is_empty() {
            return Err("--shared needs a name or a path, got an empty one".into());
        }
        let path = path_of(name);
        let shown = path.display();
        let meta = std::fs::metadata(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("no shared bucket at {shown}: no such file"),
            _ => format!("cannot read {shown}: {e}"),
        })?;
        // Before opening: a FIFO would block the open.
        if !meta.is_file() {
            return Err(format!(
                "{shown} is not a shared bucket: not a regular file"
            ));
        }
        let file = File::open(&path).map_err(|e| format!("cannot open {shown}: {e}"))?;
        let size = file
            .metadata()
            .map_err(|e| format!("cannot read {shown}: {e}"))?
            .len();
        let mut header = [0u8; PACER_SHARED_HEADER_SIZE];
        let head_len = size.min(header.len() as u64) as usize;
        file.read_exact_at(&mut header[..head_len], 0)
            .map_err(|e| format!("cannot read {shown}: {e}"))?;
        if head_len < H_LAYOUT || header[H_MAGIC..H_MAGIC + 8] != FILE_MAGIC {
            return Err(format!(
                "{shown} is not a pacer shared bucket (no PACERSHM magic number)"
            ));
        }
        if head_len < H_LAYOUT + 4 {
            return Err(format!("{shown} is truncated: {size} bytes"));
        }
        let layout = u32_at(&header, H_LAYOUT);
        if layout != PACER_SHARED_LAYOUT_VERSION {
            return Err(format!(
                "{shown} is a layout {layout} bucket; this pacer reads layout \
                 {PACER_SHARED_LAYOUT_VERSION} (docs/shared-memory.md): watch it with the pacer \
                 that made it"
            ));
        }
        if size != PACER_SHARED_FILE_SIZE {
            return Err(format!(
                "{shown} is truncated or not a bucket: {size} bytes, a layout \
                 {PACER_SHARED_LAYOUT_VERSION} bucket has {PACER_SHARED_FILE_SIZE}"
            ));
        }
        if u64_at(&header, H_FILE_SIZE) != PACER_SHARED_FILE_SIZE {
            return Err(format!(
                "{shown} is not a pacer shared bucket (its header gives another file size)"
            ));
        }
        let offsets = [
            u64_at(&header, H_STATE_OFFSET),
            u64_at(&header, H_CONTROL_OFFSET),
            u64_at(&header, H_COUNTERS_OFFSET),
        ];
        if offsets != [STATE_AT, CONTROL_AT, COUNTERS_AT] {
            return Err(format!(
                "{shown} keeps its words at offsets {offsets:?}, not at {:?} as layout \
                 {PACER_SHARED_LAYOUT_VERSION} does",
                [STATE_AT, CONTROL_AT, COUNTERS_AT]
            ));
        }
        if u32_at(&header, H_READY) != READY {
            return Err(format!(
                "{shown} is incomplete (no ready mark): it is being created, or it was \
                 not made by pacer"
            ));
        }
        let stored = header::config(&header);
        let config = Config {
            rate_per_min: stored.rate_per_min,
            burst: stored.burst,
            idle_timeout_ms: stored.idle_timeout_ms,
            max_retries: stored.max_retries,
            release_policy: match stored.release_policy {
                0 => ReleasePolicy::Refund,
                1 => ReleasePolicy::Strict,
                other => {
                    return Err(format!(
                        "{shown}: the header's release policy {other} is neither 0 (refund) nor 1 (strict)"
                    ))
                }
            },
            adaptive_floor_per_min: stored.adaptive_floor_per_min,
            adaptive_ceiling_per_min: stored.adaptive_ceiling_per_min,
        };
        let params = Params::plan(&config)
            .map_err(|e| format!("{shown}: the header's configuration is refused: {e}"))?;
        let range = params.adaptive_range();
        Ok(SharedBucket {
            config: BucketConfig {
                rate_per_min: config.rate_per_min,
                burst: config.burst,
                idle_timeout_ms: config.idle_timeout_ms,
                max_retries: config.max_retries,
                release_policy: config.release_policy.name().to_string(),
                adaptive_floor_per_min: range.map(|(floor, _)| floor),
                adaptive_ceiling_per_min: range.map(|(_, ceiling)| ceiling),
            },
            file,
            path,
            params,
        })
    }

    /// The state word, the control word and the counters' words. The
    /// words change under the read (other processes' compare-and-swaps),
    /// which copies them 8 bytes at a time at best: the read is repeated
    /// until two in a row give the same state and control words, so
    /// neither is decoded half old, half new.
    fn words(&self) -> Result<[u8; WORDS_LEN], String> {
        let read = || -> Result<[u8; WORDS_LEN], String> {
            let mut words = [0u8; WORDS_LEN];
            self.file
                .read_exact_at(&mut words, STATE_AT)
                .map_err(|e| format!("cannot read {}: {e}", self.path.display()))?;
            Ok(words)
        };
        let mut last = read()?;
        for _ in 0..16 {
            let again = read()?;
            if again[..32] == last[..32] {
                return Ok(again);
            }
            last = again;
        }
        Ok(last)
    }
}

impl Bucket for SharedBucket {
    fn read(&mut self) -> Result<Reading, String> {
        let words = self.words()?;
        let word = |at: usize| u128::from_ne_bytes(words[at..at + 16].try_into().expect("16"));
        let state = StateView::unpack(word(0));
        let control = ControlView::unpack(word(16));
        let counters: [u64; COUNTER_WORDS] = std::array::from_fn(|i| {
            let at = 32 + 8 * i;
            u64::from_ne_bytes(words[at..at + 8].try_into().expect("8"))
        });
        // The shared clock: a reading behind the high-water mark reads the
        // mark, so a watch on another clock would only see the level late.
        let now_ms = pacer::shm::clock_ms();
        let in_force = self.params.in_force(&control, now_ms);
        let level_units = in_force.level_at(&state, now_ms);
        Ok(Reading {
            config: self.config.clone(),
            rate_in_force_per_min: self.params.rate_in_force(&control, now_ms),
            tokens: level_units as f64 / UNITS_PER_TOKEN as f64,
            queue: Queue::at(level_units, in_force.max_debt_units()),
            counts: Counts::from_snapshot(&CounterSnapshot::from_words(&counters)),
        })
    }

    fn source(&self) -> &'static str {
        "shared"
    }

    fn describe(&self) -> String {
        format!("shared bucket {}", self.path.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_name_is_in_dev_shm_and_a_path_is_itself() {
        assert_eq!(path_of("proxy-a"), PathBuf::from("/dev/shm/proxy-a"));
        assert_eq!(path_of("./proxy-a"), PathBuf::from("./proxy-a"));
        assert_eq!(path_of("/run/pacer/a"), PathBuf::from("/run/pacer/a"));
    }

    #[test]
    fn the_offsets_are_the_documented_ones() {
        // docs/shared-memory.md: 65536, 65552, 65568; 20 counter words.
        assert_eq!((STATE_AT, CONTROL_AT, COUNTERS_AT), (65536, 65552, 65568));
        assert_eq!(WORDS_LEN, 32 + 160);
    }
}
