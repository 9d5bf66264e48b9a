"""Network namespaces for the lab: client, router and server, wired with veth pairs.

```
 al-XXXX-c                        al-XXXX-r                         al-XXXX-s
 eth0 198.18.0.1/24 -- veth-a [asymlink-box or br0] veth-b -- eth0 198.18.0.2/24
```

With an access line (`Lab.set_access(True)`, a scenario's `[access]`), a fourth
namespace sits between the router and the server and runs a second box that only
emulates the line (rate, delay, framing, loss, modem/DSLAM buffer):

```
 al-XXXX-c          al-XXXX-r                    al-XXXX-x                        al-XXXX-s
 eth0 -- veth-a [box or br0] veth-b -- veth-xa [line box] veth-xb -- eth0
```

The router's interfaces `veth-a` (side a of the box) and `veth-b` (side b) carry no
address: the box forwards frames between them as a bump in the wire (AF_PACKET), or,
for the kernel-forwarding baseline, a Linux bridge does. Offloads are switched off on
every interface (GRO/GSO/TSO, checksum offload, VLAN acceleration) so that the
disciplines see the packets that are really on the wire and checksums are complete.
Addresses come from 198.18.0.0/15, the range RFC 2544 reserves for benchmarking, and
exist only inside these namespaces.

With more than one client host (`Lab.set_clients(n)`, a scenario whose flows name
`client2`, `client3`, ...), a LAN namespace holds a Linux bridge between the router's
side a and the clients, so the box sees several source addresses on one side:

```
 al-XXXX-c   eth0 198.18.0.1  --+
 al-XXXX-c2  eth0 198.18.0.12 --+- h1..hN [br0 in al-XXXX-l] rtr -- veth-a [box] veth-b -- ...
 al-XXXX-cN  eth0 198.18.0.1N --+
```

Every name carries the lab's unique prefix `al-XXXX`; `down` removes everything a lab
created (namespaces, hence interfaces, and the processes it started), also after a failed
`up`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

PREFIX = "al-"
STATE_DIR = Path(os.environ.get("ASYMLINK_LAB_STATE", "/run/asymlink-lab"))
CLIENT_ADDR = "198.18.0.1"
SERVER_ADDR = "198.18.0.2"
#: Most client hosts a lab builds (client 1 is `client`, the others `client2`...).
MAX_CLIENTS = 8


def client_addr(k: int) -> str:
    """Address of client host `k` (1: 198.18.0.1, k >= 2: 198.18.0.1k)."""
    return CLIENT_ADDR if k == 1 else f"198.18.0.{10 + k}"


def client_index(role: str) -> int:
    """1 for `client`, k for `clientk` (2..MAX_CLIENTS); 0 for anything else."""
    if role == "client":
        return 1
    if role.startswith("client") and role[6:].isdigit():
        k = int(role[6:])
        return k if 2 <= k <= MAX_CLIENTS else 0
    return 0
PREFIX_LEN = 24
SIDE_A = "veth-a"
SIDE_B = "veth-b"
#: The access namespace's interfaces: toward the router (its side a) and the server.
ACCESS_A = "veth-xa"
ACCESS_B = "veth-xb"
OFFLOADS = ["rx", "tx", "sg", "tso", "gso", "gro", "lro", "rxvlan", "txvlan"]
#: The end hosts keep no TCP metrics cache: a transfer does not start from the ssthresh
#: a previous run in the same lab left behind.
HOST_SYSCTLS = {"net.ipv4.tcp_no_metrics_save": "1"}
#: The end hosts' congestion control: what the simulator's `linux` profile models,
#: whatever the machine's default is (it may be BBR). Set per socket by the traffic tool
#: (`--cc`): a namespace may only default to the host's *allowed* algorithms.
TCP_CC = "cubic"


class LabError(RuntimeError):
    """A lab operation failed; the message says which command and why."""


def run(argv: list[str], check: bool = True,
        timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run a command; raise `LabError` with its stderr on failure."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as e:
        raise LabError(f"{argv[0]}: not installed ({e})") from None
    if check and r.returncode != 0:
        raise LabError(f"`{' '.join(argv)}` failed: {r.stderr.strip() or r.stdout.strip()}")
    return r


def can_run_labs() -> str | None:
    """None if this process can build a lab, else the reason it cannot."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth, AF_PACKET)"
    for tool in ("ip", "ethtool"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            return f"needs `{tool}` (iproute2 / ethtool)"
    name = f"{PREFIX}probe-{secrets.token_hex(3)}"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        return f"cannot create network namespaces: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


@dataclass
class Lab:
    """A client/router/server lab. Create with `Lab.up()`, find again with `Lab.load()`."""

    name: str
    mtu: int = 1500
    forwarding: str = "none"
    access: bool = False
    clients: int = 1

    @property
    def client(self) -> str:
        return f"{self.name}-c"

    @property
    def router(self) -> str:
        return f"{self.name}-r"

    @property
    def server(self) -> str:
        return f"{self.name}-s"

    @property
    def access_ns(self) -> str:
        """The access-line namespace (exists while `access` is set)."""
        return f"{self.name}-x"

    def client_ns(self, k: int) -> str:
        """Namespace of client host `k` (1: `al-XXXX-c`, k >= 2: `al-XXXX-ck`)."""
        return self.client if k == 1 else f"{self.name}-c{k}"

    @property
    def lan_ns(self) -> str:
        """The clients' switch (exists while `clients` > 1)."""
        return f"{self.name}-l"

    @property
    def namespaces(self) -> list[str]:
        extra = [self.client_ns(k) for k in range(2, self.clients + 1)]
        extra += [self.lan_ns] if self.clients > 1 else []
        return ([self.client, self.router, self.server] + ([self.access_ns] if self.access
                                                           else []) + extra)

    @property
    def dir(self) -> Path:
        """The lab's working directory (world-traversable: the box reads its config
        there after dropping privileges)."""
        return STATE_DIR / self.name

    def ns(self, role: str) -> str:
        """Namespace of `client` (`client2`, ...), `router`, `server`, `access` or `lan`."""
        k = client_index(role)
        if k:
            return self.client_ns(k)
        return {"router": self.router, "server": self.server, "access": self.access_ns,
                "lan": self.lan_ns}[role]

    def addr(self, role: str) -> str:
        """Address of `client` (`client2`, ...) or `server`."""
        k = client_index(role)
        return client_addr(k) if k else {"server": SERVER_ADDR}[role]

    # --- life cycle ---------------------------------------------------------------------

    @classmethod
    def up(cls, name: str | None = None, mtu: int = 1500) -> Lab:
        """Create the namespaces and links. On failure, removes what it created."""
        reason = can_run_labs()
        if reason:
            raise LabError(f"cannot build a lab here: {reason}")
        name = name or f"{PREFIX}{secrets.token_hex(2)}"
        if not name.startswith(PREFIX) or len(name) > 12 or not name[3:].replace("-", "").isalnum():
            raise LabError(f"lab name '{name}' must start with '{PREFIX}' and have at most 12 "
                           "letters, digits or dashes")
        lab = cls(name=name, mtu=mtu)
        if (STATE_DIR / f"{name}.json").exists():
            raise LabError(f"lab {name} already exists (asymlink lab down {name})")
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        STATE_DIR.chmod(0o755)
        lab.dir.mkdir(exist_ok=True)
        lab.dir.chmod(0o755)
        lab.save()
        try:
            lab._build()
        except BaseException:
            lab.down()
            raise
        return lab

    def _build(self) -> None:
        for ns in self.namespaces:
            run(["ip", "netns", "add", ns])
            self.ip(ns, "link", "set", "lo", "up")
        self._veth(self.client, "eth0", self.router, SIDE_A)
        self._veth(self.server, "eth0", self.router, SIDE_B)
        for ns, addr in ((self.client, CLIENT_ADDR), (self.server, SERVER_ADDR)):
            for key, value in HOST_SYSCTLS.items():
                self.sysctl(ns, key, value)
            self._host_up(ns, addr)

    def _host_up(self, ns: str, addr: str) -> None:
        self.ip(ns, "addr", "add", f"{addr}/{PREFIX_LEN}", "dev", "eth0")
        self.ip(ns, "link", "set", "dev", "eth0", "up")

    def _veth(self, ns1: str, dev1: str, ns2: str, dev2: str) -> None:
        """A veth pair `ns1:dev1` -- `ns2:dev2` with the lab's MTU and no offloads; the
        interfaces that carry no address (everything but a host's eth0) come up here,
        without IPv6 (no router solicitations in the measurements)."""
        run(["ip", "link", "add", dev1, "netns", ns1, "type", "veth", "peer", "name", dev2,
             "netns", ns2])
        for ns, dev in ((ns1, dev1), (ns2, dev2)):
            self.ip(ns, "link", "set", "dev", dev, "mtu", str(self.mtu))
            self.offloads_off(ns, dev)
            if dev != "eth0":
                self.sysctl(ns, f"net.ipv6.conf.{dev}.disable_ipv6", "1")
                self.ip(ns, "link", "set", "dev", dev, "up")

    def set_access(self, on: bool) -> None:
        """Put the access-line namespace between the router and the server (`on`), or
        wire the server straight to the router again. The router keeps its interface
        names, so a box or bridge in it is configured the same either way; the
        forwarding mode is restored afterwards."""
        if on == self.access:
            return
        fwd = self.forwarding
        self.set_forwarding("none")
        if on:
            run(["ip", "netns", "add", self.access_ns])
            self.access = True
            self.save()
            self.ip(self.access_ns, "link", "set", "lo", "up")
        # Deleting the server's end removes its peer (the router's veth-b) with it.
        self.ip(self.server, "link", "del", "dev", "eth0")
        if on:
            self._veth(self.router, SIDE_B, self.access_ns, ACCESS_A)
            self._veth(self.access_ns, ACCESS_B, self.server, "eth0")
        else:
            run(["ip", "netns", "del", self.access_ns])
            self.access = False
            self.save()
            self._veth(self.server, "eth0", self.router, SIDE_B)
        self._host_up(self.server, SERVER_ADDR)
        self.set_forwarding(fwd)

    def set_clients(self, n: int) -> None:
        """Give the lab `n` client hosts (1 to `MAX_CLIENTS`): with more than one, a LAN
        namespace bridges them onto the router's side a; with one, the client is wired
        straight to the router again. The forwarding mode is restored afterwards and the
        hosts' neighbour caches are flushed (the clients' interfaces are new)."""
        if not 1 <= n <= MAX_CLIENTS:
            raise LabError(f"a lab has 1 to {MAX_CLIENTS} client hosts, not {n}")
        if n == self.clients:
            return
        fwd = self.forwarding
        self.set_forwarding("none")
        old = self.clients
        if old > 1:
            # The veths go first: a deleted namespace's devices disappear asynchronously.
            for k in range(1, old + 1):
                run(["ip", "-n", self.client_ns(k), "link", "del", "dev", "eth0"], check=False)
            self.ip(self.router, "link", "del", "dev", SIDE_A)
            run(["ip", "netns", "del", self.lan_ns])
            for k in range(max(n, 1) + 1, old + 1):
                run(["ip", "netns", "del", self.client_ns(k)], check=False)
        else:
            self.ip(self.client, "link", "del", "dev", "eth0")
        self.clients = n
        self.save()
        if n == 1:
            self._veth(self.client, "eth0", self.router, SIDE_A)
        else:
            run(["ip", "netns", "add", self.lan_ns])
            self.ip(self.lan_ns, "link", "set", "lo", "up")
            self.ip(self.lan_ns, "link", "add", "br0", "type", "bridge")
            self.sysctl(self.lan_ns, "net.ipv6.conf.br0.disable_ipv6", "1")
            self.offloads_off(self.lan_ns, "br0")
            self._veth(self.router, SIDE_A, self.lan_ns, "rtr")
            self.ip(self.lan_ns, "link", "set", "dev", "rtr", "master", "br0")
            for k in range(1, n + 1):
                ns = self.client_ns(k)
                if k > old:
                    run(["ip", "netns", "add", ns])
                    self.ip(ns, "link", "set", "lo", "up")
                    for key, value in HOST_SYSCTLS.items():
                        self.sysctl(ns, key, value)
                self._veth(ns, "eth0", self.lan_ns, f"h{k}")
                self.ip(self.lan_ns, "link", "set", "dev", f"h{k}", "master", "br0")
            self.ip(self.lan_ns, "link", "set", "dev", "br0", "up")
        for k in range(1, n + 1):
            self._host_up(self.client_ns(k), client_addr(k))
        for ns in [self.server] + [self.client_ns(k) for k in range(1, n + 1)]:
            self.ip(ns, "neigh", "flush", "all")
        self.set_forwarding(fwd)

    def offloads_off(self, ns: str, dev: str) -> None:
        """Switch off every offload `ethtool` knows on `dev` (unsupported ones are
        skipped)."""
        for feature in OFFLOADS:
            run(["ip", "netns", "exec", ns, "ethtool", "-K", dev, feature, "off"], check=False)

    @property
    def _all_namespaces(self) -> list[str]:
        clients = [self.client_ns(k) for k in range(2, self.clients + 1)]
        return [self.client, self.router, self.server, self.access_ns, self.lan_ns, *clients]

    def _ns_pids(self) -> list[int]:
        """Processes running inside the lab's namespaces (all of them ours)."""
        pids = []
        for ns in self._all_namespaces:
            r = run(["ip", "netns", "pids", ns], check=False)
            pids += [int(p) for p in r.stdout.split() if p.isdigit()]
        return pids

    def down(self) -> None:
        """Stop the processes inside the lab's namespaces (SIGTERM, then SIGKILL after
        3 s) and remove the namespaces. Only processes inside these namespaces are
        signalled, never a process by a remembered id. Idempotent."""
        for pid in self._ns_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 3
        while self._ns_pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in self._ns_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for ns in self._all_namespaces:
            run(["ip", "netns", "del", ns], check=False)
        (STATE_DIR / f"{self.name}.json").unlink(missing_ok=True)
        if self.dir.exists():
            for p in sorted(self.dir.rglob("*"), reverse=True):
                p.unlink() if not p.is_dir() else p.rmdir()
            self.dir.rmdir()

    def save(self) -> None:
        (STATE_DIR / f"{self.name}.json").write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, name: str) -> Lab:
        p = STATE_DIR / f"{name}.json"
        if not p.exists():
            raise LabError(f"no lab named {name} (asymlink lab up)")
        return cls(**json.loads(p.read_text()))

    @staticmethod
    def names() -> list[str]:
        """Labs recorded on this machine."""
        if not STATE_DIR.exists():
            return []
        return sorted(p.stem for p in STATE_DIR.glob(f"{PREFIX}*.json"))

    # --- helpers ------------------------------------------------------------------------

    def ip(self, ns: str, *args: str) -> None:
        run(["ip", "-n", ns, *args])

    def sysctl(self, ns: str, key: str, value: str) -> None:
        run(["ip", "netns", "exec", ns, "sysctl", "-qw", f"{key}={value}"])

    def exec_argv(self, role_or_ns: str, argv: list[str]) -> list[str]:
        roles = ("router", "server", "access", "lan")
        is_role = role_or_ns in roles or client_index(role_or_ns) > 0
        ns = self.ns(role_or_ns) if is_role else role_or_ns
        return ["ip", "netns", "exec", ns, *argv]

    def spawn(self, role: str, argv: list[str], **kw: object) -> subprocess.Popen[bytes]:
        """Start a process in a namespace; `down` stops it if it still runs."""
        proc: subprocess.Popen[bytes] = subprocess.Popen(  # type: ignore[call-overload]
            self.exec_argv(role, argv), **kw)
        return proc

    def router_commands(self, commands: list[list[str]]) -> None:
        """Run `ip` / `tc` commands (argument lists, `{a}` / `{b}` standing for the
        router's side a / side b interface) in the router namespace: the kernel
        configuration of a `forwarding = "kernel"` arm (a Linux qdisc recipe)."""
        for argv in commands:
            if argv[0] not in ("ip", "tc"):
                raise LabError(f"router command {argv[0]!r}: only ip and tc are run")
            args = [a.replace("{a}", SIDE_A).replace("{b}", SIDE_B) for a in argv[1:]]
            run([argv[0], "-n", self.router, *args])

    def clear_router_qdiscs(self) -> None:
        """Undo `router_commands`: the sides' root and ingress qdiscs go back to the
        default and the router's IFB devices are removed."""
        for dev in (SIDE_A, SIDE_B):
            run(["tc", "-n", self.router, "qdisc", "del", "dev", dev, "root"], check=False)
            run(["tc", "-n", self.router, "qdisc", "del", "dev", dev, "ingress"], check=False)
        r = run(["ip", "-n", self.router, "-o", "link", "show", "type", "ifb"], check=False)
        for line in r.stdout.splitlines():
            dev = line.split(":")[1].strip().split("@")[0]
            run(["ip", "-n", self.router, "link", "del", "dev", dev], check=False)

    def set_forwarding(self, mode: str) -> None:
        """`box` (nothing in the router: the box forwards) or `kernel` (a Linux bridge)."""
        if mode == self.forwarding:
            return
        if self.forwarding == "kernel":
            self.ip(self.router, "link", "del", "dev", "br0")
        if mode == "kernel":
            self.ip(self.router, "link", "add", "br0", "type", "bridge")
            self.sysctl(self.router, "net.ipv6.conf.br0.disable_ipv6", "1")
            for dev in (SIDE_A, SIDE_B):
                self.ip(self.router, "link", "set", "dev", dev, "master", "br0")
            self.offloads_off(self.router, "br0")
            self.ip(self.router, "link", "set", "dev", "br0", "up")
        elif mode not in ("box", "none"):
            raise LabError(f"unknown forwarding mode {mode!r}")
        self.forwarding = mode
        self.save()
