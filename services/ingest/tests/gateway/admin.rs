//! Admin: a template is created and deleted on every shard and read from shard 0, its stats
//! summed over every shard; a plain queue only on its owner; `ListQueues` merges every
//! shard's page and pages with a token.

use std::collections::BTreeMap;

use cascade_core::{QueueName, shard_of};
use cascade_proto::bus::v1::dispatcher_reply::Result as Reply;
use cascade_proto::bus::v1::dispatcher_request::Op;
use cascade_proto::bus::v1::{DispatcherReply, DispatcherRequest};
use cascade_proto::v1::{
    CreateQueueRequest, DeleteQueueRequest, GetQueueRequest, ListQueuesRequest, ListQueuesResponse,
    Queue, QueueConfig, QueueStats, QueueStatsRequest,
};
use tonic::Code;

use crate::harness::{answer_with, cluster, echo, error};

fn ops(recorded: &crate::harness::Recorded) -> Vec<(u32, &'static str)> {
    recorded
        .all()
        .into_iter()
        .map(|(shard, request)| {
            let op = match request.op {
                Some(Op::CreateQueue(_)) => "create",
                Some(Op::DeleteQueue(_)) => "delete",
                Some(Op::GetQueue(_)) => "get",
                _ => "other",
            };
            (shard, op)
        })
        .collect()
}

#[tokio::test]
async fn templates_go_to_every_shard_and_queues_to_their_owner() {
    let (gateway, recorded) = cluster(3, answer_with(echo)).await;
    let mut admin = gateway.admin().await;
    let config = QueueConfig {
        max_attempts: 3,
        ..QueueConfig::default()
    };
    let created = admin
        .create_queue(CreateQueueRequest {
            name: "inbox:*".into(),
            config: Some(config.clone()),
        })
        .await
        .expect("template created")
        .into_inner();
    assert_eq!(created.name, "inbox:*");
    let mut seen = ops(&recorded);
    seen.sort();
    assert_eq!(seen, [(0, "create"), (1, "create"), (2, "create")]);

    let owner = shard_of(&QueueName::parse("jobs").expect("name"), 3);
    admin
        .create_queue(CreateQueueRequest {
            name: "jobs".into(),
            config: None,
        })
        .await
        .expect("queue created");
    admin
        .get_queue(GetQueueRequest {
            name: "jobs".into(),
        })
        .await
        .expect("queue read");
    admin
        .get_queue(GetQueueRequest {
            name: "inbox:*".into(),
        })
        .await
        .expect("template read");
    admin
        .delete_queue(DeleteQueueRequest {
            name: "inbox:*".into(),
            force: false,
        })
        .await
        .expect("template deleted");
    let later = ops(&recorded)[3..].to_vec();
    assert_eq!(
        &later[..3],
        &[(owner, "create"), (owner, "get"), (0, "get")]
    );
    let mut deletes = later[3..].to_vec();
    deletes.sort();
    assert_eq!(deletes, [(0, "delete"), (1, "delete"), (2, "delete")]);
}

#[tokio::test]
async fn a_template_create_fails_if_any_shard_refuses() {
    let refuse_on_1 = |shard: u32, request: DispatcherRequest| match shard {
        1 => error(6, "template 'inbox:*' exists with another config"),
        _ => echo(shard, request),
    };
    let (gateway, _) = cluster(2, answer_with(refuse_on_1)).await;
    let status = gateway
        .admin()
        .await
        .create_queue(CreateQueueRequest {
            name: "inbox:*".into(),
            config: None,
        })
        .await
        .expect_err("refused");
    assert_eq!(status.code(), Code::AlreadyExists);
    assert_eq!(
        status.message(),
        "template 'inbox:*' exists with another config"
    );
}

/// Each shard holds some names and pages through them as the store does.
fn lister(shard: u32, request: DispatcherRequest) -> DispatcherReply {
    let names: &[&str] = match shard {
        0 => &["a1", "b1", "c1", "t:*"],
        _ => &["a2", "b2", "b3", "t:*"],
    };
    let Some(Op::ListQueues(list)) = request.op else {
        return echo(shard, request);
    };
    let matching: Vec<&str> = names
        .iter()
        .copied()
        .filter(|name| name.starts_with(&list.prefix) && *name > list.page_token.as_str())
        .collect();
    let size = list.page_size as usize;
    let page: Vec<Queue> = matching
        .iter()
        .take(size)
        .map(|name| Queue {
            name: (*name).to_owned(),
            config: None,
        })
        .collect();
    let next_page_token = match matching.len() > size {
        true => page.last().map(|q| q.name.clone()).unwrap_or_default(),
        false => String::new(),
    };
    DispatcherReply {
        result: Some(Reply::Queues(ListQueuesResponse {
            queues: page,
            next_page_token,
        })),
    }
}

