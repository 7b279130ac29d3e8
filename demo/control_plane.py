"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-scheduler, kube-controller-manager.

``scripts/build-control-plane`` builds the binaries (Kubernetes and etcd releases, from reference/control-plane)
into the cache; ``ControlPlane`` starts them on free loopback ports with a CA and serving certificate made here
(``demo.pki``), a service-account key, static tokens for an admin and each component, the DRA feature gates, and
writes a kubeconfig for Claimline's collector. There is no kubelet: whoever drives it (the end-to-end tests,
``scripts/demo --kube`` through ``demo.kube``) creates Nodes and sets their status through the API, as a kubelet
would. No Django imports, so a script or benchmark can start one too.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from demo.pki import serving_pki, signing_key_pair

#: Names a directory holding the binaries, instead of the one scripts/build-control-plane installed.
CONTROL_PLANE_ENV = "CLAIMLINE_CONTROL_PLANE"
COMPONENTS = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")

# Kubernetes 1.37: DynamicResourceAllocation is GA (on, locked). The DRA gates named here are on by default too
# (DRADeviceTaints, DRADeviceTaintRules and DRAExtendedResource GA; the others beta); naming them keeps the tests'
# assumptions visible and fails start-up loudly if one disappears. Workload-aware (gang) scheduling is beta but
# off by default: GenericWorkload (Workload, PodGroup, Pod spec.schedulingGroup and the scheduler's gang
# handling; 1.37 has no separate GangScheduling gate, "unrecognized feature gate") and DRAWorkloadResourceClaims
# (a PodGroup's own claims), with scheduling.k8s.io/v1beta1 served (RUNTIME_CONFIG).
FEATURE_GATES = ",".join(
    f"{gate}=true"
    for gate in (
        "DRADeviceTaints",
        "DRADeviceTaintRules",
        "DRAPartitionableDevices",
        "DRAConsumableCapacity",
        "DRADeviceBindingConditions",
        "DRAExtendedResource",
        "GenericWorkload",
        "DRAWorkloadResourceClaims",
    )
)
RUNTIME_CONFIG = "resource.k8s.io/v1=true,scheduling.k8s.io/v1beta1=true"
# What kube-controller-manager runs: generated claims (and their release), eviction for NoExecute device
# taints, and the garbage collector that deletes a generated claim once its Pod is gone.
CONTROLLERS = "resourceclaim-controller,device-taint-eviction-controller,garbage-collector-controller"


class ControlPlaneError(RuntimeError):
    """A component did not start or become ready; the message ends with its log's tail."""


def cache_dir() -> Path:
    """Where scripts/build-reference and scripts/build-control-plane put their output (``$CLAIMLINE_CACHE``,
    else ``~/.cache/claimline``)."""
    configured = os.environ.get("CLAIMLINE_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "claimline"


def binaries_dir() -> Path | None:
    """The directory with all four components (``$CLAIMLINE_CONTROL_PLANE``, else the cache's), or None."""
    explicit = os.environ.get(CONTROL_PLANE_ENV)
    path = Path(explicit) if explicit else cache_dir() / "bin" / "control-plane"
    if all(os.access(path / name, os.X_OK) for name in COMPONENTS):
        return path
    return None


def kubectl_path() -> Path | None:
    """kubectl: the one built with the control plane, else one on PATH, else None."""
    found = binaries_dir()
    if found is not None and os.access(found / "kubectl", os.X_OK):
        return found / "kubectl"
    on_path = shutil.which("kubectl")
    return Path(on_path) if on_path else None


def terminate(process: subprocess.Popen[Any], grace: float) -> None:
    """SIGTERM ``process`` (if it still runs), then SIGKILL after ``grace`` seconds."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def make_pki(directory: Path) -> None:
    """ca.crt, apiserver.crt/.key (127.0.0.1, localhost, kubernetes.default.svc) signed by it, sa.key/sa.pub
    (service accounts). The CA's key is not kept: nothing else is signed."""
    serving_pki("kube-apiserver", ("127.0.0.1", "localhost", "kubernetes.default.svc")).write(directory, "apiserver")
    private, public = signing_key_pair()
    (directory / "sa.key").touch(mode=0o600)
    (directory / "sa.key").write_bytes(private)
    (directory / "sa.pub").write_bytes(public)


def write_kubeconfig(path: Path, server: str, ca: Path, token: str, user: str) -> None:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "e2e", "cluster": {"server": server, "certificate-authority": str(ca)}}],
                "users": [{"name": user, "user": {"token": token}}],
                "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": user}}],
                "current-context": "e2e",
            },
            indent=2,
        )
    )


