//! The external-policy connection of a decider, against a real websocket
//! server on loopback: a request is answered and matched by id; when the
//! server goes away the decider learns it at once and falls back without
//! waiting; when it comes back on the same address the client reconnects by
//! itself (capped backoff) and decisions are answered again; a decider that
//! replaced its connection ignores the old one's events.

use actix::prelude::*;
use edgemu_actors::external::book::FallbackReason;
use edgemu_actors::external::client::PolicyEvent;
use edgemu_actors::external::{ExternalDecider, Outcome};
use edgemu_policies::external::{DecisionReply, DecisionRequest, RepairArrays, WireObs};
use edgemu_policies::repair::{ActionMask, RepairObservation};
use edgemu_policies::slot::ExternalTarget;
use futures_util::{SinkExt, StreamExt};
use std::sync::Arc;
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

/// A policy process answering action 2 to every request, on `port`
/// (0: any), until `stop` is sent; returns the port.
fn server(port: u16, stop: std::sync::mpsc::Receiver<()>) -> u16 {
    let l = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind");
    l.set_nonblocking(true).expect("nonblocking");
    let port = l.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(l).expect("listener");
            let serve = async {
                while let Ok((tcp, _)) = l.accept().await {
                    tokio::spawn(async move {
                        let Ok(ws) = tokio_tungstenite::accept_async(tcp).await else {
                            return;
                        };
                        let (mut tx, mut rx) = ws.split();
                        while let Some(Ok(Message::Text(t))) = rx.next().await {
                            let req: DecisionRequest =
                                serde_json::from_str(t.as_str()).expect("a request");
                            let reply = DecisionReply {
                                id: req.id,
                                action: Some(serde_json::json!(2)),
                                error: None,
                            };
                            let text = serde_json::to_string(&reply).expect("json");
                            if tx.send(Message::text(text)).await.is_err() {
                                return;
                            }
                        }
                    });
                }
            };
            let wait_stop = async {
                // Polled: the std receiver must not block the runtime.
                while stop.try_recv().is_err() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            };
            tokio::select! {
                _ = serve => {}
                _ = wait_stop => {}
            }
        });
        // The runtime's drop closes every connection.
    });
    port
}

/// A decider actor that records what its connection tells it.
struct Decider {
    ext: ExternalDecider,
    outcomes: Vec<Outcome>,
}

impl Actor for Decider {
    type Context = Context<Self>;
}

