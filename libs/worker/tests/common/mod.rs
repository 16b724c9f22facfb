//! What the worker's tests share.

use std::time::{Duration, SystemTime};

use cascade_proto::v1::{self, LeasedEvent};

/// Event `id` of `jobs`, leased for a minute with the token `token-<id>`.
pub fn leased(id: &str) -> LeasedEvent {
    let now = SystemTime::now();
    let in_a_minute = now + Duration::from_secs(60);
    LeasedEvent {
        event: Some(v1::Event {
            id: id.to_owned(),
            queue: "jobs".into(),
            payload: id.as_bytes().to_vec().into(),
            activate_at: Some(now.into()),
            created_at: Some(now.into()),
            state: v1::EventState::Leased as i32,
            attempts: 1,
            ..v1::Event::default()
        }),
        lease_token: format!("token-{id}"),
        lease_expires_at: Some(in_a_minute.into()),
    }
}
