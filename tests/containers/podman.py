"""Podman and podman-compose for the container tests: the images, one compose project of the
fleet, and the clean-up that leaves nothing behind (nor anything an earlier run left).

Podman is set up by deploy/ci/prepare.sh (tools, base image) and configured by
deploy/ci/containers.conf (``CONTAINERS_CONF``). The project image is built from
deploy/Dockerfile exactly as users build it, with ``BASE`` set to the local base image; Redis
and PostgreSQL come from deploy/ci/services.Containerfile (deploy/ci/compose.override.yml).
Every published port is on 127.0.0.1 and picked free, so the host's Redis (6379) and
PostgreSQL (5432) are never in the way.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.services import free_port

__all__ = [
    "BASE_IMAGE",
    "PROJECT_IMAGE",
    "ROOT",
    "SERVICES_IMAGE",
    "ComposeFleet",
    "build_images",
    "podman",
    "remove_leftovers",
    "tools_or_fail",
]

ROOT = Path(__file__).parents[2]
BASE_IMAGE = "localhost/base:bookworm"
PROJECT_IMAGE = "localhost/decision-worker:local"
SERVICES_IMAGE = "localhost/decisions-ci-services:bookworm"
#: Compose projects of these tests are named with this prefix (and only they).
PREFIX = "dwfleet"
PREPARE = "bash deploy/ci/prepare.sh"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(ROOT / "deploy" / "ci" / "containers.conf"))
    return env


def podman(*args: str, timeout: float = 120, check: bool = True) -> str:
    """``podman ARGS``; its output, or an AssertionError with what it said."""
    done = subprocess.run(
        ["podman", *args], env=_env(), capture_output=True, text=True, timeout=timeout
    )
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def _unavailable(why: str) -> None:
    """Under CI=true the container tests must run: fail. Elsewhere: skip, saying why."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{why}; CI=true requires the container tests", pytrace=False)
    pytest.skip(why)


def tools_or_fail() -> None:
    """podman, podman-compose, a working podman and the base image, else fail/skip."""
    missing = [t for t in ("podman", "podman-compose") if shutil.which(t) is None]
    if missing:
        _unavailable(f"{' and '.join(missing)} not installed: run `{PREPARE}` as root")
    info = subprocess.run(["podman", "info"], env=_env(), capture_output=True, text=True)
    if info.returncode != 0:
        last = (info.stderr.strip().splitlines() or ["no output"])[-1]
        conf = _env()["CONTAINERS_CONF"]
        _unavailable(f"podman does not run here ({last}); CONTAINERS_CONF={conf}")
    if not _image_exists(BASE_IMAGE):
        _unavailable(f"no {BASE_IMAGE} image: run `{PREPARE}` (as root, once)")


def _image_exists(image: str) -> bool:
    done = subprocess.run(["podman", "image", "exists", image], env=_env(), capture_output=True)
    return done.returncode == 0


def _build_command(tag: str, containerfile: Path, context: Path, *extra: str) -> list[str]:
    command = [
        "podman",
        "build",
        "--network=host",
        f"--build-arg=BASE={BASE_IMAGE}",
        f"--file={containerfile}",
        f"--tag={tag}",
        *extra,
    ]
    if CA_BUNDLE.is_file():
        # Outbound HTTPS is re-signed here: pip in the build trusts the host's CA bundle.
        command.append(f"--volume={CA_BUNDLE}:{CA_BUNDLE}:ro")
    return [*command, str(context)]


def build_images(logs: Path) -> None:
    """The project image (deploy/Dockerfile, as users build it) and the CI services image,
    side by side (each mostly waits on downloads the first time, on nothing after)."""
    builds = {
        PROJECT_IMAGE: _build_command(
            PROJECT_IMAGE,
            ROOT / "deploy" / "Dockerfile",
            ROOT,
            f"--ignorefile={ROOT / 'deploy' / 'Dockerfile.dockerignore'}",
        ),
        SERVICES_IMAGE: _build_command(
            SERVICES_IMAGE,
            ROOT / "deploy" / "ci" / "services.Containerfile",
            ROOT / "deploy" / "ci",
        ),
    }
    started = time.monotonic()
    running = {}
    for tag, command in builds.items():
        log = logs / f"build-{tag.rsplit('/', 1)[-1].replace(':', '-')}.log"
        with log.open("w") as out:
            running[tag] = (
                subprocess.Popen(command, env=_env(), stdout=out, stderr=subprocess.STDOUT),
                log,
            )
    failed = []
    for tag, (proc, log) in running.items():
        try:
            code = proc.wait(timeout=900)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        if code != 0:
            tail = "\n".join(log.read_text().splitlines()[-25:])
            failed.append(f"building {tag} failed (exit {code}; whole log: {log}):\n{tail}")
    if failed:
        raise AssertionError("\n\n".join(failed))
    print(f"built {', '.join(builds)} in {time.monotonic() - started:.0f} s")


