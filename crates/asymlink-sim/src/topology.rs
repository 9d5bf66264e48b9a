//! Building the simulator's world from a validated scenario, in steps: the topology
//! (nodes, hosts and their addresses), the link directions, the middleboxes on them, and
//! static routes. `World::build` runs them, then adds flows and captures.

use crate::engine::{Host, LinkDir, MbState, Node, NodeRole, Source};
use crate::packet::NodeId;
use crate::queue::Timer;
use crate::scenario::{NodeKind, Spec};
use crate::tcp::{Conditioner, RwndPolicy};
use asymlink_core::config::ConfigError;
use asymlink_core::link::{loss_seed, Link, LinkConfig};
use asymlink_core::pipeline::{Dir, Egress, Middlebox};
use asymlink_core::rand::{derive_seed, Rng};
use asymlink_core::script::DropRule;
use core::net::{IpAddr, Ipv4Addr};
use std::collections::{HashMap, HashSet, VecDeque};

/// No route toward a host (`World::routes`).
pub(crate) const NO_ROUTE: u32 = u32::MAX;

fn host_addr(k: usize) -> IpAddr {
    let k = k as u32 + 1;
    IpAddr::V4(Ipv4Addr::new(10, (k >> 16) as u8, (k >> 8) as u8, k as u8))
}

/// Nodes in scenario order, and the hosts among them (addresses assigned, conditioners
/// and window policies built).
pub(crate) fn build_topology(spec: &Spec) -> Result<(Vec<Node>, Vec<Host>), ConfigError> {
    let mut nodes = Vec::new();
    let mut hosts = Vec::new();
    let mut routers = 0u32;
    let mut used: HashSet<IpAddr> = spec.nodes.iter().filter_map(|n| n.addr).collect();
    let mut auto = 0usize;
    for n in &spec.nodes {
        let role = match n.kind {
            NodeKind::Host => {
                let addr = match n.addr {
                    Some(a) => a,
                    None => loop {
                        let a = host_addr(auto);
                        auto += 1;
                        if used.insert(a) {
                            break a;
                        }
                    },
                };
                let conditioner = match &n.conditioner {
                    Some(cfg) => Some(Box::new(
                        crate::conditioner::AggregateConditioner::new(cfg)
                            .map_err(|e| e.within(format!("nodes[{}].conditioner", nodes.len())))?,
                    ) as Box<dyn Conditioner>),
                    None => None,
                };
                hosts.push(Host {
                    node: nodes.len() as NodeId,
                    conns: Vec::new(),
                    conditioner,
                    rwnd: n.rwnd_policy.as_ref().map(|c| {
                        Box::new(crate::rwnd::RwndHost::new(c).expect("validated"))
                            as Box<dyn RwndPolicy>
                    }),
                    cond_timer: Timer::default(),
                    addr,
                    out_dir: u32::MAX,
                    listeners: HashMap::new(),
                    udp: HashMap::new(),
                    demux: HashMap::new(),
                    next_port: 40_000,
                });
                NodeRole::Host(hosts.len() as u32 - 1)
            }
            NodeKind::Router => {
                routers += 1;
                NodeRole::Router(routers - 1)
            }
        };
        nodes.push(Node { role });
    }
    Ok((nodes, hosts))
}

/// The link graph: `adj[node]` lists (neighbour, link direction leaving toward it).
pub(crate) type Adjacency = Vec<Vec<(usize, u32)>>;

