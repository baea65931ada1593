//! [`Management::audit`]: the operators' state changes, appended to a capped Redis stream
//! and read back ([`bus_redis::admin::AuditEntry`]; `bus audit`, the dashboard).

use bus_redis::admin::AuditEntry;

use crate::{Management, Result};

impl Management {
    /// Appends one entry to the audit log (one `XADD ... MAXLEN ~`), after the change it
    /// records was made. Returns its id.
    pub async fn audit(&self, entry: &AuditEntry) -> Result<String> {
        Ok(self.admin().audit(entry).await?)
    }

    /// The newest `count` entries of the audit log, newest first.
    pub async fn audit_log(&self, count: u64) -> Result<Vec<AuditEntry>> {
        Ok(self.admin().audit_log(count).await?)
    }
}