impl Handler<PolicyEvent> for Decider {
    type Result = ();
    fn handle(&mut self, ev: PolicyEvent, _: &mut Context<Self>) {
        let o = self.ext.on_event(0, ev);
        if o != Outcome::Nothing {
            self.outcomes.push(o);
        }
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct Connect(Option<String>);

impl Handler<Connect> for Decider {
    type Result = ();
    fn handle(&mut self, m: Connect, ctx: &mut Context<Self>) {
        if let Some(url) = m.0 {
            let t = self.ext.target().as_ref().clone();
            self.ext.retarget(Arc::new(ExternalTarget { url, ..t }));
        }
        self.ext.ensure_connected(ctx.address().recipient());
    }
}

#[derive(Message)]
#[rtype(result = "Result<u64, FallbackReason>")]
struct Ask;

impl Handler<Ask> for Decider {
    type Result = Result<u64, FallbackReason>;
    fn handle(&mut self, _: Ask, _: &mut Context<Self>) -> Self::Result {
        let obs = RepairArrays::new(&RepairObservation::default(), ActionMask([true; 4]));
        self.ext.ask(0, WireObs::Repair(obs))
    }
}

#[derive(Message)]
#[rtype(result = "(Vec<Outcome>, u64, u64, u64)")]
struct Take;

impl Handler<Take> for Decider {
    type Result = MessageResult<Take>;
    fn handle(&mut self, _: Take, _: &mut Context<Self>) -> Self::Result {
        let s = self.ext.counters();
        MessageResult((
            std::mem::take(&mut self.outcomes),
            s.connects,
            s.disconnected,
            s.answered,
        ))
    }
}

#[derive(Message)]
#[rtype(result = "()")]
struct Accept(u64);

impl Handler<Accept> for Decider {
    type Result = ();
    fn handle(&mut self, m: Accept, _: &mut Context<Self>) {
        self.ext.accept(m.0);
    }
}

/// Waits (at most 10 s) until the decider has seen an outcome `want` accepts.
async fn wait_for(addr: &Addr<Decider>, want: impl Fn(&Outcome) -> bool) -> Vec<Outcome> {
    let mut seen = Vec::new();
    for _ in 0..1000 {
        let (o, ..) = addr.send(Take).await.expect("decider");
        seen.extend(o);
        if seen.iter().any(&want) {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never saw the expected outcome; saw {seen:?}");
}

#[test]
fn answers_match_ids_a_lost_server_falls_back_at_once_and_a_returning_one_is_reconnected() {
    let (stop_tx, stop_rx) = std::sync::mpsc::channel();
    let port = server(0, stop_rx);
    let url = format!("ws://127.0.0.1:{port}");
    System::new().block_on(async move {
        let target = Arc::new(ExternalTarget {
            url: url.clone(),
            deadline_ns: 50_000_000,
            fallback: "deficit-heuristic".into(),
            fallback_version: String::new(),
        });
        let addr = Decider {
            ext: ExternalDecider::new("repair", target),
            outcomes: Vec::new(),
        }
        .start();
        // Not connected yet: the decision falls back without being sent.
        assert_eq!(
            addr.send(Ask).await.unwrap(),
            Err(FallbackReason::Disconnected)
        );
        addr.send(Connect(None)).await.unwrap();
        wait_for(&addr, |o| matches!(o, Outcome::Link { up: true, .. })).await;

        let id = addr.send(Ask).await.unwrap().expect("asked");
        let seen = wait_for(&addr, |o| matches!(o, Outcome::Action { .. })).await;
        assert!(
            seen.contains(&Outcome::Action {
                id,
                action: serde_json::json!(2)
            }),
            "{seen:?}"
        );
        addr.send(Accept(id)).await.unwrap();

        // The server goes away: the decider is told, and decides at once.
        stop_tx.send(()).unwrap();
        wait_for(&addr, |o| matches!(o, Outcome::Link { up: false, .. })).await;
        assert_eq!(
            addr.send(Ask).await.unwrap(),
            Err(FallbackReason::Disconnected)
        );

        // It comes back on the same address: reconnected by the client.
        let (stop2_tx, stop2_rx) = std::sync::mpsc::channel();
        assert_eq!(server(port, stop2_rx), port);
        wait_for(&addr, |o| matches!(o, Outcome::Link { up: true, .. })).await;
        let id2 = addr.send(Ask).await.unwrap().expect("asked again");
        assert!(id2 > id, "ids are unique per decider");
        wait_for(
            &addr,
            |o| matches!(o, Outcome::Action { id, .. } if *id == id2),
        )
        .await;
        addr.send(Accept(id2)).await.unwrap();
        let (_, connects, disconnected, answered) = addr.send(Take).await.unwrap();
        assert_eq!((connects, disconnected, answered), (2, 2, 2));

        // A new URL: a new connection; the old one's events are ignored.
        let (stop3_tx, stop3_rx) = std::sync::mpsc::channel();
        let port3 = server(0, stop3_rx);
        addr.send(Connect(Some(format!("ws://127.0.0.1:{port3}"))))
            .await
            .unwrap();
        wait_for(&addr, |o| matches!(o, Outcome::Link { up: true, .. })).await;
        stop2_tx.send(()).unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (o, ..) = addr.send(Take).await.unwrap();
        assert!(
            !o.iter()
                .any(|o| matches!(o, Outcome::Link { up: false, .. })),
            "the replaced connection's end is not this decider's: {o:?}"
        );
        let id3 = addr.send(Ask).await.unwrap().expect("asked on the new url");
        wait_for(
            &addr,
            |o| matches!(o, Outcome::Action { id, .. } if *id == id3),
        )
        .await;
        stop3_tx.send(()).unwrap();
    });
}
