"""Every bad input the CLI can get: exit code 2 and one line on stderr that starts ``vllm-diag:``
and names the flag, or the file with line and column, the user has to fix.

The table runs ``exporter.cli.main`` in this process (fast: no interpreter start per case); the
two tests after it run the installed ``vllm-diag`` command, where logging is real.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from exporter.cli import main

GOOD_TARGET = "targets:\n  - name: vllm-0\n    url: http://127.0.0.1:8000/metrics\n"


@dataclass(frozen=True)
class Env:
    tmp: Path
    busy: int  # a port something already listens on
    capture: str  # a real vLLM capture

    def file(self, name: str, text: str | bytes) -> str:
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return str(path)


@dataclass(frozen=True)
class Case:
    id: str
    argv: Callable[[Env], list[str]]
    says: Callable[[Env], list[str]]  # fragments the line must contain
    never: tuple[str, ...] = ()  # fragments it must not contain (internal names)
    env: tuple[tuple[str, str], ...] = ()


def _two_targets(env: Env) -> str:
    folder = env.tmp / "recorded"
    folder.mkdir()
    body = Path(env.capture).read_text()
    for name, stamp in (("a", 1000.0), ("b", 1015.0)):
        (folder / f"{name}-{stamp}.txt").write_text(f"# vllm-diag capture target={name} scraped_at={stamp}\n{body}")
    return str(folder)


CASES = [
    # configuration files
    Case("yaml-malformed", lambda e: ["serve", "--config", e.file("c.yaml", "listen: [1\n")],
         lambda e: [f"{e.tmp}/c.yaml:2:1: invalid YAML"]),
    Case("yaml-malformed-diagnose", lambda e: ["diagnose", e.capture, "--config", e.file("c.yaml", "a: b: c\n")],
         lambda e: [f"{e.tmp}/c.yaml:1:5: invalid YAML"]),
    Case("yaml-scalar", lambda e: ["serve", "--config", e.file("c.yaml", "hello\n")],
         lambda e: [f"{e.tmp}/c.yaml:1:1: expected a mapping of settings", "'hello'"], ("dictionary update",)),
    Case("yaml-list", lambda e: ["serve", "--config", e.file("c.yaml", "- a\n- b\n")],
         lambda e: [f"{e.tmp}/c.yaml:1:1: expected a mapping", "a list"]),
    Case("yaml-bad-value", lambda e: ["serve", "--config", e.file("c.yaml", GOOD_TARGET + "    timeout: -1\n")],
         lambda e: [f"{e.tmp}/c.yaml:4:14: targets.0.timeout: Input should be greater than 0"]),
    Case("yaml-unknown-key", lambda e: ["serve", "--config", e.file("c.yaml", "listne: x\n" + GOOD_TARGET)],
         lambda e: [f"{e.tmp}/c.yaml:1:1: listne: Extra inputs are not permitted"]),
    Case("yaml-missing-field", lambda e: ["serve", "--config", e.file("c.yaml", "targets:\n  - {name: a}\n")],
         lambda e: [f"{e.tmp}/c.yaml:2:5: targets.0.url: Field required"]),
    Case("config-missing", lambda e: ["serve", "--config", str(e.tmp / "nope.yaml")],
         lambda e: [f"{e.tmp}/nope.yaml: no such configuration file"]),
    Case("env-bad", lambda e: ["serve", "--target", "http://127.0.0.1:8000/metrics"],
         lambda e: ["VLLM_DIAG_WINDOW_SECONDS: window_seconds: Input should be greater than 0"],
         env=(("VLLM_DIAG_WINDOW_SECONDS", "-1"),)),
    # serve flags
    Case("listen-busy", lambda e: ["serve", "--target", "http://127.0.0.1:8000/metrics", "--listen",
                                   f"127.0.0.1:{e.busy}"],
         lambda e: [f"--listen 127.0.0.1:{e.busy}: Address already in use"]),
    Case("listen-busy-from-config",
         lambda e: ["serve", "--config", e.file("c.yaml", f"listen: 127.0.0.1:{e.busy}\n" + GOOD_TARGET)],
         lambda e: [f"listen 127.0.0.1:{e.busy} (from {e.tmp}/c.yaml): Address already in use"]),
    Case("listen-malformed", lambda e: ["serve", "--target", "http://127.0.0.1:8000/metrics", "--listen", "nope"],
         lambda e: ["--listen: 'nope' is not HOST:PORT"], (" listen:",)),
    Case("target-not-http", lambda e: ["serve", "--target", "ftp://x"],
         lambda e: ["--target: 'ftp://x' is not an http(s) URL"], ("targets.0",)),
    Case("no-targets", lambda e: ["serve"], lambda e: ["no targets: give --target URL"]),
    Case("web-config-missing", lambda e: ["serve", "--target", "http://127.0.0.1:8000/metrics",
                                          "--web-config-file", str(e.tmp / "web.yml")],
         lambda e: [f"{e.tmp}/web.yml"]),
    # diagnose flags and inputs
    Case("interval-negative", lambda e: ["diagnose", e.capture, e.capture, "--interval", "-5"],
         lambda e: ["diagnose: argument --interval: must be a number greater than 0, got '-5'"],
         ("targets.0", "scrape_interval")),
    Case("interval-not-a-number", lambda e: ["diagnose", e.capture, "--interval", "abc"],
         lambda e: ["argument --interval: 'abc' is not a number"]),
    Case("duration-zero", lambda e: ["diagnose", "--url", "http://127.0.0.1:1/metrics", "--duration", "0"],
         lambda e: ["argument --duration: must be a number greater than 0"]),
    Case("window-too-short", lambda e: ["diagnose", e.capture, e.capture, "--window", "10"],
         lambda e: ["--window 10: must hold at least two scrapes (2 x --interval 15 s)"], ("window_seconds",)),
    Case("format-unknown", lambda e: ["diagnose", e.capture, "--format", "xml"],
         lambda e: ["argument --format: invalid choice: 'xml'"]),
    Case("files-and-url", lambda e: ["diagnose", e.capture, "--url", "http://127.0.0.1:1/metrics"],
         lambda e: ["not both"]),
    Case("capture-missing", lambda e: ["diagnose", str(e.tmp / "none.txt")],
         lambda e: [f"{e.tmp}/none.txt: no such file or folder"]),
    Case("capture-not-exposition", lambda e: ["diagnose", e.file("login.txt", "<html>login</html>\n")],
         lambda e: [f"{e.tmp}/login.txt:1: not a sample line"]),
    Case("capture-not-vllm", lambda e: ["diagnose", e.file("other.txt", "# HELP up x\n# TYPE up gauge\nup 1\n")],
         lambda e: [f"{e.tmp}/other.txt: no vLLM metrics in this capture"]),
    Case("capture-not-utf8", lambda e: ["diagnose", e.file("bin.txt", b"\xff\xfe\x00garbage")],
         lambda e: [f"{e.tmp}/bin.txt: not UTF-8 text"]),
    Case("folder-without-captures", lambda e: ["diagnose", str((e.tmp / "empty").mkdir() or e.tmp / "empty")],
         lambda e: [f"{e.tmp}/empty: no captures (*.txt, *.txt.gz) in this folder"]),
    Case("folder-of-two-targets", lambda e: ["diagnose", _two_targets(e)],
         lambda e: ["captures of several targets (a, b)"]),
    Case("dcgm-not-a-folder", lambda e: ["diagnose", e.capture, "--dcgm", e.capture],
         lambda e: [f"--dcgm {e.capture}: not a directory"]),
    # simulate and demo
    Case("simulate-unknown-scenario", lambda e: ["simulate", "--scenario", "nope"],
         lambda e: ["--scenario: unknown scenario 'nope'; known: healthy"]),
    Case("simulate-no-scenario", lambda e: ["simulate"], lambda e: ["--scenario NAME is required"]),
    Case("simulate-port-and-out", lambda e: ["simulate", "--scenario", "healthy", "--port", "1", "--out", "x"],
         lambda e: ["either --port or --out"]),
    Case("simulate-port-busy", lambda e: ["simulate", "--scenario", "healthy", "--port", str(e.busy)],
         lambda e: [f"--port {e.busy}: Address already in use"]),
    Case("simulate-duration-short", lambda e: ["simulate", "--scenario", "healthy", "--out", str(e.tmp / "o"),
                                               "--duration", "5", "--interval", "10"],
         lambda e: ["--duration 5 is shorter than --interval 10"], ("interval_s",)),
    Case("simulate-speed-negative", lambda e: ["simulate", "--scenario", "healthy", "--speed", "-1"],
         lambda e: ["simulate: argument --speed: must be a number greater than 0"]),
    Case("simulate-out-unwritable", lambda e: ["simulate", "--scenario", "healthy", "--out",
                                               e.file("plain-file", "x") + "/sub", "--duration", "30"],
         lambda e: [f"{e.tmp}/plain-file"]),
    Case("demo-listen-busy", lambda e: ["demo", "--listen", f"127.0.0.1:{e.busy}"],
         lambda e: [f"--listen 127.0.0.1:{e.busy}: Address already in use"]),
    Case("demo-simulator-port-busy", lambda e: ["demo", "--listen", "127.0.0.1:0", "--simulator-port", str(e.busy)],
         lambda e: [f"--simulator-port {e.busy}: Address already in use"]),
    Case("demo-unknown-scenario", lambda e: ["demo", "--scenario", "nope", "--listen", "127.0.0.1:0"],
         lambda e: ["--scenario: unknown scenario 'nope'"]),
    Case("demo-window-short", lambda e: ["demo", "--window", "3", "--listen", "127.0.0.1:0"],
         lambda e: ["--window 3: must hold at least two scrapes"]),
    Case("demo-port-malformed", lambda e: ["demo", "--simulator-port", "http"],
         lambda e: ["argument --simulator-port: 'http' is not a TCP port"]),
    # the command itself
    Case("unknown-command", lambda e: ["serv"], lambda e: ["argument COMMAND: invalid choice: 'serv'"]),
    Case("unknown-flag", lambda e: ["diagnose", "--intervall", "5"], lambda e: ["unrecognized arguments: --intervall"]),
]


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_naming_what_to_fix(case, tmp_path, busy_port, fixtures_dir, capsys, caplog, monkeypatch):
    env = Env(tmp_path, busy_port, str(fixtures_dir / "snapshot-pressure.txt"))
    for name, value in case.env:
        monkeypatch.setenv(name, value)
    argv = case.argv(env)
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors exit from inside parse_args
        code = exc.code
    out, err = capsys.readouterr()
    assert code == 2, (argv, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vllm-diag: "), err
    for fragment in case.says(env):
        assert fragment in lines[0], (fragment, lines[0])
    for fragment in case.never:
        assert fragment not in lines[0], (fragment, lines[0])
    assert out == "" and "listening on" not in caplog.text


def run_command(*args: str) -> subprocess.CompletedProcess[str]:
    command = Path(sys.executable).with_name("vllm-diag")
    return subprocess.run([str(command), *args], capture_output=True, text=True, timeout=60)


def test_busy_port_fails_before_anything_is_logged(busy_port):
    proc = run_command("serve", "--target", "http://127.0.0.1:8000/metrics", "--listen", f"127.0.0.1:{busy_port}")
    assert proc.returncode == 2
    assert proc.stderr == f"vllm-diag: --listen 127.0.0.1:{busy_port}: Address already in use\n"
    assert proc.stdout == ""


def test_malformed_yaml_from_the_command_line_is_one_line(tmp_path):
    config = tmp_path / "vllm-diag.yaml"
    config.write_text("targets:\n  - name: vllm-0\n    url: http://127.0.0.1:8000/metrics\n   timeout: 3\n")
    proc = run_command("diagnose", "--config", str(config), "--url", "http://127.0.0.1:1/metrics")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"vllm-diag: {config}:4:4: invalid YAML") and proc.stderr.count("\n") == 1
