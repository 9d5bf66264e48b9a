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
                source: Source::Own(Box::new(egress)),
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

impl RouterRoutes {
    /// No route toward any host yet.
    const EMPTY: RouterRoutes = RouterRoutes::Sparse {
        default: NO_ROUTE,
        exceptions: Vec::new(),
    };
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

/// Static routes, `routes[router]`: each router's next hop toward each host along a
/// shortest path (hop count; only routers forward, so a path passes through no host but
/// its two ends; ties broken by link order). Fails if a flow's endpoints are not
/// connected. A topology whose links form a forest (the access network: home gateways on
/// lines to a DSLAM, servers behind a core router) takes its routes from the tree's
/// structure in time linear in its size plus the dense tables; any other topology
/// searches breadth-first from every host ([`search_routes`]), with the same answers.
pub(crate) fn build_routes(
    spec: &Spec,
    nodes: &[Node],
    hosts: &[Host],
    adj: &Adjacency,
) -> Result<Vec<RouterRoutes>, ConfigError> {
    let host_nodes: Vec<usize> = hosts.iter().map(|h| h.node as usize).collect();
    let flows: Vec<(usize, usize)> = spec.flows.iter().map(|f| (f.from, f.to)).collect();
    let (routes, unconnected) = forest_routes(nodes, &host_nodes, adj, &flows)
        .unwrap_or_else(|| search_routes(nodes, &host_nodes, adj, &flows));
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

/// Routes and the first flow (`(from, to)` nodes) whose sender the search from its
/// receiving host does not reach: a breadth-first search from every host over all nodes
/// gives each router its next hop toward it (the first link toward a neighbour one hop
/// closer).
fn search_routes(
    nodes: &[Node],
    host_nodes: &[usize],
    adj: &Adjacency,
    flows: &[(usize, usize)],
) -> (Vec<RouterRoutes>, Option<usize>) {
    let routers = nodes
        .iter()
        .filter(|n| matches!(n.role, NodeRole::Router(_)))
        .count();
    let mut routes = vec![RouterRoutes::EMPTY; routers];
    // The flows toward each node, and the first flow without a path.
    let mut flows_to = vec![Vec::new(); nodes.len()];
    for (i, &(_, to)) in flows.iter().enumerate() {
        flows_to[to].push(i);
    }
    let mut unconnected: Option<usize> = None;
    for (hi, &target) in host_nodes.iter().enumerate() {
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
                routes[r as usize].push(hi as u32, best.unwrap_or(NO_ROUTE), host_nodes.len());
            }
        }
        // Links are two-way: a sender the search from the receiver reaches has a path.
        for &i in &flows_to[target] {
            if dist[flows[i].0] == u32::MAX {
                unconnected = Some(unconnected.map_or(i, |j| j.min(i)));
            }
        }
    }
    (routes, unconnected)
}