def _labelled(kind: str, project: str | None) -> list[str]:
    """Ids of containers or volumes of ``project`` (every project of these tests if None)."""
    ident = "{{.ID}}" if kind == "container" else "{{.Name}}"
    fmt = ident + ' {{index .Labels "io.podman.compose.project"}}'
    args = ["ps", "-a"] if kind == "container" else ["volume", "ls"]
    found = []
    for line in podman(*args, "--format", fmt, check=False).splitlines():
        ident, _, owner = line.partition(" ")
        if (owner == project) if project else owner.startswith(PREFIX):
            found.append(ident)
    return found


def remove_leftovers(project: str | None = None) -> None:
    """Remove the containers, volumes and network of ``project``, or of any earlier run."""
    containers = _labelled("container", project)
    if containers:
        podman("rm", "--force", "--time=2", *containers, check=False, timeout=180)
    volumes = _labelled("volume", project)
    if volumes:
        podman("volume", "rm", "--force", *volumes, check=False)
    for network in podman("network", "ls", "--format", "{{.Name}}", check=False).split():
        if (network == f"{project}_default") if project else network.startswith(PREFIX):
            podman("network", "rm", "--force", network, check=False)


@dataclass
class ComposeFleet:
    """One podman-compose project of docker-compose.yml plus the CI override."""

    project: str = field(default_factory=lambda: f"{PREFIX}{uuid.uuid4().hex[:10]}")
    ports: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.ports:
            self.ports = {name: free_port() for name in ("REDIS", "POSTGRES", "FAUX", "CONSOLE")}

    def env(self) -> dict[str, str]:
        env = _env()
        env.update({f"FLEET_{name}_PORT": str(port) for name, port in self.ports.items()})
        env["CONSOLE_PORT"] = str(self.ports["CONSOLE"])
        return env

    def compose(self, *args: str, timeout: float = 300) -> str:
        command = [
            "podman-compose",
            f"--project-name={self.project}",
            "--file=docker-compose.yml",
            "--file=deploy/ci/compose.override.yml",
            *args,
        ]
        done = subprocess.run(
            command, cwd=ROOT, env=self.env(), capture_output=True, text=True, timeout=timeout
        )
        if done.returncode != 0:
            raise AssertionError(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")
        return done.stdout

    def up(self, *services: str) -> None:
        # The images are built already (build_images); services named, so that the optional
        # ones (profiles: flower, monitoring, tools) stay down under every podman-compose.
        self.compose("up", "--detach", "--no-build", *services)

    def container(self, service: str, n: int = 1) -> str:
        return f"{self.project}_{service}_{n}"

    def url(self, service: str) -> str:
        port = self.ports[service.upper()]
        return {
            "redis": f"redis://127.0.0.1:{port}/0",
            "postgres": f"postgresql+psycopg://decisions:decisions@127.0.0.1:{port}/decisions",
        }.get(service, f"http://127.0.0.1:{port}")

    def state(self, container: str) -> tuple[str, int]:
        """(status, exit code) of a container, e.g. ("running", 0), ("exited", 137)."""
        out = podman("inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", container)
        status, code = out.split()
        return status, int(code)

    def healthy(self, container: str) -> bool:
        """Run the container's health check now (podman has no timer without systemd)."""
        done = subprocess.run(
            ["podman", "healthcheck", "run", container],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        return done.returncode == 0

    def wait_healthy(self, containers: Sequence[str], timeout_s: float = 240) -> None:
        until = time.monotonic() + timeout_s
        waiting = list(containers)
        while waiting:
            waiting = [c for c in waiting if not self.healthy(c)]
            if waiting and time.monotonic() > until:
                raise AssertionError(
                    f"not healthy after {timeout_s:.0f} s: {waiting}\n{self.logs(waiting)}"
                )
            time.sleep(2)

    def logs(self, containers: Sequence[str] | None = None, lines: int = 25) -> str:
        names = containers or _names(self.project)
        parts = []
        for name in names:
            done = subprocess.run(
                ["podman", "logs", name], env=_env(), capture_output=True, text=True, timeout=60
            )
            tail = (done.stdout + done.stderr).splitlines()[-lines:]
            parts.append(f"--- {name} ---\n" + "\n".join(tail))
        return "\n".join(parts)

    def save_logs(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for name in _names(self.project):
            done = subprocess.run(
                ["podman", "logs", name], env=_env(), capture_output=True, text=True
            )
            (directory / f"{name}.log").write_text(done.stdout + done.stderr)

    def down(self) -> None:
        # No `podman image prune`: the build stage's layers are dangling images, and they are
        # the cache that spares the next build its ~2 min of downloads.
        remove_leftovers(self.project)


def _names(project: str) -> list[str]:
    out = podman(
        "ps",
        "-a",
        "--filter",
        f"label=io.podman.compose.project={project}",
        "--format",
        "{{.Names}}",
        check=False,
    )
    return sorted(out.split())
