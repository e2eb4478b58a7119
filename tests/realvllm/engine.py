"""A real vLLM (CPU build) serving the tiny local model, and a streaming client for it.

What ``python -m lab.advisor`` drives (the advisor's live before/after protocol);
tests/realvllm/harness.py builds the test suite's load phases on the same engine and client.
Imported in the PROJECT venv (aiohttp, no vllm/torch): vLLM runs from its own venv (made by
tests/realvllm/install.sh) as a subprocess, and this module only talks HTTP to it on 127.0.0.1.
The word list is stdlib-only, since tests/realvllm/make_model.py trains the tokenizer on it in
the vLLM venv.

    with RealVLLM() as vllm:
        text = vllm.fetch_metrics()
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlparse

import aiohttp

REPO = Path(__file__).resolve().parents[2]
INSTALL_SH = REPO / "tests" / "realvllm" / "install.sh"  # run as a command, never imported
STAMP_NAME = ".vllm-diag-installed"
MODEL_NAME = "tiny"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})

# Never reach the Hub, never phone home.
OFFLINE_ENV: dict[str, str] = {
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
}


# --------------------------------------------------------------------------------------------
# Install state
# --------------------------------------------------------------------------------------------


def vllm_venv() -> Path:
    """The dedicated vLLM venv (read from the environment at call time)."""
    return Path(os.environ.get("VLLM_DIAG_VLLM_VENV") or Path.home() / ".cache/vllm-diag/vllm-venv")


def model_dir() -> Path:
    return Path(os.environ.get("VLLM_DIAG_MODEL_DIR") or Path.home() / ".cache/vllm-diag/tiny-model")


def vllm_available() -> bool:
    """True when install.sh completed (stamp written after the import check) and the model exists."""
    venv, model = vllm_venv(), model_dir()
    return (
        (venv / STAMP_NAME).is_file()
        and os.access(venv / "bin" / "vllm", os.X_OK)
        and (model / "config.json").is_file()
        and (model / "model.safetensors").is_file()
        and (model / "tokenizer.json").is_file()
    )


def unavailable_reason() -> str:
    venv, model = vllm_venv(), model_dir()
    if not (venv / STAMP_NAME).is_file():
        return f"vLLM venv not installed at {venv} (run: bash {INSTALL_SH})"
    if not os.access(venv / "bin" / "vllm", os.X_OK):
        return f"{venv}/bin/vllm missing (run: bash {INSTALL_SH})"
    return f"tiny model missing in {model} (run: bash {INSTALL_SH})"



# --------------------------------------------------------------------------------------------
# The words of the tiny model's tokenizer
# --------------------------------------------------------------------------------------------

WORDS_SEED = 1234
N_WORDS = 512
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


def corpus_words(n: int = N_WORDS) -> list[str]:
    """Deterministic pseudo-words of 2-3 syllables; each becomes one token (with its leading space)."""
    rng = random.Random(WORDS_SEED)
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < n:
        word = "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(rng.choice((2, 3))))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


# --------------------------------------------------------------------------------------------
# Process helpers
# --------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _proc_stat(pid: int) -> tuple[int, int] | None:
    """(ppid, starttime) of a live process, or None (gone or zombie); starttime tells a
    reused PID apart."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may contain spaces/parens: split after the last ')'.
    fields = raw[raw.rfind(")") + 2 :].split()
    if fields[0] in ("Z", "X"):  # a zombie has exited; only its parent's reaping is left
        return None
    return int(fields[1]), int(fields[19])


def _start_time(pid: int) -> int | None:
    # Not the ppid: it changes when an orphan is re-parented, the process stays the same.
    st = _proc_stat(pid)
    return None if st is None else st[1]


def pid_alive(pid: int) -> bool:
    """True while pid runs (zombies count as gone)."""
    return _proc_stat(pid) is not None


