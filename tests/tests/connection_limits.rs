//! The gRPC port's connection limits, met as a careless or hostile client meets them: raw TCP
//! connections on loopback against `cascade standalone` with small limits. The server
//! advertises its stream limit in its HTTP/2 `SETTINGS`; connections past
//! `grpc.max_connections` are closed at once while the admin port keeps answering, and once
//! the hoarded places are given back a real client is served again; a connection that sends
//! nothing is closed after `grpc.handshake_timeout`. With `grpc.max_connections_per_peer`, one
//! address cannot take every place: a client from another address is served.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use cascade_client::api;
use cascade_e2e::process::http_get;
use cascade_e2e::scenarios::config;
use cascade_e2e::{Cluster, Mode};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// An empty SETTINGS frame: length 0, type 4, no flags, stream 0.
const EMPTY_SETTINGS: [u8; 9] = [0, 0, 0, 4, 0, 0, 0, 0, 0];
const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
/// How long a test waits for the server to act: far above what it takes, never a measure.
const WITHIN: Duration = Duration::from_secs(30);

fn start(max_connections: &str, handshake_timeout: &str) -> Cluster {
    Cluster::start_with(
        Mode::Standalone,
        None,
        &[
            ("CASCADE__STANDALONE__STAGE_WORKERS", "false"),
            ("CASCADE__GRPC__MAX_CONNECTIONS", max_connections),
            ("CASCADE__GRPC__MAX_CONCURRENT_STREAMS", "7"),
            ("CASCADE__GRPC__HANDSHAKE_TIMEOUT", handshake_timeout),
        ],
    )
}

/// A connection that has spoken HTTP/2: the preface and an empty SETTINGS frame.
fn speaking(addr: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.write_all(PREFACE).expect("preface");
    stream.write_all(&EMPTY_SETTINGS).expect("settings");
    stream.set_read_timeout(Some(WITHIN)).expect("timeout");
    stream
}

/// Takes `places` with connections that spoke HTTP/2 (and so stay), and checks that one more
/// is closed at once, unread. Its writes may already meet the closed socket (a broken pipe),
/// so they are not checked.
fn fill_places(addr: &str, places: usize) -> Vec<TcpStream> {
    let mut held: Vec<TcpStream> = (0..places).map(|_| speaking(addr)).collect();
    for stream in &mut held {
        server_settings(stream);
    }
    let mut extra = TcpStream::connect(addr).expect("connect");
    let _ = extra.write_all(PREFACE);
    let _ = extra.write_all(&EMPTY_SETTINGS);
    assert!(
        closed_unread(&mut extra),
        "a connection past {places} places is closed"
    );
    held
}

/// Whether the server closed `stream` (end of file or a reset) before it sent anything.
fn closed_unread(stream: &mut TcpStream) -> bool {
    stream.set_read_timeout(Some(WITHIN)).expect("timeout");
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Err(e) => e.kind() == ErrorKind::ConnectionReset,
        Ok(_) => false,
    }
}

/// Whether the server closed `stream` (end of file or a reset), whatever it sent first
/// (its HTTP/2 SETTINGS, which a server sends at once).
fn closed(stream: &mut TcpStream) -> bool {
    stream.set_read_timeout(Some(WITHIN)).expect("timeout");
    let mut buf = [0u8; 256];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) => return e.kind() == ErrorKind::ConnectionReset,
        }
    }
}

/// The next HTTP/2 frame the server sent: its type, whether it is an ACK, its payload.
fn read_frame(stream: &mut TcpStream) -> (u8, bool, Vec<u8>) {
    let mut header = [0u8; 9];
    stream
        .read_exact(&mut header)
        .expect("a frame: the connection is open");
    let len = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload).expect("a frame payload");
    (header[3], header[4] & 0x1 != 0, payload)
}

/// The server's first SETTINGS frame on `stream`, as `(identifier, value)` pairs.
fn server_settings(stream: &mut TcpStream) -> Vec<(u16, u32)> {
    loop {
        let (kind, is_ack, payload) = read_frame(stream);
        if kind == 4 && !is_ack {
            return payload
                .chunks_exact(6)
                .map(|e| {
                    let id = u16::from_be_bytes([e[0], e[1]]);
                    (id, u32::from_be_bytes([e[2], e[3], e[4], e[5]]))
                })
                .collect();
        }
    }
}

