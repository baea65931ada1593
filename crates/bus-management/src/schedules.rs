//! [`Management::schedules`]: the recurring schedules hosts run, each with its last tick
//! and next run ([`bus_redis::admin::ScheduleEntry`]; `bus schedules`, the dashboard's
//! Schedules page).

use bus_redis::admin::ScheduleEntry;

use crate::{Management, Result};

impl Management {
    /// Every recorded schedule (name, cron, zone, target queue, policy for missed
    /// ticks), with its last tick and next run, by queue then name.
    pub async fn schedules(&self) -> Result<Vec<ScheduleEntry>> {
        Ok(self.admin().schedules().await?)
    }
}
