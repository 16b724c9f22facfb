//! A `Take` that carries completions: a worker completes its last batch and takes the next in
//! one call. The completions apply once the take has chosen its events, those of another
//! shard's queue too, each with its own result numbered as asked; a take that fails applies
//! none of them.

use cascade_client::{Client, api};
use cascade_core::{QueueName, shard_of};
use tonic::Code;

use super::{ack, complete, config, create, enqueue, id, item, names_on_two_shards, stats, take};
use crate::Cluster;
use crate::cluster::SHARDS;

fn completion(e: &api::LeasedEvent, outcome: api::completion::Outcome) -> api::Completion {
    let event = e.event.as_ref().expect("event");
    api::Completion {
        queue: event.queue.clone(),
        id: event.id.clone(),
        lease_token: e.lease_token.clone(),
        outcome: Some(outcome),
    }
}

async fn take_carrying(
    c: &Client,
    queue: &str,
    max: u32,
    completions: Vec<api::Completion>,
) -> Result<api::TakeResponse, tonic::Status> {
    let request = api::TakeRequest {
        queue: queue.into(),
        max_events: max,
        completions,
        ..Default::default()
    };
    Ok(c.worker().take(request).await?.into_inner())
}

pub async fn a_take_carries_the_completions_of_the_last(cluster: &mut Cluster) {
    let c = cluster.client().await;
    let (here, there) = names_on_two_shards("carry");
    create(&c, &here, config(30.0, 5)).await;
    create(&c, &there, config(30.0, 5)).await;
    let mut ids = Vec::new();
    for i in 0..4 {
        let mut event = item(&here, &format!("e{i}"));
        if i == 1 {
            event.headers = (0..40).map(|h| (format!("h{h}"), "x".into())).collect();
        }
        ids.push(enqueue(&c, event).await.id);
    }
    let mut crowded_there = item(&there, "o");
    crowded_there.headers = (0..40).map(|h| (format!("h{h}"), "x".into())).collect();
    enqueue(&c, crowded_there).await;
    let first = take(&c, &here, 3, 0.0).await;
    assert_eq!(first.iter().map(id).collect::<Vec<_>>(), ids[..3]);
    let elsewhere = take(&c, &there, 1, 0.0).await;
    assert_eq!(elsewhere.len(), 1);

    let unreadable = api::Completion {
        lease_token: "not a token".into(),
        ..completion(&first[2], ack())
    };
    // Valid alone; their shards find 70 headers once merged with the event's 40, and name the
    // field from the completion, which the gateway places in the request.
    let crowded = |to: &str| {
        api::completion::Outcome::Advance(api::Advance {
            to: to.into(),
            headers: (0..30).map(|h| (format!("a{h}"), "y".into())).collect(),
            ..Default::default()
        })
    };
    let release = api::completion::Outcome::Release(api::Release {});
    let carried = vec![
        completion(&first[0], ack()),
        completion(&elsewhere[0], crowded(&here)),
        unreadable,
        completion(&first[1], crowded(&there)),
        completion(&first[2], release),
    ];
    let answer = take_carrying(&c, &here, 2, carried)
        .await
        .expect("a take carrying completions");
    // The take chose its events before the release made the third event ready again.
    assert_eq!(answer.events.iter().map(id).collect::<Vec<_>>(), ids[3..]);
    let codes: Vec<i32> = answer.completions.iter().map(|r| r.code).collect();
    let (ok, invalid) = (Code::Ok as i32, Code::InvalidArgument as i32);
    assert_eq!(
        codes,
        [ok, invalid, invalid, invalid, ok],
        "{:?}",
        answer.completions
    );
    let fields: Vec<&str> = answer
        .completions
        .iter()
        .map(|r| r.field.as_str())
        .collect();
    assert_eq!(
        fields,
        [
            "",
            "completions[1].advance.headers",
            "completions[2].lease_token",
            "completions[3].advance.headers",
            ""
        ]
    );
    for (result, field) in answer.completions.iter().zip(fields).skip(1).take(3) {
        assert!(
            result.message.starts_with(&format!("{field}: ")),
            "{result:?}"
        );
    }

    let released = take(&c, &here, 10, 0.0).await;
    assert_eq!(released.iter().map(id).collect::<Vec<_>>(), ids[2..3]);
    assert_eq!(released[0].event.as_ref().expect("event").attempts, 2);
    let s = stats(&c, &there).await;
    assert_eq!((s.ready, s.leased, s.completed_total), (0, 1, 0), "{s:?}");
    let s = stats(&c, &here).await;
    assert_eq!((s.ready, s.leased, s.completed_total), (0, 3, 1), "{s:?}");
}

pub async fn a_failed_take_applies_none_of_its_completions(cluster: &mut Cluster) {
    let c = cluster.client().await;
    let (here, there) = names_on_two_shards("uncarried");
    create(&c, &here, config(30.0, 5)).await;
    create(&c, &there, config(30.0, 5)).await;
    enqueue(&c, item(&here, "h")).await;
    enqueue(&c, item(&there, "t")).await;
    let mine = take(&c, &here, 1, 0.0).await;
    let other = take(&c, &there, 1, 0.0).await;
    // A queue that does not exist, on the shard of `here`: the shard refuses the take.
    let owner = shard_of(&QueueName::parse(&here).expect("name"), SHARDS);
    let missing = (0..100)
        .map(|i| format!("uncarried-missing{i}"))
        .find(|n| shard_of(&QueueName::parse(n).expect("name"), SHARDS) == owner)
        .expect("a name on the same shard");
    let carried = vec![completion(&mine[0], ack()), completion(&other[0], ack())];
    let refused = take_carrying(&c, &missing, 1, carried)
        .await
        .expect_err("a take of a queue that does not exist");
    assert_eq!(refused.code(), Code::NotFound, "{refused}");
    assert_eq!(
        complete(&c, &mine[0], ack()).await.code,
        0,
        "applied by the failed take"
    );
    assert_eq!(
        complete(&c, &other[0], ack()).await.code,
        0,
        "applied by the failed take"
    );
}
