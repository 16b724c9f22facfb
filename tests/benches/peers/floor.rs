//! Two more ways to call the same `cascade standalone`, so that Cascade's CPU per enqueue can
//! be told apart from the gRPC stack's it runs on:
//! - **stock tonic client**: the enqueues of the `Cascade` row from a plain tonic
//!   `IngestClient` on a `Channel`, beside `cascade-client`'s;
//! - **gRPC floor**: a unary call that does no work, the health `Check`, through the same
//!   server, its layers (authentication, admission) and the same kind of client: what any
//!   unary call costs before Cascade does anything;
//! - **one channel, unary calls**: producers sharing one `cascade-client` connection, each
//!   event its own `Enqueue` call on it, beside the batching enqueuer of the `shared` rows.

use cascade_client::Client;
use cascade_client::api::ingest_client::IngestClient;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

use crate::BoxError;
use crate::systems::{Cascade, Item, Producing, request};

pub struct StockTonic {
    pub addr: String,
}

pub struct GrpcFloor {
    pub addr: String,
}

/// One `cascade-client` connection that every producer shares.
pub struct OneChannel {
    client: Client,
}

impl OneChannel {
    pub async fn connect(addr: &str) -> Result<OneChannel, BoxError> {
        Ok(OneChannel {
            client: Client::connect(addr).await?,
        })
    }
}

async fn channel(addr: &str) -> Result<Channel, BoxError> {
    Ok(Channel::from_shared(format!("http://{addr}"))?
        .connect()
        .await?)
}

impl Producing for StockTonic {
    type Producer = IngestClient<Channel>;
    const NAME: &'static str = "Cascade, stock tonic client";

    async fn producer(&self) -> Result<IngestClient<Channel>, BoxError> {
        Ok(IngestClient::new(channel(&self.addr).await?))
    }

    async fn enqueue(
        client: &mut IngestClient<Channel>,
        queue: &str,
        item: Item,
    ) -> Result<(), BoxError> {
        client.enqueue(request(queue, item)).await?;
        Ok(())
    }
}

impl Producing for GrpcFloor {
    type Producer = HealthClient<Channel>;
    const NAME: &'static str = "gRPC floor: health Check";

    async fn producer(&self) -> Result<HealthClient<Channel>, BoxError> {
        Ok(HealthClient::new(channel(&self.addr).await?))
    }

    /// Sends nothing of the item: the call is the measure.
    async fn enqueue(
        client: &mut HealthClient<Channel>,
        _queue: &str,
        _item: Item,
    ) -> Result<(), BoxError> {
        let check = HealthCheckRequest {
            service: String::new(),
        };
        client.check(check).await?;
        Ok(())
    }
}

impl Producing for OneChannel {
    type Producer = Client;
    const NAME: &'static str = "Cascade, one channel, unary";

    async fn producer(&self) -> Result<Client, BoxError> {
        Ok(self.client.clone())
    }

    async fn enqueue(client: &mut Client, queue: &str, item: Item) -> Result<(), BoxError> {
        Cascade::enqueue(client, queue, item).await
    }
}
