//! PostgreSQL as a queue, the way a `SKIP LOCKED` job table is built: one table of events
//! with their queue, payload, due time and lease deadline, an index of the unleased ones
//! by queue and due time. An enqueue is one `INSERT`; a take is one `UPDATE … WHERE id IN
//! (SELECT … FOR UPDATE SKIP LOCKED LIMIT 100) RETURNING` that leases the due events; an
//! ack is one `DELETE` of the batch. Each is its own transaction, committed with
//! `synchronous_commit = on` (the WAL flushed to disk before the answer).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio_postgres::{Client, NoTls, Statement};

use crate::BoxError;
use crate::systems::{Item, Peer, Producing};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS events (
  id bigserial PRIMARY KEY,
  queue text NOT NULL,
  payload bytea NOT NULL,
  due timestamptz NOT NULL DEFAULT now(),
  leased_until timestamptz
);
CREATE INDEX IF NOT EXISTS ready ON events (queue, due) WHERE leased_until IS NULL;
";
const ENQUEUE: &str = "INSERT INTO events (queue, payload, due) VALUES ($1, $2, $3)";
const ENQUEUE_MANY: &str = "INSERT INTO events (queue, payload, due) \
    SELECT $1, unnest($2::bytea[]), unnest($3::timestamptz[])";
const TAKE: &str = "UPDATE events SET leased_until = now() + interval '30 seconds' \
    WHERE id IN (SELECT id FROM events WHERE queue = $1 AND leased_until IS NULL AND due <= now() \
    ORDER BY due LIMIT $2 FOR UPDATE SKIP LOCKED) RETURNING id, payload";
const ACK: &str = "DELETE FROM events WHERE id = ANY($1)";

/// How long the server may take to be ready once it listens.
const READY_WITHIN: Duration = Duration::from_secs(60);

pub struct Postgres {
    pub port: u16,
}

/// A connection with its prepared statements.
pub struct Connection {
    client: Client,
    enqueue: Statement,
    enqueue_many: Statement,
    take: Statement,
    ack: Statement,
}

fn when(due: Option<u64>) -> SystemTime {
    due.map_or_else(SystemTime::now, |micros| {
        UNIX_EPOCH + Duration::from_micros(micros)
    })
}

impl Postgres {
    async fn client(&self) -> Result<Client, BoxError> {
        let config = format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        );
        let (client, connection) = tokio_postgres::connect(&config, NoTls).await?;
        tokio::spawn(connection);
        Ok(client)
    }

    async fn connect(&self) -> Result<Connection, BoxError> {
        let client = self.client().await?;
        Ok(Connection {
            enqueue: client.prepare(ENQUEUE).await?,
            enqueue_many: client.prepare(ENQUEUE_MANY).await?,
            take: client.prepare(TAKE).await?,
            ack: client.prepare(ACK).await?,
            client,
        })
    }
}

/// One `INSERT`, its own transaction.
async fn insert(c: &Connection, queue: &str, item: Item) -> Result<(), BoxError> {
    let due = when(item.due);
    c.client
        .execute(&c.enqueue, &[&queue, &item.payload, &due])
        .await?;
    Ok(())
}

impl Producing for Postgres {
    type Producer = Connection;
    const NAME: &'static str = "PostgreSQL";

    async fn producer(&self) -> Result<Connection, BoxError> {
        self.connect().await
    }

    async fn enqueue(c: &mut Connection, queue: &str, item: Item) -> Result<(), BoxError> {
        insert(c, queue, item).await
    }
}

impl Peer for Postgres {
    type Consumer = Connection;
    const DELAYS: bool = true;

    async fn setup(&self, _queues: &[String]) -> Result<(), BoxError> {
        // The server accepts connections before it is ready for them ("starting up").
        let deadline = Instant::now() + READY_WITHIN;
        let client = loop {
            match self.client().await {
                Ok(client) => break client,
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(e),
            }
        };
        client.batch_execute(SCHEMA).await?;
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
        let dues: Vec<SystemTime> = items.iter().map(|i| when(i.due)).collect();
        let payloads: Vec<Vec<u8>> = items.into_iter().map(|i| i.payload).collect();
        c.client
            .execute(&c.enqueue_many, &[&queue, &payloads, &dues])
            .await?;
        Ok(())
    }

    async fn take_ack(
        c: &mut Connection,
        queue: &str,
        max: usize,
    ) -> Result<Vec<Vec<u8>>, BoxError> {
        let limit = max as i64;
        let rows = c.client.query(&c.take, &[&queue, &limit]).await?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = rows.iter().map(|row| row.get(0)).collect();
        let payloads = rows.iter().map(|row| row.get(1)).collect();
        c.client.execute(&c.ack, &[&ids]).await?;
        Ok(payloads)
    }

    /// One connection, its statements pipelined: each `INSERT` is still its own
    /// transaction, committed in turn (a service wanting more opens a pool).
    type Shared = Arc<Connection>;

    async fn shared(&self) -> Result<Arc<Connection>, BoxError> {
        Ok(Arc::new(self.connect().await?))
    }

    async fn enqueue_shared(c: &Arc<Connection>, queue: &str, item: Item) -> Result<(), BoxError> {
        insert(c, queue, item).await
    }
}
