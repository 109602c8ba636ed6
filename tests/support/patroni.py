"""A three-member Patroni cluster over a three-member etcd, on 127.0.0.1, for the HA suite.

Each Patroni member runs `deploy/patroni/patroni.yml` (its `${...}` filled in here) as the
OS user `postgres` (PostgreSQL refuses root), with Debian's PostgreSQL 15 and the Patroni
of a virtualenv (`WL_PATRONI_BIN`, default /opt/patroni/bin; docs/high-availability.md says
how to make it). Member i talks to etcd member i alone (`use_proxies`), so stopping that
etcd member cuts it off the DCS while the other two keep etcd's quorum. Everything lives
under one temporary folder and dies with `stop()`.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

import psutil

from support.ports import free_ha_port as free_port

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "deploy" / "patroni" / "patroni.yml"
PATRONI_BIN = Path(os.environ.get("WL_PATRONI_BIN", "/opt/patroni/bin"))
PG_BIN = Path(os.environ.get("WL_PATRONI_PG_BIN", "/usr/lib/postgresql/15/bin"))
ETCD = shutil.which("etcd") or "/usr/bin/etcd"
HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
HAPROXY_CONFIG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"
OS_USER = "postgres"
HOST = "127.0.0.1"
MEMBERS = 3
START_SECONDS = 180.0


def missing() -> str | None:
    """Why this machine cannot run the cluster (None: it can)."""
    for path in (PATRONI_BIN / "patroni", PG_BIN / "postgres", Path(ETCD), Path(HAPROXY)):
        if not path.exists():
            return f"{path} is missing (docs/high-availability.md: the HA suite's tools)"
    try:
        pwd.getpwnam(OS_USER)
    except KeyError:
        return f"no OS user {OS_USER!r} (Debian's postgresql package makes it)"
    return None if os.geteuid() == 0 else "the HA suite runs as root (it switches to postgres)"


@dataclass(frozen=True)
class Timing:
    """Patroni's DCS settings (bootstrap.dcs): the figures depend on them."""

    ttl: int = 20
    loop_wait: int = 2
    retry_timeout: int = 5


@dataclass
class Etcd:
    name: str
    client_port: int
    peer_port: int
    data: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def client_url(self) -> str:
        return f"http://{HOST}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://{HOST}:{self.peer_port}"


@dataclass
class Member:
    name: str
    pg_port: int
    rest_port: int
    etcd: Etcd
    config: Path
    data_dir: Path
    proc: subprocess.Popen[bytes] | None = None

    def rest(self, path: str, timeout: float = 2.0) -> tuple[int, dict[str, object]]:
        """GET Patroni's REST API: (status, JSON body); (0, {}) when it does not answer."""
        url = f"http://{HOST}:{self.rest_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            return error.code, {}
        except (OSError, ValueError):
            return 0, {}

    def postmaster(self) -> psutil.Process | None:
        with contextlib.suppress(FileNotFoundError, ValueError, psutil.Error):
            pid = int((self.data_dir / "postmaster.pid").read_text().split()[0])
            return psutil.Process(pid)
        return None


