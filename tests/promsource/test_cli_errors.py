"""``--prometheus`` bad input: exit status 2 and one line on stderr naming the flag to fix
(the house style of tests/integration/test_cli_errors.py). No store is needed for any of these:
each fails before a query, or at a port nothing listens on."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from exporter.cli import main
from tests.helpers import free_port

URL = "http://127.0.0.1:9"  # never reached: every case fails before or at connect


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's own errors
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


CASES = [
    (["diagnose", "--prometheus", URL], ["--prometheus needs a time: --at TIME"]),
    (["diagnose", "--prometheus", URL, "--at", "now", "--from", "-1h"], ["--at judges one instant"]),
    (["diagnose", "--prometheus", URL, "--from", "yesterday"], ["--from: 'yesterday' is not a time"]),
    (["diagnose", "--prometheus", URL, "--at", "2026-11-30T03:00:00"], ["--at:", "has no time zone"]),
    (["diagnose", "--prometheus", URL, "--from", "-1h", "--step", "5x"], ["--step: '5x' is not a duration"]),
    (["diagnose", "--prometheus", URL, "--from", "-1h", "--to", "-2h"], ["--to -2h", "is before --from -1h"]),
    (["diagnose", "--prometheus", URL, "--from", "-30d", "--step", "1s"], ["--step 1s:", "use a larger step"]),
    (["diagnose", "--prometheus", URL, "--match", 'job="vllm"', "--at", "now"], ["--match:", "{job=\"vllm\"}"]),
    (["diagnose", "--prometheus", URL, "--match", '{__name__="x"}', "--at", "now"], ["--match:", "leave out __name__"]),
    (["diagnose", "--prometheus", "ftp://x", "--at", "now"], ["--prometheus: 'ftp://x' is not an http(s) URL"]),
    (["diagnose", "--at", "now"], ["add --prometheus URL"]),
    (["diagnose", "capture.txt", "--prometheus", URL, "--at", "now"],
     ["give capture FILEs, --url URL or --prometheus"]),
    (["diagnose", "--prometheus", URL, "--basic-auth-user", "u", "--at", "now"],
     ["--basic-auth-user: give exactly one of password or password_file"]),
    (["diagnose", "--prometheus", URL, "--bearer-token-file", "/nonexistent/token", "--at", "now"],
     ["--bearer-token-file:"]),
    (["diagnose", "--prometheus", URL, "--target-label", "bad label", "--at", "now"], ["--target-label:"]),
    (["serve", "--prometheus", URL, "--target", "http://127.0.0.1:8000/metrics"], ["give one of them"]),
]


@pytest.mark.parametrize(("argv", "says"), CASES, ids=[" ".join(c[0][1:4]) + f"#{i}" for i, c in enumerate(CASES)])
def test_one_line_exit_2(argv: list[str], says: list[str]) -> None:
    code, out, err = run(argv)
    assert code == 2, (code, out, err)
    assert err.startswith("vllm-diag: ") and err.count("\n") == 1, err
    for fragment in says:
        assert fragment in err, err
    assert "Traceback" not in err and out == ""


def test_unreachable_store_is_one_line(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("tok-never-printed")
    code, _, err = run(["diagnose", "--prometheus", f"http://user:pw-never-printed@127.0.0.1:{free_port()}",
                        "--at", "now", "--query-timeout", "3"])
    assert code == 2 and "cannot connect" in err and err.count("\n") == 1, err
    assert "pw-never-printed" not in err and "***@127.0.0.1" in err
    code, _, err = run(["diagnose", "--prometheus", f"http://127.0.0.1:{free_port()}", "--bearer-token-file",
                        str(secret), "--from", "-1h"])
    assert code == 2 and "tok-never-printed" not in err, err