/// Link directions (link i has `2i` toward b and `2i + 1` toward a), each with its own
/// discipline, and the link graph. Sets each host's outgoing direction.
pub(crate) fn build_links(
    spec: &Spec,
    seed: u64,
    nodes: &[Node],
    hosts: &mut [Host],
) -> Result<(Vec<LinkDir>, Adjacency), ConfigError> {
    let mut dirs = Vec::new();
    let mut adj: Adjacency = vec![Vec::new(); nodes.len()];
    for (i, l) in spec.links.iter().enumerate() {
        for (d, (from, to, ds, dname)) in [(l.a, l.b, &l.to_b, "to_b"), (l.b, l.a, &l.to_a, "to_a")]
            .into_iter()
            .enumerate()
        {
            let id = (2 * i + d) as u32;
            if ds.queue.as_ref().is_some_and(|q| q.needs_peer()) {
                return Err(ConfigError::new(
                    format!("links[{i}].{dname}.queue"),
                    "this discipline watches the opposite direction (an ack_shaper); \
                     place it in a [[middleboxes]] direction on a router",
                ));
            }
            let egress = Egress::new(
                &ds.egress(),
                ds.nominal_rate(),
                derive_seed(seed, &format!("queue:{}:{dname}", l.name)),
            )
            .map_err(|e| e.within(format!("links[{i}].{dname}")))?;
            let ds = &with_flows(ds, spec, nodes, hosts);
            dirs.push(LinkDir {
                name: format!("{}:{dname}", l.name),
                link: l.name.clone(),
                dir_name: dname,
                to: to as NodeId,
                line: Link::new(ds, Rng::new(loss_seed(seed, &l.name, dname)), false),
                source: Source::Own(egress),
                txdone: crate::queue::PlacedTimer::default(),
                wake: Timer::default(),
                tx_acks: (0, 0, 0),
                sojourn_sum_ns: 0,
                sojourn_max_ns: 0,
                sojourn_hist: Default::default(),
                captures: Vec::new(),
                plain: false,
                bare_line: false,
            });
            adj[from].push((to, id));
            if let NodeRole::Host(h) = nodes[from].role {
                hosts[h as usize].out_dir = id;
            }
        }
    }
    Ok((dirs, adj))
}

/// `ds` with the flows its scripted drops name resolved to their two hosts and port.
fn with_flows(ds: &LinkConfig, spec: &Spec, nodes: &[Node], hosts: &[Host]) -> LinkConfig {
    let mut ds = ds.clone();
    let addr = |n: usize| match nodes[n].role {
        NodeRole::Host(h) => Some(hosts[h as usize].addr),
        NodeRole::Router(_) => None,
    };
    for r in ds.drop.iter_mut().flatten() {
        let DropRule::Segment(s) = r else { continue };
        let Some(f) = s
            .flow
            .as_ref()
            .and_then(|n| spec.flows.iter().find(|f| &f.name == n))
        else {
            continue;
        };
        s.port = s.port.or(Some(f.port));
        s.hosts = addr(f.from).zip(addr(f.to));
    }
    ds
}

/// The middleboxes: each replaces the router's egress on its two links. Then every
/// direction learns whether its discipline wants to see the link go idle.
pub(crate) fn build_middleboxes(
    spec: &Spec,
    seed: u64,
    dirs: &mut [LinkDir],
) -> Result<Vec<MbState>, ConfigError> {
    let mut mbs = Vec::new();
    for (i, m) in spec.middleboxes.iter().enumerate() {
        let out_dir = |li: usize| -> u32 {
            let l = &spec.links[li];
            if l.a == m.node {
                (2 * li) as u32
            } else {
                (2 * li + 1) as u32
            }
        };
        // Side a's link carries traffic *to* a: the router's egress onto link a.
        let to_a = out_dir(m.a);
        let to_b = out_dir(m.b);
        let rates = [
            dirs[to_b as usize].line.nominal_rate(),
            dirs[to_a as usize].line.nominal_rate(),
        ];
        let mb_seed = derive_seed(seed, &format!("mb:{i}"));
        let top = Middlebox::new(&m.cfg, rates, mb_seed)
            .map_err(|e| e.within(format!("middleboxes[{i}]")))?;
        let mb = m.subscribers.build(top, mb_seed);
        let calm = mb.table().is_empty()
            && [Dir::ToB, Dir::ToA]
                .iter()
                .all(|&d| !mb.top_level().egress(d).observes_peer());
        for (d, id) in [(Dir::ToB, to_b), (Dir::ToA, to_a)] {
            dirs[id as usize].source = Source::Mb(i as u32, d);
        }
        mbs.push(MbState {
            name: format!(
                "{}[{}|{}]",
                spec.nodes[m.node].name, spec.links[m.a].name, spec.links[m.b].name
            ),
            mb,
            dirs: [to_b, to_a],
            timer: Timer::default(),
            calm,
        });
    }
    for d in dirs.iter_mut() {
        d.line.set_idle_dequeue(match &d.source {
            Source::Own(e) => e.qdisc().wants_idle_dequeue(),
            Source::Mb(m, md) => mbs[*m as usize].mb.wants_idle_dequeue(*md),
            Source::Line => false,
        });
    }
    Ok(mbs)
}