#[test]
fn the_server_advertises_its_stream_limit_and_closes_silent_connections() {
    let cluster = start("8", "2s");
    let mut stream = speaking(cluster.gateway());
    let settings = server_settings(&mut stream);
    assert!(
        settings.contains(&(SETTINGS_MAX_CONCURRENT_STREAMS, 7)),
        "SETTINGS_MAX_CONCURRENT_STREAMS = grpc.max_concurrent_streams: {settings:?}"
    );
    // Far below the cap, so only the handshake timeout can close it.
    let mut silent = TcpStream::connect(cluster.gateway()).expect("connect");
    assert!(closed(&mut silent), "a silent connection is closed");
    // The one that spoke outlived the timeout: it still answers a PING.
    let ping = [0, 0, 8, 6, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
    stream.write_all(&ping).expect("ping");
    loop {
        let (kind, is_ack, payload) = read_frame(&mut stream);
        if kind == 6 && is_ack {
            assert_eq!(payload, ping[9..], "the PING's answer");
            break;
        }
    }
    cluster.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hoarded_and_silent_connections_cannot_keep_clients_out() {
    let cluster = tokio::task::spawn_blocking(|| start("3", "10s"))
        .await
        .expect("start");
    let addr = cluster.gateway().to_owned();
    let http = cluster.http().to_owned();
    tokio::task::block_in_place(|| {
        // Every place taken; one more is closed at once, and the admin port still answers.
        let mut held = fill_places(&addr, 3);
        assert_eq!(
            http_get(&http, "/healthz").map(|(code, _)| code),
            Some(200),
            "health checks are still served"
        );
        held.clear();
    });
    // The places come back: a real client is served. The server frees a place only once it
    // has seen the hoarder's close, so a client that comes first is still turned away, after
    // its TCP connect succeeded: a refused connect or call is retried until the deadline.
    let deadline = Instant::now() + WITHIN;
    loop {
        let served = match cascade_client::Client::connect(&format!("http://{addr}")).await {
            Ok(c) => c
                .admin()
                .create_queue(api::CreateQueueRequest {
                    name: "jobs".into(),
                    config: Some(config(30.0, 3)),
                })
                .await
                .map(drop)
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match served {
            Ok(()) => break,
            Err(e) => assert!(Instant::now() < deadline, "no client served: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}

/// A connection that has spoken HTTP/2 from the loopback address `local` (all of 127/8 is
/// loopback, so each is a client address of its own), with the server's SETTINGS read: it
/// was served.
async fn served_from(local: &str, addr: &str) -> bool {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind(format!("{local}:0").parse().expect("address"))
        .expect("bind");
    let stream = socket
        .connect(addr.parse().expect("address"))
        .await
        .expect("connect");
    let mut stream = stream.into_std().expect("a std stream");
    stream.set_nonblocking(false).expect("blocking");
    tokio::task::block_in_place(|| {
        stream.write_all(PREFACE).expect("preface");
        stream.write_all(&EMPTY_SETTINGS).expect("settings");
        stream.set_read_timeout(Some(WITHIN)).expect("timeout");
        let mut header = [0u8; 9];
        stream.read_exact(&mut header).is_ok() && header[3] == 4
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_take_every_place() {
    let cluster = tokio::task::spawn_blocking(|| {
        Cluster::start_with(
            Mode::Standalone,
            None,
            &[
                ("CASCADE__STANDALONE__STAGE_WORKERS", "false"),
                ("CASCADE__GRPC__MAX_CONNECTIONS_PER_PEER", "2"),
            ],
        )
    })
    .await
    .expect("start");
    let addr = cluster.gateway().to_owned();
    // 127.0.0.1's two places taken; a third from that address is closed at once.
    let held = tokio::task::block_in_place(|| fill_places(&addr, 2));
    // Another address has places of its own.
    assert!(
        served_from("127.0.0.2", &addr).await,
        "a client from another address is served"
    );
    drop(held);
    tokio::task::spawn_blocking(move || cluster.stop())
        .await
        .expect("stop");
}
