//! One behaviour suite for both buses: every test runs against `Bus::local()` (module `local`)
//! and against a real `nats-server` started for the test (module `nats`), so the in-process bus
//! is held to what NATS does.

mod support;

use std::time::Duration;

use bytes::Bytes;
use cascade_bus::{Bus, BusError, Message, Subscription, subject};
use cascade_proto::bus::v1::{
    ActivateBatch, Activation, DispatcherReply, DispatcherRequest, Empty, dispatcher_reply,
    dispatcher_request,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use support::NatsServer;

/// Long enough never to fire on a slow CI machine when a reply is expected.
const GENEROUS: Duration = Duration::from_secs(10);

macro_rules! suite {
    ($($test:ident),+ $(,)?) => {
        mod local {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    super::$test(cascade_bus::Bus::local()).await;
                }
            )+
        }
        mod nats {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $test() {
                    let server = super::NatsServer::start().await;
                    super::$test(server.connect().await).await;
                    drop(server);
                }
            )+
        }
    };
}

suite!(
    request_reply_round_trip,
    call_carries_protobuf_both_ways,
    call_reports_an_undecodable_reply,
    no_responders_fails_at_once,
    timeout_when_the_responder_never_answers,
    first_reply_wins_when_several_responders_match,
    publish_reaches_every_matching_subscriber,
    shard_subjects_never_reach_another_shard,
    published_message_wants_no_reply,
    invalid_subjects_are_refused,
    too_large_publish,
    too_large_request,
    too_large_respond,
    many_concurrent_requests_are_all_answered,
    dropped_subscription_stops_receiving,
    close_ends_subscriptions_and_refuses_work,
);

// ---- helpers ----------------------------------------------------------------------------------

/// Subscribes (so requests reach it once this returns), then answers every request with
/// `echo:<payload>`.
async fn spawn_echo(bus: &Bus, subject: &str) -> JoinHandle<()> {
    let mut subscription = bus.subscribe(subject).await.expect("subscribe");
    tokio::spawn(async move {
        while let Some(message) = subscription.next().await {
            let mut reply = b"echo:".to_vec();
            reply.extend_from_slice(&message.payload());
            message.respond(Bytes::from(reply)).await.expect("respond");
        }
    })
}

async fn recv(subscription: &mut Subscription) -> Message {
    tokio::time::timeout(GENEROUS, subscription.next())
        .await
        .expect("a message within the deadline")
        .expect("the subscription is open")
}

/// Receives payloads until (and including) `last`.
async fn recv_until(subscription: &mut Subscription, last: &str) -> Vec<String> {
    let mut payloads = Vec::new();
    loop {
        let message = recv(subscription).await;
        let payload = String::from_utf8(message.payload().to_vec()).expect("utf-8 payload");
        let done = payload == last;
        payloads.push(payload);
        if done {
            return payloads;
        }
    }
}

// ---- request / reply --------------------------------------------------------------------------

async fn request_reply_round_trip(bus: Bus) {
    let _echo = spawn_echo(&bus, "cascade.t.dispatcher.0").await;
    let reply = bus
        .request(
            "cascade.t.dispatcher.0",
            Bytes::from_static(b"ping"),
            GENEROUS,
        )
        .await
        .expect("reply");
    assert_eq!(reply, "echo:ping");
    let empty = bus
        .request("cascade.t.dispatcher.0", Bytes::new(), GENEROUS)
        .await
        .expect("reply to an empty request");
    assert_eq!(empty, "echo:");
}

async fn call_carries_protobuf_both_ways(bus: Bus) {
    let mut subscription = bus
        .subscribe("cascade.t.dispatcher.1")
        .await
        .expect("subscribe");
    let responder = tokio::spawn(async move {
        let mut message = recv(&mut subscription).await;
        let request: DispatcherRequest = message.take().expect("take the request");
        let reply = DispatcherReply {
            result: Some(dispatcher_reply::Result::Done(Empty {})),
        };
        message.respond_with(reply).await.expect("respond");
        request
    });
    let request = DispatcherRequest {
        op: Some(dispatcher_request::Op::Activate(ActivateBatch {
            activations: vec![Activation {
                queue: "orders.*.>".into(),
                id: "e-1".into(),
                version: 7,
            }],
        })),
    };
    let reply: DispatcherReply = bus
        .call("cascade.t.dispatcher.1", request.clone(), GENEROUS)
        .await
        .expect("call");
    assert_eq!(reply.result, Some(dispatcher_reply::Result::Done(Empty {})));
    assert_eq!(responder.await.expect("responder"), request);
}

