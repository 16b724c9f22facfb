//! One process per shard. Two processes serving one shard on the same bus (a copied
//! deployment, a shard listed twice) would each apply the requests they were given, keep
//! stores that drift apart, and answer in turn. So before a shard takes requests it asks on
//! its presence subject (`<shard subject>.presence`) whether a process already serves it,
//! and refuses to start if one answers. Once serving, it answers that question, and says
//! every [`ANNOUNCE_EVERY`] that it serves and for how long. Two that serve at once (neither
//! saw the other at start: they started together, or one was cut off from the bus) keep the
//! one that has served longer, by each one's own monotonic clock (a wall clock may be off by
//! hours); within [`SAME_TIME`] of each other, the earlier start by the wall clock, then host
//! and process ID. The other stops, its log naming both, and its process exits with an
//! error. A best effort: requests either took while both served are in neither's store
//! alone.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use cascade_bus::{Bus, BusError, Subscription};

use crate::Shutdown;

/// How often a serving shard says so on its presence subject.
pub const ANNOUNCE_EVERY: Duration = Duration::from_secs(2);
/// How long a starting shard waits for a serving one to answer.
const ASK_TIMEOUT: Duration = Duration::from_secs(2);
/// Two shards whose serving times differ by less than this started together, as far as
/// their announcements can tell.
const SAME_TIME: Duration = Duration::from_secs(4);
const FORMAT: &str = "cascade-presence-v1";

/// Which process serves a shard, and since when: the earlier start keeps the shard.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Server {
    started_micros: u64,
    host: String,
    pid: u32,
}

impl Server {
    /// This process, starting now.
    pub fn this_process() -> Server {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|name| name.trim().to_owned())
            .ok()
            .filter(|name| !name.is_empty() && !name.contains(char::is_whitespace))
            .unwrap_or_else(|| "unknown-host".to_owned());
        let started_micros = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        Server {
            started_micros,
            host,
            pid: std::process::id(),
        }
    }

    /// This process, serving for `served`.
    fn encode(&self, served: Duration) -> Bytes {
        Bytes::from(format!(
            "{FORMAT} {} {} {} {}",
            self.started_micros,
            self.host,
            self.pid,
            served.as_millis()
        ))
    }

    /// A process, and how long it had served when it said so.
    fn decode(bytes: &[u8]) -> Option<(Server, Duration)> {
        let text = std::str::from_utf8(bytes).ok()?;
        let mut words = text.split(' ');
        (words.next()? == FORMAT).then_some(())?;
        let server = Server {
            started_micros: words.next()?.parse().ok()?,
            host: words.next()?.to_owned(),
            pid: words.next()?.parse().ok()?,
        };
        let served = Duration::from_millis(words.next()?.parse().ok()?);
        words.next().is_none().then_some((server, served))
    }

    /// Whether this process, serving for `mine`, gives the shard up to `other`, serving for
    /// `theirs`: the longer server keeps it; within [`SAME_TIME`], the earlier start.
    fn yields_to(&self, mine: Duration, other: &Server, theirs: Duration) -> bool {
        if theirs > mine + SAME_TIME {
            return true;
        }
        if mine > theirs + SAME_TIME {
            return false;
        }
        other < self
    }

    /// "process 4121 on host a, started 3 s before this one".
    fn describe(&self, against: &Server) -> String {
        let (earlier, gap) = match self.started_micros <= against.started_micros {
            true => ("before", against.started_micros - self.started_micros),
            false => ("after", self.started_micros - against.started_micros),
        };
        format!(
            "process {} on host {}, started {:.1}s {earlier} this one",
            self.pid,
            self.host,
            gap as f64 / 1e6
        )
    }
}

/// The presence subject of the shard whose requests come on `subject`.
pub fn subject_of(subject: &str) -> String {
    format!("{subject}.presence")
}

/// Asks whether a process already serves the shard; `Err` names it. A bus that cannot be
/// asked is an error too: the shard would not be reachable either.
pub async fn ask(bus: &Bus, presence: &str, me: &Server) -> Result<(), String> {
    match bus
        .request_as("presence", presence, me.encode(Duration::ZERO), ASK_TIMEOUT)
        .await
    {
        Err(BusError::NoResponders { .. }) => Ok(()),
        // A process that does not answer in time does not serve the shard either.
        Err(BusError::Timeout { .. }) => Ok(()),
        Err(e) => Err(format!("cannot ask the bus whether another process serves it: {e}")),
        Ok(reply) => Err(match Server::decode(&reply) {
            Some((other, _)) => format!(
                "another process already serves it on this bus ({}): two processes must never serve one shard; stop one, or check which shards each serves",
                other.describe(me)
            ),
            None => "another process already serves it on this bus (it answered in a form this version does not read): two processes must never serve one shard".to_owned(),
        }),
    }
}

