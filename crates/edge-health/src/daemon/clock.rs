//! The one place the daemon reads the system clock: the core takes time as values
//! ([`crate::time`]), and every task of the daemon hands it this.

use crate::time::Timestamp;

/// The wall clock as the core's [`Timestamp`].
pub fn wall_clock() -> Timestamp {
    let since_epoch = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Timestamp::from_unix_millis(u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX))
}
