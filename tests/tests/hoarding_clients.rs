//! Clients that hoard what the gateway has, against a real `cascade standalone`, while
//! another client keeps being served: a thousand idle connections (half never speak, half
//! speak HTTP/2 and then nothing) are closed by the handshake and idle timeouts and cost
//! little memory; a client that asks for a 4 MiB event on many streams and never reads the
//! answers (raw HTTP/2, its flow-control window never opened) holds at most the unread
//! budget, the rest of its calls refused; requests past `grpc.max_requests_in_flight` are
//! shed while health checks still answer. Memory is read from the server's
//! `/proc/<pid>/status`: a bound on what it holds, not a measure of speed.

use std::io::Write;
use std::net::TcpStream as StdTcpStream;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cascade_client::{Client, api};
use cascade_e2e::process::rss_bytes;
use cascade_e2e::scenarios::{config, create, enqueue, item, stats};
use cascade_e2e::{Cluster, Mode};
use prost::Message;
use tonic::Code;

/// How long a test waits for the server to act: far above what it takes, never a measure.
const WITHIN: Duration = Duration::from_secs(60);
const MIB: u64 = 1 << 20;

fn start(env: &[(&str, &str)]) -> Cluster {
    let env: Vec<(&str, &str)> = [("CASCADE__STANDALONE__STAGE_WORKERS", "false")]
        .into_iter()
        .chain(env.iter().copied())
        .collect();
    Cluster::start_with(Mode::Standalone, None, &env)
}