async fn call_reports_an_undecodable_reply(bus: Bus) {
    let mut subscription = bus
        .subscribe("cascade.t.dispatcher.2")
        .await
        .expect("subscribe");
    tokio::spawn(async move {
        let message = recv(&mut subscription).await;
        // A truncated varint: not a valid protobuf message.
        message
            .respond(Bytes::from_static(&[0xff]))
            .await
            .expect("respond");
    });
    let err = bus
        .call::<_, DispatcherReply>(
            "cascade.t.dispatcher.2",
            DispatcherRequest::default(),
            GENEROUS,
        )
        .await
        .expect_err("garbage does not decode");
    match &err {
        BusError::Decode { subject, .. } => assert_eq!(subject, "cascade.t.dispatcher.2"),
        other => panic!("expected Decode, got {other:?}"),
    }
    assert_eq!(err.code(), cascade_core::Code::Internal);
}

async fn no_responders_fails_at_once(bus: Bus) {
    let timeout = Duration::from_secs(5);
    let started = Instant::now();
    let err = bus
        .request("cascade.t.dispatcher.3", Bytes::from_static(b"q"), timeout)
        .await
        .expect_err("nobody is subscribed");
    let elapsed = started.elapsed();
    assert_eq!(
        err,
        BusError::NoResponders {
            subject: "cascade.t.dispatcher.3".into()
        }
    );
    assert_eq!(err.code(), cascade_core::Code::Unavailable);
    assert!(elapsed < Duration::from_secs(1), "took {elapsed:?}");

    // A subscriber of another subject does not count.
    let _other = bus
        .subscribe("cascade.t.dispatcher.4")
        .await
        .expect("subscribe");
    let err = bus
        .call::<_, DispatcherReply>(
            "cascade.t.dispatcher.3",
            DispatcherRequest::default(),
            timeout,
        )
        .await
        .expect_err("still nobody on this subject");
    assert!(matches!(err, BusError::NoResponders { .. }), "{err}");
}

async fn timeout_when_the_responder_never_answers(bus: Bus) {
    let mut silent = bus.subscribe("cascade.t.timer.0").await.expect("subscribe");
    let timeout = Duration::from_millis(300);
    let requester = bus.clone();
    let request = tokio::spawn(async move {
        let started = Instant::now();
        let result = requester
            .request("cascade.t.timer.0", Bytes::from_static(b"q"), timeout)
            .await;
        (result, started.elapsed())
    });
    // Hold the request without answering it.
    let held = recv(&mut silent).await;
    assert!(held.wants_reply());
    let (result, elapsed) = request.await.expect("requester");
    assert_eq!(
        result,
        Err(BusError::Timeout {
            subject: "cascade.t.timer.0".into(),
            after: timeout
        })
    );
    assert!(elapsed >= timeout, "gave up early after {elapsed:?}");
    assert!(elapsed < GENEROUS, "took {elapsed:?}");
    // The requester is gone: a late reply is not an error.
    held.respond(Bytes::from_static(b"late"))
        .await
        .expect("a late reply is dropped silently");
}

async fn first_reply_wins_when_several_responders_match(bus: Bus) {
    let mut exact = bus.subscribe("cascade.t.timer.1").await.expect("subscribe");
    let mut wildcard = bus.subscribe("cascade.t.timer.*").await.expect("subscribe");
    let requester = bus.clone();
    let request = tokio::spawn(async move {
        requester
            .request("cascade.t.timer.1", Bytes::from_static(b"q"), GENEROUS)
            .await
    });
    let first = recv(&mut exact).await;
    let second = recv(&mut wildcard).await;
    first
        .respond(Bytes::from_static(b"exact"))
        .await
        .expect("respond");
    let reply = request.await.expect("requester").expect("reply");
    assert_eq!(reply, "exact");
    second
        .respond(Bytes::from_static(b"wildcard"))
        .await
        .expect("a second reply is dropped silently");
}

// ---- publish / subscribe ----------------------------------------------------------------------

