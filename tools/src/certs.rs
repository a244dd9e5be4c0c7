//! `ferry certs`: a development cluster CA and one certificate per node, as files a node loads.
//!
//! The CA is the root of the cluster's trust: a node accepts exactly the peers whose certificate
//! it signed. So an existing CA is kept (and new node certificates come from it, so nodes issued
//! earlier still trust the new ones) unless `--force` asks for a new one.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use ferry::NodeId;
use ferry::mesh::{ClusterCa, TlsError, node_dns_name, node_file_stem, write_pem};

use ferry_host::node_ids::{BadNodeId, node_id};

/// Where to write and for which nodes.
#[derive(Args, Debug, Clone)]
pub struct CertsArgs {
    /// Directory for ca.pem, ca.key and node-<id>.pem/.key; created if missing.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Node ids to issue certificates for, separated by commas (for example p1,p2,p3).
    #[arg(long, value_name = "IDS", value_delimiter = ',', required = true)]
    nodes: Vec<String>,
    /// Also write gateway.pem and gateway.key: a self-signed certificate for these DNS names
    /// (separated by commas), for nodes that accept game clients. Clients trust gateway.pem.
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    gateway: Vec<String>,
    /// Replace an existing CA in DIR with a new one. Nodes whose certificates the old CA signed
    /// will no longer be trusted by, or trust, the nodes issued now.
    #[arg(long)]
    force: bool,
}

/// Why certificates were not made.
#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    /// A node id in `--nodes` is not usable.
    #[error("{0}; pass ids separated by commas, such as --nodes p1,p2,p3")]
    BadId(#[from] BadNodeId),
    /// The same id was given twice, which would silently replace the first certificate.
    #[error("node id {0:?} is listed twice in --nodes; list each node once")]
    Duplicate(String),
    /// The output directory could not be made.
    #[error("could not create the directory {}: {source}; check the path and its permissions", path.display())]
    CreateDir {
        /// The output directory `--out` named.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Only one of `ca.pem` and `ca.key` is there: a copy went wrong, and a new CA would hide it.
    #[error(
        "{} holds {present} but not {missing}; restore {missing}, or pass --force to make a new CA",
        dir.display()
    )]
    HalfCa {
        /// The output directory, which holds the other file of the CA.
        dir: PathBuf,
        /// The file that exists.
        present: &'static str,
        /// The file that does not.
        missing: &'static str,
    },
    /// The CA in the directory could not be read back.
    #[error("could not use the existing CA in {}: {source}; or pass --force to replace it", dir.display())]
    LoadCa {
        /// The output directory holding the CA.
        dir: PathBuf,
        /// What reading or parsing the CA met.
        source: TlsError,
    },
    /// A certificate could not be made or written.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The gateway certificate could not be made.
    #[error(
        "could not make the gateway certificate for {names:?}: {source}; pass DNS names such as --gateway localhost"
    )]
    Gateway {
        /// The names asked for.
        names: Vec<String>,
        /// What rcgen said.
        source: rcgen::Error,
    },

    /// The summary could not be printed.
    #[error("could not write to stdout: {0}")]
    Stdout(#[from] std::io::Error),
}

/// Checks every id (before anything is written), then makes or loads the CA and issues the
/// node certificates, printing each file written.
pub fn run(args: CertsArgs) -> Result<(), CertsError> {
    let nodes = check_ids(&args.nodes)?;
    let dir = args.out;
    std::fs::create_dir_all(&dir).map_err(|source| CertsError::CreateDir {
        path: dir.clone(),
        source,
    })?;
    let mut out = std::io::stdout().lock();
    let ca_pem = dir.join("ca.pem");
    let ca_key = dir.join("ca.key");
    let ca = match (ca_pem.exists(), ca_key.exists(), args.force) {
        (true, true, false) => {
            let ca = ClusterCa::load(&dir).map_err(|source| CertsError::LoadCa {
                dir: dir.clone(),
                source,
            })?;
            writeln!(
                out,
                "kept the existing cluster CA {} (--force replaces it)",
                ca_pem.display()
            )?;
            ca
        }
        (true, false, false) | (false, true, false) => {
            let (present, missing) = if ca_pem.exists() {
                ("ca.pem", "ca.key")
            } else {
                ("ca.key", "ca.pem")
            };
            return Err(CertsError::HalfCa {
                dir,
                present,
                missing,
            });
        }
        (had_pem, had_key, _) => {
            let ca = ClusterCa::generate()?;
            ca.write_files(&dir)?;
            let verb = if had_pem || had_key {
                "replaced"
            } else {
                "wrote"
            };
            writeln!(
                out,
                "{verb} the cluster CA {} and its key {} (keep the key secret)",
                ca_pem.display(),
                ca_key.display()
            )?;
            ca
        }
    };
    for node in &nodes {
        let cert = ca.issue_node(node)?;
        cert.write_files(&dir)?;
        let (pem, key) = node_files(&dir, node);
        // The name HTTPS clients of its admin endpoint (`admin_tls`) check, such as curl's.
        writeln!(
            out,
            "wrote node {node}: {} and {} (its certificate names it {})",
            pem.display(),
            key.display(),
            node_dns_name(node)
        )?;
    }
    if !args.gateway.is_empty() {
        let (pem, key) = write_gateway(&dir, &args.gateway)?;
        writeln!(
            out,
            "wrote the gateway certificate {} and its key {} for {} (clients trust the certificate)",
            pem.display(),
            key.display(),
            args.gateway.join(", ")
        )?;
    }
    out.flush()?;
    Ok(())
}

/// Writes `gateway.pem` and `gateway.key`: a fresh self-signed certificate for `names`.
fn write_gateway(dir: &Path, names: &[String]) -> Result<(PathBuf, PathBuf), CertsError> {
    let cert = rcgen::generate_simple_self_signed(names.to_vec()).map_err(|source| {
        CertsError::Gateway {
            names: names.to_vec(),
            source,
        }
    })?;
    let pem = dir.join("gateway.pem");
    let key = dir.join("gateway.key");
    write_pem(&pem, &cert.cert.pem(), false)?;
    write_pem(&key, &cert.signing_key.serialize_pem(), true)?;
    Ok((pem, key))
}

/// The certificate and key files of `node` in `dir`, as the framework names them.
pub fn node_files(dir: &Path, node: &NodeId) -> (PathBuf, PathBuf) {
    let stem = node_file_stem(node);
    (
        dir.join(format!("{stem}.pem")),
        dir.join(format!("{stem}.key")),
    )
}

fn check_ids(given: &[String]) -> Result<Vec<NodeId>, CertsError> {
    let mut nodes: Vec<NodeId> = Vec::with_capacity(given.len());
    for text in given {
        let node = node_id(text)?;
        if nodes.contains(&node) {
            return Err(CertsError::Duplicate(text.clone()));
        }
        nodes.push(node);
    }
    Ok(nodes)
}
