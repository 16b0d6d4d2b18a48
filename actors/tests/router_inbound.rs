//! The router refuses to relay a peer's envelope: one with `via` set, or
//! whose source actor does not live on the peer it came from (a spoofed
//! source), is dropped and counted; an honest one is delivered.

use actix::prelude::*;
use edgemu_actors::clock::Clock;
use edgemu_actors::events::EventLog;
use edgemu_actors::messages::Deliver;
use edgemu_actors::router::{GetRouterCounters, Inbound, RegisterActor, Router};
use edgemu_codec::ids::{ActorId, HostId, LinkId};
use edgemu_protocol::{Envelope, Msg};
use std::sync::{Arc, Mutex};

const CLUSTER: &str = r#"
[run]
duration = "10s"
[[hosts]]
name = "a"
listen = "127.0.0.1:1"
[[hosts]]
name = "b"
listen = "127.0.0.1:2"
[[hosts]]
name = "c"
listen = "127.0.0.1:3"
[[actors]]
name = "on-a"
host = "a"
kind = "sink"
[[actors]]
name = "on-b"
host = "b"
kind = "sink"
[[actors]]
name = "on-c"
host = "c"
kind = "sink"
[[links]]
name = "bc"
a = "on-b"
b = "on-c"
rate = "10Mbps"
"#;

struct Collect(Arc<Mutex<u32>>);
impl Actor for Collect {
    type Context = Context<Self>;
}
impl Handler<Deliver> for Collect {
    type Result = ();
    fn handle(&mut self, _: Deliver, _: &mut Context<Self>) {
        *self.0.lock().unwrap() += 1;
    }
}

fn env(src: u32, dst: u32, via: Option<u32>) -> Envelope {
    Envelope {
        src: ActorId(src),
        dst: ActorId(dst),
        via: via.map(LinkId),
        sent_at_ns: 0,
        due_ns: None,
        payload: Msg::KvFrame(vec![1]),
    }
}

#[test]
fn spoofed_or_relayed_peer_envelopes_are_dropped() {
    let cluster = Arc::new(
        edgemu_config::Cluster::from_str(CLUSTER, std::path::Path::new("t.toml")).unwrap(),
    );
    actix::System::new().block_on(async move {
        // Host b's router; host a is the peer sending to it.
        let router = Router::new(
            HostId(1),
            cluster,
            Clock::new(tokio::time::Instant::now()),
            false,
            EventLog::discard(),
        )
        .start();
        let got = Arc::new(Mutex::new(0));
        router.do_send(RegisterActor {
            id: ActorId(1),
            recipient: Collect(got.clone()).start().recipient(),
        });
        // From a, claiming b's own actor as source, into link bc towards c.
        router.do_send(Inbound(env(1, 2, Some(0)), HostId(0)));
        // From a, claiming c's actor as source.
        router.do_send(Inbound(env(2, 1, None), HostId(0)));
        // Honest: from a's actor to b's.
        router.do_send(Inbound(env(0, 1, None), HostId(0)));
        let c = router.send(GetRouterCounters).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert_eq!(c.dropped_bad_route, 2, "{c:?}");
        assert_eq!(c.delivered_local, 1, "{c:?}");
        assert_eq!(*got.lock().unwrap(), 1);
    });
}