async fn publish_reaches_every_matching_subscriber(bus: Bus) {
    let mut exact = bus.subscribe("cascade.c.stats.1").await.expect("subscribe");
    let mut star = bus.subscribe("cascade.c.stats.*").await.expect("subscribe");
    let mut rest = bus.subscribe("cascade.c.>").await.expect("subscribe");
    let mut timer = bus.subscribe("cascade.c.timer.1").await.expect("subscribe");
    let publish = |subject: &'static str, payload: &'static str| {
        let bus = bus.clone();
        async move {
            bus.publish(subject, Bytes::from_static(payload.as_bytes()))
                .await
                .expect("publish");
        }
    };
    publish("cascade.c.stats.1", "s1").await;
    publish("cascade.c.stats.1.deep", "deep").await;
    publish("cascade.c.dispatcher.2", "d2").await;
    publish("cascade.c", "parent").await; // `>` needs at least one more token
    publish("cascade.other.stats.1", "other-cluster").await;
    publish("cascade.c.timer.1", "end-timer").await;
    publish("cascade.c.stats.1", "end").await;

    // Messages from one publisher arrive in order, so anything unexpected shows up before "end".
    assert_eq!(recv_until(&mut exact, "end").await, ["s1", "end"]);
    assert_eq!(recv_until(&mut star, "end").await, ["s1", "end"]);
    assert_eq!(
        recv_until(&mut rest, "end").await,
        ["s1", "deep", "d2", "end-timer", "end"]
    );
    assert_eq!(recv_until(&mut timer, "end-timer").await, ["end-timer"]);
    // The received subject is the one published to, not the pattern.
    publish("cascade.c.stats.9", "x").await;
    assert_eq!(recv(&mut star).await.subject, "cascade.c.stats.9");
}

async fn shard_subjects_never_reach_another_shard(bus: Bus) {
    // Queue-name-like strings cannot become the one string part of a subject.
    for hostile in [
        "orders.eu",
        "*",
        ">",
        "orders.>",
        "a b",
        "",
        "cascade.x.dispatcher",
    ] {
        let err = subject::validate_cluster(hostile).expect_err(hostile);
        assert_eq!(err.code(), cascade_core::Code::InvalidArgument, "{hostile}");
    }
    let _one = spawn_echo(&bus, &subject::dispatcher("c", 1)).await;
    let _eleven = spawn_echo(&bus, &subject::dispatcher("c", 11)).await;
    let ask = |subject: String| {
        let bus = bus.clone();
        async move {
            bus.request(&subject, Bytes::from_static(b"q"), GENEROUS)
                .await
        }
    };
    assert_eq!(
        ask(subject::dispatcher("c", 1)).await.expect("shard 1"),
        "echo:q"
    );
    assert_eq!(
        ask(subject::dispatcher("c", 11)).await.expect("shard 11"),
        "echo:q"
    );
    for nobody in [
        subject::dispatcher("c", 2),
        subject::timer("c", 1),
        subject::dispatcher("d", 1),
    ] {
        let err = ask(nobody.clone()).await.expect_err(&nobody);
        assert!(
            matches!(err, BusError::NoResponders { .. }),
            "{nobody}: {err}"
        );
    }

    let mut all = bus
        .subscribe(&subject::all_stats("c"))
        .await
        .expect("subscribe");
    for shard in [0, 7, u32::MAX] {
        bus.publish(&subject::stats("c", shard), Bytes::from(shard.to_string()))
            .await
            .expect("publish");
    }
    bus.publish(
        &subject::dispatcher("c", 0),
        Bytes::from_static(b"not stats"),
    )
    .await
    .expect("publish");
    bus.publish(&subject::stats("c", 1), Bytes::from_static(b"end"))
        .await
        .expect("publish");
    assert_eq!(
        recv_until(&mut all, "end").await,
        ["0", "7", "4294967295", "end"]
    );
}

async fn published_message_wants_no_reply(bus: Bus) {
    let mut subscription = bus.subscribe("cascade.t.stats.0").await.expect("subscribe");
    bus.publish("cascade.t.stats.0", Bytes::from_static(b"p"))
        .await
        .expect("publish");
    let message = recv(&mut subscription).await;
    assert_eq!(message.subject, "cascade.t.stats.0");
    assert!(!message.wants_reply());
    let err = message
        .respond(Bytes::new())
        .await
        .expect_err("nowhere to reply");
    assert!(matches!(err, BusError::NoReply { .. }), "{err}");
    // Publishing with nobody subscribed is not an error.
    bus.publish("cascade.t.stats.nobody", Bytes::new())
        .await
        .expect("publish to nobody");
}

async fn invalid_subjects_are_refused(bus: Bus) {
    for bad in ["", "a..b", "a b", "a.", "a.*", "a.>"] {
        let err = bus
            .publish(bad, Bytes::new())
            .await
            .expect_err("publish to an invalid subject");
        assert!(
            matches!(err, BusError::InvalidSubject { .. }),
            "{bad:?}: {err}"
        );
        let err = bus
            .request(bad, Bytes::new(), GENEROUS)
            .await
            .expect_err("request on an invalid subject");
        assert!(
            matches!(err, BusError::InvalidSubject { .. }),
            "{bad:?}: {err}"
        );
    }
    for bad in ["", "a..b", "a.>.b", "a b"] {
        let err = bus
            .subscribe(bad)
            .await
            .expect_err("subscribe to an invalid pattern");
        assert!(
            matches!(err, BusError::InvalidSubject { .. }),
            "{bad:?}: {err}"
        );
    }
}