/// An enqueue and a get by a well-behaved client.
async fn served(c: &Client, queue: &str) {
    let sent = enqueue(c, item(queue, "still served")).await;
    let request = api::GetRequest {
        queue: queue.into(),
        id: sent.id,
    };
    c.ingest().get(request).await.expect("a get");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_idle_connections_are_closed_and_cost_little() {
    let cluster = tokio::task::spawn_blocking(|| {
        start(&[
            ("CASCADE__GRPC__HANDSHAKE_TIMEOUT", "3s"),
            ("CASCADE__GRPC__IDLE_TIMEOUT", "3s"),
        ])
    })
    .await
    .expect("start");
    let c = cluster.client().await;
    create(&c, "jobs", config(30.0, 3)).await;
    let before = rss_bytes(cluster.front_pid());
    let addr = cluster.gateway().to_owned();
    let mut idle: Vec<StdTcpStream> = tokio::task::spawn_blocking(move || {
        (0..1000)
            .map(|i| {
                let mut stream = StdTcpStream::connect(&addr).expect("connect");
                if i % 2 == 0 {
                    stream
                        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
                        .expect("the HTTP/2 preface and an empty SETTINGS");
                }
                stream
            })
            .collect()
    })
    .await
    .expect("connect");
    // A new client: on a slow machine opening those took long enough for `c`'s own
    // connection to pass the idle timeout, and a call racing its close would fail.
    served(&cluster.client().await, "jobs").await;
    let held = rss_bytes(cluster.front_pid()).saturating_sub(before);
    assert!(
        held < 64 * MIB,
        "1000 idle connections cost {} MiB",
        held / MIB
    );
    // Closed by the server: silent ones after the handshake timeout, speaking ones after
    // the idle timeout.
    idle = tokio::task::spawn_blocking(move || {
        for stream in &mut idle {
            stream.set_read_timeout(Some(WITHIN)).expect("timeout");
            let mut buf = [0u8; 256];
            loop {
                match std::io::Read::read(stream, &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => continue,
                }
            }
        }
        idle
    })
    .await
    .expect("read");
    assert_eq!(idle.len(), 1000);
    // A new client: `c`'s own connection idled past the timeout too, and a call racing its
    // close would fail as after any lost connection.
    served(&cluster.client().await, "jobs").await;
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}

/// A gRPC `Get` sent on raw HTTP/2 whose answer is never read: its status if the answer
/// was a refusal (trailers only), or its open body, kept unread.
async fn unread_get(
    client: &mut h2::client::SendRequest<Bytes>,
    addr: &str,
    id: &str,
) -> Result<h2::RecvStream, i32> {
    let request = http::Request::post(format!("http://{addr}/cascade.v1.Ingest/Get"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .expect("a request");
    let message = api::GetRequest {
        queue: "big".into(),
        id: id.into(),
    }
    .encode_to_vec();
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(&message);
    let ready = client.clone().ready().await.expect("a stream");
    *client = ready;
    let (response, mut body) = client.send_request(request, false).expect("send");
    body.send_data(Bytes::from(frame), true)
        .expect("the message");
    let response = response.await.expect("an answer");
    match response.headers().get("grpc-status") {
        Some(code) => Err(code.to_str().expect("ascii").parse().expect("a code")),
        None => Ok(response.into_body()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_answers_are_bounded_and_other_clients_are_served() {
    let cluster = tokio::task::spawn_blocking(|| {
        start(&[
            ("CASCADE__GRPC__MAX_UNREAD_RESPONSE_BYTES", "40MiB"),
            (
                "CASCADE__GRPC__MAX_UNREAD_RESPONSE_BYTES_PER_CONNECTION",
                "16MiB",
            ),
        ])
    })
    .await
    .expect("start");
    let c = cluster.client().await;
    create(&c, "big", config(30.0, 3)).await;
    create(&c, "jobs", config(30.0, 3)).await;
    let mut large = item("big", "");
    large.payload = vec![7u8; 4 << 20].into();
    let id = enqueue(&c, large).await.id;
    let before = rss_bytes(cluster.front_pid());

    // Four connections, forty unread gets each: 640 MiB if nothing bounded them.
    let (mut answered, mut refused) = (Vec::new(), 0);
    let mut connections = Vec::new();
    for _ in 0..4 {
        let tcp = tokio::net::TcpStream::connect(cluster.gateway())
            .await
            .expect("connect");
        let (mut client, connection) = h2::client::handshake(tcp).await.expect("HTTP/2");
        connections.push(tokio::spawn(connection));
        for _ in 0..40 {
            match unread_get(&mut client, cluster.gateway(), &id).await {
                Ok(body) => answered.push(body),
                Err(code) => {
                    assert_eq!(code, Code::ResourceExhausted as i32);
                    refused += 1;
                }
            }
        }
    }
    let held = rss_bytes(cluster.front_pid()).saturating_sub(before);
    assert!(
        answered.len() <= 10 && refused >= 150,
        "at most 40 MiB of 4 MiB answers unread: {} answered, {refused} refused",
        answered.len()
    );
    assert!(held < 200 * MIB, "the server holds {} MiB more", held / MIB);
    served(&c, "jobs").await;
    let large = c
        .ingest()
        .get(api::GetRequest {
            queue: "big".into(),
            id: id.clone(),
        })
        .await;
    assert_eq!(
        large.expect_err("the budget is held").code(),
        Code::ResourceExhausted
    );

    // The hoarder goes away: what it held is free again.
    drop(answered);
    for connection in connections {
        connection.abort();
    }
    let deadline = Instant::now() + WITHIN;
    loop {
        let again = c
            .ingest()
            .get(api::GetRequest {
                queue: "big".into(),
                id: id.clone(),
            })
            .await;
        match again {
            Ok(event) => {
                assert_eq!(event.into_inner().payload.len(), 4 << 20);
                break;
            }
            Err(status) => {
                assert_eq!(status.code(), Code::ResourceExhausted);
                assert!(Instant::now() < deadline, "the budget never came back");
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_the_limit_are_shed_and_health_still_answers() {
    let cluster =
        tokio::task::spawn_blocking(|| start(&[("CASCADE__GRPC__MAX_REQUESTS_IN_FLIGHT", "4")]))
            .await
            .expect("start");
    let c = cluster.client().await;
    create(&c, "jobs", config(30.0, 3)).await;
    // Four long polls hold every place. A poll that met a place taken by the probe was shed
    // itself: it is started again until the probe is the one shed.
    let long_poll = |c: Client| {
        tokio::spawn(async move {
            let request = api::TakeRequest {
                queue: "jobs".into(),
                max_events: 1,
                wait: Some(cascade_e2e::scenarios::seconds(60.0)),
                ..Default::default()
            };
            c.worker().take(request).await
        })
    };
    let mut polls: Vec<_> = (0..4).map(|_| long_poll(c.clone())).collect();
    let deadline = Instant::now() + WITHIN;
    let shed = loop {
        let request = api::QueueStatsRequest {
            name: "jobs".into(),
        };
        match c.admin().queue_stats(request).await {
            Err(status) if status.code() == Code::ResourceExhausted => break status,
            answer => assert!(
                Instant::now() < deadline,
                "nothing was ever shed: {answer:?}"
            ),
        }
        for poll in &mut polls {
            if poll.is_finished() {
                *poll = long_poll(c.clone());
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        shed.message().contains("grpc.max_requests_in_flight (4)"),
        "{shed:?}"
    );
    let mut health = tonic_health::pb::health_client::HealthClient::new(c.connection());
    let serving = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("health is never shed")
        .into_inner();
    assert_eq!(serving.status, 1, "SERVING");
    // The polls go away, and their places serve again.
    for poll in &polls {
        poll.abort();
    }
    let other = Client::connect(cluster.gateway()).await.expect("connect");
    let deadline = Instant::now() + WITHIN;
    loop {
        if other.ingest().enqueue(item("jobs", "x")).await.is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "no place came back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(stats(&other, "jobs").await.enqueued_total, 1);
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}
