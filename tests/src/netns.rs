//! Network namespaces a test makes for itself, so that a real link between real processes can be
//! cut: one hub namespace holding a bridge (and whatever the processes share, such as the store),
//! and one namespace per node, each linked to the bridge by a veth pair. None of them is linked to
//! the host's network. A cut is an nftables table in the node's namespace that drops everything
//! but loopback; mending deletes it. Dropping the [`Net`] deletes every namespace it made (and
//! with them their links, bridge and rules).
//!
//! Making namespaces needs root, `ip` and `nft`. Where they are missing, [`Net::create_or_skip`]
//! says why and returns `None`, unless `FERRY_REQUIRE_NETNS=1` (CI) makes that a failure.

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Namespaces made by this process so far: each [`Net`] gets its own names and subnet.
static MADE: AtomicU32 = AtomicU32::new(0);

/// A hub namespace with a bridge, and one namespace per node linked to it.
pub struct Net {
    hub: String,
    nodes: Vec<String>,
    subnet: [u8; 2],
}

impl Net {
    /// Makes the hub and `nodes` node namespaces, or says why it cannot and returns `None`.
    pub fn create_or_skip(nodes: usize) -> Option<Net> {
        if let Some(missing) = missing_tools() {
            assert!(
                std::env::var("FERRY_REQUIRE_NETNS").as_deref() != Ok("1"),
                "FERRY_REQUIRE_NETNS=1 but network namespaces cannot be made here: {missing}"
            );
            eprintln!("skipped: network namespaces cannot be made here: {missing}");
            return None;
        }
        let n = MADE.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let tag = format!("fy{}x{n}", pid % 100_000);
        // 10.a.b.0/24, from the process id and the count: tests running at once never share one.
        let subnet = [
            100 + ((pid / 256) % 100) as u8 + (n as u8 % 50),
            (pid % 256) as u8,
        ];
        let net = Net {
            hub: format!("{tag}-hub"),
            nodes: (0..nodes).map(|i| format!("{tag}-{i}")).collect(),
            subnet,
        };
        net.build();
        Some(net)
    }

    fn build(&self) {
        ip(&["netns", "add", &self.hub]);
        ip(&["-n", &self.hub, "link", "set", "lo", "up"]);
        ip(&["-n", &self.hub, "link", "add", "br0", "type", "bridge"]);
        let hub_addr = format!("{}/24", self.hub_addr());
        ip(&["-n", &self.hub, "addr", "add", &hub_addr, "dev", "br0"]);
        ip(&["-n", &self.hub, "link", "set", "br0", "up"]);
        for (i, ns) in self.nodes.iter().enumerate() {
            ip(&["netns", "add", ns]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            let (inner, outer) = ("eth0".to_owned(), format!("h{i}"));
            ip(&[
                "-n", ns, "link", "add", &inner, "type", "veth", "peer", "name", &outer, "netns",
                &self.hub,
            ]);
            let addr = format!("{}/24", self.addr(i));
            ip(&["-n", ns, "addr", "add", &addr, "dev", &inner]);
            ip(&["-n", ns, "link", "set", &inner, "up"]);
            ip(&["-n", &self.hub, "link", "set", &outer, "master", "br0"]);
            ip(&["-n", &self.hub, "link", "set", &outer, "up"]);
        }
    }

    /// The hub namespace's name: run what the nodes share (the store, the test's clients) there.
    pub fn hub(&self) -> &str {
        &self.hub
    }

    /// Node `i`'s namespace name.
    pub fn node(&self, i: usize) -> &str {
        &self.nodes[i]
    }

    /// The hub's address on the bridge.
    pub fn hub_addr(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, self.subnet[0], self.subnet[1], 254)
    }

    /// Node `i`'s address.
    pub fn addr(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, self.subnet[0], self.subnet[1], i as u8 + 1)
    }

    /// A command that runs `program` inside namespace `ns` (`ip netns exec` replaces itself with
    /// the program, so the child's pid is the program's).
    pub fn command(
        &self,
        ns: &str,
        program: impl AsRef<std::ffi::OsStr>,
    ) -> tokio::process::Command {
        let mut command = tokio::process::Command::new("ip");
        command.args(["netns", "exec", ns]).arg(program);
        command
    }

    /// Cuts node `i` off: its namespace drops every packet in or out but loopback's.
    pub fn cut(&self, i: usize) {
        let rules = "table inet ferrycut {\n\
             chain input { type filter hook input priority 0; policy drop; iif lo accept; }\n\
             chain output { type filter hook output priority 0; policy drop; oif lo accept; }\n\
             }\n";
        let mut nft = Command::new("ip")
            .args(["netns", "exec", &self.nodes[i], "nft", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("nft starts");
        {
            use std::io::Write;
            let mut stdin = nft.stdin.take().expect("piped stdin");
            stdin.write_all(rules.as_bytes()).expect("rules written");
        }
        let status = nft.wait().expect("nft ran");
        assert!(status.success(), "nft refused the cut of {}", self.nodes[i]);
    }

    /// Mends node `i`'s cut.
    pub fn mend(&self, i: usize) {
        let status = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.nodes[i],
                "nft",
                "delete",
                "table",
                "inet",
                "ferrycut",
            ])
            .status()
            .expect("nft runs");
        assert!(status.success(), "nft did not mend {}", self.nodes[i]);
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for ns in self.nodes.iter().chain([&self.hub]) {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// Runs `ip` with `args`; a failure is the test's.
fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("ip runs");
    assert!(
        out.status.success(),
        "ip {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What stops this machine from making namespaces, if anything.
fn missing_tools() -> Option<String> {
    for tool in ["ip", "nft"] {
        let found = Command::new(tool)
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!(
                "`{tool}` is not installed (Debian: iproute2, nftables)"
            ));
        }
    }
    let probe = format!("fy{}probe", std::process::id() % 100_000);
    let made = Command::new("ip")
        .args(["netns", "add", &probe])
        .output()
        .is_ok_and(|o| o.status.success());
    if !made {
        return Some("`ip netns add` failed: making namespaces needs root".into());
    }
    let _ = Command::new("ip").args(["netns", "del", &probe]).status();
    None
}