def descendant_pids(root: int) -> list[int]:
    """root followed by all its live descendants (breadth first), read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        st = _proc_stat(int(entry))
        if st is not None:
            children.setdefault(st[0], []).append(int(entry))
    if _proc_stat(root) is None:
        return []
    out, queue = [], [root]
    while queue:
        pid = queue.pop(0)
        out.append(pid)
        queue.extend(sorted(children.get(pid, [])))
    return out


def _assert_loopback(url: str) -> None:
    host = urlparse(url).hostname
    if host not in LOOPBACK_HOSTS:
        raise ValueError(f"refusing non-loopback URL {url!r}: the harness only talks to 127.0.0.1")


def _http_get(url: str, timeout_s: float = 5.0) -> tuple[int, str]:
    _assert_loopback(url)
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - loopback only
            return int(resp.status), resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read().decode("utf-8", "replace")


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------


class RealVLLM:
    """A real `vllm serve` subprocess on 127.0.0.1 (own process group, log file in a tmp dir)."""

    def __init__(
        self,
        *,
        max_num_batched_tokens: int = 128,
        max_num_seqs: int = 16,
        kv_cache_memory_bytes: int = 3 * 1024 * 1024,
        max_model_len: int = 1024,
        block_size: int = 32,
        enable_prefix_caching: bool = True,
        enable_chunked_prefill: bool = True,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        omp_threads: int | None = 1,
        port: int | None = None,
        venv: Path | str | None = None,
        model: Path | str | None = None,
        log_dir: Path | str | None = None,
        startup_timeout_s: float = 180.0,
        stop_timeout_s: float = 20.0,
    ) -> None:
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.kv_cache_memory_bytes = kv_cache_memory_bytes
        self.max_model_len = max_model_len
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.enable_chunked_prefill = enable_chunked_prefill
        self.extra_args = list(extra_args)
        self.extra_env = dict(env or {})
        self.omp_threads = omp_threads
        self.port = port or free_port()
        self.venv = Path(venv) if venv else vllm_venv()
        self.model = Path(model) if model else model_dir()
        self._log_dir_arg = Path(log_dir) if log_dir else None
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: Any = None
        self.log_path: Path | None = None
        self.startup_s: float | None = None

    # -- addresses / facts ---------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.base_url}/metrics"

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("RealVLLM not started")
        return self._proc.pid

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def pids(self) -> list[int]:
        """The API server PID first, then every descendant (EngineCore, ...), from /proc."""
        return descendant_pids(self.pid) if self.running else []

    def engine_facts(self) -> dict[str, int]:
        return {
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs,
            "tensor_parallel_size": 1,
            "pipeline_parallel_size": 1,
            "cpu_cores": os.cpu_count() or 1,
        }

    def command(self) -> list[str]:
        cmd = [
            str(self.venv / "bin" / "vllm"),
            "serve",
            str(self.model),
            "--served-model-name", MODEL_NAME,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--dtype", "float32",
            "--max-model-len", str(self.max_model_len),
            "--block-size", str(self.block_size),
            "--kv-cache-memory-bytes", str(self.kv_cache_memory_bytes),
            "--max-num-batched-tokens", str(self.max_num_batched_tokens),
            "--max-num-seqs", str(self.max_num_seqs),
            "--enforce-eager",
        ]  # fmt: skip
        cmd.append("--enable-prefix-caching" if self.enable_prefix_caching else "--no-enable-prefix-caching")
        cmd.append("--enable-chunked-prefill" if self.enable_chunked_prefill else "--no-enable-chunked-prefill")
        return cmd + self.extra_args

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        # A project venv's variables must not leak into the vLLM venv's interpreter.
        for var in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
            env.pop(var, None)
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env.update(OFFLINE_ENV)
        if self.omp_threads is not None:
            # On 2 cores, 1 OMP thread without pinning keeps vLLM from spinning on both cores
            # (and from pinning itself), so the test process and the sidecar still get CPU.
            env["OMP_NUM_THREADS"] = str(self.omp_threads)
            env["VLLM_CPU_OMP_THREADS_BIND"] = "nobind"
        env.update(self.extra_env)
        return env

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> RealVLLM:
        if self._proc is not None:
            raise RuntimeError("RealVLLM already started")
        if not os.access(self.venv / "bin" / "vllm", os.X_OK):
            raise RuntimeError(f"no vllm in {self.venv}: {unavailable_reason()}")
        log_dir = self._log_dir_arg or Path(tempfile.mkdtemp(prefix="realvllm-"))
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"vllm-{self.port}.log"
        self._log_file = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        t0 = time.monotonic()
        self._proc = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=self.environment(),
            cwd=log_dir,
            # Own process group (stop() signals the tree by PGID) but NOT a new session: with
            # sched_autogroup a new session is its own scheduling group, and under load vLLM
            # then starved every other process on 2 cores for up to 3.5 s at a time.
            process_group=0,
        )
        try:
            self._wait_ready(t0 + self.startup_timeout_s)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - t0
        return self

    def _wait_ready(self, deadline: float) -> None:
        while True:
            assert self._proc is not None
            rc = self._proc.poll()
            if rc is not None:
                raise RuntimeError(f"vllm serve exited with {rc} during startup; log tail:\n{self.log_tail()}")
            with contextlib.suppress(OSError):
                # /health answers once the engine is up; /v1/models once the API routes are.
                if _http_get(f"{self.base_url}/health", 2.0)[0] == 200:
                    if _http_get(f"{self.base_url}/v1/models", 2.0)[0] == 200:
                        return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"vllm serve not ready after {self.startup_timeout_s:.0f} s; log tail:\n{self.log_tail()}"
                )
            time.sleep(0.5)

    def stop(self) -> int | None:
        """SIGTERM the process group, SIGKILL after stop_timeout_s; always reaps. Returns exit code."""
        proc = self._proc
        if proc is None:
            return None
        tree = [(p, _start_time(p)) for p in descendant_pids(proc.pid)]
        rc: int | None = None
        try:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    rc = proc.wait(self.stop_timeout_s)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    rc = proc.wait(10)
            else:
                rc = proc.returncode
            # Children that outlived the API server (same PID *and* start time = same process).
            deadline = time.monotonic() + 5.0
            for pid, st in tree[1:]:
                while st is not None and _start_time(pid) == st and time.monotonic() < deadline:
                    time.sleep(0.1)
                if st is not None and _start_time(pid) == st:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
        finally:
            if self._log_file is not None:
                self._log_file.close()
                self._log_file = None
            self._proc = None
        return rc

    def __enter__(self) -> RealVLLM:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def log_tail(self, lines: int = 60) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "<no log>"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    # -- metrics -------------------------------------------------------------------------------

    def fetch_metrics(self, timeout_s: float = 10.0) -> str:
        """Blocking scrape (use fetch_metrics_async inside an event loop that runs load)."""
        status, body = _http_get(self.metrics_url, timeout_s)
        if status != 200:
            raise RuntimeError(f"GET {self.metrics_url} -> {status}")
        return body

    async def fetch_metrics_async(self, session: aiohttp.ClientSession | None = None) -> str:
        return await fetch_metrics_async(self.metrics_url, session)

    def save_capture(self, path: Path | str) -> Path:
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(self.fetch_metrics())
        return out


async def fetch_metrics_async(metrics_url: str, session: aiohttp.ClientSession | None = None) -> str:
    _assert_loopback(metrics_url)
    own = session is None
    sess = session or aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
    try:
        async with sess.get(metrics_url) as resp:
            resp.raise_for_status()
            return await resp.text()
    finally:
        if own:
            await sess.close()


# --------------------------------------------------------------------------------------------
# Load generator
# --------------------------------------------------------------------------------------------

_WORDS = corpus_words()
_tokens_per_word: dict[str, float] = {}


async def tokens_per_word(base_url: str, session: aiohttp.ClientSession | None = None) -> float:
    """Calibrate prompt length against the server's own tokenizer (/tokenize), cached per URL.

    The tiny tokenizer learned every corpus word as one token, so this is ~1.0; the
    measurement keeps prompt lengths right even if the model is remade differently.
    """
    if base_url in _tokens_per_word:
        return _tokens_per_word[base_url]
    _assert_loopback(base_url)
    sample_words = 400
    text = " " + " ".join(_WORDS[i % len(_WORDS)] for i in range(sample_words))
    ratio = 1.0
    own = session is None
    sess = session or aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
    try:
        async with sess.post(
            f"{base_url}/tokenize",
            json={"model": MODEL_NAME, "prompt": text, "add_special_tokens": False},
        ) as resp:
            if resp.status == 200:
                count = int((await resp.json())["count"])
                ratio = max(count / sample_words, 0.01)
    except (TimeoutError, aiohttp.ClientError, KeyError, ValueError):
        pass  # fall back to 1 token per word
    finally:
        if own:
            await sess.close()
    _tokens_per_word[base_url] = ratio
    return ratio


def make_text(n_tokens: int, rng: random.Random, ratio: float = 1.0) -> str:
    """~n_tokens of deterministic words (each with a leading space, as the tokenizer learned them)."""
    n_words = max(1, round(n_tokens / ratio))
    return "".join(" " + rng.choice(_WORDS) for _ in range(n_words))


@dataclass
class RequestResult:
    ok: bool
    prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft_s: float | None = None
    latency_s: float = 0.0
    error: str | None = None




async def one_request(session: aiohttp.ClientSession, base_url: str, prompt: str, max_tokens: int,
                      temperature: float = 0.0, model: str = MODEL_NAME) -> RequestResult:
    """One streamed completion; ``model`` may name a LoRA adapter served with --lora-modules."""
    payload = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "stream": True,
        "ignore_eos": True,  # the random model must still produce exactly max_tokens
        "temperature": temperature,
        "stream_options": {"include_usage": True},
    }
    t0 = time.monotonic()
    res = RequestResult(ok=False)
    try:
        async with session.post(f"{base_url}/v1/completions", json=payload) as resp:
            if resp.status != 200:
                res.error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                return res
            done = False
            async for raw in resp.content:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    done = True
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    res.error = str(chunk["error"])[:200]
                    return res
                if res.ttft_s is None and chunk.get("choices"):
                    res.ttft_s = time.monotonic() - t0
                usage = chunk.get("usage")
                if usage:
                    res.prompt_tokens = int(usage.get("prompt_tokens") or 0)
                    res.completion_tokens = int(usage.get("completion_tokens") or 0)
            res.ok = done
            if not done:
                res.error = "stream ended without [DONE]"
    except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
        res.error = f"{type(exc).__name__}: {exc}"[:200]
    finally:
        res.latency_s = time.monotonic() - t0
    return res