// ---- max_payload ------------------------------------------------------------------------------

async fn too_large_publish(bus: Bus) {
    let max = bus.max_payload();
    let mut subscription = bus.subscribe("cascade.t.stats.1").await.expect("subscribe");
    let err = bus
        .publish("cascade.t.stats.1", Bytes::from(vec![1u8; max + 1]))
        .await
        .expect_err("one byte over");
    assert_eq!(err, BusError::TooLarge { size: max + 1, max });
    assert_eq!(err.code(), cascade_core::Code::ResourceExhausted);
    bus.publish("cascade.t.stats.1", Bytes::from(vec![2u8; max]))
        .await
        .expect("exactly max_payload is fine");
    let message = recv(&mut subscription).await;
    assert_eq!(message.payload().len(), max);
    assert!(
        message.payload().iter().all(|&b| b == 2),
        "the refused message never left"
    );
}

async fn too_large_request(bus: Bus) {
    let max = bus.max_payload();
    // Checked before sending: with nobody subscribed the answer is still TooLarge.
    let err = bus
        .request(
            "cascade.t.dispatcher.5",
            Bytes::from(vec![0u8; max + 1]),
            GENEROUS,
        )
        .await
        .expect_err("one byte over");
    assert_eq!(err, BusError::TooLarge { size: max + 1, max });

    let mut subscription = bus
        .subscribe("cascade.t.dispatcher.5")
        .await
        .expect("subscribe");
    tokio::spawn(async move {
        while let Some(message) = subscription.next().await {
            let size = message.payload().len().to_string();
            message.respond(Bytes::from(size)).await.expect("respond");
        }
    });
    let reply = bus
        .request(
            "cascade.t.dispatcher.5",
            Bytes::from(vec![0u8; max]),
            GENEROUS,
        )
        .await
        .expect("exactly max_payload is fine");
    assert_eq!(reply, max.to_string());
}

async fn too_large_respond(bus: Bus) {
    let max = bus.max_payload();
    let mut subscription = bus
        .subscribe("cascade.t.dispatcher.6")
        .await
        .expect("subscribe");
    let responder = tokio::spawn(async move {
        let message = recv(&mut subscription).await;
        let refused = message.respond(Bytes::from(vec![0u8; max + 1])).await;
        message
            .respond(Bytes::from(vec![3u8; max]))
            .await
            .expect("exactly max_payload is fine");
        refused
    });
    let reply = bus
        .request("cascade.t.dispatcher.6", Bytes::from_static(b"q"), GENEROUS)
        .await
        .expect("the second, smaller reply arrives");
    assert_eq!(reply.len(), max);
    assert!(reply.iter().all(|&b| b == 3));
    let refused = responder.await.expect("responder");
    assert_eq!(refused, Err(BusError::TooLarge { size: max + 1, max }));
}

// ---- load and lifecycle -----------------------------------------------------------------------

async fn many_concurrent_requests_are_all_answered(bus: Bus) {
    const TASKS: usize = 50;
    const PER_TASK: usize = 20;
    let _echo = spawn_echo(&bus, "cascade.t.dispatcher.7").await;
    let mut tasks = Vec::with_capacity(TASKS);
    for task in 0..TASKS {
        let bus = bus.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..PER_TASK {
                let payload = format!("{task}-{i}");
                let reply = bus
                    .request(
                        "cascade.t.dispatcher.7",
                        Bytes::from(payload.clone()),
                        GENEROUS,
                    )
                    .await
                    .expect("reply");
                assert_eq!(reply, format!("echo:{payload}"));
            }
            PER_TASK
        }));
    }
    let mut answered = 0;
    for task in tasks {
        answered += task.await.expect("task");
    }
    assert_eq!(answered, TASKS * PER_TASK);
}

