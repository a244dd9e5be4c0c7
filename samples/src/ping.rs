//! Ping: the smallest spot that exercises a cluster. It tells and asks other ping spots, wherever they
//! live, and reports what it received, so a cluster's paths can be checked end to end.

use std::collections::BTreeMap;
use std::time::Duration;

use ferry::{Behavior, Ctx, MessageError, Registration, RelocationPolicy, SpotId};
use serde::{Deserialize, Serialize};

/// The factory name of ping spots.
pub const PING: &str = "ping";

/// How long a ping spot waits for another to answer.
const ASK: Duration = Duration::from_secs(5);

/// What a ping spot takes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum PingMsg {
    /// A numbered ping from another spot.
    Ping {
        /// The spot that sent it; its numbers count apart from other senders'.
        from: SpotId,
        /// Its number, counting up per sender.
        n: u64,
    },
    /// Tell each of `to` the pings numbered `0..count`.
    PingOthers {
        /// The spots to ping.
        to: Vec<SpotId>,
        /// How many pings each.
        count: u64,
    },
    /// Ask each of `to` how many pings it has had, by request.
    AskOthers {
        /// The spots to ask.
        to: Vec<SpotId>,
    },
    /// An answer to `AskOthers`, coming back as a message.
    Answer {
        /// Who answered.
        from: SpotId,
        /// Its ping count, or why there is none.
        pings: Result<u64, String>,
    },
    /// Report what this spot has seen.
    Report,
}

/// What a ping spot has seen.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PingReport {
    /// The spot reporting.
    pub me: String,
    /// The node it runs on.
    pub node: String,
    /// Pings received, per sender, in arrival order.
    pub pings: BTreeMap<String, Vec<u64>>,
    /// Answers received, per asked spot.
    pub answers: BTreeMap<String, Result<u64, String>>,
}

/// A ping spot's state; it moves whole with the serde adapter.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Ping {
    pings: BTreeMap<String, Vec<u64>>,
    answers: BTreeMap<String, Result<u64, String>>,
}

impl Behavior for Ping {
    type Msg = PingMsg;
    type Reply = PingReport;

    fn handle(&mut self, ctx: &mut Ctx<'_>, msg: PingMsg) -> PingReport {
        let me = ctx.id().as_str().to_owned();
        match msg {
            PingMsg::Ping { from, n } => {
                self.pings.entry(from.to_string()).or_default().push(n);
            }
            PingMsg::PingOthers { to, count } => {
                let Ok(me_id) = SpotId::new(&me) else {
                    return PingReport::default();
                };
                for other in &to {
                    for n in 0..count {
                        let ping = PingMsg::Ping {
                            from: me_id.clone(),
                            n,
                        };
                        if let Err(error) = ctx.tell(other, ping) {
                            tracing::warn!(%other, %error, "ping not sent");
                        }
                    }
                }
            }
            PingMsg::AskOthers { to } => {
                for other in to {
                    let from = other.clone();
                    ctx.request(
                        other,
                        PingMsg::Report,
                        ASK,
                        move |r: Result<PingReport, MessageError>| PingMsg::Answer {
                            from,
                            pings: r
                                .map(|report| report.pings.values().map(|v| v.len() as u64).sum())
                                .map_err(|e| e.to_string()),
                        },
                    );
                }
            }
            PingMsg::Answer { from, pings } => {
                self.answers.insert(from.to_string(), pings);
            }
            PingMsg::Report => {}
        }
        PingReport {
            me,
            node: ctx.node().id().to_string(),
            pings: self.pings.clone(),
            answers: self.answers.clone(),
        }
    }
}

/// The ping factory: SpotWide, state kept by the serde adapter.
pub fn ping() -> Registration<Ping> {
    Registration::spot(PING, |_| Ping::default()).policy(RelocationPolicy::serde())
}
