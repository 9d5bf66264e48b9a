"""Running `asymlink-box` inside a lab's router namespace."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import tomli_w

from asymlink.lab.netns import ACCESS_A, ACCESS_B, SIDE_A, SIDE_B, Lab, LabError
from asymlink.live import box_command, check_config


class BoxProcess:
    """A running box: its stats, SIGHUP reload, clean stop."""

    def __init__(self, proc: subprocess.Popen[bytes], config: Path, socket_path: Path,
                 final: Path, log: Path) -> None:
        self.proc = proc
        self.config = config
        self.socket_path = socket_path
        self.final = final
        self.log = log

    def stats(self) -> dict[str, Any]:
        """The current JSON snapshot from the unix socket (at most one interval old)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect(str(self.socket_path))
            chunks = []
            while True:
                b = s.recv(65536)
                if not b:
                    break
                chunks.append(b)
        return dict(json.loads(b"".join(chunks)))

    def reload(self, config: dict[str, Any] | None = None) -> None:
        """Write a new configuration (if given) and send SIGHUP."""
        if config is not None:
            self.config.write_text(tomli_w.dumps(config))
        self.proc.send_signal(signal.SIGHUP)

    def stop(self, timeout: float = 10) -> dict[str, Any]:
        """SIGTERM, wait, and return the final stats the box wrote at exit."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise LabError(f"the box did not exit within {timeout} s of SIGTERM") from None
        if self.proc.returncode != 0:
            raise LabError(f"the box exited with status {self.proc.returncode}: "
                           f"{self.log.read_text()[-2000:]}")
        text = self.final.read_text() if self.final.exists() else ""
        return dict(json.loads(text)) if text.strip() else {}


#: Where a box runs: its namespace's role, its interfaces (sides a and b) and the stem of
#: its files in the lab's directory.
PLACES = {"router": (SIDE_A, SIDE_B, "box"), "access": (ACCESS_A, ACCESS_B, "access")}


#: The `[process]` keys every lab box runs with unless its scenario's `[box.process]`
#: (or the access line's) sets them: the event loop under SCHED_FIFO, so that a loaded
#: machine does not make it wake up late. A late wake-up holds the emulated line's
#: packets and then releases them back to back, which real TCP senders see as delivery
#: faster than the line (BBR's bandwidth filter keeps such samples; docs/tcp.md). A
#: scenario's `realtime_priority = 0` runs the box without it (the ordinary scheduler).
PROCESS: dict[str, Any] = {"realtime_priority": 20}


def box_config(lab: Lab, body: dict[str, Any], capture_dir: Path | None,
               role: str = "router") -> dict[str, Any]:
    """The full box configuration for `lab`: `body` (the scenario's `[box]`: pipelines,
    emulation, rewriters, seed, ...) plus interfaces, stats and captures, and the lab's
    `[process]` defaults (`PROCESS`) under the body's own. `role` is `router` (the box
    under test) or `access` (the emulated access line)."""
    a, b, stem = PLACES[role]
    cfg = {k: v for k, v in body.items() if k not in ("interfaces", "stats", "capture")}
    process = {**PROCESS, **body.get("process", {})}
    if process.get("realtime_priority") == 0:
        del process["realtime_priority"]
    cfg["process"] = process
    cfg["interfaces"] = {"kind": "packet", "a": a, "b": b, **body.get("interfaces", {})}
    cfg["stats"] = {"socket": str(lab.dir / f"{stem}.sock"),
                    "file": str(lab.dir / f"{stem}-final.json"),
                    "interval": "50ms", **body.get("stats", {})}
    if capture_dir is not None:
        prefix = "" if role == "router" else f"{stem}-"
        cfg["capture"] = {"dir": str(capture_dir), "to_a": f"{prefix}to_a.pcap",
                          "to_b": f"{prefix}to_b.pcap", "snaplen": 128,
                          **body.get("capture", {})}
    return cfg


def start_box(lab: Lab, body: dict[str, Any], capture_dir: Path | None = None,
              timeout: float = 10, role: str = "router") -> BoxProcess:
    """Validate the configuration (refused before any device is touched), then start the
    box in the `role` namespace (`router`, or `access` for the emulated line) and wait
    until its devices and endpoints are open."""
    cfg = box_config(lab, body, capture_dir, role)
    stem = PLACES[role][2]
    config = lab.dir / f"{stem}.toml"
    config.write_text(tomli_w.dumps(cfg))
    config.chmod(0o644)
    err = check_config(config)
    if err:
        raise LabError(f"box configuration refused: {err}")
    if role == "router":
        lab.set_forwarding("box")
    elif not lab.access:
        raise LabError("the lab has no access namespace (Lab.set_access(True))")
    ready = lab.dir / f"{stem}.ready"
    ready.unlink(missing_ok=True)
    log = lab.dir / f"{stem}.log"
    with open(log, "wb") as logf:
        proc = lab.spawn(role, [*box_command(), "--config", str(config),
                                "--ready-file", str(ready)], stdout=logf, stderr=logf)
    deadline = time.monotonic() + timeout
    # The box creates the file early and writes its pid once privileges are dropped.
    while not (ready.exists() and ready.read_text().strip()):
        if proc.poll() is not None:
            raise LabError(f"the box exited at start ({proc.returncode}): {log.read_text()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise LabError(f"the box did not become ready in {timeout} s: {log.read_text()}")
        time.sleep(0.02)
    # The first snapshot is published within one interval.
    sock = Path(cfg["stats"]["socket"])
    return BoxProcess(proc, config, sock, Path(cfg["stats"]["file"]), log)