async fn dropped_subscription_stops_receiving(bus: Bus) {
    let subject = "cascade.t.dispatcher.8";
    let mut first = bus.subscribe(subject).await.expect("subscribe");
    let mut second = bus
        .subscribe("cascade.t.dispatcher.*")
        .await
        .expect("subscribe");
    bus.publish(subject, Bytes::from_static(b"1"))
        .await
        .expect("publish");
    assert_eq!(recv(&mut first).await.payload(), "1");
    assert_eq!(recv(&mut second).await.payload(), "1");

    drop(first);
    bus.publish(subject, Bytes::from_static(b"2"))
        .await
        .expect("publish");
    assert_eq!(recv(&mut second).await.payload(), "2");

    drop(second);
    let started = Instant::now();
    let err = bus
        .request(subject, Bytes::from_static(b"q"), GENEROUS)
        .await
        .expect_err("both subscriptions are gone");
    assert!(matches!(err, BusError::NoResponders { .. }), "{err}");
    assert!(started.elapsed() < Duration::from_secs(1));
}

async fn close_ends_subscriptions_and_refuses_work(bus: Bus) {
    let mut subscription = bus.subscribe("cascade.t.stats.2").await.expect("subscribe");
    bus.publish("cascade.t.stats.2", Bytes::from_static(b"before"))
        .await
        .expect("publish");
    assert_eq!(recv(&mut subscription).await.payload(), "before");

    let other_handle = bus.clone();
    bus.close().await.expect("close");
    let end = tokio::time::timeout(GENEROUS, subscription.next())
        .await
        .expect("the subscription ends within the deadline");
    assert!(end.is_none());
    let publish = other_handle
        .publish("cascade.t.stats.2", Bytes::new())
        .await;
    assert_eq!(publish, Err(BusError::Closed));
    let request = other_handle
        .request("cascade.t.stats.2", Bytes::new(), GENEROUS)
        .await;
    assert_eq!(request, Err(BusError::Closed));
    let subscribe = other_handle.subscribe("cascade.t.stats.2").await;
    assert!(matches!(subscribe, Err(BusError::Closed)));
}

// ---- NATS only --------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_round_trip_across_connections_and_server_max_payload() {
    let server = NatsServer::start().await;
    let responder = server.connect().await;
    let requester = server.connect().await;
    // The Debian server's default limit, read from its INFO.
    assert_eq!(requester.max_payload(), 1024 * 1024);
    // No flush: `subscribe` returns only once the server has the subscription.
    let _echo = spawn_echo(&responder, "cascade.t.dispatcher.9").await;
    let reply = requester
        .request(
            "cascade.t.dispatcher.9",
            Bytes::from_static(b"hi"),
            GENEROUS,
        )
        .await
        .expect("reply across connections");
    assert_eq!(reply, "echo:hi");
}

#[tokio::test]
async fn nats_connect_to_a_closed_port_fails() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let url = format!("nats://127.0.0.1:{port}");
    let err = Bus::connect_nats(&cascade_bus::NatsConnect::url(&url), "cascade-bus-test")
        .await
        .expect_err("nothing listens there");
    match &err {
        BusError::Nats { op, reason } => {
            assert_eq!(*op, "connect");
            assert!(reason.contains(&url), "{reason}");
        }
        other => panic!("expected Nats, got {other:?}"),
    }
    assert_eq!(err.code(), cascade_core::Code::Unavailable);
}

/// With the server gone, the client's queue fills and stops taking messages while it
/// reconnects: a publish then fails within its bound, and a request still ends at its own
/// timeout, so that a process whose server is gone can still stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_sends_end_in_time_while_the_server_is_gone() {
    let server = NatsServer::start().await;
    let bus = server.connect().await;
    drop(server);
    let filled = async {
        loop {
            if let Err(err) = bus
                .publish("cascade.t.gone", Bytes::from_static(b"x"))
                .await
            {
                return err;
            }
        }
    };
    let err = tokio::time::timeout(Duration::from_secs(60), filled)
        .await
        .expect("a publish fails once the client's queue is full");
    assert!(err.to_string().contains("queue stayed full"), "{err}");
    let asked = bus.request(
        "cascade.t.dispatcher.1",
        Bytes::from_static(b"hi"),
        Duration::from_millis(200),
    );
    let answer = tokio::time::timeout(Duration::from_secs(30), asked)
        .await
        .expect("the request ends at its own timeout");
    assert!(
        matches!(answer, Err(BusError::Timeout { .. })),
        "{answer:?}"
    );
    let subscribing = bus.subscribe("cascade.t.more");
    let subscribed = tokio::time::timeout(Duration::from_secs(30), subscribing)
        .await
        .expect("a subscription ends within its bound");
    assert!(subscribed.is_err(), "subscribed with the server gone");
    let flushed = tokio::time::timeout(Duration::from_secs(30), bus.flush())
        .await
        .expect("a flush ends within its bound");
    assert!(flushed.is_err(), "flushed with the server gone");
}
