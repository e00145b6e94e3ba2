//! A child process stopped (SIGTERM, then waited for) when a test ends early on a failed
//! assertion, so a run that failed does not leave it running, holding its ports and
//! slot for the next test.

use std::process::{Child, Command};

pub struct StopOnDrop(pub Child);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = Command::new("kill").args(["-TERM", &self.0.id().to_string()]).status();
            let _ = self.0.wait();
        }
    }
}
