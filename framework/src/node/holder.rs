//! One process per node id. Before a node takes its owner lease, it checks whether the last
//! holder of its id (live lease or not: a holder cut off from the store may still run) is a
//! process that still runs, by asking that process at the mesh address its descriptor publishes: a QUIC handshake with the node's own credentials. A holder that
//! answers is a live node, and the new process refuses to start rather than evict it. A holder
//! that does not answer within [`HOLDER_PROBE`] is gone (a crash, a kill), and the new process
//! takes over its lease at once, without waiting for the lease to run out: a supervisor's
//! restart works.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::QuicClientConfig;

use super::config::NodeConfig;
use super::handle::Node;
use crate::cluster::authority::{NodeDescriptor, node_key};
use crate::error::StartError;
use crate::mesh::tls::{NodeTls, node_dns_name};
use crate::store::StoreError;

/// How long a start waits for the holder of its id's lease to answer before it takes over.
pub const HOLDER_PROBE: Duration = Duration::from_secs(2);

/// What the probe learnt about the holder.
enum Answer {
    /// Its mesh completed a handshake as this node id.
    Live,
    /// Something answers at the address, but the handshake failed.
    Refused(String),
    /// Nothing answered in time.
    Silent,
}

/// Refuses the start if a live process holds this node id; returns once the id is free to take.
pub(crate) async fn check_id_free(config: &NodeConfig) -> Result<(), StartError> {
    let store = &config.store;
    // A node without a mesh has no address to be asked at; its lease is taken over.
    let Some(mesh) = &config.mesh else {
        return Ok(());
    };
    // A holder whose lease lapsed may still run (while the store was out of its reach, its peers
    // vouching for it): it is asked all the same.
    let key = node_key(&config.id);
    let addr = match store.get(&key).await? {
        Some(found) => {
            NodeDescriptor::decode(&key, &found.value)
                .map_err(StoreError::from)?
                .mesh_addr
        }
        None => None,
    };
    let Some(addr) = addr else {
        return Ok(());
    };
    // A probe that cannot even be sent says nothing about the holder: refuse, to be safe.
    let answer = dial(addr, &mesh.tls, config)
        .await
        .unwrap_or_else(Answer::Refused);
    match answer {
        Answer::Live => Err(StartError::IdInUse {
            node: config.id.clone(),
            mesh_addr: addr,
            detail: "its mesh answers there".to_owned(),
        }),
        Answer::Refused(why) => Err(StartError::IdInUse {
            node: config.id.clone(),
            mesh_addr: addr,
            detail: format!("something answers there, though its handshake failed ({why})"),
        }),
        Answer::Silent => {
            tracing::warn!(node = %config.id, %addr, "the last holder of this node id does not answer at its mesh address: taking over its lease (a restart after a crash)");
            Ok(())
        }
    }
}

/// Dials `addr` as this node would dial a peer, and says what answered.
async fn dial(addr: SocketAddr, tls: &NodeTls, config: &NodeConfig) -> Result<Answer, String> {
    let crypto = tls.client_config().map_err(|e| e.to_string())?;
    let crypto = QuicClientConfig::try_from(crypto).map_err(|e| e.to_string())?;
    let mut transport = quinn::TransportConfig::default();
    let idle = quinn::IdleTimeout::try_from(HOLDER_PROBE).map_err(|e| e.to_string())?;
    transport.max_idle_timeout(Some(idle));
    if let Some(mesh) = &config.mesh {
        transport.initial_rtt(mesh.initial_rtt);
    }
    let mut client = quinn::ClientConfig::new(Arc::new(crypto));
    client.transport_config(Arc::new(transport));
    let local: SocketAddr = match addr {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let endpoint = quinn::Endpoint::client(local).map_err(|e| e.to_string())?;
    let connecting = endpoint
        .connect_with(client, addr, &node_dns_name(&config.id))
        .map_err(|e| e.to_string())?;
    let answer = match tokio::time::timeout(HOLDER_PROBE, connecting).await {
        Ok(Ok(connection)) => {
            connection.close(quinn::VarInt::from_u32(0), b"start-up probe");
            Answer::Live
        }
        Ok(Err(quinn::ConnectionError::TimedOut)) | Err(_) => Answer::Silent,
        Ok(Err(error)) => Answer::Refused(error.to_string()),
    };
    endpoint.close(quinn::VarInt::from_u32(0), b"");
    Ok(answer)
}

impl Node {
    /// Whether `config`'s node id is free to start with: refused (`StartError::IdInUse`) if a live
    /// process holds it, as [`Node::start`] checks first. For a host that binds its own ports
    /// before the start: a port taken by a copy of a running node's config is that node's, and
    /// this says so instead of the port.
    pub async fn check_id_free(config: &NodeConfig) -> Result<(), StartError> {
        check_id_free(config).await
    }
}