#[tokio::test]
async fn list_queues_merges_every_shard_and_pages() {
    let (gateway, _) = cluster(2, answer_with(lister)).await;
    let mut admin = gateway.admin().await;
    let mut pages = Vec::new();
    let mut token = String::new();
    loop {
        let page = admin
            .list_queues(ListQueuesRequest {
                prefix: String::new(),
                page_size: 3,
                page_token: token,
            })
            .await
            .expect("a page")
            .into_inner();
        let names: Vec<String> = page.queues.into_iter().map(|q| q.name).collect();
        assert!(names.len() <= 3);
        pages.push(names);
        token = page.next_page_token;
        if token.is_empty() {
            break;
        }
        assert!(pages.len() < 10, "paging ends");
    }
    assert_eq!(
        pages,
        [vec!["a1", "a2", "b1"], vec!["b2", "b3", "c1"], vec!["t:*"]]
    );

    let only_b = admin
        .list_queues(ListQueuesRequest {
            prefix: "b".into(),
            page_size: 0,
            page_token: String::new(),
        })
        .await
        .expect("a page")
        .into_inner();
    let names: Vec<String> = only_b.queues.into_iter().map(|q| q.name).collect();
    assert_eq!(names, ["b1", "b2", "b3"]);
    assert_eq!(only_b.next_page_token, "");
}

#[tokio::test]
async fn a_list_asks_each_shard_for_a_full_page() {
    let (gateway, recorded) = cluster(2, answer_with(echo)).await;
    let mut admin = gateway.admin().await;
    for (asked, sent) in [(0, 100), (5, 5), (5000, 1000)] {
        admin
            .list_queues(ListQueuesRequest {
                page_size: asked,
                ..ListQueuesRequest::default()
            })
            .await
            .expect("list");
        let sizes: BTreeMap<u32, u32> = recorded
            .all()
            .into_iter()
            .filter_map(|(shard, request)| match request.op {
                Some(Op::ListQueues(list)) => Some((shard, list.page_size)),
                _ => None,
            })
            .collect();
        assert_eq!(
            sizes,
            BTreeMap::from([(0, sent), (1, sent)]),
            "page_size {asked}"
        );
    }
}

/// A template's queues live on every shard: its stats are every shard's share summed.
#[tokio::test]
async fn template_stats_sum_every_shard() {
    let share = |shard: u32, request: DispatcherRequest| match request.op {
        Some(Op::QueueStats(asked)) => DispatcherReply {
            result: Some(Reply::Stats(QueueStats {
                name: asked.name,
                ready: u64::from(shard) + 1,
                enqueued_total: 10,
                oldest_ready_age: Some(prost_types::Duration {
                    seconds: i64::from(shard),
                    nanos: 0,
                }),
                ..QueueStats::default()
            })),
        },
        _ => echo(shard, request),
    };
    let (gateway, recorded) = cluster(3, answer_with(share)).await;
    let mut admin = gateway.admin().await;
    let mut stats_of = async |name: &str| {
        let request = QueueStatsRequest { name: name.into() };
        let answer = admin.queue_stats(request).await;
        answer.expect("queue stats").into_inner()
    };
    let stats = stats_of("inbox:*").await;
    assert_eq!(stats.name, "inbox:*");
    assert_eq!((stats.ready, stats.enqueued_total), (1 + 2 + 3, 30));
    let oldest = stats.oldest_ready_age.expect("oldest ready age");
    assert_eq!(oldest.seconds, 2, "the oldest share's");
    let mut asked: Vec<u32> = recorded.all().into_iter().map(|(shard, _)| shard).collect();
    asked.sort();
    assert_eq!(asked, [0, 1, 2]);

    let plain = stats_of("jobs").await;
    let owner = shard_of(&QueueName::parse("jobs").expect("name"), 3);
    assert_eq!(plain.ready, u64::from(owner) + 1, "only the owner is asked");
}
