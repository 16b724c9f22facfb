//! The pipeline record: a pipeline as `ApplyPipeline` stored it, on every shard. Decoding
//! validates it again, so a record that passes is one the rest of the code can trust
//! (its stage names form queue names, its `next` names a stage).

use std::time::Duration;

use cascade_core::{HandlerKind, HandlerSpec, Pipeline, Stage};

use super::{V1, decode_config, encode_config, micros};
use crate::codec::bytes::{Malformed, Reader, Writer};

const HTTP: u8 = 1;
const GRPC: u8 = 2;
const BUILTIN: u8 = 3;

pub fn encode_pipeline(pipeline: &Pipeline) -> Vec<u8> {
    let mut w = Writer::with_capacity(128 * pipeline.stages.len() + 32);
    w.u8(V1).str(&pipeline.name);
    w.u32(u32::try_from(pipeline.stages.len()).unwrap_or(u32::MAX));
    for stage in &pipeline.stages {
        w.str(&stage.name);
        encode_config(&mut w, &stage.queue, V1);
        let (kind, target) = match &stage.handler.kind {
            HandlerKind::Http { url } => (HTTP, url),
            HandlerKind::Grpc { endpoint } => (GRPC, endpoint),
            HandlerKind::Builtin(name) => (BUILTIN, name),
        };
        w.u8(kind)
            .str(target)
            .u32(stage.handler.concurrency)
            .u64(micros(stage.handler.timeout))
            .u32(stage.priority)
            .u32(stage.min_handlers)
            .u32(stage.max_handlers)
            .str(stage.next.as_deref().unwrap_or(""));
    }
    w.finish()
}

pub fn decode_pipeline(buf: &[u8]) -> Result<Pipeline, Malformed> {
    let mut r = Reader::new(buf, "pipeline record");
    r.expect_version(V1)?;
    let name = r.string()?;
    let count = r.u32()?;
    // Not pre-sized from the stored count: a corrupt count must not allocate gigabytes.
    let mut stages = Vec::new();
    for _ in 0..count {
        stages.push(decode_stage(&mut r)?);
    }
    r.finish()?;
    let pipeline = Pipeline { name, stages };
    pipeline
        .validate()
        .map_err(|e| Malformed(format!("pipeline record {}: {e}", pipeline.name)))?;
    Ok(pipeline)
}

fn decode_stage(r: &mut Reader<'_>) -> Result<Stage, Malformed> {
    let name = r.string()?;
    let queue = decode_config(r, V1)?;
    let kind = r.u8()?;
    let target = r.string()?;
    let kind = match kind {
        HTTP => HandlerKind::Http { url: target },
        GRPC => HandlerKind::Grpc { endpoint: target },
        BUILTIN => HandlerKind::Builtin(target),
        _ => return Err(r.malformed("unknown handler kind")),
    };
    let concurrency = r.u32()?;
    let timeout = Duration::from_micros(r.u64()?);
    let priority = r.u32()?;
    let min_handlers = r.u32()?;
    let max_handlers = r.u32()?;
    let next = r.string()?;
    Ok(Stage {
        name,
        queue,
        handler: HandlerSpec {
            kind,
            concurrency,
            timeout,
        },
        priority,
        min_handlers,
        max_handlers,
        next: (!next.is_empty()).then_some(next),
    })
}

#[cfg(test)]
mod tests {
    use cascade_core::{QueueConfig, QueueName};

    use super::*;

    fn stage(name: &str, kind: HandlerKind) -> Stage {
        Stage {
            name: name.into(),
            queue: QueueConfig::default(),
            handler: HandlerSpec {
                kind,
                concurrency: 4,
                timeout: Duration::from_millis(2500),
            },
            priority: 7,
            min_handlers: 1,
            max_handlers: 3,
            next: None,
        }
    }

    fn sample() -> Pipeline {
        let mut charge = stage(
            "charge",
            HandlerKind::Http {
                url: "http://billing/charge".into(),
            },
        );
        charge.queue.lease = Duration::from_secs(90);
        charge.queue.dead_letter_queue = Some(QueueName::parse("graveyard").expect("valid"));
        charge.next = Some("validate".into());
        Pipeline {
            name: "orders".into(),
            stages: vec![
                stage("validate", HandlerKind::Builtin("noop".into())),
                charge,
                stage(
                    "ship",
                    HandlerKind::Grpc {
                        endpoint: "http://127.0.0.1:50051".into(),
                    },
                ),
            ],
        }
    }

    #[test]
    fn pipelines_round_trip_and_verify() {
        let pipeline = sample();
        let buf = encode_pipeline(&pipeline);
        assert_eq!(decode_pipeline(&buf), Ok(pipeline));
        let key = crate::codec::keys::pipeline("orders");
        assert_eq!(crate::codec::check_entry(&key, &buf), Ok(()));
    }

    #[test]
    fn a_damaged_or_invalid_record_is_refused() {
        let buf = encode_pipeline(&sample());
        assert!(decode_pipeline(&buf[..buf.len() - 1]).is_err());
        let mut longer = buf.clone();
        longer.push(0);
        assert!(decode_pipeline(&longer).is_err());
        let mut invalid = sample();
        invalid.stages[0].next = Some("nowhere".into());
        let err = decode_pipeline(&encode_pipeline(&invalid)).expect_err("bad next");
        assert!(
            err.0.starts_with("pipeline record orders: stages[0].next"),
            "{err}"
        );
    }
}