/// Where a shard answers and announces, and as whom.
pub struct Presence {
    pub bus: Bus,
    pub subject: String,
    pub subscription: Subscription,
    pub me: Server,
    pub service: &'static str,
    pub shard: u32,
}

/// Answers on the presence subject for `me` and says every `every` that it serves, until
/// `stopping`, or until a process it yields to (see the module) says it serves the shard
/// too: then logs both and returns, and the shard fails.
pub async fn serve(presence: Presence, every: Duration, stopping: Shutdown) {
    let Presence {
        bus,
        subject: presence,
        mut subscription,
        me,
        service,
        shard,
    } = presence;
    let serving_since = tokio::time::Instant::now();
    let mut announce = tokio::time::interval(every);
    loop {
        tokio::select! {
            () = stopping.wait() => return,
            message = subscription.next() => {
                let Some(message) = message else { return };
                let mine = serving_since.elapsed();
                if message.wants_reply() {
                    let _ = message.respond(me.encode(mine)).await;
                    continue;
                }
                let Some((other, theirs)) = Server::decode(&message.payload()) else { continue };
                if other == me {
                    continue;
                }
                if me.yields_to(mine, &other, theirs) {
                    tracing::error!(
                        shard,
                        other = %other.describe(&me),
                        "{service}.shard.served_elsewhere: another process that has served this shard longer serves it on the same bus; this one stops"
                    );
                    return;
                }
                tracing::error!(
                    shard,
                    other = %other.describe(&me),
                    "{service}.shard.served_twice: another process serves this shard on the same bus; it has served it for less time and stops"
                );
            }
            _ = announce.tick() => {
                let served = me.encode(serving_since.elapsed());
                if let Err(e) = bus.publish(&presence, served).await {
                    tracing::debug!(shard, error = %e, "{service}.shard.announce_failed");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(started_micros: u64, pid: u32) -> Server {
        Server {
            started_micros,
            host: "h".into(),
            pid,
        }
    }

    #[test]
    fn a_server_reads_back_as_it_was_written_and_nothing_else_does() {
        let me = Server::this_process();
        let served = Duration::from_millis(2500);
        assert_eq!(Server::decode(&me.encode(served)), Some((me, served)));
        for bad in [
            "",
            "cascade-presence-v1 1 h 2",
            "other 1 h 2 3",
            "cascade-presence-v1 1 h 2 3 x",
            "cascade-presence-v1 1 h 2 -3",
        ] {
            assert_eq!(Server::decode(bad.as_bytes()), None, "{bad:?}");
        }
    }

    #[test]
    fn the_longer_server_keeps_the_shard_then_the_earlier_start() {
        let secs = Duration::from_secs;
        let (early, late) = (server(1, 9), server(2, 1));
        // Served for a while: kept, whatever the wall clocks say.
        assert!(early.yields_to(secs(1), &late, secs(3600)));
        assert!(!late.yields_to(secs(3600), &early, secs(1)));
        // Together: the earlier start, then host, then pid; both agree.
        assert!(late.yields_to(secs(2), &early, secs(3)));
        assert!(!early.yields_to(secs(3), &late, secs(2)));
        assert!(server(1, 2).yields_to(secs(0), &server(1, 1), secs(0)));
        assert!(!server(1, 1).yields_to(secs(0), &server(1, 2), secs(0)));
        assert_eq!(
            server(1_000_000, 7).describe(&server(4_500_000, 8)),
            "process 7 on host h, started 3.5s before this one"
        );
    }

    /// Two shards that did not see each other at start, and began serving together: the
    /// later start's presence ends when it hears the earlier one, which keeps serving.
    #[tokio::test]
    async fn of_two_serving_one_shard_the_later_stops() {
        let bus = Bus::local();
        let presence = subject_of("cascade.c.dispatcher.0");
        let (earlier, later) = (server(1, 1), server(2, 2));
        let (_stop, stopping) = crate::shutdown_channel();
        let mut tasks = Vec::new();
        for me in [earlier, later] {
            let serving = Presence {
                bus: bus.clone(),
                subject: presence.clone(),
                subscription: bus.subscribe(&presence).await.expect("subscribe"),
                me,
                service: "dispatcher",
                shard: 0,
            };
            let every = Duration::from_millis(20);
            tasks.push(tokio::spawn(serve(serving, every, stopping.clone())));
        }
        let later = tasks.pop().expect("the later one");
        tokio::time::timeout(Duration::from_secs(10), later)
            .await
            .expect("the later one stops")
            .expect("no panic");
        assert!(!tasks[0].is_finished(), "the earlier one keeps serving");
        assert!(
            ask(&bus, &presence, &server(3, 3)).await.is_err(),
            "it still answers"
        );
    }
}
