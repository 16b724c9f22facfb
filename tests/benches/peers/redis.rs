//! Redis as a reliable delay queue, the way Redis-based job queues build one: per queue a
//! list of ready events, a sorted set of delayed ones (by due time) and a sorted set of
//! leased ones (by lease deadline, for a reaper to give back). An enqueue is one `LPUSH`
//! (or `ZADD` for a delayed event); a take is one Lua script that first moves the events
//! that came due to the ready list, then pops up to 100 and leases them; an ack is one
//! `ZREM` of the batch. Every write is fsynced by the append-only file (`appendfsync
//! always`) before Redis answers.

use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, Script};

use crate::BoxError;
use crate::systems::{Item, Peer, Producing, now_micros};

/// How long a taken event stays leased.
const LEASE_MS: u64 = 30_000;

/// Moves what came due, pops up to ARGV[2] ready events and leases them.
/// KEYS: ready list, delayed set, leased set; ARGV: now (ms), count, lease deadline (ms).
const TAKE: &str = r"
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
if #due > 0 then
  redis.call('ZREM', KEYS[2], unpack(due))
  redis.call('LPUSH', KEYS[1], unpack(due))
end
local items = redis.call('RPOP', KEYS[1], ARGV[2])
if not items then return {} end
for _, item in ipairs(items) do redis.call('ZADD', KEYS[3], ARGV[3], item) end
return items
";

pub struct Redis {
    pub url: String,
}

/// A connection and the take script; its clones share the connection, pipelining their
/// commands on it.
#[derive(Clone)]
pub struct Connection {
    connection: MultiplexedConnection,
    take: Script,
}

/// A due time in µs as the sorted set's score: whole milliseconds, rounded up so that no
/// event is moved before it is due.
fn due_ms(due_micros: u64) -> u64 {
    due_micros.div_ceil(1000)
}

fn keys(queue: &str) -> [String; 3] {
    ["ready", "delayed", "leased"].map(|kind| format!("{queue}:{kind}"))
}

impl Redis {
    async fn connect(&self) -> Result<Connection, BoxError> {
        let client = redis::Client::open(self.url.as_str())?;
        Ok(Connection {
            connection: client.get_multiplexed_async_connection().await?,
            take: Script::new(TAKE),
        })
    }
}

impl Producing for Redis {
    type Producer = Connection;
    const NAME: &'static str = "Redis";

    async fn producer(&self) -> Result<Connection, BoxError> {
        self.connect().await
    }

    async fn enqueue(c: &mut Connection, queue: &str, item: Item) -> Result<(), BoxError> {
        let [ready, delayed, _] = keys(queue);
        match item.due {
            Some(due) => {
                let _: () = c
                    .connection
                    .zadd(delayed, item.payload, due_ms(due))
                    .await?;
            }
            None => {
                let _: () = c.connection.lpush(ready, item.payload).await?;
            }
        }
        Ok(())
    }
}

impl Peer for Redis {
    type Consumer = Connection;
    const DELAYS: bool = true;

    async fn setup(&self, _queues: &[String]) -> Result<(), BoxError> {
        Ok(())
    }

    async fn consumer(&self) -> Result<Connection, BoxError> {
        self.connect().await
    }

    async fn enqueue_many(
        c: &mut Connection,
        queue: &str,
        items: Vec<Item>,
    ) -> Result<(), BoxError> {
        let [ready, delayed, _] = keys(queue);
        let (later, now): (Vec<Item>, Vec<Item>) = items.into_iter().partition(|i| i.due.is_some());
        if !now.is_empty() {
            let payloads: Vec<Vec<u8>> = now.into_iter().map(|i| i.payload).collect();
            let _: () = c.connection.lpush(ready, payloads).await?;
        }
        if !later.is_empty() {
            let scored: Vec<(u64, Vec<u8>)> = later
                .into_iter()
                .map(|i| (due_ms(i.due.unwrap_or(0)), i.payload))
                .collect();
            let _: () = c.connection.zadd_multiple(delayed, &scored).await?;
        }
        Ok(())
    }

    async fn take_ack(
        c: &mut Connection,
        queue: &str,
        max: usize,
    ) -> Result<Vec<Vec<u8>>, BoxError> {
        let [ready, delayed, leased] = keys(queue);
        let now_ms = now_micros() / 1000;
        let taken: Vec<Vec<u8>> = c
            .take
            .key(&ready)
            .key(&delayed)
            .key(&leased)
            .arg(now_ms)
            .arg(max)
            .arg(now_ms + LEASE_MS)
            .invoke_async(&mut c.connection)
            .await?;
        if !taken.is_empty() {
            let _: () = c.connection.zrem(leased, &taken).await?;
        }
        Ok(taken)
    }

    /// One multiplexed connection: the producers' commands are pipelined on it.
    type Shared = Connection;

    async fn shared(&self) -> Result<Connection, BoxError> {
        self.connect().await
    }

    async fn enqueue_shared(c: &Connection, queue: &str, item: Item) -> Result<(), BoxError> {
        Self::enqueue(&mut c.clone(), queue, item).await
    }
}