class Api:
    """Just enough of a Kubernetes REST client for tests: JSON in, JSON out, with the admin token."""

    def __init__(self, server: str, ca: Path, token: str) -> None:
        self.server = server
        self.token = token
        self.context = ssl.create_default_context(cafile=str(ca))

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json",
        query: dict[str, str] | None = None, timeout: float = 15.0,
    ) -> Any:
        url = self.server + path + ("?" + urllib.parse.urlencode(query) if query else "")
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        # The server's own https:// URL (loopback), never one from input.
        req = urllib.request.Request(url, data=data, method=method, headers=headers)  # noqa: S310
        with urllib.request.urlopen(req, context=self.context, timeout=timeout) as response:  # noqa: S310
            raw = response.read()
        return json.loads(raw) if raw else None

    def get(self, path: str, **query: str) -> Any:
        return self.request("GET", path, query=query or None)

    def create(self, path: str, body: dict[str, Any]) -> Any:
        return self.request("POST", path, body)

    def merge_patch(self, path: str, body: dict[str, Any]) -> Any:
        return self.request("PATCH", path, body, content_type="application/merge-patch+json")

    def delete(self, path: str, grace_period: int | None = None) -> Any:
        body = {"gracePeriodSeconds": grace_period} if grace_period is not None else None
        return self.request("DELETE", path, body)

    def exists(self, path: str) -> bool:
        try:
            self.get(path)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return False
            raise
        return True


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0, interval: float = 0.2) -> Any:
    """Poll ``check`` until it returns something truthy; its value. Errors count as not yet."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        try:
            value = check()
        except (OSError, urllib.error.URLError, ValueError) as exc:  # not up yet
            value, last = None, exc
        if value:
            return value
        if time.monotonic() > deadline:
            why = f" (last: {last})" if last else ""
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}{why}")
        time.sleep(interval)


#: util-linux's setpriv, which sets the parent-death signal and then execs the command (same PID).
SETPRIV = shutil.which("setpriv")


def spawn_tied(command: list[str], log: IO[bytes], cwd: Path) -> subprocess.Popen[bytes]:
    """Start ``command`` in its own session, sent SIGTERM by the kernel when this process dies.

    ``stop()`` ends the components when their owner ends cleanly; a test run or demo that is killed
    (SIGKILL, OOM) runs no cleanup, and an etcd and three components would keep their ports and memory.
    The parent-death signal is set by ``setpriv`` between fork and exec rather than by a ``preexec_fn``,
    which is unsafe in a process with threads (the test server's, the watcher's). It is tied to the
    spawning thread: the control plane is started from the thread that owns it for its whole life.
    """
    prefix = [SETPRIV, "--pdeathsig", "SIGTERM", "--"] if SETPRIV else []
    return subprocess.Popen(
        [*prefix, *command], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        cwd=cwd, start_new_session=True,
    )


class ControlPlane:
    """The four components as child processes of this one; ``start`` waits until each says it is ready."""

    def __init__(self, workdir: Path, bindir: Path | None = None) -> None:
        found = bindir or binaries_dir()
        if found is None:
            raise ControlPlaneError("control plane not built: run scripts/build-control-plane")
        self.bindir = found
        self.workdir = workdir
        self.pki = workdir / "pki"
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, IO[bytes]] = {}
        self.ports = {
            name: free_port() for name in ("etcd", "etcd-peer", "apiserver", "scheduler", "controller-manager")
        }
        self.server = f"https://127.0.0.1:{self.ports['apiserver']}"
        self.tokens = {user: os.urandom(16).hex() for user in ("admin", "scheduler", "controller-manager")}
        self.kubeconfig = workdir / "kubeconfig"
        self.startup: dict[str, float] = {}  # seconds from start() until each component was ready

    @property
    def api(self) -> Api:
        return Api(self.server, self.pki / "ca.crt", self.tokens["admin"])

    def _spawn(self, name: str, args: list[str]) -> None:
        log = (self.workdir / f"{name}.log").open("wb")
        self.logs[name] = log
        self.processes[name] = spawn_tied([str(self.bindir / name), *args], log, self.workdir)

    def log_tail(self, name: str, lines: int = 25) -> str:
        path = self.workdir / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def _ready(self, name: str, url: str, context: ssl.SSLContext | None, headers: dict[str, str],
               started: float, timeout: float) -> None:
        def check() -> bool:
            process = self.processes[name]
            if process.poll() is not None:
                raise ControlPlaneError(f"{name} exited with {process.returncode}:\n{self.log_tail(name)}")
            req = urllib.request.Request(url, headers=headers)  # noqa: S310 - a component's loopback URL
            with urllib.request.urlopen(req, context=context, timeout=5) as response:  # noqa: S310
                return bool(response.status == 200)

        try:
            wait_for(f"{name} ({url})", check, timeout=timeout)
        except TimeoutError as exc:
            raise ControlPlaneError(f"{exc}\n{self.log_tail(name)}") from None
        self.startup[name] = round(time.monotonic() - started, 2)

    def start(self, timeout: float = 120.0) -> None:
        """Start all four at once (each retries its dependencies) and wait for every one's health endpoint."""
        started = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        make_pki(self.pki)
        tokens = self.workdir / "tokens.csv"
        # token,user,uid,"groups": system:masters for all, the components under their own names.
        tokens.write_text(
            f'{self.tokens["admin"]},admin,admin,"system:masters"\n'
            f'{self.tokens["scheduler"]},system:kube-scheduler,kube-scheduler,"system:masters"\n'
            f'{self.tokens["controller-manager"]},system:kube-controller-manager,kube-controller-manager,'
            '"system:masters"\n'
        )
        tokens.chmod(0o600)
        write_kubeconfig(self.kubeconfig, self.server, self.pki / "ca.crt", self.tokens["admin"], "admin")
        for user in ("scheduler", "controller-manager"):
            write_kubeconfig(
                self.workdir / f"{user}.kubeconfig", self.server, self.pki / "ca.crt", self.tokens[user], user
            )
        p = self.ports
        etcd_url = f"http://127.0.0.1:{p['etcd']}"
        peer_url = f"http://127.0.0.1:{p['etcd-peer']}"
        self._spawn("etcd", [
            "--name=e2e", f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=e2e={peer_url}",
            "--unsafe-no-fsync", "--log-level=warn", "--quota-backend-bytes=1073741824",
        ])
        self._spawn("kube-apiserver", [
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={p['apiserver']}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={self.pki / 'apiserver.crt'}", f"--tls-private-key-file={self.pki / 'apiserver.key'}",
            f"--client-ca-file={self.pki / 'ca.crt'}",
            f"--token-auth-file={tokens}",
            f"--service-account-key-file={self.pki / 'sa.pub'}",
            f"--service-account-signing-key-file={self.pki / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.96.0.0/24",
            "--authorization-mode=RBAC",
            # No serviceaccount controller runs, so nothing creates a namespace's "default" account: the
            # admission plugin that requires one is off. Nor does the node lifecycle controller (it would taint
            # the kubelet-less Nodes unreachable), which lifts the not-ready taint TaintNodesByCondition puts
            # on a new Node: that plugin is off too. The apiserver's own Endpoints would name 127.0.0.1.
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            "--endpoint-reconciler-type=none",
            f"--feature-gates={FEATURE_GATES}",
            f"--runtime-config={RUNTIME_CONFIG}",
            "--profiling=false", "--v=1",
        ])
        common = ["--leader-elect=false", "--bind-address=127.0.0.1", f"--feature-gates={FEATURE_GATES}",
                  "--profiling=false", "--v=1"]
        self._spawn("kube-scheduler", [
            f"--kubeconfig={self.workdir / 'scheduler.kubeconfig'}", f"--secure-port={p['scheduler']}",
            f"--cert-dir={self.workdir / 'scheduler-certs'}", *common,
        ])
        self._spawn("kube-controller-manager", [
            f"--kubeconfig={self.workdir / 'controller-manager.kubeconfig'}",
            f"--secure-port={p['controller-manager']}", f"--cert-dir={self.workdir / 'controller-manager-certs'}",
            f"--controllers={CONTROLLERS}", *common,
        ])
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # the components' self-signed serving certificates
        trusted = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        admin = {"Authorization": f"Bearer {self.tokens['admin']}"}
        try:
            self._ready("etcd", f"{etcd_url}/health", None, {}, started, timeout)
            self._ready("kube-apiserver", f"{self.server}/readyz", trusted, admin, started, timeout)
            self._ready("kube-scheduler", f"https://127.0.0.1:{p['scheduler']}/healthz", insecure, {}, started,
                        timeout)
            self._ready("kube-controller-manager", f"https://127.0.0.1:{p['controller-manager']}/healthz",
                        insecure, {}, started, timeout)
        except BaseException:
            self.stop()
            raise

    def versions(self) -> dict[str, str]:
        out = {}
        for name in COMPONENTS:
            run = subprocess.run([str(self.bindir / name), "--version"], capture_output=True, text=True, timeout=30)
            out[name] = (run.stdout or run.stderr).splitlines()[0] if (run.stdout or run.stderr) else ""
        return out

    def stop(self) -> None:
        """Stop in reverse order: SIGTERM, then SIGKILL after 10 s."""
        for name in reversed(list(self.processes)):
            terminate(self.processes[name], grace=10)
        for log in self.logs.values():
            with contextlib.suppress(OSError):
                log.close()
        self.processes.clear()
        self.logs.clear()

    def remove_data(self) -> None:
        shutil.rmtree(self.workdir / "etcd", ignore_errors=True)