/// One router's next hops toward every host. Most routers of a large topology (a home
/// gateway, an access router) send almost everything one way: they keep that direction
/// and the few hosts that differ, so an access network of 10 000 lines needs memory in
/// proportion to its hosts, not hosts × routers. A router whose exceptions pass
/// `DENSE_AFTER` keeps a table indexed by host instead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RouterRoutes {
    /// The direction toward every host not listed (the first host's), and the others
    /// (host index, direction) in host order.
    Sparse {
        default: u32,
        exceptions: Vec<(u32, u32)>,
    },
    /// The direction toward each host, by host index.
    Dense(Vec<u32>),
}

/// A sparse router with more exceptions than this turns dense: a lookup then costs one
/// index, and a dense table of its hosts is at most a few times the sparse list's size.
const DENSE_AFTER: usize = 16;

impl RouterRoutes {
    /// The link direction toward host `h` (`NO_ROUTE` if none).
    #[inline]
    pub(crate) fn toward(&self, h: u32) -> u32 {
        match self {
            RouterRoutes::Dense(t) => t[h as usize],
            RouterRoutes::Sparse {
                default,
                exceptions,
            } => exceptions
                .iter()
                .find(|&&(host, _)| host == h)
                .map_or(*default, |&(_, d)| d),
        }
    }

    /// Record the direction toward host `h`; hosts come in increasing order from 0.
    fn push(&mut self, h: u32, d: u32, hosts: usize) {
        match self {
            RouterRoutes::Dense(t) => t[h as usize] = d,
            RouterRoutes::Sparse {
                default,
                exceptions,
            } => {
                if h == 0 {
                    *default = d;
                } else if d != *default {
                    exceptions.push((h, d));
                    if exceptions.len() > DENSE_AFTER {
                        let mut t = vec![NO_ROUTE; hosts];
                        for k in 0..h {
                            t[k as usize] = self.toward(k);
                        }
                        t[h as usize] = d;
                        *self = RouterRoutes::Dense(t);
                    }
                }
            }
        }
    }
}

/// Static routes, `routes[router]`: BFS from every host over the link graph (hop count,
/// ties broken by link order) gives each router its next hop toward each host.
/// The same search says whether a flow's sender reaches its receiver: fails if a flow's
/// endpoints are not connected.
pub(crate) fn build_routes(
    spec: &Spec,
    nodes: &[Node],
    hosts: &[Host],
    adj: &Adjacency,
) -> Result<Vec<RouterRoutes>, ConfigError> {
    let routers = nodes
        .iter()
        .filter(|n| matches!(n.role, NodeRole::Router(_)))
        .count();
    let mut routes = vec![
        RouterRoutes::Sparse {
            default: NO_ROUTE,
            exceptions: Vec::new(),
        };
        routers
    ];
    // The flows toward each node, and the first flow without a path.
    let mut flows_to = vec![Vec::new(); nodes.len()];
    for (i, f) in spec.flows.iter().enumerate() {
        flows_to[f.to].push(i);
    }
    let mut unconnected: Option<usize> = None;
    for (hi, h) in hosts.iter().enumerate() {
        let target = h.node as usize;
        let dist = hops_to(nodes, adj, target);
        for (u, n) in nodes.iter().enumerate() {
            if let NodeRole::Router(r) = n.role {
                let best = if dist[u] == u32::MAX || u == target {
                    None
                } else {
                    adj[u]
                        .iter()
                        .filter(|(v, _)| dist[*v] != u32::MAX && dist[*v] + 1 == dist[u])
                        .map(|&(_, d)| d)
                        .next()
                };
                routes[r as usize].push(hi as u32, best.unwrap_or(NO_ROUTE), hosts.len());
            }
        }
        // Links are two-way: a sender the search from the receiver reaches has a path.
        for &i in &flows_to[target] {
            if dist[spec.flows[i].from] == u32::MAX {
                unconnected = Some(unconnected.map_or(i, |j| j.min(i)));
            }
        }
    }
    if let Some(i) = unconnected {
        let f = &spec.flows[i];
        return Err(ConfigError::new(
            format!("flows[{i}]"),
            format!(
                "no path from '{}' to '{}'",
                spec.nodes[f.from].name, spec.nodes[f.to].name
            ),
        ));
    }
    Ok(routes)
}

