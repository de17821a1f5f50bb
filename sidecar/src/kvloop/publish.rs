//! Writes the eviction order file (`recache_adapters::order`) atomically: a temp file in the
//! same directory, then rename, so a reader sees the old or the new order, never a mix.

use std::io::Write;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use recache_adapters::order::Order;

pub fn write(path: &Path, generation: u64, seq: u64, victims: Vec<u64>) -> std::io::Result<()> {
    let publish_unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let bytes = Order {
        publish_unix_ms,
        generation,
        seq,
        victims,
    }
    .encode();
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&bytes)?;
    drop(f);
    std::fs::rename(&tmp, path)
}
