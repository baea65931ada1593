//! [`Management::hosts`]: the running hosts from their heartbeats, each running or lost
//! ([`bus_redis::admin::HostEntry`]; `bus hosts`, the dashboard's Hosts page).

use bus_redis::admin::HostEntry;

use crate::{Management, Result};

impl Management {
    /// Every host that reported within the keep time (5 min by default), running ones
    /// first; a host with no report for two of its intervals is `lost`.
    pub async fn hosts(&self) -> Result<Vec<HostEntry>> {
        Ok(self.admin().hosts().await?)
    }
}