/// [`search_routes`]' answers from the structure of a forest, or `None` if the links
/// (parallel links and loops aside) form a cycle. Between a router and a host there is
/// then one path; it carries packets if every node inside it is a router. So within a
/// tree of routers (the routers and the links between them) rooted anywhere, a router
/// reaches a host attached to a router of its tree — toward it directly, toward the child
/// whose subtree holds that router, or toward its parent — and no other. A router counts
/// the hosts of each direction and lists only the hosts that differ from host 0's
/// direction, or fills a table by host if they are more than a sparse list keeps.
fn forest_routes(
    nodes: &[Node],
    host_nodes: &[usize],
    adj: &Adjacency,
    flows: &[(usize, usize)],
) -> Option<(Vec<RouterRoutes>, Option<usize>)> {
    let n = nodes.len();
    let is_router = |u: usize| matches!(nodes[u].role, NodeRole::Router(_));
    // A forest: every link between two nodes not yet connected (union-find).
    let mut up: Vec<usize> = (0..n).collect();
    fn root(up: &mut [usize], mut u: usize) -> usize {
        while up[u] != u {
            up[u] = up[up[u]];
            u = up[u];
        }
        u
    }
    // The first link direction from each node toward each distinct neighbour, in link
    // order (`first[u]`: (neighbour, direction)).
    let mut first: Vec<Vec<(usize, u32)>> = Vec::with_capacity(n);
    let mut seen = vec![usize::MAX; n];
    for (u, a) in adj.iter().enumerate() {
        let mut f = Vec::new();
        for &(v, d) in a {
            if v != u && seen[v] != u {
                seen[v] = u;
                f.push((v, d));
                if u < v {
                    let (ru, rv) = (root(&mut up, u), root(&mut up, v));
                    if ru == rv {
                        return None;
                    }
                    up[ru] = rv;
                }
            }
        }
        first.push(f);
    }
    // Trees of routers, in preorder: each router's tree, parent, and preorder interval.
    let mut tree = vec![usize::MAX; n];
    let mut parent = vec![usize::MAX; n];
    let mut tin = vec![0usize; n];
    let mut tout = vec![0usize; n];
    let mut order = 0;
    let mut stack: Vec<(usize, usize)> = Vec::new();
    for s in 0..n {
        if !is_router(s) || tree[s] != usize::MAX {
            continue;
        }
        tree[s] = s;
        tin[s] = order;
        order += 1;
        stack.push((s, 0));
        while let Some(&mut (u, ref mut k)) = stack.last_mut() {
            if let Some(&(v, _)) = first[u].get(*k) {
                *k += 1;
                if is_router(v) && tree[v] == usize::MAX {
                    tree[v] = s;
                    parent[v] = u;
                    tin[v] = order;
                    order += 1;
                    stack.push((v, 0));
                }
            } else {
                tout[u] = order;
                stack.pop();
            }
        }
    }
    // Every host's attachments (host index, router), by the router's preorder: a tree's
    // attachments are consecutive, a subtree's too.
    let mut att: Vec<(usize, u32)> = Vec::new();
    for (hi, &h) in host_nodes.iter().enumerate() {
        for &(v, _) in &first[h] {
            if is_router(v) {
                att.push((v, hi as u32));
            }
        }
    }
    att.sort_unstable_by_key(|&(r, h)| (tin[r], h));
    let keys: Vec<usize> = att.iter().map(|&(r, _)| tin[r]).collect();
    // The attachments within preorder interval `[a, b)`.
    let span = |a: usize, b: usize| -> std::ops::Range<usize> {
        keys.partition_point(|&k| k < a)..keys.partition_point(|&k| k < b)
    };
    // Host 0's attachment in each tree.
    let host0: HashMap<usize, usize> = (0..att.len())
        .filter(|&k| att[k].1 == 0)
        .map(|k| (tree[att[k].0], k))
        .collect();
    // A tree's hosts not attached to it, made when a router of it needs them.
    let mut strangers: HashMap<usize, Vec<u32>> = HashMap::new();
    let hosts = host_nodes.len();
    let mut routes = Vec::new();
    for u in 0..n {
        if !is_router(u) {
            continue;
        }
        let t = tree[u];
        let whole = span(tin[t], tout[t]);
        let own = span(tin[u], tout[u]);
        let toward = |v: usize| first[u].iter().find(|&&(w, _)| w == v).map(|&(_, d)| d);
        let up_dir = (parent[u] != usize::MAX).then(|| toward(parent[u]).expect("parent"));
        // Directions of the attachments in `own`: to the host itself, or to the child.
        let mut groups: Vec<(Option<u32>, std::ops::Range<usize>)> = Vec::new();
        let mut i = own.start;
        for &(c, d) in &first[u] {
            if is_router(c) && parent[c] == u && tree[c] == t {
                let r = span(tin[c], tout[c]);
                if r.start > i {
                    groups.push((None, i..r.start)); // attached to `u` itself
                }
                if !r.is_empty() {
                    groups.push((Some(d), r.clone()));
                }
                i = i.max(r.end);
            }
        }
        if own.end > i {
            groups.push((None, i..own.end));
        }
        let dir_of = |k: usize, g: &(Option<u32>, std::ops::Range<usize>)| -> u32 {
            g.0.unwrap_or_else(|| toward(host_nodes[att[k].1 as usize]).expect("attached host"))
        };
        let outside = (whole.end - whole.start) - (own.end - own.start);
        let unreached = hosts - (whole.end - whole.start);
        // Host 0's direction, and how many hosts share it.
        let (default, shared) = if hosts == 0 {
            (NO_ROUTE, 0)
        } else if let Some(&k) = host0.get(&t) {
            if own.contains(&k) {
                let g = groups.iter().find(|g| g.1.contains(&k)).expect("grouped");
                let size = if g.0.is_none() { 1 } else { g.1.len() };
                (dir_of(k, g), size)
            } else {
                (up_dir.expect("outside the subtree"), outside)
            }
        } else {
            (NO_ROUTE, unreached)
        };
        if hosts - shared <= DENSE_AFTER {
            let mut exceptions: Vec<(u32, u32)> = Vec::new();
            for g in groups.iter().filter(|g| g.0 != Some(default)) {
                for k in g.1.clone() {
                    let d = dir_of(k, g);
                    if d != default {
                        exceptions.push((att[k].1, d));
                    }
                }
            }
            if let Some(d) = up_dir.filter(|&d| d != default) {
                for k in (whole.start..own.start).chain(own.end..whole.end) {
                    exceptions.push((att[k].1, d));
                }
            }
            if default != NO_ROUTE && unreached > 0 {
                let list = strangers.entry(t).or_insert_with(|| {
                    let mut mine = vec![false; hosts];
                    for k in whole.clone() {
                        mine[att[k].1 as usize] = true;
                    }
                    (0..hosts as u32).filter(|&h| !mine[h as usize]).collect()
                });
                exceptions.extend(list.iter().map(|&h| (h, NO_ROUTE)));
            }
            exceptions.sort_unstable();
            routes.push(RouterRoutes::Sparse {
                default,
                exceptions,
            });
        } else {
            let mut table = vec![NO_ROUTE; hosts];
            if let Some(d) = up_dir {
                for k in (whole.start..own.start).chain(own.end..whole.end) {
                    table[att[k].1 as usize] = d;
                }
            }
            for g in &groups {
                for k in g.1.clone() {
                    table[att[k].1 as usize] = dir_of(k, g);
                }
            }
            routes.push(RouterRoutes::Dense(table));
        }
    }
    // A flow's sender is reached from its receiving host `h` if it is `h`, a neighbour of
    // it, a router of a tree `h` is attached to, or a node next to such a router.
    let host_of: HashMap<usize, usize> = host_nodes
        .iter()
        .enumerate()
        .map(|(i, &h)| (h, i))
        .collect();
    let unconnected = flows.iter().position(|&(from, to)| {
        if !host_of.contains_key(&to) || from == to {
            return false;
        }
        let trees: Vec<usize> = first[to]
            .iter()
            .filter(|&&(v, _)| is_router(v))
            .map(|&(v, _)| tree[v])
            .collect();
        let in_reach = |x: usize| is_router(x) && trees.contains(&tree[x]);
        let reached = first[to].iter().any(|&(v, _)| v == from)
            || in_reach(from)
            || first[from].iter().any(|&(v, _)| in_reach(v));
        !reached
    });
    Some((routes, unconnected))
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

    /// Routes from a forest's structure equal those of the breadth-first search from every
    /// host, and so does the first unconnected flow.
    fn same_routes(
        nodes: &[crate::engine::Node],
        host_nodes: &[usize],
        adj: &super::Adjacency,
        flows: &[(usize, usize)],
    ) -> bool {
        let want = super::search_routes(nodes, host_nodes, adj, flows);
        match super::forest_routes(nodes, host_nodes, adj, flows) {
            Some(got) => {
                assert_eq!(got, want);
                true
            }
            None => false,
        }
    }

    /// Random topologies: forests of routers and hosts (hosts on several routers or on
    /// each other, parallel links, loops, isolated parts, the dense tables of an
    /// access network's routers) and graphs with cycles, which the forest refuses.
    #[test]
    fn forest_routes_match_the_search() {
        use crate::engine::{Node, NodeRole};
        use asymlink_core::rand::Rng;
        let mut forests = 0;
        for seed in 0..300u64 {
            let mut rng = Rng::new(seed);
            let n = 2 + rng.below(if seed % 10 == 0 { 400 } else { 40 }) as usize;
            let (mut routers, mut hosts) = (0u32, Vec::new());
            let nodes: Vec<Node> = (0..n)
                .map(|u| {
                    let role = if rng.below(100) < 45 {
                        routers += 1;
                        NodeRole::Router(routers - 1)
                    } else {
                        hosts.push(u);
                        NodeRole::Host(hosts.len() as u32 - 1)
                    };
                    Node { role }
                })
                .collect();
            let mut adj = vec![Vec::new(); n];
            let mut dirs = 0u32;
            let mut link = |adj: &mut super::Adjacency, a: usize, b: usize| {
                adj[a].push((b, dirs));
                adj[b].push((a, dirs + 1));
                dirs += 2;
            };
            // A random tree over part of the nodes (each joins an earlier one), some
            // parallel links and loops, and now and then a cycle.
            for v in 1..n {
                if rng.below(10) > 0 {
                    let u = rng.below(v as u64) as usize;
                    link(&mut adj, u, v);
                    if rng.below(20) == 0 {
                        link(&mut adj, v, u);
                    }
                }
                if rng.below(50) == 0 {
                    link(&mut adj, v, v);
                }
            }
            if seed % 3 == 0 {
                let (a, b) = (rng.below(n as u64) as usize, rng.below(n as u64) as usize);
                if a != b {
                    link(&mut adj, a, b);
                }
            }
            let flows: Vec<(usize, usize)> = (0..rng.below(30))
                .map(|_| (rng.below(n as u64) as usize, rng.below(n as u64) as usize))
                .collect();
            if same_routes(&nodes, &hosts, &adj, &flows) {
                forests += 1;
            }
        }
        assert!(forests > 200, "{forests}");
        // An access network: servers on a core router, a DSLAM, lines with a home gateway
        // and a host each (the DSLAM's and the core's tables dense, the gateways' sparse).
        let mut nodes = Vec::new();
        let mut hosts = Vec::new();
        let mut routers = 0;
        let mut add = |router: bool, hosts: &mut Vec<usize>, nodes: &mut Vec<Node>| {
            let role = if router {
                routers += 1;
                NodeRole::Router(routers - 1)
            } else {
                hosts.push(nodes.len());
                NodeRole::Host(hosts.len() as u32 - 1)
            };
            nodes.push(Node { role });
            nodes.len() - 1
        };
        let core = add(true, &mut hosts, &mut nodes);
        let dslam = add(true, &mut hosts, &mut nodes);
        let mut edges = vec![(core, dslam)];
        for _ in 0..8 {
            edges.push((add(false, &mut hosts, &mut nodes), core));
        }
        for _ in 0..300 {
            let home = add(true, &mut hosts, &mut nodes);
            let sub = add(false, &mut hosts, &mut nodes);
            edges.extend([(sub, home), (home, dslam)]);
        }
        let mut adj = vec![Vec::new(); nodes.len()];
        for (i, &(a, b)) in edges.iter().enumerate() {
            adj[a].push((b, 2 * i as u32));
            adj[b].push((a, 2 * i as u32 + 1));
        }
        let flows: Vec<(usize, usize)> = (0..300).map(|i| (hosts[i % 8], hosts[8 + i])).collect();
        assert!(same_routes(&nodes, &hosts, &adj, &flows));
    }

    /// The same on every scenario file in the repository that parses.
    #[test]
    fn forest_routes_match_the_search_on_the_scenarios() {
        use crate::scenario::Spec;
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut files = Vec::new();
        let mut dirs = vec![
            root.join("examples"),
            root.join("python"),
            root.join("tests"),
        ];
        while let Some(d) = dirs.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries.flatten() {
                let p = e.path();
                if p.is_dir() {
                    dirs.push(p);
                } else if p.extension().is_some_and(|x| x == "toml") {
                    files.push(p);
                }
            }
        }
        let (mut checked, mut forests) = (0, 0);
        for p in files {
            let src = std::fs::read_to_string(&p).unwrap();
            let Ok(spec) = Spec::parse_in(&src, p.parent()) else {
                continue;
            };
            let Ok((nodes, mut hosts)) = super::build_topology(&spec) else {
                continue;
            };
            let Ok((_, adj)) = super::build_links(&spec, spec.seed, &nodes, &mut hosts) else {
                continue;
            };
            let host_nodes: Vec<usize> = hosts.iter().map(|h| h.node as usize).collect();
            let flows: Vec<(usize, usize)> = spec.flows.iter().map(|f| (f.from, f.to)).collect();
            checked += 1;
            if same_routes(&nodes, &host_nodes, &adj, &flows) {
                forests += 1;
            }
        }
        assert!(checked >= 100 && forests >= 100, "{checked} {forests}");
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
