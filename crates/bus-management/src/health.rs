//! [`Management::health`]: Redis's own configuration checked for what loses or stalls
//! messages ([`bus_redis::admin::health`]'s checks; `bus doctor`, the dashboard's panel).

use bus_redis::admin::Health;

use crate::Management;

impl Management {
    /// What in the Redis in use (and the protocol recorded under the prefix) silently
    /// loses or stalls messages, each finding with what to change. Never fails: a check
    /// that cannot be read is `Unknown`.
    pub async fn health(&self) -> Health {
        self.admin().health().await
    }
}