/// Hop counts toward `target` over the link graph (`u32::MAX`: no path). Only routers
/// forward: a path passes through no host but its two ends.
fn hops_to(nodes: &[Node], adj: &Adjacency, target: usize) -> Vec<u32> {
    let mut dist = vec![u32::MAX; nodes.len()];
    dist[target] = 0;
    let mut q = VecDeque::from([target]);
    while let Some(u) = q.pop_front() {
        for &(v, _) in &adj[u] {
            if dist[v] == u32::MAX {
                dist[v] = dist[u] + 1;
                if matches!(nodes[v].role, NodeRole::Router(_)) {
                    q.push_back(v);
                }
            }
        }
    }
    dist
}

#[cfg(test)]
mod tests {
    use crate::{RunOptions, Simulation};

    /// s — r1 — r3 — c, and a second island h — r2 — x; `flows` appended.
    fn scenario(flows: &str) -> String {
        let mut src = String::from("duration = \"1s\"\n");
        for (name, kind) in [
            ("s", "host"),
            ("r1", "router"),
            ("c", "host"),
            ("r3", "router"),
            ("h", "host"),
            ("r2", "router"),
            ("x", "host"),
        ] {
            src += &format!("[[nodes]]\nname = \"{name}\"\nkind = \"{kind}\"\n");
        }
        for (a, b) in [
            ("s", "r1"),
            ("r1", "r3"),
            ("r3", "c"),
            ("h", "r2"),
            ("r2", "x"),
        ] {
            src += &format!(
                "[[links]]\nname = \"{a}{b}\"\na = \"{a}\"\nb = \"{b}\"\nrate = \"1Mbit\"\ndelay = \"1ms\"\n"
            );
        }
        src + flows
    }

    fn flow(from: &str, to: &str) -> String {
        format!("[[flows]]\nfrom = \"{from}\"\nto = \"{to}\"\napp = {{ kind = \"bulk\", bytes = \"10KB\" }}\n")
    }

    /// The error's key and message without the line it names.
    fn error(src: &str) -> Option<String> {
        Simulation::from_toml(src, RunOptions::default())
            .err()
            .map(|e| format!("{}: {}", e.path, e.msg.split(" (line").next().unwrap()))
    }

    #[test]
    fn flows_need_a_path_through_routers() {
        assert_eq!(error(&scenario(&(flow("s", "c") + &flow("x", "h")))), None);
        // The first flow between the islands is named, in either direction.
        let src = scenario(&(flow("s", "c") + &flow("x", "s") + &flow("s", "x")));
        assert_eq!(
            error(&src).as_deref(),
            Some("flows[1]: no path from 'x' to 's'")
        );
        let src = scenario(&(flow("s", "x") + &flow("x", "s")));
        assert_eq!(
            error(&src).as_deref(),
            Some("flows[0]: no path from 's' to 'x'")
        );
    }

    /// A router's routes answer as a full table would, whether they stay sparse (a home
    /// gateway: one host on the LAN, everything else up the line) or turn dense (an
    /// access router with a line per host).
    #[test]
    fn sparse_routes_answer_like_a_table() {
        use super::{RouterRoutes, DENSE_AFTER, NO_ROUTE};
        let hosts = 200u32;
        let gateway = |h: u32| -> u32 {
            if h == 57 {
                3
            } else {
                8
            }
        };
        let access = |h: u32| -> u32 {
            if h < 16 {
                1
            } else {
                100 + h
            }
        };
        let island = |h: u32| -> u32 {
            if h.is_multiple_of(2) {
                NO_ROUTE
            } else {
                5
            }
        };
        for (table, dense) in [
            (&gateway as &dyn Fn(u32) -> u32, false),
            (&access, true),
            (&island, true),
        ] {
            let mut r = RouterRoutes::Sparse {
                default: NO_ROUTE,
                exceptions: Vec::new(),
            };
            for h in 0..hosts {
                r.push(h, table(h), hosts as usize);
            }
            assert_eq!(matches!(r, RouterRoutes::Dense(_)), dense);
            for h in 0..hosts {
                assert_eq!(r.toward(h), table(h), "host {h}");
            }
        }
        // At most DENSE_AFTER exceptions stay sparse.
        let mut r = RouterRoutes::Sparse {
            default: NO_ROUTE,
            exceptions: Vec::new(),
        };
        for h in 0..=DENSE_AFTER as u32 {
            r.push(h, if h == 0 { 1 } else { 2 }, 64);
        }
        assert!(
            matches!(r, RouterRoutes::Sparse { ref exceptions, .. } if exceptions.len() == DENSE_AFTER)
        );
    }
}
