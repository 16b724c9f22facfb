//! A Cascade worker in a few lines: prints every event of a queue, then acks it.
//!
//! With Cascade running (`cascade standalone`) and a queue created, run
//!
//! ```text
//! cargo run -p cascade-worker --example echo_worker -- http://127.0.0.1:7700 echo
//! ```
//!
//! To write your own worker, copy this file and change `handle`: return `Outcome::Advance`
//! to move the event to the next stage, `Outcome::Retry` to try again later, or an `Err`
//! to retry with the queue's backoff. Ctrl-C drains: events not started go back to the
//! queue, running handlers finish.

use cascade_worker::{Event, Handler, HandlerError, Outcome, Worker, WorkerConfig};

struct Echo;

impl Handler for Echo {
    async fn handle(&self, event: &Event, attempt: u32) -> Result<Outcome, HandlerError> {
        let text = String::from_utf8_lossy(&event.payload);
        println!("{} {} (attempt {attempt}): {text}", event.queue, event.id);
        Ok(Outcome::Ack)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let gateway = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:7700".to_owned());
    let queue = args.next().unwrap_or_else(|| "echo".to_owned());
    let config = WorkerConfig::new(&queue)?.concurrency(4).batch(32);
    let worker = Worker::connect(&gateway, config, Echo).await?;
    worker
        .run_until(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