@dataclass
class Cluster:
    base: Path
    timing: Timing
    scope: str = field(default_factory=lambda: f"wl-{secrets.token_hex(3)}")
    password: str = field(default_factory=lambda: secrets.token_hex(16))
    etcds: list[Etcd] = field(default_factory=list)
    members: list[Member] = field(default_factory=list)
    haproxy: subprocess.Popen[bytes] | None = None

    # -- the ledger's view ----------------------------------------------------------------

    def url(self, database: str, *, target: str = "read-write") -> str:
        """Every member, libpq-style: the client takes whichever accepts writes."""
        hosts = ",".join(f"{HOST}:{m.pg_port}" for m in self.members)
        return (
            f"postgresql://postgres:{self.password}@{hosts}/{database}"
            f"?target_session_attrs={target}"
        )

    def leader(self) -> Member | None:
        for member in self.members:
            if member.rest("/primary")[0] == 200:
                return member
        return None

    def roles(self) -> dict[str, str]:
        """name -> role and state as the cluster's members see them (GET /cluster)."""
        for member in self.members:
            status, body = member.rest("/cluster")
            if status == 200:
                listed = body.get("members", [])
                assert isinstance(listed, list)
                return {m["name"]: f"{m['role']}/{m['state']}" for m in listed}
        return {}

    def wait_healthy(self, within: float = START_SECONDS) -> Member:
        """A leader, and every other member streaming, one of them the sync standby."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            roles = self.roles()
            states = sorted(roles.values())
            leader = self.leader()
            if (
                leader is not None
                and len(roles) == MEMBERS
                and sum(s.startswith("sync_standby/streaming") for s in states) == 1
                and sum(s.endswith("/streaming") for s in states) == MEMBERS - 1
            ):
                return leader
            self._check_alive()
            time.sleep(0.5)
        raise AssertionError(f"the cluster never became healthy: {self.roles()}\n{self.logs()}")

    # -- faults ----------------------------------------------------------------------------

    def kill_leader(self) -> Member:
        """SIGKILL the leader's Patroni and its whole PostgreSQL at once (the host died)."""
        leader = self.leader()
        assert leader is not None
        assert leader.proc is not None
        postmaster = leader.postmaster()
        victims = [psutil.Process(leader.proc.pid)]
        if postmaster is not None:
            victims += [postmaster, *postmaster.children(recursive=True)]
        for process in victims:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.send_signal(signal.SIGKILL)
        leader.proc.wait(30)
        return leader

    def switchover(self) -> subprocess.CompletedProcess[str]:
        """`patronictl switchover --force`: Patroni picks the sync standby."""
        config = str(self.members[0].config)
        return subprocess.run(
            [str(PATRONI_BIN / "patronictl"), "-c", config, "switchover", "--force", self.scope],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def cut_from_dcs(self, member: Member) -> None:
        """Freeze the etcd member that `member` talks to: its requests go unanswered, as
        behind a cut cable; etcd's other two members keep their quorum."""
        assert member.etcd.proc is not None
        member.etcd.proc.send_signal(signal.SIGSTOP)

    def wait_new_leader(self, old: Member, within: float = START_SECONDS) -> Member:
        """The member that leads once `old` no longer does."""
        deadline = time.monotonic() + within
        while (leader := self.leader()) in (None, old):
            assert time.monotonic() < deadline, f"{old.name} still leads\n{self.logs()}"
            time.sleep(0.2)
        assert leader is not None
        return leader

    def heal(self, member: Member) -> None:
        assert member.etcd.proc is not None
        member.etcd.proc.send_signal(signal.SIGCONT)

    def start_haproxy(self, database: str) -> str:
        """HAProxy with deploy/haproxy/haproxy.cfg in front of the members: the URL of the
        one address that reaches the leader (stopped with the cluster)."""
        port = free_port()
        env = {**os.environ, "WL_HAPROXY_BIND": f"{HOST}:{port}"}
        for i, member in enumerate(self.members):
            env |= {f"PG{i}": f"{HOST}:{member.pg_port}", f"PG{i}_REST": str(member.rest_port)}
        with open(self.base / "haproxy.log", "ab") as log:
            self.haproxy = subprocess.Popen(
                [HAPROXY, "-db", "-f", str(HAPROXY_CONFIG)], stdout=log, stderr=log, env=env
            )
        return f"postgresql://postgres:{self.password}@{HOST}:{port}/{database}"

    def restart(self, member: Member) -> None:
        """Start a killed member's Patroni again (it rejoins, through pg_rewind if need be)."""
        member.proc = _spawn_patroni(member)

    # -- life ------------------------------------------------------------------------------

    def start(self) -> Member:
        self._start_etcd()
        for i, etcd in enumerate(self.etcds):
            self.members.append(self._member(i, etcd))
        for member in self.members:
            member.proc = _spawn_patroni(member)
            if not self.members.index(member):
                self._wait_leader()  # the first bootstraps, the others clone it
        return self.wait_healthy()

    def stop(self) -> None:
        for etcd in self.etcds:
            if etcd.proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    etcd.proc.send_signal(signal.SIGCONT)
        for member in self.members:
            _terminate(member.proc)
            postmaster = member.postmaster()
            if postmaster is not None:
                with contextlib.suppress(psutil.Error):
                    postmaster.send_signal(signal.SIGQUIT)
                    postmaster.wait(30)
        for etcd in self.etcds:
            _terminate(etcd.proc)
        _terminate(self.haproxy)
        shutil.rmtree(self.base, ignore_errors=True)

    def logs(self, lines: int = 15) -> str:
        parts = []
        for log in sorted(self.base.glob("*.log")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {log.name}\n" + "\n".join(tail))
        return "\n".join(parts)

    def _check_alive(self) -> None:
        for process in [m.proc for m in self.members] + [e.proc for e in self.etcds]:
            assert process is None or process.poll() is None, self.logs()

    def _wait_leader(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        while self.leader() is None:
            assert time.monotonic() < deadline, f"no leader was elected\n{self.logs()}"
            self._check_alive()
            time.sleep(0.5)

    def _start_etcd(self) -> None:
        self.etcds = [
            Etcd(f"etcd{i}", free_port(), free_port(), self.base / f"etcd{i}")
            for i in range(MEMBERS)
        ]
        initial = ",".join(f"{e.name}={e.peer_url}" for e in self.etcds)
        for etcd in self.etcds:
            argv = [ETCD, "--name", etcd.name, "--data-dir", str(etcd.data)]
            argv += ["--listen-client-urls", etcd.client_url]
            argv += ["--advertise-client-urls", etcd.client_url]
            argv += ["--listen-peer-urls", etcd.peer_url]
            argv += ["--initial-advertise-peer-urls", etcd.peer_url]
            argv += ["--initial-cluster", initial, "--initial-cluster-token", self.scope]
            argv += ["--initial-cluster-state", "new"]
            with open(self.base / f"{etcd.name}.log", "wb") as log:
                etcd.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_SECONDS
        for etcd in self.etcds:
            while not _etcd_healthy(etcd):
                assert time.monotonic() < deadline, f"etcd never became healthy\n{self.logs()}"
                time.sleep(0.3)

    def _member(self, i: int, etcd: Etcd) -> Member:
        name = f"pg{i}"
        member = Member(
            name,
            free_port(),
            free_port(),
            etcd,
            self.base / f"{name}.yml",
            self.base / name / "data",
        )
        (self.base / name).mkdir()
        values = {
            "scope": self.scope,
            "name": name,
            "host": HOST,
            "rest_port": member.rest_port,
            "pg_port": member.pg_port,
            "etcd_hosts": f"{HOST}:{etcd.client_port}",
            "use_proxies": "true",
            "ttl": self.timing.ttl,
            "loop_wait": self.timing.loop_wait,
            "retry_timeout": self.timing.retry_timeout,
            "data_dir": member.data_dir,
            "bin_dir": PG_BIN,
            "pgpass": self.base / name / "pgpass",
            "superuser_password": self.password,
            "replication_password": self.password,
            "rewind_password": self.password,
            "socket_dir": self.base / name,
            "network": f"{HOST}/32",
        }
        member.config.write_text(Template(TEMPLATE.read_text()).substitute(values))
        _own(self.base / name)
        return member


def etcd_raft_leader(etcd: Etcd) -> bool:
    """Is this etcd member the leader of etcd's own Raft group? (When that leader is cut,
    the new one renews every lease, the Patroni leader's key included: see the cut test.)"""
    request = urllib.request.Request(f"{etcd.client_url}/v3/maintenance/status", data=b"{}")
    with urllib.request.urlopen(request, timeout=2) as response:
        status = json.loads(response.read())
    return bool(status["header"]["member_id"] == status["leader"])


def _etcd_healthy(etcd: Etcd) -> bool:
    try:
        with urllib.request.urlopen(f"{etcd.client_url}/health", timeout=2) as response:
            return bool(json.loads(response.read()).get("health") == "true")
    except (OSError, ValueError):
        return False


def _own(path: Path) -> None:
    user = pwd.getpwnam(OS_USER)
    for folder, _, files in os.walk(path):
        os.chown(folder, user.pw_uid, user.pw_gid)
        for name in files:
            os.chown(Path(folder) / name, user.pw_uid, user.pw_gid)


def _spawn_patroni(member: Member) -> subprocess.Popen[bytes]:
    """Patroni as `postgres` (setpriv: PostgreSQL refuses root), logging beside the data."""
    argv = ["setpriv", f"--reuid={OS_USER}", f"--regid={OS_USER}", "--init-groups"]
    argv += [str(PATRONI_BIN / "patroni"), str(member.config)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "WL_"))}
    env["HOME"] = str(member.data_dir.parent)
    with open(member.config.with_suffix(".log"), "ab") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd="/")


def _terminate(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)


def start_cluster(base: Path, timing: Timing = Timing()) -> Cluster:
    """A healthy cluster under `base` (a fresh folder postgres may enter)."""
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o755)
    cluster = Cluster(base, timing)
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    return cluster
